// The prefill GEMMs as minfer runs them (cuda/cublas.cu: cublasGemmEx, f16 operands, f32 output and
// accumulation, CUBLAS_GEMM_DEFAULT) against cuBLASLt's own candidates for the same call: the algorithms
// its heuristic returns (up to --algos), each timed, with the 32 MiB workspace minfer gives cuBLAS. A
// microbenchmark, not a test: run build/tests/bench_cublaslt on a GPU. It answers whether choosing the
// algorithm by measurement (issue 13: "cuBLASLt with its heuristics ... keep what measures faster") would
// pay on the 7B's shapes before the library carries that machinery, and what an f16 output would save.
//
// Shapes (qwen2-7b, weights [n][k] as the f16 cache holds them, activations [m][k] with m tokens):
// q/k/v concatenated 4608 x 3584, o 3584 x 3584 (accumulated into the residual: beta = 1), gate/up
// concatenated 37888 x 3584, down 3584 x 18944 (beta = 1). Each time is the median of --reps runs after
// three warm-ups; TFLOP/s counts 2 m n k. The per-forward line sums one layer's four GEMMs times 28.
// --qwen3-8b: that preset's shapes instead (q/k/v 6144 x 4096, o 4096 x 4096, gate/up 24576 x 4096,
// down 4096 x 12288; 36 layers).
#include <cublasLt.h>
#include <cublas_v2.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.cuh"

namespace {

using bench::ck;
constexpr int kMaxAlgos = 64;

void ckb(cublasStatus_t s, const char* what) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        std::fprintf(stderr, "bench: %s: cuBLAS status %d\n", what, static_cast<int>(s));
        std::exit(1);
    }
}

struct Shape {
    const char* name;
    int n, k;
    bool accumulate;
};

template <class F>
float median_us(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, int reps, F&& launch) {
    for (int i = 0; i < 3; ++i) launch();
    std::vector<float> t;
    for (int i = 0; i < reps; ++i) t.push_back(1000.0f * bench::time_ms(stream, e0, e1, launch));
    return bench::median(t);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<int> lengths = {512, 2048, 8192};
    int reps = 10, max_algos = 16;
    bool qwen3 = false;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--lengths") && i + 1 < argc) lengths = bench::int_list(argv[++i]);
        else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
        else if (!std::strcmp(argv[i], "--algos") && i + 1 < argc) max_algos = std::clamp(std::atoi(argv[++i]), 1, kMaxAlgos);
        else if (!std::strcmp(argv[i], "--qwen3-8b")) qwen3 = true;
        else {
            std::fprintf(stderr, "usage: bench_cublaslt [--lengths 512,2048,8192] [--reps 10] [--algos 16] [--qwen3-8b]\n");
            return 2;
        }
    }
    // qwen2-7b, or with --qwen3-8b that preset (d 4096, ff 12288, 32 heads over 8 KV heads of 128, 36 layers).
    const std::vector<Shape> shapes = qwen3 ? std::vector<Shape>{{"q/k/v 6144x4096", 6144, 4096, false},
                                                                 {"o 4096x4096", 4096, 4096, true},
                                                                 {"gate/up 24576x4096", 24576, 4096, false},
                                                                 {"down 4096x12288", 4096, 12288, true}}
                                            : std::vector<Shape>{{"q/k/v 4608x3584", 4608, 3584, false},
                                                                 {"o 3584x3584", 3584, 3584, true},
                                                                 {"gate/up 37888x3584", 37888, 3584, false},
                                                                 {"down 3584x18944", 3584, 18944, true}};
    const int kLayers = qwen3 ? 36 : 28;
    constexpr size_t kWorkspace = size_t{32} << 20;  // cuda/model.cuh's kCublasWorkspace

    cudaStream_t stream;
    ck(cudaStreamCreate(&stream), "stream");
    cudaEvent_t e0, e1;
    ck(cudaEventCreate(&e0), "event");
    ck(cudaEventCreate(&e1), "event");
    cublasHandle_t blas;
    ckb(cublasCreate(&blas), "cublasCreate");
    ckb(cublasSetStream(blas, stream), "cublasSetStream");
    cublasLtHandle_t lt;
    ckb(cublasLtCreate(&lt), "cublasLtCreate");
    void* ws = nullptr;
    ck(cudaMalloc(&ws, kWorkspace), "workspace");
    ckb(cublasSetWorkspace(blas, ws, kWorkspace), "cublasSetWorkspace");

    int max_m = *std::max_element(lengths.begin(), lengths.end());
    size_t max_a = 0, max_b = 0, max_c = 0;
    for (const Shape& s : shapes) {
        max_a = std::max(max_a, size_t(max_m) * s.k);
        max_b = std::max(max_b, size_t(s.n) * s.k);
        max_c = std::max(max_c, size_t(max_m) * s.n);
    }
    __half *a, *b, *c16;
    float* c;
    ck(cudaMalloc(&a, max_a * 2), "a");
    ck(cudaMalloc(&b, max_b * 2), "b");
    ck(cudaMalloc(&c, max_c * 4), "c");
    ck(cudaMalloc(&c16, max_c * 2), "c16");
    bench::fill_f16<<<1024, 256, 0, stream>>>(a, max_a, 1);
    bench::fill_f16<<<1024, 256, 0, stream>>>(b, max_b, 2);
    bench::fill_f32<<<1024, 256, 0, stream>>>(c, max_c, 3);
    ck(cudaStreamSynchronize(stream), "fill");

    cudaDeviceProp prop;
    ck(cudaGetDeviceProperties(&prop, 0), "props");
    std::printf("GPU: %s; cuBLAS %d; cuBLASLt %zu; median of %d; up to %d heuristic candidates\n\n", prop.name, CUBLAS_VERSION,
                cublasLtGetVersion(), reps, max_algos);
    std::printf("| tokens | GEMM | cublasGemmEx µs (TFLOP/s) | Lt heuristic #0 µs | Lt best µs (candidate, of n) | best vs GemmEx | Lt best, f16 output µs | GemmEx, f16 output µs | GemmEx, beta 0 µs (f32, f16 output) |\n");
    std::printf("|---|---|---|---|---|---|---|---|---|\n");
    for (int m : lengths) {
        if (m < 1) continue;
        double sum_ex = 0, sum_best = 0, sum_f16 = 0, sum_ex16 = 0, sum_b0 = 0;
        for (const Shape& s : shapes) {
            const float alpha = 1.0f, beta = s.accumulate ? 1.0f : 0.0f;
            // minfer's call: row-major C[m][n] = A[m][k] B[n][k]^T as column-major C^T (n x m).
            const float t_ex = median_us(stream, e0, e1, reps, [&] {
                ckb(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, b, CUDA_R_16F, s.k, a, CUDA_R_16F, s.k, &beta, c,
                                 CUDA_R_32F, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx");
            });
            // The same call with an f16 output (cuBLAS's own choice of algorithm for that type).
            const float t_ex16 = median_us(stream, e0, e1, reps, [&] {
                ckb(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, b, CUDA_R_16F, s.k, a, CUDA_R_16F, s.k, &beta, c16,
                                 CUDA_R_16F, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx (f16 output)");
            });
            // The accumulating GEMMs (the residual adds) without the accumulation: beta = 0 into C, f32 and
            // f16 (what a residual add deferred to the next kernel would run instead).
            float t_b0 = t_ex, t_b0_16 = t_ex16;
            if (s.accumulate) {
                const float zero = 0.0f;
                t_b0 = median_us(stream, e0, e1, reps, [&] {
                    ckb(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, b, CUDA_R_16F, s.k, a, CUDA_R_16F, s.k, &zero, c,
                                     CUDA_R_32F, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "cublasGemmEx (beta 0)");
                });
                t_b0_16 = median_us(stream, e0, e1, reps, [&] {
                    ckb(cublasGemmEx(blas, CUBLAS_OP_T, CUBLAS_OP_N, s.n, m, s.k, &alpha, b, CUDA_R_16F, s.k, a, CUDA_R_16F, s.k, &zero, c16,
                                     CUDA_R_16F, s.n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                         "cublasGemmEx (beta 0, f16 output)");
                });
            }
            // The same call through cuBLASLt, every candidate its heuristic offers, for f32 and f16 output.
            auto lt_best = [&](cudaDataType_t ctype, void* cp, float& first, int& best_i, int& found) {
                cublasLtMatmulDesc_t op;
                ckb(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc");
                const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
                ckb(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa");
                ckb(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb");
                cublasLtMatrixLayout_t la, lb, lc;
                ckb(cublasLtMatrixLayoutCreate(&la, CUDA_R_16F, s.k, s.n, s.k), "layout a");
                ckb(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16F, s.k, m, s.k), "layout b");
                ckb(cublasLtMatrixLayoutCreate(&lc, ctype, s.n, m, s.n), "layout c");
                cublasLtMatmulPreference_t pref;
                ckb(cublasLtMatmulPreferenceCreate(&pref), "pref");
                const size_t wsb = kWorkspace;
                ckb(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)), "pref ws");
                // a plain array: nvcc 13.0's front end fails (internal error) on a std::vector of this type in C++20
                cublasLtMatmulHeuristicResult_t res[kMaxAlgos];
                found = 0;
                ckb(cublasLtMatmulAlgoGetHeuristic(lt, op, la, lb, lc, lc, pref, max_algos, res, &found), "heuristic");
                float best = 1e30f;
                best_i = -1;
                first = -1;
                for (int i = 0; i < found; ++i) {
                    if (res[i].state != CUBLAS_STATUS_SUCCESS) continue;
                    const float t = median_us(stream, e0, e1, reps, [&] {
                        ckb(cublasLtMatmul(lt, op, &alpha, b, la, a, lb, &beta, cp, lc, cp, lc, &res[i].algo, ws,
                                           kWorkspace, stream),
                             "cublasLtMatmul");
                    });
                    if (i == 0) first = t;
                    if (t < best) best = t, best_i = i;
                }
                cublasLtMatmulPreferenceDestroy(pref);
                cublasLtMatrixLayoutDestroy(la);
                cublasLtMatrixLayoutDestroy(lb);
                cublasLtMatrixLayoutDestroy(lc);
                cublasLtMatmulDescDestroy(op);
                return best;
            };
            float first32, first16;
            int i32, n32, i16, n16;
            const float best32 = lt_best(CUDA_R_32F, c, first32, i32, n32);
            const float best16 = lt_best(CUDA_R_16F, c16, first16, i16, n16);
            const double flop = 2.0 * m * double(s.n) * s.k;
            char b0[64] = "(same)";
            if (s.accumulate) std::snprintf(b0, sizeof b0, "%.1f, %.1f", t_b0, t_b0_16);
            std::printf("| %d | %s | %.1f (%.0f) | %.1f | %.1f (#%d of %d) | %+.1f%% | %.1f | %.1f | %s |\n", m, s.name, t_ex,
                        flop / t_ex * 1e-6, first32, best32, i32, n32, 100.0 * (t_ex - best32) / t_ex, best16, t_ex16, b0);
            sum_ex += t_ex;
            sum_best += best32;
            sum_f16 += best16;
            sum_ex16 += t_ex16;
            sum_b0 += t_b0;
        }
        std::printf("| %d | per forward (x%d layers) | %.2f ms | | %.2f ms | %+.1f%% | %.2f ms | %.2f ms | %.2f ms (f32) |\n", m,
                    kLayers, sum_ex * kLayers * 1e-3, sum_best * kLayers * 1e-3, 100.0 * (sum_ex - sum_best) / sum_ex,
                    sum_f16 * kLayers * 1e-3, sum_ex16 * kLayers * 1e-3, sum_b0 * kLayers * 1e-3);
    }
    ck(cudaGetLastError(), "run");
    cublasLtDestroy(lt);
    cublasDestroy(blas);
    return 0;
}
