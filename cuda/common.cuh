// Shared by the CUDA sources: error conversion (every CUDA call is checked and becomes a minfer::Error,
// never an abort) and small device helpers. Device code only reads bytes, u16 and naturally aligned
// vectors: quantized block strides (18, 22, 110, 210 bytes ...) guarantee 2-byte alignment and no more.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"
#include "cuda/pdl.cuh"

namespace minfer::cuda {

// Throws Error for a failed CUDA call: MINFER_ERR_OUT_OF_MEMORY for allocation failures, MINFER_ERR_DEVICE
// otherwise, with the call named. Clears the runtime's non-sticky error state first.
void check(cudaError_t err, const char* what);

// Checks the launch just made (configuration errors are reported at once; faults surface later).
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// SMs of the current device, read once (132 on the H200); 132 when the query fails. The value only
// steers how work is split, and every caller sees the same one.
int sm_count();
// The current device's compute capability, major * 10 + minor (90 on an H100 or H200); a failed query
// is a status.
int compute_capability();

inline unsigned blocks_for(int64_t n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
    return v;
}

// Asynchronous 16-byte global-to-shared copy (sm_80+), cached in L2 only; with valid false nothing is
// read and the 16 bytes are zero-filled (gmem must still be a valid address expression).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
// Waits until at most N of this thread's committed copy groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ float ld_half(const uint8_t* p) { return __half2float(__ushort_as_half(ld_u16(p))); }

}  // namespace minfer::cuda
