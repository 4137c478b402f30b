// Shared by the CUDA sources: error conversion (every CUDA call is checked and becomes a minfer::Error,
// never an abort) and small device helpers. Device code only reads bytes, u16 and naturally aligned
// vectors: quantized block strides (18, 22, 110, 210 bytes ...) guarantee 2-byte alignment and no more.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/error.h"

namespace minfer::cuda {

// Throws Error for a failed CUDA call: MINFER_ERR_OUT_OF_MEMORY for allocation failures, MINFER_ERR_DEVICE
// otherwise, with the call named. Clears the runtime's non-sticky error state first.
void check(cudaError_t err, const char* what);

inline unsigned blocks_for(int64_t n, int per_block) { return static_cast<unsigned>((n + per_block - 1) / per_block); }

__device__ __forceinline__ uint16_t ld_u16(const uint8_t* p) { return *reinterpret_cast<const uint16_t*>(p); }
__device__ __forceinline__ float ld_half(const uint8_t* p) { return __half2float(__ushort_as_half(ld_u16(p))); }

}  // namespace minfer::cuda
