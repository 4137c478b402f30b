// AVX2+FMA+F16C dot products, one per weight type, and the prefill tiles, attention kernels and swiglu
// in AVX2 and AVX-512. Only the functions carry the target attribute (the rest of the library is built
// for the baseline CPU); quant.cpp calls them only after checking the CPU. Each dot product and tile
// computes the same exact per-block integer sums as the portable code in quant.cpp and differs from it
// only in the order of the float accumulation.
#include "quant/quant_internal.h"

#if defined(__x86_64__) || defined(__i386__)

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "quant/blocks.h"
#include "quant/f16.h"

#define MINFER_AVX2 __attribute__((target("avx2,fma,f16c")))
// The q8_0-family tiles in both forms (below): AVX-VNNI is enabled for the function, and only the kVnni
// instantiation uses it (its intrinsic is the only VNNI instruction in this file; the others' code has
// none: `objdump -d` of the object shows vpdpbusd in the kVnni tiles alone).
#define MINFER_AVX2_VNNI __attribute__((target("avx2,fma,f16c,avxvnni")))
// The AVX-512 functions (the 512-bit tiles, attention kernels and swiglu) carry this one; quant.cpp
// calls them only where the CPU has AVX-512 F, BW, VL, DQ and VNNI.
// GCC 12's AVX-512 headers set "undefined" registers from themselves, which -Wuninitialized reports at
// every use (GCC bug 105593, fixed in GCC 13): the AVX-512 code sits between these two.
#if defined(__clang__)
#define MINFER_AVX512_WARNINGS_OFF
#define MINFER_AVX512_WARNINGS_ON
#else
#define MINFER_AVX512_WARNINGS_OFF \
    _Pragma("GCC diagnostic push") _Pragma("GCC diagnostic ignored \"-Wuninitialized\"") _Pragma("GCC diagnostic ignored \"-Wmaybe-uninitialized\"")
#define MINFER_AVX512_WARNINGS_ON _Pragma("GCC diagnostic pop")
#endif
#define MINFER_AVX512_VNNI __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512vnni")))

namespace minfer::quant::detail {
namespace {

// ---- helpers ------------------------------------------------------------------------------------------

MINFER_AVX2 inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// The largest lane (a NaN lane loses to a number, as in the max loops that feed it).
MINFER_AVX2 inline float hsum_max(__m256 v) {
    __m128 m = _mm_max_ps(_mm256_extractf128_ps(v, 1), _mm256_castps256_ps128(v));
    m = _mm_max_ps(_mm_movehl_ps(m, m), m);
    m = _mm_max_ss(_mm_movehdup_ps(m), m);
    return _mm_cvtss_f32(m);
}

MINFER_AVX2 inline float half(uint16_t h) { return _cvtsh_ss(h); }

// Sums of products of 32 signed bytes x (weights, any value) and y (activation codes, which our quantizers
// keep in -127..127, never -128), four adjacent products per int32 lane. Flipping y's sign by x's is then
// exact, and the pairwise int16 step (at most 2 * 128 * 127) cannot saturate.
MINFER_AVX2 inline __m256i dot_i8(__m256i x, __m256i y) {
    const __m256i p = _mm256_maddubs_epi16(_mm256_sign_epi8(x, x), _mm256_sign_epi8(y, x));
    return _mm256_madd_epi16(p, _mm256_set1_epi16(1));
}

// The same for unsigned x (0..63) and signed y.
MINFER_AVX2 inline __m256i dot_u8(__m256i x, __m256i y) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(x, y), _mm256_set1_epi16(1));
}

// 16 bytes of packed nibbles -> 32 bytes: low nibbles in bytes 0..15, high nibbles in bytes 16..31.
MINFER_AVX2 inline __m256i unpack_nibbles(const uint8_t* p) {
    const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
    return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

// Bit j of the 32-bit word h -> byte j equal to 0x10 (set) or 0 (clear).
MINFER_AVX2 inline __m256i bits_to_0x10(uint32_t h) {
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(h)), pick);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

// Bits s..s+width-1 of every byte of v, moved to bit 0 (s + width <= 8).
MINFER_AVX2 inline __m256i byte_bits(__m256i v, int s, int mask) {
    return _mm256_and_si256(_mm256_srli_epi16(v, s), _mm256_set1_epi8(static_cast<char>(mask)));
}

// Sixteen int16 group scales s16 -> for the group pair (8h + 2k, 8h + 2k + 1): int16 lanes 0..7 hold the
// first scale and lanes 8..15 the second. `half` is s16's 128-bit half h broadcast to both lanes.
alignas(32) constexpr uint8_t kPairShuffle[4][32] = {
    {0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3},
    {4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7, 6, 7},
    {8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 8, 9, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11, 10, 11},
    {12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 12, 13, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15, 14, 15},
};
MINFER_AVX2 inline __m256i scale_half(__m256i s16, int h) {
    return _mm256_broadcastsi128_si256(h ? _mm256_extracti128_si256(s16, 1) : _mm256_castsi256_si128(s16));
}
MINFER_AVX2 inline __m256i scale_pair(__m256i half, int k) {
    return _mm256_shuffle_epi8(half, _mm256_load_si256(reinterpret_cast<const __m256i*>(kPairShuffle[k])));
}

MINFER_AVX2 inline __m256i load32(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }

// Decode streams each weight row once: asking for the bytes kPrefetchAhead beyond the current block (the
// rest of the row, then the next rows of the task) keeps more cache-line misses in flight than the
// hardware prefetcher does. Measured on the 2-core dev machine, qwen2-0.5b q8_0 tg128 with 2 threads:
// 28.5 -> 31.8 t/s (2048 bytes; 512 gave nothing measurable).
constexpr int kPrefetchAhead = 2048;
template <class Block>
MINFER_AVX2 inline void prefetch_block(const Block* blk) {
    const char* p = reinterpret_cast<const char*>(blk) + kPrefetchAhead;
    for (size_t off = 0; off < sizeof(Block); off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

// ---- float weights (f32 activations) ------------------------------------------------------------------

MINFER_AVX2 float dot_f32(int64_t n, const void* w, const void* a) {
    const float* x = static_cast<const float*>(w);
    const float* y = static_cast<const float*>(a);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(y + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(y + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i), acc0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) sum += x[i] * y[i];
    return sum;
}

MINFER_AVX2 void axpy_f32(int64_t n, float a, const float* x, float* y) {
    const __m256 av = _mm256_set1_ps(a);
    int64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, _mm256_fmadd_ps(av, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

MINFER_AVX2 inline __m256 load8_f16(const uint16_t* p) {
    return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
}

MINFER_AVX2 float dot_f16(int64_t n, const void* w, const void* a) {
    const uint16_t* x = static_cast<const uint16_t*>(w);
    const float* y = static_cast<const float*>(a);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps(), acc2 = _mm256_setzero_ps(),
           acc3 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) {
        acc0 = _mm256_fmadd_ps(load8_f16(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(load8_f16(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
        acc2 = _mm256_fmadd_ps(load8_f16(x + i + 16), _mm256_loadu_ps(y + i + 16), acc2);
        acc3 = _mm256_fmadd_ps(load8_f16(x + i + 24), _mm256_loadu_ps(y + i + 24), acc3);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8_f16(x + i), _mm256_loadu_ps(y + i), acc0);
    float sum = hsum(_mm256_add_ps(_mm256_add_ps(acc0, acc1), _mm256_add_ps(acc2, acc3)));
    for (; i < n; ++i) sum += half(x[i]) * y[i];
    return sum;
}

MINFER_AVX2 inline __m256 load8_bf16(const uint16_t* p) {
    const __m256i v = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    return _mm256_castsi256_ps(_mm256_slli_epi32(v, 16));
}

MINFER_AVX2 float dot_bf16(int64_t n, const void* w, const void* a) {
    const uint16_t* x = static_cast<const uint16_t*>(w);
    const float* y = static_cast<const float*>(a);
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        acc0 = _mm256_fmadd_ps(load8_bf16(x + i), _mm256_loadu_ps(y + i), acc0);
        acc1 = _mm256_fmadd_ps(load8_bf16(x + i + 8), _mm256_loadu_ps(y + i + 8), acc1);
    }
    for (; i + 8 <= n; i += 8) acc0 = _mm256_fmadd_ps(load8_bf16(x + i), _mm256_loadu_ps(y + i), acc0);
    float sum = hsum(_mm256_add_ps(acc0, acc1));
    for (; i < n; ++i) {
        sum += bf16_to_f32(x[i]) * y[i];
    }
    return sum;
}

// ---- legacy formats ----------------------------------------------------------------------------------

MINFER_AVX2 float dot_q8_0(int64_t n, const void* w, const void* a) {
    const BlockQ8_0* x = static_cast<const BlockQ8_0*>(w);
    const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK; ++b) {
        prefetch_block(x + b);
        const __m256i p = dot_i8(load32(x[b].qs), load32(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[b].d) * half(y[b].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum(acc);
}

MINFER_AVX2 float dot_q4_0(int64_t n, const void* w, const void* a) {
    const BlockQ4_0* x = static_cast<const BlockQ4_0*>(w);
    const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
    const __m256i eight = _mm256_set1_epi8(8);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK; ++b) {
        prefetch_block(x + b);
        const __m256i q = _mm256_sub_epi8(unpack_nibbles(x[b].qs), eight);
        const __m256i p = dot_i8(q, load32(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[b].d) * half(y[b].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum(acc);
}

MINFER_AVX2 float dot_q4_1(int64_t n, const void* w, const void* a) {
    const BlockQ4_1* x = static_cast<const BlockQ4_1*>(w);
    const BlockQ8_1* y = static_cast<const BlockQ8_1*>(a);
    __m256 acc = _mm256_setzero_ps();
    float msum = 0.0f;
    for (int64_t b = 0; b < n / QK; ++b) {
        prefetch_block(x + b);
        const __m256i p = dot_u8(unpack_nibbles(x[b].qs), load32(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[b].d) * half(y[b].d)), _mm256_cvtepi32_ps(p), acc);
        msum += half(x[b].m) * half(y[b].s);
    }
    return hsum(acc) + msum;
}

// q5_0 codes minus 16 as signed bytes: a nibble whose fifth bit is clear becomes nibble | 0xF0, which is
// nibble - 16 in two's complement; with the bit set it stays nibble (= nibble + 16 - 16).
MINFER_AVX2 inline __m256i q5_0_codes(const BlockQ5_0& blk) {
    const __m256i pick = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,  //
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x(static_cast<long long>(0x8040201008040201ull));
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(static_cast<int>(load_u32_le(blk.qh))), pick);
    const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_or_si256(unpack_nibbles(blk.qs), _mm256_andnot_si256(set, _mm256_set1_epi8(static_cast<char>(0xF0))));
}

MINFER_AVX2 float dot_q5_0(int64_t n, const void* w, const void* a) {
    const BlockQ5_0* x = static_cast<const BlockQ5_0*>(w);
    const BlockQ8_0* y = static_cast<const BlockQ8_0*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK; ++b) {
        prefetch_block(x + b);
        const __m256i p = dot_i8(q5_0_codes(x[b]), load32(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[b].d) * half(y[b].d)), _mm256_cvtepi32_ps(p), acc);
    }
    return hsum(acc);
}

MINFER_AVX2 float dot_q5_1(int64_t n, const void* w, const void* a) {
    const BlockQ5_1* x = static_cast<const BlockQ5_1*>(w);
    const BlockQ8_1* y = static_cast<const BlockQ8_1*>(a);
    __m256 acc = _mm256_setzero_ps();
    float msum = 0.0f;
    for (int64_t b = 0; b < n / QK; ++b) {
        prefetch_block(x + b);
        const __m256i q = _mm256_or_si256(unpack_nibbles(x[b].qs), bits_to_0x10(load_u32_le(x[b].qh)));
        const __m256i p = dot_u8(q, load32(y[b].qs));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(half(x[b].d) * half(y[b].d)), _mm256_cvtepi32_ps(p), acc);
        msum += half(x[b].m) * half(y[b].s);
    }
    return hsum(acc) + msum;
}

// ---- K-quants (q8_K activations) ------------------------------------------------------------------------

// q2_K, q3_K, q6_K: 32 unsigned codes u (elements 128h + 32k .. +31) times the matching activations,
// weighted by the int16 scales of their two 16-element groups; returns 8 int32 partial sums.
MINFER_AVX2 inline __m256i scaled_dot32(__m256i u, const int8_t* act, __m256i scales) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, load32(act)), scales);
}

MINFER_AVX2 float dot_q2_K(int64_t n, const void* w, const void* a) {
    const BlockQ2_K* x = static_cast<const BlockQ2_K*>(w);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        prefetch_block(x + b);
        const __m128i sm = _mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales));
        const __m256i mins = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(sm, 4), _mm_set1_epi8(15)));
        const __m256i imin = _mm256_madd_epi16(mins, load32(y[b].bsums));
        const __m256i sc16 = _mm256_cvtepu8_epi16(_mm_and_si128(sm, _mm_set1_epi8(15)));
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load32(x[b].qs + 32 * h);
            const __m256i sh = scale_half(sc16, h);
            for (int k = 0; k < 4; ++k)
                isum = _mm256_add_epi32(
                    isum, scaled_dot32(byte_bits(q, 2 * k, 3), y[b].qs + 128 * h + 32 * k, scale_pair(sh, k)));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].dmin)), _mm256_cvtepi32_ps(imin), accm);
    }
    return hsum(acc) - hsum(accm);
}

MINFER_AVX2 float dot_q3_K(int64_t n, const void* w, const void* a) {
    const BlockQ3_K* x = static_cast<const BlockQ3_K*>(w);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        prefetch_block(x + b);
        uint32_t sw[4];
        unpack_scales_q3k_words(x[b].scales, sw);
        const __m128i sc8 = _mm_sub_epi8(_mm_setr_epi32(static_cast<int>(sw[0]), static_cast<int>(sw[1]),
                                                        static_cast<int>(sw[2]), static_cast<int>(sw[3])),
                                         _mm_set1_epi8(32));
        // code = u - 4 with u = low two bits | high bit << 2 in 0..7; the -4 comes back through bsums.
        const __m256i sc16 = _mm256_cvtepi8_epi16(sc8);
        __m256i isum = _mm256_slli_epi32(_mm256_madd_epi16(sc16, load32(y[b].bsums)), 2);
        isum = _mm256_sub_epi32(_mm256_setzero_si256(), isum);
        const __m256i hm = load32(x[b].hmask);
        for (int h = 0; h < 2; ++h) {
            const __m256i q = load32(x[b].qs + 32 * h);
            const __m256i sh = scale_half(sc16, h);
            for (int k = 0; k < 4; ++k) {
                const __m256i u =
                    _mm256_or_si256(byte_bits(q, 2 * k, 3), _mm256_slli_epi16(byte_bits(hm, 4 * h + k, 1), 2));
                isum = _mm256_add_epi32(isum, scaled_dot32(u, y[b].qs + 128 * h + 32 * k, scale_pair(sh, k)));
            }
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
    }
    return hsum(acc);
}

// q4_K / q5_K scales and mins as one vector: bytes 0..7 the scales, 8..15 the mins.
MINFER_AVX2 inline __m128i k4_scales_mins(const uint8_t* packed) {
    uint32_t w[4];
    unpack_scales_k4_words(packed, w);
    return _mm_setr_epi32(static_cast<int>(w[0]), static_cast<int>(w[1]), static_cast<int>(w[2]), static_cast<int>(w[3]));
}

// The mins term m_j * (bsums[2j] + bsums[2j+1]) as 8 int32 lanes.
MINFER_AVX2 inline __m256i k4_mins(__m128i sm, const int16_t* bsums) {
    const __m128i m = _mm_unpackhi_epi8(sm, sm);  // m0 m0 m1 m1 ... m7 m7
    return _mm256_madd_epi16(_mm256_cvtepu8_epi16(m), load32(bsums));
}

// Scale j of the eight int16 scales held in each 128-bit half of s16, broadcast to all 16 lanes (the
// shuffle control repeats the byte pair 2j, 2j + 1).
MINFER_AVX2 inline __m256i scale_of(__m256i s16, int j) {
    return _mm256_shuffle_epi8(s16, _mm256_set1_epi16(static_cast<short>((2 * j + 1) << 8 | 2 * j)));
}

// One q4_K / q5_K block: the scaled code sums (8 int32 lanes) and, through *mins, the mins term. qh may
// be null (q4_K).
MINFER_AVX2 inline __m256i k4_block(const uint8_t* scales, const uint8_t* qh_p, const uint8_t* qs, const BlockQ8_K& y,
                                    __m256i* mins) {
    const __m256i low4 = _mm256_set1_epi8(15);
    const __m128i sm = k4_scales_mins(scales);
    *mins = k4_mins(sm, y.bsums);
    const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));  // scales 0..7 in both halves
    const __m256i qh = qh_p ? load32(qh_p) : _mm256_setzero_si256();
    __m256i isum = _mm256_setzero_si256();
    for (int c = 0; c < 4; ++c) {
        const __m256i q = load32(qs + 32 * c);
        __m256i lo = _mm256_and_si256(q, low4);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
        if (qh_p) {
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(byte_bits(qh, 2 * c, 1), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(byte_bits(qh, 2 * c + 1, 1), 4));
        }
        const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(y.qs + 64 * c)), scale_of(s16, 2 * c));
        const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(y.qs + 64 * c + 32)), scale_of(s16, 2 * c + 1));
        isum = _mm256_add_epi32(isum, _mm256_add_epi32(p0, p1));
    }
    return isum;
}

MINFER_AVX2 float dot_q4_K(int64_t n, const void* w, const void* a) {
    const BlockQ4_K* x = static_cast<const BlockQ4_K*>(w);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        prefetch_block(x + b);
        __m256i imin;
        const __m256i isum = k4_block(x[b].scales, nullptr, x[b].qs, y[b], &imin);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].dmin)), _mm256_cvtepi32_ps(imin), accm);
    }
    return hsum(acc) - hsum(accm);
}

MINFER_AVX2 float dot_q5_K(int64_t n, const void* w, const void* a) {
    const BlockQ5_K* x = static_cast<const BlockQ5_K*>(w);
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
    __m256 acc = _mm256_setzero_ps(), accm = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        prefetch_block(x + b);
        __m256i imin;
        const __m256i isum = k4_block(x[b].scales, x[b].qh, x[b].qs, y[b], &imin);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].d)), _mm256_cvtepi32_ps(isum), acc);
        accm = _mm256_fmadd_ps(_mm256_set1_ps(y[b].d * half(x[b].dmin)), _mm256_cvtepi32_ps(imin), accm);
    }
    return hsum(acc) - hsum(accm);
}

template <int T>
MINFER_AVX2 void q6_K_rows(int64_t n, const BlockQ6_K* x, const BlockQ8_K* const* y, float* out, size_t out_stride);

MINFER_AVX2 float dot_q6_K(int64_t n, const void* w, const void* a) {
    const BlockQ8_K* y = static_cast<const BlockQ8_K*>(a);
    float out = 0.0f;
    q6_K_rows<1>(n, static_cast<const BlockQ6_K*>(w), &y, &out, 0);
    return out;
}

// ---- tiles: 2 weight rows x 4 activation rows (q8_0, q4_0, q5_0; q4_K, q6_K) --------------------------
// For prefill: each weight block is decoded once for four tokens, so a product costs the sign flip,
// maddubs, madd, conversion, scale multiply and FMA. The block scales of both sides come as f32 (converted
// once per matmul, broadcast from memory: the f16 conversions had been a third of the tile's cycles under
// perf) and the two rows are taken one after the other within a block, so the eight accumulators and
// the row's codes stay in the 16 registers (two accumulators had spilled). Every (row, token) pair runs
// exactly dot_q8_0's / dot_q4_0's / dot_q5_0's sequence of operations (the same scale product, the same
// accumulator, order and horizontal sum), so the results are those functions' bits.

// codes2 (the AVX-512 tiles): two rows' blocks at once, row a's codes in the low 32 bytes, row b's in the
// high 32. The nibble types unpack both rows in one pass: [a, b] and [a >> 4, b >> 4] put in the order
// [a, a >> 4, b, b >> 4] by one 64-bit-lane permutation; q5_0's fifth bits of both rows are one 64-bit mask.
MINFER_AVX512_WARNINGS_OFF
MINFER_AVX512_VNNI inline __m512i nibbles2(const uint8_t* a, const uint8_t* b) {
    const __m256i t = _mm256_inserti128_si256(_mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(a))),
                                              _mm_loadu_si128(reinterpret_cast<const __m128i*>(b)), 1);
    const __m512i both = _mm512_inserti64x4(_mm512_castsi256_si512(t), _mm256_srli_epi16(t, 4), 1);
    return _mm512_and_si512(_mm512_permutexvar_epi64(_mm512_setr_epi64(0, 1, 4, 5, 2, 3, 6, 7), both), _mm512_set1_epi8(15));
}
MINFER_AVX512_WARNINGS_ON

struct DecodeQ8_0 {
    using Block = BlockQ8_0;
    MINFER_AVX2 static __m256i codes(const Block& b) { return load32(b.qs); }
    MINFER_AVX512_VNNI static __m512i codes2(const Block& a, const Block& b) {
        return _mm512_inserti64x4(_mm512_castsi256_si512(load32(a.qs)), load32(b.qs), 1);
    }
};
struct DecodeQ4_0 {
    using Block = BlockQ4_0;
    MINFER_AVX2 static __m256i codes(const Block& b) { return _mm256_sub_epi8(unpack_nibbles(b.qs), _mm256_set1_epi8(8)); }
    MINFER_AVX512_VNNI static __m512i codes2(const Block& a, const Block& b) {
        return _mm512_sub_epi8(nibbles2(a.qs, b.qs), _mm512_set1_epi8(8));
    }
};
struct DecodeQ5_0 {
    using Block = BlockQ5_0;
    MINFER_AVX2 static __m256i codes(const Block& b) { return q5_0_codes(b); }
    // q5_0_codes' rule: a nibble whose fifth bit is clear becomes nibble - 16 (nibble | 0xF0).
    MINFER_AVX512_VNNI static __m512i codes2(const Block& a, const Block& b) {
        const __m512i nib = nibbles2(a.qs, b.qs);
        const __mmask64 clear = ~(static_cast<uint64_t>(load_u32_le(a.qh)) | static_cast<uint64_t>(load_u32_le(b.qh)) << 32);
        return _mm512_mask_sub_epi8(nib, clear, nib, _mm512_set1_epi8(16));
    }
};

// kVnni (CPUs with AVX-VNNI): one vpdpbusd takes the sums of four byte products into each int32 lane in
// place of maddubs + madd (the same exact sums: maddubs cannot saturate on these operands), 5 vector
// operations per pair and block instead of 6.
template <class D, bool kVnni>
MINFER_AVX2_VNNI void tile_q8(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, const float* w_scale,
                              const float* a_scale, size_t s_stride, float* out, size_t out_stride) {
    using B = typename D::Block;
    const B* x[2] = {static_cast<const B*>(w), reinterpret_cast<const B*>(static_cast<const uint8_t*>(w) + w_stride)};
    const float* xs[2] = {w_scale, w_scale + s_stride};
    const BlockQ8_0* y[4];
    const float* ys[4];
    for (int t = 0; t < 4; ++t) {
        y[t] = reinterpret_cast<const BlockQ8_0*>(static_cast<const uint8_t*>(a) + t * a_stride);
        ys[t] = a_scale + static_cast<size_t>(t) * s_stride;
    }
    __m256 acc[2][4];
    for (int r = 0; r < 2; ++r)
        for (int t = 0; t < 4; ++t) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK; ++b) {
        for (int r = 0; r < 2; ++r) {
            const __m256i q = D::codes(x[r][b]);
            const __m256i ax = _mm256_sign_epi8(q, q);
            const __m256 dw = _mm256_broadcast_ss(xs[r] + b);
            for (int t = 0; t < 4; ++t) {
                const __m256i sy = _mm256_sign_epi8(load32(y[t][b].qs), q);
                __m256i p;
                if constexpr (kVnni) p = _mm256_dpbusd_avx_epi32(_mm256_setzero_si256(), ax, sy);
                else p = _mm256_madd_epi16(_mm256_maddubs_epi16(ax, sy), _mm256_set1_epi16(1));
                const __m256 s = _mm256_mul_ps(dw, _mm256_broadcast_ss(ys[t] + b));  // = half(x.d) * half(y.d), as dot_q8_0
                acc[r][t] = _mm256_fmadd_ps(s, _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    for (int t = 0; t < 4; ++t)
        for (int r = 0; r < 2; ++r) out[static_cast<size_t>(t) * out_stride + static_cast<size_t>(r)] = hsum(acc[r][t]);
}

// AVX-512 VNNI (CPUs with 512-bit vpdpbusd): both weight rows in one 512-bit register, row 0's block in
// the low eight int32 lanes and row 1's in the high eight, against the token's block broadcast to both
// halves. Each token then costs one sign flip (a masked subtract), one vpdpbusd, one conversion, one
// scale multiply and one FMA for 64 products, where the 256-bit tiles spend those five on 32. Each half
// of an accumulator holds one (row, token) pair's eight lanes, summed in dot_q8_0's order and reduced by
// the same hsum, so the results keep vec_dot's bits.
MINFER_AVX512_WARNINGS_OFF
// One token's step: its block y (scale ys) against the two rows' codes (ax = |q|, neg = where q < 0; dw
// = the rows' scales, one per half), added to acc.
MINFER_AVX512_VNNI inline __m512 q8_512_step(__m512 acc, __m512i ax, __mmask64 neg, __m512 dw, const BlockQ8_0& y, float ys) {
    const __m512i yb = _mm512_broadcast_i64x4(load32(y.qs));
    const __m512i sy = _mm512_mask_sub_epi8(yb, neg, _mm512_setzero_si512(), yb);
    const __m512i p = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ax, sy);
    const __m512 s = _mm512_mul_ps(dw, _mm512_set1_ps(ys));  // = half(x.d) * half(y.d) in each half
    return _mm512_fmadd_ps(s, _mm512_cvtepi32_ps(p), acc);
}

// Row 0's sum (the low half) and row 1's (the high half) of one token.
MINFER_AVX512_VNNI inline void q8_512_store(float* out, __m512 acc) {
    out[0] = hsum(_mm512_castps512_ps256(acc));
    out[1] = hsum(_mm512_extractf32x8_ps(acc, 1));
}

// The four accumulators are named values, not an array: GCC kept an array of them in memory and stored
// all four every block (5% of a 1-thread prefill).
template <class D>
MINFER_AVX512_VNNI void tile_q8_512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, const float* w_scale,
                                    const float* a_scale, size_t s_stride, float* out, size_t out_stride) {
    using B = typename D::Block;
    const B* x0 = static_cast<const B*>(w);
    const B* x1 = reinterpret_cast<const B*>(static_cast<const uint8_t*>(w) + w_stride);
    const float* xs0 = w_scale;
    const float* xs1 = w_scale + s_stride;
    const auto* ab = static_cast<const uint8_t*>(a);
    const auto* y0 = reinterpret_cast<const BlockQ8_0*>(ab);
    const auto* y1 = reinterpret_cast<const BlockQ8_0*>(ab + a_stride);
    const auto* y2 = reinterpret_cast<const BlockQ8_0*>(ab + 2 * a_stride);
    const auto* y3 = reinterpret_cast<const BlockQ8_0*>(ab + 3 * a_stride);
    const float *ys0 = a_scale, *ys1 = a_scale + s_stride, *ys2 = a_scale + 2 * s_stride, *ys3 = a_scale + 3 * s_stride;
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    for (int64_t b = 0; b < n / QK; ++b) {
        const __m512i q = D::codes2(x0[b], x1[b]);
        const __m512i ax = _mm512_abs_epi8(q);
        const __mmask64 neg = _mm512_movepi8_mask(q);  // the token's codes flip sign where the weight's is negative
        const __m512 dw = _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_broadcast_ss(xs0 + b)), _mm256_broadcast_ss(xs1 + b), 1);
        acc0 = q8_512_step(acc0, ax, neg, dw, y0[b], ys0[b]);
        acc1 = q8_512_step(acc1, ax, neg, dw, y1[b], ys1[b]);
        acc2 = q8_512_step(acc2, ax, neg, dw, y2[b], ys2[b]);
        acc3 = q8_512_step(acc3, ax, neg, dw, y3[b], ys3[b]);
    }
    q8_512_store(out, acc0);
    q8_512_store(out + out_stride, acc1);
    q8_512_store(out + 2 * out_stride, acc2);
    q8_512_store(out + 3 * out_stride, acc3);
}
MINFER_AVX512_WARNINGS_ON

// e^x's constants, shared by exp_256 and exp_512: log2(e), ln2 in two parts (the high part has 12
// significant bits, so n times it is exact) and the Taylor coefficients of e^r from r^6 down to r^0.
constexpr float kLog2e = 1.44269504088896341f, kLn2Hi = 0.693145751953125f, kLn2Lo = 1.428606765330187045e-6f;
constexpr float kExpTaylor[7] = {1.0f / 720.0f, 1.0f / 120.0f, 1.0f / 24.0f, 1.0f / 6.0f, 0.5f, 1.0f, 1.0f};

// ---- attention over f32 K/V rows, AVX2 (the AVX-512 forms below, the same structure) --------------------

MINFER_AVX2 void attn_scores_256(int hd, const float* q, const float* k, size_t k_stride, int count, float scale, float* out) {
    int j = 0;
    for (; j + 4 <= count; j += 4) {
        const float* k0 = k + static_cast<size_t>(j) * k_stride;
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd; d += 8) {
            const __m256 qv = _mm256_loadu_ps(q + d);
            a0 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + d), a0);
            a1 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + k_stride + d), a1);
            a2 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 2 * k_stride + d), a2);
            a3 = _mm256_fmadd_ps(qv, _mm256_loadu_ps(k0 + 3 * k_stride + d), a3);
        }
        out[j] = hsum(a0) * scale;
        out[j + 1] = hsum(a1) * scale;
        out[j + 2] = hsum(a2) * scale;
        out[j + 3] = hsum(a3) * scale;
    }
    for (; j < count; ++j) {
        const float* kj = k + static_cast<size_t>(j) * k_stride;
        __m256 a = _mm256_setzero_ps();
        for (int d = 0; d < hd; d += 8) a = _mm256_fmadd_ps(_mm256_loadu_ps(q + d), _mm256_loadu_ps(kj + d), a);
        out[j] = hsum(a) * scale;
    }
}

// e^x for 8 lanes as exp_512 computes it, 2^n made in the exponent field (-126 <= n <= 127 for x in
// [-87.3, 88]); below -87.3 (and for -inf) 0, where exp_512 may give a subnormal; above 88, e^88 where
// exp_512 gives infinity from 88.73 (swiglu's g / (1 + e^-g) is then -0 or a number below 1e-36).
MINFER_AVX2 inline __m256 exp_256(__m256 x) {
    const __m256 lo = _mm256_set1_ps(-87.3f);
    const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_set1_ps(88.0f), _mm256_max_ps(lo, x));  // a NaN x stays (min and max return their second operand)
    const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kExpTaylor[0]);
    for (int i = 1; i < 7; ++i) p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kExpTaylor[i]));
    const __m256 two_n = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23));
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, two_n));
}

MINFER_AVX2 float attn_softmax_256(float* s, int len) {
    __m256 m = _mm256_set1_ps(-std::numeric_limits<float>::infinity());
    int j = 0;
    for (; j + 8 <= len; j += 8) m = _mm256_max_ps(_mm256_loadu_ps(s + j), m);  // a NaN lane keeps m's
    float mx = hsum_max(m);
    for (int t = j; t < len; ++t) mx = std::max(mx, s[t]);
    const __m256 mv = _mm256_set1_ps(mx);
    __m256d sum0 = _mm256_setzero_pd(), sum1 = sum0;
    for (j = 0; j + 8 <= len; j += 8) {
        const __m256 e = exp_256(_mm256_sub_ps(_mm256_loadu_ps(s + j), mv));
        _mm256_storeu_ps(s + j, e);
        sum0 = _mm256_add_pd(sum0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        sum1 = _mm256_add_pd(sum1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    alignas(32) double part[4];
    _mm256_store_pd(part, _mm256_add_pd(sum0, sum1));
    double sum = (part[0] + part[1]) + (part[2] + part[3]);
    if (j < len) {
        alignas(32) float buf[8] = {};
        std::copy(s + j, s + len, buf);
        const __m256 e = exp_256(_mm256_sub_ps(_mm256_load_ps(buf), mv));
        _mm256_store_ps(buf, e);
        for (int t = j; t < len; ++t) {
            s[t] = buf[t - j];
            sum += buf[t - j];
        }
    }
    return static_cast<float>(1.0 / sum);
}

// NV * 8 outputs in NV registers across the rows (a template, so that they stay registers).
template <int NV>
MINFER_AVX2 inline void weighted_pass_256(const float* p, float scale, const float* v, size_t v_stride, int count, float* o) {
    __m256 acc[NV];
    for (int i = 0; i < NV; ++i) acc[i] = _mm256_loadu_ps(o + 8 * i);
    for (int j = 0; j < count; ++j, v += v_stride) {
        const __m256 a = _mm256_set1_ps(p[j] * scale);
        for (int i = 0; i < NV; ++i) acc[i] = _mm256_fmadd_ps(a, _mm256_loadu_ps(v + 8 * i), acc[i]);
    }
    for (int i = 0; i < NV; ++i) _mm256_storeu_ps(o + 8 * i, acc[i]);
}

MINFER_AVX2 void attn_weighted_sum_256(int hd, const float* p, float scale, const float* v, size_t v_stride, int count, float* o) {
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) weighted_pass_256<8>(p, scale, v + d0, v_stride, count, o + d0);
    switch ((hd - d0) / 8) {
        case 1: weighted_pass_256<1>(p, scale, v + d0, v_stride, count, o + d0); break;
        case 2: weighted_pass_256<2>(p, scale, v + d0, v_stride, count, o + d0); break;
        case 3: weighted_pass_256<3>(p, scale, v + d0, v_stride, count, o + d0); break;
        case 4: weighted_pass_256<4>(p, scale, v + d0, v_stride, count, o + d0); break;
        case 5: weighted_pass_256<5>(p, scale, v + d0, v_stride, count, o + d0); break;
        case 6: weighted_pass_256<6>(p, scale, v + d0, v_stride, count, o + d0); break;
        case 7: weighted_pass_256<7>(p, scale, v + d0, v_stride, count, o + d0); break;
        default: break;
    }
}

// swiglu: g[i] = g[i] / (1 + e^-g[i]) * u[i], the generic loop's operations with e^ 8 at a time.
MINFER_AVX2 void silu_mul_256(float* g, const float* u, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 x = _mm256_loadu_ps(g + i);
        const __m256 e = exp_256(_mm256_sub_ps(_mm256_setzero_ps(), x));
        _mm256_storeu_ps(g + i, _mm256_mul_ps(_mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e)), _mm256_loadu_ps(u + i)));
    }
    for (; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

// ---- attention over f32 K/V rows, AVX-512 -------------------------------------------------------------
MINFER_AVX512_WARNINGS_OFF

// Scores of four keys at a time, each its own chain of hd / 16 FMAs (independent chains hide the FMA
// latency), reduced by _mm512_reduce_add_ps.
MINFER_AVX512_VNNI void attn_scores_512(int hd, const float* q, const float* k, size_t k_stride, int count, float scale, float* out) {
    int j = 0;
    for (; j + 4 <= count; j += 4) {
        const float* k0 = k + static_cast<size_t>(j) * k_stride;
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int d = 0; d < hd; d += 16) {
            const __m512 qv = _mm512_loadu_ps(q + d);
            a0 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + d), a0);
            a1 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + k_stride + d), a1);
            a2 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + 2 * k_stride + d), a2);
            a3 = _mm512_fmadd_ps(qv, _mm512_loadu_ps(k0 + 3 * k_stride + d), a3);
        }
        out[j] = _mm512_reduce_add_ps(a0) * scale;
        out[j + 1] = _mm512_reduce_add_ps(a1) * scale;
        out[j + 2] = _mm512_reduce_add_ps(a2) * scale;
        out[j + 3] = _mm512_reduce_add_ps(a3) * scale;
    }
    for (; j < count; ++j) {
        const float* kj = k + static_cast<size_t>(j) * k_stride;
        __m512 a = _mm512_setzero_ps();
        for (int d = 0; d < hd; d += 16) a = _mm512_fmadd_ps(_mm512_loadu_ps(q + d), _mm512_loadu_ps(kj + d), a);
        out[j] = _mm512_reduce_add_ps(a) * scale;
    }
}

// e^x for 16 lanes: x = n ln2 + r (n rounded, ln2 in two parts), e^r by its Taylor series to r^6 (|r| <=
// ln2 / 2: the first term left out is below 1.3e-7 relative), times 2^n by vscalefps (which underflows to
// 0 and keeps a NaN). x is clamped at -104 (e^-104 is below the smallest float), so -inf gives 0.
MINFER_AVX512_VNNI inline __m512 exp_512(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-104.0f), x);  // a NaN x stays (max returns its second operand then)
    const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kExpTaylor[0]);
    for (int i = 1; i < 7; ++i) p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kExpTaylor[i]));
    return _mm512_scalef_ps(p, n);
}

// s[j] = e^(s[j] - max) for j < len (a NaN score is left out of the max, as std::max leaves it); returns
// 1 / (their sum, accumulated in double).
MINFER_AVX512_VNNI float attn_softmax_512(float* s, int len) {
    __m512 m = _mm512_set1_ps(-std::numeric_limits<float>::infinity());
    int j = 0;
    for (; j + 16 <= len; j += 16) m = _mm512_max_ps(_mm512_loadu_ps(s + j), m);  // a NaN lane keeps m's
    const __mmask16 tail = static_cast<__mmask16>((1u << (len - j)) - 1);
    if (tail) m = _mm512_mask_max_ps(m, tail, _mm512_maskz_loadu_ps(tail, s + j), m);
    const __m512 mx = _mm512_set1_ps(_mm512_reduce_max_ps(m));
    __m512d sum0 = _mm512_setzero_pd(), sum1 = sum0;
    for (j = 0; j + 16 <= len; j += 16) {
        const __m512 e = exp_512(_mm512_sub_ps(_mm512_loadu_ps(s + j), mx));
        _mm512_storeu_ps(s + j, e);
        sum0 = _mm512_add_pd(sum0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        sum1 = _mm512_add_pd(sum1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    if (tail) {
        const __m512 e = _mm512_maskz_mov_ps(tail, exp_512(_mm512_sub_ps(_mm512_maskz_loadu_ps(tail, s + j), mx)));
        _mm512_mask_storeu_ps(s + j, tail, e);
        sum0 = _mm512_add_pd(sum0, _mm512_cvtps_pd(_mm512_castps512_ps256(e)));
        sum1 = _mm512_add_pd(sum1, _mm512_cvtps_pd(_mm512_extractf32x8_ps(e, 1)));
    }
    return static_cast<float>(1.0 / _mm512_reduce_add_pd(_mm512_add_pd(sum0, sum1)));
}

// o[d] += sum over j of (p[j] * scale) v_j[d], one FMA per j in order of j (axpy's operations), with 64
// of o's values in four registers for the whole run of rows.
MINFER_AVX512_VNNI void attn_weighted_sum_512(int hd, const float* p, float scale, const float* v, size_t v_stride, int count, float* o) {
    for (int d0 = 0; d0 < hd; d0 += 64) {
        const int nv = std::min(4, (hd - d0) / 16);
        __m512 o0 = _mm512_loadu_ps(o + d0);
        __m512 o1 = nv > 1 ? _mm512_loadu_ps(o + d0 + 16) : o0, o2 = nv > 2 ? _mm512_loadu_ps(o + d0 + 32) : o0,
               o3 = nv > 3 ? _mm512_loadu_ps(o + d0 + 48) : o0;
        const float* vj = v + d0;
        for (int j = 0; j < count; ++j, vj += v_stride) {
            const __m512 a = _mm512_set1_ps(p[j] * scale);
            o0 = _mm512_fmadd_ps(a, _mm512_loadu_ps(vj), o0);
            if (nv > 1) o1 = _mm512_fmadd_ps(a, _mm512_loadu_ps(vj + 16), o1);
            if (nv > 2) o2 = _mm512_fmadd_ps(a, _mm512_loadu_ps(vj + 32), o2);
            if (nv > 3) o3 = _mm512_fmadd_ps(a, _mm512_loadu_ps(vj + 48), o3);
        }
        _mm512_storeu_ps(o + d0, o0);
        if (nv > 1) _mm512_storeu_ps(o + d0 + 16, o1);
        if (nv > 2) _mm512_storeu_ps(o + d0 + 32, o2);
        if (nv > 3) _mm512_storeu_ps(o + d0 + 48, o3);
    }
}

// swiglu: g[i] = g[i] / (1 + e^-g[i]) * u[i], e^ 16 at a time (the tail masked).
MINFER_AVX512_VNNI void silu_mul_512(float* g, const float* u, size_t n) {
    const __m512 one = _mm512_set1_ps(1.0f);
    for (size_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? static_cast<__mmask16>(0xFFFF) : static_cast<__mmask16>((1u << (n - i)) - 1);
        const __m512 x = _mm512_maskz_loadu_ps(m, g + i);
        const __m512 e = exp_512(_mm512_sub_ps(_mm512_setzero_ps(), x));
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(_mm512_div_ps(x, _mm512_add_ps(one, e)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}
MINFER_AVX512_WARNINGS_ON

// q4_K: one weight row against four tokens at a time (the codes and scales of a super-block decoded once
// for the four; two rows would not fit the 16 vector registers), each pair summed exactly as dot_q4_K sums
// it: k4_block's order within a super-block, the same two accumulators, the same final difference.
MINFER_AVX2 void tile_q4_K_row(int64_t n, const BlockQ4_K* x, const BlockQ8_K* const* y, float* out, size_t out_stride) {
    const __m256i low4 = _mm256_set1_epi8(15);
    __m256 acc[4], accm[4];
    for (int t = 0; t < 4; ++t) acc[t] = accm[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const __m128i sm = k4_scales_mins(x[b].scales);
        const __m256i s16 = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm));
        __m256i isum[4];
        for (int t = 0; t < 4; ++t) isum[t] = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c) {
            const __m256i q = load32(x[b].qs + 32 * c);
            const __m256i lo = _mm256_and_si256(q, low4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), low4);
            const __m256i s0 = scale_of(s16, 2 * c), s1 = scale_of(s16, 2 * c + 1);
            for (int t = 0; t < 4; ++t) {
                const __m256i p0 = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, load32(y[t][b].qs + 64 * c)), s0);
                const __m256i p1 = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, load32(y[t][b].qs + 64 * c + 32)), s1);
                isum[t] = _mm256_add_epi32(isum[t], _mm256_add_epi32(p0, p1));
            }
        }
        for (int t = 0; t < 4; ++t) {
            const __m256i imin = k4_mins(sm, y[t][b].bsums);
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][b].d * half(x[b].d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
            accm[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][b].d * half(x[b].dmin)), _mm256_cvtepi32_ps(imin), accm[t]);
        }
    }
    for (int t = 0; t < 4; ++t) out[static_cast<size_t>(t) * out_stride] = hsum(acc[t]) - hsum(accm[t]);
}

// q4_K by AVX-512: both rows in one 512-bit register as tile_q8_512 holds them (row 0 in the low half,
// row 1 in the high), each half doing tile_q4_K_row's operations for its row: the same integer sums,
// the same two accumulators and final difference, so vec_dot's bits. A 32-byte chunk of codes costs a
// token two maddubs, two madd and two adds for 128 products where the 256-bit row spends them on 64.
MINFER_AVX512_WARNINGS_OFF
MINFER_AVX512_VNNI inline __m512 two_rows(float a, float b) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm256_set1_ps(a)), _mm256_set1_ps(b), 1);
}
MINFER_AVX512_VNNI inline __m512i two_rows(__m256i a, __m256i b) { return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1); }

// One token's integer sums of a chunk pair: lo / hi nibbles of both rows against the token's 64 codes.
MINFER_AVX512_VNNI inline __m512i q4k_512_chunk(__m512i isum, __m512i lo, __m512i hi, __m512i sc0, __m512i sc1, const int8_t* yq) {
    const __m512i p0 = _mm512_madd_epi16(_mm512_maddubs_epi16(lo, _mm512_broadcast_i64x4(load32(yq))), sc0);
    const __m512i p1 = _mm512_madd_epi16(_mm512_maddubs_epi16(hi, _mm512_broadcast_i64x4(load32(yq + 32))), sc1);
    return _mm512_add_epi32(isum, _mm512_add_epi32(p0, p1));
}

MINFER_AVX512_VNNI void tile_q4_K_512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, const float*, const float*,
                                      size_t, float* out, size_t out_stride) {
    const auto* x0 = static_cast<const BlockQ4_K*>(w);
    const auto* x1 = reinterpret_cast<const BlockQ4_K*>(static_cast<const uint8_t*>(w) + w_stride);
    const auto* ab = static_cast<const uint8_t*>(a);
    const BlockQ8_K* y[4];
    for (int t = 0; t < 4; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(ab + t * a_stride);
    const __m512i low4 = _mm512_set1_epi8(15);
    __m512 acc0 = _mm512_setzero_ps(), acc1 = acc0, acc2 = acc0, acc3 = acc0;
    __m512 accm0 = acc0, accm1 = acc0, accm2 = acc0, accm3 = acc0;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const __m128i sm0 = k4_scales_mins(x0[b].scales), sm1 = k4_scales_mins(x1[b].scales);
        // Each 128-bit lane holds one row's eight int16 scales: [row 0, row 0, row 1, row 1].
        const __m512i s16 = two_rows(_mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm0)), _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(sm1)));
        __m512i is0 = _mm512_setzero_si512(), is1 = is0, is2 = is0, is3 = is0;
        for (int c = 0; c < 4; ++c) {
            const __m512i q = two_rows(load32(x0[b].qs + 32 * c), load32(x1[b].qs + 32 * c));
            const __m512i lo = _mm512_and_si512(q, low4), hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), low4);
            const __m512i sc0 = _mm512_shuffle_epi8(s16, _mm512_set1_epi16(static_cast<short>((4 * c + 1) << 8 | 4 * c)));
            const __m512i sc1 = _mm512_shuffle_epi8(s16, _mm512_set1_epi16(static_cast<short>((4 * c + 3) << 8 | (4 * c + 2))));
            is0 = q4k_512_chunk(is0, lo, hi, sc0, sc1, y[0][b].qs + 64 * c);
            is1 = q4k_512_chunk(is1, lo, hi, sc0, sc1, y[1][b].qs + 64 * c);
            is2 = q4k_512_chunk(is2, lo, hi, sc0, sc1, y[2][b].qs + 64 * c);
            is3 = q4k_512_chunk(is3, lo, hi, sc0, sc1, y[3][b].qs + 64 * c);
        }
        const float d0 = half(x0[b].d), d1 = half(x1[b].d), m0 = half(x0[b].dmin), m1 = half(x1[b].dmin);
        auto finish = [&](const BlockQ8_K& yb, __m512i is, __m512& acc, __m512& accm) MINFER_AVX512_VNNI {
            const __m512i imin = two_rows(k4_mins(sm0, yb.bsums), k4_mins(sm1, yb.bsums));
            acc = _mm512_fmadd_ps(two_rows(yb.d * d0, yb.d * d1), _mm512_cvtepi32_ps(is), acc);
            accm = _mm512_fmadd_ps(two_rows(yb.d * m0, yb.d * m1), _mm512_cvtepi32_ps(imin), accm);
        };
        finish(y[0][b], is0, acc0, accm0);
        finish(y[1][b], is1, acc1, accm1);
        finish(y[2][b], is2, acc2, accm2);
        finish(y[3][b], is3, acc3, accm3);
    }
    auto store = [&](float* o, __m512 acc, __m512 accm) MINFER_AVX512_VNNI {
        o[0] = hsum(_mm512_castps512_ps256(acc)) - hsum(_mm512_castps512_ps256(accm));
        o[1] = hsum(_mm512_extractf32x8_ps(acc, 1)) - hsum(_mm512_extractf32x8_ps(accm, 1));
    };
    store(out, acc0, accm0);
    store(out + out_stride, acc1, accm1);
    store(out + 2 * out_stride, acc2, accm2);
    store(out + 3 * out_stride, acc3, accm3);
}
MINFER_AVX512_WARNINGS_ON

// q6_K: one row against T tokens (T = 1: the decode dot product; T = 4: the prefill tile), the row's codes
// decoded once per super-block for all T; per token the -32 term from bsums first, then h, k.
template <int T>
MINFER_AVX2 void q6_K_rows(int64_t n, const BlockQ6_K* x, const BlockQ8_K* const* y, float* out, size_t out_stride) {
    __m256 acc[T];
    for (int t = 0; t < T; ++t) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < n / QK_K; ++b) {
        if (T == 1) prefetch_block(x + b);  // decode streams the row
        // code = u - 32 with u in 0..63; the -32 comes back through bsums.
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x[b].scales)));
        __m256i isum[T];
        for (int t = 0; t < T; ++t)
            isum[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(_mm256_madd_epi16(sc16, load32(y[t][b].bsums)), 5));
        for (int h = 0; h < 2; ++h) {
            const __m256i ql0 = load32(x[b].ql + 64 * h);
            const __m256i ql1 = load32(x[b].ql + 64 * h + 32);
            const __m256i qh = load32(x[b].qh + 32 * h);
            const __m256i sh = scale_half(sc16, h);
            for (int k = 0; k < 4; ++k) {
                const __m256i l4 = byte_bits(k & 1 ? ql1 : ql0, k < 2 ? 0 : 4, 15);
                const __m256i u = _mm256_or_si256(l4, _mm256_slli_epi16(byte_bits(qh, 2 * k, 3), 4));
                const __m256i sp = scale_pair(sh, k);
                for (int t = 0; t < T; ++t) isum[t] = _mm256_add_epi32(isum[t], scaled_dot32(u, y[t][b].qs + 128 * h + 32 * k, sp));
            }
        }
        for (int t = 0; t < T; ++t)
            acc[t] = _mm256_fmadd_ps(_mm256_set1_ps(y[t][b].d * half(x[b].d)), _mm256_cvtepi32_ps(isum[t]), acc[t]);
    }
    for (int t = 0; t < T; ++t) out[static_cast<size_t>(t) * out_stride] = hsum(acc[t]);
}

// q6_K by AVX-512: both rows in one register as tile_q4_K_512 holds them, each half doing q6_K_rows<4>'s
// operations for its row (the -32 term from bsums first, then h, k), so vec_dot's bits.
MINFER_AVX512_WARNINGS_OFF
MINFER_AVX512_VNNI inline __m512i byte_bits_512(__m512i v, int s, int mask) {
    return _mm512_and_si512(_mm512_srli_epi16(v, s), _mm512_set1_epi8(static_cast<char>(mask)));
}

MINFER_AVX512_VNNI void tile_q6_K_512(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, const float*, const float*,
                                      size_t, float* out, size_t out_stride) {
    const auto* x0 = static_cast<const BlockQ6_K*>(w);
    const auto* x1 = reinterpret_cast<const BlockQ6_K*>(static_cast<const uint8_t*>(w) + w_stride);
    const auto* ab = static_cast<const uint8_t*>(a);
    const BlockQ8_K* y[4];
    for (int t = 0; t < 4; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(ab + t * a_stride);
    __m512 acc[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()};
    for (int64_t b = 0; b < n / QK_K; ++b) {
        // Each row's 16 int16 scales in its 256-bit half.
        const __m512i sc16 = two_rows(_mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x0[b].scales))),
                                      _mm256_cvtepi8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(x1[b].scales))));
        __m512i is[4];
        for (int t = 0; t < 4; ++t)
            is[t] = _mm512_sub_epi32(_mm512_setzero_si512(),
                                     _mm512_slli_epi32(_mm512_madd_epi16(sc16, _mm512_broadcast_i64x4(load32(y[t][b].bsums))), 5));
        for (int h = 0; h < 2; ++h) {
            const __m512i ql0 = two_rows(load32(x0[b].ql + 64 * h), load32(x1[b].ql + 64 * h));
            const __m512i ql1 = two_rows(load32(x0[b].ql + 64 * h + 32), load32(x1[b].ql + 64 * h + 32));
            const __m512i qh = two_rows(load32(x0[b].qh + 32 * h), load32(x1[b].qh + 32 * h));
            // scale_half per row: the row's 128-bit half h in both 128-bit lanes of its 256-bit half.
            const __m512i sh = h ? _mm512_shuffle_i64x2(sc16, sc16, 0xF5) : _mm512_shuffle_i64x2(sc16, sc16, 0xA0);
            for (int k = 0; k < 4; ++k) {
                const __m512i l4 = byte_bits_512(k & 1 ? ql1 : ql0, k < 2 ? 0 : 4, 15);
                const __m512i u = _mm512_or_si512(l4, _mm512_slli_epi16(byte_bits_512(qh, 2 * k, 3), 4));
                const __m512i sp = _mm512_shuffle_epi8(sh, _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(kPairShuffle[k]))));
                for (int t = 0; t < 4; ++t)
                    is[t] = _mm512_add_epi32(
                        is[t], _mm512_madd_epi16(_mm512_maddubs_epi16(u, _mm512_broadcast_i64x4(load32(y[t][b].qs + 128 * h + 32 * k))), sp));
            }
        }
        const float d0 = half(x0[b].d), d1 = half(x1[b].d);
        for (int t = 0; t < 4; ++t) acc[t] = _mm512_fmadd_ps(two_rows(y[t][b].d * d0, y[t][b].d * d1), _mm512_cvtepi32_ps(is[t]), acc[t]);
    }
    for (int t = 0; t < 4; ++t) {
        out[static_cast<size_t>(t) * out_stride] = hsum(_mm512_castps512_ps256(acc[t]));
        out[static_cast<size_t>(t) * out_stride + 1] = hsum(_mm512_extractf32x8_ps(acc[t], 1));
    }
}
MINFER_AVX512_WARNINGS_ON

// Two rows, one after the other, by a one-row x four-token kernel.
template <class Block, void (*Row)(int64_t, const Block*, const BlockQ8_K* const*, float*, size_t)>
MINFER_AVX2 void tile_k(int64_t n, const void* w, size_t w_stride, const void* a, size_t a_stride, const float*, const float*, size_t,
                        float* out, size_t out_stride) {
    const BlockQ8_K* y[4];
    for (int t = 0; t < 4; ++t) y[t] = reinterpret_cast<const BlockQ8_K*>(static_cast<const uint8_t*>(a) + t * a_stride);
    for (int r = 0; r < 2; ++r) Row(n, reinterpret_cast<const Block*>(static_cast<const uint8_t*>(w) + r * w_stride), y, out + r, out_stride);
}

}  // namespace

AxpyFn avx2_axpy() { return axpy_f32; }

AttnKernels avx512_attn() { return {attn_scores_512, attn_softmax_512, attn_weighted_sum_512}; }
AttnKernels avx2_attn() { return {attn_scores_256, attn_softmax_256, attn_weighted_sum_256}; }
SiluMulFn avx512_silu_mul() { return silu_mul_512; }
SiluMulFn avx2_silu_mul() { return silu_mul_256; }

// The q8_0 family's tile in the asked form.
template <class D>
VecDotTileFn tile_q8_of(TileIsa isa) {
    switch (isa) {
        case TileIsa::avx512_vnni: return tile_q8_512<D>;
        case TileIsa::avx_vnni: return tile_q8<D, true>;
        default: return tile_q8<D, false>;
    }
}

VecDotTileFn avx2_vec_dot_tile(Type weight, TileIsa isa) {
    switch (weight) {
        case Type::Q4_K: return isa == TileIsa::avx512_vnni ? tile_q4_K_512 : tile_k<BlockQ4_K, tile_q4_K_row>;
        case Type::Q6_K: return isa == TileIsa::avx512_vnni ? tile_q6_K_512 : tile_k<BlockQ6_K, q6_K_rows<4>>;
        case Type::Q8_0: return tile_q8_of<DecodeQ8_0>(isa);
        case Type::Q4_0: return tile_q8_of<DecodeQ4_0>(isa);
        case Type::Q5_0: return tile_q8_of<DecodeQ5_0>(isa);
        default: return nullptr;
    }
}

// The largest |v| of n floats (n a multiple of 8), NaN skipped as std::max skips it.
MINFER_AVX2 inline float abs_max(const float* x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 m = _mm256_setzero_ps();
    for (int j = 0; j < n; j += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + j)), m);  // a NaN lane keeps m's
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    return _mm_cvtss_f32(m4);
}

// The codes of x[0..31] * id as quant.cpp's code(v, -127, 127) makes them (rounded to nearest even,
// clamped, NaN to -127): stored in order at qs, and returned as int32, eight per vector.
MINFER_AVX2 inline void codes_i8(const float* x, __m256 id, int8_t* qs, __m256i (&r)[4]) {
    const __m256 lo = _mm256_set1_ps(-127.0f), hi = _mm256_set1_ps(127.0f);
    const __m256i lo_i = _mm256_set1_epi32(-127), hi_i = _mm256_set1_epi32(127);
    for (int k = 0; k < 4; ++k) {
        const __m256 q = _mm256_mul_ps(_mm256_loadu_ps(x + 8 * k), id);
        const __m256i c = _mm256_blendv_epi8(lo_i, _mm256_cvtps_epi32(q), _mm256_castps_si256(_mm256_cmp_ps(q, lo, _CMP_GT_OQ)));
        r[k] = _mm256_blendv_epi8(c, hi_i, _mm256_castps_si256(_mm256_cmp_ps(q, hi, _CMP_GT_OQ)));
    }
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(r[0], r[1]), _mm256_packs_epi32(r[2], r[3]));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
}

// The sum of eight int32 lanes.
MINFER_AVX2 inline int hsum_i32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}

// q8_0 quantization (quant.cpp's quant_q8_0, byte for byte): the scale from the largest magnitude as an
// f16, then codes_i8.
MINFER_AVX2 void quant_q8_0_avx2(const float* x, void* dst, int64_t nb) {
    BlockQ8_0* b = static_cast<BlockQ8_0*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += QK, ++b) {
        const uint16_t d16 = f32_to_f16(std::clamp(abs_max(x, QK) / 127.0f, -65504.0f, 65504.0f));
        const float d = f16_to_f32(d16);
        __m256i r[4];
        codes_i8(x, _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f), b->qs, r);
        b->d = d16;
    }
}

QuantRowFn avx2_quant_q8_0() { return quant_q8_0_avx2; }

// q8_K quantization (quant.cpp's quant_q8_K, byte for byte): d = the largest magnitude / 127 as f32 (0
// when infinite), codes_i8, and the sum of every 16 codes.
MINFER_AVX2 void quant_q8_K_avx2(const float* x, void* dst, int64_t nb) {
    BlockQ8_K* b = static_cast<BlockQ8_K*>(dst);
    for (int64_t i = 0; i < nb; ++i, x += QK_K, ++b) {
        const float amax = abs_max(x, QK_K);
        const float d = std::isfinite(amax) ? amax / 127.0f : 0.0f;
        const __m256 id = _mm256_set1_ps(d != 0.0f ? 1.0f / d : 0.0f);
        for (int c = 0; c < QK_K / 32; ++c) {
            __m256i r[4];
            codes_i8(x + 32 * c, id, b->qs + 32 * c, r);
            b->bsums[2 * c] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(r[0], r[1])));
            b->bsums[2 * c + 1] = static_cast<int16_t>(hsum_i32(_mm256_add_epi32(r[2], r[3])));
        }
        b->d = d;
    }
}

QuantRowFn avx2_quant_q8_K() { return quant_q8_K_avx2; }

// The f16 scales at the start of each block, eight gathered into one vector and converted by F16C (exact,
// as the software conversion).
MINFER_AVX2 void block_scales_f16c(const uint8_t* rows_base, size_t stride, int64_t rows, int64_t nb, size_t block_bytes, float* out) {
    auto f16_at = [&](const uint8_t* p) {
        uint16_t d;
        std::memcpy(&d, p, 2);
        return d;
    };
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = rows_base + static_cast<size_t>(r) * stride;
        float* o = out + r * nb;
        int64_t b = 0;
        for (; b + 8 <= nb; b += 8) {
            const uint8_t* p = row + static_cast<size_t>(b) * block_bytes;
            const __m128i h = _mm_setr_epi16(static_cast<short>(f16_at(p)), static_cast<short>(f16_at(p + block_bytes)),
                                             static_cast<short>(f16_at(p + 2 * block_bytes)), static_cast<short>(f16_at(p + 3 * block_bytes)),
                                             static_cast<short>(f16_at(p + 4 * block_bytes)), static_cast<short>(f16_at(p + 5 * block_bytes)),
                                             static_cast<short>(f16_at(p + 6 * block_bytes)), static_cast<short>(f16_at(p + 7 * block_bytes)));
            _mm256_storeu_ps(o + b, _mm256_cvtph_ps(h));
        }
        for (; b < nb; ++b) o[b] = _cvtsh_ss(f16_at(row + static_cast<size_t>(b) * block_bytes));
    }
}

BlockScalesFn avx2_block_scales() { return block_scales_f16c; }

VecDotFn avx2_vec_dot(Type weight) {
    switch (weight) {
        case Type::F32: return dot_f32;
        case Type::F16: return dot_f16;
        case Type::BF16: return dot_bf16;
        case Type::Q4_0: return dot_q4_0;
        case Type::Q4_1: return dot_q4_1;
        case Type::Q5_0: return dot_q5_0;
        case Type::Q5_1: return dot_q5_1;
        case Type::Q8_0: return dot_q8_0;
        case Type::Q2_K: return dot_q2_K;
        case Type::Q3_K: return dot_q3_K;
        case Type::Q4_K: return dot_q4_K;
        case Type::Q5_K: return dot_q5_K;
        case Type::Q6_K: return dot_q6_K;
        default: return nullptr;
    }
}

}  // namespace minfer::quant::detail

#else  // not x86: no AVX2 kernels

namespace minfer::quant::detail {
VecDotFn avx2_vec_dot(Type) { return nullptr; }
VecDotTileFn avx2_vec_dot_tile(Type, TileIsa) { return nullptr; }
AxpyFn avx2_axpy() { return nullptr; }
AttnKernels avx512_attn() { return {}; }
AttnKernels avx2_attn() { return {}; }
SiluMulFn avx512_silu_mul() { return nullptr; }
SiluMulFn avx2_silu_mul() { return nullptr; }
QuantRowFn avx2_quant_q8_0() { return nullptr; }
BlockScalesFn avx2_block_scales() { return nullptr; }
QuantRowFn avx2_quant_q8_K() { return nullptr; }
}  // namespace minfer::quant::detail

#endif
