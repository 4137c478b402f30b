// Microbenchmark of the narrow GEMM (cuda/gemm_narrow.cuh) against cuBLAS on the matmuls of a decode
// step of many sequences: f16 weights (the f16 cache), 9 to 64 token rows.
//
//   build/tests/bench_gemm_narrow [--tokens 16,32,64] [--reps N] [--only TEXT]
//
// For each token count and each Qwen2.5-7B matmul group (q/k/v and gate/up as the forward runs them: one
// narrow launch; cuBLAS one call per matrix), the median of N (default 20) timed launches after a
// warm-up, each on its own copy of the weights in turn (copies enough to pass 256 MB, so the weights come
// from memory, not from the 50 MB L2). GB/s counts the weight bytes once (the input and output are a few
// MB at most).
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "core/error.h"
#include "cuda/cublas.cuh"
#include "cuda/kernels.cuh"

namespace {

using bench::ck;

struct Group {
    const char* name;
    std::vector<int64_t> rows;  // one to three matrices
    int64_t k;
};

std::vector<int> parse_list(const std::string& s) {
    std::vector<int> v;
    for (size_t at = 0; at <= s.size();) {
        const size_t comma = std::min(s.find(',', at), s.size());
        v.push_back(std::atoi(s.substr(at, comma - at).c_str()));
        at = comma + 1;
    }
    return v;
}

}  // namespace

int run(int argc, char** argv) {
    std::vector<int> tokens = {16, 32, 64};
    int reps = 20;
    const char* only = "";  // groups whose name contains this
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = parse_list(argv[++i]);
        else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
        else if (!std::strcmp(argv[i], "--only") && i + 1 < argc) only = argv[++i];
        else {
            std::fprintf(stderr, "usage: bench_gemm_narrow [--tokens 16,32,64] [--reps N] [--only TEXT]\n");
            return 2;
        }
    }
    const Group groups[] = {{"q/k/v 3584+512+512 x 3584", {3584, 512, 512}, 3584},
                            {"o 3584 x 3584", {3584}, 3584},
                            {"gate/up 2 x 18944 x 3584", {18944, 18944}, 3584},
                            {"down 3584 x 18944", {3584}, 18944},
                            {"output 152064 x 3584", {152064}, 3584}};
    cudaStream_t stream;
    ck(cudaStreamCreate(&stream), "stream");
    cudaEvent_t e0, e1;
    ck(cudaEventCreate(&e0), "event");
    ck(cudaEventCreate(&e1), "event");
    constexpr size_t kCublasWs = size_t{32} << 20;
    void* cublas_ws = nullptr;
    ck(cudaMalloc(&cublas_ws, kCublasWs), "cuBLAS workspace");
    minfer::cuda::Cublas cublas(stream, cublas_ws, kCublasWs);
    minfer::cuda::NarrowScratch scratch;
    scratch.ws_floats = minfer::cuda::gemm_narrow_ws_floats();
    scratch.n_counters = minfer::cuda::gemm_narrow_counters(152064);
    ck(cudaMalloc(&scratch.ws, static_cast<size_t>(scratch.ws_floats) * 4), "workspace");
    ck(cudaMalloc(&scratch.counters, static_cast<size_t>(scratch.n_counters) * 4), "counters");
    ck(cudaMemset(scratch.counters, 0, static_cast<size_t>(scratch.n_counters) * 4), "counters");

    std::printf("| matmuls | tokens | cuBLAS us | cuBLAS GB/s | narrow us | narrow GB/s | speed-up |\n|---|---|---|---|---|---|---|\n");
    for (const Group& g : groups) {
        if (!std::strstr(g.name, only)) continue;
        int64_t rows = 0;
        for (int64_t r : g.rows) rows += r;
        const size_t w_bytes = static_cast<size_t>(rows * g.k) * 2;
        const int copies = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / w_bytes + 1));
        std::vector<__half*> w(static_cast<size_t>(copies));
        for (int c = 0; c < copies; ++c) {
            ck(cudaMalloc(&w[static_cast<size_t>(c)], w_bytes), "weights");
            bench::fill_f16<<<1024, 256, 0, stream>>>(w[static_cast<size_t>(c)], w_bytes / 2, 10 + c);
        }
        const int max_m = *std::max_element(tokens.begin(), tokens.end());
        __half* x = nullptr;
        float* y = nullptr;
        ck(cudaMalloc(&x, static_cast<size_t>(max_m * g.k) * 2), "x");
        ck(cudaMalloc(&y, static_cast<size_t>(max_m * rows) * 4), "y");
        bench::fill_f16<<<1024, 256, 0, stream>>>(x, static_cast<uint64_t>(max_m * g.k), 3);
        ck(cudaGetLastError(), "fill");
        for (int m : tokens) {
            if (m < 1 || m > minfer::cuda::kNarrowMaxTokens) continue;
            double med[2] = {0, 0};
            for (int narrow = 0; narrow < 2; ++narrow) {
                std::vector<float> ms;
                for (int r = -2; r < reps; ++r) {  // two warm-ups
                    const __half* base = w[static_cast<size_t>((r + 2) % copies)];
                    const __half* ws[3];
                    float* ys[3];
                    int64_t off = 0;
                    for (size_t i = 0; i < g.rows.size(); ++i) {
                        ws[i] = base + off * g.k;
                        ys[i] = y + off * m;
                        off += g.rows[i];
                    }
                    const float t = bench::time_ms(stream, e0, e1, [&] {
                        if (narrow) {
                            minfer::cuda::gemm_narrow(x, m, g.k, static_cast<int>(g.rows.size()), ws, g.rows.data(), ys, false, scratch,
                                                      stream);
                        } else {
                            for (size_t i = 0; i < g.rows.size(); ++i)
                                cublas.gemm(x, ws[i], ys[i], m, static_cast<int>(g.rows[i]), static_cast<int>(g.k));
                        }
                    });
                    if (r >= 0) ms.push_back(t);
                }
                std::sort(ms.begin(), ms.end());
                med[narrow] = ms[ms.size() / 2] * 1e3;
            }
            std::printf("| %s | %d | %.1f | %.0f | %.1f | %.0f | %.2fx |\n", g.name, m, med[0], w_bytes / (med[0] * 1e3), med[1],
                        w_bytes / (med[1] * 1e3), med[0] / med[1]);
        }
        for (__half* p : w) ck(cudaFree(p), "free");
        ck(cudaFree(x), "free");
        ck(cudaFree(y), "free");
    }
    return 0;
}

int main(int argc, char** argv) {
    try {
        return run(argc, argv);
    } catch (const minfer::Error& e) {
        std::fprintf(stderr, "bench_gemm_narrow: %s\n", e.what());
        return 1;
    }
}
