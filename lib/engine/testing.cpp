#include "engine/testing.h"

#include <atomic>
#include <cstring>

namespace minfer::engine::testing {
namespace {
std::atomic<uint32_t> g_plant{kPlantNone};
// MINFER_SAMPLE_TOGETHER=0 builds the one-row-at-a-time path as the default, for a side-by-side timing
// (scripts/gpu-ab); the tests set it either way.
#ifndef MINFER_SAMPLE_TOGETHER
#define MINFER_SAMPLE_TOGETHER 1
#endif
std::atomic<bool> g_batch_fetch{MINFER_SAMPLE_TOGETHER != 0};
// MINFER_SAMPLE_CANDIDATES=0 builds the whole-row path as the default, for the same kind of timing.
#ifndef MINFER_SAMPLE_CANDIDATES
#define MINFER_SAMPLE_CANDIDATES 1
#endif
std::atomic<bool> g_sample_candidates{MINFER_SAMPLE_CANDIDATES != 0};
std::atomic<bool> g_host_candidates{false};

constexpr struct {
    uint32_t plant;
    const char* name;
} kNames[] = {
    {kPlantRmsEps, "rms_eps"},
    {kPlantNoQkBias, "no_qk_bias"},
    {kPlantNoQkNorm, "no_qk_norm"},
    {kPlantRopeBase, "rope_base"},
};
}  // namespace

void set_plant(uint32_t plants) { g_plant.store(plants); }
uint32_t plant() { return g_plant.load(); }
void set_batch_fetch(bool on) { g_batch_fetch.store(on); }
bool batch_fetch() { return g_batch_fetch.load(); }
void set_sample_candidates(bool on) { g_sample_candidates.store(on); }
bool sample_candidates() { return g_sample_candidates.load(); }
void set_host_candidates(bool on) { g_host_candidates.store(on); }
bool host_candidates() { return g_host_candidates.load(); }

void apply_plant(uint32_t plants, model::Config& c) {
    c.planted = plants;
    if (plants & kPlantRmsEps) c.rms_norm_eps = c.rms_norm_eps == 1e-6 ? 1e-5 : c.rms_norm_eps * 10.0;
    if (plants & kPlantNoQkNorm) c.qk_norm = false;
    if (plants & kPlantRopeBase) c.rope_freq_base = c.rope_freq_base == 10000.0 ? 1e6 : 10000.0;
    // kPlantNoQkBias is carried by c.planted: the forward pass skips the q and k biases.
}

const char* plant_name(uint32_t p) {
    for (const auto& n : kNames)
        if (n.plant == p) return n.name;
    return "";
}

uint32_t plant_from_name(const char* name) {
    for (const auto& n : kNames)
        if (name && std::strcmp(n.name, name) == 0) return n.plant;
    return kPlantNone;
}

}  // namespace minfer::engine::testing
