// Portable quantization code: dequantizers, quantizers, activation preparation and dot products for every
// supported type, plus the run-time dispatch to the AVX2 kernels in quant_avx2.cpp. Layouts and formulas
// are documented in quant/blocks.h.
#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif
#include "quant/quant.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"
#include "quant/blocks.h"
#include "quant/decode.h"
#include "quant/f16.h"
#include "quant/quant_internal.h"

namespace minfer::quant {
namespace {

using detail::unpack_scales_k4;
using detail::unpack_scales_q3k;

// ---- errors and sizes ---------------------------------------------------------------------------------

[[noreturn]] void unsupported(Type t, const char* what) {
    const TypeInfo& info = type_info(t);
    if (info.name[0] != '\0') fail(MINFER_ERR_UNSUPPORTED, "%s: tensor type %s is not supported", what, info.name);
    fail(MINFER_ERR_UNSUPPORTED, "%s: unknown tensor type id %d", what, static_cast<int>(t));
}

// Blocks in a row of n elements of type t; fails on types without a block geometry and on lengths that
// are negative or not a whole number of blocks.
int64_t block_count(Type t, int64_t n, const char* what) {
    const TypeInfo& info = type_info(t);
    if (info.block_elems <= 0) unsupported(t, what);
    if (n < 0 || n % info.block_elems != 0)
        fail(MINFER_ERR_INVALID_ARGUMENT, "%s: %lld elements is not a whole number of %s blocks (%d elements)", what,
             static_cast<long long>(n), info.name, info.block_elems);
    return n / info.block_elems;
}

// ---- small numeric helpers ----------------------------------------------------------------------------

// v rounded to the nearest integer (ties to even) after clamping to [lo, hi]; NaN gives lo.
inline int code(float v, int lo, int hi) {
    if (!(v > static_cast<float>(lo))) return lo;
    if (v > static_cast<float>(hi)) return hi;
    return static_cast<int>(std::lrintf(v));
}

// f32 -> f16 bits, saturating at the largest finite half so a scale never becomes infinite.
inline uint16_t f16_sat(float x) {
    constexpr float kMax = 65504.0f;
    return f32_to_f16(std::clamp(x, -kMax, kMax));
}

inline float h2f(uint16_t h) { return f16_to_f32(h); }

template <typename B>
inline const B* as(const void* p) {
    return static_cast<const B*>(p);
}
template <typename B>
inline B* as(void* p) {
    return static_cast<B*>(p);
}

// ---- block decoders (quant/decode.h, shared with the CUDA kernels) --------------------------------------

// The codes of one whole block of type T in element order (dec::codes8: q - 8 for q4_0, q for q4_1, ...).
template <Type T>
void codes_block(const void* block, int8_t* q) {
    constexpr int kElems = T == Type::Q4_0 || T == Type::Q4_1 || T == Type::Q5_0 || T == Type::Q5_1 || T == Type::Q8_0 ? QK : QK_K;
    const uint8_t* b = static_cast<const uint8_t*>(block);
    for (int e = 0; e < kElems; e += 8) {
        int v[8];
        dec::codes8<T>(b, e, v);
        for (int i = 0; i < 8; ++i) q[e + i] = static_cast<int8_t>(v[i]);
    }
}

// ---- dequantization: read nb blocks at src, write nb * block_elems floats to y ------------------------

template <Type T>
void deq_blocks(const void* src, float* y, int64_t nb) {
    const int64_t n = nb * type_info(T).block_elems;
    const uint8_t* row = static_cast<const uint8_t*>(src);
    for (int64_t e0 = 0; e0 < n; e0 += 8) dec::decode8<T>(row, e0, y + e0);
}

// ---- scale search for the quantizers -------------------------------------------------------------------

// Signed scale s for x[0..n) with codes in [-L, L-1] (x ~ s * code). Tries inverse scales that map the
// largest-magnitude value to points near either end of the code range, refits s by least squares for
// the codes each produces, and keeps the one with the smallest squared error. 0 for an all-zero input.
float fit_symmetric(const float* x, int n, int L) {
    float amax = 0.0f, vmax = 0.0f;
    double sxx = 0.0;
    for (int i = 0; i < n; ++i) {
        sxx += double(x[i]) * x[i];
        if (std::fabs(x[i]) > amax) {
            amax = std::fabs(x[i]);
            vmax = x[i];
        }
    }
    if (!(amax > 0.0f) || !std::isfinite(amax)) return 0.0f;
    float best_s = -vmax / static_cast<float>(L);
    double best_err = std::numeric_limits<double>::infinity();
    for (int side = 0; side < 2; ++side)
        for (int t = -8; t <= 8; ++t) {
            const float target = side == 0 ? -(static_cast<float>(L) + 0.125f * static_cast<float>(t))
                                            : static_cast<float>(L - 1) + 0.125f * static_cast<float>(t);
            const float iscale = target / vmax;
            double sxl = 0.0, sll = 0.0;
            for (int i = 0; i < n; ++i) {
                const int l = code(iscale * x[i], -L, L - 1);
                sxl += double(x[i]) * l;
                sll += double(l) * l;
            }
            if (sll <= 0.0) continue;
            const double err = sxx - sxl * sxl / sll;
            if (err < best_err) {
                best_err = err;
                best_s = static_cast<float>(sxl / sll);
            }
        }
    return best_s;
}

// Affine fit x ~ s * q + b for x[0..n) with codes q in [0, Q] and s >= 0; with nonpositive_b the offset
// is kept <= 0 (the K-quant formats subtract a non-negative min). Tries several inverse scales over the
// range [lo, hi], refits (s, b) by least squares for the codes each produces and keeps the best.
void fit_affine(const float* x, int n, int Q, bool nonpositive_b, float* s_out, float* b_out) {
    float lo = x[0], hi = x[0];
    for (int i = 1; i < n; ++i) {
        lo = std::min(lo, x[i]);
        hi = std::max(hi, x[i]);
    }
    if (nonpositive_b) lo = std::min(lo, 0.0f);
    if (!(hi - lo > 0.0f) || !std::isfinite(hi - lo)) {  // constant block (or non-finite input)
        *s_out = 0.0f;
        *b_out = std::isfinite(lo) ? lo : 0.0f;
        return;
    }
    double sx = 0.0, sxx = 0.0;
    for (int i = 0; i < n; ++i) {
        sx += x[i];
        sxx += double(x[i]) * x[i];
    }
    // Start from the plain min/max fit.
    float best_s = (hi - lo) / static_cast<float>(Q), best_b = lo;
    double best_err = std::numeric_limits<double>::infinity();
    for (int t = -8; t <= 8; ++t) {
        const float iscale = (static_cast<float>(Q) + 0.125f * static_cast<float>(t)) / (hi - lo);
        double sq = 0.0, sqq = 0.0, sxq = 0.0;
        for (int i = 0; i < n; ++i) {
            const int q = code((x[i] - lo) * iscale, 0, Q);
            sq += q;
            sqq += double(q) * q;
            sxq += double(x[i]) * q;
        }
        const double det = n * sqq - sq * sq;
        if (det <= 0.0) continue;  // every code equal: no slope to fit
        double s = (n * sxq - sq * sx) / det;
        double b = (sx - s * sq) / n;
        if (nonpositive_b && b > 0.0) {
            b = 0.0;
            s = sxq / sqq;
        }
        if (s < 0.0) continue;
        const double err = sxx - 2.0 * s * sxq - 2.0 * b * sx + s * s * sqq + 2.0 * s * b * sq + n * b * b;
        if (err < best_err) {
            best_err = err;
            best_s = static_cast<float>(s);
            best_b = static_cast<float>(b);
        }
    }
    *s_out = best_s;
    *b_out = best_b;
}

// ---- quantization: read nb * block_elems floats at x, write nb blocks to dst ----------------------------

// Symmetric 4/5-bit block: one f16 scale from fit_symmetric, codes stored with an offset of L.
template <int L>
void quant_sym32(const float* x, uint16_t* d_out, int* codes) {
    const uint16_t d16 = f16_sat(fit_symmetric(x, QK, L));
    const float d = h2f(d16);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK; ++j) codes[j] = code(x[j] * id, -L, L - 1) + L;
    *d_out = d16;
}

// Affine 4/5-bit block: f16 scale and offset from fit_affine, codes 0..Q.
template <int Q>
void quant_aff32(const float* x, uint16_t* d_out, uint16_t* m_out, int* codes) {
    float s, b;
    fit_affine(x, QK, Q, false, &s, &b);
    const uint16_t d16 = f16_sat(s), m16 = f16_sat(b);
    const float d = h2f(d16), m = h2f(m16);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < QK; ++j) codes[j] = code((x[j] - m) * id, 0, Q);
    *d_out = d16;
    *m_out = m16;
}

void pack_nibbles(const int* codes, uint8_t* qs) {
    for (int j = 0; j < QK / 2; ++j) qs[j] = static_cast<uint8_t>((codes[j] & 15) | (codes[j + 16] & 15) << 4);
}

void pack_high_bits(const int* codes, uint8_t* qh) {
    uint32_t h = 0;
    for (int j = 0; j < QK; ++j) h |= uint32_t((codes[j] >> 4) & 1) << j;
    for (int i = 0; i < 4; ++i) qh[i] = static_cast<uint8_t>(h >> (8 * i));
}

void quant_q4_0(const float* x, void* dst, int64_t nb) {
    int codes[QK];
    for (BlockQ4_0* b = as<BlockQ4_0>(dst); nb-- > 0; ++b, x += QK) {
        quant_sym32<8>(x, &b->d, codes);
        pack_nibbles(codes, b->qs);
    }
}

void quant_q4_1(const float* x, void* dst, int64_t nb) {
    int codes[QK];
    for (BlockQ4_1* b = as<BlockQ4_1>(dst); nb-- > 0; ++b, x += QK) {
        quant_aff32<15>(x, &b->d, &b->m, codes);
        pack_nibbles(codes, b->qs);
    }
}

void quant_q5_0(const float* x, void* dst, int64_t nb) {
    int codes[QK];
    for (BlockQ5_0* b = as<BlockQ5_0>(dst); nb-- > 0; ++b, x += QK) {
        quant_sym32<16>(x, &b->d, codes);
        pack_nibbles(codes, b->qs);
        pack_high_bits(codes, b->qh);
    }
}

void quant_q5_1(const float* x, void* dst, int64_t nb) {
    int codes[QK];
    for (BlockQ5_1* b = as<BlockQ5_1>(dst); nb-- > 0; ++b, x += QK) {
        quant_aff32<31>(x, &b->d, &b->m, codes);
        pack_nibbles(codes, b->qs);
        pack_high_bits(codes, b->qh);
    }
}

// 8-bit symmetric codes with the absmax scale (d = absmax / 127, as an f16); returns the code sum.
int quant_i8_32(const float* x, uint16_t* d_out, int8_t* qs) {
    float amax = 0.0f;
    for (int j = 0; j < QK; ++j) amax = std::max(amax, std::fabs(x[j]));
    const uint16_t d16 = f16_sat(amax / 127.0f);
    const float d = h2f(d16);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < QK; ++j) {
        qs[j] = static_cast<int8_t>(code(x[j] * id, -127, 127));
        sum += qs[j];
    }
    *d_out = d16;
    return sum;
}

void quant_q8_0(const float* x, void* dst, int64_t nb) {
    for (BlockQ8_0* b = as<BlockQ8_0>(dst); nb-- > 0; ++b, x += QK) quant_i8_32(x, &b->d, b->qs);
}

void quant_q8_1(const float* x, void* dst, int64_t nb) {
    for (BlockQ8_1* b = as<BlockQ8_1>(dst); nb-- > 0; ++b, x += QK) {
        const int sum = quant_i8_32(x, &b->d, b->qs);
        b->s = f16_sat(h2f(b->d) * static_cast<float>(sum));
    }
}

void quant_q8_K(const float* x, void* dst, int64_t nb) {
    for (BlockQ8_K* b = as<BlockQ8_K>(dst); nb-- > 0; ++b, x += QK_K) {
        float amax = 0.0f;
        for (int j = 0; j < QK_K; ++j) amax = std::max(amax, std::fabs(x[j]));
        const float d = std::isfinite(amax) ? amax / 127.0f : 0.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        for (int g = 0; g < QK_K / 16; ++g) {
            int sum = 0;
            for (int j = 16 * g; j < 16 * g + 16; ++j) {
                b->qs[j] = static_cast<int8_t>(code(x[j] * id, -127, 127));
                sum += b->qs[j];
            }
            b->bsums[g] = static_cast<int16_t>(sum);
        }
        b->d = d;
    }
}

// K-quant super-block scales: per-sub-block values v[i] >= 0 (or signed with sym) become integer codes
// of the super-block scale returned as f16. Unsigned: codes 0..qmax with scale max(v) / qmax. Signed:
// codes -(qmax+1)..qmax, the largest-magnitude value mapped to -(qmax+1).
uint16_t quant_super_unsigned(const float* v, int n, int qmax, int* codes) {
    float vmax = 0.0f;
    for (int i = 0; i < n; ++i) vmax = std::max(vmax, v[i]);
    const uint16_t d16 = f16_sat(vmax / static_cast<float>(qmax));
    const float d = h2f(d16);
    for (int i = 0; i < n; ++i) codes[i] = d > 0.0f ? code(v[i] / d, 0, qmax) : 0;
    return d16;
}

uint16_t quant_super_signed(const float* v, int n, int qmax, int* codes) {
    float amax = 0.0f, vmax = 0.0f;
    for (int i = 0; i < n; ++i)
        if (std::fabs(v[i]) > amax) {
            amax = std::fabs(v[i]);
            vmax = v[i];
        }
    const uint16_t d16 = f16_sat(-vmax / static_cast<float>(qmax + 1));
    const float d = h2f(d16);
    for (int i = 0; i < n; ++i) codes[i] = d != 0.0f ? code(v[i] / d, -(qmax + 1), qmax) : 0;
    return d16;
}

// Codes 0..Q for x with the effective affine parameters x ~ s * q - m (s == 0: all zero).
inline int affine_code(float x, float s, float m, int Q) { return s > 0.0f ? code((x + m) / s, 0, Q) : 0; }

void quant_q2_K(const float* x, void* dst, int64_t nb) {
    for (BlockQ2_K* b = as<BlockQ2_K>(dst); nb-- > 0; ++b, x += QK_K) {
        float s[16], m[16];
        for (int g = 0; g < 16; ++g) {
            float off;
            fit_affine(x + 16 * g, 16, 3, true, &s[g], &off);
            m[g] = -off;
        }
        int sc[16], mn[16];
        b->d = quant_super_unsigned(s, 16, 15, sc);
        b->dmin = quant_super_unsigned(m, 16, 15, mn);
        const float d = h2f(b->d), dmin = h2f(b->dmin);
        for (int g = 0; g < 16; ++g) b->scales[g] = static_cast<uint8_t>(sc[g] | mn[g] << 4);
        std::memset(b->qs, 0, sizeof b->qs);
        for (int e = 0; e < QK_K; ++e) {
            const int g = e / 16;
            const int q = affine_code(x[e], d * static_cast<float>(sc[g]), dmin * static_cast<float>(mn[g]), 3);
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            b->qs[32 * h + l] = static_cast<uint8_t>(b->qs[32 * h + l] | q << (2 * k));
        }
    }
}

void quant_q3_K(const float* x, void* dst, int64_t nb) {
    for (BlockQ3_K* b = as<BlockQ3_K>(dst); nb-- > 0; ++b, x += QK_K) {
        float s[16];
        for (int g = 0; g < 16; ++g) s[g] = fit_symmetric(x + 16 * g, 16, 4);
        int sc[16];
        b->d = quant_super_signed(s, 16, 31, sc);
        const float d = h2f(b->d);
        std::memset(b->scales, 0, sizeof b->scales);
        for (int i = 0; i < 16; ++i) {
            const int v = sc[i] + 32;  // 0..63
            if (i < 8)
                b->scales[i] = static_cast<uint8_t>(b->scales[i] | (v & 15));
            else
                b->scales[i - 8] = static_cast<uint8_t>(b->scales[i - 8] | (v & 15) << 4);
            b->scales[8 + i % 4] = static_cast<uint8_t>(b->scales[8 + i % 4] | (v >> 4) << (2 * (i / 4)));
        }
        std::memset(b->qs, 0, sizeof b->qs);
        std::memset(b->hmask, 0, sizeof b->hmask);
        for (int e = 0; e < QK_K; ++e) {
            const float step = d * static_cast<float>(sc[e / 16]);
            const int u = (step != 0.0f ? code(x[e] / step, -4, 3) : 0) + 4;  // 0..7
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            b->qs[32 * h + l] = static_cast<uint8_t>(b->qs[32 * h + l] | (u & 3) << (2 * k));
            b->hmask[l] = static_cast<uint8_t>(b->hmask[l] | (u >> 2) << (4 * h + k));
        }
    }
}

// q4_K (Q = 15, qh == nullptr) and q5_K (Q = 31).
template <int Q>
void quant_k4(const float* x, uint16_t* d_out, uint16_t* dmin_out, uint8_t* scales, uint8_t* qh, uint8_t* qs) {
    float s[8], m[8];
    for (int j = 0; j < 8; ++j) {
        float off;
        fit_affine(x + 32 * j, 32, Q, true, &s[j], &off);
        m[j] = -off;
    }
    int sc[8], mn[8];
    *d_out = quant_super_unsigned(s, 8, 63, sc);
    *dmin_out = quant_super_unsigned(m, 8, 63, mn);
    const float d = h2f(*d_out), dmin = h2f(*dmin_out);
    for (int j = 0; j < 4; ++j) {
        scales[j] = static_cast<uint8_t>(sc[j] | (sc[j + 4] >> 4) << 6);
        scales[j + 4] = static_cast<uint8_t>(mn[j] | (mn[j + 4] >> 4) << 6);
        scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 15) | (mn[j + 4] & 15) << 4);
    }
    std::memset(qs, 0, QK_K / 2);
    if (qh) std::memset(qh, 0, QK_K / 8);
    for (int e = 0; e < QK_K; ++e) {
        const int j = e / 32, l = e % 32, c = j / 2;
        const int q = affine_code(x[e], d * static_cast<float>(sc[j]), dmin * static_cast<float>(mn[j]), Q);
        qs[32 * c + l] = static_cast<uint8_t>(qs[32 * c + l] | (q & 15) << (4 * (j & 1)));
        if (qh) qh[l] = static_cast<uint8_t>(qh[l] | (q >> 4) << j);
    }
}

void quant_q4_K(const float* x, void* dst, int64_t nb) {
    for (BlockQ4_K* b = as<BlockQ4_K>(dst); nb-- > 0; ++b, x += QK_K)
        quant_k4<15>(x, &b->d, &b->dmin, b->scales, nullptr, b->qs);
}

void quant_q5_K(const float* x, void* dst, int64_t nb) {
    for (BlockQ5_K* b = as<BlockQ5_K>(dst); nb-- > 0; ++b, x += QK_K)
        quant_k4<31>(x, &b->d, &b->dmin, b->scales, b->qh, b->qs);
}

void quant_q6_K(const float* x, void* dst, int64_t nb) {
    for (BlockQ6_K* b = as<BlockQ6_K>(dst); nb-- > 0; ++b, x += QK_K) {
        float s[16];
        for (int g = 0; g < 16; ++g) s[g] = fit_symmetric(x + 16 * g, 16, 32);
        int sc[16];
        b->d = quant_super_signed(s, 16, 127, sc);
        const float d = h2f(b->d);
        for (int g = 0; g < 16; ++g) b->scales[g] = static_cast<int8_t>(sc[g]);
        std::memset(b->ql, 0, sizeof b->ql);
        std::memset(b->qh, 0, sizeof b->qh);
        for (int e = 0; e < QK_K; ++e) {
            const float step = d * static_cast<float>(sc[e / 16]);
            const int q = (step != 0.0f ? code(x[e] / step, -32, 31) : 0) + 32;  // 0..63
            const int h = e / 128, k = (e % 128) / 32, l = e % 32;
            uint8_t& lb = b->ql[64 * h + 32 * (k & 1) + l];
            lb = static_cast<uint8_t>(lb | (q & 15) << (k < 2 ? 0 : 4));
            b->qh[32 * h + l] = static_cast<uint8_t>(b->qh[32 * h + l] | (q >> 4) << (2 * k));
        }
    }
}

// ---- portable dot products: weight row w (n elements) . prepared activation row a ----------------------
// Each block's codes are decoded into int8 (the decoders above), then multiplied with the activation's
// int8 codes in plain loops the compiler can vectorize. Per block the integer part is exact; only the
// float accumulation across blocks rounds, so these agree with the AVX2 kernels to float rounding.

template <float (*Load)(const void*, int64_t)>
float dot_float_row(int64_t n, const void* w, const void* a) {
    const float* x = static_cast<const float*>(a);
    float acc[8] = {};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += Load(w, i + k) * x[i + k];
    for (int k = 0; i < n; ++i, ++k) acc[k] += Load(w, i) * x[i];
    return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}
inline float load_f32(const void* p, int64_t i) { return static_cast<const float*>(p)[i]; }
inline float load_f16(const void* p, int64_t i) { return f16_to_f32(static_cast<const uint16_t*>(p)[i]); }
inline float load_bf16(const void* p, int64_t i) { return bf16_to_f32(static_cast<const uint16_t*>(p)[i]); }

float dot_f32(int64_t n, const void* w, const void* a) { return dot_float_row<load_f32>(n, w, a); }
float dot_f16(int64_t n, const void* w, const void* a) { return dot_float_row<load_f16>(n, w, a); }
float dot_bf16(int64_t n, const void* w, const void* a) { return dot_float_row<load_bf16>(n, w, a); }

// Sum of x[i] * y[i] over N int8 pairs.
template <int N>
inline int idot(const int8_t* x, const int8_t* y) {
    int s = 0;
    for (int i = 0; i < N; ++i) s += x[i] * y[i];
    return s;
}

float dot_q8_0(int64_t n, const void* w, const void* a) {
    const BlockQ8_0* x = as<BlockQ8_0>(w);
    const BlockQ8_0* y = as<BlockQ8_0>(a);
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK; ++b)
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(idot<QK>(x[b].qs, y[b].qs));
    return sum;
}

// q4_0 / q5_0 (symmetric, q8_0 activations) and q4_1 / q5_1 (offset m, q8_1 activations with s).
template <typename B, Type T>
float dot_legacy_sym(int64_t n, const void* w, const void* a) {
    const B* x = as<B>(w);
    const BlockQ8_0* y = as<BlockQ8_0>(a);
    int8_t q[QK];
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK; ++b) {
        codes_block<T>(&x[b], q);
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(idot<QK>(q, y[b].qs));
    }
    return sum;
}

template <typename B, Type T>
float dot_legacy_offset(int64_t n, const void* w, const void* a) {
    const B* x = as<B>(w);
    const BlockQ8_1* y = as<BlockQ8_1>(a);
    int8_t q[QK];
    float sum = 0.0f, msum = 0.0f;
    for (int64_t b = 0; b < n / QK; ++b) {
        codes_block<T>(&x[b], q);
        sum += h2f(x[b].d) * h2f(y[b].d) * static_cast<float>(idot<QK>(q, y[b].qs));
        msum += h2f(x[b].m) * h2f(y[b].s);
    }
    return sum + msum;
}

float dot_q4_0(int64_t n, const void* w, const void* a) { return dot_legacy_sym<BlockQ4_0, Type::Q4_0>(n, w, a); }
float dot_q5_0(int64_t n, const void* w, const void* a) { return dot_legacy_sym<BlockQ5_0, Type::Q5_0>(n, w, a); }
float dot_q4_1(int64_t n, const void* w, const void* a) { return dot_legacy_offset<BlockQ4_1, Type::Q4_1>(n, w, a); }
float dot_q5_1(int64_t n, const void* w, const void* a) { return dot_legacy_offset<BlockQ5_1, Type::Q5_1>(n, w, a); }

float dot_q2_K(int64_t n, const void* w, const void* a) {
    const BlockQ2_K* x = as<BlockQ2_K>(w);
    const BlockQ8_K* y = as<BlockQ8_K>(a);
    int8_t q[QK_K];
    float sum = 0.0f, msum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        codes_block<Type::Q2_K>(&x[b], q);
        int isum = 0, imin = 0;
        for (int g = 0; g < 16; ++g) {
            isum += (x[b].scales[g] & 15) * idot<16>(q + 16 * g, y[b].qs + 16 * g);
            imin += (x[b].scales[g] >> 4) * y[b].bsums[g];
        }
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(isum);
        msum += y[b].d * h2f(x[b].dmin) * static_cast<float>(imin);
    }
    return sum - msum;
}

float dot_q3_K(int64_t n, const void* w, const void* a) {
    const BlockQ3_K* x = as<BlockQ3_K>(w);
    const BlockQ8_K* y = as<BlockQ8_K>(a);
    int8_t q[QK_K], sc[16];
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        codes_block<Type::Q3_K>(&x[b], q);
        unpack_scales_q3k(x[b].scales, sc);
        int isum = 0;
        for (int g = 0; g < 16; ++g) isum += sc[g] * idot<16>(q + 16 * g, y[b].qs + 16 * g);
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(isum);
    }
    return sum;
}

// q4_K and q5_K: writes the scaled code sum and the mins term of one block.
template <Type T, typename B>
void dot_k4_block(const B& x, const BlockQ8_K& y, int* isum, int* imin) {
    int8_t q[QK_K];
    uint8_t sc[8], mn[8];
    codes_block<T>(&x, q);
    unpack_scales_k4(x.scales, sc, mn);
    *isum = 0;
    *imin = 0;
    for (int j = 0; j < 8; ++j) {
        *isum += sc[j] * idot<32>(q + 32 * j, y.qs + 32 * j);
        *imin += mn[j] * (y.bsums[2 * j] + y.bsums[2 * j + 1]);
    }
}

float dot_q4_K(int64_t n, const void* w, const void* a) {
    const BlockQ4_K* x = as<BlockQ4_K>(w);
    const BlockQ8_K* y = as<BlockQ8_K>(a);
    float sum = 0.0f, msum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int isum, imin;
        dot_k4_block<Type::Q4_K>(x[b], y[b], &isum, &imin);
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(isum);
        msum += y[b].d * h2f(x[b].dmin) * static_cast<float>(imin);
    }
    return sum - msum;
}

float dot_q5_K(int64_t n, const void* w, const void* a) {
    const BlockQ5_K* x = as<BlockQ5_K>(w);
    const BlockQ8_K* y = as<BlockQ8_K>(a);
    float sum = 0.0f, msum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        int isum, imin;
        dot_k4_block<Type::Q5_K>(x[b], y[b], &isum, &imin);
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(isum);
        msum += y[b].d * h2f(x[b].dmin) * static_cast<float>(imin);
    }
    return sum - msum;
}

float dot_q6_K(int64_t n, const void* w, const void* a) {
    const BlockQ6_K* x = as<BlockQ6_K>(w);
    const BlockQ8_K* y = as<BlockQ8_K>(a);
    int8_t q[QK_K];
    float sum = 0.0f;
    for (int64_t b = 0; b < n / QK_K; ++b) {
        codes_block<Type::Q6_K>(&x[b], q);
        int isum = 0;
        for (int g = 0; g < 16; ++g) isum += x[b].scales[g] * idot<16>(q + 16 * g, y[b].qs + 16 * g);
        sum += y[b].d * h2f(x[b].d) * static_cast<float>(isum);
    }
    return sum;
}

VecDotFn portable_vec_dot(Type weight) {
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

// ---- run-time SIMD selection ----------------------------------------------------------------------------

bool cpu_has_avx2() {
#if defined(__x86_64__) || defined(__i386__)
    // F16C is read from CPUID leaf 1 (ECX bit 29): clang 14's __builtin_cpu_supports has no "f16c".
    __builtin_cpu_init();
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    const bool f16c = __get_cpuid(1, &eax, &ebx, &ecx, &edx) && (ecx & (1u << 29)) != 0;
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c;
#else
    return false;
#endif
}

bool avx2_available() {
    static const bool has = cpu_has_avx2();
    return has;
}

// AVX-VNNI (the VEX-encoded vpdpbusd): CPUID leaf 7, sub-leaf 1, EAX bit 4. -DMINFER_NO_VNNI builds
// without it (the A/B knob of docs/perf.md).
bool avx_vnni_available() {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(MINFER_NO_VNNI)
    static const bool has = [] {
        unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
        return __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && (eax & (1u << 4)) != 0;
    }();
    return has;
#else
    return false;
#endif
}

// AVX-512 F, BW, VL, DQ and VNNI, with the OS saving the 512-bit state (__builtin_cpu_supports counts
// an AVX-512 feature only then). -DMINFER_NO_AVX512 builds without it (the A/B knob of docs/perf.md).
bool avx512_vnni_available() {
#if (defined(__x86_64__) || defined(__i386__)) && !defined(MINFER_NO_AVX512)
    static const bool has = [] {
        __builtin_cpu_init();
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl") &&
               __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vnni");
    }();
    return has;
#else
    return false;
#endif
}

std::atomic<bool> g_force_portable{false};

bool use_avx2() { return avx2_available() && !g_force_portable.load(std::memory_order_relaxed); }

}  // namespace

// ---- public entry points ------------------------------------------------------------------------------

size_t row_bytes(Type t, int64_t n) {
    return static_cast<size_t>(block_count(t, n, "row_bytes")) * static_cast<size_t>(type_info(t).block_bytes);
}

void dequantize_row(Type t, const void* src, float* dst, int64_t n) {
    const int64_t nb = block_count(t, n, "dequantize");
    switch (t) {
        case Type::F32: if (n) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case Type::F16:
            for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(static_cast<const uint16_t*>(src)[i]);
            return;
        case Type::BF16:
            for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(static_cast<const uint16_t*>(src)[i]);
            return;
        case Type::Q4_0: return deq_blocks<Type::Q4_0>(src, dst, nb);
        case Type::Q4_1: return deq_blocks<Type::Q4_1>(src, dst, nb);
        case Type::Q5_0: return deq_blocks<Type::Q5_0>(src, dst, nb);
        case Type::Q5_1: return deq_blocks<Type::Q5_1>(src, dst, nb);
        case Type::Q8_0: return deq_blocks<Type::Q8_0>(src, dst, nb);
        case Type::Q8_1: return deq_blocks<Type::Q8_1>(src, dst, nb);
        case Type::Q2_K: return deq_blocks<Type::Q2_K>(src, dst, nb);
        case Type::Q3_K: return deq_blocks<Type::Q3_K>(src, dst, nb);
        case Type::Q4_K: return deq_blocks<Type::Q4_K>(src, dst, nb);
        case Type::Q5_K: return deq_blocks<Type::Q5_K>(src, dst, nb);
        case Type::Q6_K: return deq_blocks<Type::Q6_K>(src, dst, nb);
        case Type::Q8_K: return deq_blocks<Type::Q8_K>(src, dst, nb);
        default: unsupported(t, "dequantize");
    }
}

void quantize_row(Type t, const float* src, void* dst, int64_t n) {
    const int64_t nb = block_count(t, n, "quantize");
    switch (t) {
        case Type::F32: if (n) std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
        case Type::F16:
            for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_f16(src[i]);
            return;
        case Type::BF16:
            for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
            return;
        case Type::Q4_0: return quant_q4_0(src, dst, nb);
        case Type::Q4_1: return quant_q4_1(src, dst, nb);
        case Type::Q5_0: return quant_q5_0(src, dst, nb);
        case Type::Q5_1: return quant_q5_1(src, dst, nb);
        case Type::Q8_0:
            if (use_avx2())
                if (detail::QuantRowFn f = detail::avx2_quant_q8_0()) return f(src, dst, nb);
            return quant_q8_0(src, dst, nb);
        case Type::Q8_1: return quant_q8_1(src, dst, nb);
        case Type::Q2_K: return quant_q2_K(src, dst, nb);
        case Type::Q3_K: return quant_q3_K(src, dst, nb);
        case Type::Q4_K: return quant_q4_K(src, dst, nb);
        case Type::Q5_K: return quant_q5_K(src, dst, nb);
        case Type::Q6_K: return quant_q6_K(src, dst, nb);
        case Type::Q8_K:
            if (use_avx2())
                if (detail::QuantRowFn f = detail::avx2_quant_q8_K()) return f(src, dst, nb);
            return quant_q8_K(src, dst, nb);
        default: unsupported(t, "quantize");
    }
}

Type vec_dot_type(Type weight) {
    switch (weight) {
        case Type::F32:
        case Type::F16:
        case Type::BF16: return Type::F32;
        case Type::Q4_0:
        case Type::Q5_0:
        case Type::Q8_0: return Type::Q8_0;
        case Type::Q4_1:
        case Type::Q5_1: return Type::Q8_1;
        case Type::Q2_K:
        case Type::Q3_K:
        case Type::Q4_K:
        case Type::Q5_K:
        case Type::Q6_K: return Type::Q8_K;
        default: unsupported(weight, "vec_dot");
    }
}

void prepare_activation(Type weight, const float* x, void* dst, int64_t n) {
    const Type at = vec_dot_type(weight);
    // The activation row must also be whole blocks of the weight type (q8_0/q8_1/q8_K share its size).
    block_count(weight, n, "prepare_activation");
    quantize_row(at, x, dst, n);
}

VecDotFn vec_dot_fn(Type weight) {
    if (use_avx2())
        if (VecDotFn f = detail::avx2_vec_dot(weight)) return f;
    if (VecDotFn f = portable_vec_dot(weight)) return f;
    unsupported(weight, "vec_dot");
}

namespace {
void axpy_portable(int64_t n, float a, const float* x, float* y) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}
}  // namespace

AxpyFn axpy_fn() {
    if (use_avx2())
        if (AxpyFn f = detail::avx2_axpy()) return f;
    return axpy_portable;
}

void block_scales(Type t, const void* rows_base, size_t stride, int64_t rows, int64_t n, float* out) {
    const size_t bytes = t == Type::Q4_0 ? sizeof(BlockQ4_0) : t == Type::Q5_0 ? sizeof(BlockQ5_0) : sizeof(BlockQ8_0);
    const int64_t nb = n / QK;
    if (use_avx2()) return detail::avx2_block_scales()(static_cast<const uint8_t*>(rows_base), stride, rows, nb, bytes, out);
    for (int64_t r = 0; r < rows; ++r) {
        const uint8_t* row = static_cast<const uint8_t*>(rows_base) + static_cast<size_t>(r) * stride;
        for (int64_t b = 0; b < nb; ++b) {
            uint16_t d;
            std::memcpy(&d, row + static_cast<size_t>(b) * bytes, 2);  // every one of these blocks starts with d
            out[r * nb + b] = f16_to_f32(d);
        }
    }
}

bool cpu_has(TileIsa isa) {
    switch (isa) {
        case TileIsa::avx512_vnni: return avx2_available() && avx512_vnni_available();
        case TileIsa::avx_vnni: return avx2_available() && avx_vnni_available();
        default: return avx2_available();
    }
}

static void silu_mul_portable(float* g, const float* u, size_t n) {
    for (size_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}

SiluMulFn silu_mul_fn(bool allow_512) {
    if (use_avx2()) {
        if (allow_512 && cpu_has(TileIsa::avx512_vnni))
            if (SiluMulFn f = detail::avx512_silu_mul()) return f;
        if (SiluMulFn f = detail::avx2_silu_mul()) return f;
    }
    return silu_mul_portable;
}

AttnKernels attn_kernels(int hd, bool allow_512) {
    if (!use_avx2() || hd <= 0) return {};
    if (allow_512 && cpu_has(TileIsa::avx512_vnni) && hd % 16 == 0) return detail::avx512_attn();
    return hd % 8 == 0 ? detail::avx2_attn() : AttnKernels{};
}

VecDotTileFn vec_dot_tile_fn(Type weight, TileIsa isa) {
    return use_avx2() && cpu_has(isa) ? detail::avx2_vec_dot_tile(weight, isa) : nullptr;
}

VecDotTileFn vec_dot_tile_fn(Type weight) {
    for (TileIsa isa : {TileIsa::avx512_vnni, TileIsa::avx_vnni})
        if (cpu_has(isa)) return vec_dot_tile_fn(weight, isa);
    return vec_dot_tile_fn(weight, TileIsa::avx2);
}

const char* simd_level() { return use_avx2() ? "avx2" : "scalar"; }

void force_portable(bool on) { g_force_portable.store(on, std::memory_order_relaxed); }

}  // namespace minfer::quant
