// Bit-level helpers for quantized blocks, shared by the decode mat-vec (cuda/matvec_impl.cuh) and the
// narrow GEMM (cuda/gemm_narrow.cuh). Device code that tests/emu also compiles on the host.
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)

namespace minfer::cuda::mv {

// The 6-bit scales (sc) and mins (mn) of sub-blocks 0-3 (t < 2) or 4-7 (t >= 2) of a q4_K/q5_K
// super-block whose first 16 bytes are h (d, dmin, scales[12]): byte j of sc and mn is sub-block
// 4 (t >> 1) + j's.
__device__ __forceinline__ void k4_scales(const uint4 h, int t, uint32_t& sc, uint32_t& mn) {
    const bool low = t < 2;
    sc = low ? (h.y & 0x3F3F3F3Fu) : ((h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u));
    mn = low ? (h.z & 0x3F3F3F3Fu) : (((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u));
}

}  // namespace minfer::cuda::mv
