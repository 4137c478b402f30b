// Microbenchmark of the prefill attention (cuda::attention with n > 1: the tensor-core kernel of
// cuda/attention_mma.cuh).
//
//   build/tests/bench_attention [--lengths 2048,8192,32768] [--chunks 0,2048] [--reps N]
//
// For each length n and each shape (Qwen2.5-7B: 28 query heads over 4 KV heads of 128; Qwen2.5-0.5B: 14
// over 2 of 64), one causal prefill of n tokens from position 0 over a contiguous f16 cache of random
// values (q: normal, sd 1). With a chunk size c > 0 (--chunks; 0 is the whole prompt at once) the n
// tokens go as the CUDA forward sends them: launches of c queries at positions 0, c, 2c, ..., each over
// every key before it and its own causal triangle. Each prefill (all its launches) is timed by its own
// pair of events, the median of N (default 10) after a warm-up. TFLOP/s counts the causal work, which
// chunking does not change: 4 * head_dim * n_head * n (n + 1) / 2 (Q K^T and P V).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "cuda/kernels.cuh"

namespace {

using bench::ck;
using bench::fill_f16;
using bench::fill_f32;

struct Shape {
    const char* name;
    int n_head, n_head_kv, head_dim;
};

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> lengths = {2048, 8192, 32768}, chunks = {0};
    int reps = 10;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--lengths") && i + 1 < argc) {
            lengths = bench::int_list(argv[++i]);
        } else if (!std::strcmp(argv[i], "--chunks") && i + 1 < argc) {
            chunks = bench::int_list(argv[++i]);
        } else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) {
            reps = std::max(1, std::atoi(argv[++i]));
        } else {
            std::fprintf(stderr, "usage: bench_attention [--lengths 2048,8192,32768] [--chunks 0,2048] [--reps N]\n");
            return 2;
        }
    }
    const Shape shapes[] = {{"qwen2-7b (28/4 heads, 128)", 28, 4, 128}, {"qwen2-0.5b (14/2 heads, 64)", 14, 2, 64}};
    cudaStream_t stream;
    ck(cudaStreamCreate(&stream), "stream");
    cudaEvent_t e0, e1;
    ck(cudaEventCreate(&e0), "event");
    ck(cudaEventCreate(&e1), "event");
    std::printf("| shape | tokens | chunk | ms (median of %d) | TFLOP/s |\n|---|---|---|---|---|\n", reps);
    for (const Shape& sh : shapes) {
        for (int n : lengths) {
            if (n < 2) continue;
            const size_t q_elems = static_cast<size_t>(n) * sh.n_head * sh.head_dim;
            const size_t kv_elems = static_cast<size_t>(n) * sh.n_head_kv * sh.head_dim;
            float *q = nullptr, *out = nullptr;
            __half *k = nullptr, *v = nullptr;
            ck(cudaMalloc(&q, q_elems * 4), "q");
            ck(cudaMalloc(&out, q_elems * 4), "out");
            ck(cudaMalloc(&k, kv_elems * 2), "K");
            ck(cudaMalloc(&v, kv_elems * 2), "V");
            fill_f32<<<1024, 256, 0, stream>>>(q, q_elems, 1);
            fill_f16<<<1024, 256, 0, stream>>>(k, kv_elems, 2);
            fill_f16<<<1024, 256, 0, stream>>>(v, kv_elems, 3);
            ck(cudaGetLastError(), "fill");
            const int64_t q_dim = int64_t{sh.n_head} * sh.head_dim;
            for (int chunk : chunks) {
                const int c = chunk > 0 ? std::min(chunk, n) : n;
                if (c < 2 || n % c == 1) {  // a one-token launch takes the decode kernel, which needs its scratch
                    std::printf("| %s | %d | %d | (a one-token chunk: skipped) | |\n", sh.name, n, c);
                    continue;
                }
                std::vector<float> ms;
                for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
                    const float t = bench::time_ms(stream, e0, e1, [&] {
                        for (int c0 = 0; c0 < n; c0 += c)
                            minfer::cuda::attention(q + c0 * q_dim, k, v, out + c0 * q_dim, std::min(c, n - c0), c0, sh.n_head,
                                                    sh.n_head_kv, sh.head_dim, nullptr, stream);
                    });
                    if (r >= 0) ms.push_back(t);
                }
                std::sort(ms.begin(), ms.end());
                const double med = ms[ms.size() / 2];
                const double flop = 4.0 * sh.head_dim * sh.n_head * (static_cast<double>(n) * (n + 1) / 2);
                std::printf("| %s | %d | %d | %.3f | %.1f |\n", sh.name, n, c, med, flop / (med * 1e-3) / 1e12);
            }
            ck(cudaFree(q), "free");
            ck(cudaFree(out), "free");
            ck(cudaFree(k), "free");
            ck(cudaFree(v), "free");
        }
    }
    return 0;
}
