// The attention kernels of the forward pass and their launchers: for prefill (two or more queries) the
// tensor-core flash attention of cuda/attention_mma.cuh; for decode a split-K flash-decoding kernel (one
// block per KV head and key chunk, all query heads of the group) with a combine kernel. Checked against
// the CPU backend and a float64 reference in tests/test_cuda.cpp (the prefill kernel also on the CPU, by
// the emulator: tests/test_attention_emu.cpp).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "cuda/attention_mma.cuh"
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace minfer::cuda {
namespace {

// ---- prefill: the tensor-core kernel of cuda/attention_mma.cuh ------------------------------------------
// Row tiles of 16 queries per warp: MINFER_FA_MTILES (2: CTAs of 128 queries, each K and V fragment read
// from shared memory once for 32 rows) for long prompts where the device's shared memory allows it; one
// (CTAs of 64) for chunks of at most 64 tokens, where a second row tile would mostly compute rows past the
// chunk (a few-token chunk: half the work), and on GPUs with 99 KiB per block.
#ifndef MINFER_FA_MTILES
#define MINFER_FA_MTILES 2
#endif
static_assert(MINFER_FA_MTILES == 1 || MINFER_FA_MTILES == 2, "prefill attention: 1 or 2 row tiles per warp");

// True when the kernel's shared memory fits a CTA of this device (the two-tile head_dim-128 CTA takes
// 102 KiB: more than sm_86/sm_89/sm_120 allow, 99 KiB); the attribute is raised past the default 48 KiB.
template <int HD, int MT>
bool prefill_fits() {
    static const bool fits = [] {
        int dev = 0, optin = 0;
        check(cudaGetDevice(&dev), "cudaGetDevice");
        check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "cudaDeviceGetAttribute");
        if (fa::smem_bytes<HD, MT>() > optin) return false;
        check(cudaFuncSetAttribute(fa::attn_prefill_mma_kernel<HD, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   fa::smem_bytes<HD, MT>()),
              "prefill attention shared memory");
        return true;
    }();
    return fits;
}

template <int HD, int MT>
void launch_prefill_mt(const float* q, const __half* kc, const __half* vc, float* out, int n, int pos0, int n_head, int group,
                       int kv_dim, float qscale, cudaStream_t stream, const KvMap& kv) {
    constexpr int smem = fa::smem_bytes<HD, MT>();
    if (!prefill_fits<HD, MT>())
        fail(MINFER_ERR_UNSUPPORTED,
             "CUDA prefill attention: head_dim %d needs %d bytes of shared memory per block, more than this GPU allows", HD, smem);
    const auto grid = static_cast<unsigned>(fa::grid_size<MT>(n, n_head));
    fa::attn_prefill_mma_kernel<HD, MT><<<grid, fa::kThreads, smem, stream>>>(q, kc, vc, out, n, pos0, n_head, group, kv_dim, qscale, kv);
    check_launch("attention (prefill)");
}

template <int HD>
void launch_prefill(const float* q, const __half* kc, const __half* vc, float* out, int n, int pos0, int n_head, int group,
                    int kv_dim, float qscale, cudaStream_t stream, const KvMap& kv) {
    if (reinterpret_cast<uintptr_t>(q) % 16 != 0)  // q is read in 16-byte pieces
        fail(MINFER_ERR_INTERNAL, "CUDA prefill attention: q is not 16-byte aligned");
    if (n > fa::rows_per_cta<1>() && prefill_fits<HD, MINFER_FA_MTILES>())
        launch_prefill_mt<HD, MINFER_FA_MTILES>(q, kc, vc, out, n, pos0, n_head, group, kv_dim, qscale, stream, kv);
    else
        launch_prefill_mt<HD, 1>(q, kc, vc, out, n, pos0, n_head, group, kv_dim, qscale, stream, kv);
}

// ---- decode: split-K flash-decoding -------------------------------------------------------------------
// One query token (position L - 1) against the keys 0 .. L-1, cut into n_split chunks of `chunk` keys.
// Block (kvh, s, z) takes chunk s of KV head kvh for the query heads of its group (up to 16: heads
// 16z .. 16z + 15 of the group; z > 0 only for groups larger than 16), so each K and V row of the chunk
// is read from memory once for the whole group instead of once per query head.
//
// The block's 4 warps walk the chunk in tiles of 32 keys. A tile's K and V rows are copied to shared
// memory with cp.async in 16-byte pieces, consecutive threads taking consecutive pieces of a row (a warp
// copies 512 contiguous bytes per instruction for head_dim 128: two whole K rows), in two stages: tile
// t + 1 is in flight while tile t is used. Warp w owns the block's query heads w, w + 4, w + 8, w + 12
// (those that exist). For each of them, lane j scores key j of the tile (the K row from shared memory,
// padded so the 32 lanes' 16-byte reads hit distinct banks; q broadcast from shared memory), the warp
// updates the head's online softmax (running max m, running sum l of exp2(score - m), the output rescaled
// when m grows) and accumulates P·V, lane owning head_dim / 32 consecutive output dimensions and reading
// them from each staged V row. q is pre-multiplied by scale * log2(e): scores are in the log2 domain and
// exp2f is the exponential. With one chunk the block writes the normalized output; otherwise it writes
// (unnormalized output, m, l) per (head, chunk) to `part` and attn_combine_kernel merges the chunks.
constexpr int kDecodeThreads = 128, kDecodeTile = 32, kDecodeMaxHeads = 16;

// Decode split: about MINFER_ATTN_BLOCKS_PER_SM blocks per SM over all KV heads (few enough to be
// resident at once, so every block issues its first tile immediately), chunks of at least
// MINFER_ATTN_MIN_CHUNK keys and a multiple of the tile (fa::decode_split_for). A short context takes one
// chunk (no combine).
#ifndef MINFER_ATTN_BLOCKS_PER_SM
#define MINFER_ATTN_BLOCKS_PER_SM 4
#endif
static_assert(MINFER_ATTN_BLOCKS_PER_SM >= 1, "decode split tunable");
static_assert(fa::kChunkAlign % kDecodeTile == 0, "chunks of whole tiles");
using fa::decode_split_for;
using fa::DecodeSplit;
// -DMINFER_ATTN_DEC_MMA=0: the CUDA-core decode kernel below instead of the tensor-core one of
// cuda/attention_mma.cuh (the A/B knob).
#ifndef MINFER_ATTN_DEC_MMA
#define MINFER_ATTN_DEC_MMA 1
#endif

__device__ __forceinline__ float2 half2_bits_to_float2(uint32_t w) {
    __half2 h;
    memcpy(&h, &w, sizeof h);
    return __half22float2(h);
}

template <int N>
__device__ __forceinline__ void load_halves(const __half* p, float* out);
template <>
__device__ __forceinline__ void load_halves<2>(const __half* p, float* out) {
    const float2 a = half2_bits_to_float2(*reinterpret_cast<const uint32_t*>(p));
    out[0] = a.x, out[1] = a.y;
}
template <>
__device__ __forceinline__ void load_halves<4>(const __half* p, float* out) {
    const uint2 w = *reinterpret_cast<const uint2*>(p);
    const float2 a = half2_bits_to_float2(w.x), b = half2_bits_to_float2(w.y);
    out[0] = a.x, out[1] = a.y, out[2] = b.x, out[3] = b.y;
}

__device__ __forceinline__ float component(const float4& v, int i) { return i == 0 ? v.x : i == 1 ? v.y : i == 2 ? v.z : v.w; }

template <int P, int HW>  // head_dim = 64 * P; HW: query heads per warp, 1 .. 4
__global__ __launch_bounds__(kDecodeThreads) void attn_decode_kernel(const float* __restrict__ q, const __half* __restrict__ kc,
                                                                     const __half* __restrict__ vc, float* __restrict__ part,
                                                                     float* __restrict__ out, int L, int group, int kv_dim,
                                                                     float qscale, int chunk, const int32_t* __restrict__ pos_dev,
                                                                     int zc, KvMap kv, __half* __restrict__ out16) {
    pdl_wait();  // launched as a programmatic dependent (cuda/pdl.cuh)
    pdl_launch_dependents();
    constexpr int HD = 64 * P, KT = kDecodeTile;
    constexpr int KS = HD + 8;   // K row stride in halves: 16 spare bytes, so the lanes' row reads spread over the banks
    constexpr int CPR = HD / 8;  // 16-byte pieces per row
    constexpr int VEC = HD / 32; // output dimensions per lane
    constexpr int PIECES = KT * CPR / kDecodeThreads;  // K pieces (and as many V pieces) each thread copies per tile
    static_assert(PIECES * kDecodeThreads == KT * CPR, "tile copy must split evenly");
    __shared__ __align__(16) __half ks[2][KT * KS];
    __shared__ __align__(16) __half vs[2][KT * HD];
    __shared__ __align__(16) float qs[4 * HW][HD];
    __shared__ __align__(16) float ps[4][HW][KT];  // per warp and head: the tile's probabilities

    // Row `row` of the launch (a query token of its own sequence), heads 16z .. of the group.
    const int kvh = blockIdx.x, s = blockIdx.y, row = static_cast<int>(blockIdx.z) / zc, z = static_cast<int>(blockIdx.z) % zc;
    const int64_t q_dim = static_cast<int64_t>(kv_dim) * group;
    q += row * q_dim;
    out += row * q_dim;
    if (out16) out16 += row * q_dim;
    part += row * q_dim / HD * gridDim.y * (HD + 2);
    int n_split = gridDim.y;
    if (pos_dev) {  // the launch covers the most chunks: find this length's split
        L = pos_dev[row] + 1;
        const DecodeSplit sp = decode_split_for(L, gridDim.y);
        chunk = sp.chunk;
        n_split = sp.n_split;
        if (s >= n_split) return;  // block-uniform
    }
    const int gh = min(group - z * kDecodeMaxHeads, kDecodeMaxHeads);  // heads of this block
    const int hq0 = kvh * group + z * kDecodeMaxHeads;                 // the first one
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int nh = warp < gh ? (gh - warp + 3) / 4 : 0;  // heads of this warp: hq0 + warp + 4k for k < nh
    const int p_begin = s * chunk, p_end = min(L, p_begin + chunk);
    const int n_tiles = (p_end - p_begin + KT - 1) / KT;
    const __half* kbase = kc + kvh * HD;
    const __half* vbase = vc + kvh * HD;

    auto load_tile = [&](int t, int st) {
        const int k0 = p_begin + t * KT;
#pragma unroll
        for (int i = 0; i < PIECES; ++i) {
            const int piece = threadIdx.x + i * kDecodeThreads, r = piece / CPR, c = piece % CPR, key = k0 + r;
            const bool ok = key < p_end;  // rows past the chunk are zero-filled, never read
            const int64_t off = (ok ? kv_row(kv, row, key) : 0) * kv_dim + c * 8;
            cp_async16(&ks[st][r * KS + c * 8], kbase + off, ok);
            cp_async16(&vs[st][r * HD + c * 8], vbase + off, ok);
        }
    };

    load_tile(0, 0);
    cp_async_commit();
    for (int i = threadIdx.x; i < gh * HD; i += kDecodeThreads)
        qs[i / HD][i % HD] = q[static_cast<int64_t>(hq0) * HD + i] * qscale;

    float m[HW], l[HW], acc[HW][VEC];
#pragma unroll
    for (int k = 0; k < HW; ++k) {
        m[k] = -INFINITY;
        l[k] = 0.0f;
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[k][e] = 0.0f;
    }

    for (int t = 0; t < n_tiles; ++t) {
        const int st = t & 1;
        if (t + 1 < n_tiles) load_tile(t + 1, st ^ 1);
        cp_async_commit();   // possibly an empty group: keeps the count of the wait below right
        cp_async_wait<1>();  // this thread's copies of tile t have landed
        __syncthreads();     // and everyone's (the first time also q)
        if (nh > 0) {        // warp-uniform
            // Scores: lane j against key k0 + j, for each head of the warp; the K row is read once.
            float dot[HW];
#pragma unroll
            for (int k = 0; k < HW; ++k) dot[k] = 0.0f;
            const __half* kr = &ks[st][lane * KS];
#pragma unroll
            for (int c = 0; c < CPR; ++c) {
                const uint4 w = *reinterpret_cast<const uint4*>(kr + c * 8);
                const float2 k01 = half2_bits_to_float2(w.x), k23 = half2_bits_to_float2(w.y);
                const float2 k45 = half2_bits_to_float2(w.z), k67 = half2_bits_to_float2(w.w);
#pragma unroll
                for (int k = 0; k < HW; ++k) {
                    if (k < nh) {
                        const float* qh = &qs[warp + 4 * k][c * 8];
                        const float4 a = *reinterpret_cast<const float4*>(qh), b = *reinterpret_cast<const float4*>(qh + 4);
                        float d = dot[k];
                        d = fmaf(a.x, k01.x, d);
                        d = fmaf(a.y, k01.y, d);
                        d = fmaf(a.z, k23.x, d);
                        d = fmaf(a.w, k23.y, d);
                        d = fmaf(b.x, k45.x, d);
                        d = fmaf(b.y, k45.y, d);
                        d = fmaf(b.z, k67.x, d);
                        d = fmaf(b.w, k67.y, d);
                        dot[k] = d;
                    }
                }
            }
            // Online softmax over the tile (it holds at least one key of the chunk, so m_new is finite).
            const bool valid = p_begin + t * KT + lane < p_end;
#pragma unroll
            for (int k = 0; k < HW; ++k) {
                if (k < nh) {
                    const float sc = valid ? dot[k] : -INFINITY;
                    const float m_new = fmaxf(m[k], warp_max(sc));
                    const float pr = exp2f(sc - m_new);     // 0 for keys past the chunk
                    const float alpha = exp2f(m[k] - m_new);  // 0 on the first tile (m = -inf)
                    l[k] = l[k] * alpha + warp_sum(pr);
                    m[k] = m_new;
#pragma unroll
                    for (int e = 0; e < VEC; ++e) acc[k][e] *= alpha;
                    ps[warp][k][lane] = pr;
                }
            }
            __syncwarp();
            // P·V: every V row of the tile (rows past the chunk are zeros with probability 0).
            const __half* vr = &vs[st][lane * VEC];
#pragma unroll
            for (int j = 0; j < KT; j += 4) {
                float4 pk[HW];
#pragma unroll
                for (int k = 0; k < HW; ++k)
                    if (k < nh) pk[k] = *reinterpret_cast<const float4*>(&ps[warp][k][j]);
#pragma unroll
                for (int jj = 0; jj < 4; ++jj) {
                    float v[VEC];
                    load_halves<VEC>(vr + (j + jj) * HD, v);
#pragma unroll
                    for (int k = 0; k < HW; ++k) {
                        if (k < nh) {
                            const float pj = component(pk[k], jj);
#pragma unroll
                            for (int e = 0; e < VEC; ++e) acc[k][e] = fmaf(pj, v[e], acc[k][e]);
                        }
                    }
                }
            }
        }
        __syncthreads();  // the stage is refilled by the next iteration's copy
    }

#pragma unroll
    for (int k = 0; k < HW; ++k) {
        if (k < nh) {
            const int64_t h = hq0 + warp + 4 * k;
            if (n_split == 1) {
                const float inv = 1.0f / l[k];
#pragma unroll
                for (int e = 0; e < VEC; ++e) {
                    const float o = acc[k][e] * inv;
                    out[h * HD + lane * VEC + e] = o;
                    if (out16) out16[h * HD + lane * VEC + e] = __float2half_rn(o);
                }
            } else {
                float* dst = part + (h * n_split + s) * (HD + 2);
#pragma unroll
                for (int e = 0; e < VEC; ++e) dst[lane * VEC + e] = acc[k][e];
                if (lane == 0) {
                    dst[HD] = m[k];
                    dst[HD + 1] = l[k];
                }
            }
        }
    }
}

// Merges the chunks of one query head (block h): out = sum_s acc_s 2^(m_s - M) / sum_s l_s 2^(m_s - M),
// M the largest m_s (every chunk holds at least one key, so l_s > 0 and m_s is finite). The weights
// 2^(m_s - M) go to shared memory: combine_weights(n_split) floats of dynamic shared memory, padded with
// zeros to whole 16-byte groups, because the compiled merge loop (unrolled by 4) reads its remainder of
// one to three weights as one access that can reach past weight[n_split - 1] (compute-sanitizer memcheck
// flagged it on the H200 with exactly n_split floats).
constexpr int kCombineThreads = 128;
__host__ __device__ constexpr int combine_weights(int n_split) { return (n_split + 3) / 4 * 4; }
__global__ __launch_bounds__(kCombineThreads) void attn_combine_kernel(const float* __restrict__ part, float* __restrict__ out,
                                                                      int n_split, int head_dim, const int32_t* __restrict__ pos_dev,
                                                                      __half* __restrict__ out16) {
    pdl_wait();  // launched as a programmatic dependent (cuda/pdl.cuh)
    pdl_launch_dependents();
    extern __shared__ float weight[];
    const int row = blockIdx.y;  // rows of the launch: consecutive [n_head] blocks of part and out
    part += static_cast<int64_t>(row) * gridDim.x * n_split * (head_dim + 2);
    out += static_cast<int64_t>(row) * gridDim.x * head_dim;
    if (out16) out16 += static_cast<int64_t>(row) * gridDim.x * head_dim;
    if (pos_dev) {  // n_split is the most chunks; this length's may be fewer
        n_split = decode_split_for(pos_dev[row] + 1, n_split).n_split;
        if (n_split == 1) return;  // the decode kernel wrote the output
    }
    __shared__ float red[kCombineThreads / 32];
    const int h = blockIdx.x, warp = threadIdx.x / 32, lane = threadIdx.x % 32, stride = head_dim + 2;
    const float* ph = part + static_cast<int64_t>(h) * n_split * stride;

    float mx = -INFINITY;
    for (int s = threadIdx.x; s < n_split; s += kCombineThreads) mx = fmaxf(mx, ph[s * stride + head_dim]);
    mx = warp_max(mx);
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    float M = red[0];
    for (int w = 1; w < kCombineThreads / 32; ++w) M = fmaxf(M, red[w]);
    __syncthreads();  // red is reused below

    float sum = 0.0f;
    for (int s = threadIdx.x; s < combine_weights(n_split); s += kCombineThreads) {
        const float w = s < n_split ? exp2f(ph[s * stride + head_dim] - M) : 0.0f;
        weight[s] = w;
        if (s < n_split) sum += ph[s * stride + head_dim + 1] * w;
    }
    sum = warp_sum(sum);
    if (lane == 0) red[warp] = sum;
    __syncthreads();  // also publishes weight[]
    float total = 0.0f;
    for (int w = 0; w < kCombineThreads / 32; ++w) total += red[w];
    const float inv = 1.0f / total;
    for (int d = threadIdx.x; d < head_dim; d += kCombineThreads) {
        float v = 0.0f;
        for (int s = 0; s < n_split; ++s) v = fmaf(ph[s * stride + d], weight[s], v);
        out[static_cast<int64_t>(h) * head_dim + d] = v * inv;
        if (out16) out16[static_cast<int64_t>(h) * head_dim + d] = __float2half_rn(v * inv);
    }
}

// The most chunks any context length gets in a decode launch of `rows` rows over n_head_kv KV heads:
// the rows and heads share the SMs' blocks.
int decode_max_splits(int n_head_kv, int rows) {
    const int target = MINFER_ATTN_BLOCKS_PER_SM * sm_count();
    const int blocks = n_head_kv * rows;
    return std::max(1, (target + blocks - 1) / blocks);
}

// With pos_dev the grid covers max_splits chunks and the kernels find each row's split on the device.
template <int P, int HW>
void launch_decode(const float* q, const __half* kc, const __half* vc, float* part, float* out, int L, int rows, int n_head,
                   int n_head_kv, float qscale, cudaStream_t stream, const int32_t* pos_dev, const KvMap& kv, __half* out16) {
    const int group = n_head / n_head_kv;
    const int max_splits = decode_max_splits(n_head_kv, rows);
    const DecodeSplit sp = pos_dev ? DecodeSplit{0, max_splits} : decode_split_for(L, max_splits);
    const int zc = (group + kDecodeMaxHeads - 1) / kDecodeMaxHeads;
    const dim3 grid(static_cast<unsigned>(n_head_kv), static_cast<unsigned>(sp.n_split), static_cast<unsigned>(zc * rows));
    if (MINFER_ATTN_DEC_MMA)
        check(launch_pdl(fa::attn_decode_mma_kernel<64 * P>, grid, dim3(fa::kThreads), static_cast<size_t>(fa::dec_smem_bytes<64 * P>()),
                         stream, q, kc, vc, part, out, L, group, n_head_kv * 64 * P, qscale, sp.chunk, pos_dev, zc, kv, out16),
              "attention (decode)");
    else
        check(launch_pdl(attn_decode_kernel<P, HW>, grid, dim3(kDecodeThreads), 0, stream, q, kc, vc, part, out, L, group,
                         n_head_kv * 64 * P, qscale, sp.chunk, pos_dev, zc, kv, out16),
              "attention (decode)");
    if (sp.n_split > 1) {
        const size_t weight_bytes = combine_weights(sp.n_split) * sizeof(float);
        check(launch_pdl(attn_combine_kernel, dim3(n_head, rows), dim3(kCombineThreads), weight_bytes, stream, part, out, sp.n_split,
                         64 * P, pos_dev, out16),
              "attention (combine)");
    }
}

template <int P>
void launch_decode_heads(const float* q, const __half* kc, const __half* vc, float* part, float* out, int L, int rows, int n_head,
                         int n_head_kv, float qscale, cudaStream_t stream, const int32_t* pos_dev, const KvMap& kv,
                         __half* out16 = nullptr) {
    switch ((std::min(n_head / n_head_kv, kDecodeMaxHeads) + 3) / 4) {  // query heads per warp
        case 1: launch_decode<P, 1>(q, kc, vc, part, out, L, rows, n_head, n_head_kv, qscale, stream, pos_dev, kv, out16); break;
        case 2: launch_decode<P, 2>(q, kc, vc, part, out, L, rows, n_head, n_head_kv, qscale, stream, pos_dev, kv, out16); break;
        case 3: launch_decode<P, 3>(q, kc, vc, part, out, L, rows, n_head, n_head_kv, qscale, stream, pos_dev, kv, out16); break;
        default: launch_decode<P, 4>(q, kc, vc, part, out, L, rows, n_head, n_head_kv, qscale, stream, pos_dev, kv, out16); break;
    }
}

void check_attention_args(const __half* k_cache, const __half* v_cache, int n_head, int n_head_kv) {
    if (n_head_kv < 1 || n_head % n_head_kv != 0)
        fail(MINFER_ERR_INTERNAL, "CUDA attention: %d query heads over %d KV heads", n_head, n_head_kv);
    // The kernels copy 16-byte pieces of the cache rows (a row of a KV head is head_dim * 2 bytes).
    if ((reinterpret_cast<uintptr_t>(k_cache) | reinterpret_cast<uintptr_t>(v_cache)) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "CUDA attention: the KV cache is not 16-byte aligned");
}

// scale * log2(e): the kernels work in the log2 domain (exp2).
float log2_qscale(int head_dim) {
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    return static_cast<float>(static_cast<double>(scale) * 1.4426950408889634);
}

}  // namespace

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

int64_t attention_partial_floats(int n_head, int n_head_kv, int head_dim, int max_rows) {
    int64_t most = 0;
    for (int rows = 1; rows <= max_rows; ++rows)
        most = std::max(most, int64_t{rows} * n_head * decode_max_splits(n_head_kv, rows) * (head_dim + 2));
    return most;
}

void attention(const float* q, const __half* k_cache, const __half* v_cache, float* out, int n, int pos0, int n_head,
               int n_head_kv, int head_dim, float* partial, cudaStream_t stream, const int32_t* pos_dev, const KvMap& kv) {
    check_attention_args(k_cache, v_cache, n_head, n_head_kv);
    const int group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim;
    auto run = [&](auto p_tag) {
        constexpr int P = decltype(p_tag)::value;
        if (n == 1) {
            launch_decode_heads<P>(q, k_cache, v_cache, partial, out, pos0 + 1, 1, n_head, n_head_kv, log2_qscale(head_dim), stream,
                                   pos_dev, kv);
        } else {
            launch_prefill<64 * P>(q, k_cache, v_cache, out, n, pos0, n_head, group, kv_dim, log2_qscale(head_dim), stream, kv);
        }
    };
    switch (head_dim) {
        case 64: run(std::integral_constant<int, 1>{}); break;
        case 128: run(std::integral_constant<int, 2>{}); break;
        default: fail(MINFER_ERR_UNSUPPORTED, "CUDA attention: head_dim %d (64 and 128 are supported)", head_dim);
    }
}

void attention_decode_rows(const float* q, const __half* k_cache, const __half* v_cache, float* out, int rows, const int32_t* pos_dev,
                           int n_head, int n_head_kv, int head_dim, float* partial, cudaStream_t stream, const KvMap& kv,
                           __half* out16) {
    check_attention_args(k_cache, v_cache, n_head, n_head_kv);
    if (rows <= 0) return;
    if (!pos_dev) fail(MINFER_ERR_INTERNAL, "CUDA attention: decode rows need their positions on the device");
    switch (head_dim) {
        case 64: launch_decode_heads<1>(q, k_cache, v_cache, partial, out, 0, rows, n_head, n_head_kv, log2_qscale(head_dim), stream, pos_dev, kv, out16); break;
        case 128: launch_decode_heads<2>(q, k_cache, v_cache, partial, out, 0, rows, n_head, n_head_kv, log2_qscale(head_dim), stream, pos_dev, kv, out16); break;
        default: fail(MINFER_ERR_UNSUPPORTED, "CUDA attention: head_dim %d (64 and 128 are supported)", head_dim);
    }
}

}  // namespace minfer::cuda
