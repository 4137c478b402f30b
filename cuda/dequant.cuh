// Per-type device dequantization: deq8<T>(row, e0, y) writes elements e0 .. e0+7 (e0 a multiple of 8) of
// one row of type T as floats. The arithmetic repeats lib/quant/quant.cpp operation by operation with
// explicitly rounded intrinsics (__fmul_rn, __fadd_rn, __fsub_rn), so nvcc cannot contract a multiply and
// an add into an FMA: the floats are bit-identical to the CPU dequantizer, and so are the f16 values made
// from them with __float2half_rn (round to nearest even, as quant::f32_to_f16). Layouts: quant/blocks.h.
// The standalone dequant kernel, the embedding lookup and the reference mat-vec (cuda/matvec.cu) use
// these functions; the decode mat-vec itself decodes differently (cuda/matvec_impl.cuh).
#pragma once

#include "cuda/common.cuh"
#include "quant/blocks.h"
#include "quant/types.h"

namespace minfer::cuda {

using quant::Type;

// The 32-bit little-endian high-bit word of q5_0 / q5_1. Their blocks are 22 and 24 bytes, so the word
// (at block + 2 for q5_0) is 4-byte aligned only for some block indices; two u16 loads are always aligned.
__device__ __forceinline__ uint32_t ld_u32_from_u16(const uint8_t* p) {
    return uint32_t(ld_u16(p)) | (uint32_t(ld_u16(p + 2)) << 16);
}

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

__device__ __forceinline__ float mul(float a, float b) { return __fmul_rn(a, b); }

// Eight consecutive bytes at p, which is 2-byte aligned (every block stride is even and buffers come
// from cudaMalloc): four u16 loads instead of eight byte loads.
__device__ __forceinline__ void ld8_u16(const uint8_t* p, uint32_t w[2]) {
    w[0] = uint32_t(ld_u16(p)) | (uint32_t(ld_u16(p + 2)) << 16);
    w[1] = uint32_t(ld_u16(p + 4)) | (uint32_t(ld_u16(p + 6)) << 16);
}
// Eight consecutive bytes at an 8-byte aligned p: one load. q4_K and q5_K blocks are 144 and 176 bytes
// (multiples of 16), so their rows and the 8-element groups inside them stay 8-byte aligned.
__device__ __forceinline__ void ld8_u64(const uint8_t* p, uint32_t w[2]) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x;
    w[1] = v.y;
}
__device__ __forceinline__ int byte_of(const uint32_t w[2], int i) { return static_cast<int>((w[i >> 2] >> (8 * (i & 3))) & 0xffu); }

// The K-quant q4_K/q5_K scale and min of sub-block j (0..7) from the 12 packed bytes s.
__device__ __forceinline__ void k4_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
    if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}

// The signed q3_K scale of sub-block g (0..15) from the 12 packed bytes s (stored value - 32).
__device__ __forceinline__ int q3k_scale(const uint8_t* s, int g) {
    const int low = g < 8 ? (s[g] & 15) : (s[g - 8] >> 4);
    const int high = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
    return (low | (high << 4)) - 32;
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
    } else if constexpr (T == Type::Q4_0 || T == Type::Q4_1) {
        constexpr int kBytes = Geometry<T>::bytes;
        const uint8_t* b = row + (e0 / 32) * kBytes;
        const int j0 = static_cast<int>(e0 % 32);
        const uint8_t* qs = b + (T == Type::Q4_0 ? 2 : 4);
        const float d = ld_half(b);
        const int shift = j0 >= 16 ? 4 : 0, base = j0 & 15;
        uint32_t w[2];
        ld8_u16(qs + base, w);
        for (int i = 0; i < 8; ++i) {
            const int q = (byte_of(w, i) >> shift) & 15;
            if constexpr (T == Type::Q4_0) y[i] = mul(static_cast<float>(q - 8), d);
            else y[i] = __fadd_rn(mul(static_cast<float>(q), d), ld_half(b + 2));
        }
    } else if constexpr (T == Type::Q5_0 || T == Type::Q5_1) {
        constexpr int kBytes = Geometry<T>::bytes;
        constexpr int kQh = T == Type::Q5_0 ? 2 : 4;
        const uint8_t* b = row + (e0 / 32) * kBytes;
        const int j0 = static_cast<int>(e0 % 32);
        const uint32_t h = ld_u32_from_u16(b + kQh);
        const uint8_t* qs = b + kQh + 4;
        const float d = ld_half(b);
        const int shift = j0 >= 16 ? 4 : 0, base = j0 & 15;
        uint32_t w[2];
        ld8_u16(qs + base, w);
        for (int i = 0; i < 8; ++i) {
            const int q = ((byte_of(w, i) >> shift) & 15) | static_cast<int>(((h >> (j0 + i)) & 1u) << 4);
            if constexpr (T == Type::Q5_0) y[i] = mul(static_cast<float>(q - 16), d);
            else y[i] = __fadd_rn(mul(static_cast<float>(q), d), ld_half(b + 2));
        }
    } else if constexpr (T == Type::Q8_0 || T == Type::Q8_1) {
        constexpr int kBytes = Geometry<T>::bytes;
        const uint8_t* b = row + (e0 / 32) * kBytes;
        uint32_t w[2];
        ld8_u16(b + (T == Type::Q8_0 ? 2 : 4) + e0 % 32, w);
        const float d = ld_half(b);
        for (int i = 0; i < 8; ++i) y[i] = mul(static_cast<float>(static_cast<int8_t>(byte_of(w, i))), d);
    } else if constexpr (T == Type::Q2_K) {
        const uint8_t* b = row + (e0 / 256) * Geometry<T>::bytes;
        const int e = static_cast<int>(e0 % 256), h = e / 128, k = (e % 128) / 32, l0 = e % 32;
        const uint8_t sc = b[e / 16];
        const float ds = mul(ld_half(b + 80), static_cast<float>(sc & 15));
        const float dm = mul(ld_half(b + 82), static_cast<float>(sc >> 4));
        uint32_t w[2];
        ld8_u16(b + 16 + 32 * h + l0, w);
        for (int i = 0; i < 8; ++i) y[i] = __fsub_rn(mul(ds, static_cast<float>((byte_of(w, i) >> (2 * k)) & 3)), dm);
    } else if constexpr (T == Type::Q3_K) {
        const uint8_t* b = row + (e0 / 256) * Geometry<T>::bytes;
        const int e = static_cast<int>(e0 % 256), h = e / 128, k = (e % 128) / 32, l0 = e % 32;
        const float ds = mul(ld_half(b + 108), static_cast<float>(q3k_scale(b + 96, e / 16)));
        uint32_t hm[2], qs[2];
        ld8_u16(b + l0, hm);
        ld8_u16(b + 32 + 32 * h + l0, qs);
        for (int i = 0; i < 8; ++i) {
            const int low = (byte_of(qs, i) >> (2 * k)) & 3, high = (byte_of(hm, i) >> (4 * h + k)) & 1;
            y[i] = mul(ds, static_cast<float>(low - 4 + 4 * high));
        }
    } else if constexpr (T == Type::Q4_K || T == Type::Q5_K) {
        const uint8_t* b = row + (e0 / 256) * Geometry<T>::bytes;
        const int e = static_cast<int>(e0 % 256), c = e / 64, t = (e % 64) / 32, l0 = e % 32, j = e / 32;
        int sc, mn;
        k4_scale_min(b + 4, j, sc, mn);
        const float ds = mul(ld_half(b), static_cast<float>(sc)), dm = mul(ld_half(b + 2), static_cast<float>(mn));
        uint32_t qs[2], qh[2] = {0, 0};
        ld8_u64(b + (T == Type::Q4_K ? 16 : 48) + 32 * c + l0, qs);
        if constexpr (T == Type::Q5_K) ld8_u64(b + 16 + l0, qh);
        for (int i = 0; i < 8; ++i) {
            int q = (byte_of(qs, i) >> (4 * t)) & 15;
            if constexpr (T == Type::Q5_K) q |= ((byte_of(qh, i) >> j) & 1) << 4;
            y[i] = __fsub_rn(mul(ds, static_cast<float>(q)), dm);
        }
    } else if constexpr (T == Type::Q6_K) {
        const uint8_t* b = row + (e0 / 256) * Geometry<T>::bytes;
        const int e = static_cast<int>(e0 % 256), h = e / 128, k = (e % 128) / 32, l0 = e % 32;
        const float ds = mul(ld_half(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
        uint32_t ql[2], qh[2];
        ld8_u16(b + 64 * h + 32 * (k & 1) + l0, ql);
        ld8_u16(b + 128 + 32 * h + l0, qh);
        for (int i = 0; i < 8; ++i) {
            const int lb = byte_of(ql, i);
            const int low = k < 2 ? (lb & 15) : (lb >> 4), high = (byte_of(qh, i) >> (2 * k)) & 3;
            y[i] = mul(ds, static_cast<float>((low | (high << 4)) - 32));
        }
    } else if constexpr (T == Type::Q8_K) {
        const uint8_t* b = row + (e0 / 256) * Geometry<T>::bytes;
        const float d = *reinterpret_cast<const float*>(b);
        const int8_t* qs = reinterpret_cast<const int8_t*>(b + 4) + e0 % 256;
        for (int i = 0; i < 8; ++i) y[i] = mul(d, static_cast<float>(qs[i]));
    }
}

}  // namespace minfer::cuda
