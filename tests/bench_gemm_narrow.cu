// Microbenchmark of the narrow GEMM (cuda/gemm_narrow.cuh) against cuBLAS on the matmuls of a decode
// step of many sequences, 9 to 64 token rows: cuBLAS and the narrow GEMM on f16 weights (the f16 cache),
// and the narrow GEMM on q4_K and on q6_K blocks (random bytes: the timing does not depend on them).
//
//   build/tests/bench_gemm_narrow [--tokens 16,32,64] [--reps N] [--only TEXT]
//
// For each token count and each Qwen2.5-7B matmul group (q/k/v and gate/up as the forward runs them: one
// narrow launch; cuBLAS one call per matrix), the median of N (default 20) timed launches after a
// warm-up, each on its own copy of the weights in turn (copies enough to pass 256 MB, so the weights come
// from memory, not from the 50 MB L2). GB/s counts the weight bytes (f16 or quantized) once (the input
// and output are a few MB at most).
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
#include "quant/quant.h"

namespace {

using bench::ck;

struct Group {
    const char* name;
    std::vector<int64_t> rows;  // one to three matrices
    int64_t k;
};

}  // namespace

int run(int argc, char** argv) {
    std::vector<int> tokens = {16, 32, 64};
    int reps = 20;
    const char* only = "";  // groups whose name contains this
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--tokens") && i + 1 < argc) tokens = bench::int_list(argv[++i]);
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

    using minfer::quant::Type;
    constexpr int kVariants = 4;  // cuBLAS f16, narrow f16, narrow q4_K, narrow q6_K
    const Type types[kVariants] = {Type::F16, Type::F16, Type::Q4_K, Type::Q6_K};
    std::printf("| matmuls | tokens | cuBLAS f16 us (GB/s) | narrow f16 us (GB/s) | narrow q4_K us (GB/s) | narrow q6_K us (GB/s) | "
                "q4_K speed-up over cuBLAS |\n|---|---|---|---|---|---|---|\n");
    for (const Group& g : groups) {
        if (!std::strstr(g.name, only)) continue;
        int64_t rows = 0;
        for (int64_t r : g.rows) rows += r;
        // Per variant: its weights in enough copies to pass 256 MB (the f16 ones shared by the first two).
        size_t w_bytes[kVariants];
        int copies[kVariants];
        std::vector<uint8_t*> w[kVariants];
        for (int v = 0; v < kVariants; ++v) {
            w_bytes[v] = minfer::quant::row_bytes(types[v], g.k) * static_cast<size_t>(rows);
            copies[v] = static_cast<int>(std::max<size_t>(1, (size_t{256} << 20) / w_bytes[v] + 1));
            if (v == 1) {
                w[v] = w[0];
                continue;
            }
            for (int c = 0; c < copies[v]; ++c) {
                uint8_t* p = nullptr;
                ck(cudaMalloc(&p, w_bytes[v]), "weights");
                bench::fill_f16<<<1024, 256, 0, stream>>>(reinterpret_cast<__half*>(p), w_bytes[v] / 2, 10 + c);
                w[v].push_back(p);
            }
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
            double med[kVariants] = {};
            for (int v = 0; v < kVariants; ++v) {
                const size_t rb = minfer::quant::row_bytes(types[v], g.k);
                std::vector<float> ms;
                for (int r = -2; r < reps; ++r) {  // two warm-ups
                    const uint8_t* base = w[v][static_cast<size_t>((r + 2) % copies[v])];
                    const __half* ws[3];
                    const void* wq[3];
                    Type ts[3];
                    float* ys[3];
                    int64_t off = 0;
                    for (size_t i = 0; i < g.rows.size(); ++i) {
                        ws[i] = reinterpret_cast<const __half*>(base + off * rb);
                        wq[i] = base + off * rb;
                        ts[i] = types[v];
                        ys[i] = y + off * m;
                        off += g.rows[i];
                    }
                    const int nseg = static_cast<int>(g.rows.size());
                    const float t = bench::time_ms(stream, e0, e1, [&] {
                        if (v == 0) {
                            for (int i = 0; i < nseg; ++i) cublas.gemm(x, ws[i], ys[i], m, static_cast<int>(g.rows[i]), static_cast<int>(g.k));
                        } else if (v == 1) {
                            minfer::cuda::gemm_narrow(x, m, g.k, nseg, ws, g.rows.data(), ys, false, scratch, stream);
                        } else {
                            minfer::cuda::gemm_narrow_quant(x, m, g.k, nseg, ts, wq, g.rows.data(), ys, false, scratch, stream);
                        }
                    });
                    if (r >= 0) ms.push_back(t);
                }
                med[v] = bench::median(ms) * 1e3;
            }
            std::printf("| %s | %d", g.name, m);
            for (int v = 0; v < kVariants; ++v) std::printf(" | %.1f (%.0f)", med[v], w_bytes[v] / (med[v] * 1e3));
            std::printf(" | %.2fx |\n", med[0] / med[2]);
        }
        for (int v = 0; v < kVariants; ++v)
            if (v != 1)
                for (uint8_t* p : w[v]) ck(cudaFree(p), "free");
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
