// The CUDA kernels of the forward pass and their launchers. Written for clarity first; each one is
// checked against the CPU backend in tests/test_cuda.cpp.
#include "cuda/kernels.cuh"

#include <mma.h>

#include <algorithm>
#include <cmath>

#include "cuda/common.cuh"
#include "cuda/dequant.cuh"

namespace minfer::cuda {
namespace {

constexpr unsigned kFull = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(kFull, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(kFull, v, o));
    return v;
}

void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

// ---- dequantization, embedding --------------------------------------------------------------------

template <Type T>
__global__ void dequant_f16_kernel(const uint8_t* w, int64_t rows, int64_t cols, __half* out) {
    const int64_t per_row = cols / 8;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= rows * per_row) return;
    const int64_t r = i / per_row, e0 = (i % per_row) * 8;
    float y[8];
    deq8<T>(w + r * row_bytes_of<T>(cols), e0, y);
    __align__(16) __half h[8];
    for (int j = 0; j < 8; ++j) h[j] = __float2half_rn(y[j]);
    *reinterpret_cast<uint4*>(out + r * cols + e0) = *reinterpret_cast<const uint4*>(h);
}

template <Type T>
__global__ void embed_kernel(const uint8_t* table, int64_t cols, const int32_t* tokens, int n, float* out) {
    const int64_t per_row = cols / 8;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= n * per_row) return;
    const int64_t t = i / per_row, e0 = (i % per_row) * 8;
    float y[8];
    deq8<T>(table + tokens[t] * row_bytes_of<T>(cols), e0, y);
    float4* o = reinterpret_cast<float4*>(out + t * cols + e0);
    o[0] = make_float4(y[0], y[1], y[2], y[3]);
    o[1] = make_float4(y[4], y[5], y[6], y[7]);
}

__global__ void to_f16_kernel(const float* x, __half* y, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) y[i] = __float2half_rn(x[i]);
}

// ---- f16 tensor-core GEMM ------------------------------------------------------------------------------
// C[M][N] = A[M][K] · B[N][K]^T. A block of 4 warps computes a 64x64 tile of C, each warp a 32x32 quarter
// as 2x2 WMMA 16x16x16 fragments. K advances in steps of 32; the next step's A and B tiles are copied to
// shared memory with cp.async while the current one is multiplied (two stages). Rows beyond M or N and
// columns beyond K are zero-filled by the copy (src-size 0), so any M and N work; K % 8 == 0 keeps every
// 16-byte chunk entirely inside or outside the matrix.
constexpr int kBM = 64, kBN = 64, kBK = 32, kLds = kBK + 8;  // row stride in halves (80 bytes)

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
    const unsigned s = static_cast<unsigned>(__cvta_generic_to_shared(smem));
    const int n = valid ? 16 : 0;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(n));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// B tile loaders: write rows n0 .. n0+63, columns k0 .. k0+31 of B as f16 into a shared tile of row
// stride kLds, zeros outside the matrix. Thread `tid` of 128 writes two 8-element chunks.
struct LoadF16 {  // B is f16 [N][K] in device memory: asynchronous copies (cp.async)
    const __half* b;
    __device__ void operator()(__half* tile, int n0, int k0, int N, int K, int tid) const {
        for (int i = 0; i < 2; ++i) {
            const int chunk = tid + 128 * i, r = chunk / 4, kc = (chunk % 4) * 8, gk = k0 + kc;
            const bool valid = n0 + r < N && gk < K;
            cp_async16(&tile[r * kLds + kc], valid ? b + static_cast<int64_t>(n0 + r) * K + gk : b, valid);
        }
    }
};
// The fused path: B is the quantized weight itself. Each chunk is dequantized in registers by the same
// deq8 as the standalone dequant kernel and rounded by the same __float2half_rn, so the tile holds
// exactly the values the two-pass path would have read from its f16 scratch.
template <Type T>
struct LoadQuant {
    const uint8_t* w;
    __device__ void operator()(__half* tile, int n0, int k0, int N, int K, int tid) const {
        for (int i = 0; i < 2; ++i) {
            const int chunk = tid + 128 * i, r = chunk / 4, kc = (chunk % 4) * 8, gk = k0 + kc;
            __align__(16) __half h[8];
            if (n0 + r < N && gk < K) {
                float y[8];
                deq8<T>(w + static_cast<int64_t>(n0 + r) * row_bytes_of<T>(K), gk, y);
                for (int j = 0; j < 8; ++j) h[j] = __float2half_rn(y[j]);
            } else {
                for (int j = 0; j < 8; ++j) h[j] = __float2half_rn(0.0f);
            }
            *reinterpret_cast<uint4*>(&tile[r * kLds + kc]) = *reinterpret_cast<const uint4*>(h);
        }
    }
};

template <class LoadB>
__global__ __launch_bounds__(128) void gemm_f16_kernel(const __half* __restrict__ a, LoadB load_b,
                                                       float* __restrict__ c, int M, int N, int K) {
    using namespace nvcuda;
    __shared__ __align__(128) __half as[2][kBM * kLds];
    __shared__ __align__(128) __half bs[2][kBN * kLds];
    __shared__ __align__(128) float cs[4][16 * 16];

    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int wm = warp / 2, wn = warp % 2;
    const int m0 = blockIdx.y * kBM, n0 = blockIdx.x * kBN;

    auto load = [&](int k0, int stage) {
        for (int i = 0; i < 2; ++i) {
            const int chunk = tid + 128 * i, r = chunk / 4, kc = (chunk % 4) * 8;
            const int gk = k0 + kc;
            const bool va = m0 + r < M && gk < K;
            cp_async16(&as[stage][r * kLds + kc], va ? a + static_cast<int64_t>(m0 + r) * K + gk : a, va);
        }
        load_b(bs[stage], n0, k0, N, K, tid);
    };

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    const int k_tiles = (K + kBK - 1) / kBK;
    load(0, 0);
    cp_async_commit();
    for (int kt = 0; kt < k_tiles; ++kt) {
        if (kt + 1 < k_tiles) load((kt + 1) * kBK, (kt + 1) & 1);
        cp_async_commit();
        cp_async_wait<1>();
        __syncthreads();
        const __half* at = as[kt & 1];
        const __half* bt = bs[kt & 1];
        for (int kk = 0; kk < kBK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::col_major> fb[2];
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(fa[i], at + (wm * 32 + i * 16) * kLds + kk, kLds);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(fb[j], bt + (wn * 32 + j * 16) * kLds + kk, kLds);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }

    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            wmma::store_matrix_sync(cs[warp], acc[i][j], 16, wmma::mem_row_major);
            __syncwarp();
            const int r0 = m0 + wm * 32 + i * 16, c0 = n0 + wn * 32 + j * 16;
            for (int e = lane; e < 256; e += 32) {
                const int r = r0 + e / 16, col = c0 + e % 16;
                if (r < M && col < N) c[static_cast<int64_t>(r) * N + col] = cs[warp][e];
            }
            __syncwarp();
        }
}

// ---- element-wise and normalization -------------------------------------------------------------------

__global__ void rms_norm_kernel(const float* x, int dim, const float* w, float eps, float* out) {
    __shared__ float partial[32];
    const float* in = x + static_cast<int64_t>(blockIdx.x) * dim;
    float* o = out + static_cast<int64_t>(blockIdx.x) * dim;
    float ss = 0.0f;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) ss += in[i] * in[i];
    ss = warp_sum(ss);
    if (threadIdx.x % 32 == 0) partial[threadIdx.x / 32] = ss;
    __syncthreads();
    if (threadIdx.x < 32) {
        float v = threadIdx.x < blockDim.x / 32 ? partial[threadIdx.x] : 0.0f;
        v = warp_sum(v);
        if (threadIdx.x == 0) partial[0] = v;
    }
    __syncthreads();
    const float scale = static_cast<float>(1.0 / sqrt(static_cast<double>(partial[0]) / dim + eps));
    for (int i = threadIdx.x; i < dim; i += blockDim.x) o[i] = __fmul_rn(__fmul_rn(in[i], scale), w[i]);
}

__global__ void add_bias_kernel(float* x, int64_t total, int cols, const float* b) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < total) x[i] += b[i % cols];
}

__global__ void rope_kernel(float* x, int n, int n_heads, int head_dim, int pos0, const double* inv_freq) {
    const int half = head_dim / 2;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= static_cast<int64_t>(n) * n_heads * half) return;
    const int j = static_cast<int>(i % half);
    const int64_t th = i / half;  // token * n_heads + head
    const int t = static_cast<int>(th / n_heads);
    double sn, cs;
    sincos(static_cast<double>(pos0 + t) * inv_freq[j], &sn, &cs);
    const float c = static_cast<float>(cs), s = static_cast<float>(sn);
    float* v = x + th * head_dim;
    const float a = v[j], b = v[j + half];
    v[j] = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
    v[j + half] = __fadd_rn(__fmul_rn(a, s), __fmul_rn(b, c));
}

__global__ void store_kv_kernel(const float* k, const float* v, __half* kc, __half* vc, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        kc[i] = __float2half_rn(k[i]);
        vc[i] = __float2half_rn(v[i]);
    }
}

__global__ void swiglu_kernel(float* g, const float* u, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) {
        const float x = g[i];
        g[i] = x / (1.0f + expf(-x)) * u[i];
    }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

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

bool type_supported(Type t) {
    return dispatch_type(t, [](auto) {});
}

void dequant_f16(Type t, const void* w, int64_t rows, int64_t cols, __half* out, cudaStream_t stream) {
    const int64_t n = rows * (cols / 8);
    const bool known = dispatch_type(t, [&](auto tag) {
        dequant_f16_kernel<decltype(tag)::value><<<blocks_for(n, 256), 256, 0, stream>>>(static_cast<const uint8_t*>(w), rows, cols, out);
    });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA dequant: tensor type %d", static_cast<int>(t));
    check_launch("dequant_f16");
}

void embed_rows(Type t, const void* table, int64_t cols, const int32_t* tokens, int n, float* out, cudaStream_t stream) {
    const int64_t total = n * (cols / 8);
    const bool known = dispatch_type(t, [&](auto tag) {
        embed_kernel<decltype(tag)::value><<<blocks_for(total, 256), 256, 0, stream>>>(static_cast<const uint8_t*>(table), cols, tokens, n, out);
    });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA embedding: tensor type %d", static_cast<int>(t));
    check_launch("embed");
}

void to_f16(const float* x, __half* y, int64_t n, cudaStream_t stream) {
    to_f16_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
    check_launch("to_f16");
}

void gemm_f16(const __half* a, const __half* b, float* c, int m, int n, int k, cudaStream_t stream) {
    if (k % 8 != 0) fail(MINFER_ERR_INTERNAL, "gemm_f16: K = %d is not a multiple of 8", k);
    const dim3 grid(blocks_for(n, kBN), blocks_for(m, kBM));
    gemm_f16_kernel<<<grid, 128, 0, stream>>>(a, LoadF16{b}, c, m, n, k);
    check_launch("gemm_f16");
}

void gemm_fused(Type t, const __half* a, const void* w, float* c, int m, int n, int k, cudaStream_t stream) {
    if (k % 8 != 0) fail(MINFER_ERR_INTERNAL, "gemm_fused: K = %d is not a multiple of 8", k);
    const dim3 grid(blocks_for(n, kBN), blocks_for(m, kBM));
    const bool known = dispatch_type(t, [&](auto tag) {
        gemm_f16_kernel<<<grid, 128, 0, stream>>>(a, LoadQuant<decltype(tag)::value>{static_cast<const uint8_t*>(w)}, c, m, n, k);
    });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA fused GEMM: tensor type %d", static_cast<int>(t));
    check_launch("gemm_fused");
}

void rms_norm(const float* x, int64_t rows, int dim, const float* w, float eps, float* out, cudaStream_t stream) {
    const int threads = dim >= 1024 ? 256 : 128;
    rms_norm_kernel<<<static_cast<unsigned>(rows), threads, 0, stream>>>(x, dim, w, eps, out);
    check_launch("rms_norm");
}

void add_bias(float* x, int64_t rows, int cols, const float* b, cudaStream_t stream) {
    const int64_t total = rows * cols;
    add_bias_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(x, total, cols, b);
    check_launch("add_bias");
}

void rope(float* x, int n, int n_heads, int head_dim, int pos0, const double* inv_freq, cudaStream_t stream) {
    const int64_t total = static_cast<int64_t>(n) * n_heads * (head_dim / 2);
    rope_kernel<<<blocks_for(total, 256), 256, 0, stream>>>(x, n, n_heads, head_dim, pos0, inv_freq);
    check_launch("rope");
}

void store_kv(const float* k, const float* v, __half* k_cache, __half* v_cache, int64_t n, cudaStream_t stream) {
    store_kv_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(k, v, k_cache, v_cache, n);
    check_launch("store_kv");
}

void swiglu(float* gate, const float* up, int64_t n, cudaStream_t stream) {
    swiglu_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(gate, up, n);
    check_launch("swiglu");
}

void add(float* x, const float* y, int64_t n, cudaStream_t stream) {
    add_kernel<<<blocks_for(n, 256), 256, 0, stream>>>(x, y, n);
    check_launch("add");
}

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
