// Synthetic Qwen2/Qwen3 GGUF models: the shapes of real presets (or tiny ones for tests) with random
// weights (normal, std 0.02; norm weights near 1) and a built-in byte-level vocabulary.
#pragma once

#include <cstdint>
#include <span>
#include <string>

namespace minfer::synth {

struct Preset {
    const char* name;
    const char* arch;  // "qwen2" | "qwen3"
    int32_t n_vocab, n_ctx_train, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    bool tied;
    double rope_freq_base, rms_norm_eps;
};

std::span<const Preset> presets();
const Preset* find_preset(const std::string& name);

// Writes the model; throws Error (INVALID_ARGUMENT for an unknown preset or mix, IO, CANCELLED).
void write_model(const std::string& path, const std::string& preset, const std::string& mix, uint64_t seed);

}  // namespace minfer::synth
