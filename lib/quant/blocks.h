// GGUF quantized block layouts, one plain struct per format, shared by the CPU code and cuda/. Only
// <cstdint>: no standard library types, halves stored as their uint16_t bit patterns (convert with
// quant/f16.h on the host, the CUDA intrinsics on the device). All multi-byte fields are little-endian,
// as GGUF stores them. "Element e" counts from 0 inside one block; q is the unsigned code read from the
// bits unless said otherwise; d, m, dmin are the f16 fields converted to float.
#pragma once

#include <cstdint>

namespace minfer::quant {

inline constexpr int QK = 32;     // elements per legacy block (q4_0 .. q8_1)
inline constexpr int QK_K = 256;  // elements per K-quant super-block (q2_K .. q8_K)

// ---- legacy formats: 32 elements, one scale per block -----------------------------------------------

// q4_0: 4-bit codes, symmetric. Element j (0..15) is the low nibble of qs[j]; element j + 16 is the high
// nibble of qs[j]. x = (q - 8) * d.
struct BlockQ4_0 {
    uint16_t d;
    uint8_t qs[QK / 2];
};
static_assert(sizeof(BlockQ4_0) == 18, "q4_0 block is 18 bytes");

// q4_1: 4-bit codes with an offset. Same nibble order as q4_0. x = q * d + m.
struct BlockQ4_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qs[QK / 2];
};
static_assert(sizeof(BlockQ4_1) == 20, "q4_1 block is 20 bytes");

// q5_0: 5-bit codes, symmetric. The low 4 bits are nibbles ordered as in q4_0; read qh as one 32-bit
// little-endian word H: bit e of H is bit 4 of element e's code (so element j + 16 takes bit j + 16).
// x = (q - 16) * d.
struct BlockQ5_0 {
    uint16_t d;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
static_assert(sizeof(BlockQ5_0) == 22, "q5_0 block is 22 bytes");

// q5_1: 5-bit codes with an offset, bits laid out as in q5_0. x = q * d + m.
struct BlockQ5_1 {
    uint16_t d;
    uint16_t m;
    uint8_t qh[4];
    uint8_t qs[QK / 2];
};
static_assert(sizeof(BlockQ5_1) == 24, "q5_1 block is 24 bytes");

// q8_0: signed 8-bit codes. x = qs[e] * d. Also the activation format for q4_0, q5_0 and q8_0 weights.
struct BlockQ8_0 {
    uint16_t d;
    int8_t qs[QK];
};
static_assert(sizeof(BlockQ8_0) == 34, "q8_0 block is 34 bytes");

// q8_1: q8_0 plus s = d * (sum of the 32 qs), an f16; the activation format for q4_1 and q5_1 weights
// (the weights' offset m multiplies s). x = qs[e] * d.
struct BlockQ8_1 {
    uint16_t d;
    uint16_t s;
    int8_t qs[QK];
};
static_assert(sizeof(BlockQ8_1) == 36, "q8_1 block is 36 bytes");

// ---- K-quants: 256-element super-blocks of 16- or 32-element sub-blocks --------------------------------

// q2_K: 2-bit codes, 16 sub-blocks of 16 elements. Element e = 128*h + 32*k + l (h 0..1, k 0..3,
// l 0..31) has q = (qs[32*h + l] >> (2*k)) & 3. Its sub-block is e / 16; scales[e / 16] holds the 4-bit
// scale in its low nibble and the 4-bit min in its high nibble. x = d * (scales & 15) * q - dmin * (scales >> 4).
struct BlockQ2_K {
    uint8_t scales[QK_K / 16];
    uint8_t qs[QK_K / 4];
    uint16_t d;
    uint16_t dmin;
};
static_assert(sizeof(BlockQ2_K) == 84, "q2_K block is 84 bytes");

// q3_K: 3-bit signed codes, 16 sub-blocks of 16. Element e = 128*h + 32*k + l takes its low two bits
// from (qs[32*h + l] >> (2*k)) & 3 and its high bit from bit (4*h + k) of hmask[l]; the code is
// low - 4 when that bit is clear and low when it is set (range -4..3). The 16 sub-block scales are 6-bit
// values s_i stored with an offset of 32: the low 4 bits of s_i are the low nibble of scales[i] for
// i < 8 and the high nibble of scales[i - 8] for i >= 8; bits 4-5 of s_i are bits 2*(i/4)..2*(i/4)+1 of
// scales[8 + i % 4]. x = d * (s_{e/16} - 32) * code.
struct BlockQ3_K {
    uint8_t hmask[QK_K / 8];
    uint8_t qs[QK_K / 4];
    uint8_t scales[12];
    uint16_t d;
};
static_assert(sizeof(BlockQ3_K) == 110, "q3_K block is 110 bytes");

// q4_K: 4-bit codes, 8 sub-blocks of 32. Element e = 64*c + 32*t + l (c 0..3, t 0..1, l 0..31) is the
// low (t = 0) or high (t = 1) nibble of qs[32*c + l]; its sub-block is j = e / 32 = 2*c + t.
// The 12 scale bytes hold 8 6-bit scales sc_j and 8 6-bit mins m_j: for j < 4, sc_j is the low 6 bits
// of scales[j] and m_j the low 6 bits of scales[j + 4]; for j >= 4, sc_j = (scales[j + 4] & 15) |
// ((scales[j - 4] >> 6) << 4) and m_j = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4), i.e. the top two
// bits of bytes 0..7 carry bits 4-5 of the upper four scales (bytes 0..3) and mins (bytes 4..7).
// x = d * sc_j * q - dmin * m_j.
struct BlockQ4_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ4_K) == 144, "q4_K block is 144 bytes");

// q5_K: q4_K plus a fifth bit. The low 4 bits and the scales/mins are as in q4_K; element
// e = 64*c + 32*t + l takes bit 4 of its code from bit (2*c + t) (= its sub-block j) of qh[l].
// x = d * sc_j * q - dmin * m_j with q in 0..31.
struct BlockQ5_K {
    uint16_t d;
    uint16_t dmin;
    uint8_t scales[12];
    uint8_t qh[QK_K / 8];
    uint8_t qs[QK_K / 2];
};
static_assert(sizeof(BlockQ5_K) == 176, "q5_K block is 176 bytes");

// q6_K: 6-bit codes, 16 sub-blocks of 16 with signed 8-bit scales. Element e = 128*h + 32*k + l
// (h 0..1, k 0..3, l 0..31): the low 4 bits are the low (k < 2) or high (k >= 2) nibble of
// ql[64*h + 32*(k & 1) + l]; the top 2 bits are (qh[32*h + l] >> (2*k)) & 3.
// x = d * scales[e / 16] * (q - 32).
struct BlockQ6_K {
    uint8_t ql[QK_K / 2];
    uint8_t qh[QK_K / 4];
    int8_t scales[QK_K / 16];
    uint16_t d;
};
static_assert(sizeof(BlockQ6_K) == 210, "q6_K block is 210 bytes");

// q8_K: the activation format for K-quant weights. d is a full float; x = d * qs[e]. bsums[g] is the sum
// of qs[16*g .. 16*g + 15], so the weights' min/offset terms need no pass over the codes.
struct BlockQ8_K {
    float d;
    int8_t qs[QK_K];
    int16_t bsums[QK_K / 16];
};
static_assert(sizeof(BlockQ8_K) == 292, "q8_K block is 292 bytes");

}  // namespace minfer::quant
