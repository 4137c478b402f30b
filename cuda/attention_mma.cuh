// Prefill attention on the tensor cores (flash attention on mma.sync): the device code only, so that
// tests/test_attention_emu.cpp runs it on the CPU through tests/emu; cuda/attention.cu launches it.
//
// Causal grouped-query attention of n queries (token t at position pos0 + t) over the keys 0 ..
// pos0 + n - 1 of a (paged) f16 KV cache. A CTA of 4 warps takes 64 * MT consecutive queries of one head,
// 16 * MT per warp (MT MMA row tiles), and walks the keys up to its last query's position in tiles of
// kKeys = 64. K and V tiles are copied to shared memory by cp.async in two stages (tile j + 1 in flight
// while tile j is used). Per tile, a warp
//  1. computes S = Q K^T for its rows (f32 accumulators; Q pre-scaled by scale * log2(e) and rounded to f16
//     once into shared memory; Q's A fragments and K's B fragments by ldmatrix, each K fragment used for
//     the MT row tiles),
//  2. masks keys past each row's position (only in tiles reaching past the row tile's first position),
//  3. updates each row's running maximum m and the lane's share of the row sum l of exp2(s - m) (online
//     softmax in the log2 domain: the output and l are rescaled when m grows),
//  4. rounds P to f16 straight into A fragments (two m16n8 accumulator tiles are one m16k16 A tile) and
//     adds P V (V[key][dim] is the k x n operand: its B fragments by ldmatrix.trans, each used MT times).
// Shared-memory rows are padded by 16 bytes, so the 8 row addresses of an ldmatrix phase hit distinct
// banks. Keys past the CTA's last key (`last`) repeat that key's row (finite; masked for every stored query).
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)
#include "cuda/kv_map.cuh"

namespace minfer::cuda::fa {

constexpr int kWarps = 4, kThreads = 32 * kWarps;
constexpr int kKeys = 64;  // keys per tile
constexpr unsigned kAll = 0xffffffffu;

// Queries per CTA with MT row tiles per warp.
template <int MT>
constexpr int rows_per_cta() {
    return 16 * MT * kWarps;
}
// f16 elements per shared-memory row of head_dim HD.
template <int HD>
constexpr int row_stride() {
    return HD + 8;
}
// Dynamic shared memory of a CTA: the Q tile, then two stages of a K and a V tile.
template <int HD, int MT>
constexpr int smem_bytes() {
    return (rows_per_cta<MT>() + 4 * kKeys) * row_stride<HD>() * 2;
}
// CTAs of a launch: one per (query tile, head).
template <int MT>
inline int64_t grid_size(int n, int n_head) {
    return int64_t{(n + rows_per_cta<MT>() - 1) / rows_per_cta<MT>()} * n_head;
}

// q: [n][n_head * HD] f32; kc, vc: one layer's cache, rows kv_row(kv, 0, position), kv_dim = n_head_kv *
// HD; out like q. Query head h reads KV head h / group. qscale = log2(e) / sqrt(HD).
template <int HD, int MT>
__global__ __launch_bounds__(kThreads) void attn_prefill_mma_kernel(const float* q, const __half* kc, const __half* vc,
                                                                     float* out, int n, int pos0, int n_head, int group,
                                                                     int kv_dim, float qscale, KvMap kv) {
    static_assert(HD % 16 == 0 && kKeys % 16 == 0 && MT >= 1, "whole MMA tiles");
    constexpr int kRows = rows_per_cta<MT>();
    constexpr int S = row_stride<HD>();
    constexpr int kSteps = HD / 16;     // k-steps of Q K^T
    constexpr int kNTiles = HD / 8;     // n-tiles of P V
    constexpr int kKTiles = kKeys / 8;  // n-tiles of Q K^T
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int g = lane >> 2, t = lane & 3;
    // Heads fastest; the last query tiles (the most keys) first.
    const int q_tiles = (n + kRows - 1) / kRows;
    const int h = static_cast<int>(blockIdx.x) % n_head, kvh = h / group;
    const int t0 = (q_tiles - 1 - static_cast<int>(blockIdx.x) / n_head) * kRows;
    const int last = pos0 + min(n, t0 + kRows) - 1;  // the last key any query of the CTA sees
    const int64_t q_dim = int64_t{n_head} * HD;

    auto* sm = reinterpret_cast<uint16_t*>(mv::mv_smem);
    const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(mv::mv_smem));
    auto k_stage = [&](int st) { return sbase + static_cast<uint32_t>((kRows + 2 * st * kKeys) * S * 2); };
    auto v_stage = [&](int st) { return k_stage(st) + static_cast<uint32_t>(kKeys * S * 2); };

    // Key tile j into stage j & 1: 16-byte pieces, consecutive threads along a row.
    auto load_tile = [&](int j) {
        const uint32_t kd = k_stage(j & 1), vd = v_stage(j & 1);
        for (int i = static_cast<int>(threadIdx.x); i < kKeys * (HD / 8); i += kThreads) {
            const int r = i / (HD / 8), c = i % (HD / 8);
            const int64_t src = kv_row(kv, 0, min(j * kKeys + r, last)) * kv_dim + int64_t{kvh} * HD + c * 8;
            const uint32_t at = static_cast<uint32_t>((r * S + c * 8) * 2);
            mv::cp_async16<0>(kd + at, kc + src, 16);
            mv::cp_async16<0>(vd + at, vc + src, 16);
        }
        mv::cp_async_commit();
    };
    const int key_tiles = last / kKeys + 1;
    load_tile(0);

    // Q rows of the CTA, scaled, as f16 (rows past n: zeros).
    for (int i = static_cast<int>(threadIdx.x); i < kRows * (HD / 4); i += kThreads) {
        const int r = i / (HD / 4), c = 4 * (i % (HD / 4));
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (t0 + r < n) v = __ldg(reinterpret_cast<const float4*>(q + (t0 + r) * q_dim + int64_t{h} * HD + c));
        auto* d = reinterpret_cast<uint32_t*>(sm + r * S + c);
        d[0] = mv::pack_f16x2(v.x * qscale, v.y * qscale);
        d[1] = mv::pack_f16x2(v.z * qscale, v.w * qscale);
    }
    __syncthreads();

    const int w0 = warp * 16 * MT;  // the warp's first row in the CTA
    float o[MT][kNTiles][4];
    float m[MT][2], l[MT][2];  // rows g and g + 8 of each row tile
    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (auto& x : o[mt]) x[0] = x[1] = x[2] = x[3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }
    const int first_pos = pos0 + t0 + w0;  // the warp's first query position
    const bool active = t0 + w0 < n;        // the warp has a query to answer

    for (int j = 0; j < key_tiles; ++j) {
        if (j + 1 < key_tiles) {
            load_tile(j + 1);
            mv::cp_async_wait<1>();
        } else {
            mv::cp_async_wait<0>();
        }
        __syncthreads();
        const int k0 = j * kKeys;
        if (active && k0 <= first_pos + 16 * MT - 1) {  // warp-uniform: some row of the warp sees a key of the tile
            const uint32_t kb = k_stage(j & 1), vb = v_stage(j & 1);
            float s[MT][kKTiles][4];
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt)
                #pragma unroll
                for (auto& x : s[mt]) x[0] = x[1] = x[2] = x[3] = 0.0f;
            #pragma unroll
            for (int kk = 0; kk < kSteps; ++kk) {
                uint32_t qa[MT][4];
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    // matrices: rows 0-7 and 8-15 of the row tile at dims kk*16, then at kk*16 + 8
                    const int row = w0 + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1), col = kk * 16 + 8 * (lane >> 4);
                    mv::ldsm_x4(qa[mt], sbase + static_cast<uint32_t>((row * S + col) * 2));
                }
                #pragma unroll
                for (int nt = 0; nt < kKTiles; nt += 2) {
                    // matrices: keys nt (dims kk*16, +8), keys nt + 1 (dims kk*16, +8)
                    const int key = nt * 8 + (lane & 7) + 8 * (lane >> 4), col = kk * 16 + 8 * ((lane >> 3) & 1);
                    uint32_t b[4];
                    mv::ldsm_x4(b, kb + static_cast<uint32_t>((key * S + col) * 2));
                    #pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mv::mma(s[mt][nt], qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3], make_uint2(b[0], b[1]));
                        mv::mma(s[mt][nt + 1], qa[mt][0], qa[mt][1], qa[mt][2], qa[mt][3], make_uint2(b[2], b[3]));
                    }
                }
            }
            #pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const int pos = first_pos + 16 * mt;  // the row tile's first position
                if (k0 + kKeys - 1 > pos) {           // the causal diagonal crosses the tile
                    #pragma unroll
                    for (int nt = 0; nt < kKTiles; ++nt)
                        #pragma unroll
                        for (int i = 0; i < 4; ++i)
                            if (k0 + nt * 8 + 2 * t + (i & 1) > pos + g + 8 * (i >> 1)) s[mt][nt][i] = -INFINITY;
                }
                #pragma unroll
                for (int r = 0; r < 2; ++r) {
                    float mx = m[mt][r];
                    #pragma unroll
                    for (int nt = 0; nt < kKTiles; ++nt) mx = fmaxf(mx, fmaxf(s[mt][nt][2 * r], s[mt][nt][2 * r + 1]));
                    mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 1));
                    mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 2));
                    const float base = mx == -INFINITY ? 0.0f : mx;  // a row with no key yet keeps zeros
                    const float alpha = exp2f(m[mt][r] - base);
                    m[mt][r] = mx;
                    l[mt][r] *= alpha;
                    #pragma unroll
                    for (int dn = 0; dn < kNTiles; ++dn) {
                        o[mt][dn][2 * r] *= alpha;
                        o[mt][dn][2 * r + 1] *= alpha;
                    }
                    #pragma unroll
                    for (int nt = 0; nt < kKTiles; ++nt) {
                        s[mt][nt][2 * r] = exp2f(s[mt][nt][2 * r] - base);
                        s[mt][nt][2 * r + 1] = exp2f(s[mt][nt][2 * r + 1] - base);
                        l[mt][r] += s[mt][nt][2 * r] + s[mt][nt][2 * r + 1];
                    }
                }
            }
            #pragma unroll
            for (int kk = 0; kk < kKeys / 16; ++kk) {
                uint32_t pa[MT][4];
                #pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    pa[mt][0] = mv::pack_f16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                    pa[mt][1] = mv::pack_f16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                    pa[mt][2] = mv::pack_f16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                    pa[mt][3] = mv::pack_f16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
                }
                #pragma unroll
                for (int dn = 0; dn < kNTiles; dn += 2) {
                    // matrices: keys kk*16 (+8) x dims dn, then the same keys x dims dn + 1; transposed
                    const int key = kk * 16 + (lane & 7) + 8 * ((lane >> 3) & 1), col = dn * 8 + 8 * (lane >> 4);
                    uint32_t b[4];
                    mv::ldsm_x4_trans(b, vb + static_cast<uint32_t>((key * S + col) * 2));
                    #pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        mv::mma(o[mt][dn], pa[mt][0], pa[mt][1], pa[mt][2], pa[mt][3], make_uint2(b[0], b[1]));
                        mv::mma(o[mt][dn + 1], pa[mt][0], pa[mt][1], pa[mt][2], pa[mt][3], make_uint2(b[2], b[3]));
                    }
                }
            }
        }
        __syncthreads();  // stage j & 1 is free for tile j + 2
    }

    #pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float sum = l[mt][r];
            sum += __shfl_xor_sync(kAll, sum, 1);
            sum += __shfl_xor_sync(kAll, sum, 2);
            const int tq = t0 + w0 + 16 * mt + g + 8 * r;
            if (!active || tq >= n) continue;
            const float inv = 1.0f / sum;
            float* dst = out + tq * q_dim + int64_t{h} * HD + 2 * t;
            #pragma unroll
            for (int dn = 0; dn < kNTiles; ++dn) {
                dst[dn * 8] = o[mt][dn][2 * r] * inv;
                dst[dn * 8 + 1] = o[mt][dn][2 * r + 1] * inv;
            }
        }
    }
}

}  // namespace minfer::cuda::fa
