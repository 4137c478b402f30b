// Bit-level helpers for quantized blocks (f16x2 constants, the magic-number conversion of code bytes,
// q4_K's scales), shared by the decode mat-vec (cuda/matvec_impl.cuh) and the
// narrow GEMM (cuda/gemm_narrow.cuh). Device code that tests/emu also compiles on the host.
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)

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

// The 6-bit scales (sc) and mins (mn) of sub-blocks 0-3 (t < 2) or 4-7 (t >= 2) of a q4_K/q5_K
// super-block whose first 16 bytes are h (d, dmin, scales[12]): byte j of sc and mn is sub-block
// 4 (t >> 1) + j's.
__device__ __forceinline__ void k4_scales(const uint4 h, int t, uint32_t& sc, uint32_t& mn) {
    const bool low = t < 2;
    sc = low ? (h.y & 0x3F3F3F3Fu) : ((h.w & 0x0F0F0F0Fu) | ((h.y >> 2) & 0x30303030u));
    mn = low ? (h.z & 0x3F3F3F3Fu) : (((h.w >> 4) & 0x0F0F0F0Fu) | ((h.z >> 2) & 0x30303030u));
}

}  // namespace minfer::cuda::mv
