// Device code of the decode mat-vec (cuda/matvec.cu has the launchers and the design notes): the MMA
// family for the quantized types and the plain family for f32/f16/bf16. Everything here is also compiled
// on the host by tests/test_matvec_emu.cpp, which supplies CUDA's built-ins and its own cuda/matvec_ptx.cuh,
// so the kernels' data paths are checked against float64 on machines without a GPU.
#pragma once

#include <cstdint>
#include <cstring>
#include <utility>

#include "cuda/block_bits.cuh"
#include "cuda/matvec_ptx.cuh"
#include "quant/blocks.h"
#include "quant/types.h"

namespace minfer::cuda::mv {

using quant::Type;

constexpr unsigned kFull = 0xffffffffu;

// Elements of one block of the quantized types.
constexpr int block_elems(Type t) {
    const bool k_quant = t == Type::Q2_K || t == Type::Q3_K || t == Type::Q4_K || t == Type::Q5_K || t == Type::Q6_K;
    return k_quant ? quant::QK_K : quant::QK;
}
// Bytes of one block of the quantized types (quant/blocks.h).
constexpr int block_bytes(Type t) {
    if (t == kQ8_0G) return sizeof(quant::BlockQ8_0);  // q8_0's blocks, regrouped (cuda/block_bits.cuh)
    switch (t) {
        case Type::Q4_0: return sizeof(quant::BlockQ4_0);
        case Type::Q4_1: return sizeof(quant::BlockQ4_1);
        case Type::Q5_0: return sizeof(quant::BlockQ5_0);
        case Type::Q5_1: return sizeof(quant::BlockQ5_1);
        case Type::Q8_0: return sizeof(quant::BlockQ8_0);
        case Type::Q2_K: return sizeof(quant::BlockQ2_K);
        case Type::Q3_K: return sizeof(quant::BlockQ3_K);
        case Type::Q4_K: return sizeof(quant::BlockQ4_K);
        case Type::Q5_K: return sizeof(quant::BlockQ5_K);
        case Type::Q6_K: return sizeof(quant::BlockQ6_K);
        default: return 0;
    }
}

// 0x6400 is f16 1024.0 (ulp 1): OR-ing a code of up to 10 bits into its mantissa gives 1024 + code exactly.
constexpr uint32_t kMagic = 0x64006400u;

// ---- the MMA family ------------------------------------------------------------------------------------------
//
// Work: a CTA of 4 warps owns a contiguous range of 16-row tiles (the ranges are balanced over a grid
// of about as many CTAs as fit on the GPU at once, so every CTA streams the same number of bytes). An
// item is (256-column k-tile, row tile); the CTA's items, k-tile major, are split into four contiguous
// ranges, one per warp. The launcher may widen the CTAs to up to 16 warps (cuda/matvec.cu: when that
// leaves each warp fewer items, as for a matrix with fewer tiles than resident CTAs of 4 warps), the
// same contiguous split of the CTA's items among more warps.
//
// Per item a warp:
//  * streams the 16 row segments of the k-tile (one K-quant super-block or eight legacy blocks per row)
//    into a private 4-stage shared-memory ring with 16-byte cp.async copies of the aligned span around
//    each segment (rows and blocks are only 2-byte aligned in general), issued 3 items ahead: about 7
//    KB in flight per warp for q4_K, and no registers held by the copies;
//  * when its k-tile changes, prepares the B operand of that k-tile from x (prefetched one k-tile ahead
//    into registers): the scale s, the hi/lo f16 split, and the 16- and 32-element sums of x that the
//    min/offset terms need (sum_i x_i (d sc q_i - dmin m) = d sc sum x_i q_i - dmin m sum x_i);
//  * runs 16 MMAs (plus one for the min/offset terms of some K-quants). Lane (g, t) decodes rows g and
//    g + 8: four columns per MMA, chosen by t alone, so the A operand is filled straight from the codes.
//    B is "block diagonal": column 2t (hi) and 2t + 1 (lo) are nonzero only in lane t's k-slots, so the
//    MMA hands lane (g, t) exactly its own partial dot products D[g][2t] + D[g][2t+1] and D[g+8][..]:
//    each lane applies its own block scales in f32 (legacy blocks, q6_K sub-blocks), no shuffles;
//  * adds the four lanes of each row at the end of a row tile into a per-warp partial; the CTA sums the
//    warps' partials and writes y once.
//
// Shared memory per CTA: 4 x (4 stages x 16 rows x segment, the B fragments 17 x 72 bytes, 32 sums)
// plus the partials (64 bytes per tile): 50-56 KB for q4_K, so 4 CTAs (16 warps) per SM; at most 128
// registers per thread (max_regs: the register file over 4 such CTAs), no spills.
//
// Costs per weight (issue slots of one lane, counted in the PTX; q4_K): unpacking about 1.1 (one shift,
// four LOP3 and four HFMA2 per 8 codes: the magic-number OR turns a nibble into 1024 + q, the HFMA2
// removes the 1024 and applies the sub-block scale), scales 0.4, MMAs and B loads 0.25, copies and item
// bookkeeping 0.5, row flushes 0.15 when a CTA has several tiles, and the x preparation 0.8 / (row
// tiles per CTA): 2.9 to 3.5 in all, against about 5 the H200 can issue per 4-bit weight at 3.4 TB/s.
// Legacy blocks add f32 scaling per block (0.25), q5 and q3_K/q6_K more bit assembly. Shared-memory
// traffic is budgeted under the 128 bytes per clock of an SM: 16-byte loads where blocks are 16-byte
// aligned (q4_K, q5_K), and segments an odd number of 16-byte units apart so the 4-byte loads of the
// other types see 1- to 4-way conflicts at most.

// kWarps per CTA by default; a matrix of too few row tiles to give every resident CTA one gets wider
// CTAs (up to kMaxWarps warps, the launcher's choice: blockDim), which split its k-tiles among more warps.
constexpr int kWarps = 4, kThreads = 32 * kWarps, kMaxWarps = 16;
constexpr int kTileRows = 16, kKTile = 256, kMmas = 16;
// B fragments of one k-tile: per MMA 8 entries of 8 bytes (hi and lo pairs of lane t's four columns,
// entry 2t + hl) and a ninth that stays zero (read by the 24 lanes whose B registers are zero).
constexpr int kFragRow = 9 * 8, kFragBytes = (kMmas + 1) * kFragRow, kSumsBytes = 32 * 4;
constexpr int kMaxTilesPerCta = 24;  // partials of 6 KB: q4_K keeps 4 CTAs per SM
// Sums layout (floats): [0] = 1/s, [4 + j] = sum of x over columns 32j .. 32j+31.
constexpr int kSumInv = 0, kSum32 = 4;

struct Item {
    uint32_t o0, o1;  // shared offsets of the k-tile bytes of rows g and g + 8
    uint32_t xf;      // shared offset of this lane's B entry of MMA 0 (MMA m at + m * kFragRow)
    uint32_t xs;      // shared offset of the k-tile's sums
    int t;            // lane & 3
    int nb;           // legacy types: blocks present in this k-tile (8 except at the end of a row)
};
__device__ __forceinline__ uint2 bfrag(const Item& c, int m) { return ld64(c.xf + m * kFragRow); }

// Per-type code. map(q) gives (MMA, t) of the four columns 4q .. 4q+3 of a k-tile (a lane feeds columns
// 4q, 4q+2 as its first f16 pair and 4q+1, 4q+3 as its second); extra_lane(t, i) where the sum of x that
// lane t's k-slot i of MMA 16 holds comes from; tile() decodes and multiplies one item.

// k4_scales (the 6-bit q4_K/q5_K scales and mins of four sub-blocks): cuda/block_bits.cuh.

// q4_K and q5_K: lane t takes qs bytes 32t .. 32t+31 of the super-block, i.e. sub-blocks 2t (low
// nibbles, columns 64t + l) and 2t + 1 (high nibbles, 64t + 32 + l). The codes enter the MMA as sc * q
// (at most 63 * 31, exact in f16), so one accumulator covers the super-block; MMA 16 multiplies the mins
// m_{2t}, m_{2t+1} by the sub-block sums of x.
template <bool Q5>
__device__ __forceinline__ void tile_k45(const Item& c, float& y0, float& y1) {
    const int t = c.t;
    const float inv_s = ldf(c.xs + 4 * kSumInv);
    uint32_t k0[2], n0[2], k1[2], n1[2], mins[2];
    float dd[2], dm[2];
    uint32_t q[2][8], qh[2][8];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint32_t o = r ? c.o1 : c.o0;
        const uint4 h = ld128(o);  // d, dmin, scales[0..11]
        uint32_t sc, mn;
        k4_scales(h, t, sc, mn);
        const uint32_t sel = 0x4040u + (t & 1) * 0x0202u;  // byte 2(t&1) into both halves
        k0[r] = hadd2(__byte_perm(sc, kMagicB, sel), h2c(-1024.0));                         // sc_{2t}
        n0[r] = hmul2(k0[r], h2c(-1024.0));
        k1[r] = hfma2(__byte_perm(sc, kMagicB, sel + 0x0101u), h2c(0.0625), h2c(-64.0));  // sc_{2t+1} / 16
        n1[r] = hmul2(k1[r], h2c(-1024.0));
        mins[r] = hadd2(__byte_perm(mn, kMagicB, 0x4140u + (t & 1) * 0x0202u), h2c(-1024.0));  // m_{2t}, m_{2t+1}
        dd[r] = f16_lo(h.x) * inv_s;
        dm[r] = f16_hi(h.x) * (32.0f * inv_s);
        const uint32_t qo = o + (Q5 ? 48 : 16) + 32 * t;
        const uint4 a = ld128(qo), b = ld128(qo + 16);
        q[r][0] = a.x; q[r][1] = a.y; q[r][2] = a.z; q[r][3] = a.w;
        q[r][4] = b.x; q[r][5] = b.y; q[r][6] = b.z; q[r][7] = b.w;
        if constexpr (Q5) {
            const uint4 u = ld128(o + 16), v = ld128(o + 32);
            qh[r][0] = u.x; qh[r][1] = u.y; qh[r][2] = u.z; qh[r][3] = u.w;
            qh[r][4] = v.x; qh[r][5] = v.y; qh[r][6] = v.z; qh[r][7] = v.w;
        }
    }
    // q5_K: bit 2t (low nibbles) or 2t + 1 (high nibbles) of qh[l] is bit 4 of the code; rotate it to
    // bit 4 (code in the low nibble, value 1024 + q) or bit 8 (high nibble, 1024 + 16 q) of each half.
    const int ra = (4 - 2 * t) & 31, rb = (-4 - 2 * t) & 31, rc = (7 - 2 * t) & 31, rd = (-1 - 2 * t) & 31;
    float cl[4] = {0.f, 0.f, 0.f, 0.f}, ch[4] = {0.f, 0.f, 0.f, 0.f}, ce[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        uint32_t le[2], lo[2], he[2], ho[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t w = q[r][i], w8 = w >> 8;
            uint32_t pe = (w & 0x000F000Fu) | kMagic, po = (w8 & 0x000F000Fu) | kMagic;
            uint32_t qe = (w & 0x00F000F0u) | kMagic, qo = (w8 & 0x00F000F0u) | kMagic;
            if constexpr (Q5) {
                const uint32_t u = qh[r][i];
                pe |= rotl(u, ra) & 0x00100010u;
                po |= rotl(u, rb) & 0x00100010u;
                qe |= rotl(u, rc) & 0x01000100u;
                qo |= rotl(u, rd) & 0x01000100u;
            }
            le[r] = hfma2(pe, k0[r], n0[r]);
            lo[r] = hfma2(po, k0[r], n0[r]);
            he[r] = hfma2(qe, k1[r], n1[r]);
            ho[r] = hfma2(qo, k1[r], n1[r]);
        }
        mma(cl, le[0], le[1], lo[0], lo[1], bfrag(c, i));
        mma(ch, he[0], he[1], ho[0], ho[1], bfrag(c, 8 + i));
    }
    mma(ce, mins[0], mins[1], 0u, 0u, bfrag(c, 16));
    y0 += dd[0] * (cl[0] + cl[1] + ch[0] + ch[1]) - dm[0] * (ce[0] + ce[1]);
    y1 += dd[1] * (cl[2] + cl[3] + ch[2] + ch[3]) - dm[1] * (ce[2] + ce[3]);
}

// Scales of sub-blocks 4t .. 4t+3 for q2_K and q3_K: byte j of sb holds the stored scale of sub-block
// 4t + j (+ 32 for q3_K, which `off` = -1056 removes; -1024 for q2_K). s[j] = scale * 4^-k in both
// halves (f0 = 4^-k for j = 0, 1 and f1 for j = 2, 3), n[j] = -1024 s[j]: hfma2(1024 + u 4^k, s, n) is
// then exactly scale * u.
__device__ __forceinline__ void sub_scales(uint32_t sb, uint32_t f0, uint32_t f1, uint32_t off, uint32_t (&s)[4],
                                           uint32_t (&n)[4]) {
    const uint32_t o0 = hmul2(off, f0), o1 = hmul2(off, f1);
    s[0] = hfma2(__byte_perm(sb, kMagicB, 0x4040u), f0, o0);
    s[1] = hfma2(__byte_perm(sb, kMagicB, 0x4141u), f0, o0);
    s[2] = hfma2(__byte_perm(sb, kMagicB, 0x4242u), f1, o1);
    s[3] = hfma2(__byte_perm(sb, kMagicB, 0x4343u), f1, o1);
#pragma unroll
    for (int j = 0; j < 4; ++j) n[j] = hmul2(s[j], h2c(-1024.0));
}

// q2_K and q3_K: lane t takes half h = t >> 1 and the 2-bit fields k = 2(t & 1) + kk (kk = 0, 1) of
// qs[32h + l], l = 0..31: columns 64t + 32kk + l, sub-blocks 4t + 2kk + (l >= 16). A field stays at bits
// 2k of its byte (value 1024 + u 4^k) and its scale constant carries the 4^-k. The codes enter the MMA
// as scale * u (q2_K: at most 15 * 3; q3_K: u = low + 4 * high bit, at most 32 * 7), exact in f16. MMA
// 16 multiplies the lane's four mins (q2_K) or scales (q3_K, whose code is u - 4) by the 16-element
// sums of x.
template <bool Q3>
__device__ __forceinline__ void tile_k23(const Item& c, float& y0, float& y1) {
    const int t = c.t, h = t >> 1;
    const float inv_s = ldf(c.xs + 4 * kSumInv);
    const uint32_t f0 = (t & 1) ? h2c(1.0 / 16) : h2c(1.0), f1 = (t & 1) ? h2c(1.0 / 64) : h2c(0.25);
    const uint32_t ml0 = 0x00030003u << (4 * (t & 1)), ml1 = ml0 << 2;  // field k = k0, k0 + 1 of bytes 0 and 2
    const uint32_t mh0 = 0x00040004u << (4 * (t & 1)), mh1 = mh0 << 2;  // q3_K: bit 2k + 2, for the high bit
    // q3_K: bit 4h + k of hmask[l] moves to bit 2k + 2 of the same byte (bytes 0/2: r, bytes 1/3: r - 8).
    const int r0 = (2 * (t & 1) + 2 - 4 * h) & 31, r1 = (r0 + 1) & 31, r0o = (r0 - 8) & 31, r1o = (r1 - 8) & 31;
    uint32_t s[2][4], n[2][4], ea[2], eb[2], q[2][8], hm[2][8];
    float dd[2], de[2];  // factors of the main sums and of MMA 16
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint32_t o = r ? c.o1 : c.o0;
        uint32_t sb, eb_bytes, off;
        if constexpr (Q3) {  // hmask[32], qs[64], scales[12], d; 2-byte aligned
            uint32_t sw[3];
            ld_words<3>(o + 96, sw);
            // low 4 bits: scales[j] & 15 (j < 8) or scales[j - 8] >> 4; high 2: scales[8 + j % 4] >> 2 (j / 4)
            const uint32_t low = (((t & 1) ? sw[1] : sw[0]) >> (4 * h)) & 0x0F0F0F0Fu;
            sb = low | (((sw[2] >> (2 * t)) & 0x03030303u) << 4);
            eb_bytes = sb;
            off = h2c(-1056.0);
            const float d = ld_f16(o + 108);
            dd[r] = d * inv_s;
            de[r] = -128.0f * d * inv_s;  // -4 sum_j (s_j - 32) X_j, MMA 16 holding X_j s / 32
            ld_words<8>(o + 32 + 32 * h, q[r]);
            ld_words<8>(o, hm[r]);
        } else {  // scales[16], qs[64], d, dmin; 4-byte aligned
            const uint32_t wsc = ld32(o + 4 * t);
            sb = wsc & 0x0F0F0F0Fu;
            eb_bytes = (wsc >> 4) & 0x0F0F0F0Fu;
            off = h2c(-1024.0);
            const uint32_t dw = ld32(o + 80);
            dd[r] = f16_lo(dw) * inv_s;
            de[r] = -32.0f * f16_hi(dw) * inv_s;  // -dmin sum_j m_j X_j
            ld_words4<8>(o + 16 + 32 * h, q[r]);
        }
        sub_scales(sb, f0, f1, off, s[r], n[r]);
        ea[r] = hadd2(__byte_perm(eb_bytes, kMagicB, 0x4140u), off);  // sub-blocks 4t, 4t + 1
        eb[r] = hadd2(__byte_perm(eb_bytes, kMagicB, 0x4342u), off);  // 4t + 2, 4t + 3
    }
    float c0[4] = {0.f, 0.f, 0.f, 0.f}, c1[4] = {0.f, 0.f, 0.f, 0.f}, ce[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int lh = i >> 2;
        uint32_t a0e[2], a0o[2], a1e[2], a1o[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t w = q[r][i], w8 = w >> 8;
            uint32_t p0e = (w & ml0) | kMagic, p0o = (w8 & ml0) | kMagic;
            uint32_t p1e = (w & ml1) | kMagic, p1o = (w8 & ml1) | kMagic;
            if constexpr (Q3) {
                const uint32_t hb = hm[r][i];
                p0e |= rotl(hb, r0) & mh0;
                p0o |= rotl(hb, r0o) & mh0;
                p1e |= rotl(hb, r1) & mh1;
                p1o |= rotl(hb, r1o) & mh1;
            }
            a0e[r] = hfma2(p0e, s[r][lh], n[r][lh]);
            a0o[r] = hfma2(p0o, s[r][lh], n[r][lh]);
            a1e[r] = hfma2(p1e, s[r][2 + lh], n[r][2 + lh]);
            a1o[r] = hfma2(p1o, s[r][2 + lh], n[r][2 + lh]);
        }
        mma(c0, a0e[0], a0e[1], a0o[0], a0o[1], bfrag(c, i));
        mma(c1, a1e[0], a1e[1], a1o[0], a1o[1], bfrag(c, 8 + i));
    }
    mma(ce, ea[0], ea[1], eb[0], eb[1], bfrag(c, 16));
    y0 += dd[0] * (c0[0] + c0[1] + c1[0] + c1[1]) + de[0] * (ce[0] + ce[1]);
    y1 += dd[1] * (c0[2] + c0[3] + c1[2] + c1[3]) + de[1] * (ce[2] + ce[3]);
}

// q6_K: lane t takes half h = t >> 1 and the ql bytes 64h + 32k1 + l (k1 = t & 1): low nibbles are field
// k = k1 (columns 128h + 32k1 + l), high nibbles k = k1 + 2 (64 columns further); qh[32h + l] adds bits
// 4-5. The int8 sub-block scales times (q - 32) can exceed f16's exact range, so the codes enter as
// q - 32 and each of the lane's four sub-blocks (16 columns) keeps its own accumulator, scaled in f32.
__device__ __forceinline__ void tile_q6k(const Item& c, float& y0, float& y1) {
    const int t = c.t, h = t >> 1, k1 = t & 1;
    const float inv_s = ldf(c.xs + 4 * kSumInv);
    const int shl = 4 - 2 * k1, shr = 4 + 2 * k1;  // qh field k1 (and k1 + 2) to bit 4 (8) of each half
    uint32_t ql[2][8], qh[2][8];
    float ds[2][4];  // d sc_j / s for sub-blocks 8h + 2k1 + 4nib + lh, index 2nib + lh
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint32_t o = r ? c.o1 : c.o0;
        ld_words<8>(o + 64 * h + 32 * k1, ql[r]);
        ld_words<8>(o + 128 + 32 * h, qh[r]);
        const float d = ld_f16(o + 208) * inv_s;
#pragma unroll
        for (int nib = 0; nib < 2; ++nib) {
            const uint32_t v = ld16(o + 192 + 8 * h + 2 * k1 + 4 * nib);
            ds[r][2 * nib] = d * static_cast<float>(static_cast<int8_t>(v & 0xffu));
            ds[r][2 * nib + 1] = d * static_cast<float>(static_cast<int8_t>(v >> 8));
        }
    }
    float acc[4][4] = {};
#pragma unroll
    for (int i = 0; i < 8; ++i) {
        const int lh = i >> 2;
        uint32_t a0e[2], a0o[2], a1e[2], a1o[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t l = ql[r][i], l8 = l >> 8, qe = qh[r][i] << shl, qo = qh[r][i] >> shr;
            a0e[r] = hadd2((l & 0x000F000Fu) | kMagic | (qe & 0x00300030u), h2c(-1056.0));  // 1024 + q -> q - 32
            a0o[r] = hadd2((l8 & 0x000F000Fu) | kMagic | (qo & 0x00300030u), h2c(-1056.0));
            a1e[r] = hfma2((l & 0x00F000F0u) | kMagic | (qe & 0x03000300u), h2c(0.0625), h2c(-96.0));  // 1024 + 16q
            a1o[r] = hfma2((l8 & 0x00F000F0u) | kMagic | (qo & 0x03000300u), h2c(0.0625), h2c(-96.0));
        }
        mma(acc[lh], a0e[0], a0e[1], a0o[0], a0o[1], bfrag(c, i));
        mma(acc[2 + lh], a1e[0], a1e[1], a1o[0], a1o[1], bfrag(c, 8 + i));
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
        y0 += ds[0][j] * (acc[j][0] + acc[j][1]);
        y1 += ds[1][j] * (acc[j][2] + acc[j][3]);
    }
}

// q4_0, q4_1, q5_0, q5_1 (32-element blocks: d, [m], [qh], qs[16]): lane t takes blocks t and t + 4 of
// the k-tile (columns 32 blk + l) whole, so each block's f16 scale d (and offset m) is applied by one
// lane in f32. Word i of qs gives elements 4i .. 4i+3 (low nibbles) and 16 + 4i .. (high nibbles); the
// fifth bits of q5_0/q5_1 are spread from qh to bit 4 (8) of each half with one multiply.
template <Type T>
__device__ __forceinline__ void tile_q45(const Item& c, float& y0, float& y1) {
    constexpr bool kMin = T == Type::Q4_1 || T == Type::Q5_1, kFive = T == Type::Q5_0 || T == Type::Q5_1;
    constexpr int kBytes = block_bytes(T);
    constexpr double kZero = T == Type::Q4_0 ? 8.0 : T == Type::Q5_0 ? 16.0 : 0.0;  // code offset
    const float inv_s = ldf(c.xs + 4 * kSumInv);
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {
        const int blk = c.t + 4 * bb;
        const bool valid = blk < c.nb;
        uint32_t w[2][4], qh[2] = {0u, 0u};
        float dd[2], mf[2] = {0.f, 0.f};
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t o = (r ? c.o1 : c.o0) + blk * kBytes;
            if constexpr (T == Type::Q4_0) {
                ld_words<4>(o + 2, w[r]);
            } else if constexpr (T == Type::Q4_1) {
                ld_words4<4>(o + 4, w[r]);
            } else if constexpr (T == Type::Q5_0) {
                uint32_t v[5];
                ld_words<5>(o + 2, v);
                qh[r] = v[0];
                for (int i = 0; i < 4; ++i) w[r][i] = v[i + 1];
            } else {
                qh[r] = ld32(o + 4);
                ld_words4<4>(o + 8, w[r]);
            }
            dd[r] = valid ? ld_f16(o) * inv_s : 0.0f;  // a missing block (end of a row): no contribution
            if constexpr (kMin) mf[r] = valid ? ld_f16(o + 2) : 0.0f;
        }
        float cl[4] = {0.f, 0.f, 0.f, 0.f}, ch[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            uint32_t le[2], lo[2], he[2], ho[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const uint32_t x = w[r][i], x8 = x >> 8;
                uint32_t pe = (x & 0x000F000Fu) | kMagic, po = (x8 & 0x000F000Fu) | kMagic;
                uint32_t qe = (x & 0x00F000F0u) | kMagic, qo = (x8 & 0x00F000F0u) | kMagic;
                if constexpr (kFive) {
                    // bits 0 and 2 of u (elements 4i and 4i + 2) to bits 4 and 20, and likewise for the rest
                    const uint32_t u = qh[r] >> (4 * i);
                    pe |= ((u & 5u) * 0x40010u) & 0x00100010u;
                    po |= (((u >> 1) & 5u) * 0x40010u) & 0x00100010u;
                    qe |= (((u >> 16) & 5u) * 0x400100u) & 0x01000100u;
                    qo |= (((u >> 17) & 5u) * 0x400100u) & 0x01000100u;
                }
                le[r] = hadd2(pe, h2c(-1024.0 - kZero));
                lo[r] = hadd2(po, h2c(-1024.0 - kZero));
                he[r] = hfma2(qe, h2c(0.0625), h2c(-64.0 - kZero));
                ho[r] = hfma2(qo, h2c(0.0625), h2c(-64.0 - kZero));
            }
            mma(cl, le[0], le[1], lo[0], lo[1], bfrag(c, 8 * bb + i));
            mma(ch, he[0], he[1], ho[0], ho[1], bfrag(c, 8 * bb + 4 + i));
        }
        y0 += dd[0] * (cl[0] + cl[1] + ch[0] + ch[1]);
        y1 += dd[1] * (cl[2] + cl[3] + ch[2] + ch[3]);
        if constexpr (kMin) {  // + m sum x over the block
            const float xsum = ldf(c.xs + 4 * (kSum32 + blk));
            y0 += mf[0] * xsum;
            y1 += mf[1] * xsum;
        }
    }
}

// Byte offsets of block b's f16 scale and of its codes in a k-tile (eight blocks) of a legacy type whose
// scale leads the block (q4_0, q8_0: d then qs) or of q8_0 grouped (kQ8_0G: the eight scales, then the codes).
template <Type T>
__device__ __forceinline__ constexpr int legacy_scale_at(int b) {
    return T == kQ8_0G ? q80g_scale_at(b) : block_bytes(T) * b;
}
template <Type T>
__device__ __forceinline__ constexpr int legacy_codes_at(int b) {
    return T == kQ8_0G ? q80g_codes_at(b) : block_bytes(T) * b + 2;
}

// q8_0 (d, qs[32] signed; T = Q8_0 or kQ8_0G): lane t takes blocks t and t + 4 whole; word i gives
// elements 4i .. 4i+3, turned into f16 by flipping the sign bit (b + 128) and placing the byte in 1024's
// mantissa.
template <Type T>
__device__ __forceinline__ void tile_q80(const Item& c, float& y0, float& y1) {
    const float inv_s = ldf(c.xs + 4 * kSumInv);
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {
        const int blk = c.t + 4 * bb;
        const bool valid = blk < c.nb;
        uint32_t w[2][8];
        float dd[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t o = r ? c.o1 : c.o0;
            ld_words<8>(o + legacy_codes_at<T>(blk), w[r]);
            dd[r] = valid ? ld_f16(o + legacy_scale_at<T>(blk)) * inv_s : 0.0f;
        }
        float ca[4] = {0.f, 0.f, 0.f, 0.f}, cb[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int i = 0; i < 8; ++i) {
            uint32_t e[2], od[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const uint32_t x = w[r][i] ^ 0x80808080u;
                e[r] = hadd2(__byte_perm(x, kMagicB, 0x4240u), h2c(-1152.0));   // bytes 0, 2
                od[r] = hadd2(__byte_perm(x, kMagicB, 0x4341u), h2c(-1152.0));  // bytes 1, 3
            }
            float(&acc)[4] = (i & 1) ? cb : ca;
            mma(acc, e[0], e[1], od[0], od[1], bfrag(c, 8 * bb + i));
        }
        y0 += dd[0] * (ca[0] + ca[1] + cb[0] + cb[1]);
        y1 += dd[1] * (ca[2] + ca[3] + cb[2] + cb[3]);
    }
}

// Per-type traits of the MMA family. kKtBytes: bytes of one row's 256-column k-tile.
template <Type T>
struct Mv;
template <Type T>
struct MvKQuant {  // q2_K .. q5_K: column group q is lane q >> 4's MMA q & 15
    static constexpr int kKtBytes = block_bytes(T);
    static constexpr bool kExtra = true;
    __device__ static int2 map(int q) { return make_int2(q & 15, q >> 4); }
    // MMA 16, lane t's k-slot i: the sum of x over sub-block 2t + i (32 columns: q4_K, q5_K; none for
    // i >= 2) or 4t + i (16 columns: q2_K, q3_K); extra_lane is a lane that holds it after prep's sums.
    static constexpr bool kExtra16 = T == Type::Q2_K || T == Type::Q3_K;
    __device__ static int extra_lane(int t, int i) {
        if constexpr (kExtra16) return 8 * t + 2 * i;
        else return i < 2 ? 8 * t + 4 * i : -1;
    }
};
template <> struct Mv<Type::Q2_K> : MvKQuant<Type::Q2_K> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_k23<false>(c, y0, y1); }
};
template <> struct Mv<Type::Q3_K> : MvKQuant<Type::Q3_K> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_k23<true>(c, y0, y1); }
};
template <> struct Mv<Type::Q4_K> : MvKQuant<Type::Q4_K> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_k45<false>(c, y0, y1); }
};
template <> struct Mv<Type::Q5_K> : MvKQuant<Type::Q5_K> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_k45<true>(c, y0, y1); }
};
template <> struct Mv<Type::Q6_K> {
    static constexpr int kKtBytes = block_bytes(Type::Q6_K);
    static constexpr bool kExtra = false, kExtra16 = false;
    // columns 128h + 64nib + 32k1 + 4i: lane 2h + k1, MMA 8nib + i
    __device__ static int2 map(int q) { return make_int2(((q >> 4) & 1) * 8 + (q & 7), 2 * (q >> 5) + ((q >> 3) & 1)); }
    __device__ static int extra_lane(int, int) { return -1; }
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_q6k(c, y0, y1); }
};
template <Type T>
struct MvLegacy {  // eight 32-element blocks per k-tile; block blk is lane blk & 3's MMAs 8 (blk >> 2) ..
    static constexpr int kKtBytes = 8 * block_bytes(T);
    static constexpr bool kExtra = false, kExtra16 = false;
    __device__ static int2 map(int q) { return make_int2(8 * (q >> 5) + (q & 7), (q >> 3) & 3); }
    __device__ static int extra_lane(int, int) { return -1; }
};
template <> struct Mv<Type::Q4_0> : MvLegacy<Type::Q4_0> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_q45<Type::Q4_0>(c, y0, y1); }
};
template <> struct Mv<Type::Q4_1> : MvLegacy<Type::Q4_1> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_q45<Type::Q4_1>(c, y0, y1); }
};
template <> struct Mv<Type::Q5_0> : MvLegacy<Type::Q5_0> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_q45<Type::Q5_0>(c, y0, y1); }
};
template <> struct Mv<Type::Q5_1> : MvLegacy<Type::Q5_1> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_q45<Type::Q5_1>(c, y0, y1); }
};
template <> struct Mv<Type::Q8_0> : MvLegacy<Type::Q8_0> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_q80<Type::Q8_0>(c, y0, y1); }
};
template <> struct Mv<kQ8_0G> : MvLegacy<kQ8_0G> {
    __device__ static void tile(const Item& c, float& y0, float& y1) { tile_q80<kQ8_0G>(c, y0, y1); }
};

// ---- the int8 family: q4_0, q8_0, q4_K, q6_K ------------------------------------------------------------------
//
// The input comes quantized once per mat-vec input (xq, written by quantize_x or by the RMSNorm before
// it): per 32-column block b, x[c] ~= d_b * (256 * hi[c] + lo[c]) with hi, lo int8 digits (d_b = max |x|
// / 32512, so hi is within +-127 and the value keeps about 15 significant bits: an error of 1.5e-5 of the
// block's largest value at most), and s0_b, s1_b the integer sums of 256 hi + lo over the block's two
// 16-column halves (the offsets and mins of the weights multiply these). Layout of xq_bytes(cols) bytes
// (cols a multiple of 32): hi[cols], lo[cols], then per block a 16-byte record {d_b (f32 bits), s0_b,
// s1_b, 0}.
//
// Weight codes enter mma.m16n8k32 (8-bit integers, s32 accumulators) as they are stored, unpacked with
// one or two logic operations per four codes; the same "block diagonal" B as the f16 family, so lane (g,
// t) gets its own integer dot products of rows g and g + 8 with the hi digits (D column 2t) and the lo
// digits (2t + 1), and applies its blocks' scales in f32: 256 * hi + lo is exact in s32 for every type
// (at most 8 * 4 products of 255 * 127 per accumulator), so the only roundings are the input's
// quantization and the f32 scaling. The lanes with g >> 1 == t load B (8 consecutive digits of x: the
// columns of their a0 then a2), the others pass zeros. About 1 to 2 issue slots per weight, against
// 3 for the f16 family.
__host__ __device__ constexpr int64_t xq_bytes(int64_t cols) { return 2 * cols + cols / 32 * 16; }
// Several rows (the inputs of a few tokens, read together by the kernels over several columns below) are
// stored block-interleaved instead, so that the eight columns an MMA reads lie side by side: nrows *
// xq_bytes(cols) bytes, first per 32-column block b and row r (index b * nrows + r) 64 bytes of digits,
// four 16-byte chunks of 8 hi digits then the same 8 lo digits (columns 32b + 8i .. +7 in chunk i), then
// per (b, r) the 16-byte record.
struct XqSlot {
    int64_t hi, lo, rec;  // byte offsets of the hi and lo digits of columns c0 .. c0+3, and of their block's record
};
__host__ __device__ inline XqSlot xq_slot(int64_t c0, int64_t cols, int row, int nrows) {
    if (nrows == 1) return {c0, cols + c0, 2 * cols + c0 / 32 * 16};
    const int64_t bc = c0 / 32 * nrows + row;
    const int64_t e = bc * 64 + (c0 & 31) / 8 * 16 + (c0 & 7);
    return {e, e + 8, 2 * cols * nrows + bc * 16};
}
// Column c of row `row` of the input as the int8 kernels see it, d (256 hi + lo), read from xq's bytes on
// the host.
inline float xq_value(const uint8_t* xq, int64_t cols, int64_t c, int row = 0, int nrows = 1) {
    const XqSlot at = xq_slot(c & ~int64_t{3}, cols, row, nrows);
    float d;
    std::memcpy(&d, xq + at.rec, sizeof d);
    const int hi = static_cast<int8_t>(xq[at.hi + (c & 3)]), lo = static_cast<int8_t>(xq[at.lo + (c & 3)]);
    return static_cast<float>(static_cast<double>(d) * (256.0 * hi + lo));
}

// Quantizes groups of 8 lanes x 4 consecutive values (v at column c0 = 4 * (the lane's float4 index),
// so each group covers one 32-column block) of row `row` of nrows into xq. Every lane of the warp calls
// it (shuffles); `valid` (the same for a whole group) false writes nothing.
__device__ __forceinline__ void xq_put4(float4 v, int64_t c0, int64_t cols, uint8_t* xq, bool valid, int row = 0, int nrows = 1) {
    float am = fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
    am = fmaxf(am, __shfl_xor_sync(kFull, am, 1));
    am = fmaxf(am, __shfl_xor_sync(kFull, am, 2));
    am = fmaxf(am, __shfl_xor_sync(kFull, am, 4));
    // Blocks whose largest magnitude is below 1e-33 become zeros (32512 / am must stay finite, d normal).
    am = am < 1e-33f ? 0.0f : am;
    const float inv = am > 0.0f ? 32512.0f / am : 0.0f;
    const float f[4] = {v.x, v.y, v.z, v.w};
    uint32_t hi = 0, lo = 0;
    int s = 0;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
        const float u = f[e] * inv;  // |u| <= 32512 (+ rounding)
        int h = max(-127, min(127, static_cast<int>(rintf(u * (1.0f / 256.0f)))));
        int l = static_cast<int>(rintf(u - 256.0f * static_cast<float>(h)));  // -128 .. 128
        if (l > 127) {  // 256 h + 128 = 256 (h + 1) - 128 (h < 127 here: u <= 32512)
            ++h;
            l -= 256;
        }
        l = max(-128, min(127, l));
        hi |= (static_cast<uint32_t>(h) & 0xffu) << (8 * e);
        lo |= (static_cast<uint32_t>(l) & 0xffu) << (8 * e);
        s += 256 * h + l;
    }
    s += __shfl_xor_sync(kFull, s, 1);
    s += __shfl_xor_sync(kFull, s, 2);  // the 16-column half's sum in each of its four lanes
    const int s_next = __shfl_xor_sync(kFull, s, 4);
    if (!valid) return;
    const XqSlot at = xq_slot(c0, cols, row, nrows);
    *reinterpret_cast<uint32_t*>(xq + at.hi) = hi;
    *reinterpret_cast<uint32_t*>(xq + at.lo) = lo;
    if ((c0 & 31) == 0) {
        int4 rec;
        rec.x = __float_as_int(am * (1.0f / 32512.0f));
        rec.y = s;
        rec.z = s_next;
        rec.w = 0;
        *reinterpret_cast<int4*>(xq + at.rec) = rec;
    }
}

struct Item8 {
    uint32_t o0, o1;    // shared offsets of the k-tile bytes of rows g and g + 8
    const int8_t* xb;   // hi (g even) or lo (g odd) digits at the k-tile's first column
    const int4* meta;   // the k-tile's first block record
    int t;              // lane & 3
    int nb;             // legacy types: blocks present in this k-tile (8 except at the end of a row)
    bool feeds;         // this lane loads B (g >> 1 == t)
};
// B of one MMA: 8 digits from column `col` of the k-tile (this lane's hi or lo), zeros for other lanes
// and invalid blocks. Every lane loads (an L1 hit; no branch), the mask selects.
__device__ __forceinline__ uint2 bx8(const Item8& c, int col, bool valid = true) {
    const uint2 v = ld_x8(c.xb + (valid ? col : 0));
    const uint32_t m = c.feeds && valid ? 0xffffffffu : 0u;
    return make_uint2(v.x & m, v.y & m);
}
__device__ __forceinline__ float digits(const int (&a)[4], int r) { return static_cast<float>(256 * a[2 * r] + a[2 * r + 1]); }

// q8_0 (d, qs[32] signed; grouped too, kQ8_0G) and q4_0 (d, qs[16]: byte l holds element l in its low
// nibble and l + 16 in its high one, code - 8): lane t takes blocks t and t + 4 whole. q8_0: MMA m
// multiplies words 2m, 2m + 1 of qs (columns 8m .. 8m+7 of the block); q4_0: MMAs 0, 1 the low nibbles of
// words 0-1 and 2-3, MMAs 2, 3 the high ones, and the -8 goes through the block's sums.
template <Type T>
__device__ __forceinline__ void tile8_legacy(const Item8& c, float& y0, float& y1) {
    constexpr bool k8 = T == Type::Q8_0 || T == kQ8_0G;
    constexpr int kWords = k8 ? 8 : 4;
#pragma unroll
    for (int bb = 0; bb < 2; ++bb) {
        const int blk = c.t + 4 * bb;
        const bool valid = blk < c.nb;
        uint32_t w0[kWords], w1[kWords];
        ld_words<kWords>(c.o0 + legacy_codes_at<T>(blk), w0);
        ld_words<kWords>(c.o1 + legacy_codes_at<T>(blk), w1);
        int acc[4] = {0, 0, 0, 0};
#pragma unroll
        for (int m = 0; m < 4; ++m) {
            const uint2 b = bx8(c, 32 * blk + 8 * m, valid);
            if constexpr (k8) {
                mma_i8<true>(acc, w0[2 * m], w1[2 * m], w0[2 * m + 1], w1[2 * m + 1], b);
            } else {
                const int sh = 4 * (m >> 1), wi = 2 * (m & 1);
                mma_i8<false>(acc, (w0[wi] >> sh) & 0x0F0F0F0Fu, (w1[wi] >> sh) & 0x0F0F0F0Fu, (w0[wi + 1] >> sh) & 0x0F0F0F0Fu,
                              (w1[wi + 1] >> sh) & 0x0F0F0F0Fu, b);
            }
        }
        if (valid) {
            const int4 rec = ld_xmeta(c.meta + blk);
            const float dx = __int_as_float(rec.x), off = k8 ? 0.0f : static_cast<float>(8 * (rec.y + rec.z));
            y0 += ld_f16(c.o0 + legacy_scale_at<T>(blk)) * dx * (digits(acc, 0) - off);
            y1 += ld_f16(c.o1 + legacy_scale_at<T>(blk)) * dx * (digits(acc, 1) - off);
        }
    }
}

// q4_K (d, dmin, scales[12], qs[128]; 16-byte aligned): lane t takes qs bytes 32t .. 32t+31, i.e.
// sub-blocks 2t (low nibbles, columns 64t + l) and 2t + 1 (high nibbles, 64t + 32 + l, entering the MMA
// unshifted as 16 q: one operation per four codes), one accumulator each: y += d_x (d sc_j D_j - dmin m_j
// S_j) per sub-block j.
__device__ __forceinline__ void tile8_q4k(const Item8& c, float& y0, float& y1) {
    const int t = c.t;
    uint32_t q[2][8];
    float dsa[2], dsb[2], dma[2], dmb[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint32_t o = r ? c.o1 : c.o0;
        const uint4 h = ld128(o);  // d, dmin, scales[0..11]
        uint32_t sc, mn;
        k4_scales(h, t, sc, mn);
        const int sh = 16 * (t & 1);
        const float d = f16_lo(h.x), dmin = f16_hi(h.x);
        dsa[r] = d * static_cast<float>((sc >> sh) & 0xffu);
        dsb[r] = d * static_cast<float>((sc >> (sh + 8)) & 0xffu) * 0.0625f;  // the high nibbles enter as 16 q
        dma[r] = dmin * static_cast<float>((mn >> sh) & 0xffu);
        dmb[r] = dmin * static_cast<float>((mn >> (sh + 8)) & 0xffu);
        const uint4 a = ld128(o + 16 + 32 * t), b = ld128(o + 32 + 32 * t);
        q[r][0] = a.x; q[r][1] = a.y; q[r][2] = a.z; q[r][3] = a.w;
        q[r][4] = b.x; q[r][5] = b.y; q[r][6] = b.z; q[r][7] = b.w;
    }
    int acc[2][4] = {};
#pragma unroll
    for (int m = 0; m < 4; ++m) {
        mma_i8<false>(acc[0], q[0][2 * m] & 0x0F0F0F0Fu, q[1][2 * m] & 0x0F0F0F0Fu, q[0][2 * m + 1] & 0x0F0F0F0Fu,
                      q[1][2 * m + 1] & 0x0F0F0F0Fu, bx8(c, 64 * t + 8 * m));
        mma_i8<false>(acc[1], q[0][2 * m] & 0xF0F0F0F0u, q[1][2 * m] & 0xF0F0F0F0u, q[0][2 * m + 1] & 0xF0F0F0F0u,
                      q[1][2 * m + 1] & 0xF0F0F0F0u, bx8(c, 64 * t + 32 + 8 * m));
    }
    const int4 ra = ld_xmeta(c.meta + 2 * t), rb = ld_xmeta(c.meta + 2 * t + 1);
    const float xa = __int_as_float(ra.x), xb = __int_as_float(rb.x);
    const float sa = static_cast<float>(ra.y + ra.z), sb = static_cast<float>(rb.y + rb.z);
    y0 += xa * (dsa[0] * digits(acc[0], 0) - dma[0] * sa) + xb * (dsb[0] * digits(acc[1], 0) - dmb[0] * sb);
    y1 += xa * (dsa[1] * digits(acc[0], 1) - dma[1] * sa) + xb * (dsb[1] * digits(acc[1], 1) - dmb[1] * sb);
}

// q6_K (ql[128], qh[64], scales[16] int8, d; code - 32): lane t takes half h = t >> 1 and the ql bytes
// 64h + 32k1 + l (k1 = t & 1): low nibbles are field k1 (columns 128h + 32k1 + l), high nibbles field
// k1 + 2 (64 columns further); qh[32h + l] bits 2k, 2k + 1 are bits 4-5 of field k's code. Four
// 16-column sub-blocks per lane, two MMAs each; the -32 goes through the half-block sums.
__device__ __forceinline__ void tile8_q6k(const Item8& c, float& y0, float& y1) {
    const int t = c.t, h = t >> 1, k1 = t & 1;
    const int shl = 4 - 2 * k1, shr = 2 * k1;
    uint32_t ql[2][8], qh[2][8];
    float ds[2][4];  // d sc_j for sub-blocks 8h + 2k1 + {0, 1} (low field) and 8h + 4 + 2k1 + {0, 1} (high)
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        const uint32_t o = r ? c.o1 : c.o0;
        ld_words<8>(o + 64 * h + 32 * k1, ql[r]);
        ld_words<8>(o + 128 + 32 * h, qh[r]);
        const float d = ld_f16(o + 208);
#pragma unroll
        for (int f = 0; f < 2; ++f) {
            const uint32_t v = ld16(o + 192 + 8 * h + 2 * k1 + 4 * f);
            ds[r][2 * f] = d * static_cast<float>(static_cast<int8_t>(v & 0xffu));
            ds[r][2 * f + 1] = d * static_cast<float>(static_cast<int8_t>(v >> 8));
        }
    }
    const int4 rl = ld_xmeta(c.meta + 4 * h + k1), rh = ld_xmeta(c.meta + 4 * h + 2 + k1);
#pragma unroll
    for (int f = 0; f < 2; ++f) {  // f = 0: low field, 1: high
        const int4 rec = f ? rh : rl;
        const float dx = __int_as_float(rec.x);
#pragma unroll
        for (int sub = 0; sub < 2; ++sub) {
            int acc[4] = {0, 0, 0, 0};
#pragma unroll
            for (int mm = 0; mm < 2; ++mm) {
                const int i = 4 * sub + 2 * mm;  // words i, i + 1: columns 8 * (2 sub + mm) .. of the field's 32
                uint32_t a[2][2];
#pragma unroll
                for (int r = 0; r < 2; ++r)
#pragma unroll
                    for (int j = 0; j < 2; ++j) {
                        const uint32_t l = ql[r][i + j], u = qh[r][i + j];
                        a[r][j] = f ? ((l >> 4) & 0x0F0F0F0Fu) | ((u >> shr) & 0x30303030u)
                                    : (l & 0x0F0F0F0Fu) | ((u << shl) & 0x30303030u);
                    }
                mma_i8<false>(acc, a[0][0], a[1][0], a[0][1], a[1][1], bx8(c, 128 * h + 64 * f + 32 * k1 + 16 * sub + 8 * mm));
            }
            const float off = static_cast<float>(32 * (sub ? rec.z : rec.y));
            y0 += ds[0][2 * f + sub] * dx * (digits(acc, 0) - off);
            y1 += ds[1][2 * f + sub] * dx * (digits(acc, 1) - off);
        }
    }
}

template <Type T>
struct Mv8;
template <> struct Mv8<Type::Q4_0> {
    __device__ static void tile(const Item8& c, float& y0, float& y1) { tile8_legacy<Type::Q4_0>(c, y0, y1); }
};
template <> struct Mv8<Type::Q8_0> {
    __device__ static void tile(const Item8& c, float& y0, float& y1) { tile8_legacy<Type::Q8_0>(c, y0, y1); }
};
template <> struct Mv8<kQ8_0G> {
    __device__ static void tile(const Item8& c, float& y0, float& y1) { tile8_legacy<kQ8_0G>(c, y0, y1); }
};
template <> struct Mv8<Type::Q4_K> {
    __device__ static void tile(const Item8& c, float& y0, float& y1) { tile8_q4k(c, y0, y1); }
};
template <> struct Mv8<Type::Q6_K> {
    __device__ static void tile(const Item8& c, float& y0, float& y1) { tile8_q6k(c, y0, y1); }
};
// ---- the int8 family over several input columns (a few tokens at once) ------------------------------------
//
// The same items and ring, but B holds real columns: MMA column n is input column n (lane (g, t) loads
// column g's digits of its k-slots, hi and lo for two MMAs), so D[row][n] is a block's dot product of one
// row and one column, and lane (g, t) keeps y of rows g, g + 8 and columns 2t, 2t + 1. Lane t's k-slots of an MMA are the elements 8t .. 8t+7 of one 32-column block,
// whose digits are one 16-byte chunk of the block-interleaved input (xq_slot): a warp's B load reads 8
// columns x 64 contiguous bytes. Every MMA's sums lie in one scale block of both operands (a legacy
// block, a q4_K sub-block; q6_K's 16-column sub-blocks get an MMA pair each, the other half's B zeroed).
// The weight codes are unpacked once per item for every column. (Two groups of 8 columns, 16 inputs,
// measured 2.2 times slower per launch than one group on the H200, 168 registers and fewer CTAs per SM:
// more tokens go to the GEMMs.)
//
// Input: ncols (2 .. 8) rows of the block-interleaved layout; columns past ncols read the last one (their
// results are never stored). Output y[col * rows + row] (token-major, as the GEMMs write it).
constexpr int kColsN = 8;
struct ItemN {
    uint32_t o0, o1;     // shared offsets of the k-tile bytes of rows g and g + 8
    const uint8_t* dig;  // digits of the k-tile's first block, input column 0
    const uint8_t* rec;  // record of the k-tile's first block, input column 0
    int ncols, t, nb;
};
// Byte offsets of this lane's B chunk (column g, its k-slots) and of its D columns 2t, 2t + 1 from the
// block's column 0; clamped to the last input column.
struct ColsN {
    int b, d[2];
};
__device__ __forceinline__ ColsN cols_of(int g, int t, int ncols) {
    return {min(g, ncols - 1) * 64 + 16 * t, {min(2 * t, ncols - 1) * 16, min(2 * t + 1, ncols - 1) * 16}};
}
// B of block blk of the k-tile: hi digits in .x/.y, lo in .z/.w.
__device__ __forceinline__ int4 bxn(const ItemN& c, int ofs, int blk) {
    return ld_x16(reinterpret_cast<const int4*>(c.dig + blk * c.ncols * 64 + ofs));
}
__device__ __forceinline__ int4 metan(const ItemN& c, int ofs, int blk) {
    return ld_xmeta(reinterpret_cast<const int4*>(c.rec + blk * c.ncols * 16 + ofs));
}
__device__ __forceinline__ uint2 hi_of(int4 v, uint32_t m = 0xffffffffu) {
    return make_uint2(static_cast<uint32_t>(v.x) & m, static_cast<uint32_t>(v.y) & m);
}
__device__ __forceinline__ uint2 lo_of(int4 v, uint32_t m = 0xffffffffu) {
    return make_uint2(static_cast<uint32_t>(v.z) & m, static_cast<uint32_t>(v.w) & m);
}
// 256 hi + lo of the two MMAs' sums.
__device__ __forceinline__ float digitsn(const int (&hi)[4], const int (&lo)[4], int e) { return static_cast<float>(256 * hi[e] + lo[e]); }

// q8_0 (grouped too) and q4_0: an MMA pair per block (q4_0: lane t's elements are the low nibbles of
// bytes 8t .. for t < 2, the high ones of bytes 8 (t - 2) .. for t >= 2).
template <Type T>
__device__ __forceinline__ void tilen_legacy(const ItemN& c, const ColsN& cl, float (&y)[4]) {
    constexpr bool k8 = T == Type::Q8_0 || T == kQ8_0G;
    const int t = c.t, sh = 4 * (t >> 1);
#pragma unroll
    for (int blk = 0; blk < 8; ++blk) {
        if (blk >= c.nb) break;
        uint32_t w0[2], w1[2];
        ld_words<2>(c.o0 + legacy_codes_at<T>(blk) + (k8 ? 8 * t : 8 * (t & 1)), w0);
        ld_words<2>(c.o1 + legacy_codes_at<T>(blk) + (k8 ? 8 * t : 8 * (t & 1)), w1);
        if constexpr (!k8) {
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                w0[j] = (w0[j] >> sh) & 0x0F0F0F0Fu;
                w1[j] = (w1[j] >> sh) & 0x0F0F0F0Fu;
            }
        }
        const float d0 = ld_f16(c.o0 + legacy_scale_at<T>(blk)), d1 = ld_f16(c.o1 + legacy_scale_at<T>(blk));
        const int4 b = bxn(c, cl.b, blk);
        int hi[4] = {0, 0, 0, 0}, lo[4] = {0, 0, 0, 0};
        mma_i8<k8>(hi, w0[0], w1[0], w0[1], w1[1], hi_of(b));
        mma_i8<k8>(lo, w0[0], w1[0], w0[1], w1[1], lo_of(b));
#pragma unroll
        for (int j = 0; j < 2; ++j) {
            const int4 rec = metan(c, cl.d[j], blk);
            const float dx = __int_as_float(rec.x), off = k8 ? 0.0f : static_cast<float>(8 * (rec.y + rec.z));
            y[j] += d0 * dx * (digitsn(hi, lo, j) - off);
            y[2 + j] += d1 * dx * (digitsn(hi, lo, 2 + j) - off);
        }
    }
}

// q4_K: an MMA pair per sub-block j (qs bytes 32 (j >> 1) + 8t .., low nibbles for even j, high ones
// for odd j entering as 16 q, the 1/16 folded into the scale).
__device__ __forceinline__ void tilen_q4k(const ItemN& c, const ColsN& cl, float (&y)[4]) {
    const int t = c.t;
    uint4 h[2];
    uint32_t sc[2][2], mn[2][2];  // [row][sub-blocks 0-3, 4-7]
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        h[r] = ld128(r ? c.o1 : c.o0);
        k4_scales(h[r], 0, sc[r][0], mn[r][0]);
        k4_scales(h[r], 2, sc[r][1], mn[r][1]);
    }
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        const uint2 q0 = ld64(c.o0 + 16 + 32 * i + 8 * t), q1 = ld64(c.o1 + 16 + 32 * i + 8 * t);
#pragma unroll
        for (int hn = 0; hn < 2; ++hn) {
            const int j = 2 * i + hn;
            const uint32_t m = hn ? 0xF0F0F0F0u : 0x0F0F0F0Fu;
            float ds[2], dm[2];
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const int shj = 8 * (j & 3);
                ds[r] = f16_lo(h[r].x) * static_cast<float>((sc[r][j >> 2] >> shj) & 0xffu) * (hn ? 0.0625f : 1.0f);
                dm[r] = f16_hi(h[r].x) * static_cast<float>((mn[r][j >> 2] >> shj) & 0xffu);
            }
            const int4 b = bxn(c, cl.b, j);
            int hi[4] = {0, 0, 0, 0}, lo[4] = {0, 0, 0, 0};
            mma_i8<false>(hi, q0.x & m, q1.x & m, q0.y & m, q1.y & m, hi_of(b));
            mma_i8<false>(lo, q0.x & m, q1.x & m, q0.y & m, q1.y & m, lo_of(b));
#pragma unroll
            for (int jj = 0; jj < 2; ++jj) {
                const int4 rec = metan(c, cl.d[jj], j);
                const float dx = __int_as_float(rec.x), sx = static_cast<float>(rec.y + rec.z);
                y[jj] += dx * (ds[0] * digitsn(hi, lo, jj) - dm[0] * sx);
                y[2 + jj] += dx * (ds[1] * digitsn(hi, lo, 2 + jj) - dm[1] * sx);
            }
        }
    }
}

// q6_K: per 32-column block 4h + f (field f of half h: elements 128h + 32f + l), lane t's elements l =
// 8t .. 8t+7 are ql bytes 64h + 32 (f & 1) + 8t .. (nibble f >> 1) and qh bytes 32h + 8t .. (bits 2f,
// 2f + 1); they lie in 16-column sub-block 8h + 2f + (t >> 1), so the block takes two MMA pairs, each
// with the other sub-block's lanes passing zeros for B; the -32 goes through the half-block sums of x.
__device__ __forceinline__ void tilen_q6k(const ItemN& c, const ColsN& cl, float (&y)[4]) {
    const int t = c.t;
    const float d0 = ld_f16(c.o0 + 208), d1 = ld_f16(c.o1 + 208);
    const uint32_t own0 = t < 2 ? 0xffffffffu : 0u;  // this lane's elements are in the block's first half
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
        uint32_t l0[2][2], l1[2][2], qh[2][2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            const uint32_t o = r ? c.o1 : c.o0;
            ld_words<2>(o + 64 * hh + 8 * t, l0[r]);
            ld_words<2>(o + 64 * hh + 32 + 8 * t, l1[r]);
            ld_words<2>(o + 128 + 32 * hh + 8 * t, qh[r]);
        }
#pragma unroll
        for (int f = 0; f < 4; ++f) {
            uint32_t a[2][2];
            float ds[2][2];  // [row][half]
#pragma unroll
            for (int r = 0; r < 2; ++r) {
#pragma unroll
                for (int w = 0; w < 2; ++w) {
                    const uint32_t l = (f & 1) ? l1[r][w] : l0[r][w], u = qh[r][w];
                    const uint32_t lq = (f >> 1) ? (l >> 4) & 0x0F0F0F0Fu : l & 0x0F0F0F0Fu;
                    const uint32_t uq = f == 0 ? (u << 4) : f == 1 ? (u << 2) : f == 2 ? u : (u >> 2);
                    a[r][w] = lq | (uq & 0x30303030u);
                }
                const uint32_t sv = ld16((r ? c.o1 : c.o0) + 192 + 8 * hh + 2 * f);  // sub-blocks 8h + 2f, + 1
                ds[r][0] = (r ? d1 : d0) * static_cast<float>(static_cast<int8_t>(sv & 0xffu));
                ds[r][1] = (r ? d1 : d0) * static_cast<float>(static_cast<int8_t>(sv >> 8));
            }
            const int blk = 4 * hh + f;
            const int4 b = bxn(c, cl.b, blk);
#pragma unroll
            for (int half = 0; half < 2; ++half) {
                const uint32_t own = half ? ~own0 : own0;
                int hi[4] = {0, 0, 0, 0}, lo[4] = {0, 0, 0, 0};
                mma_i8<false>(hi, a[0][0], a[1][0], a[0][1], a[1][1], hi_of(b, own));
                mma_i8<false>(lo, a[0][0], a[1][0], a[0][1], a[1][1], lo_of(b, own));
#pragma unroll
                for (int jj = 0; jj < 2; ++jj) {
                    const int4 rec = metan(c, cl.d[jj], blk);
                    const float dx = __int_as_float(rec.x), off = static_cast<float>(32 * (half ? rec.z : rec.y));
                    y[jj] += ds[0][half] * dx * (digitsn(hi, lo, jj) - off);
                    y[2 + jj] += ds[1][half] * dx * (digitsn(hi, lo, 2 + jj) - off);
                }
            }
        }
    }
}

template <Type T>
__device__ __forceinline__ void tilen(const ItemN& c, const ColsN& cl, float (&y)[4]) {
    if constexpr (T == Type::Q4_K) tilen_q4k(c, cl, y);
    else if constexpr (T == Type::Q6_K) tilen_q6k(c, cl, y);
    else tilen_legacy<T>(c, cl, y);
}

template <Type T>
constexpr bool kInt8Family = T == Type::Q4_0 || T == Type::Q8_0 || T == kQ8_0G || T == Type::Q4_K || T == Type::Q6_K;

template <Type T>
constexpr bool kMmaFamily = T == Type::Q4_0 || T == Type::Q4_1 || T == Type::Q5_0 || T == Type::Q5_1 || T == Type::Q8_0 || T == kQ8_0G ||
                            T == Type::Q2_K || T == Type::Q3_K || T == Type::Q4_K || T == Type::Q5_K || T == Type::Q6_K;

// Ring slots per warp (items in flight: stages - 1, at least 2) and the CTAs of kWarps per SM a kernel
// is compiled for (its register cap, max_regs). Measured on the H200 (docs/perf.md): 4 and 4 suit most kernels; the
// int8 q4_0 and q8_0 kernels, whose 2-byte aligned blocks need the widest ring slots, gain 2-4% end to
// end with 3 and 5 (more warps per SM), which cost q4_K 5%. Tuning knobs for A/B builds
// (NVCC_APPEND_FLAGS="-DMINFER_MATVEC_STAGES=3 -DMINFER_MATVEC_MIN_BLOCKS=5" sets every kernel's).
template <Type T, bool kI8>
constexpr int stages() {
#ifdef MINFER_MATVEC_STAGES
    return MINFER_MATVEC_STAGES;
#else
    return kI8 && (T == Type::Q4_0 || T == Type::Q8_0 || T == kQ8_0G) ? 3 : 4;
#endif
}
template <Type T, bool kI8>
constexpr int min_blocks() {
#ifdef MINFER_MATVEC_MIN_BLOCKS
    return MINFER_MATVEC_MIN_BLOCKS;
#else
    return stages<T, kI8>() == 3 ? 5 : 4;
#endif
}
// The copies fetch each row segment from the 32-byte boundary at or before it, so the two lanes of a
// row cover one whole 32-byte sector per copy instruction. A segment's data then starts at offset
// (address mod 32) in its slot: below 32 - the alignment the type's blocks keep (16 for q4_K and q5_K,
// whose blocks are 144 and 176 bytes; 2 to 8 for the others).
template <Type T>
constexpr int seg_align() {
    const int b = block_bytes(T);
    return (b & -b) < 16 ? (b & -b) : 16;
}
// Bytes per row segment in the ring: the data at its largest offset plus the word ld_words reads past
// it, rounded to an odd number of 16-byte units so that the eight rows a warp-wide load touches start in
// eight different 4-bank groups.
template <Type T>
constexpr int seg_bytes() {
    return ((Mv<T>::kKtBytes + 32 - seg_align<T>() + 4 + 15) / 16 | 1) * 16;
}
// kI8: the int8 family (no B fragments or sums of its own: its input is xq).
template <Type T, bool kI8 = false>
constexpr int warp_bytes() {
    return (stages<T, kI8>() * kTileRows * seg_bytes<T>() + (kI8 ? 0 : kFragBytes + kSumsBytes) + 15) / 16 * 16;
}
// kN: input columns the partials hold (1; kColsN for the int8 family over several columns); warps per CTA.
template <Type T, bool kI8 = false, int kN = 1>
constexpr int mma_smem_bytes(int maxk, int warps = kWarps) {
    return (warps * maxk * kTileRows * kN * 4 + 15) / 16 * 16 + warps * warp_bytes<T, kI8>();
}
// Registers per thread the kernel is compiled for: what min_blocks CTAs of kWarps warps leave (several
// columns: 168, 3 such CTAs).
template <Type T, bool kI8, int kN>
constexpr int max_regs() {
    constexpr int r = 65536 / (min_blocks<T, kI8>() * kThreads) / 8 * 8;
    return kN > 1 ? 168 : r < 128 ? r : 128;  // 128: what CTAs of kMaxWarps warps allow
}

// B operand of one k-tile from x[kt*256 ..]: lane L holds columns 8L .. 8L+7 in v (zeros past the row).
// s = 2^e makes max |x s| < 2^15 (f16 range with room); x s = hi + lo with hi = x s truncated to 11
// significant bits (exact in f16) and lo = the rest rounded to f16: 22 bits or more of every value.
template <Type T>
__device__ __forceinline__ void prep_ktile(const float4 xa, const float4 xb, uint32_t frag, uint32_t xs, int lane) {
    const float v[8] = {xa.x, xa.y, xa.z, xa.w, xb.x, xb.y, xb.z, xb.w};
    float am = 0.0f;
#pragma unroll
    for (int i = 0; i < 8; ++i) am = fmaxf(am, fabsf(v[i]));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) am = fmaxf(am, __shfl_xor_sync(kFull, am, o));
    // am < 2^(eb - 126), so s = 2^(141 - eb) gives am s < 2^15; clamped for zero and tiny maxima.
    const int eb = static_cast<int>(__float_as_uint(am) >> 23);
    const int es = min(max(268 - eb, 1), 253);
    const float s = __uint_as_float(static_cast<uint32_t>(es) << 23);
    const float inv_s = __uint_as_float(static_cast<uint32_t>(254 - es) << 23);
    auto split = [](float f, float& hi, float& lo) {
        hi = __uint_as_float(__float_as_uint(f) & 0xFFFFE000u);
        lo = f - hi;
    };
#pragma unroll
    for (int j = 0; j < 2; ++j) {
        const int2 mt = Mv<T>::map(2 * lane + j);
        float hi[4], lo[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) split(v[4 * j + i] * s, hi[i], lo[i]);
        const uint32_t e = frag + mt.x * kFragRow + 16 * mt.y;  // entries 2t (hi) and 2t + 1 (lo)
        st64(e, make_uint2(pack_f16x2(hi[0], hi[2]), pack_f16x2(hi[1], hi[3])));
        st64(e + 8, make_uint2(pack_f16x2(lo[0], lo[2]), pack_f16x2(lo[1], lo[3])));
    }
    // Sums of x over 16 columns (lanes 2j, 2j + 1 hold sub-block j's) and 32 columns (lanes 4j .. 4j+3).
    const float sum = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
    const float s16 = sum + __shfl_xor_sync(kFull, sum, 1);
    const float s32 = s16 + __shfl_xor_sync(kFull, s16, 2);
    if (lane == 0) stf(xs + 4 * kSumInv, inv_s);
    if ((lane & 3) == 0) stf(xs + 4 * (kSum32 + (lane >> 2)), s32);  // the legacy offsets m read these
    if constexpr (Mv<T>::kExtra) {
        // MMA 16: lane t's k-slot i holds the sum of x over one of its sub-blocks (Mv::extra_lane says
        // which lane has it), scaled by s / 32 (so |.| < 2^15).
        const float sx = s * 0.03125f;
        float hi[4], lo[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int src = Mv<T>::extra_lane(lane & 3, i);
            const float e = __shfl_sync(kFull, Mv<T>::kExtra16 ? s16 : s32, src < 0 ? 0 : src);
            split(src < 0 ? 0.0f : e * sx, hi[i], lo[i]);
        }
        if (lane < 4) {
            const uint32_t e = frag + kMmas * kFragRow + 16 * lane;
            st64(e, make_uint2(pack_f16x2(hi[0], hi[1]), pack_f16x2(hi[2], hi[3])));
            st64(e + 8, make_uint2(pack_f16x2(lo[0], lo[1]), pack_f16x2(lo[2], lo[3])));
        }
    }
}

// One 16-byte cp.async per chunk J >= j0 of the lane's span (chunks J * 2 + half; immediate offsets).
template <int J>
__device__ __forceinline__ void copy_chunk(uint32_t dst, const uint8_t* src, int chunk, int nch, int rem, int j0) {
    if (chunk < nch && J >= j0) cp_async16<32 * J>(dst, src, min(16, rem - 32 * J));
}
template <int... J>
__device__ __forceinline__ void copy_span(std::integer_sequence<int, J...>, uint32_t dst, const uint8_t* src, int half, int nch,
                                          int rem, int j0) {
    (copy_chunk<J>(dst, src, 2 * J + half, nch, rem, j0), ...);
}

// Up to three matrices of one type and width, multiplied by the same x in one launch (q, k and v; gate
// and up): global row r belongs to segment i when end[i-1] <= r < end[i] (end[-1] = 0), its bytes start
// at w[i] + (r - end[i-1]) * row_bytes and its result goes to y[i][r - end[i-1]]. Every end but the
// last is a multiple of the 16-row tile, so each tile lies in one segment.
struct Segments {
    const uint8_t* w[3] = {nullptr, nullptr, nullptr};
    float* y[3] = {nullptr, nullptr, nullptr};
    int64_t end[3] = {0, 0, 0};
    int n = 0;
};
__host__ __device__ inline Segments one_segment(const uint8_t* w, float* y, int64_t rows) {
    Segments s;
    s.w[0] = w;
    s.y[0] = y;
    s.end[0] = s.end[1] = s.end[2] = rows;
    s.n = 1;
    return s;
}
// Fields of segment i by selects, not by indexing: an index that is not a compile-time constant would
// copy the kernel parameter to local memory (an 80-byte stack frame, read per copy instruction).
__device__ __forceinline__ int segment_of(const Segments& s, int64_t r) { return r < s.end[0] ? 0 : r < s.end[1] ? 1 : 2; }
__device__ __forceinline__ int64_t segment_start(const Segments& s, int i) { return i == 0 ? 0 : i == 1 ? s.end[0] : s.end[1]; }
__device__ __forceinline__ int64_t segment_end(const Segments& s, int i) { return i == 0 ? s.end[0] : i == 1 ? s.end[1] : s.end[2]; }
__device__ __forceinline__ const uint8_t* segment_w(const Segments& s, int i) { return i == 0 ? s.w[0] : i == 1 ? s.w[1] : s.w[2]; }
__device__ __forceinline__ float* segment_y(const Segments& s, int i) { return i == 0 ? s.y[0] : i == 1 ? s.y[1] : s.y[2]; }

// x_up: when not null, the input is silu(x) * x_up (SwiGLU, rounded as cuda/kernels.cu's swiglu), formed
// as x is loaded.
__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// kI8 (the int8 family): the input is xq (x and x_up unused); otherwise x (and x_up), xq unused. kN > 1
// (int8 only): ncols (2 .. kN) quantized inputs, block-interleaved (xq_slot), y of segment i at y[i][col *
// its rows + row] (ItemN above).
// Several columns (kN > 1) take more registers and larger partials, and CTAs of kWarps warps.
template <Type T, bool kI8 = false, int kN = 1>
__global__ __launch_bounds__(kN > 1 ? kThreads : 32 * kMaxWarps) __maxnreg__((max_regs<T, kI8, kN>())) void matvec_mma_kernel(
    const Segments seg, const float* __restrict__ x, const float* __restrict__ x_up, const uint8_t* __restrict__ xq, int cols,
    int64_t row_bytes, int64_t tiles, int maxk, bool accumulate, int ncols) {
    static_assert(kN == 1 || (kI8 && kN == kColsN), "several columns: the int8 family, kColsN of them");
    const int64_t rows = segment_end(seg, seg.n - 1);
    constexpr int KTB = Mv<T>::kKtBytes, SEG = seg_bytes<T>(), kStages = stages<T, kI8>();
    static_assert(kStages >= 2, "at least two ring slots");
    constexpr bool kPartialTiles = kKTile % (block_elems(T)) == 0 && block_elems(T) < kKTile;  // legacy: rows may end mid k-tile
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3, warps = blockDim.x >> 5;
    const int64_t tb0 = tiles * blockIdx.x / gridDim.x, tb1 = tiles * (blockIdx.x + 1) / gridDim.x;
    const int k = static_cast<int>(tb1 - tb0);  // row tiles of this CTA (<= maxk)
    const int n_kt = (cols + kKTile - 1) / kKTile;
    const int n_items = n_kt * k;
    const int i0 = n_items * warp / warps, i1 = n_items * (warp + 1) / warps;

    const uint32_t part_bytes = (warps * maxk * kTileRows * kN * 4 + 15) / 16 * 16;
    const uint32_t ring = part_bytes + warp * warp_bytes<T, kI8>();
    const uint32_t frag = ring + kStages * kTileRows * SEG, sums = frag + kFragBytes;
    const uint32_t smem_base = static_cast<uint32_t>(__cvta_generic_to_shared(mv_smem));
    float* part = reinterpret_cast<float*>(mv_smem) + warp * maxk * kTileRows * kN;
    for (int i = lane; i < k * kTileRows * kN; i += 32) part[i] = 0.0f;
    if (!kI8 && lane <= kMmas) st64(frag + lane * kFragRow + 64, make_uint2(0u, 0u));  // the zero entries

    // Copying: item `ic` (k-tile ic_kt, tile ic_tl) goes to ring slot (ic - i0) % kStages. Lane: row lane & 15,
    // 16-byte chunks half, half + 2, ... of the span from the 32-byte boundary at or before that row's
    // segment (each copy instruction reads whole sectors). One cp.async group per
    // item (empty past the warp's items), so waiting for all but the newest kStages - 1 groups means
    // waiting for the item about to be decoded.
    //
    // Item order: k-tile major for the f16 family (x is prepared once per k-tile), tile major for the int8
    // family (a lane's row and the warp's partial change once per tile; per item the source moves on by
    // one k-tile).
    constexpr bool kTileMajor = kI8;
    auto split_item = [&](int i, int& kt_, int& tl_) {
        if constexpr (kTileMajor) {
            tl_ = i / n_kt;
            kt_ = i - tl_ * n_kt;
        } else {
            kt_ = i / k;
            tl_ = i - kt_ * k;
        }
    };
    auto next_item = [&](int& kt_, int& tl_) {
        if constexpr (kTileMajor) {
            if (++kt_ == n_kt) {
                kt_ = 0;
                ++tl_;
            }
        } else if (++tl_ == k) {
            tl_ = 0;
            ++kt_;
        }
    };
    const int rr = lane & 15, half = lane >> 4;
    int ic = i0, ic_kt = 0, ic_tl = 0, ic_slot = 0;
    if (i0 < i1) split_item(i0, ic_kt, ic_tl);
    // The copying lane's row of tile ic_tl: its first byte, its segment's first and end bytes (null: past
    // the last row), recomputed when the tile changes.
    const uint8_t *row_w = nullptr, *seg_w0 = nullptr, *seg_w1 = nullptr;
    int row_tl = -1;
    auto issue = [&]() {
        if (ic < i1) {
            if (ic_tl != row_tl) {
                row_tl = ic_tl;
                const int64_t r = (tb0 + ic_tl) * kTileRows + rr;
                row_w = nullptr;
                if (r < rows) {
                    const int si = segment_of(seg, r);
                    const int64_t r0 = segment_start(seg, si);
                    seg_w0 = segment_w(seg, si);
                    seg_w1 = seg_w0 + (segment_end(seg, si) - r0) * row_bytes;
                    row_w = seg_w0 + (r - r0) * row_bytes;
                }
            }
            if (row_w) {
                const int64_t kb = static_cast<int64_t>(ic_kt) * KTB;
                int n = KTB;
                if constexpr (kPartialTiles) n = static_cast<int>(min(static_cast<int64_t>(KTB), row_bytes - kb));
                const uint8_t* src = row_w + kb;
                const int off = static_cast<int>(reinterpret_cast<uintptr_t>(src) & 31);
                const uint8_t* a = src - off + 16 * half;
                const int rem = static_cast<int>(min(static_cast<int64_t>(seg_w1 - a), static_cast<int64_t>(1) << 30));  // bytes from a on
                const uint32_t dst = smem_base + ring + ic_slot * (kTileRows * SEG) + rr * SEG + 16 * half;
                // a before the segment: the first 16 bytes of the span precede the matrix (and its data): not copied
                copy_span(std::make_integer_sequence<int, (SEG / 16 + 1) / 2>{}, dst, a, half, (off + n + 15) >> 4, rem, a < seg_w0);
            }
            next_item(ic_kt, ic_tl);
        }
        ++ic;
        ic_slot = ic_slot + 1 == kStages ? 0 : ic_slot + 1;
        cp_async_commit();
    };
    float4 xa = make_float4(0.f, 0.f, 0.f, 0.f), xb = xa;
    auto load_x = [&](int kt) {
        const int col = kt * kKTile + 8 * lane;
        if (col < cols) {
            xa = __ldg(reinterpret_cast<const float4*>(x + col));
            xb = __ldg(reinterpret_cast<const float4*>(x + col) + 1);
            if (x_up) {
                const float4 ua = __ldg(reinterpret_cast<const float4*>(x_up + col)), ub = __ldg(reinterpret_cast<const float4*>(x_up + col) + 1);
                xa = make_float4(silu_mul(xa.x, ua.x), silu_mul(xa.y, ua.y), silu_mul(xa.z, ua.z), silu_mul(xa.w, ua.w));
                xb = make_float4(silu_mul(xb.x, ub.x), silu_mul(xb.y, ub.y), silu_mul(xb.z, ub.z), silu_mul(xb.w, ub.w));
            }
        } else {
            xa = xb = make_float4(0.f, 0.f, 0.f, 0.f);
        }
    };
#pragma unroll
    for (int p = 0; p < kStages - 1; ++p) issue();
    // Programmatic dependent launch: the weights above never change, x and y come from earlier kernels.
    pdl_enter<kEarlyMatvec>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    int kt = 0, tl = 0, cur_kt = -1, cur_tl = -1, wb = 0, it_slot = 0;  // the item being decoded, its ring slot
    if (i0 < i1) split_item(i0, kt, tl);
    if (!kI8 && i0 < i1) load_x(kt);

    // This lane's B entry: 2t + hl for the eight lanes (g = 2t + hl) that hold B columns 2t, 2t + 1.
    const uint32_t xf = frag + ((lane >> 3) == t ? 16 * t + 8 * ((lane >> 2) & 1) : 64);
    // Row r = 16 * tile + g of a segment starts at byte r * row_bytes, which is g * row_bytes modulo 32 in
    // every tile (row_bytes is even).
    const int rg0 = static_cast<int>((g * row_bytes) & 31), rg1 = static_cast<int>(((g + 8) * row_bytes) & 31);
    float y0 = 0.0f, y1 = 0.0f;
    float yn[4] = {};  // kN > 1: rows g, g + 8 x columns 2t, 2t + 1
    ColsN cn{};
    if constexpr (kN > 1) cn = cols_of(g, t, ncols);
    auto flush = [&]() {  // the four lanes of each row, into this warp's partial
        if constexpr (kN > 1) {
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                part[(cur_tl * kTileRows + g + 8 * (e >> 1)) * kN + 2 * t + (e & 1)] += yn[e];
                yn[e] = 0.0f;
            }
            return;
        }
        y0 += __shfl_xor_sync(kFull, y0, 1);
        y1 += __shfl_xor_sync(kFull, y1, 1);
        y0 += __shfl_xor_sync(kFull, y0, 2);
        y1 += __shfl_xor_sync(kFull, y1, 2);
        if (t == 0) {
            part[cur_tl * kTileRows + g] += y0;
            part[cur_tl * kTileRows + g + 8] += y1;
        }
        y0 = y1 = 0.0f;
    };
    for (int it = i0; it < i1; ++it) {
        issue();
        if (kt != cur_kt) {
            if constexpr (!kI8) {
                prep_ktile<T>(xa, xb, frag, sums, lane);  // visible to the warp after the __syncwarp below
                if ((kt + 1) * k < i1) load_x(kt + 1);
            }
            cur_kt = kt;
        }
        if (tl != cur_tl) {
            if (cur_tl >= 0) flush();
            cur_tl = tl;
            // Row g of any tile of a segment starts at (its base + g * row_bytes) mod 32 (tiles are 16 rows)
            wb = static_cast<int>(reinterpret_cast<uintptr_t>(segment_w(seg, segment_of(seg, (tb0 + tl) * kTileRows))) & 31);
        }
        cp_async_wait<kStages - 1>();
        __syncwarp();
        const int kto = (kt * KTB) & 31;
        const uint32_t slot = ring + it_slot * (kTileRows * SEG);
        it_slot = it_slot + 1 == kStages ? 0 : it_slot + 1;
        const uint32_t o0 = slot + g * SEG + ((wb + rg0 + kto) & 31), o1 = slot + (g + 8) * SEG + ((wb + rg1 + kto) & 31);
        const int nb = min(8, (cols - kt * kKTile) / 32);
        if constexpr (kN > 1) {
            ItemN c;
            c.o0 = o0;
            c.o1 = o1;
            c.dig = xq + static_cast<int64_t>(kt) * (kKTile / 32) * ncols * 64;
            c.rec = xq + 2 * static_cast<int64_t>(cols) * ncols + static_cast<int64_t>(kt) * (kKTile / 32) * ncols * 16;
            c.ncols = ncols;
            c.t = t;
            c.nb = nb;
            tilen<T>(c, cn, yn);
        } else if constexpr (kI8) {
            Item8 c;
            c.o0 = o0;
            c.o1 = o1;
            c.xb = reinterpret_cast<const int8_t*>(xq) + (g & 1) * static_cast<int64_t>(cols) + kt * kKTile;
            c.meta = reinterpret_cast<const int4*>(xq + 2 * static_cast<int64_t>(cols)) + kt * (kKTile / 32);
            c.t = t;
            c.nb = nb;
            c.feeds = (g >> 1) == t;
            Mv8<T>::tile(c, y0, y1);
        } else {
            Item c;
            c.o0 = o0;
            c.o1 = o1;
            c.xf = xf;
            c.xs = sums;
            c.t = t;
            c.nb = nb;
            Mv<T>::tile(c, y0, y1);
        }
        __syncwarp();
        next_item(kt, tl);
    }
    if (cur_tl >= 0) flush();
    __syncthreads();
    const float* all = reinterpret_cast<const float*>(mv_smem);
    for (int i = threadIdx.x; i < k * kTileRows * kN; i += blockDim.x) {
        const int64_t r = tb0 * kTileRows + i / kN;
        const int col = i % kN;
        if (r < rows && col < ncols) {
            float sum = 0.0f;
#pragma unroll
            for (int wi = 0; wi < warps; ++wi) sum += all[wi * maxk * kTileRows * kN + i];
            const int si = segment_of(seg, r);
            const int64_t r0 = segment_start(seg, si);
            float* y = segment_y(seg, si) + col * (segment_end(seg, si) - r0) + (r - r0);
            *y = accumulate ? *y + sum : sum;
        }
    }
}

// Grid of the MMA kernel: as many CTAs as are resident at once (`resident`), each with an equal share of
// the 16-row tiles (at most kMaxTilesPerCta; more CTAs than resident ones only past 24 tiles each).
struct MmaGrid {
    int64_t grid;
    int maxk;  // the most tiles any CTA gets
};
// kN > 1 (several input columns): at most kMaxTilesPerCtaN tiles, the partials being kN times larger.
constexpr int kMaxTilesPerCtaN = 8;
inline MmaGrid mma_grid(int64_t rows, int64_t resident, int max_per_cta = kMaxTilesPerCta) {
    const int64_t tiles = (rows + kTileRows - 1) / kTileRows;
    resident = resident < 1 ? 1 : resident;
    int64_t per_cta = (tiles + resident - 1) / resident;
    per_cta = per_cta < max_per_cta ? per_cta : max_per_cta;
    const int64_t grid = (tiles + per_cta - 1) / per_cta;
    return {grid, static_cast<int>((tiles + grid - 1) / grid)};
}

// The end of the CTAs of kLanes threads (1, 2 or 4 warps) that take R rows (the dp4a, staged and plain
// kernels): each thread's acc[r] summed over the CTA, then y[r0 + r] = the sum (accumulate: += ) for the
// rows below `rows`. (A transposed warp reduction, R - 1 + 5 - log2(R) shuffles instead of 5 R, made the
// staged kernels' tall launches 7-16% slower on the H200: docs/perf.md.)
template <int R, int kLanes = 128>
__device__ __forceinline__ void cta_row_sums(const float (&acc)[R], float* y, int64_t r0, int64_t rows, bool accumulate) {
    static_assert(kLanes == 32 || kLanes == 64 || kLanes == 128, "CTAs of 1, 2 or 4 warps");
    static_assert(R <= 32, "a lane per row");
    constexpr int kWarps = kLanes / 32;
    __shared__ float red[kWarps][R];
    const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        float v = acc[r];
        for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
        if constexpr (kWarps == 1) {
            if (lane == r && r0 + r < rows) y[r0 + r] = accumulate ? y[r0 + r] + v : v;
        } else if (lane == 0) {
            red[warp][r] = v;
        }
    }
    if constexpr (kWarps > 1) {
        __syncthreads();
        if (tid < R && r0 + tid < rows) {
            float sum;
            if constexpr (kWarps == 2) sum = red[0][tid] + red[1][tid];
            else sum = (red[0][tid] + red[1][tid]) + (red[2][tid] + red[3][tid]);
            y[r0 + tid] = accumulate ? y[r0 + tid] + sum : sum;
        }
    }
}

// ---- q4_K (and q5_K) by direct loads and dp4a (int8 input, one column) ----------------------------------------
//
// The same arithmetic as the int8 MMA kernel (exact s32 dot products of the codes with the hi and lo
// digits, f32 scaling per sub-block), without tensor cores or a shared-memory ring. A CTA of 4 warps
// takes R rows of one segment; its 128 threads split each row's 16-byte code chunks, thread i taking
// chunks i, i + 128, ... of all R rows. Chunk c is qs bytes 16 (c % 8) .. +15 of super-block c / 8:
// the low nibbles of 16 columns of sub-block 2j and the high nibbles of 16 columns of sub-block 2j + 1
// (j = (c % 8) / 2, the half h = c % 2). As 128 is a multiple of 8, a thread's j and h never change.
// Per chunk a thread loads its 32 hi and 32 lo digits and the two block records (L1) once for the R
// rows, and per row the 16-byte header of the super-block (an L1 hit for 7 of its 8 threads) and the
// code chunk (streamed past L1; kPrefetch below: the next chunk's are loaded before this one is used).
// Per row and chunk: 8 LOP3 and 16 dp4a (the high nibbles stay in place, 16 q, and a 1/16 goes into
// their scale), the scales, 8 f32 operations.
// Why a second kernel: the MMA kernel's warps walk their items as chains of dependent latencies through
// a ring that holds them to 16 warps an SM (docs/perf.md); this one keeps no shared memory but R sums.
constexpr int kDpThreads = 128;
static_assert(kDpThreads == 128, "cta_row_sums sums 4 warps");

// The input's part of a chunk, the same for the R rows: the hi and lo digits h0/l0 of the 16 columns of
// sub-block 2j and h1/l1 of those of 2j + 1, their block scales d0 and d1 (d1 already divided by 16) and
// the sums s0 and s1 of 256 hi + lo over those columns.
struct DpX {
    uint4 h0, h1, l0, l1;
    float d0, d1, d1m;  // d1m: d1 undivided, for the mins
    int s0, s1;
};
__device__ __forceinline__ float q4k_chunk(const uint4 q, const uint4 hd, int j, const DpX& x) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w};
    const uint32_t xh0[4] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w}, xl0[4] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w};
    const uint32_t xh1[4] = {x.h1.x, x.h1.y, x.h1.z, x.h1.w}, xl1[4] = {x.l1.x, x.l1.y, x.l1.z, x.l1.w};
    int a0 = 0, b0 = 0, a1 = 0, b1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint32_t lo = w[k] & 0x0F0F0F0Fu, hi = w[k] & 0xF0F0F0F0u;
        a0 = dp4a_us(lo, xh0[k], a0);
        b0 = dp4a_us(lo, xl0[k], b0);
        a1 = dp4a_us(hi, xh1[k], a1);
        b1 = dp4a_us(hi, xl1[k], b1);
    }
    uint32_t sc, mn;
    k4_scales(hd, j, sc, mn);
    const int sh = 16 * (j & 1);
    const int sc0 = static_cast<int>((sc >> sh) & 0xFFu), sc1 = static_cast<int>((sc >> (sh + 8)) & 0xFFu);
    const int mn0 = static_cast<int>((mn >> sh) & 0xFFu), mn1 = static_cast<int>((mn >> (sh + 8)) & 0xFFu);
    // |a0| <= 16 * 15 * 128, so sc0 (256 a0 + b0) < 2^29; the high nibbles' sum (16x) stays below 2^27
    // and is scaled in f32.
    const float dot = x.d0 * static_cast<float>(sc0 * (256 * a0 + b0)) +
                      x.d1 * static_cast<float>(sc1) * static_cast<float>(256 * a1 + b1);
    const float off = x.d0 * static_cast<float>(mn0 * x.s0) + x.d1m * static_cast<float>(mn1 * x.s1);
    return f16_lo(hd.x) * dot - f16_hi(hd.x) * off;
}
// q5_K (176-byte blocks: the q4_K header, qh[32], then qs[128] as q4_K's): element 64 j + 32 t + l is
// nibble t of qs[32 j + l] with bit 2 j + t of qh[l] as its bit 4 (quant/decode.h). The chunk's 16
// columns of sub-block 2j and of 2j + 1 take the fifth bits of qh[16 h .. 16 h + 15] (qhv), so both
// halves' codes are whole bytes 0 .. 31 (the high nibbles shifted down: no 1/16 in their scale).
__device__ __forceinline__ float q5k_chunk(const uint4 q, const uint4 qhv, const uint4 hd, int j, const DpX& x) {
    const uint32_t w[4] = {q.x, q.y, q.z, q.w}, hb[4] = {qhv.x, qhv.y, qhv.z, qhv.w};
    const uint32_t xh0[4] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w}, xl0[4] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w};
    const uint32_t xh1[4] = {x.h1.x, x.h1.y, x.h1.z, x.h1.w}, xl1[4] = {x.l1.x, x.l1.y, x.l1.z, x.l1.w};
    int a0 = 0, b0 = 0, a1 = 0, b1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint32_t fifth = hb[k] >> (2 * j);  // bit 0 of each byte: sub-block 2j, bit 1: 2j + 1
        const uint32_t lo = (w[k] & 0x0F0F0F0Fu) | ((fifth << 4) & 0x10101010u);
        const uint32_t hi = ((w[k] >> 4) & 0x0F0F0F0Fu) | ((fifth << 3) & 0x10101010u);
        a0 = dp4a_us(lo, xh0[k], a0);
        b0 = dp4a_us(lo, xl0[k], b0);
        a1 = dp4a_us(hi, xh1[k], a1);
        b1 = dp4a_us(hi, xl1[k], b1);
    }
    uint32_t sc, mn;
    k4_scales(hd, j, sc, mn);
    const int sh = 16 * (j & 1);
    const int sc0 = static_cast<int>((sc >> sh) & 0xFFu), sc1 = static_cast<int>((sc >> (sh + 8)) & 0xFFu);
    const int mn0 = static_cast<int>((mn >> sh) & 0xFFu), mn1 = static_cast<int>((mn >> (sh + 8)) & 0xFFu);
    // |a| <= 16 * 31 * 128 and |b| <= 16 * 31 * 255: 256 a + b below 2^24 and exact in f32; the scale
    // (below 64) applied in f32.
    const float dot = x.d0 * static_cast<float>(sc0) * static_cast<float>(256 * a0 + b0) +
                      x.d1m * static_cast<float>(sc1) * static_cast<float>(256 * a1 + b1);
    const float off = x.d0 * static_cast<float>(mn0 * x.s0) + x.d1m * static_cast<float>(mn1 * x.s1);
    return f16_lo(hd.x) * dot - f16_hi(hd.x) * off;
}

// Segments as for the MMA kernel, each boundary a multiple of R (a CTA's rows lie in one segment).
// -DMINFER_DP4A_MIN_BLOCKS=N (an A/B knob) caps the registers for N CTAs of 128 threads per SM; by
// default ptxas picks (71 for R = 4 without prefetch, 85 with).
// -DMINFER_DP4A_WARP_CTAS=N caps the one-warp CTAs' registers (the tall launches: the joint gate/up) for
// N of them per SM, leaving the wider CTAs as ptxas picks (the A/B knob of the wave count).
#ifdef MINFER_DP4A_MIN_BLOCKS
#define MINFER_DP4A_BOUNDS __launch_bounds__(kLanes * kGang, MINFER_DP4A_MIN_BLOCKS * 128 / (kLanes * kGang))
#elif defined(MINFER_DP4A_WARP_CTAS)
#define MINFER_DP4A_BOUNDS __launch_bounds__(kLanes * kGang, kLanes == 32 ? (MINFER_DP4A_WARP_CTAS + kGang - 1) / kGang : 1)
#else
#define MINFER_DP4A_BOUNDS __launch_bounds__(kLanes * kGang)
#endif
// The block formats of matvec_dp4a_kernel: kGroup bytes per 256 columns of a row, in which thread unit
// p = c & 7 of unit c (32 columns) lies; load(group, p) brings a row's registers W for it (straight from
// global memory), input(...) the input's X for its columns, dot(W, p, X) their product.
// DpK<false>: q4_K (144-byte super-blocks, unit p = code chunk p: q4k_chunk); DpK<true>: q5_K (176 bytes,
// the codes at 48, and per unit and row also the 16 bytes of qh that hold its fifth bits, through L1: the
// 4 threads of a half share them; q5k_chunk).
template <bool kQ5>
struct DpK {
    static constexpr int kGroup = kQ5 ? 176 : 144, kCodes = kQ5 ? 48 : 16;
    struct W {
        uint4 q, hd, qh;  // codes, header, fifth bits (q5_K)
    };
    __device__ static W load(const uint8_t* b, int p) {
        W w;
        w.q = ld_stream(reinterpret_cast<const uint4*>(b + kCodes + 16 * p));
        w.hd = as_uint4(ld_x16(reinterpret_cast<const int4*>(b)));
        if constexpr (kQ5) w.qh = as_uint4(ld_x16(reinterpret_cast<const int4*>(b + 16 + 16 * (p & 1))));
        return w;
    }
    using X = DpX;
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int p) {
        auto ldu = [](const uint8_t* a) { return as_uint4(ld_x16(reinterpret_cast<const int4*>(a))); };
        const int col = (c >> 3) * 256 + 64 * (p >> 1) + 16 * (p & 1);
        X x;
        x.h0 = ldu(xq + col);
        x.h1 = ldu(xq + col + 32);
        x.l0 = ldu(xq + cols + col);
        x.l1 = ldu(xq + cols + col + 32);
        const int4 m0 = ld_xmeta(rec + col / 32), m1 = ld_xmeta(rec + col / 32 + 1);
        x.d0 = __int_as_float(m0.x);
        x.d1m = __int_as_float(m1.x);
        x.d1 = x.d1m * 0.0625f;
        x.s0 = (p & 1) ? m0.z : m0.y;
        x.s1 = (p & 1) ? m1.z : m1.y;
        return x;
    }
    __device__ static float dot(const W& w, int p, const X& x) {
        if constexpr (kQ5) return q5k_chunk(w.q, w.qh, w.hd, p >> 1, x);
        else return q4k_chunk(w.q, w.hd, p >> 1, x);
    }
};

// ---- q4_0 by dp4a on direct loads (int8 input, one column; rows of whole 256-column groups) -----------------
//
// q4_0's 18-byte blocks are only 2-byte aligned, but 8 of them are 144 bytes: where a row is a multiple of
// 256 columns long (every row then starts 16-byte aligned), block 8 G + p lies in bytes 2p .. 2p + 17 of
// the 16-byte units 9 G + p and 9 G + p + 1 of its row. matvec_dp4a_kernel<DpQ40> gives a thread a block
// (32 columns) of each of its R rows as it gives a q4_K chunk: it loads those two units straight into
// registers (the 8 threads of a group load its 9 units, 16 loads, the repeats served by L2), and q40_block
// picks the block's half-words out of the 8 words by selects on p / 2 and, for even p, a 16-bit funnel
// shift. The arithmetic is Staged<Q4_0>::row's over the whole block. Taken on such rows unless built with
// -DMINFER_DP4A_Q40=0 (cuda/matvec.cu).
// The input's part of one 32-column block c: its hi and lo digits (columns 0-15, 16-31) and its scale;
// block_input returns the block's record (its sums, for the formats with an offset).
struct DpXBlock {
    uint4 h0, h1, l0, l1;
    float dx;
};
__device__ __forceinline__ int4 block_input(DpXBlock& x, const uint8_t* xq, int cols, const int4* rec, int c) {
    auto ldu = [](const uint8_t* a) { return as_uint4(ld_x16(reinterpret_cast<const int4*>(a))); };
    const int col = 32 * c;
    x.h0 = ldu(xq + col);
    x.h1 = ldu(xq + col + 16);
    x.l0 = ldu(xq + cols + col);
    x.l1 = ldu(xq + cols + col + 16);
    const int4 m = ld_xmeta(rec + c);
    x.dx = __int_as_float(m.x);
    return m;
}
struct DpX40 : DpXBlock {
    int ofs;  // the codes' offset times the block's input sum: 16 * 8 S for q4_0 (in its 16x scale), 16 S for DpQ50G
};
// 16 (256 a + b), a and b the sums of code x hi and code x lo over a 4-bit block whose qs words are
// c[0 .. 3] (qs[4k .. 4k + 3]: low nibbles columns 4k .. 4k + 3, high nibbles 16 + 4k ..): the high
// nibbles stay in place (16 q), the low ones' products are scaled by 16 instead. |4096 a0|, |256 a1| <=
// 2^27 (16 codes of 15, digits of 128) and the low digits' terms stay below 2^20, so the s32 sum is exact
// with room for an offset below 2^27. q40_block's loop below is the same arithmetic, kept apart: through
// this function its kernels compiled to other machine code (2026-12-07; the q4_0, q5_0 and every other
// mat-vec kernel of matvec.cu are byte for byte what 1524654 built and the device measured), so the two
// share it once a device call has measured the shared form. The same holds for q5_sums and DpQ50G.
__device__ __forceinline__ int q4_sums16(const uint32_t (&c)[4], const DpXBlock& x) {
    const uint32_t xh0[4] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w}, xl0[4] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w};
    const uint32_t xh1[4] = {x.h1.x, x.h1.y, x.h1.z, x.h1.w}, xl1[4] = {x.l1.x, x.l1.y, x.l1.z, x.l1.w};
    int a0 = 0, b0 = 0, a1 = 0, b1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint32_t lo = c[k] & 0x0F0F0F0Fu, hi = c[k] & 0xF0F0F0F0u;
        a0 = dp4a_us(lo, xh0[k], a0);
        b0 = dp4a_us(lo, xl0[k], b0);
        a1 = dp4a_us(hi, xh1[k], a1);
        b1 = dp4a_us(hi, xl1[k], b1);
    }
    return 4096 * a0 + 16 * b0 + 256 * a1 + b1;
}
__device__ __forceinline__ float q40_block(const uint4 u0, const uint4 u1, int p, const DpX40& x) {
    const uint32_t w[8] = {u0.x, u0.y, u0.z, u0.w, u1.x, u1.y, u1.z, u1.w};
    const int q = p >> 1;
    uint32_t v[5];  // w[q .. q + 4]: the block (d, then qs) starts at byte 0 (p even) or 2 (p odd) of v[0]
#pragma unroll
    for (int k = 0; k < 5; ++k) v[k] = q == 0 ? w[k] : q == 1 ? w[k + 1] : q == 2 ? w[k + 2] : w[k + 3];
    const bool odd = p & 1;
    const uint32_t d16 = odd ? v[0] >> 16 : v[0] & 0xFFFFu;
    const uint32_t xh0[4] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w}, xl0[4] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w};
    const uint32_t xh1[4] = {x.h1.x, x.h1.y, x.h1.z, x.h1.w}, xl1[4] = {x.l1.x, x.l1.y, x.l1.z, x.l1.w};
    int a0 = 0, b0 = 0, a1 = 0, b1 = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
        const uint32_t c = odd ? v[k + 1] : __funnelshift_r(v[k], v[k + 1], 16);  // qs[4k .. 4k + 3]
        const uint32_t lo = c & 0x0F0F0F0Fu, hi = c & 0xF0F0F0F0u;
        a0 = dp4a_us(lo, xh0[k], a0);
        b0 = dp4a_us(lo, xl0[k], b0);
        a1 = dp4a_us(hi, xh1[k], a1);
        b1 = dp4a_us(hi, xl1[k], b1);
    }
    // 16 times the dot product: |4096 a0|, |256 a1| <= 2^27 (16 codes of 15, digits of 128), the low
    // digits' terms below 2^20, the offset below 2^27: the int32 sum stays exact, its conversion to f32
    // rounds at most 2^-24.
    return f16_lo(d16) * x.dx * static_cast<float>(4096 * a0 + 16 * b0 + 256 * a1 + b1 - x.ofs) * 0.0625f;
}
// q4_0 (above): 8 blocks of 18 bytes a group, unit p = block p.
struct DpQ40 {
    static constexpr int kGroup = 144;
    struct W {
        uint4 a, b;  // the group's 16-byte units p and p + 1
    };
    __device__ static W load(const uint8_t* g, int p) {
        return {ld_stream(reinterpret_cast<const uint4*>(g) + p), ld_stream(reinterpret_cast<const uint4*>(g) + p + 1)};
    }
    using X = DpX40;
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int) {
        X x;
        const int4 m = block_input(x, xq, cols, rec, c);
        x.ofs = 128 * (m.y + m.z);
        return x;
    }
    __device__ static float dot(const W& w, int p, const X& x) { return q40_block(w.a, w.b, p, x); }
};

// ---- q8_0, grouped (kQ8_0G), by dp4a on direct loads (int8 input, one column) ------------------------------
//
// matvec_dp4a_kernel<DpQ80G> gives a thread a block (32 columns) of each of its R rows, as DpQ40 does, on
// the grouped layout (cuda/block_bits.cuh): the block's 32 codes as two 16-byte loads straight into
// registers (streamed past L1; the 8 threads of a group load its 16 code units once each) and its scale
// as a 2-byte load through L1 (the group's 16 bytes of scales shared by its 8 threads); then 16
// dp4a.s32.s32 of the codes with the input's hi and lo digits. |a|, |b| <= 32 * 128 * 128 = 2^19, so
// 256 a + b stays below 2^28 and exact in s32: the only roundings are its conversion to f32 and the f32
// scaling, as in the staged kernel's q8_0 (which takes 16 columns at a time).
struct DpQ80G {
    static constexpr int kGroup = kQ80GroupBytes;
    struct W {
        uint4 a, b;  // the block's codes
        uint32_t d;  // its f16 scale
    };
    __device__ static W load(const uint8_t* g, int p) {
        const uint4* q = reinterpret_cast<const uint4*>(g + q80g_codes_at(p));
        return {ld_stream(q), ld_stream(q + 1), ld_w16(reinterpret_cast<const uint16_t*>(g + q80g_scale_at(p)))};
    }
    using X = DpXBlock;
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int) {
        X x;
        block_input(x, xq, cols, rec, c);
        return x;
    }
    __device__ static float dot(const W& w, int, const X& x) {
        const uint32_t q[8] = {w.a.x, w.a.y, w.a.z, w.a.w, w.b.x, w.b.y, w.b.z, w.b.w};
        const uint32_t h[8] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w, x.h1.x, x.h1.y, x.h1.z, x.h1.w};
        const uint32_t l[8] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w, x.l1.x, x.l1.y, x.l1.z, x.l1.w};
        int a = 0, b = 0;
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            a = dp4a_ss(q[k], h[k], a);
            b = dp4a_ss(q[k], l[k], b);
        }
        return f16_lo(w.d) * x.dx * static_cast<float>(256 * a + b);
    }
};

// ---- q5_0, grouped copies (kQ5_0G), by dp4a on direct loads (int8 input, one column) ----------------------
//
// matvec_dp4a_kernel<DpQ50G> gives a thread a block (32 columns) of each of its R rows, as DpQ80G does, on
// the load's grouped copy (cuda/block_bits.cuh): the block's 16 bytes of low nibbles as one 16-byte load
// straight into registers (streamed past L1), its 4 bytes of fifth bits and its 2-byte scale through L1
// (the group's 32 and 16 bytes of them shared by its 8 threads). Codes 0 .. 31 (nibble | fifth bit << 4,
// the file's code is that minus 16) enter dp4a as unsigned bytes against the input's hi and lo digits:
// a, b = the sums of code x hi and code x lo over the block, |a| <= 32 * 31 * 128 < 2^17, so
// 256 a + b - 16 S (S the block's sum of 256 hi + lo, from its record) is exact in s32; the only roundings
// are its conversion to f32 and the f32 scaling, as for DpQ80G.
// spread4(v): the low 4 bits of v to bit 0 of each of the 4 bytes (bit i to byte i).
__host__ __device__ __forceinline__ uint32_t spread4(uint32_t v) { return ((v & 0xFu) * 0x00204081u) & 0x01010101u; }
// 256 a + b, a and b the sums of code x hi and code x lo over a 5-bit block whose qs words are q[0 .. 3]
// and fifth bits qh (bit j: column j's bit 4): codes 0 .. 31, nibble | fifth bit << 4, as unsigned bytes.
// |a| <= 32 * 31 * 128 < 2^17, so the s32 sum is exact with room for an offset below 2^27. DpQ50G's dot
// is the same arithmetic, kept apart for now (q4_sums16 says why).
__device__ __forceinline__ int q5_sums(const uint32_t (&q)[4], uint32_t qh, const DpXBlock& x) {
    const uint32_t h0[4] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w}, l0[4] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w};
    const uint32_t h1[4] = {x.h1.x, x.h1.y, x.h1.z, x.h1.w}, l1[4] = {x.l1.x, x.l1.y, x.l1.z, x.l1.w};
    int a = 0, b = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {  // qs[4k .. 4k + 3]: columns 4k .. 4k + 3 (low nibbles) and 16 + 4k .. (high)
        const uint32_t lo = (q[k] & 0x0F0F0F0Fu) | (spread4(qh >> (4 * k)) << 4);
        const uint32_t hi = ((q[k] >> 4) & 0x0F0F0F0Fu) | (spread4(qh >> (16 + 4 * k)) << 4);
        a = dp4a_us(lo, h0[k], a);
        b = dp4a_us(lo, l0[k], b);
        a = dp4a_us(hi, h1[k], a);
        b = dp4a_us(hi, l1[k], b);
    }
    return 256 * a + b;
}
struct DpQ50G {
    static constexpr int kGroup = kQ50GroupBytes;
    struct W {
        uint4 qs;     // the block's low nibbles
        uint32_t qh;  // its fifth bits
        uint32_t d;   // its f16 scale
    };
    __device__ static W load(const uint8_t* g, int p) {
        return {ld_stream(reinterpret_cast<const uint4*>(g + q50g_qs_at(p))), ld_w32(reinterpret_cast<const uint32_t*>(g + q50g_qh_at(p))),
                ld_w16(reinterpret_cast<const uint16_t*>(g + q50g_d_at(p)))};
    }
    using X = DpX40;  // ofs: 16 S
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int) {
        X x;
        const int4 m = block_input(x, xq, cols, rec, c);
        x.ofs = 16 * (m.y + m.z);
        return x;
    }
    __device__ static float dot(const W& w, int, const X& x) {
        const uint32_t q[4] = {w.qs.x, w.qs.y, w.qs.z, w.qs.w};
        const uint32_t h0[4] = {x.h0.x, x.h0.y, x.h0.z, x.h0.w}, l0[4] = {x.l0.x, x.l0.y, x.l0.z, x.l0.w};
        const uint32_t h1[4] = {x.h1.x, x.h1.y, x.h1.z, x.h1.w}, l1[4] = {x.l1.x, x.l1.y, x.l1.z, x.l1.w};
        int a = 0, b = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {  // qs[4k .. 4k + 3]: columns 4k .. 4k + 3 (low nibbles) and 16 + 4k .. (high)
            const uint32_t lo = (q[k] & 0x0F0F0F0Fu) | (spread4(w.qh >> (4 * k)) << 4);
            const uint32_t hi = ((q[k] >> 4) & 0x0F0F0F0Fu) | (spread4(w.qh >> (16 + 4 * k)) << 4);
            a = dp4a_us(lo, h0[k], a);
            b = dp4a_us(lo, l0[k], b);
            a = dp4a_us(hi, h1[k], a);
            b = dp4a_us(hi, l1[k], b);
        }
        return f16_lo(w.d) * x.dx * static_cast<float>(256 * a + b - x.ofs);
    }
};

// ---- q4_1 and q5_1 by dp4a on direct loads of the file's blocks (int8 input, one column) -------------------
//
// Their blocks are 4-byte aligned (q4_1: d, m, qs[16], 20 bytes) and 8-byte aligned (q5_1: d, m, qh[4],
// qs[16], 24 bytes), so wherever a row starts 16-byte aligned (cols a multiple of 128 for q4_1, of 64 for
// q5_1: matvec_int8_takes in cuda/matvec.cu) block 8 G + p of it lies in two 16-byte units of the row, as
// q4_0's 8-block groups do: q4_1's at byte 20 p of its group, words p & 3 .. of units p + p / 4 and the
// next; q5_1's at byte 24 p, words 2 (p & 1) .. of units 3 p / 2 and the next. Read straight from the
// file's bytes (no copy), the 8 threads of a group issuing 16 loads for its 10 or 12 units, the repeats
// served by L2; the dp4a kernel takes the rows a block (32 columns) a thread as it takes q4_0's. A short
// last group (cols not a multiple of 256) ends the row: kBlockBytes tells the kernel the rows are the
// file's, blocks back to back (dp4a_row_bytes).
// Per block, with S the input block's sum of 256 hi + lo from its record: y = dx (d (256 a + b) + m S)
// (a, b as q4_sums16 and q5_sums take them, exact in s32), the offset's term in f32 beside the codes'.
struct DpXMin : DpXBlock {
    float s;  // S, exact in f32 (|S| <= 32 * 32512 < 2^20)
};
__device__ __forceinline__ DpXMin min_block_input(const uint8_t* xq, int cols, const int4* rec, int c) {
    DpXMin x;
    const int4 m = block_input(x, xq, cols, rec, c);
    x.s = static_cast<float>(m.y + m.z);
    return x;
}
struct DpQ41 {
    static constexpr int kGroup = 8 * 20, kBlockBytes = 20;
    struct W {
        uint4 a, b;  // the 16-byte units p + p / 4 and the next of the group
    };
    __device__ static W load(const uint8_t* g, int p) {
        const uint4* u = reinterpret_cast<const uint4*>(g) + p + (p >> 2);
        return {ld_stream(u), ld_stream(u + 1)};
    }
    using X = DpXMin;
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int) { return min_block_input(xq, cols, rec, c); }
    __device__ static float dot(const W& w, int p, const X& x) {
        const uint32_t u[8] = {w.a.x, w.a.y, w.a.z, w.a.w, w.b.x, w.b.y, w.b.z, w.b.w};
        const int q = p & 3;
        uint32_t v[5];  // u[q .. q + 4]: {d, m}, then qs
#pragma unroll
        for (int k = 0; k < 5; ++k) v[k] = q == 0 ? u[k] : q == 1 ? u[k + 1] : q == 2 ? u[k + 2] : u[k + 3];
        const uint32_t c[4] = {v[1], v[2], v[3], v[4]};
        // 16 (256 a + b) below 2^28 (q4_sums16): its conversion to f32 rounds at most 2^-24
        return x.dx * (f16_lo(v[0]) * static_cast<float>(q4_sums16(c, x)) * 0.0625f + f16_hi(v[0]) * x.s);
    }
};
struct DpQ51 {
    static constexpr int kGroup = 8 * 24, kBlockBytes = 24;
    struct W {
        uint4 a, b;  // the 16-byte units 3 p / 2 and the next of the group
    };
    __device__ static W load(const uint8_t* g, int p) {
        const uint4* u = reinterpret_cast<const uint4*>(g) + (3 * p >> 1);
        return {ld_stream(u), ld_stream(u + 1)};
    }
    using X = DpXMin;
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int) { return min_block_input(xq, cols, rec, c); }
    __device__ static float dot(const W& w, int p, const X& x) {
        const bool odd = p & 1;  // the block at word 2 of the first unit (p odd) or word 0: {d, m}, qh, then qs
        const uint32_t dm = odd ? w.a.z : w.a.x, qh = odd ? w.a.w : w.a.y;
        const uint32_t q[4] = {odd ? w.b.x : w.a.z, odd ? w.b.y : w.a.w, odd ? w.b.z : w.b.x, odd ? w.b.w : w.b.y};
        // 256 a + b below 2^26 (q5_sums): its conversion to f32 rounds at most 2^-24
        return x.dx * (f16_lo(dm) * static_cast<float>(q5_sums(q, qh, x)) + f16_hi(dm) * x.s);
    }
};

// The load's regrouping of a q8_0 matrix (rows of whole 256-column groups, 16-byte aligned) in place,
// group g of it by one thread (cuda/matvec.cu's q80_group launches a thread per group): its 272 bytes
// read, then written grouped (q80_regroup).
__device__ __forceinline__ void q80_group_one(uint8_t* w, int64_t g) {
    uint4* p = reinterpret_cast<uint4*>(w + g * kQ80GroupBytes);
    constexpr int kUnits = kQ80GroupBytes / 16;
    uint4 in[kUnits], out[kUnits];
#pragma unroll
    for (int i = 0; i < kUnits; ++i) in[i] = p[i];
    q80_regroup(reinterpret_cast<const uint8_t*>(in), reinterpret_cast<uint8_t*>(out));
#pragma unroll
    for (int i = 0; i < kUnits; ++i) p[i] = out[i];
}
// Group i of a grouped copy (cuda::q80_group_copy's and q50_group_copy's kernels run one thread a group):
// row i / groups, group g = i % groups of the row's (cols + 255) / 256; src holds the file's rows (cols / 32
// blocks of kBlock bytes, 2-byte aligned), dst the grouped rows of kGroup bytes a group, 16-byte aligned.
// place(block, group, b) puts the row's block 8 g + b where the layout wants it; absent blocks are zeros.
template <int kBlock, int kGroup, class Place>
__device__ __forceinline__ void group_copy_one(const uint8_t* src, uint8_t* dst, int64_t cols, int64_t i, Place place) {
    const int64_t groups = (cols + 255) / 256, r = i / groups, g = i % groups, nb = cols / 32;
    uint4 out[kGroup / 16] = {};
    uint8_t* o = reinterpret_cast<uint8_t*>(out);
    const uint8_t* row = src + r * nb * kBlock;
    for (int b = 0; b < 8 && 8 * g + b < nb; ++b) place(row + (8 * g + b) * kBlock, o, b);
    uint4* d = reinterpret_cast<uint4*>(dst + (r * groups + g) * kGroup);
    for (int k = 0; k < kGroup / 16; ++k) d[k] = out[k];
}
// q8_0 (34-byte blocks) into kQ8_0G groups, and q5_0 (22-byte blocks) into kQ5_0G ones.
__device__ __forceinline__ void q80_group_copy_one(const uint8_t* src, uint8_t* dst, int64_t cols, int64_t i) {
    group_copy_one<34, kQ80GroupBytes>(src, dst, cols, i, [](const uint8_t* s, uint8_t* d, int b) { q80_group_block(s, d, b); });
}
__device__ __forceinline__ void q50_group_copy_one(const uint8_t* src, uint8_t* dst, int64_t cols, int64_t i) {
    group_copy_one<22, kQ50GroupBytes>(src, dst, cols, i, [](const uint8_t* s, uint8_t* d, int b) { q50_group_block(s, d, b); });
}

// Segments as for the MMA kernel, each boundary a multiple of R (a row group's R rows lie in one segment);
// rows of whole 256-column groups (cols / 32 units a row), the last one padded where cols is not a
// multiple of 256 (DpQ80G and DpQ50G on the load's grouped copies), or short (DpQ41 and DpQ51 on the
// file's rows: dp4a_row_bytes); the other formats take whole groups only.
// kLanes: the threads of a CTA (32, 64 or 128), which split its R rows: thread t takes units t, t + kLanes,
// ... of every row. On short rows narrower CTAs give each thread more units, over which its fixed costs
// (addresses, the reduction) are spread.
// kPrefetch: each iteration first loads the next unit's registers (2R loads in flight per thread for
// q4_K, 85 registers for R = 4); without, each unit is loaded at the top of its own iteration (71
// registers), which suits tall matrices of one pass per row (cuda/matvec.cu).
// kGang (kLanes = 32 only): warps a CTA, each taking its own R rows as a one-warp CTA would (rows R kGang
// blockIdx + R warp ..., its own segment): a kGang-th of the CTAs to dispatch for the same work, the
// first wave of a tall launch on the SMs sooner (the block scheduler starts about 0.8 CTAs a
// nanosecond on the H200: tests/bench_barrier, docs/perf.md). kGang = 1 keeps the index arithmetic of
// the kernel as measured (its registers unchanged).
// dp4a_rows is the body of matvec_dp4a_kernel (below) for one row group: R rows of segment si from global row
// g0, by thread tid of its kLanes; matvec_dp4a_mixed_kernel runs it in the format of each CTA's segment.
// The bytes of a row of `cols` columns in format F: whole groups, a padded last one (DpQ80G's copies), or
// the file's blocks back to back where the format reads those (F::kBlockBytes: DpQ41, DpQ51).
template <class F>
__host__ __device__ constexpr int64_t dp4a_row_bytes(int cols) {
    if constexpr (requires { F::kBlockBytes; }) return static_cast<int64_t>(cols / 32) * F::kBlockBytes;
    else return static_cast<int64_t>((cols + 255) / 256) * F::kGroup;
}
template <class F, int R, int kLanes, bool kPrefetch>
__device__ __forceinline__ void dp4a_rows(const Segments& seg, int si, int64_t g0, int tid, const uint8_t* __restrict__ xq, int cols,
                                          bool accumulate) {
    using W = typename F::W;
    const int64_t r0 = g0 - segment_start(seg, si), rows = segment_end(seg, si) - segment_start(seg, si);
    const int64_t row_bytes = dp4a_row_bytes<F>(cols);
    const int p = tid & 7, n = cols / 32;  // p = c & 7 for every unit c of the thread
    const uint8_t* wr[R];  // group 0 of each row
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = segment_w(seg, si) + min(r0 + r, rows - 1) * row_bytes;
    W w[R];
    auto load = [&](int c, W (&wv)[R]) {
#pragma unroll
        for (int r = 0; r < R; ++r) wv[r] = F::load(wr[r] + (c >> 3) * F::kGroup, p);
    };
    int c = tid;
    if (c < n) load(c, w);  // weights only: before the wait for the kernel that writes xq
    pdl_enter<kEarlyMatvec>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    const int4* rec = reinterpret_cast<const int4*>(xq + 2 * static_cast<int64_t>(cols));
    for (; c < n; c += kLanes) {
        W wn[R] = {};
        if (kPrefetch && c + kLanes < n) load(c + kLanes, wn);
        if (!kPrefetch && c != tid) load(c, w);
        const typename F::X x = F::input(xq, cols, rec, c, p);
#pragma unroll
        for (int r = 0; r < R; ++r) {
            acc[r] += F::dot(w[r], p, x);
            if (kPrefetch) w[r] = wn[r];
        }
    }
    cta_row_sums<R, kLanes>(acc, segment_y(seg, si), r0, rows, accumulate);
}
template <class F, int R, int kLanes, bool kPrefetch, int kGang = 1>
__global__ MINFER_DP4A_BOUNDS void matvec_dp4a_kernel(const Segments seg, const uint8_t* __restrict__ xq, int cols, bool accumulate) {
    static_assert(kLanes % 32 == 0 && kLanes <= 128, "CTAs of 1, 2 or 4 warps");
    static_assert(kGang >= 1 && (kGang == 1 || kLanes == 32), "independent warps in CTAs of one-warp row groups only");
    const int64_t g0 = kGang > 1 ? (static_cast<int64_t>(blockIdx.x) * kGang + static_cast<int>(threadIdx.x) / kLanes) * R
                                 : static_cast<int64_t>(blockIdx.x) * R;
    if (kGang > 1 && g0 >= seg.end[2]) return;  // a warp of the last CTA past the last row (exiting counts as its trigger)
    const int tid = static_cast<int>(kGang > 1 ? threadIdx.x % kLanes : threadIdx.x);
    dp4a_rows<F, R, kLanes, kPrefetch>(seg, segment_of(seg, g0), g0, tid, xq, cols, accumulate);
}
// Two block formats in one launch: segments 0 .. n0 - 1 in F0, the others in F1 (a Q4_K_M layer's q4_K q and
// k beside its padded q6_K v: one launch where there were two). A CTA's rows lie in one segment, so the
// branch is uniform over the CTA. Its registers are capped for 20 warps an SM (96 a thread, the
// padded q6_K kernel's own count): left to itself, ptxas gave the 2-warp prefetching form 126,
// 8 CTAs an SM, too few for the 7B's q/k/v (1,152 CTAs) in one wave. No register knobs
// (MINFER_DP4A_MIN_BLOCKS, MINFER_DP4A_WARP_CTAS) and no ganged warps: it takes short rows, never the
// tall launches those are for.
template <class F0, class F1, int R, int kLanes, bool kPrefetch>
__global__ __launch_bounds__(kLanes, 640 / kLanes) void matvec_dp4a_mixed_kernel(const Segments seg, int n0, const uint8_t* __restrict__ xq, int cols,
                                                                   bool accumulate) {
    static_assert(kLanes % 32 == 0 && kLanes <= 128, "CTAs of 1, 2 or 4 warps");
    const int64_t g0 = static_cast<int64_t>(blockIdx.x) * R;
    const int si = segment_of(seg, g0), tid = static_cast<int>(threadIdx.x);
    if (si < n0) dp4a_rows<F0, R, kLanes, kPrefetch>(seg, si, g0, tid, xq, cols, accumulate);
    else dp4a_rows<F1, R, kLanes, kPrefetch>(seg, si, g0, tid, xq, cols, accumulate);
}

// ---- q6_K, q8_0, q4_0 by staged loads and dp4a (int8 input, one column) ----------------------------------------
//
// The arithmetic of the q4_K kernel above for the types whose blocks are only 2-byte aligned (q6_K: 210
// bytes, ql[128], qh[64], scales[16] int8, d; q8_0: 34, d, qs[32] int8; q4_0: 18, d, qs[16]), whose codes
// cannot be loaded 16 bytes at a time straight into registers. Each warp stages its share of the rows
// through its own slots of shared memory instead. A CTA of 4 warps takes R rows of one segment; a group
// is kGroup consecutive blocks of a row (840, 544 and 288 bytes), and warp w takes groups G = w, w + 4,
// ... of every one of those rows. Per group and row the warp copies the 16-byte-aligned span around the
// group with coalesced 16-byte loads (1 or 2 a lane, streamed past L1) into the row's slot; after a
// __syncwarp lane L decodes unit L % kUnits of block L / kUnits of the group with 4-byte shared loads
// and funnel shifts (ld_words), the same unit of each of the R rows against the same input registers.
// The next group's loads are issued right after the stores, into the same registers, so they are in
// flight while this group is decoded at no register cost.
// Unsigned codes (q6_K, q4_0) take dp4a.u32.s32 and their offset (32, 8) goes through the input's
// 16-column sums, counted once per sum by one lane; q8_0's signed codes take dp4a.s32.s32. Per unit and
// input block the integer 256 sum(q hi) + sum(q lo) - offset (q4_0: 16 times it) stays below 2^28, so the only roundings are
// the input's quantization, its conversion to f32 and the f32 scaling.
// Launched only where every segment is a multiple of 16 bytes long (cuda/matvec.cu), so the rounded-up
// spans never read past a matrix.
template <Type T>
struct Staged;
template <Type T>
struct StagedBlock {  // bytes and columns of one block
    static constexpr int kBytes = block_bytes(T), kCols = block_elems(T);
};
// q6_K: 8 units a super-block. Unit (n, v) = ((L / 4) % 2, L % 4) takes the columns 128 n + 32 g + 8 v
// + 0..7 of the four code fields g, read from ql[64 n + 8 v], ql[64 n + 32 + 8 v] and qh[32 n + 8 v]
// (8 bytes each), with the scales of sub-blocks 8 n + 2 g + v / 2; the lanes of even v count the -32.
// The input's part (Q6kX) and the arithmetic (q6k_unit: the sum before the block's d) are shared with
// the direct-load format DpQ6K below.
struct Q6kX {
    uint2 h[4], l[4];  // digits of the four fields' 8 columns
    float dx[4];
    int ofs[4];  // 32 S, S the sum over the field's 16-column half (lanes of even v)
};
__device__ __forceinline__ void q6k_input(Q6kX& x, const uint8_t* xq, int cols, const int4* rec, int blk, int u) {
    const int n = u >> 2, v = u & 3;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        const int col = 256 * blk + 128 * n + 32 * g + 8 * v;
        x.h[g] = ld_x8(reinterpret_cast<const int8_t*>(xq + col));
        x.l[g] = ld_x8(reinterpret_cast<const int8_t*>(xq + cols + col));
        const int4 m = ld_xmeta(rec + col / 32);
        x.dx[g] = __int_as_float(m.x);
        x.ofs[g] = (v & 1) ? 0 : 32 * ((v & 2) ? m.z : m.y);
    }
}
// qa, qb, qh: unit (n, v)'s 8 bytes of ql[64 n + 8 v], ql[64 n + 32 + 8 v], qh[32 n + 8 v]; sc: the
// half's 8 scales (scales[8 n ..]).
__device__ __forceinline__ float q6k_unit(const uint32_t (&qa)[2], const uint32_t (&qb)[2], const uint32_t (&qh)[2],
                                          const uint32_t (&sc)[2], int v, const Q6kX& x) {
    int a[4] = {0, 0, 0, 0}, l[4] = {0, 0, 0, 0};
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        const uint32_t q[4] = {(qa[k] & 0x0F0F0F0Fu) | ((qh[k] << 4) & 0x30303030u),
                               (qb[k] & 0x0F0F0F0Fu) | ((qh[k] << 2) & 0x30303030u),
                               ((qa[k] >> 4) & 0x0F0F0F0Fu) | (qh[k] & 0x30303030u),
                               ((qb[k] >> 4) & 0x0F0F0F0Fu) | ((qh[k] >> 2) & 0x30303030u)};
#pragma unroll
        for (int g = 0; g < 4; ++g) {
            a[g] = dp4a_us(q[g], k ? x.h[g].y : x.h[g].x, a[g]);
            l[g] = dp4a_us(q[g], k ? x.l[g].y : x.l[g].x, l[g]);
        }
    }
    // 256 |a| + |l| < 2^24 + 2^16 and 32 |S| < 2^24
    float s = 0.0f;
#pragma unroll
    for (int g = 0; g < 4; ++g) {
        const int scale = static_cast<int8_t>((sc[g >> 1] >> (16 * (g & 1) + 8 * (v >> 1))) & 0xFFu);
        s += static_cast<float>(scale) * x.dx[g] * static_cast<float>(256 * a[g] + l[g] - x.ofs[g]);
    }
    return s;
}
template <>
struct Staged<Type::Q6_K> : StagedBlock<Type::Q6_K> {
    static constexpr int kUnits = 8, kGroup = 4;
    using X = Q6kX;
    __device__ static void input(X& x, const uint8_t* xq, int cols, const int4* rec, int blk, int u) { q6k_input(x, xq, cols, rec, blk, u); }
    __device__ static float row(const X& x, uint32_t o, int u) {
        const int n = u >> 2, v = u & 3;
        uint32_t qa[2], qb[2], qh[2], sc[2];
        const uint32_t ow = o & ~3u, sh = (o & 2u) * 8u;  // the four fields' offsets are multiples of 4
        ld_words_at<2>(ow, sh, 64 * n + 8 * v, qa);
        ld_words_at<2>(ow, sh, 64 * n + 32 + 8 * v, qb);
        ld_words_at<2>(ow, sh, 128 + 32 * n + 8 * v, qh);
        ld_words_at<2>(ow, sh, 192 + 8 * n, sc);
        const float sum = q6k_unit(qa, qb, qh, sc, v, x);
        return ld_f16(o + 208) * sum;
    }
};
// q8_0: 2 units a block, unit u the columns 16 u .. 16 u + 15 (qs[16 u ..]).
template <>
struct Staged<Type::Q8_0> : StagedBlock<Type::Q8_0> {
    static constexpr int kUnits = 2, kGroup = 16;
    struct X {
        uint4 h, l;
        float dx;
    };
    __device__ static void input(X& x, const uint8_t* xq, int cols, const int4* rec, int blk, int u) {
        const int col = 32 * blk + 16 * u;
        x.h = as_uint4(ld_x16(reinterpret_cast<const int4*>(xq + col)));
        x.l = as_uint4(ld_x16(reinterpret_cast<const int4*>(xq + cols + col)));
        x.dx = __int_as_float(ld_xmeta(rec + blk).x);
    }
    __device__ static float row(const X& x, uint32_t o, int u) {
        uint32_t q[4];
        ld_words<4>(o + 2 + 16 * u, q);
        const uint32_t h[4] = {x.h.x, x.h.y, x.h.z, x.h.w}, l[4] = {x.l.x, x.l.y, x.l.z, x.l.w};
        int a = 0, b = 0;
#pragma unroll
        for (int k = 0; k < 4; ++k) {
            a = dp4a_ss(q[k], h[k], a);
            b = dp4a_ss(q[k], l[k], b);
        }
        return ld_f16(o) * x.dx * static_cast<float>(256 * a + b);  // 256 |a| < 2^26
    }
};
// q4_0: 2 units a block, unit u the columns 8 u .. 8 u + 7 (low nibbles of qs[8 u ..]) and 16 + 8 u ..
// (their high nibbles, unshifted: 16 q, and the digits' sums scaled by 1/16); unit 0 counts the -8.
template <>
struct Staged<Type::Q4_0> : StagedBlock<Type::Q4_0> {
    static constexpr int kUnits = 2, kGroup = 16;
    struct X {
        uint2 h0, l0, h1, l1;
        float dx;
        int ofs;
    };
    __device__ static void input(X& x, const uint8_t* xq, int cols, const int4* rec, int blk, int u) {
        const int col = 32 * blk + 8 * u;
        x.h0 = ld_x8(reinterpret_cast<const int8_t*>(xq + col));
        x.h1 = ld_x8(reinterpret_cast<const int8_t*>(xq + col + 16));
        x.l0 = ld_x8(reinterpret_cast<const int8_t*>(xq + cols + col));
        x.l1 = ld_x8(reinterpret_cast<const int8_t*>(xq + cols + col + 16));
        const int4 m = ld_xmeta(rec + blk);
        x.dx = __int_as_float(m.x);
        x.ofs = u ? 0 : 128 * (m.y + m.z);  // 16 * 8 S: the sum below is 16 times the dot product
    }
    __device__ static float row(const X& x, uint32_t o, int u) {
        uint32_t q[2];
        ld_words<2>(o + 2 + 8 * u, q);
        const uint32_t h0[2] = {x.h0.x, x.h0.y}, l0[2] = {x.l0.x, x.l0.y}, h1[2] = {x.h1.x, x.h1.y}, l1[2] = {x.l1.x, x.l1.y};
        int a0 = 0, b0 = 0, a1 = 0, b1 = 0;
#pragma unroll
        for (int k = 0; k < 2; ++k) {
            const uint32_t lo = q[k] & 0x0F0F0F0Fu, hi = q[k] & 0xF0F0F0F0u;
            a0 = dp4a_us(lo, h0[k], a0);
            b0 = dp4a_us(lo, l0[k], b0);
            a1 = dp4a_us(hi, h1[k], a1);
            b1 = dp4a_us(hi, l1[k], b1);
        }
        // 16 times the dot product: 4096 |a0| + 256 |a1| < 2^27, 128 |S| < 2^28
        return ld_f16(o) * x.dx * static_cast<float>(4096 * a0 + 16 * b0 + 256 * a1 + b1 - x.ofs) * 0.0625f;
    }
};
// ---- q6_K by dp4a on direct loads (int8 input, one column) ---------------------------------------------------
//
// matvec_dp4a_kernel<DpQ6K> takes the staged kernel's units (Staged<Q6_K> above: 8 units of 32 columns a
// super-block) straight from global memory. A block starts at any even address A (210 bytes), but its
// code fields ql[64 n + 8 v], ql[64 n + 32 + 8 v] and qh[32 n + 8 v] lie at multiples of 8 from A, so all
// three sit at the same shift s = A % 8 (0, 2, 4 or 6) in the two aligned 8-byte words around them: a
// thread loads those 16 bytes of each field (streamed past L1) and picks its 8 bytes by a select on s / 4
// and a 16-bit funnel shift on s % 4. The scales scales[8 n ..] (8 bytes, shared by the unit's 4 threads
// of a half) come as 2 or 3 aligned 4-byte words through L1, d as a 2-byte load. No load leaves the block
// but the fields' aligned words, which start at most 6 bytes before it (in the block before, or at A
// itself where A is the 16-byte aligned start of a matrix); the last field ends 10 bytes before the
// block's end. Any row length (q6_K rows are whole blocks) and any alignment of rows: no condition on the
// launch beyond the dp4a kernel's. The arithmetic is q6k_unit's.
// The input side of the two direct-load q6_K formats below (unit p of block c / 8: q6k_input).
struct DpQ6KInput {
    using X = Q6kX;
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int p) {
        X x;
        q6k_input(x, xq, cols, rec, c >> 3, p);
        return x;
    }
};
struct DpQ6K : DpQ6KInput {
    static constexpr int kGroup = 210;  // a super-block: units p = 0..7
    struct W {
        uint2 qa[2], qb[2], qh[2];  // the aligned words around each code field
        uint32_t sc[3];             // around scales[8 n ..]: the third is the second again where A % 4 = 0
        uint32_t d;
        uint32_t s;  // A % 8
    };
    __device__ static W load(const uint8_t* b, int p) {
        const int n = p >> 2, v = p & 3;
        const uintptr_t a = reinterpret_cast<uintptr_t>(b);
        W w;
        w.s = static_cast<uint32_t>(a & 7);
        auto field = [&](int o, uint2 (&f)[2]) {
            const uint2* q = reinterpret_cast<const uint2*>((a + o) & ~uintptr_t{7});
            f[0] = ld_stream8(q);
            f[1] = ld_stream8(q + 1);
        };
        field(64 * n + 8 * v, w.qa);
        field(64 * n + 32 + 8 * v, w.qb);
        field(128 + 32 * n + 8 * v, w.qh);
        const uint32_t* sc = reinterpret_cast<const uint32_t*>((a + 192 + 8 * n) & ~uintptr_t{3});
        w.sc[0] = ld_w32(sc);
        w.sc[1] = ld_w32(sc + 1);
        w.sc[2] = ld_w32(sc + 1 + ((a >> 1) & 1));
        w.d = ld_w16(reinterpret_cast<const uint16_t*>(b + 208));
        return w;
    }
    __device__ static float dot(const W& w, int p, const X& x) {
        const bool hi = w.s & 4u;
        const uint32_t sh = (w.s & 2u) * 8u;
        auto pick = [&](const uint2 (&f)[2], uint32_t (&o)[2]) {
            const uint32_t v0 = hi ? f[0].y : f[0].x, v1 = hi ? f[1].x : f[0].y, v2 = hi ? f[1].y : f[1].x;
            o[0] = __funnelshift_r(v0, v1, sh);
            o[1] = __funnelshift_r(v1, v2, sh);
        };
        uint32_t qa[2], qb[2], qh[2];
        pick(w.qa, qa);
        pick(w.qb, qb);
        pick(w.qh, qh);
        const uint32_t sc[2] = {__funnelshift_r(w.sc[0], w.sc[1], sh), __funnelshift_r(w.sc[1], w.sc[2], sh)};
        return f16_lo(w.d) * q6k_unit(qa, qb, qh, sc, p & 3, x);
    }
};

// ---- q6_K padded (kQ6_KP) by dp4a on direct loads (int8 input, one column) -----------------------------
//
// matvec_dp4a_kernel<DpQ6KP> takes DpQ6K's units from the load's padded copy (cuda/block_bits.cuh: 224-byte
// blocks, 32-byte aligned, each unit's codes where one 16-byte and one 8-byte load reach them): per unit
// and row those two loads (streamed past L1), the half's 8 scales as one 8-byte load and d as a 2-byte
// load (both through L1: the 4 threads of a half share the scales, the 8 of a block d). Four loads where
// DpQ6K issues ten, and no selects or funnel shifts; the same sectors of DRAM. The arithmetic is
// q6k_unit's, as DpQ6K's and the staged kernel's.
struct DpQ6KP : DpQ6KInput {
    static constexpr int kGroup = kQ6KPBlockBytes;  // a super-block: units p = 0..7
    struct W {
        uint4 q;   // ql[64n + 8v ..], ql[64n + 32 + 8v ..]
        uint2 qh;  // qh[32n + 8v ..]
        uint2 sc;  // scales[8n ..]
        uint32_t d;
    };
    __device__ static W load(const uint8_t* b, int p) {
        W w;
        w.q = ld_stream(reinterpret_cast<const uint4*>(b + q6kp_ql_at(p)));
        w.qh = ld_stream8(reinterpret_cast<const uint2*>(b + q6kp_qh_at(p)));
        w.sc = ld_w64(reinterpret_cast<const uint2*>(b + kQ6KPScales + 8 * (p >> 2)));
        w.d = ld_w16(reinterpret_cast<const uint16_t*>(b + kQ6KPD));
        return w;
    }
    __device__ static float dot(const W& w, int p, const X& x) {
        const uint32_t qa[2] = {w.q.x, w.q.y}, qb[2] = {w.q.z, w.q.w}, qh[2] = {w.qh.x, w.qh.y}, sc[2] = {w.sc.x, w.sc.y};
        return f16_lo(w.d) * q6k_unit(qa, qb, qh, sc, p & 3, x);
    }
};

// The load's padded copy of a q6_K matrix: block b of the file's layout (src, 2-byte aligned) into dst (a
// 16-byte aligned matrix of 224-byte blocks), one thread a block (cuda/matvec.cu's q6k_pad).
__device__ __forceinline__ void q6k_pad_one(const uint8_t* src, uint8_t* dst, int64_t b) {
    alignas(16) uint8_t out[kQ6KPBlockBytes];
    q6k_pad_block(src + b * static_cast<int64_t>(sizeof(quant::BlockQ6_K)), out);
    uint4* d = reinterpret_cast<uint4*>(dst + b * kQ6KPBlockBytes);
#pragma unroll
    for (int i = 0; i < kQ6KPBlockBytes / 16; ++i) d[i] = reinterpret_cast<const uint4*>(out)[i];
}

// ---- q2_K and q3_K rearranged (kQ2_KP, kQ3_KP) by dp4a on direct loads (int8 input, one column) ------------
//
// matvec_dp4a_kernel<DpQ2KP> and <DpQ3KP> give a thread unit p = 4 n + j of a super-block of each of its R
// rows: the 32 columns 128 n + 32 j .. + 31, one block of the int8 input (the load's copies,
// cuda/block_bits.cuh, hold those columns' codes together). Per unit and row: the 2-bit codes as 8 bytes
// (q3_K: one 8-byte load, its blocks 16-byte aligned; q2_K: two 4-byte loads, its blocks 4-byte aligned),
// streamed past L1; q3_K's third bits as a 4-byte load, streamed too; the scales through L1 (q3_K: the
// 16 bytes of scales and d, shared by the block's 8 threads; q2_K: the unit's two scale bytes, and d and
// dmin as one word). A shift by 2 i and a mask give the codes of columns 16 h + 4 i .. + 3 (h the
// half) in the four bytes of a word; q3_K's third bit goes to bit 2 of each byte the same way, so its
// codes are u = q + 4 hbit in 0 .. 7 and the file's value d (sc - 32) (u - 4). Then per half h, a and
// b = the sums of code x hi and code x lo over its 16 columns (dp4a, unsigned codes, signed digits):
//  * q3_K: sum_h (sc_h - 32) (256 a_h + b_h - 4 S_h), S_h the half's sum of 256 hi + lo (the input
//    block's record): |256 a + b| <= 256 * 16 * 7 * 128 + 16 * 7 * 128 < 2^22, 4 S_h < 2^21, times
//    at most 32, two halves: below 2^29, exact in s32; one conversion to f32 and the scaling.
//  * q2_K: d sum_h sc_h (256 a_h + b_h) - dmin sum_h m_h S_h (sc, m the 4-bit scale and min of the half's
//    sub-block): each sum below 2^26 (codes at most 3, scales at most 15), exact in s32.
// So the only roundings are the input's quantization and the f32 scaling, as for the other int8 formats.
struct DpXHalves : DpXBlock {
    int s0, s1;  // the block's sums of 256 hi + lo over columns 0-15 and 16-31
};
struct DpK23Input {
    using X = DpXHalves;
    __device__ static X input(const uint8_t* xq, int cols, const int4* rec, int c, int) {
        X x;
        const int4 m = block_input(x, xq, cols, rec, c);
        x.s0 = m.y;
        x.s1 = m.z;
        return x;
    }
};
// The sums a (hi digits) and b (lo) of the half h's 16 codes (the word cw of 2-bit codes; q3_K's third
// bits `high` at bits 4 h + i of its bytes, 0 for q2_K) against its digits.
template <bool kQ3>
__device__ __forceinline__ int k23_half(uint32_t cw, uint32_t high, int h, const uint4 xh, const uint4 xl) {
    const uint32_t hv[4] = {xh.x, xh.y, xh.z, xh.w}, lv[4] = {xl.x, xl.y, xl.z, xl.w};
    int a = 0, b = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
        uint32_t u = (cw >> (2 * i)) & 0x03030303u;
        if constexpr (kQ3) {  // bit k = 4 h + i of each byte to its bit 2: one shift, and a LOP3 with the line above
            const int k = 4 * h + i;
            u |= (k >= 2 ? high >> (k - 2) : high << (2 - k)) & 0x04040404u;
        }
        a = dp4a_us(u, hv[i], a);
        b = dp4a_us(u, lv[i], b);
    }
    return 256 * a + b;
}
struct DpQ3KP : DpK23Input {
    static constexpr int kGroup = kQ3KPBlockBytes;  // a super-block: units p = 0..7
    struct W {
        uint2 q;        // the unit's 2-bit codes
        uint32_t high;  // its third bits
        uint4 hd;       // the block's scales (12 bytes) and d
    };
    __device__ static W load(const uint8_t* b, int p) {
        W w;
        w.q = ld_stream8(reinterpret_cast<const uint2*>(b + kK23Codes + 8 * p));
        w.high = ld_stream4(reinterpret_cast<const uint32_t*>(b + kQ3KPHigh + 4 * p));
        w.hd = as_uint4(ld_x16(reinterpret_cast<const int4*>(b + kQ3KPScales)));
        return w;
    }
    __device__ static float dot(const W& w, int p, const X& x) {
        // sub-blocks 2p and 2p + 1: bytes 2 (p & 1) and + 1 of the unpacked scale word k = p / 2 (the file's
        // 6-bit scales: low 4 bits from scales[0..7] (k = 0, 1: low nibbles, 2, 3: high), high 2 bits from
        // scales[8..11] (bits 2k of each byte))
        const int k = p >> 1;
        const uint32_t lo4 = ((k & 1 ? w.hd.y : w.hd.x) >> (4 * (k >> 1))) & 0x0F0F0F0Fu;
        const uint32_t sc = lo4 | (((w.hd.z >> (2 * k)) & 0x03030303u) << 4);
        const int sh = 16 * (p & 1);
        const int sc0 = static_cast<int>((sc >> sh) & 0x3Fu) - 32, sc1 = static_cast<int>((sc >> (sh + 8)) & 0x3Fu) - 32;
        const int v0 = k23_half<true>(w.q.x, w.high, 0, x.h0, x.l0) - 4 * x.s0;
        const int v1 = k23_half<true>(w.q.y, w.high, 1, x.h1, x.l1) - 4 * x.s1;
        return f16_lo(w.hd.w) * x.dx * static_cast<float>(sc0 * v0 + sc1 * v1);
    }
};
struct DpQ2KP : DpK23Input {
    static constexpr int kGroup = kQ2KPBlockBytes;  // a super-block: units p = 0..7
    struct W {
        uint32_t q0, q1;  // the unit's 2-bit codes, columns 0-15 and 16-31
        uint32_t sc;      // its two scale bytes (4-bit scale, 4-bit min)
        uint32_t dm;      // the block's d and dmin
    };
    __device__ static W load(const uint8_t* b, int p) {
        const uint32_t* q = reinterpret_cast<const uint32_t*>(b + kK23Codes + 8 * p);
        return {ld_stream4(q), ld_stream4(q + 1), ld_w16(reinterpret_cast<const uint16_t*>(b + kQ2KPScales + 2 * p)),
                ld_w32(reinterpret_cast<const uint32_t*>(b + kQ2KPD))};
    }
    __device__ static float dot(const W& w, int, const X& x) {
        const int s0 = static_cast<int>(w.sc & 0xFu), m0 = static_cast<int>((w.sc >> 4) & 0xFu);
        const int s1 = static_cast<int>((w.sc >> 8) & 0xFu), m1 = static_cast<int>((w.sc >> 12) & 0xFu);
        const int dot = s0 * k23_half<false>(w.q0, 0, 0, x.h0, x.l0) + s1 * k23_half<false>(w.q1, 0, 1, x.h1, x.l1);
        const int off = m0 * x.s0 + m1 * x.s1;
        return x.dx * (f16_lo(w.dm) * static_cast<float>(dot) - f16_hi(w.dm) * static_cast<float>(off));
    }
};
// The load's copy of a q2_K or q3_K matrix: super-block b of the file's layout (src) into dst (the copy's
// blocks: 4-byte aligned for q2_K, 16-byte for q3_K), one thread a block (cuda/matvec.cu's k23_arrange).
template <bool kQ3>
__device__ __forceinline__ void k23_arrange_one(const uint8_t* src, uint8_t* dst, int64_t b) {
    constexpr int kIn = static_cast<int>(kQ3 ? sizeof(quant::BlockQ3_K) : sizeof(quant::BlockQ2_K)), kOut = kQ3 ? kQ3KPBlockBytes : kQ2KPBlockBytes;
    alignas(16) uint8_t out[kOut];
    k23_arrange_block(kQ3, src + b * kIn, out);
    uint32_t* d = reinterpret_cast<uint32_t*>(dst + b * kOut);
#pragma unroll
    for (int i = 0; i < kOut / 4; ++i) d[i] = reinterpret_cast<const uint32_t*>(out)[i];
}

// Bytes of one row's slot: the span (at most 14 bytes before the group, 15 after), ld_words' overrun of
// 4, rounded to an odd number of 16-byte units (rows' slots start in different banks).
template <Type T>
constexpr int staged_slot() {
    return ((14 + Staged<T>::kGroup * Staged<T>::kBytes + 4 + 15) / 16 | 1) * 16;
}
template <Type T, int R>
constexpr int staged_smem() {
    return kDpThreads / 32 * R * staged_slot<T>();
}
// kMinBlocks: CTAs an SM the registers are capped for (cuda/matvec.cu's choice per shape).
template <Type T, int R, int kMinBlocks>
__global__ __launch_bounds__(kDpThreads, kMinBlocks) void matvec_staged_kernel(const Segments seg, const uint8_t* __restrict__ xq,
                                                                               int cols, bool accumulate) {
    using S = Staged<T>;
    constexpr int kLoads = ((14 + S::kGroup * S::kBytes + 15) / 16 + 31) / 32;  // 16-byte loads a lane and row
    constexpr int kWarpsPerCta = kDpThreads / 32;
    const int64_t g0 = static_cast<int64_t>(blockIdx.x) * R;
    const int si = segment_of(seg, g0);
    const int64_t r0 = g0 - segment_start(seg, si), rows = segment_end(seg, si) - segment_start(seg, si);
    const int nblk = cols / S::kCols, tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31;
    const int b = lane / S::kUnits, u = lane % S::kUnits;
    const uint8_t* wr[R];  // block 0 of each row
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = segment_w(seg, si) + min(r0 + r, rows - 1) * static_cast<int64_t>(nblk) * S::kBytes;
    // Units lane, lane + 32, ... (16 bytes each) of each row's span of group G; those past the span are
    // neither loaded nor stored.
    uint4 st[R][kLoads];
    auto span = [&](int r, int G, int& lead, int& units) {
        const uint8_t* s = wr[r] + static_cast<int64_t>(G) * S::kGroup * S::kBytes;
        lead = static_cast<int>(reinterpret_cast<uintptr_t>(s) & 15);
        units = (lead + min(S::kGroup, nblk - G * S::kGroup) * S::kBytes + 15) >> 4;
        return reinterpret_cast<const uint4*>(s - lead);
    };
    auto load = [&](int G) {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            int lead, units;
            const uint4* a = span(r, G, lead, units);
#pragma unroll
            for (int j = 0; j < kLoads; ++j)
                if (lane + 32 * j < units) st[r][j] = ld_stream(a + lane + 32 * j);
        }
    };
    int G = warp;
    if (G * S::kGroup < nblk) load(G);  // weights only: before the wait for the kernel that writes xq
    pdl_enter<kEarlyMatvec>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    const int4* rec = reinterpret_cast<const int4*>(xq + 2 * static_cast<int64_t>(cols));
    const uint32_t slot0 = static_cast<uint32_t>(warp * R * staged_slot<T>());
    for (; G * S::kGroup < nblk; G += kWarpsPerCta) {
        const bool mine = b < min(S::kGroup, nblk - G * S::kGroup);
        typename S::X x{};
        if (mine) S::input(x, xq, cols, rec, G * S::kGroup + b, u);
        __syncwarp();  // the slots' previous group is decoded
        uint32_t base[R];  // the group's first byte in each row's slot
#pragma unroll
        for (int r = 0; r < R; ++r) {
            int lead, units;
            span(r, G, lead, units);
            const uint32_t slot = slot0 + static_cast<uint32_t>(r * staged_slot<T>());
#pragma unroll
            for (int j = 0; j < kLoads; ++j)
                if (lane + 32 * j < units) st128(slot + 16 * (lane + 32 * j), st[r][j]);
            base[r] = slot + static_cast<uint32_t>(lead);
        }
        __syncwarp();
        if ((G + kWarpsPerCta) * S::kGroup < nblk) load(G + kWarpsPerCta);
        if (mine) {
#pragma unroll
            for (int r = 0; r < R; ++r) acc[r] += S::row(x, base[r] + static_cast<uint32_t>(b * S::kBytes), u);
        }
    }
    cta_row_sums<R>(acc, segment_y(seg, si), r0, rows, accumulate);
}

// ---- f32, f16, bf16 ---------------------------------------------------------------------------------------------
// A CTA of 4 warps takes R rows; its 128 threads split each row's 16-byte chunks (4 or 8 weights),
// thread i taking chunks i, i + 128, ... of all R rows at once, two chunks deep: 2R independent 16-byte
// loads in flight per thread, x (8 floats per chunk, read through L1 where the weights bypass it) loaded
// once for the R rows. One f32 FMA per weight plus its conversion: far below the issue budget at 4 TB/s
// of 2-byte weights. R = 4 on tall matrices, 1 on short ones (enough CTAs to fill the GPU).
#ifndef MINFER_PLAIN_EARLY
#define MINFER_PLAIN_EARLY 1
#endif

template <Type T>
__device__ __forceinline__ float dot_chunk(const uint4 v, const float* x) {
    if constexpr (T == Type::F32) {
        const float4 a = __ldg(reinterpret_cast<const float4*>(x));
        return __uint_as_float(v.x) * a.x + __uint_as_float(v.y) * a.y + __uint_as_float(v.z) * a.z + __uint_as_float(v.w) * a.w;
    } else {
        const float4 a = __ldg(reinterpret_cast<const float4*>(x)), b = __ldg(reinterpret_cast<const float4*>(x) + 1);
        const uint32_t u[4] = {v.x, v.y, v.z, v.w};
        float lo[4], hi[4];
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (T == Type::F16) {
                lo[i] = f16_lo(u[i]);
                hi[i] = f16_hi(u[i]);
            } else {
                lo[i] = __uint_as_float(u[i] << 16);
                hi[i] = __uint_as_float(u[i] & 0xffff0000u);
            }
        }
        return lo[0] * a.x + hi[0] * a.y + lo[1] * a.z + hi[1] * a.w + lo[2] * b.x + hi[2] * b.y + lo[3] * b.z + hi[3] * b.w;
    }
}

// Segments as for the MMA kernel, each boundary a multiple of R (a CTA's rows lie in one segment).
template <Type T, int R>
__global__ __launch_bounds__(128) void matvec_plain_kernel(const Segments seg, const float* __restrict__ x, int64_t cols,
                                                           bool accumulate) {
    constexpr int kElemBytes = T == Type::F32 ? 4 : 2, kPer = 16 / kElemBytes;
    const int64_t row_bytes = cols * kElemBytes, nch = cols / kPer;
    const int64_t g0 = static_cast<int64_t>(blockIdx.x) * R;
    const int si = segment_of(seg, g0);
    const int64_t r0 = g0 - segment_start(seg, si), rows = segment_end(seg, si) - segment_start(seg, si);
    const uint8_t* w = segment_w(seg, si);
    float* y = segment_y(seg, si);
    const uint4* wr[R];
#pragma unroll
    for (int r = 0; r < R; ++r) wr[r] = reinterpret_cast<const uint4*>(w + min(r0 + r, rows - 1) * row_bytes);
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; ++r) acc[r] = 0.0f;
    int64_t c = threadIdx.x;
    uint4 v0[R], v1[R];
    auto load = [&]() {
#pragma unroll
        for (int r = 0; r < R; ++r) {
            v0[r] = ld_stream(wr[r] + c);
            v1[r] = ld_stream(wr[r] + c + 128);
        }
    };
    // The first chunks are weights only: loaded before the wait for the kernel that writes x (and y), so
    // they are in flight while that kernel drains (-DMINFER_PLAIN_EARLY=0: after it).
    if (MINFER_PLAIN_EARLY && c + 128 < nch) load();
    pdl_enter<kEarlyMatvec>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    for (; c + 128 < nch; c += 256) {
        if (!MINFER_PLAIN_EARLY || c != threadIdx.x) load();
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += dot_chunk<T>(v0[r], x + c * kPer) + dot_chunk<T>(v1[r], x + (c + 128) * kPer);
    }
    if (c < nch) {
#pragma unroll
        for (int r = 0; r < R; ++r) acc[r] += dot_chunk<T>(ld_stream(wr[r] + c), x + c * kPer);
    }
    cta_row_sums<R>(acc, y, r0, rows, accumulate);
}

}  // namespace minfer::cuda::mv
