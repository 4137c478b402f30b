// What a decode step pays to move from one operation to the next, two ways (a microbenchmark, not a test:
// run build/tests/bench_barrier on a GPU):
//  * a launch boundary: a CUDA graph of N kernels one after another on a stream, each launched as a
//    programmatic dependent (cuda/pdl.cuh: pdl_wait, then pdl_launch_dependents, as the decode kernels
//    do) or as a plain launch; per kernel, the graph's time / N;
//  * a grid-wide barrier inside one persistent kernel (every CTA resident), N phases apart: a counter
//    and a generation word in global memory (acquire/release atomics, the last arrival resets the count
//    and bumps the generation), and cooperative groups' grid.sync() under a cooperative launch.
// Each phase or kernel does the same token work: every CTA reads the word the previous phase's CTA
// blockIdx - 1 wrote and writes its own, so a phase depends on the one before it through memory, and
// the final words are checked (a barrier that lets a CTA run ahead leaves a wrong sum).
// The figure this was written for: whether a persistent per-layer decode kernel (CTAs moving from one
// matrix's rows to the next behind a barrier) could beat the programmatic launches of today's step,
// whose mat-vecs pay 3-7 µs of fixed cost each (docs/perf.md).
#include <cooperative_groups.h>
#include <cuda/atomic>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench_common.cuh"
#include "cuda/pdl.cuh"

namespace {

using bench::ck;
namespace cg = cooperative_groups;

// One phase's token work: word[b] = word[b - 1 (mod grid)] + 1, read before any CTA of this phase
// writes (the words are double-buffered by phase parity).
__device__ __forceinline__ void phase_work(unsigned* words, int phase, unsigned grid) {
    if (threadIdx.x != 0) return;
    const unsigned b = blockIdx.x;
    const unsigned* src = words + (phase & 1) * grid;
    unsigned* dst = words + ((phase + 1) & 1) * grid;
    dst[b] = src[(b + grid - 1) % grid] + 1;
}

__global__ void chain_kernel(unsigned* words, int phase) {
    minfer::cuda::pdl_wait();
    minfer::cuda::pdl_launch_dependents();
    phase_work(words, phase, gridDim.x);
}

// The counter barrier: bar[0] counts arrivals, bar[1] is the generation.
__device__ __forceinline__ void grid_barrier(unsigned* bar, unsigned grid) {
    __syncthreads();
    if (threadIdx.x == 0) {
        cuda::atomic_ref<unsigned, cuda::thread_scope_device> count(bar[0]), gen(bar[1]);
        const unsigned g = gen.load(cuda::memory_order_relaxed);
        if (count.fetch_add(1, cuda::memory_order_acq_rel) == grid - 1) {
            count.store(0, cuda::memory_order_relaxed);
            gen.store(g + 1, cuda::memory_order_release);
        } else {
            while (gen.load(cuda::memory_order_acquire) == g) {
            }
        }
    }
    __syncthreads();
}

__global__ void persistent_counter_kernel(unsigned* words, unsigned* bar, int phases) {
    for (int p = 0; p < phases; ++p) {
        phase_work(words, p, gridDim.x);
        grid_barrier(bar, gridDim.x);
    }
}

__global__ void persistent_cg_kernel(unsigned* words, int phases) {
    cg::grid_group grid = cg::this_grid();
    for (int p = 0; p < phases; ++p) {
        phase_work(words, p, gridDim.x);
        grid.sync();
    }
}

// After `phases` phases from zeros every word is `phases`.
bool words_ok(const unsigned* d_words, unsigned grid, int phases) {
    std::vector<unsigned> h(grid);
    ck(cudaMemcpy(h.data(), d_words + (phases & 1) * grid, grid * sizeof(unsigned), cudaMemcpyDeviceToHost), "read back");
    for (unsigned v : h)
        if (v != static_cast<unsigned>(phases)) return false;
    return true;
}

}  // namespace

int main(int argc, char** argv) {
    int phases = 2000, reps = 5;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--phases") && i + 1 < argc) phases = std::atoi(argv[++i]);
        else if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
        else {
            std::fprintf(stderr, "usage: bench_barrier [--phases N] [--reps R]\n");
            return 2;
        }
    }
    int dev = 0, sms = 0;
    ck(cudaGetDevice(&dev), "device");
    ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
    cudaDeviceProp prop{};
    ck(cudaGetDeviceProperties(&prop, dev), "properties");
    std::printf("device: %s, %d SMs; %d phases a run, best of %d runs\n\n", prop.name, sms, phases, reps);

    cudaStream_t stream;
    ck(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
    cudaEvent_t e0, e1;
    ck(cudaEventCreate(&e0), "event");
    ck(cudaEventCreate(&e1), "event");
    const unsigned max_grid = 16384;
    unsigned *words = nullptr, *bar = nullptr;
    ck(cudaMalloc(&words, 2 * max_grid * sizeof(unsigned)), "alloc");
    ck(cudaMalloc(&bar, 2 * sizeof(unsigned)), "alloc");
    auto reset = [&] {
        ck(cudaMemsetAsync(words, 0, 2 * max_grid * sizeof(unsigned), stream), "memset");
        ck(cudaMemsetAsync(bar, 0, 2 * sizeof(unsigned), stream), "memset");
        ck(cudaStreamSynchronize(stream), "sync");
    };

    std::printf("%-34s %8s %8s %12s %8s\n", "form", "grid", "threads", "us a step", "check");
    // Launch boundaries: grids of the decode step's kernels (1 CTA an SM; the 7B's o projection, 896 CTAs
    // of 4 warps; its joint gate/up, 9,472 of one warp).
    struct Shape {
        unsigned grid, threads;
    };
    const Shape chain_shapes[] = {{static_cast<unsigned>(sms), 128}, {896, 128}, {9472, 32}};
    for (const Shape& sh : chain_shapes) {
        for (bool pdl : {true, false}) {
            const int n = std::min(phases, 500);  // kernels in the graph
            cudaGraph_t g = nullptr;
            cudaGraphExec_t exec = nullptr;
            ck(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "capture");
            for (int p = 0; p < n; ++p) {
                if (pdl) ck(minfer::cuda::launch_pdl(chain_kernel, dim3(sh.grid), dim3(sh.threads), 0, stream, words, p), "launch");
                else chain_kernel<<<sh.grid, sh.threads, 0, stream>>>(words, p);
            }
            ck(cudaStreamEndCapture(stream, &g), "capture");
            ck(cudaGraphInstantiate(&exec, g, 0), "instantiate");
            float best = 1e30f;
            bool ok = true;
            for (int r = 0; r < reps; ++r) {
                reset();
                best = std::min(best, bench::time_ms(stream, e0, e1, [&] { ck(cudaGraphLaunch(exec, stream), "graph"); }));
                ok = ok && words_ok(words, sh.grid, n);
            }
            ck(cudaGraphExecDestroy(exec), "destroy");
            ck(cudaGraphDestroy(g), "destroy");
            std::printf("%-34s %8u %8u %12.3f %8s\n", pdl ? "graph, programmatic launches" : "graph, plain launches", sh.grid,
                        sh.threads, 1000.0 * best / n, ok ? "ok" : "WRONG");
        }
    }
    // Barriers: 1, 2, 4 and 8 CTAs an SM, all resident.
    for (unsigned per_sm : {1u, 2u, 4u, 8u}) {
        const unsigned grid = per_sm * static_cast<unsigned>(sms), threads = 128;
        int fit = 0;
        ck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, persistent_counter_kernel, threads, 0), "occupancy");
        if (static_cast<unsigned>(fit) < per_sm) continue;
        float best = 1e30f;
        bool ok = true;
        for (int r = 0; r < reps; ++r) {
            reset();
            best = std::min(best, bench::time_ms(stream, e0, e1, [&] {
                persistent_counter_kernel<<<grid, threads, 0, stream>>>(words, bar, phases);
                ck(cudaGetLastError(), "launch");
            }));
            ok = ok && words_ok(words, grid, phases);
        }
        std::printf("%-34s %8u %8u %12.3f %8s\n", "persistent, counter barrier", grid, threads, 1000.0 * best / phases, ok ? "ok" : "WRONG");
        ck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&fit, persistent_cg_kernel, threads, 0), "occupancy");
        if (static_cast<unsigned>(fit) < per_sm) continue;
        best = 1e30f;
        ok = true;
        for (int r = 0; r < reps; ++r) {
            reset();
            int ph = phases;
            unsigned* w = words;
            void* args[] = {&w, &ph};
            best = std::min(best, bench::time_ms(stream, e0, e1, [&] {
                ck(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(persistent_cg_kernel), dim3(grid), dim3(threads), args, 0, stream),
                   "cooperative launch");
            }));
            ok = ok && words_ok(words, grid, phases);
        }
        std::printf("%-34s %8u %8u %12.3f %8s\n", "persistent, cooperative grid.sync", grid, threads, 1000.0 * best / phases,
                    ok ? "ok" : "WRONG");
    }
    ck(cudaFree(words), "free");
    ck(cudaFree(bar), "free");
    return 0;
}
