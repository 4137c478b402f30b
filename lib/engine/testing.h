// Tests only: bugs planted on purpose, so that a whole-model comparison can show it catches each of them
// (the mutation check in tests/test_forward.cpp, tests/test_cuda.cpp and the Hugging Face peer). The
// release ABI does not export this: libminfer.so exports minfer_* symbols only (lib/minfer.map); tests
// link the internal library, and the peer loads tests/libminfer_testhooks.so, which adds
// minfer_testing_plant. Nothing in the library sets a plant.
#pragma once

#include <cstdint>

#include "model/config.h"

namespace minfer::engine::testing {

// One bit per planted bug. Each one is a mistake an implementation could really make, and each moves
// the logits by a known amount on the test models (docs/correctness.md).
enum Plant : uint32_t {
    kPlantNone = 0,
    kPlantRmsEps = 1u << 0,    // RMSNorm epsilon 1e-5 where the file says 1e-6 (10x otherwise)
    kPlantNoQkBias = 1u << 1,  // the q and k projection biases dropped (Qwen2)
    kPlantNoQkNorm = 1u << 2,  // the per-head q/k RMSNorm dropped (Qwen3)
    kPlantRopeBase = 1u << 3,  // RoPE base 10000 where the file says otherwise (1e6 otherwise)
};

// Process-wide: models opened after the call carry these plants (Model::open applies them). Not
// synchronized with concurrent opens; tests set it, open, and clear it.
void set_plant(uint32_t plants);
uint32_t plant();
// Rewrites c as the planted bugs would have read it, and records them in c.planted for the forward pass.
void apply_plant(uint32_t plants, model::Config& c);
// "rms_eps", "no_qk_bias", "no_qk_norm", "rope_base", or "" for kPlantNone; kPlantNone for an unknown name.
const char* plant_name(uint32_t plant);
uint32_t plant_from_name(const char* name);

// Process-wide, default on (MINFER_SAMPLE_TOGETHER): a batch step brings its sampled rows' logits to the host together and
// samples them on several threads (Scheduler::sample_rows). Off, each row is read back and sampled in
// turn, as before that existed: the reference a test holds the fast path to. Read at each step.
void set_batch_fetch(bool on);
bool batch_fetch();

// Process-wide, default on (MINFER_SAMPLE_CANDIDATES): a sampled row whose sampler cuts it short (top-k on,
// few penalized or biased tokens: sampling::Sampler::candidates_needed) takes its token from the
// runner's candidates (Runner::fetch_candidates, the GPU's choice of the row's best logits) where the
// runner brings them, instead of the whole row. Off, every sampled row reads its logits whole: the
// reference a test holds the candidates to (the same tokens). Read at each decode and each batch step.
void set_sample_candidates(bool on);
bool sample_candidates();
// Process-wide, default off: the CPU runner (engine/ops_runner.cpp) brings candidates too, chosen on the
// host from its logits, so that the tests without a GPU run the engine's and the batch's candidates
// path end to end.
void set_host_candidates(bool on);
bool host_candidates();

}  // namespace minfer::engine::testing
