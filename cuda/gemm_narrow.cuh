// The narrow GEMM: the product of a few tokens (9 to 64: a decode step of many sequences, a short
// prompt) with f16 weights, at the speed of reading the weights once. The device code only, so that
// tests/test_gemm_narrow_emu.cpp runs it on the CPU through tests/emu; cuda/gemm_narrow.cu launches it.
//
// y[t][r] (+)= sum_k x[t][k] w[r][k] for t < m <= 16 * MT, over up to three weight matrices of the same
// width that multiply the same x (q, k, v; gate, up), each with its own y. A CTA of 4 warps owns tiles of
// BN = 32 * NW weight rows by all 16 * MT token rows: each warp 8 * NW weight rows (NW n8 MMA tiles) by
// the MT m16 token tiles, mma.sync m16n8k16 with x as A and w as B (both K-contiguous, so ldmatrix without
// transposition serves both). K advances in tiles of 64 copied by cp.async through kStages stages; the
// weight copies of the first stages go out before the programmatic-launch wait (nothing writes weights),
// so they overlap the previous kernel.
//
// The work is balanced as stream-K does it: the (tile, k-tile) units of the launch, tiles in order and
// k-tiles within each, are cut into `per_cta` consecutive units per CTA, so every CTA moves the same
// number of weight bytes whatever the matrix shapes. A tile that one CTA covers from its first k-tile to
// its last is written directly; a tile cut between CTAs ("pieces") has each piece's accumulators written
// to a workspace slot, and the CTA that completes the tile's counter sums the pieces in k order (a fixed
// order, whichever CTA comes last: the result does not depend on timing) and writes y. Each CTA has at
// most two pieces (its first tile and its last), so the workspace holds two slots per CTA; the counter
// goes back to zero for the next launch.
//
// Quantized weights (Q = true: q4_K, q6_K and q8_0, per matrix) are read as they are stored, 0.56 to
// 1.06 bytes per weight where the f16 cache costs 2: each k-tile's bytes of a row (q4_K: the block
// header and 32 bytes of codes; q6_K: the low and high code bits and the scales, each as the 16-byte
// chunks that cover it, the blocks being 210 bytes; q8_0: the two blocks' cover) go through the cp.async
// stages into kRawLd bytes per row, and once a stage has landed the CTA dequantizes it into one f16 tile
// that the MMAs read as they read f16 weights. The dequantization is f16x2 arithmetic (dequant_rows):
// q8_0's tile holds the f16 cache's bits, q4_K's and q6_K's differ from them by one rounding of a block
// constant (at most an f16 ulp of a weight), so results match the f16 path to f16 rounding, not bit for
// bit. (A first form repeated the CPU's f32 operations for the cache's bits and ran at a third of the
// speed: docs/perf.md.)
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)
#include "cuda/block_bits.cuh"

namespace minfer::cuda::gn {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
#ifndef MINFER_GN_BK
#define MINFER_GN_BK 64
#endif
#ifndef MINFER_GN_STAGES
#define MINFER_GN_STAGES 4
#endif
constexpr int kBK = MINFER_GN_BK;  // k elements per k-tile
static_assert(kBK % 64 == 0, "k-tiles of whole 128-byte row pieces");
constexpr int kChunks = kBK / 8;  // 16-byte pieces per row of a k-tile
constexpr int kLd = kBK + 8;      // f16 elements per shared-memory row: 16 bytes of padding, conflict-free ldmatrix
constexpr int kStages = MINFER_GN_STAGES;
constexpr int kMaxSegs = 3;
// Floats per thread that the CTA summing a cut tile loads at once, in whole pieces (at least one, at most eight).
#ifndef MINFER_GN_SUM_FLOATS
#define MINFER_GN_SUM_FLOATS 64
#endif
static_assert(MINFER_GN_SUM_FLOATS >= 1, "MINFER_GN_SUM_FLOATS is at least 1");

template <int NW>
constexpr int tile_rows() {
    return 8 * NW * kWarps;
}
// Floats of a CTA's accumulators (one workspace slot).
template <int MT, int NW>
constexpr int acc_floats() {
    return MT * NW * 4 * kThreads;
}
// Quantized weights: the formats (Seg::fmt), the bytes of one row's k-tile in shared memory (q6_K's ten
// 16-byte chunks, the most), the stages (three: the f16 tile takes the fourth's room).
enum Fmt : int { kF16 = 0, kQ4_K = 1, kQ6_K = 2, kQ8_0 = 3 };
constexpr int kRawLd = 160;
constexpr int kStagesQ = 3;
static_assert(kBK == 64, "the quantized k-tiles are 64 weights: a quarter of a K-quant block, two q8_0 blocks");

template <bool Q>
constexpr int stages() {
    return Q ? kStagesQ : kStages;
}
// Bytes of one stage: the token rows (f16), then the weight rows (f16, or kRawLd raw bytes each).
template <int MT, int NW, bool Q>
constexpr int stage_bytes() {
    return 16 * MT * kLd * 2 + tile_rows<NW>() * (Q ? kRawLd : kLd * 2);
}
// Dynamic shared memory: the stages, the dequantized f16 tile (Q), then one int (the last-piece flag).
template <int MT, int NW, bool Q = false>
constexpr int smem_bytes() {
    return stages<Q>() * stage_bytes<MT, NW, Q>() + (Q ? tile_rows<NW>() * kLd * 2 : 0) + 16;
}

struct Seg {
    const __half* w = nullptr;  // [n][k] (f16)
    float* y = nullptr;         // [m][n]
    int n = 0;                  // weight rows
    // Quantized (Q kernels only): the rows of `fmt` blocks, row_bytes apart, `bytes` in all (nothing past
    // them is read).
    const uint8_t* q = nullptr;
    int64_t row_bytes = 0, bytes = 0;
    int fmt = kF16;
};

// 16-byte chunks of one row's k-tile in shared memory, per format.
__host__ __device__ constexpr int raw_chunks(int fmt) { return fmt == kQ4_K ? 3 : fmt == kQ6_K ? 10 : 5; }

// Chunk j of the k-tile at element k0 (a multiple of 64) of the quantized row at address `row`: its
// 16-byte-aligned global address, and in `dst` its byte offset in the row's kRawLd bytes.
//  q4_K (144-byte blocks, rows a multiple of 16 bytes): the 16-byte header (d, dmin, scales), then the
//    32 code bytes of the k-tile (low nibbles: its first 32 weights, high: the next 32), at 0 and 16.
//  q6_K (210-byte blocks, so 2-byte alignment only): the cover of the 64 low-bit bytes at 0 (5 chunks),
//    of the 32 high-bit bytes at 80 (3), of the 16 scales and d at 128 (2).
//  q8_0 (34-byte blocks): the cover of the k-tile's two blocks (68 bytes, 5 chunks: the launcher takes
//    widths of whole k-tiles, so rows are 68 * k / 64 bytes and every k-tile starts 4-byte aligned).
__device__ __forceinline__ uintptr_t raw_chunk(int fmt, uintptr_t row, int k0, int j, int& dst) {
    if (fmt == kQ4_K) {
        const uintptr_t b = row + uintptr_t(k0 >> 8) * 144;
        dst = 16 * j;
        return j == 0 ? b : b + 16 + 32 * ((k0 >> 6) & 3) + 16 * (j - 1);
    }
    if (fmt == kQ6_K) {
        const uintptr_t b = row + uintptr_t(k0 >> 8) * 210, h = (k0 >> 7) & 1;
        const uintptr_t start = j < 5 ? b + 64 * h : j < 8 ? b + 128 + 32 * h : b + 192;
        const int i = j < 5 ? j : j < 8 ? j - 5 : j - 8;
        dst = (j < 5 ? 0 : j < 8 ? 80 : 128) + 16 * i;
        return (start & ~uintptr_t{15}) + 16 * i;
    }
    dst = 16 * j;
    return ((row + uintptr_t(k0 >> 5) * 34) & ~uintptr_t{15}) + 16 * j;
}

// Bytes 2j and 2j + 1 of v as the halves 1024 + byte (low half first; mv::kMagicB).
__device__ __forceinline__ uint32_t magic_pair(uint32_t v, int j) { return __byte_perm(v, mv::kMagicB, j ? 0x4342u : 0x4140u); }
// The f16 at a 2-byte-aligned shared address, in both halves.
__device__ __forceinline__ uint32_t h2_at(const uint8_t* p) {
    const uint32_t h = *reinterpret_cast<const uint16_t*>(p);
    return h | h << 16;
}
// Eight bytes at a 2-byte-aligned shared address (generic pointer).
__device__ __forceinline__ uint2 ld8_a2(const uint8_t* p) {
    const uint16_t* h = reinterpret_cast<const uint16_t*>(p);
    return make_uint2(uint32_t(h[0]) | uint32_t(h[1]) << 16, uint32_t(h[2]) | uint32_t(h[3]) << 16);
}

// The f16 tile of one k-tile: row r of the raw stage (kRawLd bytes each) dequantized into row r of `wf`
// (kLd halves each), columns 8p .. 8p+7 and 32 + 8p .. 32 + 8p + 7 for the groups p this thread takes
// (every row's four groups spread over the CTA). `row` is the global address of the row the raw bytes
// came from (for the alignment of q6_K's and q8_0's covers; never read). Rows past the matrix hold
// zeros and dequantize to zeros.
//
// f16x2 arithmetic, two weights an instruction pair: codes become halves by the magic number (byte b
// into 1024 + b, exact) and are scaled with one rounding where the block allows it.
//  q4_K: sc q exactly by fma(1024 + q, sc, -1024 sc), then w = fma(sc q, d, -f16(dmin m)): one rounding
//    of the exact d sc q - f16(dmin m); the f16 cache rounds d sc q - dmin m once (the CPU's f32 values),
//    so the two differ only through f16(dmin m), by at most half an ulp of dmin m.
//  q6_K: w = (q - 32) f16(d sc): the cache rounds d sc (q - 32) once; here d sc is rounded first.
//  q8_0: w = q d, one rounding of an exact product: the cache's bits.
template <int kRows>
__device__ __forceinline__ void dequant_rows(int fmt, const uint8_t* raw, uint8_t* wf, uintptr_t wq, int64_t row_bytes, int n0, int k0,
                                             int tid) {
    constexpr int kTpr = kThreads / kRows, kGroups = 4 / kTpr;  // threads per row, groups per thread
    static_assert(kTpr >= 1 && kGroups >= 1, "a thread per row at most four");
    const int r = tid / kTpr, p0 = (tid % kTpr) * kGroups, c = (k0 >> 6) & 3;
    const uint8_t* R = raw + r * kRawLd;
    const uintptr_t row = wq + uintptr_t(int64_t{n0 + r} * row_bytes);
    // Per format, f16x2 constants of the two 32-column halves (lo, hi) of the k-tile.
    uint32_t sc_lo = 0, nsc_lo = 0, dm_lo = 0, sc_hi = 0, nsc_hi = 0, dm_hi = 0, d2 = 0;
    int o0 = 0, o1 = 0, o2 = 0;
    if (fmt == kQ4_K) {
        const uint4 h = *reinterpret_cast<const uint4*>(R);
        uint32_t sc, mn;
        mv::k4_scales(h, c, sc, mn);
        const uint32_t sel = 0x4040u + (c & 1) * 0x0202u;  // sub-block 2c (byte 2 (c & 1)) into both halves; + 0x0101: 2c + 1
        d2 = __byte_perm(h.x, 0, 0x1010u);
        const uint32_t ndmin2 = __byte_perm(h.x, 0, 0x3232u) ^ 0x80008000u;
        sc_lo = mv::hadd2(__byte_perm(sc, mv::kMagicB, sel), mv::h2c(-1024.0));
        sc_hi = mv::hadd2(__byte_perm(sc, mv::kMagicB, sel + 0x0101u), mv::h2c(-1024.0));
        nsc_lo = mv::hmul2(sc_lo, mv::h2c(-1024.0));
        nsc_hi = mv::hmul2(sc_hi, mv::h2c(-1024.0));
        dm_lo = mv::hmul2(mv::hadd2(__byte_perm(mn, mv::kMagicB, sel), mv::h2c(-1024.0)), ndmin2);  // -f16(dmin m): one rounding of an exact product
        dm_hi = mv::hmul2(mv::hadd2(__byte_perm(mn, mv::kMagicB, sel + 0x0101u), mv::h2c(-1024.0)), ndmin2);
    } else if (fmt == kQ6_K) {
        const uintptr_t b = row + uintptr_t(k0 >> 8) * 210, h = (k0 >> 7) & 1;
        o0 = static_cast<int>((b + 64 * h) & 15);
        o1 = 80 + static_cast<int>((b + 128 + 32 * h) & 15);
        o2 = 128 + static_cast<int>((b + 192) & 15);
        d2 = h2_at(R + o2 + 16);
    } else {
        o0 = static_cast<int>((row + uintptr_t(k0 >> 5) * 34) & 15);
        sc_lo = h2_at(R + o0);
        sc_hi = h2_at(R + o0 + 34);
    }
    #pragma unroll
    for (int gi = 0; gi < kGroups; ++gi) {
        const int p = p0 + gi;
        uint32_t lo[4], hi[4];  // columns 8p + 2i, +1 and 32 + 8p + 2i, +1 as f16x2
        if (fmt == kQ4_K) {
            const uint2 q = *reinterpret_cast<const uint2*>(R + 16 + 8 * p);
            #pragma unroll
            for (int w = 0; w < 2; ++w) {
                const uint32_t v = w ? q.y : q.x, l = v & 0x0F0F0F0Fu, u = (v >> 4) & 0x0F0F0F0Fu;
                #pragma unroll
                for (int j = 0; j < 2; ++j) {
                    lo[2 * w + j] = mv::hfma2(mv::hfma2(magic_pair(l, j), sc_lo, nsc_lo), d2, dm_lo);
                    hi[2 * w + j] = mv::hfma2(mv::hfma2(magic_pair(u, j), sc_hi, nsc_hi), d2, dm_hi);
                }
            }
        } else if (fmt == kQ6_K) {
            // weights 64c + 8p + i (k = 2 (c & 1)) and 64c + 32 + 8p + i (k + 1): low bits from ql[64h + l]
            // and ql[64h + 32 + l] (low nibbles for c even, high for c odd), high bits from qh[32h + l] at 2k.
            const int kp = c & 1;
            const uint2 a = ld8_a2(R + o0 + 8 * p), b = ld8_a2(R + o0 + 32 + 8 * p), qh = ld8_a2(R + o1 + 8 * p);
            const float d = __half2float(__ushort_as_half(static_cast<uint16_t>(d2)));
            const float s_lo = d * static_cast<float>(static_cast<int8_t>(R[o2 + 4 * c + (p >> 1)])),  // exact: 11 + 8 bits
                        s_hi = d * static_cast<float>(static_cast<int8_t>(R[o2 + 4 * c + 2 + (p >> 1)]));
            const uint32_t s2_lo = mv::pack_f16x2(s_lo, s_lo), s2_hi = mv::pack_f16x2(s_hi, s_hi);
            #pragma unroll
            for (int w = 0; w < 2; ++w) {
                const uint32_t h = w ? qh.y : qh.x;
                const uint32_t ul = (((w ? a.y : a.x) >> (4 * kp)) & 0x0F0F0F0Fu) | (((h >> (4 * kp)) & 0x03030303u) << 4);
                const uint32_t uh = (((w ? b.y : b.x) >> (4 * kp)) & 0x0F0F0F0Fu) | (((h >> (4 * kp + 2)) & 0x03030303u) << 4);
                #pragma unroll
                for (int j = 0; j < 2; ++j) {
                    lo[2 * w + j] = mv::hmul2(mv::hadd2(magic_pair(ul, j), mv::h2c(-1056.0)), s2_lo);  // (code - 32) f16(d sc)
                    hi[2 * w + j] = mv::hmul2(mv::hadd2(magic_pair(uh, j), mv::h2c(-1056.0)), s2_hi);
                }
            }
        } else {
            const uint2 a = ld8_a2(R + o0 + 2 + 8 * p), b = ld8_a2(R + o0 + 36 + 8 * p);
            #pragma unroll
            for (int w = 0; w < 2; ++w) {
                const uint32_t ul = (w ? a.y : a.x) ^ 0x80808080u, uh = (w ? b.y : b.x) ^ 0x80808080u;  // code + 128
                #pragma unroll
                for (int j = 0; j < 2; ++j) {
                    lo[2 * w + j] = mv::hmul2(mv::hadd2(magic_pair(ul, j), mv::h2c(-1152.0)), sc_lo);
                    hi[2 * w + j] = mv::hmul2(mv::hadd2(magic_pair(uh, j), mv::h2c(-1152.0)), sc_hi);
                }
            }
        }
        uint4* out = reinterpret_cast<uint4*>(wf + (r * kLd + 8 * p) * 2);
        out[0] = make_uint4(lo[0], lo[1], lo[2], lo[3]);
        out[32 / 8] = make_uint4(hi[0], hi[1], hi[2], hi[3]);
    }
}

struct Args {
    const __half* x = nullptr;  // [m][k]
    int m = 0, k = 0;
    Seg s0, s1, s2;
    int tiles0 = 0, tiles01 = 0;  // the first tile of segment 1 and of segment 2
    int k_tiles = 0;              // per tile: ceil(k / kBK)
    int units = 0;                // tiles * k_tiles
    int per_cta = 0;              // units per CTA
    bool accumulate = false;
    float* ws = nullptr;     // 2 * gridDim.x slots of acc_floats<MT, NW>()
    int* counters = nullptr; // one per tile, zero between launches
};

template <int MT, int NW, bool Q = false>
__global__ __launch_bounds__(kThreads) void gemm_narrow_kernel(Args a) {
    static_assert(MT >= 1 && MT <= 4 && (NW == 2 || NW == 4), "the shapes the launcher instantiates");
    constexpr int kXRows = 16 * MT, kWRows = tile_rows<NW>();
    constexpr int kS = stages<Q>(), kStageBytes = stage_bytes<MT, NW, Q>(), kWf = kS * kStageBytes;
    constexpr int kAcc = MT * NW * 4;
    constexpr int kSumBatch = MINFER_GN_SUM_FLOATS / kAcc < 1 ? 1 : MINFER_GN_SUM_FLOATS / kAcc > 8 ? 8 : MINFER_GN_SUM_FLOATS / kAcc;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int cta = static_cast<int>(blockIdx.x);
    const int u_begin = cta * a.per_cta, u_end = u_begin + min(a.per_cta, a.units - u_begin);  // no int overflow
    const int kt = a.k_tiles;

    const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(mv::mv_smem));
    auto x_stage = [&](int st) { return sbase + static_cast<uint32_t>(st * kStageBytes); };
    auto w_stage = [&](int st) { return x_stage(st) + static_cast<uint32_t>(kXRows * kLd * 2); };
    int* flag = reinterpret_cast<int*>(mv::mv_smem + smem_bytes<MT, NW, Q>() - 16);

    // k-tile j of a piece into stage st: 16-byte chunks, kChunks per row, consecutive threads along a row; rows
    // past m or n and columns past k are zero-filled (nothing read).
    // Quantized: the chunks raw_chunk names, rows past n and bytes past the matrix zero-filled.
    auto load_q = [&](const Seg& sg, int n0, int k0, int st) {
        const int nch = raw_chunks(sg.fmt);
        const uintptr_t base = reinterpret_cast<uintptr_t>(sg.q), end = base + static_cast<uintptr_t>(sg.bytes);
        for (int i = tid; i < kWRows * nch; i += kThreads) {
            const int r = i / nch, j = i - r * nch;
            int dst = 0;
            const uintptr_t src = raw_chunk(sg.fmt, base + static_cast<uintptr_t>(int64_t{n0 + r} * sg.row_bytes), k0, j, dst);
            const int len = n0 + r >= sg.n || src >= end ? 0 : end - src >= 16 ? 16 : static_cast<int>(end - src);
            mv::cp_async16<0>(w_stage(st) + static_cast<uint32_t>(r * kRawLd + dst), len > 0 ? reinterpret_cast<const void*>(src) : sg.q,
                              len);
        }
    };
    auto load_w = [&](const Seg& sg, int n0, int k0, int st) {
        if constexpr (Q) {
            load_q(sg, n0, k0, st);
            return;
        }
        const __half* w = sg.w;
        const int n = sg.n;
        for (int i = tid; i < kWRows * kChunks; i += kThreads) {
            const int r = i / kChunks, c = (i % kChunks) * 8, gk = k0 + c;
            const bool ok = n0 + r < n && gk < a.k;
            mv::cp_async16<0>(w_stage(st) + static_cast<uint32_t>((r * kLd + c) * 2), ok ? w + int64_t{n0 + r} * a.k + gk : w,
                              ok ? 16 : 0);
        }
    };
    auto load_x = [&](int k0, int st) {
        for (int i = tid; i < kXRows * kChunks; i += kThreads) {
            const int r = i / kChunks, c = (i % kChunks) * 8, gk = k0 + c;
            const bool ok = r < a.m && gk < a.k;
            mv::cp_async16<0>(x_stage(st) + static_cast<uint32_t>((r * kLd + c) * 2), ok ? a.x + int64_t{r} * a.k + gk : a.x,
                              ok ? 16 : 0);
        }
    };

    bool waited = false;  // the programmatic-launch wait is behind us
    for (int u = u_begin; u < u_end;) {
        const int tile = u / kt, kb = u % kt, ke = min(kt, kb + (u_end - u));
        u += ke - kb;
        // The tile's segment, by selects (no indexed parameter: no stack frame).
        const int seg = tile < a.tiles0 ? 0 : tile < a.tiles01 ? 1 : 2;
        const Seg sg = seg == 0 ? a.s0 : seg == 1 ? a.s1 : a.s2;
        float* y = sg.y;
        const int n = sg.n;
        const int n0 = (tile - (seg == 0 ? 0 : seg == 1 ? a.tiles0 : a.tiles01)) * kWRows;
        const int nk = ke - kb;

        // Prologue: stages 0 .. kS-2 (one commit group each; the first also holds the weight copies issued
        // before the wait).
        if (!waited) {
            for (int j = 0; j < kS - 1; ++j)
                if (j < nk) load_w(sg, n0, (kb + j) * kBK, j);
            pdl_wait();
            pdl_launch_dependents();
        }
        for (int j = 0; j < kS - 1; ++j) {
            if (j < nk) {
                if (waited) load_w(sg, n0, (kb + j) * kBK, j);
                load_x((kb + j) * kBK, j);
            }
            mv::cp_async_commit();
        }
        waited = true;

        float acc[MT][NW][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nt = 0; nt < NW; ++nt) acc[mt][nt][0] = acc[mt][nt][1] = acc[mt][nt][2] = acc[mt][nt][3] = 0.0f;

        for (int j = 0; j < nk; ++j) {
            mv::cp_async_wait<kS - 2>();
            __syncthreads();  // stage j % kS landed for every thread; stage (j - 1) % kS and the f16 tile are free
            {
                const int jn = j + kS - 1, st = jn % kS;
                if (jn < nk) {
                    load_w(sg, n0, (kb + jn) * kBK, st);
                    load_x((kb + jn) * kBK, st);
                }
                mv::cp_async_commit();
            }
            const uint32_t xs = x_stage(j % kS);
            uint32_t wsm = w_stage(j % kS);
            if constexpr (Q) {
                dequant_rows<kWRows>(sg.fmt, mv::mv_smem + (wsm - sbase), mv::mv_smem + kWf, reinterpret_cast<uintptr_t>(sg.q),
                                     sg.row_bytes, n0, (kb + j) * kBK, tid);
                __syncthreads();  // the f16 tile is whole
                wsm = sbase + kWf;
            }
            #pragma unroll
            for (int kk = 0; kk < kBK / 16; ++kk) {
                uint32_t xa[MT][4];
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    // matrices: token rows 0-7 and 8-15 of the tile at k kk*16, then at kk*16 + 8
                    const int row = 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1), col = kk * 16 + 8 * (lane >> 4);
                    mv::ldsm_x4(xa[mt], xs + static_cast<uint32_t>((row * kLd + col) * 2));
                }
                #pragma unroll
                for (int np = 0; np < NW; np += 2) {
                    // matrices: weight rows np*8 .. +7 at k kk*16 and +8, then rows np*8 + 8 .. +15 likewise
                    const int row = warp * 8 * NW + np * 8 + (lane & 7) + 8 * (lane >> 4), col = kk * 16 + 8 * ((lane >> 3) & 1);
                    uint32_t b[4];
                    mv::ldsm_x4(b, wsm + static_cast<uint32_t>((row * kLd + col) * 2));
                    #pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mv::mma(acc[mt][np], xa[mt][0], xa[mt][1], xa[mt][2], xa[mt][3], make_uint2(b[0], b[1]));
                        mv::mma(acc[mt][np + 1], xa[mt][0], xa[mt][1], xa[mt][2], xa[mt][3], make_uint2(b[2], b[3]));
                    }
                }
            }
        }
        mv::cp_async_wait<0>();
        __syncthreads();  // every stage free for the next piece

        // y[token][n0 + col] from the accumulators: acc[mt][nt][i] is token 16 mt + g + 8 (i >> 1), weight row
        // warp * 8 NW + nt * 8 + 2 t + (i & 1) of the tile.
        auto store = [&](const float (&v)[MT][NW][4]) {
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (int nt = 0; nt < NW; ++nt)
                    #pragma unroll
                    for (int h = 0; h < 2; ++h) {
                        const int tok = 16 * mt + g + 8 * h, col = n0 + warp * 8 * NW + nt * 8 + 2 * t;
                        if (tok >= a.m || col >= n) continue;
                        float* p = y + int64_t{tok} * n + col;
                        const float v0 = v[mt][nt][2 * h], v1 = v[mt][nt][2 * h + 1];
                        p[0] = a.accumulate ? p[0] + v0 : v0;
                        if (col + 1 < n) p[1] = a.accumulate ? p[1] + v1 : v1;
                    }
        };
        if (kb == 0 && ke == kt) {  // the whole tile
            store(acc);
            continue;
        }
        // A piece: into this CTA's slot (0: its first tile, 1: its last), element r of the lane's
        // accumulators at r * kThreads + tid (coalesced; the summing CTA reads with the same mapping).
        const int slot = tile == u_begin / kt ? 0 : 1;
        float* mine = a.ws + (int64_t{cta} * 2 + slot) * (kAcc * kThreads);
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nt = 0; nt < NW; ++nt)
                #pragma unroll
                for (int i = 0; i < 4; ++i) mine[((mt * NW + nt) * 4 + i) * kThreads + tid] = acc[mt][nt][i];
        __threadfence();  // the piece is visible device-wide before the counter says so
        __syncthreads();
        const int c_first = tile * kt / a.per_cta, c_last = ((tile + 1) * kt - 1) / a.per_cta;
        if (tid == 0) *flag = atomicAdd(a.counters + tile, 1) == c_last - c_first;
        __syncthreads();
        const bool last = *flag != 0;
        __syncthreads();  // the flag is read before a later piece writes it again
        if (!last) continue;
        __threadfence();
        float sum[MT][NW][4];
        #pragma unroll
        for (int mt = 0; mt < MT; ++mt)
            #pragma unroll
            for (int nt = 0; nt < NW; ++nt) sum[mt][nt][0] = sum[mt][nt][1] = sum[mt][nt][2] = sum[mt][nt][3] = 0.0f;
        // The pieces in k order, kSumBatch of them loaded before any is added: one L2 round trip per batch
        // instead of per piece (this sum is the tail of the launch), the same additions in the same order.
        for (int c0 = c_first; c0 <= c_last; c0 += kSumBatch) {
            float v[kSumBatch][kAcc];
            #pragma unroll
            for (int b = 0; b < kSumBatch; ++b) {
                const int c = min(c0 + b, c_last);  // past the last piece: its loads again, not added
                const float* p = a.ws + (int64_t{c} * 2 + (tile == c * a.per_cta / kt ? 0 : 1)) * (kAcc * kThreads);
                #pragma unroll
                for (int i = 0; i < kAcc; ++i) v[b][i] = __ldcg(p + i * kThreads + tid);
            }
            #pragma unroll
            for (int b = 0; b < kSumBatch; ++b)
                if (c0 + b <= c_last)
                    #pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        #pragma unroll
                        for (int nt = 0; nt < NW; ++nt)
                            #pragma unroll
                            for (int i = 0; i < 4; ++i) sum[mt][nt][i] += v[b][(mt * NW + nt) * 4 + i];
        }
        store(sum);
        if (tid == 0) a.counters[tile] = 0;  // ready for the next launch
    }
    if (!waited) {  // a CTA without units (the grid is rounded up): still part of the dependency chain
        pdl_wait();
        pdl_launch_dependents();
    }
}

}  // namespace minfer::cuda::gn
