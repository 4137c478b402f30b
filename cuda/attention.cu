// The attention kernels' launchers: for prefill (two or more queries) the tensor-core flash attention of
// cuda/attention_mma.cuh (on Hopper, past 64 queries, its warpgroup-MMA form, cuda/attention_wg.cuh); for
// decode the split-K flash-decoding kernel (one block per KV head and key chunk, all query heads of the
// group) and, past one chunk, the combine that merges the chunks (both in cuda/attention_mma.cuh).
// Checked against the CPU backend and a float64 reference in tests/test_cuda.cpp (both prefill forms on a
// Hopper GPU; the kernels of cuda/attention_mma.cuh also on the CPU, by the emulator:
// tests/test_attention_emu.cpp).
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "cuda/attention_mma.cuh"
#include "cuda/attention_wg.cuh"
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

// True when `bytes` of dynamic shared memory fit a block of this device; then `kernel`'s limit is raised
// to them (past the default 48 KiB). Called once per kernel (a function-local static of its caller).
template <class Kernel>
bool raise_smem_limit(Kernel kernel, int bytes, const char* what) {
    int dev = 0, optin = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "cudaDeviceGetAttribute");
    if (bytes > optin) return false;
    check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes), what);
    return true;
}

// True when the kernel's shared memory fits a CTA of this device (the two-tile head_dim-128 CTA takes
// 102 KiB: more than sm_86/sm_89/sm_120 allow, 99 KiB); the attribute is raised past the default 48 KiB.
template <int HD, int MT>
bool prefill_fits() {
    static const bool fits =
        raise_smem_limit(fa::attn_prefill_mma_kernel<HD, MT>, fa::smem_bytes<HD, MT>(), "prefill attention shared memory");
    return fits;
}

template <int HD, int MT>
void launch_prefill_mt(const float* q, const __half* q16, const __half* kc, const __half* vc, float* out, __half* out16, int n, int pos0,
                       int n_head, int group, int kv_dim, float qscale, cudaStream_t stream, const KvMap& kv) {
    constexpr int smem = fa::smem_bytes<HD, MT>();
    if (!prefill_fits<HD, MT>())
        fail(MINFER_ERR_UNSUPPORTED,
             "CUDA prefill attention: head_dim %d needs %d bytes of shared memory per block, more than this GPU allows", HD, smem);
    const auto grid = static_cast<unsigned>(fa::grid_size<MT>(n, n_head));
    fa::attn_prefill_mma_kernel<HD, MT><<<grid, fa::kThreads, smem, stream>>>(q, q16, kc, vc, out, out16, n, pos0, n_head, group, kv_dim,
                                                                              qscale, kv);
    check_launch("attention (prefill)");
}

// The warpgroup-MMA kernel (cuda/attention_wg.cuh) where it can run: a compute capability 9.0 GPU whose
// loaded image of this file has the wgmma code (the image of g_wgmma_built says so: 1 in the sm_90a device
// pass alone; a PTX JIT-compiled for the GPU, from compute_80 or compute_90, has 0 and a kernel body that
// traps), and its shared memory fits. Decided on the first call (the forward's constructor makes it, so
// that it never falls inside a graph capture). -DMINFER_ATTN_WGMMA=0 keeps mma.sync (the A/B knob).
#ifndef MINFER_ATTN_WGMMA
#define MINFER_ATTN_WGMMA 1
#endif
__device__ int g_wgmma_built = MINFER_WGMMA_BUILT;

template <int HD>
bool prefill_wg_usable() {
    static const bool usable = [] {
        if (!MINFER_ATTN_WGMMA || compute_capability() != 90) return false;
        int built = 0;
        const cudaError_t e = cudaMemcpyFromSymbol(&built, g_wgmma_built, sizeof built);
        if (e == cudaErrorInvalidSymbol || e == cudaErrorNoKernelImageForDevice || e == cudaErrorInvalidDeviceFunction) {
            (void)cudaGetLastError();  // no image of this file for the GPU: not an error of the call
            return false;
        }
        check(e, "reading the prefill attention's build flag");  // any other error is the device's, and a status
        return built == 1 &&
               raise_smem_limit(faw::attn_prefill_wg_kernel<HD>, faw::smem_bytes<HD>(), "prefill attention (wgmma) shared memory");
    }();
    return usable;
}

std::atomic<bool> g_force_mma{false};  // testing_hooks::attention_force_mma
// testing_hooks::attention_decode_launches: decode launches of one chunk a row on device positions (the
// one_chunk form), and combine launches, enqueued so far (a CUDA graph's counted once, at its capture).
std::atomic<uint64_t> g_one_chunk_launches{0}, g_combine_launches{0};

enum class PrefillKernel { kWgmma, kMma2, kMma1 };
template <int HD>
PrefillKernel prefill_kernel(int n) {
    if (n <= fa::rows_per_cta<1>()) return PrefillKernel::kMma1;  // a chunk of one row tile a warp at most
    if (!g_force_mma.load(std::memory_order_relaxed) && prefill_wg_usable<HD>()) return PrefillKernel::kWgmma;
    return MINFER_FA_MTILES == 2 && prefill_fits<HD, MINFER_FA_MTILES>() ? PrefillKernel::kMma2 : PrefillKernel::kMma1;
}

template <int HD>
void launch_prefill(const float* q, const __half* q16, const __half* kc, const __half* vc, float* out, __half* out16, int n, int pos0,
                    int n_head, int group, int kv_dim, float qscale, cudaStream_t stream, const KvMap& kv) {
    if (q16 ? reinterpret_cast<uintptr_t>(q16) % 8 != 0 : reinterpret_cast<uintptr_t>(q) % 16 != 0)  // read in 8- and 16-byte pieces
        fail(MINFER_ERR_INTERNAL, "CUDA prefill attention: q is not aligned");
    if (reinterpret_cast<uintptr_t>(out16) % 4 != 0)  // written in pairs
        fail(MINFER_ERR_INTERNAL, "CUDA prefill attention: the f16 output is not 4-byte aligned");
    switch (prefill_kernel<HD>(n)) {
        case PrefillKernel::kWgmma: {
            if (!out16 && reinterpret_cast<uintptr_t>(out) % 8 != 0)  // written in float pairs
                fail(MINFER_ERR_INTERNAL, "CUDA prefill attention: out is not 8-byte aligned");
            const auto grid = static_cast<unsigned>(faw::grid_size(n, n_head));
            faw::attn_prefill_wg_kernel<HD><<<grid, faw::kThreads, faw::smem_bytes<HD>(), stream>>>(q, q16, kc, vc, out, out16, n, pos0,
                                                                                                     n_head, group, kv_dim, qscale, kv);
            check_launch("attention (prefill, wgmma)");
            break;
        }
        case PrefillKernel::kMma2:
            launch_prefill_mt<HD, MINFER_FA_MTILES>(q, q16, kc, vc, out, out16, n, pos0, n_head, group, kv_dim, qscale, stream, kv);
            break;
        case PrefillKernel::kMma1:
            launch_prefill_mt<HD, 1>(q, q16, kc, vc, out, out16, n, pos0, n_head, group, kv_dim, qscale, stream, kv);
            break;
    }
}

// ---- decode: split-K flash-decoding -------------------------------------------------------------------
// One query token (position L - 1) against the keys 0 .. L-1, cut into n_split chunks of `chunk` keys
// (fa::decode_split_for). Block (kvh, s, z) of fa::attn_decode_mma_kernel takes chunk s of KV head kvh
// for the query heads of its group (up to 16: heads 16z .. 16z + 15 of the group; z > 0 only for groups
// larger than 16), so each K and V row of the chunk is read from memory once for the whole group; with
// several chunks, fa::attn_combine_kernel merges their partials.
//
// Decode split: about MINFER_ATTN_BLOCKS_PER_SM blocks per SM over all KV heads (few enough to be
// resident at once, so every block issues its copies immediately), chunks of at least
// MINFER_ATTN_MIN_CHUNK keys (fa::decode_split_for). A short context takes one chunk (no combine).
// Three blocks an SM (43 KiB of shared memory each at head_dim 128 with one slot pair: three fit). Two
// measured fastest at depth 8,192 on the H200 while the combine took three passes over the partials
// (419.3 t/s against 394.5 at one and 395.8 at four, 2026-12-04); with the one-pass combine, three
// measured on the H100 (docs/perf.md, 2026-12-06, twenty-first session; qwen2-7b q4_K_M synth): level at
// 8,192 keys (chunks of 96 keys instead of 128), +3.2% at 16,384 and +7.1% at 24,576 (96 chunks of 256
// keys a KV head instead of 64 of 384), qwen3-8b q4_K_M +5.3% at 16,384; four -2.8% at 8,192. The
// qwen2-0.5b (head_dim 64, two KV heads) is level at 8,192 and 1.0% slower at 24,576 (192 chunks of 128
// keys instead of 128 of 192). Contexts of up to 64 x 2 x SMs / KV heads keys (4,224 for the 7B's four
// KV heads on 132 SMs) take the same split at two and three: chunks of MINFER_ATTN_MIN_CHUNK keys.
#ifndef MINFER_ATTN_BLOCKS_PER_SM
#define MINFER_ATTN_BLOCKS_PER_SM 3
#endif
static_assert(MINFER_ATTN_BLOCKS_PER_SM >= 1, "decode split tunable");
using fa::decode_split_for;
using fa::DecodeSplit;
constexpr int kDecodeMaxHeads = 16;

// The most chunks any context length gets in a decode launch of `rows` rows over n_head_kv KV heads:
// the rows and heads share the SMs' blocks.
int decode_max_splits(int n_head_kv, int rows) {
    const int target = MINFER_ATTN_BLOCKS_PER_SM * sm_count();
    const int blocks = n_head_kv * rows;
    return std::max(1, (target + blocks - 1) / blocks);
}

// The output's int8 form (optional): row xq_row0 + r of xq_rows (mv::xq_slot's layout).
struct DecodeXq {
    uint8_t* xq = nullptr;
    int row0 = 0, rows = 1;
};

// Raises the decode kernel's shared-memory limit past the default 48 KiB once (kDecSlots slot pairs a
// warp: 77 KiB at head_dim 128 with two), or fails where the device cannot give it.
template <int HD>
void decode_smem_once() {
    static const bool fits =
        raise_smem_limit(fa::attn_decode_mma_kernel<HD>, fa::dec_smem_bytes<HD>(), "decode attention shared memory");
    if (!fits)
        fail(MINFER_ERR_UNSUPPORTED, "CUDA decode attention: %d bytes of shared memory a block, more than the device allows",
             fa::dec_smem_bytes<HD>());
}

// With pos_dev the grid covers max_splits chunks and the kernels find each row's split on the device.
// one_chunk (pos_dev only; the caller knows every row's length is short, cuda/forward.cu): one chunk a row,
// whatever its length, so the kernel writes the outputs itself and no combine is launched.
template <int HD>
void launch_decode(const float* q, const __half* kc, const __half* vc, float* part, float* out, int L, int rows, int n_head,
                   int n_head_kv, float qscale, cudaStream_t stream, const int32_t* pos_dev, const KvMap& kv, __half* out16,
                   const DecodeXq& dx, bool one_chunk = false, bool early_trigger = true) {
    const int group = n_head / n_head_kv;
    const int max_splits = one_chunk ? 1 : decode_max_splits(n_head_kv, rows);
    const DecodeSplit sp = pos_dev ? DecodeSplit{0, max_splits} : decode_split_for(L, max_splits);
    const int zc = (group + kDecodeMaxHeads - 1) / kDecodeMaxHeads;
    decode_smem_once<HD>();
    const dim3 grid(static_cast<unsigned>(n_head_kv), static_cast<unsigned>(sp.n_split), static_cast<unsigned>(zc * rows));
    check(launch_pdl(fa::attn_decode_mma_kernel<HD>, grid, dim3(fa::kThreads), static_cast<size_t>(fa::dec_smem_bytes<HD>()), stream, q,
                     kc, vc, part, out, L, group, n_head_kv * HD, qscale, sp.chunk, pos_dev, zc, kv, out16, dx.xq, dx.row0, dx.rows,
                     early_trigger),
          "attention (decode)");
    if (pos_dev && sp.n_split == 1) g_one_chunk_launches.fetch_add(1, std::memory_order_relaxed);
    if (sp.n_split > 1) {
        g_combine_launches.fetch_add(1, std::memory_order_relaxed);
        check(launch_pdl(fa::attn_combine_kernel<HD>, dim3(n_head, rows), dim3(fa::kCombineThreads), 0, stream, part,
                         out, sp.n_split, pos_dev, out16, dx.xq, dx.row0, dx.rows),
              "attention (combine)");
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

const char* attention_prefill_kernel(int head_dim, int n) {
    const PrefillKernel k = head_dim == 64 ? prefill_kernel<64>(n) : head_dim == 128 ? prefill_kernel<128>(n) : PrefillKernel::kMma1;
    return k == PrefillKernel::kWgmma ? "wgmma" : k == PrefillKernel::kMma2 ? "mma.sync, 2 row tiles" : "mma.sync, 1 row tile";
}

namespace testing_hooks {
void attention_force_mma(bool on) { g_force_mma.store(on, std::memory_order_relaxed); }
uint64_t attention_decode_launches(uint64_t* combines) {
    if (combines) *combines = g_combine_launches.load();
    return g_one_chunk_launches.load();
}
bool attention_wgmma_knob() { return MINFER_ATTN_WGMMA != 0; }
}  // namespace testing_hooks

int64_t attention_partial_floats(int n_head, int n_head_kv, int head_dim, int max_rows) {
    int64_t most = 0;
    for (int rows = 1; rows <= max_rows; ++rows)
        most = std::max(most, int64_t{rows} * n_head * decode_max_splits(n_head_kv, rows) * fa::part_stride(head_dim));
    return most;
}

float attention_qscale(int head_dim) { return log2_qscale(head_dim); }

void attention(const float* q, const __half* k_cache, const __half* v_cache, float* out, int n, int pos0, int n_head,
               int n_head_kv, int head_dim, float* partial, cudaStream_t stream, const int32_t* pos_dev, const KvMap& kv,
               __half* out16, const __half* q16) {
    check_attention_args(k_cache, v_cache, n_head, n_head_kv);
    if (q16 && n == 1) fail(MINFER_ERR_INTERNAL, "CUDA attention: an f16 query for a decode step (its kernel reads f32)");
    const int group = n_head / n_head_kv, kv_dim = n_head_kv * head_dim;
    auto run = [&](auto p_tag) {
        constexpr int P = decltype(p_tag)::value;
        if (n == 1) {
            launch_decode<64 * P>(q, k_cache, v_cache, partial, out, pos0 + 1, 1, n_head, n_head_kv, log2_qscale(head_dim), stream,
                                  pos_dev, kv, out16, DecodeXq{});
        } else {
            launch_prefill<64 * P>(q, q16, k_cache, v_cache, out, out16, n, pos0, n_head, group, kv_dim, log2_qscale(head_dim), stream, kv);
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
                           __half* out16, void* xq, int xq_row0, int xq_rows, bool one_chunk, bool last_launch) {
    check_attention_args(k_cache, v_cache, n_head, n_head_kv);
    if (rows <= 0) return;
    if (!pos_dev) fail(MINFER_ERR_INTERNAL, "CUDA attention: decode rows need their positions on the device");
    if (xq && (xq_row0 < 0 || xq_row0 + rows > xq_rows || reinterpret_cast<uintptr_t>(xq) % 16 != 0))
        fail(MINFER_ERR_INTERNAL, "CUDA attention: int8 output rows %d .. %d of %d", xq_row0, xq_row0 + rows - 1, xq_rows);
    const DecodeXq dx{static_cast<uint8_t*>(xq), xq_row0, xq_rows};
    switch (head_dim) {
        case 64: launch_decode<64>(q, k_cache, v_cache, partial, out, 0, rows, n_head, n_head_kv, log2_qscale(head_dim), stream, pos_dev, kv, out16, dx, one_chunk, last_launch); break;
        case 128: launch_decode<128>(q, k_cache, v_cache, partial, out, 0, rows, n_head, n_head_kv, log2_qscale(head_dim), stream, pos_dev, kv, out16, dx, one_chunk, last_launch); break;
        default: fail(MINFER_ERR_UNSUPPORTED, "CUDA attention: head_dim %d (64 and 128 are supported)", head_dim);
    }
}

}  // namespace minfer::cuda
