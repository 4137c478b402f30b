// The bits of the early-trigger A/B knob (cuda/pdl.cuh: pdl_enter), in a header of its own so that the
// emulated CUDA of the tests (tests/emu) names them too.
#pragma once

namespace minfer::cuda {

#ifndef MINFER_EARLY_TRIGGER
#define MINFER_EARLY_TRIGGER 0
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
