// The decode mat-vec y[r] = dot(dequant(W row r), x) for every weight type of the CUDA backend, and its
// launcher. Three families:
//
//  * quantized types (q4_0 .. q6_K): the weights are the A operand of f16 tensor-core MMAs
//    (mma.m16n8k16, f32 accumulation). Block codes become small integers that f16 holds exactly (with
//    the K-quants' integer sub-block scales folded in where the product stays exact); x is split per
//    256-column k-tile into x*s = hi + lo (two f16 values, about 22 significant bits, s a power of two
//    that keeps |x*s| < 2^15, so nothing overflows and small values keep their precision). Every
//    product is exact and every sum is f32: the result is an f32-accurate dot product. The tensor cores
//    do the multiply-adds, so the CUDA cores spend about 1 to 2 instructions per weight on unpacking
//    codes, which is what lets 2- to 5-bit weights stream at memory speed: an f32 FMA per weight plus
//    its conversion needs 3 or more, while at 3.4 TB/s of 4-bit data the H200 can issue about 5 per
//    weight (about 3 for 2-bit data), overheads included. Design, tiling and costs: cuda/matvec_impl.cuh.
//  * the int8 family (q4_0, q8_0, q4_K, q6_K, through matvec_xq): the same kernel skeleton with the input
//    quantized once (quantize_x, or the RMSNorm before it) as two int8 digits per value and the stored
//    codes fed to s8/u8 MMAs with exact s32 sums: fewer instructions per weight, about 15 bits of input;
//    and over 2 to 8 inputs at once (a few tokens; matvec_xq's ncols), each weight read once for all.
//    Over one input the same integer sums are taken by dp4a instead, without tensor cores or a ring:
//    q4_K, q5_K and q4_0 (rows of whole 256-column groups) by matvec_dp4a_kernel (16-byte units
//    loaded straight into registers, many CTAs an SM; on the H200 q4_K 20% faster decode, q4_0 36%
//    faster than staged), q6_K's padded copies (mv::kQ6_KP, made at load: 224-byte blocks whose codes
//    load straight into registers; the output projection 1.31x faster than from the file's bytes), q8_0
//    regrouped in place or copied grouped (mv::kQ8_0G: each block's codes 16-byte aligned) and q5_0's
//    grouped copies (mv::kQ5_0G, the only int8 path q5_0 has), q2_K's and q3_K's copies with each input
//    block's codes together (mv::kQ2_KP, kQ3_KP: their only int8 path), q4_1 and q5_1 on the file's blocks
//    (4- and 8-byte aligned: two 16-byte units each; built with -DMINFER_DP4A_Q41_Q51=1, off until
//    measured), and q6_K without a copy on launches of
//    65,536 rows or more (the output projection: aligned 8-byte words around its 2-byte aligned fields,
//    11% faster there); q6_K's other launches, q8_0 without a grouped layout and q4_0 on other rows by
//    matvec_staged_kernel (their 2-byte aligned blocks staged per warp through shared memory).
//  * f32, f16, bf16: one 16-byte load per 4 or 8 weights and an f32 FMA per weight on the CUDA cores.
//  * q8_1, q8_K (and nothing else): the plain per-8-element reference kernel (matvec_reference).
//
// Everything is asynchronous on `stream`, allocates nothing and launches one kernel (a programmatic
// dependent, cuda/pdl.cuh): graph-capturable.
#include <cuda_fp16.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dequant.cuh"
#include "cuda/kernels.cuh"
#include "cuda/matvec_impl.cuh"

namespace minfer::cuda {

template <> struct Geometry<mv::kQ8_0G> { static constexpr int elems = 32, bytes = sizeof(quant::BlockQ8_0); };

namespace {

// dispatch_type (cuda/dequant.cuh) for the mat-vecs, which also read q8_0 grouped (mv::kQ8_0G) as a type
// of its own.
template <class F>
bool dispatch_matvec_type(Type t, F&& f) {
    if (t != mv::kQ8_0G) return dispatch_type(t, f);
    f(std::integral_constant<Type, mv::kQ8_0G>{});
    return true;
}

using namespace mv;
std::atomic<uint64_t> g_q6kp_launches{0};  // q6kp_matvec_launches
std::atomic<uint64_t> g_q80g_launches{0};  // q80g_matvec_launches
std::atomic<uint64_t> g_q50g_launches{0};  // q50g_matvec_launches
std::atomic<uint64_t> g_k23p_launches{0};  // k23p_matvec_launches
std::atomic<uint64_t> g_q41_q51_launches{0};  // q41_q51_matvec_launches
std::atomic<uint64_t> g_pair_launches{0};  // matvec_pair_launches
static_assert(kMatvecMaxCols == kColsN, "the forward's few-token chunks are what one launch takes");

// ---- the reference kernel ---------------------------------------------------------------------------------
// A block of 8 warps takes 8 / wr rows, wr warps per row (split over K); each lane dequantizes 8
// consecutive elements per step with deq8 (the bit-exact dequantizer of the f16 path) and accumulates
// in f32. Simple and slow (it was the decode mat-vec before this file): it serves q8_1 and q8_K, which
// only appear as activation formats, and is the baseline bench_matvec compares against.
constexpr int kRefWarps = 8;
template <Type T>
__global__ __launch_bounds__(32 * kRefWarps) void matvec_ref_kernel(const uint8_t* w, int64_t rows, int64_t cols,
                                                                    const float* x, float* y, int wr, bool accumulate) {
    __shared__ float partial[kRefWarps];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, rows_per_block = kRefWarps / wr;
    const int64_t r = static_cast<int64_t>(blockIdx.x) * rows_per_block + warp / wr;
    const int part = warp % wr;
    float acc = 0.0f;
    if (r < rows) {
        const uint8_t* row = w + r * row_bytes_of<T>(cols);
        for (int64_t e0 = (static_cast<int64_t>(part) * 32 + lane) * 8; e0 < cols; e0 += 256 * wr) {
            float v[8];
            deq8<T>(row, e0, v);
            const float4 a = *reinterpret_cast<const float4*>(x + e0), b = *reinterpret_cast<const float4*>(x + e0 + 4);
            acc += v[0] * a.x + v[1] * a.y + v[2] * a.z + v[3] * a.w + v[4] * b.x + v[5] * b.y + v[6] * b.z + v[7] * b.w;
        }
    }
    acc = warp_sum(acc);
    if (lane == 0) partial[warp] = acc;
    __syncthreads();
    if (threadIdx.x < rows_per_block) {
        const int64_t rr = static_cast<int64_t>(blockIdx.x) * rows_per_block + threadIdx.x;
        float sum = 0.0f;
        for (int i = 0; i < wr; ++i) sum += partial[threadIdx.x * wr + i];
        if (rr < rows) y[rr] = accumulate ? y[rr] + sum : sum;
    }
}

// Warps per row: about two 256-element steps per warp, a power of two up to 8.
int ref_split(int64_t cols) {
    const int64_t steps = (cols + 255) / 256;
    int wr = 1;
    while (wr < 8 && steps >= 4 * wr) wr *= 2;
    return wr;
}

template <Type T>
void launch_ref(const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream, bool accumulate) {
    const int wr = ref_split(cols);
    matvec_ref_kernel<T><<<blocks_for(rows, kRefWarps / wr), 32 * kRefWarps, 0, stream>>>(static_cast<const uint8_t*>(w),
                                                                                           rows, cols, x, y, wr, accumulate);
}

// CTAs of the MMA kernel per SM by warps per CTA (index w), with the largest partials (0: does not fit).
// Sets the kernel's shared-memory limit to the device's once.
template <Type T, bool kI8, int kN>
const std::array<int, kMaxWarps + 1>& mma_occupancy() {
    static const std::array<int, kMaxWarps + 1> occupancy = [] {
        int dev = 0, optin = 0;
        check(cudaGetDevice(&dev), "cudaGetDevice");
        check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "cudaDeviceGetAttribute");
        check(cudaFuncSetAttribute(matvec_mma_kernel<T, kI8, kN>, cudaFuncAttributeMaxDynamicSharedMemorySize, optin),
              "mat-vec shared memory limit");
        std::array<int, kMaxWarps + 1> o{};
        for (int w = kWarps; w <= (kN > 1 ? kWarps : kMaxWarps); ++w) {
            const int smem = mma_smem_bytes<T, kI8, kN>(kN > 1 ? kMaxTilesPerCtaN : kMaxTilesPerCta, w);
            if (smem > optin) continue;
            check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o[static_cast<size_t>(w)], matvec_mma_kernel<T, kI8, kN>, 32 * w, smem),
                  "mat-vec occupancy");
        }
        if (o[kWarps] == 0) fail(MINFER_ERR_DEVICE, "CUDA mat-vec: the type %d kernel does not fit an SM", static_cast<int>(T));
        return o;
    }();
    return occupancy;
}

// kI8: the int8 family on xq (kN > 1: ncols inputs); otherwise x (and x_up).
template <Type T, bool kI8 = false, int kN = 1>
void launch_mma(const Segments& seg, int64_t cols, const float* x, const float* x_up, const uint8_t* xq, cudaStream_t stream,
                bool accumulate, int ncols = 1) {
    const int64_t rows = seg.end[seg.n - 1], tiles = (rows + kTileRows - 1) / kTileRows, sms = sm_count();
    const auto& occ = mma_occupancy<T, kI8, kN>();
    // Warps per CTA: each warp decodes its items one after another, a chain of dependent latencies, so the
    // kernel takes about as long as the most items any warp has. CTAs of kWarps warps, or wider ones when
    // that gives the warps fewer items (a matrix of few tiles leaves resident CTAs of kWarps idle; wider
    // ones, all resident at once, share the same tiles among more warps). The kernels compiled for 5 CTAs
    // of kWarps per SM (int8 q4_0 and q8_0: 20 warps an SM already) widen only when at least half the
    // resident CTAs would be idle: measured on the H200 (docs/perf.md), widening them otherwise cost 1-3%.
    const int64_t n_kt = (cols + kKTile - 1) / kKTile, max_per_cta = kN > 1 ? kMaxTilesPerCtaN : kMaxTilesPerCta;
    int warps = kWarps;
    MmaGrid g = mma_grid(rows, occ[kWarps] * sms, static_cast<int>(max_per_cta));
    auto items_per_warp = [&](const MmaGrid& gr, int w) { return (gr.maxk * n_kt + w - 1) / w; };
#ifndef MINFER_MATVEC_WIDE  // A/B knob: 0 keeps every CTA at kWarps warps
#define MINFER_MATVEC_WIDE 1
#endif
    const bool widen = kN == 1 && MINFER_MATVEC_WIDE && (min_blocks<T, kI8>() <= 4 || 2 * tiles <= occ[kWarps] * sms);
    for (int w = kWarps + 1; widen && w <= kMaxWarps; ++w) {
        const int64_t slots = occ[static_cast<size_t>(w)] * sms;
        if (slots == 0 || (tiles + slots - 1) / slots > max_per_cta) continue;
        const MmaGrid gw = mma_grid(rows, slots, static_cast<int>(max_per_cta));
        if (items_per_warp(gw, w) < items_per_warp(g, warps)) {
            warps = w;
            g = gw;
        }
    }
    // A programmatic dependent (cuda/pdl.cuh): its CTAs may start while the kernel before it (RMSNorm,
    // quantize_x) finishes, and fetch their first weights before pdl_wait.
    check(launch_pdl(matvec_mma_kernel<T, kI8, kN>, dim3(static_cast<unsigned>(g.grid)), dim3(32 * warps),
                     static_cast<size_t>(mma_smem_bytes<T, kI8, kN>(g.maxk, warps)), stream, seg, x, x_up, xq, static_cast<int>(cols),
                     row_bytes_of<T>(cols), tiles, g.maxk, accumulate, ncols),
          "matvec");
}

// q4_K on the int8 input, one column: the dp4a kernel (matvec_impl.cuh) unless built with
// -DMINFER_MATVEC_DP4A=0 (the A/B knob: the int8 MMA kernel then). A CTA per 4 rows (-DMINFER_DP4A_ROWS=N
// builds N): on the H200 2 rows per CTA was slower on every 7B shape (docs/perf.md). CTAs of one warp
// where that leaves at least MINFER_DP4A_MIN_WARPS warps in the grid (the joint gate/up launch and the
// output projection of the 7B: each thread then takes several chunks a row), else of 2 warps where that
// does, else of 4 (-DMINFER_DP4A_LANES=32, 64 or 128 forces one). Prefetching the next chunk pays on long
// rows (the down projection) and on grids of about one wave; MINFER_DP4A_PREFETCH = 0 or 1 forces it off
// or on.
#ifndef MINFER_MATVEC_DP4A
#define MINFER_MATVEC_DP4A 1
#endif
#ifndef MINFER_DP4A_ROWS
#define MINFER_DP4A_ROWS 4
#endif
#ifndef MINFER_DP4A_LANES
#define MINFER_DP4A_LANES 0
#endif
#ifndef MINFER_DP4A_MIN_WARPS
#define MINFER_DP4A_MIN_WARPS 3168
#endif
#ifndef MINFER_DP4A_PREFETCH
#define MINFER_DP4A_PREFETCH (-1)
#endif
// One-warp row groups kGang to a CTA (matvec_dp4a_kernel), the A/B knob of the tall launches' CTA count:
// 1 (the default) launches a CTA per group.
#ifndef MINFER_DP4A_GANG
#define MINFER_DP4A_GANG 1
#endif
// q6_K's direct-load format (DpQ6K) keeps 17 registers a row for its loads: R and the prefetch are its own
// knobs (-DMINFER_DP4A_Q6K_ROWS=N, -DMINFER_DP4A_Q6K_PREFETCH = -1 for the policy above, 0 or 1).
#ifndef MINFER_DP4A_Q6K_ROWS
#define MINFER_DP4A_Q6K_ROWS 4
#endif
#ifndef MINFER_DP4A_Q6K_PREFETCH
#define MINFER_DP4A_Q6K_PREFETCH 0
#endif
// F: the block format of matvec_dp4a_kernel (DpK<false> q4_K, DpK<true> q5_K, DpQ40 q4_0, DpQ6K q6_K,
// DpQ41 q4_1, DpQ51 q5_1, and the load's copies: DpQ6KP, DpQ80G, DpQ50G, DpQ2KP, DpQ3KP),
// whose threads take 32 columns of a row each (cols / 32 of them a row) whatever the format.
// The padded q6_K copy's kernel (DpQ6KP, MINFER_Q6K_PAD in cuda/model.cuh) has knobs of its own, the
// q4_K kernel's by default: -DMINFER_DP4A_Q6KP_ROWS=N, -DMINFER_DP4A_Q6KP_PREFETCH=-1 (the policy), 0 or 1,
// -DMINFER_DP4A_Q6KP_LANES=32, 64 or 128 (0: the launcher's choice below).
#ifndef MINFER_DP4A_Q6KP_ROWS
#define MINFER_DP4A_Q6KP_ROWS MINFER_DP4A_ROWS
#endif
#ifndef MINFER_DP4A_Q6KP_PREFETCH
#define MINFER_DP4A_Q6KP_PREFETCH MINFER_DP4A_PREFETCH
#endif
#ifndef MINFER_DP4A_Q6KP_LANES
#define MINFER_DP4A_Q6KP_LANES MINFER_DP4A_LANES
#endif
template <class F>
constexpr int kDp4aRows = std::is_same_v<F, DpQ6K>    ? MINFER_DP4A_Q6K_ROWS
                          : std::is_same_v<F, DpQ6KP> ? MINFER_DP4A_Q6KP_ROWS
                                                      : MINFER_DP4A_ROWS;
template <class F>
constexpr int kDp4aPrefetch = std::is_same_v<F, DpQ6K>    ? MINFER_DP4A_Q6K_PREFETCH
                              : std::is_same_v<F, DpQ6KP> ? MINFER_DP4A_Q6KP_PREFETCH
                                                          : MINFER_DP4A_PREFETCH;
template <class F, int kLanes>
bool dp4a_prefetch(int64_t rows, int64_t cols) {
    return kDp4aPrefetch<F> >= 0 ? kDp4aPrefetch<F> == 1 : rows < 8192 || cols / 32 > kLanes;  // units a row
}
template <int kLanes, class F>
void launch_dp4a_lanes(const Segments& seg, int64_t cols, const uint8_t* xq, cudaStream_t stream, bool accumulate) {
    constexpr int R = kDp4aRows<F>;
    static_assert(kTileRows % R == 0, "a CTA's rows lie in one segment: segments end on 16-row tiles");
    const int64_t rows = seg.end[seg.n - 1];
    const bool prefetch = dp4a_prefetch<F, kLanes>(rows, cols);
    constexpr int kGang = kLanes == 32 ? MINFER_DP4A_GANG : 1;
    check(launch_pdl(prefetch ? matvec_dp4a_kernel<F, R, kLanes, true, kGang> : matvec_dp4a_kernel<F, R, kLanes, false, kGang>,
                     dim3(blocks_for(rows, R * kGang)), dim3(kLanes * kGang), 0, stream, seg, xq, static_cast<int>(cols), accumulate),
          "matvec");
}
// First, the widest CTA whose grid is resident at once (one wave, by the kernel's occupancy): a grid of
// 1.36 waves (the 7B's 3,584-row launches in CTAs of 4 warps, 5 of which fit an SM by registers) ends on a
// tail wave as long as the first, and only resident CTAs load their first weights before pdl_wait,
// under the previous launch. Grids that fit at no width keep the rule above. On the H200 this took the
// 7B q4_K_M decode from 492.1 / 492.4 to 501.1 / 500.6 t/s (docs/perf.md, 2026-12-05, eleventh session:
// the q/o, joint q/k/v and down launches went from 4 warps to 2), though bench_matvec, timing one shape's
// launches alone, has the q4_K down 0.8 µs slower with it (the q6_K copy's down 1.5 µs faster).
// -DMINFER_DP4A_WAVES=0 is the A/B knob (the rule above alone).
#ifndef MINFER_DP4A_WAVES
#define MINFER_DP4A_WAVES 1
#endif
// CTAs of `kernel` (of `threads` threads) resident on the GPU at once: its occupancy by registers, times
// the SMs. Each caller queries it once per kernel instantiation.
template <class Kernel>
int64_t resident_ctas(Kernel kernel, int threads) {
    int o = 0;
    check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, kernel, threads, 0), "mat-vec occupancy");
    return int64_t{o} * sm_count();
}
template <class F, int kLanes, bool kPrefetch>
int64_t dp4a_resident() {
    constexpr int kGang = kLanes == 32 ? MINFER_DP4A_GANG : 1;
    static const int64_t n = resident_ctas(matvec_dp4a_kernel<F, kDp4aRows<F>, kLanes, kPrefetch, kGang>, kLanes * kGang);
    return n;
}
template <int kLanes>
using Lanes = std::integral_constant<int, kLanes>;
// The CTA width (32, 64 or 128 lanes) of a dp4a launch of `ctas` row groups: `forced` where a knob forces
// one, else the widest whose grid is one wave (fits(Lanes<L>{})), else the warp-count rule.
template <class Fits>
int dp4a_lanes(int forced, int64_t ctas, Fits fits) {
    return forced                                       ? forced
           : MINFER_DP4A_WAVES && fits(Lanes<128>{})   ? 128
           : MINFER_DP4A_WAVES && fits(Lanes<64>{})    ? 64
           : ctas >= MINFER_DP4A_MIN_WARPS             ? 32
           : 2 * ctas >= MINFER_DP4A_MIN_WARPS         ? 64
                                                       : 128;
}
template <class Go>
void with_lanes(int lanes, Go go) {
    if (lanes == 32) go(Lanes<32>{});
    else if (lanes == 64) go(Lanes<64>{});
    else go(Lanes<128>{});
}
template <class F>
void launch_dp4a(const Segments& seg, int64_t cols, const uint8_t* xq, cudaStream_t stream, bool accumulate) {
    const int64_t rows = seg.end[seg.n - 1], ctas = blocks_for(rows, kDp4aRows<F>);
    constexpr int kForced = std::is_same_v<F, DpQ6KP> ? MINFER_DP4A_Q6KP_LANES : MINFER_DP4A_LANES;
    auto fits = [&](auto l) {
        constexpr int L = decltype(l)::value;
        return ctas <= (dp4a_prefetch<F, L>(rows, cols) ? dp4a_resident<F, L, true>() : dp4a_resident<F, L, false>());
    };
    const int lanes = dp4a_lanes(kForced, ctas, fits);
    with_lanes(lanes, [&](auto l) { launch_dp4a_lanes<decltype(l)::value, F>(seg, cols, xq, stream, accumulate); });
}

// Two formats in one launch (matvec_dp4a_mixed_kernel: segments 0 .. n0 - 1 in F0, the rest in F1): a
// Q4_K_M layer's q4_K q and k beside its padded q6_K v, one launch where there were two (the 7B has 13
// such layers of 28). The CTA width by launch_dp4a's rule on the mixed kernel's own occupancy, the
// prefetch by F0's policy. -DMINFER_DP4A_MIXED=0 is the A/B knob (a launch per type, as before).
#ifndef MINFER_DP4A_MIXED
#define MINFER_DP4A_MIXED 1
#endif
template <class F0, class F1, int kLanes, bool kPrefetch>
int64_t dp4a_mixed_resident() {
    static const int64_t n = resident_ctas(matvec_dp4a_mixed_kernel<F0, F1, kDp4aRows<F0>, kLanes, kPrefetch>, kLanes);
    return n;
}
template <class F0, class F1>
void launch_dp4a_mixed(const Segments& seg, int n0, int64_t cols, const uint8_t* xq, cudaStream_t stream, bool accumulate) {
    static_assert(kDp4aRows<F0> == kDp4aRows<F1>, "one row count a CTA for both formats");
    constexpr int R = kDp4aRows<F0>;
    static_assert(kTileRows % R == 0, "a CTA's rows lie in one segment: segments end on 16-row tiles");
    const int64_t rows = seg.end[seg.n - 1], ctas = blocks_for(rows, R);
    const int lanes = dp4a_lanes(MINFER_DP4A_LANES, ctas, [&](auto l) {
        constexpr int L = decltype(l)::value;
        return ctas <= (dp4a_prefetch<F0, L>(rows, cols) ? dp4a_mixed_resident<F0, F1, L, true>() : dp4a_mixed_resident<F0, F1, L, false>());
    });
    with_lanes(lanes, [&](auto l) {
        constexpr int L = decltype(l)::value;
        check(launch_pdl(dp4a_prefetch<F0, L>(rows, cols) ? matvec_dp4a_mixed_kernel<F0, F1, R, L, true> : matvec_dp4a_mixed_kernel<F0, F1, R, L, false>,
                         dim3(static_cast<unsigned>(ctas)), dim3(L), 0, stream, seg, n0, xq, static_cast<int>(cols), accumulate),
              "matvec");
    });
}

// q5_K on the int8 input, one column: the dp4a kernel in its q5_K format (DpK<true>), by the same
// launcher. q5_K has no int8 MMA kernel, so several columns (and builds with -DMINFER_MATVEC_DP4A=0) keep
// the f16-input MMA kernel, and matvec_int8_supported says so per column count. On the H200 it decodes a
// qwen2-7b q5_K synth at 444.0 t/s against 259.8 through the f16 MMA kernel (docs/perf.md, 2026-12-04);
// -DMINFER_DP4A_Q5K=0 is the A/B knob that keeps q5_K on that kernel.
#ifndef MINFER_DP4A_Q5K
#define MINFER_DP4A_Q5K 1
#endif
constexpr bool kDp4aQ5k = MINFER_MATVEC_DP4A && MINFER_DP4A_Q5K;

// q4_1 and q5_1 on the int8 input, one column, rows that start 16-byte aligned (matvec_int8_takes): the
// dp4a kernel on direct loads of the file's blocks (DpQ41, DpQ51 in matvec_impl.cuh), by the q4_K
// launcher's choice of CTA width and prefetch. They have no int8 MMA kernel: several columns, other row
// lengths and builds with -DMINFER_DP4A_Q41_Q51=0 (the A/B knob) keep the f16-input MMA kernel.
#ifndef MINFER_DP4A_Q41_Q51
#define MINFER_DP4A_Q41_Q51 0
#endif
constexpr bool kDp4aQ41Q51 = MINFER_MATVEC_DP4A && MINFER_DP4A_Q41_Q51;

// q4_0 on the int8 input, one column, rows of whole 256-column groups: the direct-load dp4a kernel
// (matvec_impl.cuh; 8 blocks are 144 bytes, 16-byte aligned), by the q4_K launcher's choice of CTA width
// and prefetch; other rows, and builds with -DMINFER_DP4A_Q40=0 (the A/B knob), take the staged kernel
// below. On the H200 it decodes a qwen2-7b Q4_0 synth at 581-586 t/s against 430 on the staged kernel
// (docs/perf.md, 2026-12-04). Its arithmetic is checked against float64 in the emulator
// (tests/test_matvec_emu.cpp) and on the GPU (cuda_tests "matvec*").
#ifndef MINFER_DP4A_Q40
#define MINFER_DP4A_Q40 1
#endif

// q6_K on the int8 input, one column, launches of at least MINFER_DP4A_Q6K_MIN_ROWS rows (the output
// projection): the direct-load dp4a kernel (DpQ6K, matvec_impl.cuh), by the q4_K launcher's choice of CTA
// width; shorter launches, and builds with -DMINFER_DP4A_Q6K=0 (the A/B knob), take the staged kernel.
// On the H200 (docs/perf.md, 2026-12-04, third session) the direct loads took the 7B's 152064 x 3584
// output projection in 153.2 µs against 171.5 staged, but the 3584 x 18944 down projection in 28.2 against
// 24.5 and 18944 x 3584 in 28.1 against 26.9, whence the line. Its arithmetic is checked against float64
// in the emulator (tests/test_matvec_emu.cpp) and on the GPU (cuda_tests "matvec*" with the line at 0).
#ifndef MINFER_DP4A_Q6K
#define MINFER_DP4A_Q6K 1
#endif
#ifndef MINFER_DP4A_Q6K_MIN_ROWS
#define MINFER_DP4A_Q6K_MIN_ROWS 65536
#endif

// q6_K, q8_0 and q4_0 on the int8 input, one column, where the direct-load formats above do not take the
// rows (q6_K below MINFER_DP4A_Q6K_MIN_ROWS, q8_0 always; q4_0 on rows that are not whole 256-column groups, such as the 0.5B's
// 896): the staged dp4a kernel (matvec_impl.cuh), 4 rows a
// CTA (-DMINFER_DP4A_STAGED_ROWS=N builds N, a divisor of 16: the A/B knob; 2 rows measured slower on
// every 7B shape of q6_K, docs/perf.md), the registers capped for 5 CTAs an SM on tall launches (8,192
// rows or more in all: the output projection, and the joint gate/up of q8_0 and q4_0 files) and for 4
// on the others (-DMINFER_DP4A_STAGED_TALL=N moves that line). Only where
// every segment of the launch is a multiple of 16 bytes long (the kernel copies whole 16-byte units):
// otherwise, and with -DMINFER_MATVEC_DP4A=0, the int8 MMA kernel.
#ifndef MINFER_DP4A_STAGED_ROWS
#define MINFER_DP4A_STAGED_ROWS 4
#endif
#ifndef MINFER_DP4A_STAGED_TALL
#define MINFER_DP4A_STAGED_TALL 8192
#endif
template <Type T>
bool staged_fits(const Segments& seg, int64_t cols) {
    const int64_t row_bytes = row_bytes_of<T>(cols);
    for (int i = 0; i < seg.n; ++i)
        if ((seg.end[i] - (i ? seg.end[i - 1] : 0)) * row_bytes % 16 != 0) return false;
    return true;
}
// Launches a dp4a kernel for one input column where one applies (type, knob and, for the staged kernel,
// segment lengths); false where none does (the int8 MMA kernel then).
template <Type T>
bool try_dp4a(const Segments& seg, int64_t cols, const uint8_t* xq, cudaStream_t stream, bool accumulate) {
    if (!MINFER_MATVEC_DP4A) return false;
    if constexpr (T == Type::Q4_K) {
        launch_dp4a<DpK<false>>(seg, cols, xq, stream, accumulate);
        return true;
    } else if constexpr (T == kQ8_0G) {  // rows of whole 256-column groups, the last one padded on a copy
        launch_dp4a<DpQ80G>(seg, cols, xq, stream, accumulate);
        g_q80g_launches.fetch_add(1, std::memory_order_relaxed);
        return true;
    } else if constexpr (T == Type::Q6_K || T == Type::Q8_0 || T == Type::Q4_0) {
        if (T == Type::Q4_0 && MINFER_DP4A_Q40 && cols % 256 == 0) {
            launch_dp4a<DpQ40>(seg, cols, xq, stream, accumulate);
            return true;
        }
        if (T == Type::Q6_K && MINFER_DP4A_Q6K && seg.end[seg.n - 1] >= MINFER_DP4A_Q6K_MIN_ROWS) {
            launch_dp4a<DpQ6K>(seg, cols, xq, stream, accumulate);
            return true;
        }
        if (!staged_fits<T>(seg, cols)) return false;
        constexpr int R = MINFER_DP4A_STAGED_ROWS;
        static_assert(kTileRows % R == 0, "a CTA's rows lie in one segment: segments end on 16-row tiles");
        const int64_t rows = seg.end[seg.n - 1];
        check(launch_pdl(rows >= MINFER_DP4A_STAGED_TALL ? matvec_staged_kernel<T, R, 5> : matvec_staged_kernel<T, R, 4>,
                         dim3(blocks_for(rows, R)), dim3(kDpThreads), static_cast<size_t>(staged_smem<T, R>()), stream, seg, xq,
                         static_cast<int>(cols), accumulate),
              "matvec");
        return true;
    }
    return false;
}

template <Type T>
void launch_plain(const Segments& seg, int64_t cols, const float* x, cudaStream_t stream, bool accumulate) {
    const int64_t rows = seg.end[seg.n - 1];
    if (rows >= 8192) check(launch_pdl(matvec_plain_kernel<T, 4>, dim3(blocks_for(rows, 4)), dim3(128), 0, stream, seg, x, cols, accumulate), "matvec");
    else check(launch_pdl(matvec_plain_kernel<T, 1>, dim3(static_cast<unsigned>(rows)), dim3(128), 0, stream, seg, x, cols, accumulate), "matvec");
}

}  // namespace

namespace {

// The matrices i0 .. i1 - 1 of a launch as its segments.
Segments segments_of(const void* const* w, const int64_t* rows, float* const* y, int i0, int i1) {
    Segments seg;
    int64_t end = 0;
    for (int i = i0; i < i1; ++i) {
        seg.w[seg.n] = static_cast<const uint8_t*>(w[i]);
        seg.y[seg.n] = y[i];
        end += std::max<int64_t>(rows[i], 0);
        seg.end[seg.n++] = end;
    }
    for (int i = seg.n; i < 3; ++i) seg.end[i] = end;
    return seg;
}

// x_up (the MMA family only): the input is silu(x) * x_up, formed in the kernel. xq (the int8 family
// only, x and x_up then unused): the input quantized by quantize_x, ncols (1 to kMatvecMaxCols) vectors
// of matvec_xq_bytes(cols) bytes, y[i] then [ncols][rows[i]].
void matvec_impl(Type t, int n, const void* const* w, const int64_t* rows, int64_t cols, const float* x, const float* x_up,
                 const uint8_t* xq, float* const* y, cudaStream_t stream, bool accumulate, int ncols = 1) {
    if (n < 1 || n > 3) fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: %d matrices in one launch", n);
    if (ncols < 1 || ncols > kMatvecMaxCols || (ncols > 1 && !xq))
        fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: %d input columns (1 to %d, several only on the quantized input)", ncols, kMatvecMaxCols);
    if ((reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(x_up) | reinterpret_cast<uintptr_t>(xq)) % 16 != 0 ||
        cols % 8 != 0)
        fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: x must be 16-byte aligned and rows a multiple of 8 long");
    if (xq && !matvec_int8_takes(t, ncols, cols))
        fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: no int8 path for type %d and %lld columns", static_cast<int>(t),
             static_cast<long long>(cols));
    for (int i = 0; i < n; ++i)
        if (reinterpret_cast<uintptr_t>(w[i]) % 16 != 0) fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: weights must be 16-byte aligned");
    int64_t total = 0;
    for (int i = 0; i < n; ++i) total += std::max<int64_t>(rows[i], 0);
    if (total == 0 || cols <= 0) return;
    // The load's copies for the one-input mat-vec (cuda/block_bits.cuh: padded q6_K, grouped q5_0): read by
    // the one-input dp4a kernel alone.
    if (t == kQ6_KP || t == kQ5_0G || t == kQ2_KP || t == kQ3_KP) {
        const char* what = t == kQ6_KP ? "padded q6_K" : t == kQ5_0G ? "grouped q5_0" : t == kQ2_KP ? "arranged q2_K" : "arranged q3_K";
        if (!xq || ncols != 1 || !MINFER_MATVEC_DP4A)
            fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: %s takes one int8 input column (%d given%s)", what, ncols, xq ? "" : ", f32");
        if (t != kQ5_0G && cols % 256 != 0)
            fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: %s rows of %lld columns (whole super-blocks only)", what, static_cast<long long>(cols));
        for (int i0 = 0; i0 < n;) {
            int i1 = i0 + 1;  // one launch while every segment but the last ends on a 16-row tile (a CTA's rows in one segment)
            while (i1 < n && rows[i1 - 1] % kTileRows == 0) ++i1;
            const Segments seg = segments_of(w, rows, y, i0, i1);
            if (seg.end[seg.n - 1] > 0) {
                if (t == kQ6_KP) {
                    launch_dp4a<DpQ6KP>(seg, cols, xq, stream, accumulate);
                    g_q6kp_launches.fetch_add(1, std::memory_order_relaxed);
                } else if (t == kQ2_KP || t == kQ3_KP) {
                    if (t == kQ2_KP) launch_dp4a<DpQ2KP>(seg, cols, xq, stream, accumulate);
                    else launch_dp4a<DpQ3KP>(seg, cols, xq, stream, accumulate);
                    g_k23p_launches.fetch_add(1, std::memory_order_relaxed);
                } else {
                    launch_dp4a<DpQ50G>(seg, cols, xq, stream, accumulate);
                    g_q50g_launches.fetch_add(1, std::memory_order_relaxed);
                }
            }
            i0 = i1;
        }
        check_launch("matvec");
        return;
    }
    // Grouped q8_0 rows with a padded last group (the load's copies, q80_group_copy): the one-input dp4a
    // kernel's alone.
    if (t == kQ8_0G && cols % 256 != 0 && !(xq && ncols == 1 && MINFER_MATVEC_DP4A))
        fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: grouped q8_0 of %lld columns (whole 256-column groups only, but for one int8 input)",
             static_cast<long long>(cols));
    const bool known = dispatch_matvec_type(t, [&](auto tag) {
        constexpr Type T = decltype(tag)::value;
        if (cols % Geometry<T>::elems != 0)
            fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: %lld columns of type %d", static_cast<long long>(cols), static_cast<int>(T));
        constexpr bool kPlain = T == Type::F32 || T == Type::F16 || T == Type::BF16;
        // One launch when every segment but the last ends on the kernel's row granule (a tile of 16 rows;
        // the plain kernel's 1 or 4 rows per CTA).
        const int64_t granule = kMmaFamily<T> ? kTileRows : total >= 8192 ? 4 : 1;
        bool joint = kMmaFamily<T> || kPlain;
        for (int i = 0; i + 1 < n; ++i) joint = joint && rows[i] % granule == 0;
        const float* in = x;
        if (x_up && !kMmaFamily<T>) fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: SwiGLU inputs for type %d", static_cast<int>(T));
        for (int i = 0; i < n; ++i) {
            const int i1 = joint ? n : i + 1;
            const Segments seg = segments_of(w, rows, y, i, i1);
            if (seg.end[seg.n - 1] > 0) {
                if constexpr (kInt8Family<T>) {
                    if (xq && ncols > 1) launch_mma<T, true, kColsN>(seg, cols, nullptr, nullptr, xq, stream, accumulate, ncols);
                    else if (xq) {
                        if (!try_dp4a<T>(seg, cols, xq, stream, accumulate))
                            launch_mma<T, true>(seg, cols, nullptr, nullptr, xq, stream, accumulate);
                    } else launch_mma<T>(seg, cols, in, x_up, nullptr, stream, accumulate);
                } else if constexpr (T == Type::Q5_K) {
                    if (xq) launch_dp4a<DpK<true>>(seg, cols, xq, stream, accumulate);  // one column (checked above)
                    else launch_mma<T>(seg, cols, in, x_up, nullptr, stream, accumulate);
                } else if constexpr ((T == Type::Q4_1 || T == Type::Q5_1) && kDp4aQ41Q51) {
                    if (xq) {  // one column, rows 16-byte aligned (checked above)
                        launch_dp4a<std::conditional_t<T == Type::Q4_1, DpQ41, DpQ51>>(seg, cols, xq, stream, accumulate);
                        g_q41_q51_launches.fetch_add(1, std::memory_order_relaxed);
                    } else launch_mma<T>(seg, cols, in, x_up, nullptr, stream, accumulate);
                } else if constexpr (kMmaFamily<T>) launch_mma<T>(seg, cols, in, x_up, nullptr, stream, accumulate);
                else if constexpr (kPlain) launch_plain<T>(seg, cols, in, stream, accumulate);
                else launch_ref<T>(w[i], rows[i], cols, in, y[i], stream, accumulate);
            }
            i = i1 - 1;
        }
    });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA mat-vec: tensor type %d", static_cast<int>(t));
    check_launch("matvec");
}

}  // namespace

void matvec_multi(Type t, int n, const void* const* w, const int64_t* rows, int64_t cols, const float* x, float* const* y,
                  cudaStream_t stream, bool accumulate) {
    matvec_impl(t, n, w, rows, cols, x, nullptr, nullptr, y, stream, accumulate);
}

void matvec(Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream, bool accumulate) {
    if (rows <= 0 || cols <= 0) return;
    matvec_impl(t, 1, &w, &rows, cols, x, nullptr, nullptr, &y, stream, accumulate);
}

void matvec_swiglu(Type t, const void* w, int64_t rows, int64_t cols, float* gate, const float* up, float* y, cudaStream_t stream,
                   bool accumulate) {
    bool fused = false;
    dispatch_matvec_type(t, [&](auto tag) { fused = kMmaFamily<decltype(tag)::value>; });
    if (!fused) swiglu(gate, up, cols, stream);
    matvec_impl(t, 1, &w, &rows, cols, gate, fused ? up : nullptr, nullptr, &y, stream, accumulate);
}

bool matvec_int8_supported(Type t, int ncols) {
    if (t == kQ6_KP || t == kQ5_0G || t == kQ2_KP || t == kQ3_KP) return MINFER_MATVEC_DP4A && ncols == 1;
    bool yes = false;
    dispatch_matvec_type(t, [&](auto tag) { yes = kInt8Family<decltype(tag)::value>; });
    return yes || (kDp4aQ5k && t == Type::Q5_K && ncols == 1) || (kDp4aQ41Q51 && (t == Type::Q4_1 || t == Type::Q5_1) && ncols == 1);
}

bool matvec_int8_takes(Type t, int ncols, int64_t cols) {
    if (!matvec_int8_supported(t, ncols) || cols % 32 != 0) return false;
    // DpQ41 and DpQ51 read the file's rows where they lie: each must start 16-byte aligned (every 128
    // columns for q4_1, 64 for q5_1)
    if (t == Type::Q4_1) return dp4a_row_bytes<DpQ41>(static_cast<int>(cols)) % 16 == 0;
    if (t == Type::Q5_1) return dp4a_row_bytes<DpQ51>(static_cast<int>(cols)) % 16 == 0;
    return true;
}

int64_t matvec_xq_bytes(int64_t cols) { return mv::xq_bytes(cols); }

namespace {
// Row blockIdx.y of x (and up) of gridDim.y rows into xq (several rows: block-interleaved, xq_slot).
__global__ void quantize_x_kernel(const float* __restrict__ x, const float* __restrict__ up, int64_t cols, uint8_t* xq) {
    pdl_enter<kEarlyQuantize>();  // launched as a programmatic dependent (cuda/pdl.cuh: the early trigger)
    x += blockIdx.y * cols;
    if (up) up += blockIdx.y * cols;
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;  // float4 index
    const bool valid = 4 * i < cols;
    float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
    if (valid) {
        v = __ldg(reinterpret_cast<const float4*>(x) + i);
        if (up) {
            const float4 u = __ldg(reinterpret_cast<const float4*>(up) + i);
            v = make_float4(silu_mul(v.x, u.x), silu_mul(v.y, u.y), silu_mul(v.z, u.z), silu_mul(v.w, u.w));
        }
    }
    xq_put4(v, 4 * i, cols, xq, valid, static_cast<int>(blockIdx.y), static_cast<int>(gridDim.y));
}
}  // namespace

void quantize_x(const float* x, const float* up, int64_t cols, void* xq, cudaStream_t stream, int rows) {
    if (cols <= 0 || rows <= 0) return;
    if (cols % 32 != 0 || (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(up) | reinterpret_cast<uintptr_t>(xq)) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "quantize_x: %lld columns (a multiple of 32) and 16-byte aligned buffers", static_cast<long long>(cols));
    check(launch_pdl(quantize_x_kernel, dim3(blocks_for(cols / 4, 256), static_cast<unsigned>(rows)), dim3(256), 0, stream, x, up, cols,
                     static_cast<uint8_t*>(xq)),
          "quantize_x");
}

void matvec_xq(Type t, int n, const void* const* w, const int64_t* rows, int64_t cols, const void* xq, float* const* y,
               cudaStream_t stream, bool accumulate, int ncols) {
    if (!xq) fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: no quantized input");
    matvec_impl(t, n, w, rows, cols, nullptr, nullptr, static_cast<const uint8_t*>(xq), y, stream, accumulate, ncols);
}

// The paired kernel takes one row count a CTA for both formats: builds whose MINFER_DP4A_Q6KP_ROWS differs
// from MINFER_DP4A_ROWS keep a launch per type.
constexpr bool kPairs = MINFER_MATVEC_DP4A && MINFER_DP4A_MIXED && kDp4aRows<DpK<false>> == kDp4aRows<DpQ6KP>;
bool matvec_xq_pairs(Type t0, Type t1) { return kPairs && t0 == Type::Q4_K && t1 == kQ6_KP; }

void matvec_xq_pair(Type t0, int n0, Type t1, int n, const void* const* w, const int64_t* rows, int64_t cols, const void* xq,
                    float* const* y, cudaStream_t stream, bool accumulate) {
    if (!matvec_xq_pairs(t0, t1) || n0 < 1 || n0 >= n || n > 3 || !xq)
        fail(MINFER_ERR_INTERNAL, "CUDA mat-vec: no one launch for types %d (%d matrices) and %d (%d)", static_cast<int>(t0), n0,
             static_cast<int>(t1), n - n0);
    bool one = cols > 0 && cols % 256 == 0 && reinterpret_cast<uintptr_t>(xq) % 16 == 0;  // else matvec_xq says what is wrong
    for (int i = 0; i < n; ++i) one = one && rows[i] >= 0 && reinterpret_cast<uintptr_t>(w[i]) % 16 == 0;
    for (int i = 0; i + 1 < n; ++i) one = one && rows[i] % kTileRows == 0;  // a CTA's rows in one segment
    if (!one) {
        matvec_xq(t0, n0, w, rows, cols, xq, y, stream, accumulate);
        matvec_xq(t1, n - n0, w + n0, rows + n0, cols, xq, y + n0, stream, accumulate);
        return;
    }
    const Segments seg = segments_of(w, rows, y, 0, n);
    if (seg.end[n - 1] == 0) return;
    if constexpr (kPairs) launch_dp4a_mixed<DpK<false>, DpQ6KP>(seg, n0, cols, static_cast<const uint8_t*>(xq), stream, accumulate);
    g_q6kp_launches.fetch_add(1, std::memory_order_relaxed);
    g_pair_launches.fetch_add(1, std::memory_order_relaxed);
    check_launch("matvec");
}

namespace {
__global__ void q80_group_kernel(uint8_t* w, int64_t groups) {
    const int64_t g = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (g < groups) q80_group_one(w, g);
}
}  // namespace

void q80_group(void* w, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % 256 != 0 || reinterpret_cast<uintptr_t>(w) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "q80_group: %lld columns (a multiple of 256) and a 16-byte aligned matrix", static_cast<long long>(cols));
    const int64_t groups = rows * (cols / 256);
    q80_group_kernel<<<blocks_for(groups, 256), 256, 0, stream>>>(static_cast<uint8_t*>(w), groups);
    check_launch("q80_group");
}

namespace {
// The load's grouped copies for the one-token mat-vec, a thread a group: q8_0 (T = kQ8_0G) or q5_0 (kQ5_0G).
template <Type T>
__global__ void group_copy_kernel(const uint8_t* src, uint8_t* dst, int64_t cols, int64_t groups) {
    const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (i >= groups) return;
    if constexpr (T == kQ8_0G) q80_group_copy_one(src, dst, cols, i);
    else q50_group_copy_one(src, dst, cols, i);
}
template <Type T>
void group_copy(const char* what, const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % 32 != 0 || reinterpret_cast<uintptr_t>(src) % 2 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "%s: %lld columns (a multiple of 32), a 2-byte aligned source and a 16-byte aligned copy", what,
             static_cast<long long>(cols));
    const int64_t groups = rows * ((cols + 255) / 256);
    group_copy_kernel<T><<<blocks_for(groups, 128), 128, 0, stream>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), cols,
                                                                       groups);
    check_launch(what);
}
}  // namespace

void q80_group_copy(const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
    group_copy<kQ8_0G>("q80_group_copy", src, dst, rows, cols, stream);
}
void q50_group_copy(const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
    group_copy<kQ5_0G>("q50_group_copy", src, dst, rows, cols, stream);
}

namespace {
__global__ void q6k_pad_kernel(const uint8_t* src, uint8_t* dst, int64_t blocks) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b < blocks) q6k_pad_one(src, dst, b);
}
}  // namespace

uint64_t q6kp_matvec_launches() { return g_q6kp_launches.load(std::memory_order_relaxed); }
uint64_t q80g_matvec_launches() { return g_q80g_launches.load(std::memory_order_relaxed); }
uint64_t q50g_matvec_launches() { return g_q50g_launches.load(std::memory_order_relaxed); }
uint64_t k23p_matvec_launches() { return g_k23p_launches.load(std::memory_order_relaxed); }
uint64_t q41_q51_matvec_launches() { return g_q41_q51_launches.load(std::memory_order_relaxed); }
bool matvec_reads_padded_q80() { return MINFER_MATVEC_DP4A != 0; }
uint64_t matvec_pair_launches() { return g_pair_launches.load(std::memory_order_relaxed); }

void q6k_pad(const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    if (cols % 256 != 0 || reinterpret_cast<uintptr_t>(src) % 2 != 0 || reinterpret_cast<uintptr_t>(dst) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "q6k_pad: %lld columns (a multiple of 256), a 2-byte aligned source and a 16-byte aligned copy",
             static_cast<long long>(cols));
    const int64_t blocks = rows * (cols / 256);
    q6k_pad_kernel<<<blocks_for(blocks, 128), 128, 0, stream>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), blocks);
    check_launch("q6k_pad");
}

namespace {
template <bool kQ3>
__global__ void k23_arrange_kernel(const uint8_t* src, uint8_t* dst, int64_t blocks) {
    const int64_t b = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    if (b < blocks) k23_arrange_one<kQ3>(src, dst, b);
}
}  // namespace

void k23_arrange(Type t, const void* src, void* dst, int64_t rows, int64_t cols, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    if ((t != Type::Q2_K && t != Type::Q3_K) || cols % 256 != 0 || reinterpret_cast<uintptr_t>(src) % 2 != 0 ||
        reinterpret_cast<uintptr_t>(dst) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "k23_arrange: type %d (q2_K or q3_K), %lld columns (a multiple of 256), a 2-byte aligned source and a 16-byte aligned copy",
             static_cast<int>(t), static_cast<long long>(cols));
    const int64_t blocks = rows * (cols / 256);
    if (t == Type::Q3_K)
        k23_arrange_kernel<true><<<blocks_for(blocks, 128), 128, 0, stream>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), blocks);
    else
        k23_arrange_kernel<false><<<blocks_for(blocks, 128), 128, 0, stream>>>(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), blocks);
    check_launch("k23_arrange");
}

void matvec_reference(Type t, const void* w, int64_t rows, int64_t cols, const float* x, float* y, cudaStream_t stream) {
    if (rows <= 0 || cols <= 0) return;
    const bool known = dispatch_type(t, [&](auto tag) { launch_ref<decltype(tag)::value>(w, rows, cols, x, y, stream, false); });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA mat-vec: tensor type %d", static_cast<int>(t));
    check_launch("matvec_reference");
}

}  // namespace minfer::cuda
