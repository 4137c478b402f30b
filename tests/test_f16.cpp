// Half and bfloat16 conversions against independent references: every half value round-trips, and
// f32 -> f16 picks the nearest representable half (ties to even) found by search over all halves.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "helpers.h"
#include "quant/f16.h"

using namespace minfer::quant;

namespace {

// Value of a half computed from its fields in double precision (no shared code with f16_to_f32).
double half_value(uint16_t h) {
    const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

}  // namespace

TEST_SUITE("f16") {
    TEST_CASE("every finite half converts exactly and back") {
        for (uint32_t h = 0; h < 65536; ++h) {
            const uint16_t x = static_cast<uint16_t>(h);
            const int exp = (x >> 10) & 31;
            const float f = f16_to_f32(x);
            if (exp == 31) {
                CHECK(((x & 1023) ? std::isnan(f) : std::isinf(f)));
                if (x & 1023) CHECK(std::isnan(f16_to_f32(f32_to_f16(f))));
                continue;
            }
            REQUIRE(static_cast<double>(f) == half_value(x));
            REQUIRE(f32_to_f16(f) == x);
        }
    }

    TEST_CASE("f32 -> f16 rounds to nearest, ties to even, against a search over all halves") {
        std::vector<std::pair<double, uint16_t>> halves;  // non-negative finite halves, ascending
        for (uint16_t h = 0; h < 0x7c00; ++h) halves.push_back({half_value(h), h});
        auto reference = [&](float f) -> uint16_t {
            const uint16_t sign = std::signbit(f) ? 0x8000 : 0;
            const double a = std::fabs(static_cast<double>(f));
            if (a >= 65520.0) return sign | 0x7c00;  // past the midpoint above the largest half
            auto it = std::lower_bound(halves.begin(), halves.end(), std::make_pair(a, uint16_t{0}));
            if (it == halves.end()) return sign | halves.back().second;  // in (65504, 65520): nearest is 65504
            if (it->first == a || it == halves.begin()) return sign | it->second;
            auto lo = it - 1;
            const double dlo = a - lo->first, dhi = it->first - a;
            if (dlo < dhi) return sign | lo->second;
            if (dhi < dlo) return sign | it->second;
            return sign | ((lo->second & 1) ? it->second : lo->second);
        };
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937 rng(static_cast<unsigned>(seed));
        std::uniform_int_distribution<int> e(-30, 17);
        std::uniform_real_distribution<float> m(-2.0f, 2.0f);
        for (int i = 0; i < 200000; ++i) {
            const float f = std::ldexp(m(rng), e(rng));
            REQUIRE_MESSAGE(f32_to_f16(f) == reference(f), "f = ", f);
        }
        // Exact midpoints between neighbours, where ties decide.
        for (size_t k = 0; k + 1 < halves.size(); k += 37) {
            const float mid = static_cast<float>((halves[k].first + halves[k + 1].first) / 2);
            if (static_cast<double>(mid) != (halves[k].first + halves[k + 1].first) / 2) continue;
            CHECK(f32_to_f16(mid) == reference(mid));
            CHECK(f32_to_f16(-mid) == reference(-mid));
        }
        CHECK(f32_to_f16(65504.0f) == 0x7bff);
        CHECK(f32_to_f16(65519.0f) == 0x7bff);
        CHECK(f32_to_f16(65520.0f) == 0x7c00);
        CHECK(f32_to_f16(1e10f) == 0x7c00);
        CHECK(f32_to_f16(-INFINITY) == 0xfc00);
        CHECK(std::isnan(f16_to_f32(f32_to_f16(NAN))));
        CHECK(f32_to_f16(std::ldexp(1.0f, -25)) == 0);       // tie between 0 and the smallest subnormal
        CHECK(f32_to_f16(std::ldexp(1.5f, -25)) == 1);
        CHECK(f32_to_f16(-0.0f) == 0x8000);
    }

    TEST_CASE("bf16 rounds to nearest even and keeps NaN") {
        CHECK(f32_to_bf16(1.0f) == 0x3f80);
        CHECK(bf16_to_f32(0x3f80) == 1.0f);
        // 1 + 2^-8 is exactly between 1 and 1 + 2^-7: ties to even (1.0).
        CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
        CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
        CHECK(std::isnan(bf16_to_f32(f32_to_bf16(NAN))));
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937 rng(static_cast<unsigned>(seed));
        for (int i = 0; i < 100000; ++i) {
            const float f = std::ldexp(std::uniform_real_distribution<float>(-2, 2)(rng), static_cast<int>(rng() % 60) - 30);
            const float r = bf16_to_f32(f32_to_bf16(f));
            REQUIRE(std::fabs(static_cast<double>(r) - f) <= std::fabs(static_cast<double>(f)) * std::ldexp(1.0, -8));
        }
    }
}
