// Bit-level helpers for quantized blocks (f16x2 constants, the magic-number conversion of code bytes,
// q4_K's scales, loads of words at 2-byte-aligned shared offsets), shared by the decode mat-vec
// (cuda/matvec_impl.cuh), the narrow GEMM (cuda/gemm_narrow.cuh) and the prefill GEMM (cuda/gemm_tc.cuh).
// Device code that tests/emu also compiles on the host.
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)
#include "quant/types.h"

namespace minfer::cuda::mv {

// f16 bit pattern of v, for constants that f16 holds exactly (normal range, at most 11 significant bits).
constexpr uint32_t f16_bits(double v) {
    uint32_t sign = 0;
    if (v < 0) {
        sign = 0x8000u;
        v = -v;
    }
    int e = 0;
    while (v >= 2.0) {
        v /= 2.0;
        ++e;
    }
    while (v < 1.0) {
        v *= 2.0;
        --e;
    }
    return sign | static_cast<uint32_t>(e + 15) << 10 | static_cast<uint32_t>((v - 1.0) * 1024.0);
}
// Both halves of an f16x2 set to v.
constexpr uint32_t h2c(double v) { return f16_bits(v) * 0x10001u; }
static_assert(f16_bits(1024.0) == 0x6400u && f16_bits(-1032.0) == 0xE408u && f16_bits(0.0625) == 0x2C00u &&
              f16_bits(-72.0) == 0xD480u && f16_bits(-96.0) == 0xD600u && f16_bits(-1152.0) == 0xE480u &&
              f16_bits(-1056.0) == 0xE420u,
              "f16 constants");
// The same exponent byte four times: __byte_perm(bytes, kMagicB, sel) turns chosen bytes b into 1024 + b.
constexpr uint32_t kMagicB = 0x64646464u;

// ---- q8_0 in groups: a device-side layout of q8_0 matrices ---------------------------------------------
//
// kQ8_0G names q8_0 as the decode mat-vecs read a matrix that the load has regrouped (cuda/backend.cu,
// MINFER_Q80_GROUPS): rows of whole 256-column groups, each group's 272 bytes (its eight 34-byte blocks
// in the file) holding the eight f16 scales first (block b's at bytes 2b, 2b + 1), then the eight
// blocks' 32 codes (block b's at bytes 16 + 32b .. 16 + 32b + 31). The same bytes per group, row and
// matrix; but where a row starts on a 16-byte boundary (every row does: a row is 272 bytes a group) every
// block's codes do too, so a thread loads them straight into registers, two 16-byte loads a block, where
// the file's 2-byte aligned blocks need staging through shared memory or overlapping loads (docs/perf.md,
// "Decode: q8_0 on direct loads measured slower"). Not a GGUF type (quant/types.h): never in a file,
// never on the CPU; quant::type_info does not know it, and a reader of weights that does not either fails
// on the type.
constexpr quant::Type kQ8_0G = quant::Type::Q8_0_GROUPED_DEVICE;
constexpr int kQ80GroupBytes = 272;
__host__ __device__ constexpr int q80g_scale_at(int b) { return 2 * b; }
__host__ __device__ constexpr int q80g_codes_at(int b) { return 16 + 32 * b; }
// Block b of a group (src: the file's 34 bytes of it) into its places in the grouped group dst.
__host__ __device__ inline void q80_group_block(const uint8_t* src, uint8_t* dst, int b) {
    dst[q80g_scale_at(b)] = src[0];
    dst[q80g_scale_at(b) + 1] = src[1];
    for (int i = 0; i < 32; ++i) dst[q80g_codes_at(b) + i] = src[2 + i];
}
// One group from the file's layout (src, 272 bytes) to the grouped one (dst, another 272 bytes).
__host__ __device__ inline void q80_regroup(const uint8_t* src, uint8_t* dst) {
    for (int b = 0; b < 8; ++b) q80_group_block(src + 34 * b, dst, b);
}
// A grouped row of `cols` columns (a multiple of 32): whole groups, the last one padded with absent blocks
// (zeros) where cols is not a multiple of 256. The in-place regrouping takes whole rows only; the copies
// for the one-token mat-vec (cuda::q80_group_copy, MINFER_Q80_COPY in cuda/model.cuh) take any, and the
// one-input dp4a kernel (DpQ80G) reads rows of this length whatever cols is, never a block past cols.
__host__ __device__ constexpr int64_t q80g_row_bytes(int64_t cols) { return (cols + 255) / 256 * kQ80GroupBytes; }

// ---- q5_0 in groups: a device-side copy of q5_0 matrices for the one-token mat-vec ---------------------
//
// kQ5_0G names the copy the load makes of q5_0 matmul weights (cuda/backend.cu, MINFER_Q50_COPY in
// cuda/model.cuh) for the one-token dp4a mat-vec (DpQ50G, cuda/matvec_impl.cuh), the only reader of it.
// q5_0's 22-byte blocks (d, qh[4], qs[16]) are only 2-byte aligned in the file; here each row is whole
// 176-byte groups of 8 blocks (256 columns; the last group padded with zero blocks where cols is not a
// multiple of 256, as the 896 columns of a qwen2-0.5b, whose q4_K_M files keep those matrices in q5_0):
// the eight blocks' qs first (block b's 16 bytes at 16 b, so a thread loads them straight into registers),
// then their qh (4 bytes each at 128 + 4 b), then their d (2 bytes each at 160 + 2 b). The file's bytes
// per block, rearranged; a padded group's absent blocks are zeros (d = 0). Not a GGUF type (quant/types.h).
constexpr quant::Type kQ5_0G = quant::Type::Q5_0_GROUPED_DEVICE;
constexpr int kQ50GroupBytes = 176;
__host__ __device__ constexpr int q50g_qs_at(int b) { return 16 * b; }
__host__ __device__ constexpr int q50g_qh_at(int b) { return 128 + 4 * b; }
__host__ __device__ constexpr int q50g_d_at(int b) { return 160 + 2 * b; }
__host__ __device__ constexpr int64_t q50g_row_bytes(int64_t cols) { return (cols + 255) / 256 * kQ50GroupBytes; }
// Block b of a group (src: the file's 22 bytes of it) into its places in the grouped group dst.
__host__ __device__ inline void q50_group_block(const uint8_t* src, uint8_t* dst, int b) {
    dst[q50g_d_at(b)] = src[0];
    dst[q50g_d_at(b) + 1] = src[1];
    for (int i = 0; i < 4; ++i) dst[q50g_qh_at(b) + i] = src[2 + i];
    for (int i = 0; i < 16; ++i) dst[q50g_qs_at(b) + i] = src[6 + i];
}

// ---- q6_K padded: a device-side copy of q6_K matrices for the one-token mat-vec --------------------------
//
// kQ6_KP names the copy the load makes of q6_K matmul weights (cuda/backend.cu, MINFER_Q6K_PAD) for the
// one-token dp4a mat-vec (DpQ6KP, cuda/matvec_impl.cuh), the only reader of it. Each 210-byte super-block
// of the file (ql[128], qh[64], scales[16], d) becomes 224 bytes (7 sectors of 32, so every block of every
// row starts on a 32-byte boundary), arranged for that kernel's thread units p = 4n + v (n, v as
// Staged<Q6_K>'s: the 32 columns 128 n + 32 g + 8 v + 0..7, g = 0..3): bytes 16p .. 16p + 7 hold ql[64n +
// 8v ..] and 16p + 8 .. 16p + 15 ql[64n + 32 + 8v ..] (one 16-byte load), 128 + 8p .. 128 + 8p + 7 qh[32n +
// 8v ..] (one 8-byte load), 192 .. 207 the scales, 208 .. 209 d, then 14 zeros. A unit takes four loads
// where the file's 2-byte aligned blocks cost a thread ten and funnel shifts (DpQ6K) or staging through
// shared memory; 224/210 of the file's bytes are read. (A layout of the file's size, each row's 208-byte
// bodies back to back and then their d's, measured the same end to end on the H200: faster on the short
// launches, 12% slower on the output projection, docs/perf.md.) Not a GGUF type (quant/types.h).
constexpr quant::Type kQ6_KP = quant::Type::Q6_K_PADDED_DEVICE;
constexpr int kQ6KPBlockBytes = 224;
__host__ __device__ constexpr int q6kp_ql_at(int p) { return 16 * p; }      // 16 bytes: ql[64n + 8v ..], ql[64n + 32 + 8v ..]
__host__ __device__ constexpr int q6kp_qh_at(int p) { return 128 + 8 * p; }  // 8 bytes: qh[32n + 8v ..]
constexpr int kQ6KPScales = 192, kQ6KPD = 208;
__host__ __device__ constexpr int64_t q6kp_row_bytes(int64_t cols) { return kQ6KPBlockBytes * (cols / 256); }
// One block from the file's layout (src, 210 bytes) to the padded one (dst, 224 bytes).
__host__ __device__ inline void q6k_pad_block(const uint8_t* src, uint8_t* dst) {
    for (int p = 0; p < 8; ++p) {
        const int n = p >> 2, v = p & 3;
        for (int i = 0; i < 8; ++i) {
            dst[q6kp_ql_at(p) + i] = src[64 * n + 8 * v + i];
            dst[q6kp_ql_at(p) + 8 + i] = src[64 * n + 32 + 8 * v + i];
            dst[q6kp_qh_at(p) + i] = src[128 + 32 * n + 8 * v + i];
        }
    }
    for (int i = 0; i < 18; ++i) dst[kQ6KPScales + i] = src[192 + i];  // scales, d
    for (int i = 210; i < kQ6KPBlockBytes; ++i) dst[i] = 0;
}

// ---- q2_K and q3_K rearranged: device-side copies for the one-token mat-vec ---------------------------
//
// kQ2_KP and kQ3_KP name the copies the load makes of q2_K and q3_K matmul weights (cuda/backend.cu,
// MINFER_K23_COPY in cuda/model.cuh) for the one-token dp4a mat-vec (DpQ2KP, DpQ3KP in
// cuda/matvec_impl.cuh), their only reader. In the file, the 2-bit codes of a super-block's columns 128 n
// + 32 j + l (l = 0..31) are bits 2j, 2j + 1 of qs[32 n + l] (and q3_K's third bit is bit 4 n + j of
// hmask[l]), so the 32 columns of one input block take a quarter of 32 bytes each. Here unit p = 4 n + j
// (those 32 columns) has its codes together: 8 bytes at 8 p, where byte b of word h (h = 0, 1: columns
// 16 h .. 16 h + 15) holds column 16 h + 4 i + b in bits 2 i, 2 i + 1 (so a shift by 2 i and a mask give
// the codes of columns 16 h + 4 i .. + 3 in the four bytes, as dp4a takes them).
//  * q3_K (110 bytes in the file: hmask[32], qs[64], scales[12], d): unit p's third bits at 64 + 4 p
//    (byte b, bit i: column 4 i + b), the file's scales and d at 96 .. 109, two zeros: 112 bytes, so that
//    every block of a row is 16-byte aligned.
//  * q2_K (84 bytes: scales[16], qs[64], d, dmin): the file's scales at 64 .. 79 (unit p's two at 64 +
//    2 p), d and dmin at 80 .. 83: the file's 84 bytes, every block 4-byte aligned.
// The file's bytes, rearranged (none dropped, none added but q3_K's two zeros). Not GGUF types (quant/types.h).
constexpr quant::Type kQ2_KP = quant::Type::Q2_K_ARRANGED_DEVICE;
constexpr quant::Type kQ3_KP = quant::Type::Q3_K_ARRANGED_DEVICE;
constexpr int kQ2KPBlockBytes = 84, kQ3KPBlockBytes = 112;
constexpr int kK23Codes = 0, kQ3KPHigh = 64, kQ3KPScales = 96, kQ2KPScales = 64, kQ2KPD = 80;
__host__ __device__ constexpr int k23p_block_bytes(quant::Type t) { return t == kQ3_KP ? kQ3KPBlockBytes : kQ2KPBlockBytes; }
__host__ __device__ constexpr int64_t k23p_row_bytes(quant::Type t, int64_t cols) { return k23p_block_bytes(t) * (cols / 256); }
// One super-block from the file's layout (src: 84 bytes of q2_K, 110 of q3_K) to the copy's (dst).
__host__ __device__ inline void k23_arrange_block(bool q3, const uint8_t* src, uint8_t* dst) {
    const int bytes = q3 ? kQ3KPBlockBytes : kQ2KPBlockBytes;
    for (int i = 0; i < bytes; ++i) dst[i] = 0;
    const uint8_t* qs = src + (q3 ? 32 : 16);
    for (int p = 0; p < 8; ++p) {
        const int n = p >> 2, j = p & 3;
        for (int e = 0; e < 32; ++e) {
            const int code = (qs[32 * n + e] >> (2 * j)) & 3, h = e >> 4, i = (e & 15) >> 2, b = e & 3;
            dst[kK23Codes + 8 * p + 4 * h + b] |= static_cast<uint8_t>(code << (2 * i));
            if (q3) dst[kQ3KPHigh + 4 * p + (e & 3)] |= static_cast<uint8_t>(((src[e] >> (4 * n + j)) & 1) << (e >> 2));
        }
    }
    if (q3) {
        for (int i = 0; i < 14; ++i) dst[kQ3KPScales + i] = src[96 + i];  // scales, d
    } else {
        for (int i = 0; i < 16; ++i) dst[kQ2KPScales + i] = src[i];
        for (int i = 0; i < 4; ++i) dst[kQ2KPD + i] = src[80 + i];  // d, dmin
    }
}

// The 6-bit scales (sc) and mins (mn) of sub-blocks 0-3 (t < 2) or 4-7 (t >= 2) of a q4_K/q5_K
// super-block whose first 16 bytes are h (d, dmin, scales[12]): byte j of sc and mn is sub-block
// 4 (t >> 1) + j's.
__device__ __forceinline__ void k4_scales(const uint4 h, int t, uint32_t& sc, uint32_t& mn) {
    const bool low = t < 2;
    sc = low ? (h.y & 0x3F3F3F3Fu) : ((h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u));
    mn = low ? (h.z & 0x3F3F3F3Fu) : (((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u));
}

// ---- shared memory by byte offsets (mv_smem) ----------------------------------------------------------

__device__ __forceinline__ float f16_lo(uint32_t v) { return __half2float(__ushort_as_half(static_cast<unsigned short>(v))); }
__device__ __forceinline__ float f16_hi(uint32_t v) { return __half2float(__ushort_as_half(static_cast<unsigned short>(v >> 16))); }
__device__ __forceinline__ uint32_t rotl(uint32_t v, int s) { return __funnelshift_l(v, v, s); }

// Shared memory (mv_smem, cuda/matvec_ptx.cuh) by byte offsets, so the compiler emits LDS/STS.
__device__ __forceinline__ uint32_t ld16(uint32_t off) { return *reinterpret_cast<const uint16_t*>(mv_smem + off); }
__device__ __forceinline__ uint32_t ld32(uint32_t off) { return *reinterpret_cast<const uint32_t*>(mv_smem + off); }
__device__ __forceinline__ uint2 ld64(uint32_t off) { return *reinterpret_cast<const uint2*>(mv_smem + off); }
__device__ __forceinline__ uint4 ld128(uint32_t off) { return *reinterpret_cast<const uint4*>(mv_smem + off); }
__device__ __forceinline__ float ldf(uint32_t off) { return *reinterpret_cast<const float*>(mv_smem + off); }
__device__ __forceinline__ void st64(uint32_t off, uint2 v) { *reinterpret_cast<uint2*>(mv_smem + off) = v; }
__device__ __forceinline__ void st128(uint32_t off, uint4 v) { *reinterpret_cast<uint4*>(mv_smem + off) = v; }
__device__ __forceinline__ uint4 as_uint4(int4 v) {
    return make_uint4(static_cast<uint32_t>(v.x), static_cast<uint32_t>(v.y), static_cast<uint32_t>(v.z), static_cast<uint32_t>(v.w));
}
__device__ __forceinline__ void stf(uint32_t off, float v) { *reinterpret_cast<float*>(mv_smem + off) = v; }
__device__ __forceinline__ float ld_f16(uint32_t off) { return f16_lo(ld16(off)); }
// N consecutive little-endian words at a + off, a the aligned word below a 2-byte aligned offset o
// (o & ~3) and sh = (o & 2) * 8, off a multiple of 4: N + 1 aligned loads and funnel shifts (the blocks of
// q4_0, q5_0, q8_0, q3_K and q6_K are only 2-byte aligned); several fields of one block at o share the
// alignment work. Reads one word past the end.
template <int N>
__device__ __forceinline__ void ld_words_at(uint32_t a, uint32_t sh, uint32_t off, uint32_t (&w)[N]) {
    uint32_t prev = ld32(a + off);
#pragma unroll
    for (int i = 0; i < N; ++i) {
        const uint32_t next = ld32(a + off + 4 * i + 4);
        w[i] = __funnelshift_r(prev, next, sh);
        prev = next;
    }
}
// The same at the 2-byte aligned offset off alone.
template <int N>
__device__ __forceinline__ void ld_words(uint32_t off, uint32_t (&w)[N]) {
    ld_words_at(off & ~3u, (off & 2u) * 8u, 0, w);
}
template <int N>
__device__ __forceinline__ void ld_words4(uint32_t off, uint32_t (&w)[N]) {  // 4-byte aligned offset
#pragma unroll
    for (int i = 0; i < N; ++i) w[i] = ld32(off + 4 * i);
}

}  // namespace minfer::cuda::mv
