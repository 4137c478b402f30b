// The bits of the early-trigger A/B knob (cuda/pdl.cuh: pdl_enter), in a header of its own so that the
// emulated CUDA of the tests (tests/emu) names them too.
#pragma once

namespace minfer::cuda {

// The default, 2 (kEarlyFinish): qkv_finish alone, so the decode attention starts copying the cache's earlier
// keys while the q/k/v mat-vec still runs. Measured on the H100 (docs/perf.md, 2026-12-06, seventeenth
// session): qwen2-7b q4_K_M tg128 +1.9%, qwen2-0.5b q4_K_M +2.9%, the 7B at depth 8,192 unchanged; the
// RMSNorm's bit was 2.1% slower on the 7B and the quantization's 1.1% (their dependents, tall mat-vecs,
// then land on the SMs as the kernel before frees them, unevenly: the likeliest reading). On the H200 the
// four small kernels' bits together (15) gave the 0.5B +3-4.5% and the 7B's q8_0 +1.6% but its q4_K_M
// -0.5%, q4_0 -0.8% and depth -2.6%; every kernel's (63) the 7B's q4_K_M -2.3%. Eighteenth session (H100,
// three calls): the combine's bit with it (10) +0.5%, -0.1 to +0.8% and +0.35% on the 7B's tg128, inside
// the spreads, the 0.5B level; the attention's (18) -0.4%: both left off.
#ifndef MINFER_EARLY_TRIGGER
#define MINFER_EARLY_TRIGGER 2
#endif
enum EarlyTrigger : int {  // the mask's bits
    kEarlyNorm = 1,       // the decode RMSNorm (rms_norm_vec_kernel)
    kEarlyFinish = 2,     // qkv_finish
    kEarlyQuantize = 4,   // the mat-vec input's quantization (quantize_x, the SwiGLU product's among them)
    kEarlyCombine = 8,    // the decode attention's combine
    // The decode attention, in a step's last decode launch only (attention_decode_rows' last_launch): where
    // one slot has two rows in a step, cuda/forward.cu gives the second a launch of its own, which must
    // start after qkv_finish has ended (cuda/batch_runs.h), so the launch before it keeps the old order.
    kEarlyAttention = 16,
    kEarlyMatvec = 32,    // the mat-vecs of cuda/matvec_impl.cuh (one input column and several)
};

}  // namespace minfer::cuda
