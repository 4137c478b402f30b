// The block decoders, once for the CPU and the CUDA backend (every function compiles for both: MINFER_HD):
// the codes of eight consecutive elements of a block, the K-quant sub-block scales, and dequantization of
// eight elements to f32. The CPU's scalar dequantizer and dot products (quant.cpp, quant_internal.h) and
// cuda/dequant.cuh's deq8 (the f16 cache's warm pass, the embedding lookup, the fused prefill GEMM's
// generic path, the reference mat-vec) run these functions. (The decode mat-vec and the tensor-core GEMMs
// unpack whole words straight into MMA operands with their own bit tricks, checked against the CPU by the
// emulator and CUDA tests; the AVX2 kernels have SIMD forms.)
//
// Arithmetic: every product, sum and difference is rounded once to f32. On the device that takes the
// explicitly rounded intrinsics (__fmul_rn, __fadd_rn, __fsub_rn), because nvcc would otherwise contract a
// multiply and an add into one FMA; on the host the float arithmetic runs in quant.cpp, compiled for the
// generic x86-64 or ARM target, where nothing is contracted. So the CPU and the GPU produce the same bits,
// which `cuda_tests` checks ("dequantization to f16 is bit-identical ...").
//
// Loads: blocks are 2-byte aligned (every block size is even; buffers are at least 16-byte aligned), so the
// device reads 16-bit words; q4_K and q5_K code groups are 8-byte aligned (144- and 176-byte blocks). The
// host composes words from bytes (any alignment, little-endian whatever the host's byte order).
#pragma once

#include <cstdint>
#include <cstring>

#include "quant/blocks.h"
#include "quant/f16.h"
#include "quant/types.h"

#if defined(__CUDACC__)
#include <cuda_fp16.h>
#define MINFER_HD __host__ __device__ __forceinline__
#else
#define MINFER_HD inline
#endif

namespace minfer::quant::dec {

MINFER_HD float mul(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fmul_rn(a, b);
#else
    return a * b;
#endif
}
MINFER_HD float add(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fadd_rn(a, b);
#else
    return a + b;
#endif
}
MINFER_HD float sub(float a, float b) {
#ifdef __CUDA_ARCH__
    return __fsub_rn(a, b);
#else
    return a - b;
#endif
}

// The 16-bit little-endian word at 2-byte aligned p.
MINFER_HD uint32_t u16_at(const uint8_t* p) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const uint16_t*>(p);
#else
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8);
#endif
}
// The f16 at p, as f32 (exact).
MINFER_HD float half_at(const uint8_t* p) {
#ifdef __CUDA_ARCH__
    return __half2float(__ushort_as_half(static_cast<unsigned short>(u16_at(p))));
#else
    return f16_to_f32(static_cast<uint16_t>(u16_at(p)));
#endif
}
// The f32 at 4-byte aligned p (q8_K's scale).
MINFER_HD float f32_at(const uint8_t* p) {
#ifdef __CUDA_ARCH__
    return *reinterpret_cast<const float*>(p);
#else
    float f;
    std::memcpy(&f, p, sizeof f);
    return f;
#endif
}
// The 32-bit little-endian word at 2-byte aligned p (q5_0 / q5_1 high bits: their 22- and 24-byte blocks
// leave it 4-byte aligned only for some block indices).
MINFER_HD uint32_t u32_at(const uint8_t* p) { return u16_at(p) | (u16_at(p + 2) << 16); }
// Eight bytes at 2-byte aligned p as two little-endian words.
MINFER_HD void bytes8(const uint8_t* p, uint32_t w[2]) {
    w[0] = u32_at(p);
    w[1] = u32_at(p + 4);
}
// The same at 8-byte aligned p: one load on the device.
MINFER_HD void bytes8_aligned(const uint8_t* p, uint32_t w[2]) {
#ifdef __CUDA_ARCH__
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    w[0] = v.x;
    w[1] = v.y;
#else
    bytes8(p, w);
#endif
}
MINFER_HD int byte_of(const uint32_t w[2], int i) { return static_cast<int>((w[i >> 2] >> (8 * (i & 3))) & 0xffu); }

// q4_K / q5_K: the 6-bit scale and min of sub-block j (0..7) from the 12 packed bytes s: entries 0..3 are
// the low 6 bits of bytes 0..3 (scales) and 4..7 (mins); entries 4..7 take their low 4 bits from the
// nibbles of bytes 8..11 (scales low, mins high) and bits 4-5 from the top bits of bytes j - 4 and j.
MINFER_HD void k4_scale_min(const uint8_t* s, int j, int& sc, int& mn) {
    if (j < 4) {
        sc = s[j] & 63;
        mn = s[j + 4] & 63;
    } else {
        sc = (s[j + 4] & 15) | ((s[j - 4] >> 6) << 4);
        mn = (s[j + 4] >> 4) | ((s[j] >> 6) << 4);
    }
}
// q3_K: the signed scale of sub-block g (0..15) from the 12 packed bytes s (stored 6-bit value - 32): low
// nibble from byte g (g < 8) or the high nibble of byte g - 8, bits 4-5 from bit pair g / 4 of byte 8 + g % 4.
MINFER_HD int q3k_scale(const uint8_t* s, int g) {
    const int low = g < 8 ? (s[g] & 15) : (s[g - 8] >> 4);
    const int high = (s[8 + (g & 3)] >> (2 * (g >> 2))) & 3;
    return (low | (high << 4)) - 32;
}

// q[0..7]: the codes of elements e .. e+7 (e a multiple of 8, inside the block) of the block at b, the
// integer that multiplies the block's or sub-block's scale: q - 8 (q4_0), q (q4_1), q - 16 (q5_0), q
// (q5_1), the signed byte (q8_0, q8_1, q8_K), q (q2_K: before the min; q4_K, q5_K), the 3-bit signed value
// (q3_K), q - 32 (q6_K). Layouts: quant/blocks.h.
template <Type T>
MINFER_HD void codes8(const uint8_t* b, int e, int q[8]) {
    uint32_t w[2];
    if constexpr (T == Type::Q4_0 || T == Type::Q4_1 || T == Type::Q5_0 || T == Type::Q5_1) {
        // Element j < 16: the low nibble of qs[j]; j + 16: its high nibble. q5: bit e of the qh word on top.
        constexpr int kQs = T == Type::Q4_0 ? 2 : T == Type::Q4_1 ? 4 : T == Type::Q5_0 ? 6 : 8;
        constexpr int kOffset = T == Type::Q4_0 ? 8 : T == Type::Q5_0 ? 16 : 0;
        const int shift = e >= 16 ? 4 : 0;
        bytes8(b + kQs + (e & 15), w);
        uint32_t h = 0;
        if constexpr (T == Type::Q5_0 || T == Type::Q5_1) h = u32_at(b + (T == Type::Q5_0 ? 2 : 4));
        for (int i = 0; i < 8; ++i) {
            int v = (byte_of(w, i) >> shift) & 15;
            if constexpr (T == Type::Q5_0 || T == Type::Q5_1) v |= static_cast<int>(((h >> (e + i)) & 1u) << 4);
            q[i] = v - kOffset;
        }
    } else if constexpr (T == Type::Q8_0 || T == Type::Q8_1) {
        bytes8(b + (T == Type::Q8_0 ? 2 : 4) + e, w);
        for (int i = 0; i < 8; ++i) q[i] = static_cast<int8_t>(byte_of(w, i));
    } else if constexpr (T == Type::Q2_K) {
        // Element 128h + 32k + l: bits 2k, 2k+1 of qs[32h + l].
        const int h = e / 128, k = (e % 128) / 32, l0 = e % 32;
        bytes8(b + 16 + 32 * h + l0, w);
        for (int i = 0; i < 8; ++i) q[i] = (byte_of(w, i) >> (2 * k)) & 3;
    } else if constexpr (T == Type::Q3_K) {
        // The 2-bit value as in q2_K (qs at 32), minus 4 unless bit 4h + k of hmask[l] is set.
        const int h = e / 128, k = (e % 128) / 32, l0 = e % 32;
        uint32_t hm[2];
        bytes8(b + l0, hm);
        bytes8(b + 32 + 32 * h + l0, w);
        for (int i = 0; i < 8; ++i) {
            const int low = (byte_of(w, i) >> (2 * k)) & 3, high = (byte_of(hm, i) >> (4 * h + k)) & 1;
            q[i] = low - 4 + 4 * high;
        }
    } else if constexpr (T == Type::Q4_K || T == Type::Q5_K) {
        // Element 64c + 32t + l: nibble t of qs[32c + l]; q5_K: bit 2c + t of qh[l] as bit 4.
        const int c = e / 64, t = (e % 64) / 32, l0 = e % 32, j = e / 32;
        uint32_t qh[2] = {0, 0};
        bytes8_aligned(b + (T == Type::Q4_K ? 16 : 48) + 32 * c + l0, w);
        if constexpr (T == Type::Q5_K) bytes8_aligned(b + 16 + l0, qh);
        for (int i = 0; i < 8; ++i) {
            int v = (byte_of(w, i) >> (4 * t)) & 15;
            if constexpr (T == Type::Q5_K) v |= ((byte_of(qh, i) >> j) & 1) << 4;
            q[i] = v;
        }
    } else if constexpr (T == Type::Q6_K) {
        // Element 128h + 32k + l: nibble (k >= 2) of ql[64h + 32(k & 1) + l], bits 2k, 2k+1 of qh[32h + l]
        // on top; minus 32.
        const int h = e / 128, k = (e % 128) / 32, l0 = e % 32;
        uint32_t qh[2];
        bytes8(b + 64 * h + 32 * (k & 1) + l0, w);
        bytes8(b + 128 + 32 * h + l0, qh);
        for (int i = 0; i < 8; ++i) {
            const int lb = byte_of(w, i);
            const int low = k < 2 ? (lb & 15) : (lb >> 4), high = (byte_of(qh, i) >> (2 * k)) & 3;
            q[i] = (low | (high << 4)) - 32;
        }
    } else if constexpr (T == Type::Q8_K) {
        bytes8(b + 4 + e, w);
        for (int i = 0; i < 8; ++i) q[i] = static_cast<int8_t>(byte_of(w, i));
    } else {
        static_assert(T == Type::Q4_0, "codes8: a quantized block type");
    }
}

// y[0..7] = elements e0 .. e0+7 (e0 a multiple of 8) of the row at `row` of quantized type T.
template <Type T>
MINFER_HD void decode8(const uint8_t* row, int64_t e0, float* y) {
    constexpr int kElems = T == Type::Q4_0 || T == Type::Q4_1 || T == Type::Q5_0 || T == Type::Q5_1 || T == Type::Q8_0 ||
                                   T == Type::Q8_1
                               ? QK
                               : QK_K;
    constexpr int kBytes = T == Type::Q4_0   ? sizeof(BlockQ4_0)
                           : T == Type::Q4_1 ? sizeof(BlockQ4_1)
                           : T == Type::Q5_0 ? sizeof(BlockQ5_0)
                           : T == Type::Q5_1 ? sizeof(BlockQ5_1)
                           : T == Type::Q8_0 ? sizeof(BlockQ8_0)
                           : T == Type::Q8_1 ? sizeof(BlockQ8_1)
                           : T == Type::Q2_K ? sizeof(BlockQ2_K)
                           : T == Type::Q3_K ? sizeof(BlockQ3_K)
                           : T == Type::Q4_K ? sizeof(BlockQ4_K)
                           : T == Type::Q5_K ? sizeof(BlockQ5_K)
                           : T == Type::Q6_K ? sizeof(BlockQ6_K)
                                             : sizeof(BlockQ8_K);
    const uint8_t* b = row + (e0 / kElems) * kBytes;
    const int e = static_cast<int>(e0 % kElems);
    int q[8];
    codes8<T>(b, e, q);
    if constexpr (T == Type::Q4_0 || T == Type::Q5_0 || T == Type::Q8_0 || T == Type::Q8_1) {  // q d
        const float d = half_at(b);
        for (int i = 0; i < 8; ++i) y[i] = mul(static_cast<float>(q[i]), d);
    } else if constexpr (T == Type::Q4_1 || T == Type::Q5_1) {  // q d + m
        const float d = half_at(b), m = half_at(b + 2);
        for (int i = 0; i < 8; ++i) y[i] = add(mul(static_cast<float>(q[i]), d), m);
    } else if constexpr (T == Type::Q2_K) {  // (d sc) q - (dmin m), sc and m the nibbles of scales[e / 16]
        const int sc = b[e / 16];
        const float ds = mul(half_at(b + 80), static_cast<float>(sc & 15)), dm = mul(half_at(b + 82), static_cast<float>(sc >> 4));
        for (int i = 0; i < 8; ++i) y[i] = sub(mul(ds, static_cast<float>(q[i])), dm);
    } else if constexpr (T == Type::Q3_K) {  // (d sc) q
        const float ds = mul(half_at(b + 108), static_cast<float>(q3k_scale(b + 96, e / 16)));
        for (int i = 0; i < 8; ++i) y[i] = mul(ds, static_cast<float>(q[i]));
    } else if constexpr (T == Type::Q4_K || T == Type::Q5_K) {  // (d sc) q - (dmin m)
        int sc, mn;
        k4_scale_min(b + 4, e / 32, sc, mn);
        const float ds = mul(half_at(b), static_cast<float>(sc)), dm = mul(half_at(b + 2), static_cast<float>(mn));
        for (int i = 0; i < 8; ++i) y[i] = sub(mul(ds, static_cast<float>(q[i])), dm);
    } else if constexpr (T == Type::Q6_K) {  // (d sc) q, sc the signed byte scales[e / 16]
        const float ds = mul(half_at(b + 208), static_cast<float>(static_cast<int8_t>(b[192 + e / 16])));
        for (int i = 0; i < 8; ++i) y[i] = mul(ds, static_cast<float>(q[i]));
    } else if constexpr (T == Type::Q8_K) {  // d q, d an f32
        const float d = f32_at(b);
        for (int i = 0; i < 8; ++i) y[i] = mul(d, static_cast<float>(q[i]));
    }
}

}  // namespace minfer::quant::dec
