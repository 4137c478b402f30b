// Prefill attention on Hopper's warpgroup MMA (sm_90a): the flash attention of cuda/attention_mma.cuh
// (same inputs, same output, same online softmax in the log2 domain, same causal rule and paged KV), with
// both products on wgmma instead of mma.sync. cuda/attention.cu launches it on sm_90 GPUs where the
// sm_90a code was built, for prompts of more than 64 tokens; the mma.sync kernel stays the fallback
// everywhere else (and the one the CPU emulator checks).
//
// A CTA of kGroups warpgroups takes 64 * kGroups consecutive queries of one head, 64 per warpgroup, and
// walks the keys up to its last query's position in tiles of kKeys; the K and V tiles of the next key
// tile are copied by cp.async while the current one is used (two stages). Shared tiles are 128-byte
// swizzled (cuda/wgmma.cuh): Q, K and V rows are split into column chunks of 64 dims, each chunk a tile of
// 128-byte rows. Per key tile, a warpgroup
//  1. computes S[64][kKeys] = Q K^T with wgmma from shared memory (Q and K both K-major: a K-cache row is a
//     row of K^T's transpose), HD / 16 instructions,
//  2. masks the keys past each row's position (only where the tile reaches past the warp's first query),
//     updates each row's maximum and sum and rescales the output accumulators (the rows of a lane are
//     those of the mma.sync layout: g and g + 8 of its warp's 16),
//  3. rounds P to f16 into A fragments in registers and adds P V with wgmma, V read MN-major (a V-cache
//     row holds one key's dims: n contiguous; the trans-b form of the instruction).
// The warpgroup waits for each product before using it (no overlap of softmax and MMAs inside a group;
// the groups of a CTA and the two CTAs of an SM overlap each other's). The overlapped schedule of
// FlashAttention 3 (S_j issued together with P_{j-1} V_{j-1}, the softmax of S_j while the latter runs)
// was written and measured: it needs about 151 registers, so one CTA an SM, and lost to this one at every
// length (docs/perf.md, 2026-12-04, fourth session). Knobs (docs/perf.md has their
// A/B): MINFER_FAW_KEYS (64; 128 needs 186 registers, so one CTA an SM), MINFER_FAW_GROUPS (2; 3 measured
// slower), MINFER_FAW_MIN_BLOCKS (2), MINFER_FAW_EX2_FTZ (1) and MINFER_FAW_RESCALE_TAU (below).
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA; cp.async, pack_f16x2, the dynamic shared memory
#include "cuda/attention_mma.cuh"  // fa::prefill_cta
#include "cuda/kv_map.cuh"
#include "cuda/wgmma.cuh"

namespace minfer::cuda::faw {

#ifndef MINFER_FAW_KEYS
#define MINFER_FAW_KEYS 64
#endif
#ifndef MINFER_FAW_GROUPS
#define MINFER_FAW_GROUPS 2
#endif
// Two CTAs an SM (128 registers a thread: the head_dim-128 kernel fits them without spilling, at exactly
// 128, so an edit that needs more spills under this bound: check `-Xptxas -v`; its 97 KiB of shared memory
// twice): the warpgroups of one CTA wait at its barriers, those of the other run meanwhile. Measured
// against 1: 0.105 against 0.131 ms at 2,048 tokens of the 7B's shape (docs/perf.md). 128-key tiles or a
// third warpgroup fit one CTA an SM only (registers and shared memory), so they default to 1.
#ifndef MINFER_FAW_MIN_BLOCKS
#define MINFER_FAW_MIN_BLOCKS (MINFER_FAW_KEYS == 64 && MINFER_FAW_GROUPS <= 2 ? 2 : 1)
#endif
// The softmax's exponentials as the bare ex2.approx.ftz (one MUFU instruction; results below 2^-126
// flush to zero, nothing a softmax weight of f16 P could hold) instead of exp2f's non-ftz form, whose
// subnormal handling adds a compare and two predicated multiplies around each of a tile's 32 a thread.
#ifndef MINFER_FAW_EX2_FTZ
#define MINFER_FAW_EX2_FTZ 1
#endif
// Lazy rescaling (as FlashAttention 4 does): a warp keeps a row's running maximum while no row of the warp
// sees it grow by more than tau (log2 units), so the multiplies that rescale the row's output accumulators
// and sum run only on the tiles where the maximum jumps; in between, P = exp2(S - m) with a stale m is at
// most 2^tau (f16 holds it with the same relative precision) and the output and the sum carry the same
// stale scale, which the final division cancels. MINFER_FAW_RESCALE_TAU sets tau for both head sizes (0:
// rescale at every tile); by default (-1) head_dim 64 takes 8 and head_dim 128 takes 0: at 128 the branch
// makes the kernel spill at its 128 registers and measured slower (docs/perf.md, 2026-12-04, fifth session).
#ifndef MINFER_FAW_RESCALE_TAU
#define MINFER_FAW_RESCALE_TAU -1
#endif
static_assert(MINFER_FAW_KEYS == 64 || MINFER_FAW_KEYS == 128, "key tiles of 64 or 128");
static_assert(MINFER_FAW_RESCALE_TAU >= -1 && MINFER_FAW_RESCALE_TAU <= 10, "P up to 2^10 in f16 at most");
template <int HD>
constexpr int rescale_tau() {
    return MINFER_FAW_RESCALE_TAU >= 0 ? MINFER_FAW_RESCALE_TAU : HD == 64 ? 8 : 0;
}
static_assert(MINFER_FAW_GROUPS >= 1 && MINFER_FAW_GROUPS <= 4, "1 to 4 warpgroups a CTA");
constexpr int kKeys = MINFER_FAW_KEYS, kGroups = MINFER_FAW_GROUPS;
constexpr int kThreads = 128 * kGroups, kRows = 64 * kGroups;
constexpr unsigned kAll = 0xffffffffu;

__device__ __forceinline__ float ex2(float x) {
#if MINFER_FAW_EX2_FTZ
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return exp2f(x);
#endif
}

// Bytes of the Q tile and of one K or V tile; dynamic shared memory with room to align to 1024.
template <int HD>
constexpr int q_bytes() {
    return kRows * HD * 2;
}
template <int HD>
constexpr int tile_bytes() {
    return kKeys * HD * 2;
}
template <int HD>
constexpr int smem_bytes() {
    return q_bytes<HD>() + 4 * tile_bytes<HD>() + 1024;
}
inline int64_t grid_size(int n, int n_head) { return int64_t{(n + kRows - 1) / kRows} * n_head; }

// Arguments as attn_prefill_mma_kernel's: q [n][n_head * HD] f32 (or q16), kc / vc one layer's cache (rows
// kv_row(kv, 0, position), kv_dim = n_head_kv * HD), out like q or, given out16, out16 instead (f16);
// qscale = log2(e) / sqrt(HD).
template <int HD>
__global__ __launch_bounds__(kThreads, MINFER_FAW_MIN_BLOCKS) void attn_prefill_wg_kernel(const float* q, const __half* q16,
                                                                                           const __half* kc,
                                                                                           const __half* vc, float* out,
                                                                                           __half* out16, int n, int pos0,
                                                                                           int n_head, int group, int kv_dim,
                                                                                           float qscale, KvMap kv) {
#if MINFER_WGMMA_BUILT
    static_assert(HD == 64 || HD == 128, "head_dim 64 or 128");
    constexpr int kQChunk = kRows * 128, kTChunk = kKeys * 128;  // bytes of a 64-dim column chunk of Q, of a tile
    const int tid = static_cast<int>(threadIdx.x), grp = tid / 128, warp = (tid / 32) % 4, lane = tid % 32;
    const int g = lane >> 2, t = lane & 3;
    const fa::PrefillCta cta = fa::prefill_cta(kRows, n, pos0, n_head, group);
    const int h = cta.h, kvh = cta.kvh, t0 = cta.t0, last = cta.last;
    const int64_t q_dim = int64_t{n_head} * HD;

    const uint32_t s0 = static_cast<uint32_t>(__cvta_generic_to_shared(mv::mv_smem));
    const uint32_t sbase = (s0 + 1023u) & ~1023u;
    uint8_t* const sptr = mv::mv_smem + (sbase - s0);
    auto k_at = [](int st) { return static_cast<uint32_t>(q_bytes<HD>() + 2 * st * tile_bytes<HD>()); };  // from sbase
    auto v_at = [](int st) { return static_cast<uint32_t>(q_bytes<HD>() + (2 * st + 1) * tile_bytes<HD>()); };

    // Key tile j into stage j & 1: 16-byte pieces, consecutive threads along a row. Keys past `last` repeat
    // its row (finite; masked for every stored query).
    auto load_tile = [&](int j) {
        const uint32_t kd = sbase + k_at(j & 1), vd = sbase + v_at(j & 1);
        for (int i = tid; i < kKeys * (HD / 8); i += kThreads) {
            const int r = i / (HD / 8), c = i % (HD / 8);
            const int64_t src = kv_row(kv, 0, min(j * kKeys + r, last)) * kv_dim + int64_t{kvh} * HD + c * 8;
            const uint32_t at = static_cast<uint32_t>((c / 8) * kTChunk) + wg::sw128(r, c % 8);
            mv::cp_async16<0>(kd + at, kc + src, 16);
            mv::cp_async16<0>(vd + at, vc + src, 16);
        }
        mv::cp_async_commit();
    };
    const int key_tiles = last / kKeys + 1;

    const int row0 = t0 + 64 * grp;                       // the group's first query
    const bool active = row0 < n;                         // the group has a query to answer
    const int group_last = pos0 + min(n, row0 + 64) - 1;  // its last query's position
    const int first_pos = pos0 + row0 + 16 * warp;        // the warp's first query position
    float o[HD / 2];  // O[64][HD] of the group: o[4i + e] is row 16 warp + g + 8 (e >> 1), dim 8i + 2t + (e & 1)
    #pragma unroll
    for (auto& x : o) x = 0.0f;
    float m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};  // rows g and g + 8

    // S[64][kKeys] = Q K^T of key tile j (issued, not waited for): s[4i + e] is row 16 warp + g + 8 (e >> 1),
    // key 8i + 2t + (e & 1) of the tile.
    auto qk = [&](float (&s)[kKeys / 2], int j) {
        #pragma unroll
        for (int kk = 0; kk < HD / 16; ++kk) {
            const uint32_t col = static_cast<uint32_t>(32 * (kk % 4));  // k-step kk within its 64-dim chunk
            wg::mma_ss<kKeys>(s, wg::desc_k(sbase + static_cast<uint32_t>((kk / 4) * kQChunk + grp * 64 * 128) + col),
                              wg::desc_k(sbase + k_at(j & 1) + static_cast<uint32_t>((kk / 4) * kTChunk) + col), kk > 0);
        }
    };
    // The online softmax of tile j's scores (in place: s becomes exp2(s - m)), each row's output and sum
    // accumulated so far rescaled where its maximum moves (by more than rescale_tau: a warp-uniform
    // choice, taken by every lane holding the row alike).
    auto softmax = [&](float (&s)[kKeys / 2], int j) {
        const int k0 = j * kKeys;
        if (k0 + kKeys - 1 > first_pos) {  // the causal diagonal crosses the warp's rows in this tile
            #pragma unroll
            for (int i = 0; i < kKeys / 8; ++i)
                #pragma unroll
                for (int e = 0; e < 4; ++e)
                    if (k0 + 8 * i + 2 * t + (e & 1) > first_pos + g + 8 * (e >> 1)) s[4 * i + e] = -INFINITY;
        }
        #pragma unroll
        for (int r = 0; r < 2; ++r) {
            float mx = m[r];
            #pragma unroll
            for (int i = 0; i < kKeys / 8; ++i) mx = fmaxf(mx, fmaxf(s[4 * i + 2 * r], s[4 * i + 2 * r + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 1));
            mx = fmaxf(mx, __shfl_xor_sync(kAll, mx, 2));
            // A row with no key yet (m = -inf) moves as soon as it has one (-inf + tau stays -inf).
            constexpr int kTau = rescale_tau<HD>();
            if (kTau == 0 || __any_sync(kAll, mx > m[r] + kTau)) {
                const float alpha = ex2(m[r] - (mx == -INFINITY ? 0.0f : mx));
                m[r] = mx;
                l[r] *= alpha;
                #pragma unroll
                for (int i = 0; i < HD / 8; ++i) {
                    o[4 * i + 2 * r] *= alpha;
                    o[4 * i + 2 * r + 1] *= alpha;
                }
            }
            const float base = m[r] == -INFINITY ? 0.0f : m[r];  // a row with no key yet keeps zeros
            float sum = 0.0f;
            #pragma unroll
            for (int i = 0; i < kKeys / 8; ++i) {
                s[4 * i + 2 * r] = ex2(s[4 * i + 2 * r] - base);
                s[4 * i + 2 * r + 1] = ex2(s[4 * i + 2 * r + 1] - base);
                sum += s[4 * i + 2 * r] + s[4 * i + 2 * r + 1];
            }
            l[r] += sum;
        }
    };
    // P as f16 A fragments: keys 16kk .. 16kk + 15 are accumulator tiles 2kk (a0, a1) and 2kk + 1 (a2, a3).
    auto pack = [](uint32_t (&pa)[kKeys / 16][4], const float (&s)[kKeys / 2]) {
        #pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk) {
            pa[kk][0] = mv::pack_f16x2(s[8 * kk + 0], s[8 * kk + 1]);
            pa[kk][1] = mv::pack_f16x2(s[8 * kk + 2], s[8 * kk + 3]);
            pa[kk][2] = mv::pack_f16x2(s[8 * kk + 4], s[8 * kk + 5]);
            pa[kk][3] = mv::pack_f16x2(s[8 * kk + 6], s[8 * kk + 7]);
        }
    };
    // O += P V of the V tile in stage st (issued, not waited for): keys 16kk .. are two 8-key groups, 2048 bytes.
    auto pv = [&](const uint32_t (&pa)[kKeys / 16][4], int st) {
        #pragma unroll
        for (int kk = 0; kk < kKeys / 16; ++kk)
            wg::mma_rs_mn<HD>(o, pa[kk], wg::desc(sbase + v_at(st) + static_cast<uint32_t>(kk * 2048), kTChunk, 1024));
    };

    load_tile(0);

    // Q rows of the CTA, scaled, as f16 (rows past n: zeros), 8 bytes a thread at a time (fa::q_f16x4).
    for (int i = tid; i < kRows * (HD / 4); i += kThreads) {
        const int r = i / (HD / 4), d = 4 * (i % (HD / 4));
        const uint32_t at = static_cast<uint32_t>((d / 64) * kQChunk) + wg::sw128(r, (d % 64) / 8) + static_cast<uint32_t>((d % 8) * 2);
        *reinterpret_cast<uint2*>(sptr + at) = fa::q_f16x4(q, q16, t0 + r < n, (t0 + r) * q_dim + int64_t{h} * HD + d, qscale);
    }

    for (int j = 0; j < key_tiles; ++j) {
        if (j + 1 < key_tiles) {
            load_tile(j + 1);
            mv::cp_async_wait<1>();
        } else {
            mv::cp_async_wait<0>();
        }
        // This thread's copies (and the Q stores, before the first tile) to the tensor cores' reads, then
        // every thread's. Stage (j + 1) & 1 was last read by the products of tile j - 1, waited for below.
        wg::fence_async_smem();
        __syncthreads();
        if (active && j * kKeys <= group_last) {  // warpgroup-uniform: some row of the group sees a key of the tile
            float s[kKeys / 2];
            uint32_t pa[kKeys / 16][4];
            wg::fence();
            qk(s, j);
            wg::commit();
            wg::wait<0>();
            wg::fence_regs(s);
            softmax(s, j);
            pack(pa, s);
            #pragma unroll
            for (auto& a : pa) wg::fence_regs(a);
            wg::fence_regs(o);
            wg::fence();
            pv(pa, j & 1);
            wg::commit();
            wg::wait<0>();
            wg::fence_regs(o);
        }
        __syncthreads();  // stage j & 1 is free for tile j + 2
    }

    #pragma unroll
    for (int r = 0; r < 2; ++r) {
        float sum = l[r];
        sum += __shfl_xor_sync(kAll, sum, 1);
        sum += __shfl_xor_sync(kAll, sum, 2);
        const int tq = row0 + 16 * warp + g + 8 * r;
        if (!active || tq >= n) continue;
        const float inv = 1.0f / sum;
        const int64_t at = tq * q_dim + int64_t{h} * HD + 2 * t;
        #pragma unroll
        for (int i = 0; i < HD / 8; ++i) {
            if (out16)
                *reinterpret_cast<uint32_t*>(out16 + at + 8 * i) = mv::pack_f16x2(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
            else
                *reinterpret_cast<float2*>(out + at + 8 * i) = make_float2(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
        }
    }
#else
    __trap();  // never launched: cuda/attention.cu takes this kernel only where the sm_90a code runs
#endif
}

}  // namespace minfer::cuda::faw
