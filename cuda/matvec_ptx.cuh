// The inline-PTX operations of the decode mat-vec (cuda/matvec_impl.cuh) and the prefill attention
// (cuda/attention_mma.cuh): f16x2 arithmetic, the tensor-core MMAs, ldmatrix, cp.async and a streaming
// load. Kept apart so that tests/emu can substitute host emulations and run the kernels' device code on a
// CPU (tests/test_matvec_emu.cpp, tests/test_attention_emu.cpp).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/pdl.cuh"  // pdl_wait, pdl_launch_dependents (tests/emu has its own)

namespace minfer::cuda::mv {

// The dynamic shared memory of the MMA kernels.
extern __shared__ __align__(16) uint8_t mv_smem[];

__device__ __forceinline__ uint32_t hadd2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ uint32_t hmul2(uint32_t a, uint32_t b) {
    uint32_t d;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(d) : "r"(a), "r"(b));
    return d;
}

__device__ __forceinline__ uint32_t hfma2(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t d;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// f16x2 with `lo` in the low half.
__device__ __forceinline__ uint32_t pack_f16x2(float lo, float hi) {
    uint32_t d;
    asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(d) : "f"(hi), "f"(lo));
    return d;
}

// D = A * B + D for one m16n8k16 tile, f16 operands, f32 accumulators. Register roles (PTX ISA, lane =
// 4 * g + t): a0 = A[g][2t, 2t+1], a1 = A[g+8][2t, 2t+1], a2 = A[g][2t+8, 2t+9], a3 = A[g+8][2t+8, 2t+9];
// b.x = B[2t, 2t+1][g], b.y = B[2t+8, 2t+9][g]; d = {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]}.
__device__ __forceinline__ void mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 b) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y));
}

// D = A * B + D for one m16n8k32 tile of 8-bit integers, s32 accumulators; A unsigned (kSignedA false:
// codes 0 .. 255) or signed, B signed. Register roles (lane = 4 * g + t): a0 = A[g][4t .. 4t+3], a1 =
// A[g+8][4t ..], a2 = A[g][4t+16 .. 4t+19], a3 = A[g+8][4t+16 ..] (byte i of a register is column +i);
// b.x = B[4t .. 4t+3][g], b.y = B[4t+16 .. 4t+19][g]; d = {D[g][2t], D[g][2t+1], D[g+8][2t], D[g+8][2t+1]}.
template <bool kSignedA>
__device__ __forceinline__ void mma_i8(int (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint2 b) {
    if constexpr (kSignedA) {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y));
    } else {
        asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
            : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3])
            : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b.x), "r"(b.y));
    }
}

// c + the sum of the four products of a's bytes (unsigned) and b's bytes (signed): dp4a.
__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}
// The same with a's bytes signed too.
__device__ __forceinline__ int dp4a_ss(uint32_t a, uint32_t b, int c) {
    int d;
    asm("dp4a.s32.s32 %0, %1, %2, %3;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
    return d;
}

// ldmatrix .x4 of 8x8 f16 matrices from shared memory: lanes 8i .. 8i+7 give the 16-byte-aligned row
// addresses (shared space) of matrix i's rows 0 .. 7; r[i] of lane 4g + t is matrix i's row g, elements
// 2t and 2t+1 (an MMA B fragment of keys x dims for S = Q K^T), or with .trans its elements (2t, g) and
// (2t+1, g) (the B fragment of V[key][dim] for O = P V).
__device__ __forceinline__ void ldsm_x4(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}
__device__ __forceinline__ void ldsm_x4_trans(uint32_t (&r)[4], uint32_t addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(addr)
                 : "memory");
}

// Read-only loads of the quantized input (8 or 16 bytes of digits; a 16-byte block record), kept in L1.
__device__ __forceinline__ uint2 ld_x8(const int8_t* p) { return __ldg(reinterpret_cast<const uint2*>(p)); }
__device__ __forceinline__ int4 ld_x16(const int4* p) { return __ldg(p); }
__device__ __forceinline__ int4 ld_xmeta(const int4* p) { return __ldg(p); }

// 16 bytes from global src + OFF to shared dst + OFF (both 16-byte aligned); bytes past `bytes` are zeroed.
template <int OFF>
__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0+%3], [%1+%3], 16, %2;\n" ::"r"(dst), "l"(src), "r"(bytes), "n"(OFF));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

__device__ __forceinline__ uint4 ld_stream(const uint4* p) {
    uint4 v;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "l"(p));
    return v;
}
__device__ __forceinline__ uint2 ld_stream8(const uint2* p) {
    uint2 v;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0, %1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
    return v;
}
__device__ __forceinline__ uint32_t ld_stream4(const uint32_t* p) {
    uint32_t v;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(v) : "l"(p));
    return v;
}
// Read-only weight headers (block scales) shared by a block's threads, kept in L1.
__device__ __forceinline__ uint2 ld_w64(const uint2* p) { return __ldg(p); }
__device__ __forceinline__ uint32_t ld_w32(const uint32_t* p) { return __ldg(p); }
__device__ __forceinline__ uint32_t ld_w16(const uint16_t* p) { return __ldg(p); }

}  // namespace minfer::cuda::mv
