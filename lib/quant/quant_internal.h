// Internal to lib/quant: small helpers shared by the portable code (quant.cpp) and the AVX2 kernels
// (quant_avx2.cpp). Not for use outside lib/quant.
#pragma once

#include <cstdint>

#include "quant/decode.h"
#include "quant/quant.h"

namespace minfer::quant::detail {

// The 32-bit little-endian word at p (q5_0/q5_1 high bits), independent of the host's byte order.
inline uint32_t load_u32_le(const uint8_t* p) {
    return uint32_t(p[0]) | (uint32_t(p[1]) << 8) | (uint32_t(p[2]) << 16) | (uint32_t(p[3]) << 24);
}

// q4_K / q5_K: reads the 12 packed scale bytes, writes four little-endian words: w[0] = scales 0..3,
// w[1] = scales 4..7, w[2] = mins 0..3, w[3] = mins 4..7 (byte i of a word holds entry i). Scales and
// mins 0..3 are the low 6 bits of bytes 0..3 and 4..7; entries 4..7 take their low 4 bits from the
// nibbles of bytes 8..11 (scales low, mins high) and bits 4-5 from the top bits of bytes 0..3 (scales)
// and 4..7 (mins).
inline void unpack_scales_k4_words(const uint8_t* s, uint32_t w[4]) {
    constexpr uint32_t k6 = 0x3F3F3F3Fu, k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
    const uint32_t a = load_u32_le(s), b = load_u32_le(s + 4), c = load_u32_le(s + 8);
    w[0] = a & k6;
    w[1] = (c & k4) | ((a >> 6) & k2) << 4;
    w[2] = b & k6;
    w[3] = ((c >> 4) & k4) | ((b >> 6) & k2) << 4;
}

// q4_K / q5_K: the eight 6-bit scales sc[j] and mins mn[j] (dec::k4_scale_min; the word form above is
// its four-at-a-time equivalent for the AVX2 kernels).
inline void unpack_scales_k4(const uint8_t* s, uint8_t sc[8], uint8_t mn[8]) {
    for (int j = 0; j < 8; ++j) {
        int a, b;
        dec::k4_scale_min(s, j, a, b);
        sc[j] = static_cast<uint8_t>(a);
        mn[j] = static_cast<uint8_t>(b);
    }
}

// q3_K: reads the 12 packed scale bytes, writes the sixteen stored 6-bit scales (0..63, offset 32 not yet
// removed) as four little-endian words, byte i % 4 of word i / 4 holding scale i. Bytes 0..3 and 4..7
// give the low nibbles (their low halves for scales 0..7, high halves for 8..15); byte 8 + i % 4 gives
// bits 4-5 of scale i from its bit pair i / 4.
inline void unpack_scales_q3k_words(const uint8_t* s, uint32_t w[4]) {
    constexpr uint32_t k4 = 0x0F0F0F0Fu, k2 = 0x03030303u;
    const uint32_t a = load_u32_le(s), b = load_u32_le(s + 4), h = load_u32_le(s + 8);
    w[0] = (a & k4) | (h & k2) << 4;
    w[1] = (b & k4) | ((h >> 2) & k2) << 4;
    w[2] = ((a >> 4) & k4) | ((h >> 4) & k2) << 4;
    w[3] = ((b >> 4) & k4) | ((h >> 6) & k2) << 4;
}

// q3_K: the sixteen signed sub-block scales (stored value - 32; dec::q3k_scale).
inline void unpack_scales_q3k(const uint8_t* s, int8_t out[16]) {
    for (int g = 0; g < 16; ++g) out[g] = static_cast<int8_t>(dec::q3k_scale(s, g));
}

// The AVX2+FMA+F16C dot product for a weight type, or nullptr where there is none (non-x86 builds).
// Callers must check the CPU first.
VecDotFn avx2_vec_dot(Type weight);
// isa: the form of the tiles (callers check the CPU for it too); the K-quants have two (AVX2, AVX-512).
VecDotTileFn avx2_vec_dot_tile(Type weight, TileIsa isa);
AxpyFn avx2_axpy();
// The AVX-512 and AVX2 attention kernels (callers check the CPU); all null off x86.
AttnKernels avx512_attn();
AttnKernels avx2_attn();
SiluMulFn avx512_silu_mul();  // nullptr off x86
SiluMulFn avx2_silu_mul();
// The AVX2 quantizers of q8_0 and q8_K activation rows (nb blocks), byte for byte quantize_row's; nullptr
// off x86.
using QuantRowFn = void (*)(const float* x, void* dst, int64_t nb);
QuantRowFn avx2_quant_q8_0();
QuantRowFn avx2_quant_q8_K();
// block_scales by F16C, 8 scales a conversion (block_bytes apart, each block starting with its f16 scale);
// nullptr off x86.
using BlockScalesFn = void (*)(const uint8_t* rows_base, size_t stride, int64_t rows, int64_t nb, size_t block_bytes, float* out);
BlockScalesFn avx2_block_scales();

}  // namespace minfer::quant::detail
