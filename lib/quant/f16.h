// IEEE half and bfloat16 conversions, bit-exact and portable (round to nearest even, subnormals,
// infinities and NaN handled). Host-only; the CUDA side uses its intrinsics, which round the same way.
#pragma once

#include <cstdint>
#include <cstring>

namespace minfer::quant {

inline uint32_t f32_bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}
inline float bits_f32(uint32_t u) {
    float f;
    std::memcpy(&f, &u, 4);
    return f;
}

inline float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0) {
        if (man == 0) return bits_f32(sign);
        // Subnormal: value = man * 2^-24.
        float v = static_cast<float>(man) * 5.9604644775390625e-8f;
        return sign ? -v : v;
    }
    if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
    return bits_f32(sign | ((exp + 112) << 23) | (man << 13));
}

inline uint16_t f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
    const uint32_t abs = u & 0x7fffffffu;
    if (abs >= 0x7f800000u) {  // inf or NaN (keep NaN quiet and non-zero)
        return static_cast<uint16_t>(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u | ((abs >> 13) & 0x3ffu) : 0u));
    }
    if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
    if (abs < 0x38800000u) {  // below the smallest normal half (2^-14): subnormal or zero
        if (abs < 0x33000000u) return sign;  // below half the smallest subnormal (2^-25): zero
        const uint32_t e = abs >> 23;                     // 102..112
        const uint32_t m = (abs & 0x7fffffu) | 0x800000u;  // implicit bit
        const uint32_t shift = 126 - e;                   // 14..24
        uint32_t r = m >> shift;
        const uint32_t rem = m & ((1u << shift) - 1);
        const uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (r & 1u))) ++r;
        return static_cast<uint16_t>(sign | r);
    }
    uint32_t r = abs - 0x38000000u;  // rebias exponent (127 - 15 = 112, << 23)
    const uint32_t rem = r & 0x1fffu;
    r >>= 13;
    if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
}

inline float bf16_to_f32(uint16_t b) { return bits_f32(uint32_t(b) << 16); }

inline uint16_t f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return static_cast<uint16_t>(u >> 16);
}

}  // namespace minfer::quant
