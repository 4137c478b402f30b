// Hopper's warpgroup MMA (wgmma, sm_90a only) for the kernels that use it: the prefill GEMM of our own
// (cuda/gemm_tc.cuh) and the prefill attention (cuda/attention_wg.cuh). Device code for sm_90a alone: the
// callers compile their wgmma paths only where MINFER_WGMMA_BUILT is 1 (nvcc's device pass for sm_90a,
// which defines __CUDA_ARCH_FEAT_SM90_ALL), and the functions below do not exist elsewhere.
//
// Shared-memory operands are described by 64-bit descriptors. Every tile here uses the 128-byte swizzle:
// a tile is made of 1024-byte atoms of 8 rows of 128 bytes, the 16-byte chunk c of row r stored at chunk
// c ^ (r % 8) (sw128 below), atoms 1024-byte aligned.
//  - K-major operand (A or B with the reduction dimension contiguous, e.g. a weight row or a K-cache row):
//    each 128-byte row holds 64 consecutive k of one m (or n); rows of 8 at 128 bytes, groups of 8 rows at
//    the stride byte offset (1024 for a dense atom column); the leading byte offset is unused. A k-step of
//    16 starts 32 bytes further into the rows.
//  - MN-major operand (B with n contiguous, e.g. a V-cache row, which is k = key by n = dim): each row
//    holds 64 consecutive n of one k; 8 k-rows at 128 bytes, groups of 8 k at the stride byte offset
//    (1024), and the next 64 n at the leading byte offset. The instruction is told with its trans-b bit.
// Accumulators of an m64nN tile: d[4i + e] of lane 4g + t of the group's warp w is row 16w + g + 8(e >> 1),
// column 8i + 2t + (e & 1); an A operand from registers (m64k16) has the mma.sync m16n8k16 A-fragment
// layout per warp, for rows 16w .. 16w + 15.
#pragma once

#include <cstdint>

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define MINFER_WGMMA_BUILT 1
#else
#define MINFER_WGMMA_BUILT 0
#endif

namespace minfer::cuda::wg {

// Byte offset of the 16-byte chunk c of row r in a 128-byte-swizzled tile of 128-byte rows.
__host__ __device__ constexpr uint32_t sw128(int r, int c) { return static_cast<uint32_t>(r * 128 + ((c ^ (r & 7)) << 4)); }

#if MINFER_WGMMA_BUILT
// Descriptor of a 128-byte-swizzled operand at shared address `addr`: start, leading and stride byte
// offsets in 16-byte units, swizzle mode 1 (128 bytes) in bits 62-63.
__device__ __forceinline__ uint64_t desc(uint32_t addr, uint32_t lbo_bytes, uint32_t sbo_bytes) {
    return uint64_t{(addr & 0x3FFFFu) >> 4} | (uint64_t{(lbo_bytes >> 4) & 0x3FFFu} << 16) |
           (uint64_t{(sbo_bytes >> 4) & 0x3FFFu} << 32) | (uint64_t{1} << 62);
}
// A K-major operand of dense atoms (8-row groups 1024 bytes apart).
__device__ __forceinline__ uint64_t desc_k(uint32_t addr) { return desc(addr, 16, 1024); }

__device__ __forceinline__ void fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
// Generic-proxy writes of shared memory (st.shared, cp.async) made visible to the tensor cores' reads.
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

// Pins accumulator (or fragment) registers at this point of the program: the compiler sees a wgmma's
// outputs as written when it is issued, so without this it could move their reads above wait() or the
// writes that feed one below fence().
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
    #pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(uint32_t (&r)[N]) {
    #pragma unroll
    for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}

#define MINFER_WG_D8(i)                                                                                              \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), "+f"(d[i + 6]), \
        "+f"(d[i + 7])
#define MINFER_WG_D32 MINFER_WG_D8(0), MINFER_WG_D8(8), MINFER_WG_D8(16), MINFER_WG_D8(24)
#define MINFER_WG_D64 MINFER_WG_D32, MINFER_WG_D8(32), MINFER_WG_D8(40), MINFER_WG_D8(48), MINFER_WG_D8(56)
#define MINFER_WG_R32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define MINFER_WG_R64                                                                                                         \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, " \
    "%25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "  \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"

// D[64][N] (+)= A[64][16] B[N][16]^T for the calling warpgroup, f16 operands, f32 accumulators; A and B
// K-major in shared memory. accumulate = false overwrites D (its old values are ignored).
template <int N>
__device__ __forceinline__ void mma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, bool accumulate) {
    static_assert(N == 64 || N == 128, "m64n64 or m64n128");
    if constexpr (N == 64) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " MINFER_WG_R32 ", %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : MINFER_WG_D32
                     : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " MINFER_WG_R64 ", %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : MINFER_WG_D64
                     : "l"(da), "l"(db), "r"(static_cast<int>(accumulate)));
    }
}

// D[64][N] += A[64][16] B[16][N] with A from registers (a: this thread's m16k16 fragment of its warp's 16
// rows) and B MN-major in shared memory (trans-b set), f16 operands, f32 accumulators.
template <int N>
__device__ __forceinline__ void mma_rs_mn(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t db) {
    static_assert(N == 64 || N == 128, "m64n64 or m64n128");
    if constexpr (N == 64) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 " MINFER_WG_R32 ", {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                     : MINFER_WG_D32
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    } else {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 " MINFER_WG_R64 ", {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                     : MINFER_WG_D64
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db), "r"(1));
    }
}

#undef MINFER_WG_D8
#undef MINFER_WG_D32
#undef MINFER_WG_D64
#undef MINFER_WG_R32
#undef MINFER_WG_R64
#endif  // MINFER_WGMMA_BUILT

}  // namespace minfer::cuda::wg
