// The bits of the early-trigger A/B knob (cuda/pdl.cuh: pdl_enter), in a header of its own so that the
// emulated CUDA of the tests (tests/emu) names them too.
#pragma once

namespace minfer::cuda {

// The default, 2 (kEarlyFinish): qkv_finish alone, so the decode attention starts copying the cache's earlier
// keys while the q/k/v mat-vec still runs. Measured on the H100 (docs/perf.md, 2026-12-06, seventeenth
// session): qwen2-7b q4_K_M tg128 +1.9%, qwen2-0.5b q4_K_M +2.9%, the 7B at depth 8,192 unchanged; the
// RMSNorm's bit was 2.1% slower on the 7B and the quantization's 1.1% (their dependents, tall mat-vecs,
// then land on the SMs as the kernel before frees them, unevenly), every row kernel's together 0.5%
// slower on the H200 and every kernel's 2.2%.
#ifndef MINFER_EARLY_TRIGGER
#define MINFER_EARLY_TRIGGER 2
#endif
enum EarlyTrigger : int {  // the mask's bits
    kEarlyNorm = 1,       // the decode RMSNorm (rms_norm_vec_kernel)
    kEarlyFinish = 2,     // qkv_finish
    kEarlyQuantize = 4,   // the mat-vec input's quantization (quantize_x, the SwiGLU product's among them)
    kEarlyCombine = 8,    // the decode attention's combine
    kEarlyAttention = 16, // the decode attention
    kEarlyMatvec = 32,    // the one-token mat-vecs
};

}  // namespace minfer::cuda
