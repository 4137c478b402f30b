// Attention on the tensor cores (flash attention on mma.sync), prefill and decode: the device code only,
// so that tests/test_attention_emu.cpp runs it on the CPU through tests/emu; cuda/attention.cu launches
// it. The prefill kernel first; the decode kernel (split-K flash decoding) and its combine at the end.
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
#include "cuda/matvec_impl.cuh"  // mv::xq_put4: the output projection's int8 input

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

// What a prefill CTA of `rows` consecutive queries of one head takes (blockIdx.x): heads fastest, the last
// query tiles (the most keys) first. Shared with the warpgroup-MMA kernel (cuda/attention_wg.cuh).
struct PrefillCta {
    int h, kvh;  // the query head and its KV head
    int t0;      // the first query
    int last;    // the last key any query of the CTA sees
};
// Four consecutive query elements from element `at` on, times qscale, as the f16 MMA operand (two f16x2
// words): read from q (f32) and rounded, or from q16, which qkv_finish wrote as the same product rounded
// the same way (cuda/norm_rope.cuh); zeros where !valid.
__device__ __forceinline__ uint2 q_f16x4(const float* q, const __half* q16, bool valid, int64_t at, float qscale) {
    if (!valid) return make_uint2(0u, 0u);
    if (q16) return __ldg(reinterpret_cast<const uint2*>(q16 + at));
    const float4 v = __ldg(reinterpret_cast<const float4*>(q + at));
    return make_uint2(mv::pack_f16x2(v.x * qscale, v.y * qscale), mv::pack_f16x2(v.z * qscale, v.w * qscale));
}

__device__ __forceinline__ PrefillCta prefill_cta(int rows, int n, int pos0, int n_head, int group) {
    const int q_tiles = (n + rows - 1) / rows;
    const int h = static_cast<int>(blockIdx.x) % n_head;
    const int t0 = (q_tiles - 1 - static_cast<int>(blockIdx.x) / n_head) * rows;
    return {h, h / group, t0, pos0 + min(n, t0 + rows) - 1};
}

// q: [n][n_head * HD] f32, or given q16, q16 instead (the same shape in f16, already times qscale: see
// q_f16x4); kc, vc: one layer's cache, rows kv_row(kv, 0, position), kv_dim = n_head_kv * HD; out like q
// (f32), or with out16 given, out16 instead (f16: the output projection's GEMM input). Query head h reads
// KV head h / group. qscale = log2(e) / sqrt(HD).
template <int HD, int MT>
__global__ __launch_bounds__(kThreads) void attn_prefill_mma_kernel(const float* q, const __half* q16, const __half* kc,
                                                                     const __half* vc, float* out, __half* out16, int n, int pos0,
                                                                     int n_head, int group, int kv_dim, float qscale, KvMap kv) {
    static_assert(HD % 16 == 0 && kKeys % 16 == 0 && MT >= 1, "whole MMA tiles");
    constexpr int kRows = rows_per_cta<MT>();
    constexpr int S = row_stride<HD>();
    constexpr int kSteps = HD / 16;     // k-steps of Q K^T
    constexpr int kNTiles = HD / 8;     // n-tiles of P V
    constexpr int kKTiles = kKeys / 8;  // n-tiles of Q K^T
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int g = lane >> 2, t = lane & 3;
    const PrefillCta cta = prefill_cta(kRows, n, pos0, n_head, group);
    const int h = cta.h, kvh = cta.kvh, t0 = cta.t0, last = cta.last;
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

    // Q rows of the CTA, scaled, as f16 (rows past n: zeros): from q, or as they stand in q16.
    for (int i = static_cast<int>(threadIdx.x); i < kRows * (HD / 4); i += kThreads) {
        const int r = i / (HD / 4), c = 4 * (i % (HD / 4));
        *reinterpret_cast<uint2*>(sm + r * S + c) = q_f16x4(q, q16, t0 + r < n, (t0 + r) * q_dim + int64_t{h} * HD + c, qscale);
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
            const int64_t at = tq * q_dim + int64_t{h} * HD + 2 * t;
            if (out16) {
                #pragma unroll
                for (int dn = 0; dn < kNTiles; ++dn)
                    *reinterpret_cast<uint32_t*>(out16 + at + dn * 8) = mv::pack_f16x2(o[mt][dn][2 * r] * inv, o[mt][dn][2 * r + 1] * inv);
            } else {
                #pragma unroll
                for (int dn = 0; dn < kNTiles; ++dn) {
                    out[at + dn * 8] = o[mt][dn][2 * r] * inv;
                    out[at + dn * 8 + 1] = o[mt][dn][2 * r + 1] * inv;
                }
            }
        }
    }
}

// ---- decode: one query token per row against its cached keys ----------------------------------------------
//
// Split-K flash decoding: the keys 0 .. L-1 of a row are cut into n_split chunks of `chunk` keys
// (decode_split_for below); cuda/attention.cu launches the kernel and, past one chunk, the combine (the
// end of this file), which merges the chunks' partials.
#ifndef MINFER_ATTN_MIN_CHUNK
#define MINFER_ATTN_MIN_CHUNK 64
#endif
static_assert(MINFER_ATTN_MIN_CHUNK >= 1, "decode split tunable");
// Chunks are multiples of 64 keys: four 16-key tiles, so every warp of a block takes the same number of
// tiles and none waits at the merge for another's extra tile (at 8,192 keys on the 7B: 64 chunks of 128
// keys, not 86 of 96 with 32-key alignment; H100, 2026-12-07: +0.6-1.1% decode at that depth, level
// elsewhere; docs/perf.md).
constexpr int kChunkAlign = 64;
struct DecodeSplit {
    int chunk, n_split;
};
// chunk >= ceil(L / max_splits), so n_split = ceil(L / chunk) <= max_splits: the partials fit. The host
// launcher and, under a CUDA graph, the kernels themselves compute it.
__host__ __device__ inline DecodeSplit decode_split_for(int L, int max_splits) {
    int chunk = (L + max_splits - 1) / max_splits;
    chunk = chunk > MINFER_ATTN_MIN_CHUNK ? chunk : MINFER_ATTN_MIN_CHUNK;
    chunk = (chunk + kChunkAlign - 1) / kChunkAlign * kChunkAlign;
    return {chunk, (L + chunk - 1) / chunk};
}

// The tensor-core decode kernel. Block (kvh, s, row * zc + z) takes chunk s (keys p_begin .. p_end - 1)
// of KV head kvh for query heads 16 z .. of the row's group (gh <= 16 of them): the rows of one m16 MMA
// tile, rows past gh zeros. Each warp walks its own keys of the chunk, 16 at a time (warp w: p_begin +
// 64 i + 16 w + 0..15), through its own K and V slots of shared memory, copied by its own lanes with
// cp.async (no block barrier in the loop; K and V in separate groups, so S is computed while V lands and
// the next K is in flight during P V). Per 16 keys: S = Q K^T (two 8-key n-tiles), the rows' online
// softmax, O += P V (the 16 keys one k-step). At the end the four warps' (m, l, O) are merged through
// shared memory into the row's output (one chunk) or the chunk's partial (unnormalized O, m, l).
// Precision: Q and P enter the MMAs as f16 hi + lo pairs (lo: hi's rounding error, rounded), both
// multiplied, so the operands carry about 22 bits and the result is as close to float64 as the f32
// CUDA-core arithmetic it replaced (decode reads the whole cache for one query: the MMAs' cost is small).
// P is scaled by 2^kPScale (so its small values stay clear of f16 subnormals), l alike: the ratio is the same.
// The keys before the row's last (written by earlier steps) are copied before pdl_wait; the last one (this
// step's, written by the kernel before) after it. A caller whose earlier keys come from this step too (the
// last layer's packed rows, cuda/forward.cu) puts a kernel that waits for the writer between them: this
// kernel then starts only after that one has passed its own pdl_wait, so after the writer has finished.
#ifndef MINFER_ATTN_EARLY
#define MINFER_ATTN_EARLY 1  // 0: every copy after pdl_wait (the A/B knob)
#endif
constexpr int kDecKeys = 16;  // keys per warp and tile
static_assert(kDecKeys == 1 << kKvPageShift, "a decode tile is one page of the KV cache");
static_assert(kChunkAlign % (kWarps * kDecKeys) == 0, "every warp of a block as many tiles of a chunk (kChunkAlign above)");
// A chunk's partial for one query head: its unnormalized output (HD floats), m, l, padded to 16 bytes
// (the combine reads it in float4s).
template <int HD>
constexpr int part_stride() {
    return HD + 4;
}
__host__ __device__ constexpr int part_stride(int hd) { return hd + 4; }
constexpr float kPScale = 15.0f;
// K and V slot pairs per warp: a warp's first kDecSlots tiles are all copied before pdl_wait, and each
// later tile's copy is issued into the slots of the tile kDecSlots before it once that one is read, so
// kDecSlots tiles a warp are in flight. MINFER_ATTN_SLOTS (the A/B knob): 1, the default, issues each
// tile's copy while the one before it computes; on the H200 2 measured 0.4% faster on qwen2-0.5b at 30,000
// keys but 1.2% slower on the 7B at 8,192 (docs/perf.md, 2026-12-04), where it also halves the blocks an
// SM (77 against 43 KiB of shared memory a block at head_dim 128).
#ifndef MINFER_ATTN_SLOTS
#define MINFER_ATTN_SLOTS 1
#endif
constexpr int kDecSlots = MINFER_ATTN_SLOTS;
static_assert(kDecSlots >= 1 && kDecSlots <= 4, "decode attention slots a warp");
// Dynamic shared memory: Q hi and lo (16 rows each), then per warp kDecSlots K and V slots of 16 rows;
// the merge reuses the slots for 4 x 16 rows of O (f32) and the warps' m and l.
template <int HD>
constexpr int dec_q_bytes() {
    return 2 * 16 * row_stride<HD>() * 2;
}
// The merge's O rows are padded by 8 floats: unpadded (128 floats apart), the 8 lanes of a quad column
// store to one bank.
template <int HD>
constexpr int dec_merge_stride() {
    return HD + 8;
}
template <int HD>
constexpr int dec_smem_bytes() {
    constexpr int slots = kWarps * kDecSlots * 2 * kDecKeys * row_stride<HD>() * 2,
                  merge = (kWarps * 16 * dec_merge_stride<HD>() + 2 * kWarps * 16) * 4;
    return dec_q_bytes<HD>() + (slots > merge ? slots : merge);
}

// Rounds a and b to f16 (hi) and their remainders a - hi, b - hi to f16 (lo), each pair packed as f16x2.
__device__ __forceinline__ void split_f16x2(float a, float b, uint32_t& hi, uint32_t& lo) {
    hi = mv::pack_f16x2(a, b);
    const float ha = __half2float(__ushort_as_half(static_cast<unsigned short>(hi & 0xffffu)));
    const float hb = __half2float(__ushort_as_half(static_cast<unsigned short>(hi >> 16)));
    lo = mv::pack_f16x2(a - ha, b - hb);
}

// One row's four outputs from dimension `col` of its q_dim (element `at` of out): the f32 output, its f16
// copy (optional) and its int8 form (optional, row xq_row of xq_rows). The whole warp calls it (xq_put4
// shuffles); `valid` masks a lane's stores.
__device__ __forceinline__ void store_out4(float4 v, float* out, __half* out16, uint8_t* xq, int64_t at, int64_t col, int64_t q_dim,
                                           bool valid, int xq_row, int xq_rows) {
    if (valid) {
        *reinterpret_cast<float4*>(out + at) = v;
        if (out16) {
            out16[at] = __float2half_rn(v.x);
            out16[at + 1] = __float2half_rn(v.y);
            out16[at + 2] = __float2half_rn(v.z);
            out16[at + 3] = __float2half_rn(v.w);
        }
    }
    if (xq) mv::xq_put4(v, col, q_dim, xq, valid, xq_row, xq_rows);
}

// q: [rows][n_head * HD] f32 (rows of one token each; row r at position pos_dev[r], or L - 1 when pos_dev
// is null); part: per row, n_head * gridDim.y * part_stride<HD>() floats; out like q, out16 (optional) its
// f16 copy, xq (optional) its int8 form (mv::xq_put4) as row xq_row0 + r of xq_rows. The three are written
// by the kernel for rows of one chunk and by the combine for the others.
template <int HD>
__global__ __launch_bounds__(kThreads) void attn_decode_mma_kernel(const float* __restrict__ q, const __half* __restrict__ kc,
                                                                    const __half* __restrict__ vc, float* __restrict__ part,
                                                                    float* __restrict__ out, int L, int group, int kv_dim, float qscale,
                                                                    int chunk, const int32_t* __restrict__ pos_dev, int zc, KvMap kv,
                                                                    __half* __restrict__ out16, uint8_t* __restrict__ xq, int xq_row0,
                                                                    int xq_rows, bool early_trigger) {
    static_assert(HD % 16 == 0, "whole MMA tiles");
    constexpr int S = row_stride<HD>(), CPR = HD / 8, kKSteps = HD / 16, kNTiles = HD / 8;
    constexpr int kSlot = kDecKeys * S * 2;  // bytes of one K or V slot
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const int g = lane >> 2, t = lane & 3;
    const int kvh = static_cast<int>(blockIdx.x), s = static_cast<int>(blockIdx.y);
    const int row = static_cast<int>(blockIdx.z) / zc, z = static_cast<int>(blockIdx.z) % zc;
    int n_split = static_cast<int>(gridDim.y);
    // Positions and page tables were written before this step's first kernel: readable before pdl_wait.
    if (pos_dev) {  // the launch covers the most chunks: this length's split
        L = pos_dev[row] + 1;
        const DecodeSplit sp = decode_split_for(L, n_split);
        chunk = sp.chunk;
        n_split = sp.n_split;
        if (s >= n_split) return;  // block-uniform
    }
    const int gh = min(group - 16 * z, 16), hq0 = kvh * group + 16 * z;
    const int p_begin = s * chunk, p_end = min(L, p_begin + chunk);
    const int64_t q_dim = int64_t{kv_dim} * group;
    const uint32_t sbase = static_cast<uint32_t>(__cvta_generic_to_shared(mv::mv_smem));
    const uint32_t q_hi = sbase, q_lo = sbase + 16 * S * 2;
    // Tile t of the warp (keys p_begin + 64 t + 16 warp + 0..15) uses K slot k_slot(t % kDecSlots), its V
    // slot kSlot bytes after it.
    auto k_slot = [&](int j) { return sbase + dec_q_bytes<HD>() + static_cast<uint32_t>((warp * kDecSlots + j) * 2 * kSlot); };
    const __half* kbase = kc + kvh * HD;
    const __half* vbase = vc + kvh * HD;

    // The warp's 16 keys from k0 into its slot: keys past the chunk zero-filled; key `skip` not copied.
    // A tile is one page of the cache (k0 is a multiple of kDecKeys: chunks start at multiples of
    // kChunkAlign, a warp's tiles 16 and 64 keys apart), so one page-table entry finds all its rows; lane j
    // reads the entry of the warp's tile j up front, before any copy (page tables are written before the
    // step's first kernel), so a refill does not wait for a look-up (tiles past the 32nd look theirs up).
    // A lane keeps one 16-byte column of the rows, 32 / CPR rows a pass: a whole tile's copy is an address
    // add and a cp.async a row (before: a look-up a copy and the index arithmetic; 2026-12-07, with the
    // softmax's skipped rescales below, tg128 @ d8192 +3-5% on the H100, docs/perf.md).
    const int kw = p_begin + kDecKeys * warp;  // the warp's first key; tile t starts at kw + kStep t
    constexpr int kStep = kWarps * kDecKeys;
    int lane_tile_row = 0;  // a row index fits an int: 2^31 rows of a layer would take terabytes
    if (kw + kStep * lane < p_end) lane_tile_row = static_cast<int>(kv_row(kv, row, kw + kStep * lane));
    auto tile_row = [&](int k0) -> int64_t {  // the whole warp calls it
        const int ti = (k0 - kw) / kStep;
        const int r = __shfl_sync(kAll, lane_tile_row, ti & 31);
        return ti < 32 ? int64_t{r} : kv_row(kv, row, k0);
    };
    constexpr int kRowsPass = 32 / CPR;
    static_assert(32 % CPR == 0 && kDecKeys % kRowsPass == 0, "a warp's pass covers whole rows");
    const int lane_r = lane / CPR, lane_c = lane % CPR;
    const uint32_t lane_dst = static_cast<uint32_t>((lane_r * S + lane_c * 8) * 2);
    auto copy_tile = [&](uint32_t slot, const __half* base, int k0, int skip) {
        const __half* src = base + (tile_row(k0) + lane_r) * kv_dim + lane_c * 8;
        const int64_t pass = int64_t{kRowsPass} * kv_dim;  // elements between a lane's rows
        const uint32_t dst = slot + lane_dst;
        if (k0 + kDecKeys <= p_end && (skip < k0 || skip >= k0 + kDecKeys)) {  // warp-uniform: a whole tile
#pragma unroll
            for (int j = 0; j < kDecKeys / kRowsPass; ++j)
                mv::cp_async16<0>(dst + static_cast<uint32_t>(j * kRowsPass * S * 2), src + j * pass, 16);
        } else {
#pragma unroll
            for (int j = 0; j < kDecKeys / kRowsPass; ++j) {
                const int key = k0 + lane_r + kRowsPass * j;
                if (key == skip) continue;
                const bool ok = key < p_end;
                mv::cp_async16<0>(dst + static_cast<uint32_t>(j * kRowsPass * S * 2), ok ? src + j * pass : base, ok ? 16 : 0);
            }
        }
    };
    const int last = L - 1;  // this step's key: written by the kernel before this one
    const bool active = kw < p_end;  // the warp has keys
    // The first kDecSlots tiles, K and V each a group (possibly empty: the waits count groups); before
    // pdl_wait all but this step's key, which goes after it (MINFER_ATTN_EARLY = 0: everything after it).
    auto copy_first = [&](int skip) {
#pragma unroll
        for (int j = 0; j < kDecSlots; ++j) {
            const int k0 = kw + kStep * j;
            if (k0 < p_end) copy_tile(k_slot(j), kbase, k0, skip);
            mv::cp_async_commit();
            if (k0 < p_end) copy_tile(k_slot(j) + kSlot, vbase, k0, skip);
            mv::cp_async_commit();
        }
    };
    if (MINFER_ATTN_EARLY) copy_first(last);
    // Launched as a programmatic dependent (cuda/pdl.cuh); the early trigger only where the launcher allows
    // it: never before another decode launch of the step whose rows read keys this step writes.
    pdl_enter<kEarlyAttention>(early_trigger);
    if (!MINFER_ATTN_EARLY) copy_first(-1);
#pragma unroll
    for (int j = 0; j < kDecSlots; ++j) {
        const int k0 = kw + kStep * j;
        // Only in the chunk that holds it (a warp without keys never waits for its copies).
        if (MINFER_ATTN_EARLY && last < p_end && last >= k0 && last < k0 + kDecKeys) {  // warp-uniform
            for (int c = lane; c < CPR; c += 32) {
                const int64_t off = kv_row(kv, row, last) * kv_dim + c * 8;
                const uint32_t at = static_cast<uint32_t>(((last - k0) * S + c * 8) * 2);
                mv::cp_async16<0>(k_slot(j) + at, kbase + off, 16);
                mv::cp_async16<0>(k_slot(j) + kSlot + at, vbase + off, 16);
            }
        }
    }
    mv::cp_async_commit();

    // Q of the block's heads, times qscale, as f16 hi and lo rows (rows past gh: zeros).
    for (int i = static_cast<int>(threadIdx.x); i < 16 * (HD / 4); i += kThreads) {
        const int r = i / (HD / 4), c = 4 * (i % (HD / 4));
        float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        if (r < gh) v = __ldg(reinterpret_cast<const float4*>(q + row * q_dim + int64_t{hq0 + r} * HD + c));
        uint32_t h0, l0, h1, l1;
        split_f16x2(v.x * qscale, v.y * qscale, h0, l0);
        split_f16x2(v.z * qscale, v.w * qscale, h1, l1);
        auto* dh = reinterpret_cast<uint32_t*>(mv::mv_smem + (r * S + c) * 2);
        auto* dl = reinterpret_cast<uint32_t*>(mv::mv_smem + 16 * S * 2 + (r * S + c) * 2);
        dh[0] = h0, dh[1] = h1, dl[0] = l0, dl[1] = l1;
    }
    __syncthreads();

    float o[kNTiles][4];
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8
#pragma unroll
    for (auto& x : o) x[0] = x[1] = x[2] = x[3] = 0.0f;
    // Tile ti waits for its K with all but the 2 kDecSlots - 1 newest groups pending (its V, then K and V
    // of the kDecSlots - 1 tiles after it); the first waits for everything copied before the loop.
    for (int ti = 0; active; ++ti) {
        const int k0 = kw + kStep * ti;
        const uint32_t ks = k_slot(ti % kDecSlots), vs = ks + kSlot;
        if (ti == 0) mv::cp_async_wait<0>();
        else mv::cp_async_wait<2 * kDecSlots - 1>();
        __syncwarp();
        float sc[2][4] = {};
#pragma unroll
        for (int kk = 0; kk < kKSteps; ++kk) {
            uint32_t qh[4], ql[4], b[4];
            const uint32_t qa = static_cast<uint32_t>((((lane & 7) + 8 * ((lane >> 3) & 1)) * S + kk * 16 + 8 * (lane >> 4)) * 2);
            mv::ldsm_x4(qh, q_hi + qa);
            mv::ldsm_x4(ql, q_lo + qa);
            // matrices: keys 0-7 (dims kk*16, +8), keys 8-15 (the same dims)
            mv::ldsm_x4(b, ks + static_cast<uint32_t>((((lane & 7) + 8 * (lane >> 4)) * S + kk * 16 + 8 * ((lane >> 3) & 1)) * 2));
            mv::mma(sc[0], qh[0], qh[1], qh[2], qh[3], make_uint2(b[0], b[1]));
            mv::mma(sc[0], ql[0], ql[1], ql[2], ql[3], make_uint2(b[0], b[1]));
            mv::mma(sc[1], qh[0], qh[1], qh[2], qh[3], make_uint2(b[2], b[3]));
            mv::mma(sc[1], ql[0], ql[1], ql[2], ql[3], make_uint2(b[2], b[3]));
        }
        const int k_refill = k0 + kStep * kDecSlots;  // the tile this slot takes next
        __syncwarp();  // the K slot is read
        if (k_refill < p_end) copy_tile(ks, kbase, k_refill, -1);
        mv::cp_async_commit();  // possibly empty: keeps the waits' counts
        const bool partial = k0 + kDecKeys > p_end;  // warp-uniform: only such a tile has keys to mask
        float mx[2];
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            mx[r] = m[r];
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    if (partial && k0 + 8 * nt + 2 * t + e >= p_end) sc[nt][2 * r + e] = -INFINITY;
                    mx[r] = fmaxf(mx[r], sc[nt][2 * r + e]);
                }
            }
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(kAll, mx[r], 1));
            mx[r] = fmaxf(mx[r], __shfl_xor_sync(kAll, mx[r], 2));
        }
        // O and l scaled by exp2(m - mx): skipped on the warp's first tile (O and l are zeros) and where no
        // row of the warp grew (alpha is 1 for all): the same bits, without 64 multiplies a tile.
        if (ti > 0 && __any_sync(kAll, mx[0] > m[0] || mx[1] > m[1])) {
#pragma unroll
            for (int r = 0; r < 2; ++r) {
                const float alpha = exp2f(m[r] - mx[r]);
                l[r] *= alpha;
#pragma unroll
                for (int dn = 0; dn < kNTiles; ++dn) {
                    o[dn][2 * r] *= alpha;
                    o[dn][2 * r + 1] *= alpha;
                }
            }
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
            m[r] = mx[r];
            const float base = mx[r] - kPScale;
#pragma unroll
            for (int nt = 0; nt < 2; ++nt) {
                sc[nt][2 * r] = exp2f(sc[nt][2 * r] - base);  // 0 past the chunk
                sc[nt][2 * r + 1] = exp2f(sc[nt][2 * r + 1] - base);
                l[r] += sc[nt][2 * r] + sc[nt][2 * r + 1];
            }
        }
        uint32_t ph[4], pl[4];  // P as the A tile: rows g, g + 8 x keys 2t, 2t + 1 and 8 + 2t, 9 + 2t
        split_f16x2(sc[0][0], sc[0][1], ph[0], pl[0]);
        split_f16x2(sc[0][2], sc[0][3], ph[1], pl[1]);
        split_f16x2(sc[1][0], sc[1][1], ph[2], pl[2]);
        split_f16x2(sc[1][2], sc[1][3], ph[3], pl[3]);
        mv::cp_async_wait<2 * kDecSlots - 1>();  // V: all but the K and V of the tiles after it and the refilled K
        __syncwarp();
#pragma unroll
        for (int dn = 0; dn < kNTiles; dn += 2) {
            // matrices: keys 0-7 and 8-15 x dims dn*8, then the same keys x dims dn*8 + 8; transposed
            uint32_t b[4];
            mv::ldsm_x4_trans(b, vs + static_cast<uint32_t>((((lane & 7) + 8 * ((lane >> 3) & 1)) * S + dn * 8 + 8 * (lane >> 4)) * 2));
            mv::mma(o[dn], ph[0], ph[1], ph[2], ph[3], make_uint2(b[0], b[1]));
            mv::mma(o[dn], pl[0], pl[1], pl[2], pl[3], make_uint2(b[0], b[1]));
            mv::mma(o[dn + 1], ph[0], ph[1], ph[2], ph[3], make_uint2(b[2], b[3]));
            mv::mma(o[dn + 1], pl[0], pl[1], pl[2], pl[3], make_uint2(b[2], b[3]));
        }
        if (k0 + kStep >= p_end) break;  // the warp's last tile (every copy it issued has been waited for)
        __syncwarp();  // the V slot is read
        if (k_refill < p_end) copy_tile(vs, vbase, k_refill, -1);
        mv::cp_async_commit();
    }

    // Merge the warps: each one's m, l (summed over its quad) and O rows into shared memory (the slots).
    __syncthreads();  // every warp is done with its slots
    float* mo = reinterpret_cast<float*>(mv::mv_smem + dec_q_bytes<HD>());  // [warp][16][MS]
    constexpr int MS = dec_merge_stride<HD>();
    float* mm = mo + kWarps * 16 * MS;                                        // [warp][16]
    float* ml = mm + kWarps * 16;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
        float sum = l[r];
        sum += __shfl_xor_sync(kAll, sum, 1);
        sum += __shfl_xor_sync(kAll, sum, 2);
        const int rr = warp * 16 + g + 8 * r;
        if (t == 0) {
            mm[rr] = m[r];
            ml[rr] = sum;
        }
#pragma unroll
        for (int dn = 0; dn < kNTiles; ++dn)
            *reinterpret_cast<float2*>(mo + rr * MS + dn * 8 + 2 * t) = make_float2(o[dn][2 * r], o[dn][2 * r + 1]);
    }
    __syncthreads();
    // Thread i of a pass takes 4 consecutive dimensions of one head (8 threads a 32-dimension block of xq:
    // the passes are warp-uniform, xq_put4 shuffles).
    constexpr int kQuads = HD / 4;
    for (int i0 = 0; i0 < gh * kQuads; i0 += kThreads) {
        const int i = i0 + static_cast<int>(threadIdx.x);
        const bool valid = i < gh * kQuads;  // the same for each group of 8 (kQuads is a multiple of 8)
        const int r = valid ? i / kQuads : 0, d = 4 * (i % kQuads);
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) M = fmaxf(M, mm[w * 16 + r]);
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f}, sum = 0.0f;
#pragma unroll
        for (int w = 0; w < kWarps; ++w) {
            const float mw = mm[w * 16 + r];
            const float wt = mw == -INFINITY ? 0.0f : exp2f(mw - M);  // a warp without keys adds nothing
            const float4 ow = *reinterpret_cast<const float4*>(mo + (w * 16 + r) * MS + d);
            acc[0] += wt * ow.x;
            acc[1] += wt * ow.y;
            acc[2] += wt * ow.z;
            acc[3] += wt * ow.w;
            sum += wt * ml[w * 16 + r];
        }
        const int64_t h = hq0 + r;
        if (n_split == 1) {  // block-uniform
            const float4 v = make_float4(acc[0] / sum, acc[1] / sum, acc[2] / sum, acc[3] / sum);
            store_out4(v, out, out16, xq, row * q_dim + h * HD + d, h * HD + d, q_dim, valid, xq_row0 + row, xq_rows);
        } else if (valid) {
            float* dst = part + (row * (q_dim / HD) * gridDim.y + h * n_split + s) * part_stride<HD>();
            *reinterpret_cast<float4*>(dst + d) = make_float4(acc[0], acc[1], acc[2], acc[3]);
            if (d == 0) {
                dst[HD] = M;
                dst[HD + 1] = sum;
            }
        }
    }
}

// The combine kernel, launched after attn_decode_mma_kernel where a row has several chunks: merges the
// chunks of one query head (block h of row blockIdx.y): out = sum_s acc_s 2^(m_s - M) / sum_s l_s
// 2^(m_s - M), M the largest m_s (every chunk holds at least one key, so l_s > 0 and m_s is finite).
// 16 warps; warp w takes chunks w, w + 16, ..., kCombineBatch of them at a time with every load
// of a batch (each chunk's m and l, and lane j's float4 of dimensions 4j .. 4j + 3) issued before any is
// used, and merges them online (a running maximum, the sums so far rescaled by 2^(M_old - M_new)); warp 0
// then merges the 16 warps' (M, l, acc) through shared memory and writes the output, its f16 copy and its
// int8 form (as the decode kernel does for rows of one chunk). Up to 64 chunks (the 7B's split at 8,192
// keys) that is one memory latency and one barrier; the three-pass form before it (the largest m_s, the
// weights, the weighted sum, a barrier after each, 4 loads in flight a lane) was 2.6% slower at tg128 @
// d8192 on the 7B (docs/perf.md, 2026-12-06, eighteenth session).
constexpr int kCombineThreads = 512, kCombineWarps = kCombineThreads / 32, kCombineBatch = 4;
__device__ __forceinline__ float4 f4_scale_add(float4 acc, float4 p, float w) {
    return make_float4(fmaf(p.x, w, acc.x), fmaf(p.y, w, acc.y), fmaf(p.z, w, acc.z), fmaf(p.w, w, acc.w));
}
template <int HD>
__global__ __launch_bounds__(kCombineThreads) void attn_combine_kernel(const float* __restrict__ part, float* __restrict__ out,
                                                                      int n_split, const int32_t* __restrict__ pos_dev,
                                                                      __half* __restrict__ out16, uint8_t* __restrict__ xq, int xq_row0,
                                                                      int xq_rows) {
    static_assert(HD % 32 == 0 && HD <= 128, "a lane takes 4 dimensions of one warp's 32 lanes");
    pdl_enter<kEarlyCombine>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    constexpr int stride = part_stride<HD>();
    const int row = static_cast<int>(blockIdx.y), h = static_cast<int>(blockIdx.x), n_head = static_cast<int>(gridDim.x);
    const int64_t q_dim = int64_t{n_head} * HD;
    part += int64_t{row} * n_head * n_split * stride;  // rows of the launch: n_split (the most chunks) a head
    if (pos_dev) {  // this length's split may have fewer chunks
        n_split = decode_split_for(pos_dev[row] + 1, n_split).n_split;
        if (n_split == 1) return;  // the decode kernel wrote the output
    }
    const int warp = static_cast<int>(threadIdx.x) / 32, lane = static_cast<int>(threadIdx.x) % 32;
    const float* ph = part + int64_t{h} * n_split * stride;
    const bool mine = 4 * lane < HD;
    __shared__ float4 wacc[kCombineWarps][HD / 4];
    __shared__ float wm[kCombineWarps], wl[kCombineWarps];
    float M = -INFINITY, l_sum = 0.0f;
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int base = warp; base < n_split; base += kCombineWarps * kCombineBatch) {  // chunk `base` exists: bm is finite
        float m[kCombineBatch], l[kCombineBatch];
        float4 p[kCombineBatch];
#pragma unroll
        for (int k = 0; k < kCombineBatch; ++k) {
            const int s = base + k * kCombineWarps;
            const bool in = s < n_split;
            m[k] = in ? ph[s * stride + HD] : -INFINITY;
            l[k] = in ? ph[s * stride + HD + 1] : 0.0f;
            p[k] = in && mine ? *reinterpret_cast<const float4*>(ph + s * stride + 4 * lane) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        }
        float bm = M;
#pragma unroll
        for (int k = 0; k < kCombineBatch; ++k) bm = fmaxf(bm, m[k]);
        const float c = exp2f(M - bm);  // 0 on the first batch (M = -inf)
        l_sum *= c;
        acc = make_float4(acc.x * c, acc.y * c, acc.z * c, acc.w * c);
#pragma unroll
        for (int k = 0; k < kCombineBatch; ++k) {
            const float w = exp2f(m[k] - bm);  // 0 past the last chunk
            l_sum = fmaf(l[k], w, l_sum);
            acc = f4_scale_add(acc, p[k], w);
        }
        M = bm;
    }
    if (lane == 0) wm[warp] = M, wl[warp] = l_sum;  // M = -inf, l_sum = 0 for a warp without chunks
    if (mine) wacc[warp][lane] = acc;
    __syncthreads();
    if (warp != 0) return;
    float Mg = -INFINITY, total = 0.0f;
    for (int w = 0; w < kCombineWarps; ++w) Mg = fmaxf(Mg, wm[w]);  // finite: warp 0 holds chunk 0
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int w = 0; w < kCombineWarps; ++w) {
        const float f = exp2f(wm[w] - Mg);
        total = fmaf(wl[w], f, total);
        if (mine) v = f4_scale_add(v, wacc[w][lane], f);
    }
    const float inv = 1.0f / total;
    v = make_float4(v.x * inv, v.y * inv, v.z * inv, v.w * inv);  // zeros where !mine
    const int64_t col = int64_t{h} * HD + 4 * lane;
    store_out4(v, out, out16, xq, row * q_dim + col, col, q_dim, mine, xq_row0 + row, xq_rows);
}

}  // namespace minfer::cuda::fa
