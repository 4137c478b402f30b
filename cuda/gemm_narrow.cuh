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
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)

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

template <int NW>
constexpr int tile_rows() {
    return 8 * NW * kWarps;
}
// Floats of a CTA's accumulators (one workspace slot).
template <int MT, int NW>
constexpr int acc_floats() {
    return MT * NW * 4 * kThreads;
}
// Dynamic shared memory: the stages (token rows, then weight rows), then one int (the last-piece flag).
template <int MT, int NW>
constexpr int smem_bytes() {
    return kStages * (16 * MT + tile_rows<NW>()) * kLd * 2 + 16;
}

struct Seg {
    const __half* w = nullptr;  // [n][k]
    float* y = nullptr;         // [m][n]
    int n = 0;                  // weight rows
};

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

template <int MT, int NW>
__global__ __launch_bounds__(kThreads) void gemm_narrow_kernel(Args a) {
    static_assert(MT >= 1 && MT <= 4 && (NW == 2 || NW == 4), "the shapes the launcher instantiates");
    constexpr int kXRows = 16 * MT, kWRows = tile_rows<NW>();
    constexpr int kStageHalves = (kXRows + kWRows) * kLd;
    constexpr int kAcc = MT * NW * 4;
    const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const int cta = static_cast<int>(blockIdx.x);
    const int u_begin = cta * a.per_cta, u_end = u_begin + min(a.per_cta, a.units - u_begin);  // no int overflow
    const int kt = a.k_tiles;

    const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(mv::mv_smem));
    auto x_stage = [&](int st) { return sbase + static_cast<uint32_t>(st * kStageHalves * 2); };
    auto w_stage = [&](int st) { return x_stage(st) + static_cast<uint32_t>(kXRows * kLd * 2); };
    int* flag = reinterpret_cast<int*>(mv::mv_smem + kStages * kStageHalves * 2);

    // k-tile j of a piece into stage st: 16-byte chunks, kChunks per row, consecutive threads along a row; rows
    // past m or n and columns past k are zero-filled (nothing read).
    auto load_w = [&](const __half* w, int n, int n0, int k0, int st) {
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
        const __half* w = seg == 0 ? a.s0.w : seg == 1 ? a.s1.w : a.s2.w;
        float* y = seg == 0 ? a.s0.y : seg == 1 ? a.s1.y : a.s2.y;
        const int n = seg == 0 ? a.s0.n : seg == 1 ? a.s1.n : a.s2.n;
        const int n0 = (tile - (seg == 0 ? 0 : seg == 1 ? a.tiles0 : a.tiles01)) * kWRows;
        const int nk = ke - kb;

        // Prologue: stages 0 .. kStages-2 (one commit group each; the first also holds the weight copies
        // issued before the wait).
        if (!waited) {
            for (int j = 0; j < kStages - 1; ++j)
                if (j < nk) load_w(w, n, n0, (kb + j) * kBK, j);
            pdl_wait();
            pdl_launch_dependents();
        }
        for (int j = 0; j < kStages - 1; ++j) {
            if (j < nk) {
                if (waited) load_w(w, n, n0, (kb + j) * kBK, j);
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
            mv::cp_async_wait<kStages - 2>();
            __syncthreads();  // stage j % kStages landed for every thread; stage (j - 1) % kStages is free
            {
                const int jn = j + kStages - 1, st = jn % kStages;
                if (jn < nk) {
                    load_w(w, n, n0, (kb + jn) * kBK, st);
                    load_x((kb + jn) * kBK, st);
                }
                mv::cp_async_commit();
            }
            const uint32_t xs = x_stage(j % kStages), wsm = w_stage(j % kStages);
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
        for (int c = c_first; c <= c_last; ++c) {  // k order
            const float* p = a.ws + (int64_t{c} * 2 + (tile == c * a.per_cta / kt ? 0 : 1)) * (kAcc * kThreads);
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (int nt = 0; nt < NW; ++nt)
                    #pragma unroll
                    for (int i = 0; i < 4; ++i) sum[mt][nt][i] += __ldcg(p + ((mt * NW + nt) * 4 + i) * kThreads + tid);
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
