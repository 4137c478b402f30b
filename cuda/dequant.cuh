// Per-type device dequantization: deq8<T>(row, e0, y) writes elements e0 .. e0+7 (e0 a multiple of 8) of
// one row of type T as floats: f32, f16 and bf16 here, the quantized types by quant::dec::decode8
// (quant/decode.h), the decoders the CPU's dequantizer runs too, with explicitly rounded arithmetic: the
// floats are bit-identical to the CPU's, and so are the f16 values made from them with __float2half_rn
// (round to nearest even, as quant::f32_to_f16). The standalone dequant kernel, the embedding lookup, the
// fused prefill GEMM's generic path and the reference mat-vec (cuda/matvec.cu) use it; the decode
// mat-vec and the GEMMs' quantized tiles decode differently (cuda/matvec_impl.cuh, cuda/gemm_tc.cuh).
#pragma once

#include "cuda/common.cuh"
#include "quant/blocks.h"
#include "quant/decode.h"
#include "quant/types.h"

namespace minfer::cuda {

using quant::Type;

template <Type T>
struct Geometry;
template <> struct Geometry<Type::F32> { static constexpr int elems = 1, bytes = 4; };
template <> struct Geometry<Type::F16> { static constexpr int elems = 1, bytes = 2; };
template <> struct Geometry<Type::BF16> { static constexpr int elems = 1, bytes = 2; };
template <> struct Geometry<Type::Q4_0> { static constexpr int elems = 32, bytes = sizeof(quant::BlockQ4_0); };
template <> struct Geometry<Type::Q4_1> { static constexpr int elems = 32, bytes = sizeof(quant::BlockQ4_1); };
template <> struct Geometry<Type::Q5_0> { static constexpr int elems = 32, bytes = sizeof(quant::BlockQ5_0); };
template <> struct Geometry<Type::Q5_1> { static constexpr int elems = 32, bytes = sizeof(quant::BlockQ5_1); };
template <> struct Geometry<Type::Q8_0> { static constexpr int elems = 32, bytes = sizeof(quant::BlockQ8_0); };
template <> struct Geometry<Type::Q8_1> { static constexpr int elems = 32, bytes = sizeof(quant::BlockQ8_1); };
template <> struct Geometry<Type::Q2_K> { static constexpr int elems = 256, bytes = sizeof(quant::BlockQ2_K); };
template <> struct Geometry<Type::Q3_K> { static constexpr int elems = 256, bytes = sizeof(quant::BlockQ3_K); };
template <> struct Geometry<Type::Q4_K> { static constexpr int elems = 256, bytes = sizeof(quant::BlockQ4_K); };
template <> struct Geometry<Type::Q5_K> { static constexpr int elems = 256, bytes = sizeof(quant::BlockQ5_K); };
template <> struct Geometry<Type::Q6_K> { static constexpr int elems = 256, bytes = sizeof(quant::BlockQ6_K); };
template <> struct Geometry<Type::Q8_K> { static constexpr int elems = 256, bytes = sizeof(quant::BlockQ8_K); };

// Calls f(std::integral_constant<Type, T>{}) for the run-time type t; returns false for a type the CUDA
// backend does not compute with.
template <class F>
bool dispatch_type(Type t, F&& f) {
    switch (t) {
#define MINFER_CUDA_CASE(T) \
    case Type::T: f(std::integral_constant<Type, Type::T>{}); return true;
        MINFER_CUDA_CASE(F32) MINFER_CUDA_CASE(F16) MINFER_CUDA_CASE(BF16)
        MINFER_CUDA_CASE(Q4_0) MINFER_CUDA_CASE(Q4_1) MINFER_CUDA_CASE(Q5_0) MINFER_CUDA_CASE(Q5_1)
        MINFER_CUDA_CASE(Q8_0) MINFER_CUDA_CASE(Q8_1) MINFER_CUDA_CASE(Q2_K) MINFER_CUDA_CASE(Q3_K)
        MINFER_CUDA_CASE(Q4_K) MINFER_CUDA_CASE(Q5_K) MINFER_CUDA_CASE(Q6_K) MINFER_CUDA_CASE(Q8_K)
#undef MINFER_CUDA_CASE
        default: return false;
    }
}

// Bytes of a row of `cols` elements of type T.
template <Type T>
__host__ __device__ constexpr int64_t row_bytes_of(int64_t cols) {
    return cols / Geometry<T>::elems * Geometry<T>::bytes;
}

template <Type T>
__device__ __forceinline__ void deq8(const uint8_t* row, int64_t e0, float* y) {
    if constexpr (T == Type::F32) {
        const float4* p = reinterpret_cast<const float4*>(row + 4 * e0);
        const float4 a = p[0], b = p[1];
        y[0] = a.x; y[1] = a.y; y[2] = a.z; y[3] = a.w; y[4] = b.x; y[5] = b.y; y[6] = b.z; y[7] = b.w;
    } else if constexpr (T == Type::F16) {
        const uint4 v = *reinterpret_cast<const uint4*>(row + 2 * e0);
        const __half2* h = reinterpret_cast<const __half2*>(&v);
        for (int i = 0; i < 4; ++i) {
            const float2 f = __half22float2(h[i]);
            y[2 * i] = f.x;
            y[2 * i + 1] = f.y;
        }
    } else if constexpr (T == Type::BF16) {
        const uint4 v = *reinterpret_cast<const uint4*>(row + 2 * e0);
        const uint32_t w[4] = {v.x, v.y, v.z, v.w};
        for (int i = 0; i < 4; ++i) {
            y[2 * i] = __uint_as_float(w[i] << 16);
            y[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    } else {
        quant::dec::decode8<T>(row, e0, y);
    }
}

}  // namespace minfer::cuda
