// The prefill GEMM's launchers: gemm_f16 (f16 weights) and gemm_fused (quantized weights as stored), both
// the tensor-core kernel of cuda/gemm_tc.cuh, so the two give the same bits on the same f16 values.
#include <climits>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/dequant.cuh"
#include "cuda/gemm_tc.cuh"
#include "cuda/kernels.cuh"
#include "quant/quant.h"

namespace minfer::cuda {
namespace {

// The kGen decoder: eight weights of a row as the standalone dequantization computes them.
template <Type T>
struct GenDeq {
    __device__ void operator()(const uint8_t* row, int e0, float* y) const { deq8<T>(row, e0, y); }
};

// Token tiles of 256 (-DMINFER_GT_BM=128: always 128): each weight panel is dequantized half as often,
// and each k-tile of A and B read from L2 feeds twice the MMAs; but a grid of fewer than one CTA per SM
// (k and v at 2,048 tokens, every 3,584-row matrix at 512) keeps the 128-token tiles. The tile size does
// not change a result: every output element sums the same MMA k-steps in the same order either way,
// which the fused path's bit parity with the two-pass path relies on (kGen takes 128 always).
#ifndef MINFER_GT_BM
#define MINFER_GT_BM 256
#endif

template <int F, int BM, class Gen>
void launch_bm(gt::Args p, const Gen& gen, cudaStream_t stream, const char* what) {
    constexpr int smem = gt::smem_bytes<F, BM>();
    static_assert(smem <= 227 * 1024, "the shared memory of one CTA on sm_90");
    // Once per instantiation (a failure is kept, and reported at every launch).
    static const cudaError_t attr = cudaFuncSetAttribute(gt::gemm_tc_kernel<F, BM, Gen>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    check(attr, what);
    p.m_tiles = (p.m + BM - 1) / BM;
    const int64_t tiles = int64_t{p.m_tiles} * ((p.n + gt::kBN - 1) / gt::kBN);
    if (tiles > INT_MAX) fail(MINFER_ERR_INTERNAL, "%s: %lld tiles", what, static_cast<long long>(tiles));
    gt::gemm_tc_kernel<F, BM, Gen><<<static_cast<unsigned>(tiles), gt::threads<BM>(), smem, stream>>>(p, gen);
    check_launch(what);
}
template <int F, class Gen>
void launch(const gt::Args& p, const Gen& gen, cudaStream_t stream, const char* what) {
    if constexpr (MINFER_GT_BM == 256 && F != gt::kGen)
        if (int64_t{(p.m + 255) / 256} * ((p.n + gt::kBN - 1) / gt::kBN) >= sm_count()) return launch_bm<F, 256>(p, gen, stream, what);
    launch_bm<F, 128>(p, gen, stream, what);
}

gt::Args args(const __half* a, float* c, int m, int n, int k, bool accumulate, const char* what) {
    if (k % 8 != 0 || m < 0 || n < 0 || k < 0 || reinterpret_cast<uintptr_t>(a) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "%s: %d x %d x %d (K a multiple of 8, A 16-byte aligned)", what, m, n, k);
    gt::Args p;
    p.a = a;
    p.c = c;
    p.m = m;
    p.n = n;
    p.k = k;
    p.accumulate = accumulate;
    return p;
}

}  // namespace

void gemm_f16(const __half* a, const __half* b, float* c, int m, int n, int k, cudaStream_t stream, bool accumulate) {
    gt::Args p = args(a, c, m, n, k, accumulate, "gemm_f16");
    if (m == 0 || n == 0) return;
    if (reinterpret_cast<uintptr_t>(b) % 16 != 0) fail(MINFER_ERR_INTERNAL, "gemm_f16: B not 16-byte aligned");
    p.b = b;
    launch<gt::kF16>(p, gt::NoGen{}, stream, "gemm_f16");
}

void gemm_fused(Type t, const __half* a, const void* w, float* c, int m, int n, int k, cudaStream_t stream, bool accumulate) {
    gt::Args p = args(a, c, m, n, k, accumulate, "gemm_fused");
    if (m == 0 || n == 0) return;
    p.q = static_cast<const uint8_t*>(w);
    p.row_bytes = static_cast<int64_t>(quant::row_bytes(t, k));
    p.bytes = p.row_bytes * n;
    // The raw formats need 16-byte-aligned matrices (the rows' own alignment is theirs: cuda/gemm_narrow.cuh).
    const bool raw = gemm_narrow_quant_supports(t, k) && reinterpret_cast<uintptr_t>(w) % 16 == 0;
    if (raw && t == Type::Q4_K) return launch<gn::kQ4_K>(p, gt::NoGen{}, stream, "gemm_fused q4_K");
    if (raw && t == Type::Q6_K) return launch<gn::kQ6_K>(p, gt::NoGen{}, stream, "gemm_fused q6_K");
    if (raw && t == Type::Q8_0) return launch<gn::kQ8_0>(p, gt::NoGen{}, stream, "gemm_fused q8_0");
    const bool known = dispatch_type(t, [&](auto tag) { launch<gt::kGen>(p, GenDeq<decltype(tag)::value>{}, stream, "gemm_fused"); });
    if (!known) fail(MINFER_ERR_UNSUPPORTED, "CUDA fused GEMM: tensor type %d", static_cast<int>(t));
}

}  // namespace minfer::cuda
