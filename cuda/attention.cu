// The attention kernels of the forward pass and their launchers: a tiled prefill kernel and the decode
// kernel with its split-merge. Checked against the CPU backend in tests/test_cuda.cpp.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "cuda/common.cuh"
#include "cuda/kernels.cuh"

namespace minfer::cuda {
namespace {

// ---- attention -------------------------------------------------------------------------------------------
// Both kernels keep, per query, the running maximum m, the running sum l of exp(score - m) and the
// output accumulator, rescaled when m grows (online softmax): no n x n buffer. A lane owns the output
// dimensions 64c + 2*lane and 64c + 2*lane + 1 for c < P (head_dim = 64 * P), so V rows are read as
// consecutive half2 words across the warp.

// Prefill: a block of 4 warps takes 16 consecutive queries of one head (4 per warp) and walks the keys
// in tiles of 32 staged in shared memory; lane j scores key j of the tile.
template <int P>
__global__ __launch_bounds__(128) void attn_prefill_kernel(const float* q, const __half* kc, const __half* vc, float* out,
                                                            int n, int pos0, int n_head, int group, int kv_dim,
                                                            float scale) {
    constexpr int HD = 64 * P, QB = 16, KT = 32, KS = HD + 2;  // K row stride: one spare word, no bank conflicts
    __shared__ float qs[QB][HD];
    __shared__ __align__(16) __half ks[KT][KS];
    __shared__ __align__(16) __half vs[KT][HD];
    const int h = blockIdx.y, kvh = h / group, t0 = blockIdx.x * QB;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int64_t q_dim = static_cast<int64_t>(n_head) * HD;

    for (int i = threadIdx.x; i < QB * HD; i += blockDim.x) {
        const int tq = i / HD, d = i % HD;
        qs[tq][d] = t0 + tq < n ? q[(t0 + tq) * q_dim + h * HD + d] : 0.0f;
    }
    float m[4], l[4], acc[4][2 * P];
    for (int i = 0; i < 4; ++i) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int d = 0; d < 2 * P; ++d) acc[i][d] = 0.0f;
    }
    const int last = pos0 + min(n, t0 + QB) - 1;  // the last key any query of this block sees
    for (int k0 = 0; k0 <= last; k0 += KT) {
        __syncthreads();
        for (int i = threadIdx.x; i < KT * HD / 2; i += blockDim.x) {
            const int r = i / (HD / 2), w = i % (HD / 2), p = k0 + r;
            uint32_t kw = 0, vw = 0;
            if (p <= last) {
                const int64_t off = static_cast<int64_t>(p) * kv_dim + kvh * HD;
                kw = reinterpret_cast<const uint32_t*>(kc + off)[w];
                vw = reinterpret_cast<const uint32_t*>(vc + off)[w];
            }
            *reinterpret_cast<uint32_t*>(&ks[r][2 * w]) = kw;
            *reinterpret_cast<uint32_t*>(&vs[r][2 * w]) = vw;
        }
        __syncthreads();
        for (int i = 0; i < 4; ++i) {
            const int tq = warp * 4 + i, t = t0 + tq;
            const int qpos = pos0 + t;
            if (t >= n || k0 > qpos) continue;  // warp-uniform
            const int p = k0 + lane;
            float s = -INFINITY;
            if (p <= qpos) {
                float dot = 0.0f;
                for (int d = 0; d < HD; d += 2) {
                    const float2 kf = __half22float2(*reinterpret_cast<const __half2*>(&ks[lane][d]));
                    dot += qs[tq][d] * kf.x + qs[tq][d + 1] * kf.y;
                }
                s = dot * scale;
            }
            const float m_new = fmaxf(m[i], warp_max(s));
            const float pr = p <= qpos ? expf(s - m_new) : 0.0f;
            const float alpha = expf(m[i] - m_new);
            l[i] = l[i] * alpha + warp_sum(pr);
            m[i] = m_new;
            for (int d = 0; d < 2 * P; ++d) acc[i][d] *= alpha;
            const int jn = min(KT, qpos - k0 + 1);
            for (int j = 0; j < jn; ++j) {
                const float pj = __shfl_sync(kFull, pr, j);
                for (int c = 0; c < P; ++c) {
                    const float2 vf = __half22float2(*reinterpret_cast<const __half2*>(&vs[j][64 * c + 2 * lane]));
                    acc[i][2 * c] += pj * vf.x;
                    acc[i][2 * c + 1] += pj * vf.y;
                }
            }
        }
    }
    for (int i = 0; i < 4; ++i) {
        const int t = t0 + warp * 4 + i;
        if (t >= n) continue;
        const float inv = 1.0f / l[i];
        float* o = out + t * q_dim + h * HD;
        for (int c = 0; c < P; ++c) {
            o[64 * c + 2 * lane] = acc[i][2 * c] * inv;
            o[64 * c + 2 * lane + 1] = acc[i][2 * c + 1] * inv;
        }
    }
}

// Decode (one query): the keys 0 .. L-1 are cut into n_split chunks, one block per (head, chunk); its 4
// warps take 32 keys at a time. With one chunk the block writes the output; otherwise it writes
// (acc, m, l) to `part` and attn_combine_kernel merges the chunks.
template <int P>
__global__ __launch_bounds__(128) void attn_decode_kernel(const float* q, const __half* kc, const __half* vc, float* part,
                                                           float* out, int L, int group, int kv_dim, float scale, int chunk) {
    constexpr int HD = 64 * P;
    __shared__ float qs[HD];
    __shared__ float wm[4], wl[4];
    __shared__ float wacc[4][HD];
    const int h = blockIdx.x, s = blockIdx.y, n_split = gridDim.y, kvh = h / group;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    for (int d = threadIdx.x; d < HD; d += blockDim.x) qs[d] = q[h * HD + d];
    __syncthreads();

    const int p_begin = s * chunk, p_end = min(L, p_begin + chunk);
    float m = -INFINITY, l = 0.0f, acc[2 * P];
    for (int d = 0; d < 2 * P; ++d) acc[d] = 0.0f;
    for (int p0 = p_begin + warp * 32; p0 < p_end; p0 += 128) {
        const int p = p0 + lane;
        float sc = -INFINITY;
        if (p < p_end) {
            const __half2* kr = reinterpret_cast<const __half2*>(kc + static_cast<int64_t>(p) * kv_dim + kvh * HD);
            float dot = 0.0f;
            for (int d2 = 0; d2 < HD / 2; ++d2) {
                const float2 kf = __half22float2(kr[d2]);
                dot += qs[2 * d2] * kf.x + qs[2 * d2 + 1] * kf.y;
            }
            sc = dot * scale;
        }
        const float m_new = fmaxf(m, warp_max(sc));
        const float pr = p < p_end ? expf(sc - m_new) : 0.0f;
        const float alpha = expf(m - m_new);
        l = l * alpha + warp_sum(pr);
        m = m_new;
        for (int d = 0; d < 2 * P; ++d) acc[d] *= alpha;
        const int jn = min(32, p_end - p0);
        for (int j = 0; j < jn; ++j) {
            const float pj = __shfl_sync(kFull, pr, j);
            const __half* vr = vc + static_cast<int64_t>(p0 + j) * kv_dim + kvh * HD;
            for (int c = 0; c < P; ++c) {
                const float2 vf = __half22float2(*reinterpret_cast<const __half2*>(vr + 64 * c + 2 * lane));
                acc[2 * c] += pj * vf.x;
                acc[2 * c + 1] += pj * vf.y;
            }
        }
    }
    if (lane == 0) {
        wm[warp] = m;
        wl[warp] = l;
    }
    for (int c = 0; c < P; ++c) {
        wacc[warp][64 * c + 2 * lane] = acc[2 * c];
        wacc[warp][64 * c + 2 * lane + 1] = acc[2 * c + 1];
    }
    __syncthreads();
    float M = -INFINITY;
    for (int w = 0; w < 4; ++w) M = fmaxf(M, wm[w]);
    float lsum = 0.0f, f[4];
    for (int w = 0; w < 4; ++w) {
        f[w] = wl[w] > 0.0f ? expf(wm[w] - M) : 0.0f;  // a warp that saw no key has m = -inf, l = 0
        lsum += wl[w] * f[w];
    }
    for (int d = threadIdx.x; d < HD; d += blockDim.x) {
        float v = 0.0f;
        for (int w = 0; w < 4; ++w) v += wacc[w][d] * f[w];
        if (n_split == 1) out[h * HD + d] = v / lsum;
        else part[(static_cast<int64_t>(h) * n_split + s) * (HD + 2) + d] = v;
    }
    if (n_split > 1 && threadIdx.x == 0) {
        part[(static_cast<int64_t>(h) * n_split + s) * (HD + 2) + HD] = M;
        part[(static_cast<int64_t>(h) * n_split + s) * (HD + 2) + HD + 1] = lsum;
    }
}

__global__ void attn_combine_kernel(const float* part, float* out, int n_split, int head_dim) {
    const int h = blockIdx.x;
    const float* ph = part + static_cast<int64_t>(h) * n_split * (head_dim + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; ++s) M = fmaxf(M, ph[s * (head_dim + 2) + head_dim]);
    float total = 0.0f;
    for (int s = 0; s < n_split; ++s) total += ph[s * (head_dim + 2) + head_dim + 1] * expf(ph[s * (head_dim + 2) + head_dim] - M);
    for (int d = threadIdx.x; d < head_dim; d += blockDim.x) {
        float v = 0.0f;
        for (int s = 0; s < n_split; ++s) v += ph[s * (head_dim + 2) + d] * expf(ph[s * (head_dim + 2) + head_dim] - M);
        out[h * head_dim + d] = v / total;
    }
}

// Decode splits: enough (head, chunk) blocks to fill the GPU, chunks of at least 128 keys.
constexpr int kTargetBlocks = 264;
int decode_splits_max(int n_head) { return std::max(1, (kTargetBlocks + n_head - 1) / n_head); }

}  // namespace

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

int64_t attention_partial_floats(int n_head, int head_dim) {
    return static_cast<int64_t>(n_head) * decode_splits_max(n_head) * (head_dim + 2);
}

void attention(const float* q, const __half* k_cache, const __half* v_cache, float* out, int n, int pos0, int n_head,
               int n_head_kv, int head_dim, float* partial, cudaStream_t stream) {
    const int group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim;
    const float scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
    auto run = [&](auto p_tag) {
        constexpr int P = decltype(p_tag)::value;
        if (n == 1) {
            const int L = pos0 + 1, max_split = decode_splits_max(n_head);
            int chunk = std::max(128, (L + max_split - 1) / max_split);
            chunk = (chunk + 127) / 128 * 128;
            const int n_split = (L + chunk - 1) / chunk;
            attn_decode_kernel<P><<<dim3(n_head, n_split), 128, 0, stream>>>(q, k_cache, v_cache, partial, out, L, group,
                                                                             kv_dim, scale, chunk);
            check_launch("attention (decode)");
            if (n_split > 1) {
                attn_combine_kernel<<<n_head, 128, 0, stream>>>(partial, out, n_split, head_dim);
                check_launch("attention (combine)");
            }
        } else {
            attn_prefill_kernel<P><<<dim3(blocks_for(n, 16), n_head), 128, 0, stream>>>(q, k_cache, v_cache, out, n, pos0,
                                                                                         n_head, group, kv_dim, scale);
            check_launch("attention (prefill)");
        }
    };
    switch (head_dim) {
        case 64: run(std::integral_constant<int, 1>{}); break;
        case 128: run(std::integral_constant<int, 2>{}); break;
        default: fail(MINFER_ERR_UNSUPPORTED, "CUDA attention: head_dim %d (64 and 128 are supported)", head_dim);
    }
}

}  // namespace minfer::cuda
