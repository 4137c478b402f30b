// Microbenchmark of the decode mat-vec (cuda::matvec) against device memory bandwidth.
//
//   build/tests/bench_matvec [--types q4_K,q8_0] [--old] [--reps N] [--cols N] [--hot]
//
// First the device-to-device copy bandwidth (cudaMemcpy of 2 GiB, read + write bytes, median of 20).
// Then, for each type and each of the Qwen2.5-7B decode shapes (rows x cols = out x in), the weights are
// random valid blocks (random bytes, f16 scale fields set to values in [1e-3, 1e-2]), in as many
// copies as it takes to exceed the 60 MB L2 four times; launches rotate over the copies. Each launch is
// timed by its own pair of events (a spin kernel first keeps the queue full, so host launch gaps stay
// out), the median of N (default 60) is reported, after warm-up. GB/s counts weight + x + y bytes.
// `err` is the relative L2 difference from the reference kernel (matvec_reference) on the same data;
// the int8 columns time matvec_xq on x quantized beforehand (q4_0, q8_0, q4_K, q6_K, q5_K, and q4_1 and q5_1
// where built with MINFER_DP4A_Q41_Q51; its err includes the
// input's quantization; --cols N times it over N inputs in one launch, the few-token path, its err that
// of input 0 and its GB/s counting the weights once);
// Type q8_0g: q8_0 blocks regrouped on the device for the mat-vecs (cuda::q80_group, MINFER_Q80_GROUPS) after
// the reference kernel has read them. Type q6_kp: q6_K blocks copied padded on the device (cuda::q6k_pad,
// MINFER_Q6K_PAD), int8 column only (its one reader), its GB/s counting the copy's bytes; q2_kp and q3_kp the
// same for q2_K and q3_K copied arranged (cuda::k23_arrange, MINFER_K23_COPY).
// --old also times that reference kernel (the previous decode mat-vec); --hot times every launch on copy 0
// (a matrix smaller than the L2 then comes from it: what a kernel costs apart from HBM). A short table is
// printed last.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "cuda/block_bits.cuh"  // mv::q6kp_row_bytes
#include "cuda/kernels.cuh"
#include "quant/quant.h"
#include "quant/types.h"

namespace {

using minfer::quant::Type;

using bench::ck;
using bench::unit;

// Random bytes everywhere.
__global__ void fill_bytes(uint32_t* p, uint64_t n_words, uint64_t seed) {
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n_words; i += uint64_t(gridDim.x) * blockDim.x)
        p[i] = static_cast<uint32_t>(bench::mix(seed * 0x9E3779B97F4A7C15ull + i));
}
// Benign scales: the f16 fields at byte offsets f0, f1 (-1: none) of every block to [1e-3, 1e-2); q8_K's
// f32 scale likewise.
__global__ void fix_blocks(uint8_t* p, uint64_t n_blocks, int block_bytes, int f0, int f1, bool f32_scale, uint64_t seed) {
    for (uint64_t b = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; b < n_blocks; b += uint64_t(gridDim.x) * blockDim.x) {
        uint8_t* blk = p + b * block_bytes;
        const float v0 = 1e-3f + 9e-3f * unit(seed + 2 * b), v1 = 1e-3f + 9e-3f * unit(seed + 2 * b + 1);
        if (f32_scale) {
            std::memcpy(blk, &v0, 4);
            continue;
        }
        const uint16_t h0 = __half_as_ushort(__float2half_rn(v0)), h1 = __half_as_ushort(__float2half_rn(v1));
        if (f0 >= 0) std::memcpy(blk + f0, &h0, 2);
        if (f1 >= 0) std::memcpy(blk + f1, &h1, 2);
    }
}
// Plain types: values in [-1, 1).
__global__ void fill_plain(uint8_t* p, uint64_t n, int type, uint64_t seed) {
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x) {
        const float v = 2.0f * unit(seed + i) - 1.0f;
        if (type == 0) reinterpret_cast<float*>(p)[i] = v;
        else if (type == 1) reinterpret_cast<uint16_t*>(p)[i] = __half_as_ushort(__float2half_rn(v));
        else reinterpret_cast<uint16_t*>(p)[i] = static_cast<uint16_t>(__float_as_uint(v) >> 16);
    }
}
__global__ void fill_x(float* x, int64_t n, uint64_t seed) {
    for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x) {
        // roughly normal (sum of four uniforms), with a few large activations as real models have
        const float u = unit(seed + 4 * i) + unit(seed + 4 * i + 1) + unit(seed + 4 * i + 2) + unit(seed + 4 * i + 3) - 2.0f;
        x[i] = (i % 331 == 7) ? 200.0f * u : u;
    }
}
__global__ void spin(uint64_t ns) {
    uint64_t t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    } while (t - t0 < ns);
}

struct TypeCase {
    Type t;
    int f0, f1;  // f16 scale fields (byte offsets in a block)
    bool f32_scale;
};
const TypeCase kTypes[] = {
    {Type::F32, -1, -1, false},  {Type::F16, -1, -1, false},  {Type::BF16, -1, -1, false}, {Type::Q4_0, 0, -1, false},
    {Type::Q4_1, 0, 2, false},   {Type::Q5_0, 0, -1, false},  {Type::Q5_1, 0, 2, false},   {Type::Q8_0, 0, -1, false},
    {Type::Q2_K, 80, 82, false}, {Type::Q3_K, 108, -1, false}, {Type::Q4_K, 0, 2, false},  {Type::Q5_K, 0, 2, false},
    {Type::Q6_K, 208, -1, false}, {Type::Q8_1, 0, 2, false},   {Type::Q8_K, -1, -1, true},
    {Type::Q8_0_GROUPED_DEVICE, 0, -1, false},  // "q8_0g": q8_0 blocks regrouped on the device (cuda::q80_group)
    {Type::Q6_K_PADDED_DEVICE, 208, -1, false},   // "q6_kp": q6_K blocks copied padded on the device (cuda::q6k_pad)
    {Type::Q2_K_ARRANGED_DEVICE, 80, 82, false},  // "q2_kp": q2_K blocks copied arranged on the device (cuda::k23_arrange)
    {Type::Q3_K_ARRANGED_DEVICE, 108, -1, false}, // "q3_kp": q3_K blocks the same
};
struct Shape {
    int64_t rows, cols;
    const char* what;
};
const Shape kShapes[] = {
    {3584, 3584, "attn q/o"}, {512, 3584, "attn k/v"}, {18944, 3584, "ffn gate/up"}, {3584, 18944, "ffn down"}, {152064, 3584, "output"},
};

using bench::median;

using Launch = void (*)(Type, const void*, int64_t, int64_t, const float*, float*, cudaStream_t);

// Median microseconds of `reps` launches rotating over the weight copies.
float time_launches(Launch fn, Type t, const uint8_t* w, uint64_t copy_stride, int copies, int64_t rows, int64_t cols,
                    const float* x, float* y, int reps, cudaStream_t s) {
    for (int i = 0; i < 5; ++i) fn(t, w + (i % copies) * copy_stride, rows, cols, x, y, s);
    std::vector<cudaEvent_t> ev(reps + 1);
    for (auto& e : ev) ck(cudaEventCreate(&e), "cudaEventCreate");
    spin<<<1, 1, 0, s>>>(3'000'000);
    for (int i = 0; i < reps; ++i) {
        ck(cudaEventRecord(ev[i], s), "cudaEventRecord");
        fn(t, w + ((i + 5) % copies) * copy_stride, rows, cols, x, y, s);
    }
    ck(cudaEventRecord(ev[reps], s), "cudaEventRecord");
    ck(cudaEventSynchronize(ev[reps]), "launches");
    std::vector<float> us(reps);
    for (int i = 0; i < reps; ++i) {
        float ms = 0;
        ck(cudaEventElapsedTime(&ms, ev[i], ev[i + 1]), "cudaEventElapsedTime");
        us[i] = 1000.0f * ms;
    }
    for (auto& e : ev) cudaEventDestroy(e);
    return median(us);
}

void matvec_new(Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t s) {
    minfer::cuda::matvec(t, w, rows, cols, x, y, s);
}
// The int8 path: x quantized once (outside the timing) into g_xq.
// --cols N: N inputs in one launch (the few-token path), y [N][rows].
void* g_xq = nullptr;
int g_ncols = 1;
void matvec_i8(Type t, const void* w, int64_t rows, int64_t cols, const float*, float* y, cudaStream_t s) {
    minfer::cuda::matvec_xq(t, 1, &w, &rows, cols, g_xq, &y, s, false, g_ncols);
}
void matvec_old(Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t s) {
    minfer::cuda::matvec_reference(t, w, rows, cols, x, y, s);
}

}  // namespace

int main(int argc, char** argv) {
    std::vector<std::string> only;  // --types
    bool old = false, hot = false;
    int reps = 60;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--types") && i + 1 < argc) {
            for (const char* p = argv[++i]; *p;) {
                const char* e = std::strchr(p, ',');
                const size_t n = e ? static_cast<size_t>(e - p) : std::strlen(p);
                only.emplace_back(p, n);
                p += n + (e ? 1 : 0);
            }
        }
        else if (!std::strcmp(argv[i], "--old")) old = true;
        else if (!std::strcmp(argv[i], "--hot")) hot = true;
        else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(5, std::atoi(argv[++i]));
        else if (!std::strcmp(argv[i], "--cols") && i + 1 < argc) g_ncols = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: %s [--types q4_K,q8_0] [--old] [--reps N] [--cols N] [--hot]\n", argv[0]);
            return 2;
        }
    }
    if (g_ncols < 1 || g_ncols > minfer::cuda::kMatvecMaxCols) {
        std::fprintf(stderr, "--cols: 1 to %d\n", minfer::cuda::kMatvecMaxCols);
        return 2;
    }
    int dev = 0;
    cudaDeviceProp prop{};
    ck(cudaGetDevice(&dev), "cudaGetDevice");
    ck(cudaGetDeviceProperties(&prop, dev), "cudaGetDeviceProperties");
    std::printf("device: %s, %d SMs, %.0f MB L2\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize / 1e6);
    cudaStream_t s;
    ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), "cudaStreamCreate");

    // Copy bandwidth.
    double copy_gbs = 0;
    {
        const size_t n = size_t(2) << 30;
        void *a = nullptr, *b = nullptr;
        ck(cudaMalloc(&a, n), "cudaMalloc");
        ck(cudaMalloc(&b, n), "cudaMalloc");
        fill_bytes<<<4096, 256, 0, s>>>(static_cast<uint32_t*>(a), n / 4, 1);
        cudaEvent_t e0, e1;
        ck(cudaEventCreate(&e0), "cudaEventCreate");
        ck(cudaEventCreate(&e1), "cudaEventCreate");
        std::vector<float> ms;
        for (int i = 0; i < 23; ++i) {
            const float t = bench::time_ms(s, e0, e1, [&] { ck(cudaMemcpyAsync(b, a, n, cudaMemcpyDeviceToDevice, s), "cudaMemcpyAsync"); });
            if (i >= 3) ms.push_back(t);
        }
        copy_gbs = 2.0 * n / (median(ms) * 1e-3) / 1e9;
        std::printf("device-to-device copy: %.0f GB/s (2 GiB, read + write, median of 20)\n\n", copy_gbs);
        cudaFree(a);
        cudaFree(b);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
    }

    std::vector<std::string> table;
    char line[256];
    std::snprintf(line, sizeof line, "%-6s %-15s %-12s %9s %8s %6s %9s %9s %8s %9s%s", "type", "rows x cols", "shape", "us", "GB/s",
                  "%copy", "err", "int8 us", "GB/s", "err", old ? "    old us  old GB/s" : "");
    table.push_back(line);
    uint64_t seed = 1000;
    for (const TypeCase& tc : kTypes) {
        // q8_0g: filled and checked as q8_0 (the reference kernel reads the file's layout), then regrouped
        // q6_kp: filled and checked as q6_K, then copied padded (the int8 column reads the copies)
        // q2_kp, q3_kp: filled and checked as q2_K, q3_K, then copied arranged (the int8 column reads the copies)
        const bool grouped = tc.t == Type::Q8_0_GROUPED_DEVICE, q6p = tc.t == Type::Q6_K_PADDED_DEVICE;
        const bool k23 = tc.t == Type::Q2_K_ARRANGED_DEVICE || tc.t == Type::Q3_K_ARRANGED_DEVICE, pad = q6p || k23;
        const Type st = grouped ? Type::Q8_0 : q6p ? Type::Q6_K : tc.t == Type::Q2_K_ARRANGED_DEVICE ? Type::Q2_K
                        : tc.t == Type::Q3_K_ARRANGED_DEVICE ? Type::Q3_K : tc.t;  // the type of the bytes filled
        const auto& info = minfer::quant::type_info(st);
        const char* name = grouped ? "q8_0g" : q6p ? "q6_kp" : tc.t == Type::Q2_K_ARRANGED_DEVICE ? "q2_kp"
                           : tc.t == Type::Q3_K_ARRANGED_DEVICE ? "q3_kp" : info.name;
        if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
        for (const Shape& sh : kShapes) {
            const uint64_t row_bytes = minfer::quant::row_bytes(st, sh.cols);
            const uint64_t bytes = row_bytes * sh.rows, stride = (bytes + 255) / 256 * 256;
            const int copies = static_cast<int>(std::max<uint64_t>(2, (240'000'000 + bytes - 1) / bytes));
            const int timed_copies = hot ? 1 : copies;  // the launches rotate over this many
            uint8_t* w = nullptr;
            float *x = nullptr, *y = nullptr, *yr = nullptr;
            ck(cudaMalloc(&w, stride * copies), "cudaMalloc weights");
            ck(cudaMalloc(&x, g_ncols * sh.cols * sizeof(float)), "cudaMalloc x");
            ck(cudaMalloc(&y, g_ncols * sh.rows * sizeof(float)), "cudaMalloc y");
            ck(cudaMalloc(&yr, sh.rows * sizeof(float)), "cudaMalloc y");
            if (info.block_elems == 1) {
                fill_plain<<<4096, 256, 0, s>>>(w, stride * copies / info.block_bytes, static_cast<int>(st), seed);
            } else {
                fill_bytes<<<4096, 256, 0, s>>>(reinterpret_cast<uint32_t*>(w), stride * copies / 4, seed);
                for (int c = 0; c < copies; ++c)
                    fix_blocks<<<1024, 256, 0, s>>>(w + c * stride, bytes / info.block_bytes, info.block_bytes, tc.f0, tc.f1,
                                                    tc.f32_scale, seed + 7 * c);
            }
            fill_x<<<64, 256, 0, s>>>(x, g_ncols * sh.cols, seed + 1);  // column 0 is what the reference kernel multiplies
            seed += 100;
            ck(cudaGetLastError(), "fill");

            // Agreement with the reference kernel on copy 0 (every row written: y is poisoned first).
            matvec_old(st, w, sh.rows, sh.cols, x, yr, s);
            if (grouped)
                for (int c = 0; c < copies; ++c) minfer::cuda::q80_group(w + c * stride, sh.rows, sh.cols, s);
            // the int8 column's weights: the padded or arranged copies (q6_kp, q2_kp, q3_kp), else w
            uint8_t* w8 = w;
            uint64_t bytes8 = bytes, stride8 = stride;
            if (pad) {
                bytes8 = static_cast<uint64_t>(sh.rows * (q6p ? minfer::cuda::mv::q6kp_row_bytes(sh.cols)
                                                              : minfer::cuda::mv::k23p_row_bytes(tc.t, sh.cols)));
                stride8 = (bytes8 + 255) / 256 * 256;
                ck(cudaMalloc(&w8, stride8 * copies), "cudaMalloc padded weights");
                for (int c = 0; c < copies; ++c) {
                    if (q6p) minfer::cuda::q6k_pad(w + c * stride, w8 + c * stride8, sh.rows, sh.cols, s);
                    else minfer::cuda::k23_arrange(st, w + c * stride, w8 + c * stride8, sh.rows, sh.cols, s);
                }
            }
            ck(cudaMemsetAsync(y, 0xff, sh.rows * sizeof(float), s), "poison");
            if (!pad) matvec_new(tc.t, w, sh.rows, sh.cols, x, y, s);
            else matvec_old(st, w, sh.rows, sh.cols, x, y, s);  // no f32-input kernel reads the copy
            std::vector<float> a(sh.rows), b(sh.rows);
            ck(cudaMemcpyAsync(a.data(), y, sh.rows * sizeof(float), cudaMemcpyDeviceToHost, s), "download");
            ck(cudaMemcpyAsync(b.data(), yr, sh.rows * sizeof(float), cudaMemcpyDeviceToHost, s), "download");
            ck(cudaStreamSynchronize(s), "mat-vec");
            double num = 0, den = 0;
            for (int64_t i = 0; i < sh.rows; ++i) {
                const double d = double(a[i]) - b[i];
                num += std::isfinite(a[i]) ? d * d : INFINITY;
                den += double(b[i]) * b[i];
            }
            const double err = std::sqrt(num / std::max(den, 1e-300));

            const double moved = double(bytes) + 4.0 * sh.cols + 4.0 * sh.rows;
            char shape[32];
            std::snprintf(shape, sizeof shape, "%lldx%lld", static_cast<long long>(sh.rows), static_cast<long long>(sh.cols));
            if (pad) {
                std::snprintf(line, sizeof line, "%-6s %-15s %-12s %9s %8s %6s %9s", name, shape, sh.what, "-", "-", "-", "-");
            } else {
                const float us = time_launches(matvec_new, tc.t, w, stride, timed_copies, sh.rows, sh.cols, x, y, reps, s);
                const double gbs = moved / (us * 1e-6) / 1e9;
                std::snprintf(line, sizeof line, "%-6s %-15s %-12s %9.2f %8.0f %5.0f%% %9.1e", name, shape, sh.what, us, gbs,
                              100.0 * gbs / copy_gbs, err);
            }
            std::string row = line;
            if (minfer::cuda::matvec_int8_takes(tc.t, g_ncols, sh.cols)) {
                ck(cudaMalloc(&g_xq, static_cast<size_t>(g_ncols * minfer::cuda::matvec_xq_bytes(sh.cols))), "cudaMalloc xq");
                minfer::cuda::quantize_x(x, nullptr, sh.cols, g_xq, s, g_ncols);
                ck(cudaMemsetAsync(y, 0xff, sh.rows * sizeof(float), s), "poison");
                matvec_i8(tc.t, w8, sh.rows, sh.cols, x, y, s);
                ck(cudaMemcpyAsync(a.data(), y, sh.rows * sizeof(float), cudaMemcpyDeviceToHost, s), "download");
                ck(cudaStreamSynchronize(s), "int8 mat-vec");
                double n8 = 0;
                for (int64_t i = 0; i < sh.rows; ++i) {
                    const double d = double(a[i]) - b[i];
                    n8 += std::isfinite(a[i]) ? d * d : INFINITY;
                }
                const float us8 = time_launches(matvec_i8, tc.t, w8, stride8, timed_copies, sh.rows, sh.cols, x, y, reps, s);
                const double moved8 = double(bytes8) + g_ncols * (double(minfer::cuda::matvec_xq_bytes(sh.cols)) + 4.0 * sh.rows);
                std::snprintf(line, sizeof line, " %9.2f %8.0f %9.1e", us8, moved8 / (us8 * 1e-6) / 1e9, std::sqrt(n8 / std::max(den, 1e-300)));
                row += line;
                cudaFree(g_xq);
                g_xq = nullptr;
            } else {
                std::snprintf(line, sizeof line, " %9s %8s %9s", "-", "-", "-");
                row += line;
            }
            if (old && !grouped) {
                // the reference kernel reads the file's layout: the type of the bytes filled (the copies' rows
                // time it on those bytes)
                const float ous = time_launches(matvec_old, st, w, stride, timed_copies, sh.rows, sh.cols, x, yr, reps, s);
                std::snprintf(line, sizeof line, " %9.2f %9.0f", ous, moved / (ous * 1e-6) / 1e9);
                row += line;
            }
            std::printf("%s\n", row.c_str());
            std::fflush(stdout);
            table.push_back(row);
            if (w8 != w) cudaFree(w8);
            cudaFree(w);
            cudaFree(x);
            cudaFree(y);
            cudaFree(yr);
        }
    }
    ck(cudaStreamDestroy(s), "cudaStreamDestroy");
    std::printf("\ncopy bandwidth %.0f GB/s; mat-vec, median of %d launches %s:\n", copy_gbs, reps,
                hot ? "on one weight copy (--hot: L2-resident where it fits)" : "over rotating weight copies");
    for (const auto& r : table) std::printf("%s\n", r.c_str());
    return 0;
}
