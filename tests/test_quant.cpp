// Quantized formats. Hand-made blocks (bytes written at their GGUF offsets, not through blocks.h) are
// decoded by the library and compared with values worked out here from the format definitions, written
// out again in this file; quantizers round-trip fresh random data within per-type error bounds and are
// deterministic; dot products match float64 references and the portable and AVX2 kernels agree.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "core/error.h"
#include "helpers.h"
#include "quant/blocks.h"
#include "quant/quant.h"

using namespace minfer::quant;

namespace {

// ---- helpers ----------------------------------------------------------------------------------------

// Value of a half from its fields, in double (no shared code with f16.h).
double hv(uint16_t h) {
    const int sign = h >> 15, exp = (h >> 10) & 31, man = h & 1023;
    const double v = exp == 0 ? std::ldexp(man, -24) : std::ldexp(1024 + man, exp - 25);
    return sign ? -v : v;
}

void put16(std::vector<uint8_t>& b, size_t off, uint16_t v) {
    b[off] = static_cast<uint8_t>(v);
    b[off + 1] = static_cast<uint8_t>(v >> 8);
}

// A fixed byte pattern that visits every nibble value in both halves of a byte.
uint8_t pat(int i, int salt) {
    const int lo = (i * 7 + salt * 3) & 15, hi = (i * 5 + salt * 11 + (i >> 4)) & 15;
    return static_cast<uint8_t>(lo | hi << 4);
}

std::vector<float> deq(Type t, const std::vector<uint8_t>& raw, int64_t n) {
    REQUIRE(row_bytes(t, n) == raw.size());
    std::vector<float> y(static_cast<size_t>(n), std::nanf(""));
    dequantize_row(t, raw.data(), y.data(), n);
    return y;
}

// got[e] == want[e] within float rounding of terms of total magnitude mag[e].
void check_values(const std::vector<float>& got, const std::vector<double>& want, const std::vector<double>& mag) {
    REQUIRE(got.size() == want.size());
    for (size_t e = 0; e < got.size(); ++e) {
        INFO("element " << e << ": got " << got[e] << ", want " << want[e]);
        REQUIRE(std::isfinite(got[e]));
        CHECK(std::fabs(double(got[e]) - want[e]) <= 1e-6 * mag[e] + 1e-30);
    }
}

unsigned fresh_seed() { return static_cast<unsigned>(test::seed()); }  // callers CAPTURE it

std::vector<float> gaussian(std::mt19937& rng, int64_t n, float sigma, float mean = 0.0f) {
    std::normal_distribution<float> nd(mean, sigma);
    std::vector<float> v(static_cast<size_t>(n));
    for (auto& x : v) x = nd(rng);
    return v;
}

std::vector<uint8_t> quantize(Type t, const std::vector<float>& x) {
    std::vector<uint8_t> q(row_bytes(t, static_cast<int64_t>(x.size())), 0xEE);
    quantize_row(t, x.data(), q.data(), static_cast<int64_t>(x.size()));
    return q;
}

double nrmse(const std::vector<float>& x, const std::vector<float>& y) {
    double num = 0.0, den = 0.0;
    for (size_t i = 0; i < x.size(); ++i) {
        num += (double(x[i]) - y[i]) * (double(x[i]) - y[i]);
        den += double(x[i]) * x[i];
    }
    return std::sqrt(num / den);
}

// Test-side packers of the K-quant scale bytes, from the definitions in the GGUF format.
// q4_K/q5_K: 8 scales and 8 mins of 6 bits in 12 bytes.
void pack_k4_scales(const int sc[8], const int mn[8], uint8_t* out) {
    for (int i = 0; i < 12; ++i) out[i] = 0;
    for (int j = 0; j < 8; ++j) {
        if (j < 4) {
            out[j] = static_cast<uint8_t>(out[j] | sc[j]);      // bits 0-5 of byte j: scale j
            out[j + 4] = static_cast<uint8_t>(out[j + 4] | mn[j]);  // bits 0-5 of byte j+4: min j
        } else {
            out[j + 4] = static_cast<uint8_t>((sc[j] & 15) | (mn[j] & 15) << 4);  // bytes 8..11: low nibbles
            out[j - 4] = static_cast<uint8_t>(out[j - 4] | (sc[j] >> 4) << 6);     // top bits of bytes 0..3
            out[j] = static_cast<uint8_t>(out[j] | (mn[j] >> 4) << 6);             // top bits of bytes 4..7
        }
    }
}

// q3_K: 16 signed scales (-32..31) stored with offset 32 in 12 bytes.
void pack_q3k_scales(const int s[16], uint8_t* out) {
    for (int i = 0; i < 12; ++i) out[i] = 0;
    for (int i = 0; i < 16; ++i) {
        const int v = s[i] + 32;
        out[i % 8] = static_cast<uint8_t>(out[i % 8] | (v & 15) << (4 * (i / 8)));
        out[8 + i % 4] = static_cast<uint8_t>(out[8 + i % 4] | (v >> 4) << (2 * (i / 4)));
    }
}

const Type kWeightTypes[] = {Type::F32,  Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1,
                             Type::Q8_0, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K};

bool is_k(Type t) { return type_info(t).block_elems == 256; }

std::string nm(Type t) { return type_info(t).name; }

}  // namespace

TEST_SUITE("quant") {
    // ---- layouts ------------------------------------------------------------------------------------

    TEST_CASE("block structs have the GGUF field offsets and the type table's sizes") {
        CHECK(offsetof(BlockQ4_1, m) == 2);
        CHECK(offsetof(BlockQ4_1, qs) == 4);
        CHECK(offsetof(BlockQ5_0, qh) == 2);
        CHECK(offsetof(BlockQ5_0, qs) == 6);
        CHECK(offsetof(BlockQ5_1, qh) == 4);
        CHECK(offsetof(BlockQ5_1, qs) == 8);
        CHECK(offsetof(BlockQ8_1, qs) == 4);
        CHECK(offsetof(BlockQ2_K, qs) == 16);
        CHECK(offsetof(BlockQ2_K, d) == 80);
        CHECK(offsetof(BlockQ2_K, dmin) == 82);
        CHECK(offsetof(BlockQ3_K, qs) == 32);
        CHECK(offsetof(BlockQ3_K, scales) == 96);
        CHECK(offsetof(BlockQ3_K, d) == 108);
        CHECK(offsetof(BlockQ4_K, scales) == 4);
        CHECK(offsetof(BlockQ4_K, qs) == 16);
        CHECK(offsetof(BlockQ5_K, qh) == 16);
        CHECK(offsetof(BlockQ5_K, qs) == 48);
        CHECK(offsetof(BlockQ6_K, qh) == 128);
        CHECK(offsetof(BlockQ6_K, scales) == 192);
        CHECK(offsetof(BlockQ6_K, d) == 208);
        CHECK(offsetof(BlockQ8_K, qs) == 4);
        CHECK(offsetof(BlockQ8_K, bsums) == 260);
        const std::pair<Type, size_t> sizes[] = {
            {Type::Q4_0, sizeof(BlockQ4_0)}, {Type::Q4_1, sizeof(BlockQ4_1)}, {Type::Q5_0, sizeof(BlockQ5_0)},
            {Type::Q5_1, sizeof(BlockQ5_1)}, {Type::Q8_0, sizeof(BlockQ8_0)}, {Type::Q8_1, sizeof(BlockQ8_1)},
            {Type::Q2_K, sizeof(BlockQ2_K)}, {Type::Q3_K, sizeof(BlockQ3_K)}, {Type::Q4_K, sizeof(BlockQ4_K)},
            {Type::Q5_K, sizeof(BlockQ5_K)}, {Type::Q6_K, sizeof(BlockQ6_K)}, {Type::Q8_K, sizeof(BlockQ8_K)}};
        for (auto [t, s] : sizes) {
            CHECK(static_cast<size_t>(type_info(t).block_bytes) == s);
            CHECK(row_bytes(t, 3 * type_info(t).block_elems) == 3 * s);
        }
        CHECK(row_bytes(Type::F32, 7) == 28);
        CHECK(row_bytes(Type::BF16, 7) == 14);
    }

    // ---- hand-made blocks, one test per type --------------------------------------------------------

    TEST_CASE("f32, f16 and bf16 rows decode bit for bit") {
        const float f[] = {1.0f, -2.5f, 3.0e-38f, -0.0f, 65504.0f};
        std::vector<uint8_t> raw(sizeof f);
        std::memcpy(raw.data(), f, sizeof f);
        auto y = deq(Type::F32, raw, 5);
        for (int i = 0; i < 5; ++i) CHECK(std::memcmp(&y[static_cast<size_t>(i)], &f[i], 4) == 0);

        const uint16_t h[] = {0x3C00, 0xC000, 0x7BFF, 0x0001, 0x8400, 0x3555};
        std::vector<uint8_t> rh(12);
        for (int i = 0; i < 6; ++i) put16(rh, 2 * static_cast<size_t>(i), h[i]);
        y = deq(Type::F16, rh, 6);
        for (int i = 0; i < 6; ++i) CHECK(double(y[static_cast<size_t>(i)]) == hv(h[i]));

        const uint16_t b[] = {0x3F80, 0xC040, 0x0001, 0x7F7F, 0xBE20};
        const double bv[] = {1.0, -3.0, std::ldexp(1.0, -133), std::ldexp(255.0, 120), -0.15625};
        std::vector<uint8_t> rb(10);
        for (int i = 0; i < 5; ++i) put16(rb, 2 * static_cast<size_t>(i), b[i]);
        y = deq(Type::BF16, rb, 5);
        for (int i = 0; i < 5; ++i) CHECK(double(y[static_cast<size_t>(i)]) == bv[i]);
    }

    TEST_CASE("q4_0 and q4_1 hand-made blocks") {
        const uint16_t ds[3] = {0x3C00 /* 1 */, 0xB800 /* -0.5 */, 0x2E66 /* 0.0999755859375 */};
        const uint16_t ms[3] = {0x0000, 0xC100 /* -2.5 */, 0x3A00 /* 0.75 */};
        for (int type1 = 0; type1 < 2; ++type1) {
            const Type t = type1 ? Type::Q4_1 : Type::Q4_0;
            const size_t bs = type1 ? 20 : 18, qoff = type1 ? 4 : 2;
            std::vector<uint8_t> raw(3 * bs);
            std::vector<double> want, mag;
            for (int b = 0; b < 3; ++b) {
                const size_t o = bs * static_cast<size_t>(b);
                put16(raw, o, ds[b]);
                if (type1) put16(raw, o + 2, ms[b]);
                for (int j = 0; j < 16; ++j) raw[o + qoff + static_cast<size_t>(j)] = pat(j, b);
                for (int e = 0; e < 32; ++e) {
                    const uint8_t byte = raw[o + qoff + static_cast<size_t>(e % 16)];
                    const int q = e < 16 ? byte & 15 : byte >> 4;
                    const double v = type1 ? q * hv(ds[b]) + hv(ms[b]) : (q - 8) * hv(ds[b]);
                    want.push_back(v);
                    mag.push_back(std::fabs(16 * hv(ds[b])) + std::fabs(hv(ms[b])));
                }
            }
            INFO(nm(t));
            check_values(deq(t, raw, 96), want, mag);
        }
    }

    TEST_CASE("q5_0 and q5_1 hand-made blocks: the 32-bit high-bit word") {
        const uint16_t ds[3] = {0x3800 /* 0.5 */, 0xBC00 /* -1 */, 0x1A3F /* 0.00307... */};
        const uint16_t ms[3] = {0xB400 /* -0.25 */, 0x4000 /* 2 */, 0x0000};
        const uint32_t qh[3] = {0xA5C3F00Fu, 0x80000001u, 0x3CF0960Fu};
        for (int type1 = 0; type1 < 2; ++type1) {
            const Type t = type1 ? Type::Q5_1 : Type::Q5_0;
            const size_t bs = type1 ? 24 : 22, hoff = type1 ? 4 : 2;
            std::vector<uint8_t> raw(3 * bs);
            std::vector<double> want, mag;
            for (int b = 0; b < 3; ++b) {
                const size_t o = bs * static_cast<size_t>(b);
                put16(raw, o, ds[b]);
                if (type1) put16(raw, o + 2, ms[b]);
                for (int i = 0; i < 4; ++i) raw[o + hoff + static_cast<size_t>(i)] = static_cast<uint8_t>(qh[b] >> (8 * i));
                for (int j = 0; j < 16; ++j) raw[o + hoff + 4 + static_cast<size_t>(j)] = pat(j, b + 5);
                for (int e = 0; e < 32; ++e) {
                    const uint8_t byte = raw[o + hoff + 4 + static_cast<size_t>(e % 16)];
                    const int q = (e < 16 ? byte & 15 : byte >> 4) + 16 * int((qh[b] >> e) & 1);
                    const double v = type1 ? q * hv(ds[b]) + hv(ms[b]) : (q - 16) * hv(ds[b]);
                    want.push_back(v);
                    mag.push_back(std::fabs(32 * hv(ds[b])) + std::fabs(hv(ms[b])));
                }
            }
            INFO(nm(t));
            check_values(deq(t, raw, 96), want, mag);
        }
        // Literal spot check: q5_0, d = 1, every nibble 0x3, high bits only for elements 0 and 31.
        std::vector<uint8_t> raw(22, 0x33);
        put16(raw, 0, 0x3C00);
        raw[2] = 0x01;
        raw[3] = raw[4] = 0x00;
        raw[5] = 0x80;
        auto y = deq(Type::Q5_0, raw, 32);
        CHECK(y[0] == 3.0f);    // 3 + 16 - 16
        CHECK(y[1] == -13.0f);  // 3 - 16
        CHECK(y[16] == -13.0f);
        CHECK(y[31] == 3.0f);
    }

    TEST_CASE("q8_0, q8_1 and q8_K hand-made blocks") {
        std::vector<uint8_t> r0(2 * 34), r1(2 * 36), rk(292);
        const uint16_t ds[2] = {0x3400 /* 0.25 */, 0xAE66 /* -0.0999755859375 */};
        std::vector<double> w0, w1, m0, m1;
        for (int b = 0; b < 2; ++b) {
            put16(r0, 34 * static_cast<size_t>(b), ds[b]);
            put16(r1, 36 * static_cast<size_t>(b), ds[b]);
            put16(r1, 36 * static_cast<size_t>(b) + 2, 0x7BFF);  // s is ignored when decoding
            for (int j = 0; j < 32; ++j) {
                const int q = j == 0 ? -128 : j == 1 ? 127 : (j * 37 + b * 11) % 256 - 128;
                r0[34 * static_cast<size_t>(b) + 2 + static_cast<size_t>(j)] = static_cast<uint8_t>(q);
                r1[36 * static_cast<size_t>(b) + 4 + static_cast<size_t>(j)] = static_cast<uint8_t>(q);
                w0.push_back(q * hv(ds[b]));
                m0.push_back(128 * std::fabs(hv(ds[b])));
            }
        }
        w1 = w0;
        m1 = m0;
        check_values(deq(Type::Q8_0, r0, 64), w0, m0);
        check_values(deq(Type::Q8_1, r1, 64), w1, m1);

        const float dk = -0.0123f;
        std::memcpy(rk.data(), &dk, 4);
        std::vector<double> wk, mk;
        for (int j = 0; j < 256; ++j) {
            const int q = (j * 91 + 7) % 255 - 127;
            rk[4 + static_cast<size_t>(j)] = static_cast<uint8_t>(q);
            wk.push_back(double(dk) * q);
            mk.push_back(128 * std::fabs(double(dk)));
        }
        check_values(deq(Type::Q8_K, rk, 256), wk, mk);
    }

    TEST_CASE("q2_K hand-made blocks: 4-bit scale/min pairs and 2-bit planes") {
        const uint16_t d[2] = {0x3C00 /* 1 */, 0x2A8F /* 0.05... */}, dmin[2] = {0x3800 /* 0.5 */, 0xB266 /* -0.2 */};
        std::vector<uint8_t> raw(2 * 84);
        std::vector<double> want, mag;
        for (int b = 0; b < 2; ++b) {
            uint8_t* p = raw.data() + 84 * b;
            for (int g = 0; g < 16; ++g) p[g] = static_cast<uint8_t>(((g * 5 + b) & 15) | ((15 - g + 3 * b) & 15) << 4);
            for (int i = 0; i < 64; ++i) p[16 + i] = pat(i, b + 2) ^ static_cast<uint8_t>(i * 3);
            put16(raw, 84 * static_cast<size_t>(b) + 80, d[b]);
            put16(raw, 84 * static_cast<size_t>(b) + 82, dmin[b]);
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, k = (e / 32) % 4, l = e % 32;
                const int q = (p[16 + 32 * h + l] >> (2 * k)) & 3;
                const int sc = p[e / 16] & 15, mn = p[e / 16] >> 4;
                const double a = hv(d[b]) * sc * q, m = hv(dmin[b]) * mn;
                want.push_back(a - m);
                mag.push_back(std::fabs(a) + std::fabs(m));
            }
        }
        check_values(deq(Type::Q2_K, raw, 512), want, mag);
    }

    TEST_CASE("q3_K hand-made blocks: signed 6-bit scales and the high-bit mask") {
        // Literal bytes worked out by hand: d = 1, every low 2-bit code 3, high bits clear -> code -1, so
        // element e decodes to -(scale of e / 16).
        const uint8_t sb[12] = {0x10, 0x32, 0x54, 0x76, 0x98, 0xBA, 0xDC, 0xFE, 0xE4, 0x1B, 0x00, 0xFF};
        const int by_hand[16] = {-32, 18, -28, 22, -8, 10, -20, 30, 1, -13, -27, 23, 25, -21, -19, 31};
        std::vector<uint8_t> lit(110, 0);
        for (int i = 32; i < 96; ++i) lit[static_cast<size_t>(i)] = 0xFF;
        std::memcpy(lit.data() + 96, sb, 12);
        put16(lit, 108, 0x3C00);
        auto y = deq(Type::Q3_K, lit, 256);
        for (int e = 0; e < 256; ++e) CHECK(y[static_cast<size_t>(e)] == float(-by_hand[e / 16]));
        for (int i = 0; i < 32; ++i) lit[static_cast<size_t>(i)] = 0xFF;  // high bits set -> code 3
        y = deq(Type::Q3_K, lit, 256);
        for (int e = 0; e < 256; ++e) CHECK(y[static_cast<size_t>(e)] == float(3 * by_hand[e / 16]));

        // Patterned blocks with chosen scales covering -32..31.
        const int s[2][16] = {{-32, 31, -1, 0, 17, -17, 5, -9, 30, -31, 16, -16, 1, 2, -2, 15},
                              {7, -7, 24, -24, 0, 31, -32, 12, -12, 3, -3, 20, -20, 9, 11, -5}};
        const uint16_t d[2] = {0x3800 /* 0.5 */, 0xA0F5 /* -0.0088... */};
        std::vector<uint8_t> raw(2 * 110);
        std::vector<double> want, mag;
        for (int b = 0; b < 2; ++b) {
            uint8_t* p = raw.data() + 110 * b;
            for (int i = 0; i < 32; ++i) p[i] = static_cast<uint8_t>(pat(i, b) * 13 + i);
            for (int i = 0; i < 64; ++i) p[32 + i] = pat(i, b + 4);
            pack_q3k_scales(s[b], p + 96);
            put16(raw, 110 * static_cast<size_t>(b) + 108, d[b]);
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, k = (e / 32) % 4, l = e % 32;
                const int low = (p[32 + 32 * h + l] >> (2 * k)) & 3;
                const bool high = (p[l] >> (4 * h + k)) & 1;
                const int code = high ? low : low - 4;
                want.push_back(hv(d[b]) * s[b][e / 16] * code);
                mag.push_back(std::fabs(hv(d[b]) * s[b][e / 16] * 4));
            }
        }
        check_values(deq(Type::Q3_K, raw, 512), want, mag);
    }

    TEST_CASE("q4_K and q5_K hand-made blocks: packed 6-bit scales and mins") {
        // Literal bytes worked out by hand (d = dmin = 1, every qs byte 0x21: low nibble 1 for even
        // sub-blocks, high nibble 2 for odd ones): scales 1,2,3,63,59,28,37,6 and mins 16,17,18,35,55,9,30,32.
        const uint8_t sb[12] = {0xC1, 0x42, 0x83, 0x3F, 0xD0, 0x11, 0x52, 0xA3, 0x7B, 0x9C, 0xE5, 0x06};
        const int q4_by_hand[8] = {1 - 16, 2 * 2 - 17, 3 - 18, 2 * 63 - 35, 59 - 55, 2 * 28 - 9, 37 - 30, 2 * 6 - 32};
        std::vector<uint8_t> l4(144, 0x21);
        put16(l4, 0, 0x3C00);
        put16(l4, 2, 0x3C00);
        std::memcpy(l4.data() + 4, sb, 12);
        auto y = deq(Type::Q4_K, l4, 256);
        for (int e = 0; e < 256; ++e) CHECK(y[static_cast<size_t>(e)] == float(q4_by_hand[e / 32]));
        // q5_K with qh = 0xAA: the odd sub-blocks gain 16 in their code.
        const int q5_by_hand[8] = {1 - 16, 18 * 2 - 17, 3 - 18, 18 * 63 - 35, 59 - 55, 18 * 28 - 9, 37 - 30, 18 * 6 - 32};
        std::vector<uint8_t> l5(176, 0x21);
        put16(l5, 0, 0x3C00);
        put16(l5, 2, 0x3C00);
        std::memcpy(l5.data() + 4, sb, 12);
        for (int i = 16; i < 48; ++i) l5[static_cast<size_t>(i)] = 0xAA;
        y = deq(Type::Q5_K, l5, 256);
        for (int e = 0; e < 256; ++e) CHECK(y[static_cast<size_t>(e)] == float(q5_by_hand[e / 32]));

        // Patterned blocks with chosen scales/mins: sub-blocks 4..7 use values >= 16 so their split
        // high bits matter, and both extremes 0 and 63 appear.
        const int sc[2][8] = {{0, 63, 15, 16, 63, 31, 48, 17}, {5, 40, 22, 9, 16, 0, 33, 62}};
        const int mn[2][8] = {{63, 0, 16, 1, 47, 63, 16, 32}, {12, 7, 0, 55, 18, 41, 63, 20}};
        const uint16_t d[2] = {0x3A00 /* 0.75 */, 0x1F5C /* 0.0073... */}, dmin[2] = {0x3400 /* 0.25 */, 0x2266 /* 0.0124... */};
        for (int five = 0; five < 2; ++five) {
            const Type t = five ? Type::Q5_K : Type::Q4_K;
            const size_t bs = five ? 176 : 144, qoff = five ? 48 : 16;
            std::vector<uint8_t> raw(2 * bs);
            std::vector<double> want, mag;
            for (int b = 0; b < 2; ++b) {
                uint8_t* p = raw.data() + bs * static_cast<size_t>(b);
                put16(raw, bs * static_cast<size_t>(b), d[b]);
                put16(raw, bs * static_cast<size_t>(b) + 2, dmin[b]);
                pack_k4_scales(sc[b], mn[b], p + 4);
                if (five)
                    for (int i = 0; i < 32; ++i) p[16 + i] = static_cast<uint8_t>(pat(i, b + 7) ^ (i * 29));
                for (int i = 0; i < 128; ++i) p[qoff + static_cast<size_t>(i)] = pat(i, b + 9);
                for (int e = 0; e < 256; ++e) {
                    const int j = e / 32, l = e % 32;
                    const uint8_t byte = p[qoff + static_cast<size_t>(32 * (e / 64) + l)];
                    int q = j % 2 ? byte >> 4 : byte & 15;
                    if (five) q += 16 * ((p[16 + l] >> j) & 1);
                    const double a = hv(d[b]) * sc[b][j] * q, m = hv(dmin[b]) * mn[b][j];
                    want.push_back(a - m);
                    mag.push_back(std::fabs(a) + std::fabs(m));
                }
            }
            INFO(nm(t));
            check_values(deq(t, raw, 512), want, mag);
        }
    }

    TEST_CASE("q6_K hand-made blocks: low nibbles, 2-bit high planes, signed 8-bit scales") {
        const int8_t sc[2][16] = {{-128, 127, 1, -1, 0, 64, -64, 33, -33, 100, -100, 7, 8, -9, 10, -11},
                                  {12, -13, 14, -15, 16, -17, 18, -19, 20, -21, 22, -23, 24, -25, 26, -27}};
        const uint16_t d[2] = {0x3C00 /* 1 */, 0x9C29 /* -0.0040... */};
        std::vector<uint8_t> raw(2 * 210);
        std::vector<double> want, mag;
        for (int b = 0; b < 2; ++b) {
            uint8_t* p = raw.data() + 210 * b;
            for (int i = 0; i < 128; ++i) p[i] = pat(i, b + 1);
            for (int i = 0; i < 64; ++i) p[128 + i] = static_cast<uint8_t>(pat(i, b + 3) * 7 + i);
            for (int g = 0; g < 16; ++g) p[192 + g] = static_cast<uint8_t>(sc[b][g]);
            put16(raw, 210 * static_cast<size_t>(b) + 208, d[b]);
            for (int e = 0; e < 256; ++e) {
                const int h = e / 128, k = (e / 32) % 4, l = e % 32;
                const uint8_t lb = p[64 * h + 32 * (k % 2) + l];
                const int low = k < 2 ? lb & 15 : lb >> 4;
                const int high = (p[128 + 32 * h + l] >> (2 * k)) & 3;
                const int q = low + 16 * high - 32;
                want.push_back(hv(d[b]) * sc[b][e / 16] * q);
                mag.push_back(std::fabs(hv(d[b]) * sc[b][e / 16] * 32));
            }
        }
        check_values(deq(Type::Q6_K, raw, 512), want, mag);
        // Literal: d = 1, scale 2 everywhere, ql 0xF0 and qh 0x00 -> codes 0-32 (k < 2) and 15-32 (k >= 2).
        std::vector<uint8_t> lit(210, 0);
        for (int i = 0; i < 128; ++i) lit[static_cast<size_t>(i)] = 0xF0;
        for (int g = 0; g < 16; ++g) lit[192 + static_cast<size_t>(g)] = 2;
        put16(lit, 208, 0x3C00);
        auto y = deq(Type::Q6_K, lit, 256);
        for (int e = 0; e < 256; ++e) CHECK(y[static_cast<size_t>(e)] == float(2 * ((e / 32) % 4 < 2 ? -32 : -17)));
        // qh 0xFF: both high bits set for every element -> codes low + 48 - 32.
        for (int i = 128; i < 192; ++i) lit[static_cast<size_t>(i)] = 0xFF;
        y = deq(Type::Q6_K, lit, 256);
        for (int e = 0; e < 256; ++e) CHECK(y[static_cast<size_t>(e)] == float(2 * ((e / 32) % 4 < 2 ? 16 : 31)));
    }

    // ---- quantizers ----------------------------------------------------------------------------------

    TEST_CASE("quantize -> dequantize round trip within per-type bounds, deterministic") {
        struct Case {
            Type t;
            double bound;
        };
        // Normalized RMS error bounds: about 1.2x the worst of 300 seeds (4096 Gaussian values, sigma 0.03; the
        // uniform data errs less). Means seen: f16 2.1e-4, bf16 1.7e-3, q8_0 0.0054, q8_K 0.0070, q4_0 0.081,
        // q4_1 0.070, q5_0 0.040, q5_1 0.034, q2_K 0.27, q3_K 0.144, q4_K 0.071, q5_K 0.036, q6_K 0.017.
        const Case cases[] = {{Type::F16, 2.7e-4},  {Type::BF16, 2.1e-3}, {Type::Q8_0, 0.0068}, {Type::Q8_1, 0.0068},
                              {Type::Q8_K, 0.0095}, {Type::Q4_0, 0.10},   {Type::Q4_1, 0.087},  {Type::Q5_0, 0.05},
                              {Type::Q5_1, 0.043},  {Type::Q2_K, 0.33},   {Type::Q3_K, 0.18},   {Type::Q4_K, 0.09},
                              {Type::Q5_K, 0.045},  {Type::Q6_K, 0.021}};
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        const int64_t n = 4096;
        for (int dist = 0; dist < 2; ++dist) {
            std::vector<float> x;
            if (dist == 0) {
                x = gaussian(rng, n, 0.03f);
            } else {
                std::uniform_real_distribution<float> ud(-0.5f, 0.5f);
                for (int64_t i = 0; i < n; ++i) x.push_back(ud(rng));
            }
            for (const Case& c : cases) {
                INFO(nm(c.t) << (dist ? " uniform" : " gaussian"));
                const auto q = quantize(c.t, x);
                std::vector<float> y(static_cast<size_t>(n));
                dequantize_row(c.t, q.data(), y.data(), n);
                for (float v : y) REQUIRE(std::isfinite(v));
                const double err = nrmse(x, y);
                INFO("nrmse " << err);
                CHECK(err < c.bound);
                CHECK(quantize(c.t, x) == q);  // deterministic
            }
        }
    }

    TEST_CASE("activation blocks carry consistent sums") {
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        const auto x = gaussian(rng, 512, 1.0f);
        const auto k = quantize(Type::Q8_K, x);
        for (int b = 0; b < 2; ++b) {
            const uint8_t* p = k.data() + 292 * b;
            for (int g = 0; g < 16; ++g) {
                int sum = 0;
                for (int i = 0; i < 16; ++i) sum += static_cast<int8_t>(p[4 + 16 * g + i]);
                const int16_t bsum = static_cast<int16_t>(p[260 + 2 * g] | p[261 + 2 * g] << 8);
                CHECK(bsum == sum);
            }
        }
        const auto one = quantize(Type::Q8_1, x);
        for (int b = 0; b < 16; ++b) {
            const uint8_t* p = one.data() + 36 * b;
            int sum = 0;
            for (int i = 0; i < 32; ++i) sum += static_cast<int8_t>(p[4 + i]);
            const double d = hv(static_cast<uint16_t>(p[0] | p[1] << 8)), s = hv(static_cast<uint16_t>(p[2] | p[3] << 8));
            CHECK(std::fabs(s - d * sum) <= 1e-3 * std::fabs(d * sum) + 1e-6);
        }
    }

    TEST_CASE("quantizers handle zeros, constants, spikes, tiny and large values without NaN") {
        const int64_t n = 512;
        std::vector<std::vector<float>> rows;
        rows.emplace_back(n, 0.0f);
        rows.emplace_back(n, 0.37f);
        rows.emplace_back(n, -2.0f);
        std::vector<float> spike(n, 0.001f);
        spike[77] = 50.0f;
        rows.push_back(spike);
        std::vector<float> tiny(n), large(n), huge(n), positive(n);
        for (int64_t i = 0; i < n; ++i) {
            tiny[static_cast<size_t>(i)] = 1e-9f * static_cast<float>((i * 37) % 19 - 9);
            large[static_cast<size_t>(i)] = 5e3f * static_cast<float>((i * 53) % 23 - 11);  // f16 range
            huge[static_cast<size_t>(i)] = 1e7f * static_cast<float>((i * 41) % 13 - 6);   // scales saturate
            positive[static_cast<size_t>(i)] = 1.0f + 0.01f * static_cast<float>(i % 29);
        }
        rows.push_back(tiny);
        rows.push_back(large);
        rows.push_back(positive);
        rows.push_back(huge);
        const Type types[] = {Type::F16,  Type::BF16, Type::Q4_0, Type::Q4_1, Type::Q5_0, Type::Q5_1, Type::Q8_0,
                              Type::Q8_1, Type::Q8_K, Type::Q2_K, Type::Q3_K, Type::Q4_K, Type::Q5_K, Type::Q6_K};
        for (Type t : types)
            for (size_t r = 0; r < rows.size(); ++r) {
                if (r == 7 && t == Type::F16) continue;  // beyond the half range by design
                INFO(nm(t) << " row " << r);
                const auto q = quantize(t, rows[r]);
                std::vector<float> y(static_cast<size_t>(n));
                dequantize_row(t, q.data(), y.data(), n);
                bool finite = true;
                for (float v : y) finite = finite && std::isfinite(v);
                CHECK(finite);
                if (r == 0)
                    for (float v : y) CHECK(v == 0.0f);
                if (r == 1 || r == 2 || r == 6) CHECK(nrmse(rows[r], y) < 0.15);  // constants, positive offset
            }
    }

    // ---- dot products ----------------------------------------------------------------------------------

    TEST_CASE("vec_dot matches float64 references for every weight type, portable and AVX2") {
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        const bool avx2 = [] {
            force_portable(false);
            return std::string(simd_level()) == "avx2";
        }();
        if (!avx2) MESSAGE("AVX2+FMA+F16C not available: checking the portable dot products only");
        for (Type t : kWeightTypes) {
            const Type at = vec_dot_type(t);
            const bool k = is_k(t), flt = type_info(t).block_elems == 1;
            const std::vector<int64_t> lens = flt ? std::vector<int64_t>{1, 37, 256, 4864}
                                              : k ? std::vector<int64_t>{256, 512, 2816}
                                                  : std::vector<int64_t>{32, 96, 4864};
            // Error of the activation's 8-bit quantization relative to the typical size of the dot (worst of
            // 2000 trials: 0.022 legacy, 0.028 K-quants); float weights see only float rounding.
            const double bound = flt ? 1e-5 : 0.05;
            for (int64_t n : lens) {
                INFO(nm(t) << " n=" << n);
                const auto wf = gaussian(rng, n, 0.05f);
                const auto x = gaussian(rng, n, 1.0f);
                const auto w = quantize(t, wf);
                std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
                dequantize_row(t, w.data(), wd.data(), n);
                std::vector<uint8_t> act(row_bytes(at, n));
                prepare_activation(t, x.data(), act.data(), n);
                dequantize_row(at, act.data(), ad.data(), n);

                // Against the original activation: the activation quantization error only.
                double ref = 0.0, scale2 = 0.0;
                for (int64_t i = 0; i < n; ++i) {
                    ref += double(wd[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
                    scale2 += std::pow(double(wd[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)], 2);
                }
                // Against the quantized activation as decoded: exact but for float rounding. q4_1/q5_1 take
                // their offset term from the activation's f16 sum s, as the format intends.
                double exact = 0.0, l1 = 0.0;
                const int64_t nb = n / type_info(t).block_elems;
                for (int64_t b = 0; b < nb; ++b) {
                    const int64_t be = type_info(t).block_elems;
                    double m = 0.0, s = 0.0;
                    if (t == Type::Q4_1 || t == Type::Q5_1) {
                        const uint8_t* wb = w.data() + static_cast<size_t>(b * type_info(t).block_bytes);
                        const uint8_t* ab = act.data() + static_cast<size_t>(b * 36);
                        m = hv(static_cast<uint16_t>(wb[2] | wb[3] << 8));
                        s = hv(static_cast<uint16_t>(ab[2] | ab[3] << 8));
                    }
                    for (int64_t i = b * be; i < (b + 1) * be; ++i) {
                        const double p = (double(wd[static_cast<size_t>(i)]) - m) * ad[static_cast<size_t>(i)];
                        exact += p;
                        l1 += std::fabs(p);
                    }
                    exact += m * s;
                    l1 += std::fabs(m * s);
                }

                force_portable(true);
                CHECK(std::string(simd_level()) == "scalar");
                const float got_p = vec_dot(t, n, w.data(), act.data());
                force_portable(false);
                const float got_v = vec_dot(t, n, w.data(), act.data());
                REQUIRE(std::isfinite(got_p));
                REQUIRE(std::isfinite(got_v));
                INFO("portable " << got_p << ", active " << got_v << ", ref " << ref << ", exact " << exact);
                CHECK(std::fabs(got_p - ref) <= bound * std::sqrt(scale2));
                CHECK(std::fabs(got_p - exact) <= 2e-6 * l1 + 1e-30);
                if (avx2) CHECK(std::fabs(got_v - got_p) <= 2e-6 * l1 + 1e-30);
            }
        }
        force_portable(false);
    }

    TEST_CASE("q8_0 and q8_K activation quantization: the AVX2 path writes the portable path's bytes") {
        // Normal values, values on rounding ties (x / d = k + 0.5 exactly), zeros, a lone NaN, infinities,
        // all-NaN blocks, values past the f16 range, tiny values, per 32 values; then whole 256-value
        // blocks of NaN, of zeros, of values past the f16 range and with one infinity (q8_K's scale
        // is 0 then), 200 of normal values at scales from 1e-6 to 1e6 (enough that a scale rounded
        // otherwise, as amax * (1 / 127) instead of amax / 127, shows), and one of q8_K ties (d = 1,
        // values k + 0.5): every block byte for byte equal, q8_K's scales and group sums included.
        std::mt19937_64 rng(4711);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        const int64_t nb = 96 + 8 * 200 + 8, n = nb * 32;
        std::vector<float> x(static_cast<size_t>(n));
        for (int64_t b = 0; b < nb; ++b) {
            float* v = x.data() + b * 32;
            for (int j = 0; j < 32; ++j) v[j] = nd(rng) * (b % 7 == 3 ? 1e-20f : b % 7 == 4 ? 1e6f : 1.0f);
            if (b >= nb - 8) {  // ties at d = 1
                for (int j = 0; j < 32; ++j) v[j] = static_cast<float>((32 * b + j) % 253) - 126.5f;
                if (b == nb - 8) v[0] = 127.0f;
                continue;
            }
            if (b >= 96) {
                const float scale = std::pow(10.0f, static_cast<float>((b - 96) / 8 % 13) - 6.0f);
                for (int j = 0; j < 32; ++j) v[j] = nd(rng) * scale;
                continue;
            }
            if (b >= 64) {
                for (int j = 0; j < 32; ++j) v[j] = b < 72 ? std::nanf("") : b < 80 ? 0.0f : b < 88 ? v[j] * 1e30f : v[j];
                if (b == 90) v[3] = -INFINITY;
                continue;
            }
            switch (b % 9) {
                case 0: for (int j = 0; j < 32; ++j) v[j] = 127.0f * static_cast<float>(j - 16) / 63.5f; break;  // ties
                case 1: for (int j = 0; j < 32; ++j) v[j] = 0.0f; break;
                case 2: v[5] = std::nanf(""); break;
                case 3: v[7] = INFINITY; v[9] = -INFINITY; break;
                case 4: for (int j = 0; j < 32; ++j) v[j] = std::nanf(""); break;
                case 5: v[0] = -0.0f; v[31] = 3e38f; break;
                default: break;
            }
        }
        for (Type t : {Type::Q8_0, Type::Q8_K}) {
            CAPTURE(type_info(t).name);
            std::vector<uint8_t> a(row_bytes(t, n)), p(a.size());
            force_portable(true);
            quantize_row(t, x.data(), p.data(), n);
            force_portable(false);
            quantize_row(t, x.data(), a.data(), n);
            INFO("SIMD: " << simd_level());
            const size_t bb = static_cast<size_t>(type_info(t).block_bytes);
            for (size_t b = 0; b < a.size() / bb; ++b) {
                CAPTURE(b);
                CHECK(std::memcmp(a.data() + b * bb, p.data() + b * bb, bb) == 0);
            }
        }
    }

    TEST_CASE("vec_dot on blocks of random bytes (full code ranges) matches the decoded blocks") {
        // Every code, scale and high-bit pattern, with the f16 scale fields overwritten by moderate values
        // (either sign) so nothing overflows.
        struct Scales {
            Type t;
            std::vector<int> offsets;
        };
        const Scales types[] = {{Type::Q4_0, {0}}, {Type::Q4_1, {0, 2}}, {Type::Q5_0, {0}},     {Type::Q5_1, {0, 2}},
                                {Type::Q8_0, {0}}, {Type::Q2_K, {80, 82}}, {Type::Q3_K, {108}}, {Type::Q4_K, {0, 2}},
                                {Type::Q5_K, {0, 2}}, {Type::Q6_K, {208}}};
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> byte(0, 255);
        force_portable(false);
        const bool avx2 = std::string(simd_level()) == "avx2";
        for (const Scales& s : types) {
            const TypeInfo& info = type_info(s.t);
            for (int64_t n : {int64_t(info.block_elems), int64_t(info.block_elems) * 11}) {
                INFO(nm(s.t) << " n=" << n);
                std::vector<uint8_t> w(row_bytes(s.t, n));
                for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
                for (int64_t b = 0; b < n / info.block_elems; ++b)
                    for (int off : s.offsets) {
                        // a half of either sign with exponent field 5..11: magnitude 2^-10 .. 2^-3
                        const int e = 5 + byte(rng) % 7, man = byte(rng) << 2 | (byte(rng) & 3);
                        const uint16_t h = static_cast<uint16_t>((byte(rng) & 1) << 15 | e << 10 | man);
                        put16(w, static_cast<size_t>(b * info.block_bytes + off), h);
                    }
                const auto x = gaussian(rng, n, 1.0f);
                const Type at = vec_dot_type(s.t);
                std::vector<uint8_t> act(row_bytes(at, n));
                prepare_activation(s.t, x.data(), act.data(), n);
                std::vector<float> wd(static_cast<size_t>(n)), ad(static_cast<size_t>(n));
                dequantize_row(s.t, w.data(), wd.data(), n);
                dequantize_row(at, act.data(), ad.data(), n);
                double exact = 0.0, l1 = 0.0;
                for (int64_t b = 0; b < n / info.block_elems; ++b) {
                    double m = 0.0, sa = 0.0;
                    if (s.t == Type::Q4_1 || s.t == Type::Q5_1) {
                        const uint8_t* wb = w.data() + b * info.block_bytes;
                        const uint8_t* ab = act.data() + b * 36;
                        m = hv(static_cast<uint16_t>(wb[2] | wb[3] << 8));
                        sa = hv(static_cast<uint16_t>(ab[2] | ab[3] << 8));
                    }
                    for (int64_t i = b * info.block_elems; i < (b + 1) * info.block_elems; ++i) {
                        const double p = (double(wd[static_cast<size_t>(i)]) - m) * ad[static_cast<size_t>(i)];
                        exact += p;
                        l1 += std::fabs(p);
                    }
                    exact += m * sa;
                    l1 += std::fabs(m * sa);
                }
                force_portable(true);
                const float got_p = vec_dot(s.t, n, w.data(), act.data());
                force_portable(false);
                const float got_v = vec_dot(s.t, n, w.data(), act.data());
                REQUIRE(std::isfinite(got_p));
                REQUIRE(std::isfinite(got_v));
                INFO("portable " << got_p << ", active " << got_v << ", exact " << exact);
                CHECK(std::fabs(got_p - exact) <= 2e-6 * l1 + 1e-30);
                if (avx2) CHECK(std::fabs(got_v - exact) <= 2e-6 * l1 + 1e-30);
            }
        }
    }

    TEST_CASE("dot-product tiles (prefill) give vec_dot's bits for every pair of the tile") {
        // 2 weight rows x 4 activation rows of random blocks (every code; moderate scales of either sign),
        // strides larger than a row, the output scattered with a stride: each of the 8 values must equal
        // vec_dot's exactly; a type without a tile on this machine says so.
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        std::uniform_int_distribution<int> byte(0, 255);
        force_portable(false);
        int tiled = 0, forms = 0;
        for (Type t : {Type::Q8_0, Type::Q4_0, Type::Q5_0, Type::Q4_K, Type::Q6_K, Type::F32}) {
            // every form the CPU has (AVX2; AVX-VNNI and AVX-512 VNNI for the q8_0 family where it has them)
            std::set<const void*> seen;  // the distinct tiles
            for (TileIsa isa : {TileIsa::avx2, TileIsa::avx_vnni, TileIsa::avx512_vnni}) {
                const VecDotTileFn tile = vec_dot_tile_fn(t, isa);
                CHECK((tile != nullptr) == (cpu_has(isa) && std::string(simd_level()) == "avx2" && t != Type::F32));
                if (!tile) continue;
                ++tiled;
                if (seen.insert(reinterpret_cast<const void*>(tile)).second) ++forms;
                INFO("tile form " << static_cast<int>(isa));
                const TypeInfo& info = type_info(t);
                const int64_t n = info.block_elems * 7;
                const size_t wrow = row_bytes(t, n) + 40, arow = row_bytes(vec_dot_type(t), n) + 24;
                std::vector<uint8_t> w(wrow * kTileRows), a(arow * kTileCols);
                for (auto& v : w) v = static_cast<uint8_t>(byte(rng));
                for (int r = 0; r < kTileRows; ++r)
                    for (int64_t b = 0; b < n / info.block_elems; ++b)
                        // the f16 scale fields: d (q8_0, q4_0, q5_0), d and dmin (q4_K), d at 208 (q6_K)
                        for (int off : t == Type::Q4_K   ? std::vector<int>{0, 2}
                                       : t == Type::Q6_K ? std::vector<int>{208}
                                                         : std::vector<int>{0}) {
                            const int e = 5 + byte(rng) % 7, man = byte(rng) << 2 | (byte(rng) & 3);
                            put16(w, static_cast<size_t>(r) * wrow + static_cast<size_t>(b * info.block_bytes + off),
                                  static_cast<uint16_t>((byte(rng) & 1) << 15 | e << 10 | man));
                        }
                for (int c = 0; c < kTileCols; ++c)
                    prepare_activation(t, gaussian(rng, n, 1.0f).data(), a.data() + static_cast<size_t>(c) * arow, n);
                // The f32 block scales the q8_0-family tiles read, 3 floats apart beyond a row (NaN between).
                std::vector<float> out(kTileCols * 5, std::nanf("")), ws, as;
                const int64_t nb = n / 32, ss = nb + 3;
                if (vec_dot_type(t) == Type::Q8_0) {
                    std::vector<float> packed(static_cast<size_t>(nb * kTileCols));
                    ws.assign(static_cast<size_t>(ss * kTileRows), std::nanf(""));
                    block_scales(t, w.data(), wrow, kTileRows, n, packed.data());
                    for (int r = 0; r < kTileRows; ++r) std::copy_n(packed.begin() + r * nb, nb, ws.begin() + r * ss);
                    as.assign(static_cast<size_t>(ss * kTileCols), std::nanf(""));
                    block_scales(Type::Q8_0, a.data(), arow, kTileCols, n, packed.data());
                    for (int c = 0; c < kTileCols; ++c) std::copy_n(packed.begin() + c * nb, nb, as.begin() + c * ss);
                }
                tile(n, w.data(), wrow, a.data(), arow, ws.empty() ? nullptr : ws.data(), as.empty() ? nullptr : as.data(), static_cast<size_t>(ss),
                     out.data(), 5);
                for (int c = 0; c < kTileCols; ++c)
                    for (int r = 0; r < kTileRows; ++r) {
                        INFO(nm(t) << " row " << r << " col " << c);
                        const float want = vec_dot(t, n, w.data() + static_cast<size_t>(r) * wrow, a.data() + static_cast<size_t>(c) * arow);
                        CHECK(std::isfinite(want));
                        CHECK(out[static_cast<size_t>(c) * 5 + static_cast<size_t>(r)] == want);
                    }
            }
        }
        // Distinct tiles: q4_K and q6_K one each and their AVX-512 forms, q8_0, q4_0 and q5_0 one per form the
        // CPU has.
        const int n_forms = cpu_has(TileIsa::avx2) + cpu_has(TileIsa::avx_vnni) + cpu_has(TileIsa::avx512_vnni);
        if (std::string(simd_level()) == "avx2") CHECK(forms == 2 * (1 + cpu_has(TileIsa::avx512_vnni)) + 3 * n_forms);
        else CHECK(tiled == 0);
        if (!cpu_has(TileIsa::avx_vnni)) MESSAGE("no AVX-VNNI on this CPU: the AVX-VNNI tiles are not tested here");
        if (!cpu_has(TileIsa::avx512_vnni)) MESSAGE("no AVX-512 VNNI on this CPU: the 512-bit tiles are not tested here");
        // The fastest form is the default.
        if (std::string(simd_level()) == "avx2") {
            const TileIsa best = cpu_has(TileIsa::avx512_vnni) ? TileIsa::avx512_vnni : cpu_has(TileIsa::avx_vnni) ? TileIsa::avx_vnni : TileIsa::avx2;
            const bool fastest = vec_dot_tile_fn(Type::Q8_0) == vec_dot_tile_fn(Type::Q8_0, best);
            CHECK(fastest);
        }
    }

    TEST_CASE("block scales: the F16C conversion equals the portable one for every finite half") {
        // Rows of 19 blocks (two groups of 8 and a tail) of each q8_0-family type, 5 rows 3 bytes further
        // apart than a row, every finite f16 pattern (normal, subnormal, zero, infinity) as a scale.
        force_portable(false);
        const bool avx2 = std::string(simd_level()) == "avx2";
        uint32_t next = 0;
        for (Type t : {Type::Q8_0, Type::Q4_0, Type::Q5_0}) {
            const int64_t n = 19 * 32, rows = 5;
            const size_t stride = row_bytes(t, n) + 3, bytes = static_cast<size_t>(type_info(t).block_bytes);
            for (int pass = 0; pass < 700; ++pass) {
                std::vector<uint8_t> w(stride * rows, 0x5a);
                for (int64_t r = 0; r < rows; ++r)
                    for (int64_t b = 0; b < 19; ++b) {
                        uint16_t h;
                        do h = static_cast<uint16_t>(next++); while ((h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0);  // no NaN
                        put16(w, static_cast<size_t>(r) * stride + static_cast<size_t>(b) * bytes, h);
                    }
                std::vector<float> got(19 * rows, std::nanf("")), want(19 * rows, std::nanf(""));
                block_scales(t, w.data(), stride, rows, n, got.data());
                force_portable(true);
                block_scales(t, w.data(), stride, rows, n, want.data());
                force_portable(false);
                for (size_t i = 0; i < got.size(); ++i) {
                    INFO(nm(t) << " scale " << i);
                    REQUIRE(std::memcmp(&got[i], &want[i], 4) == 0);
                }
            }
        }
        CHECK(next >= 0x10000);  // every pattern went through
        if (!avx2) MESSAGE("no AVX2 on this CPU: both conversions were the portable one");
    }

    TEST_CASE("attention kernels (AVX-512, AVX2): scores and softmax against float64, the weighted sum FMA for FMA") {
        // Head sizes 8 to 256 (up to a full set of output registers and a second pass), 1 to 16 rows 7
        // floats apart beyond a head, scores spread over 60 (exponents far below the max), outputs fenced;
        // the AVX-512 form (multiples of 16) and the AVX2 one.
        force_portable(false);
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        int forms = 0;
        for (bool allow_512 : {true, false}) {
            INFO("AVX-512 allowed: " << allow_512);
            if (!attn_kernels(64, allow_512).scores) continue;
            ++forms;
            const bool generic = attn_kernels(12, allow_512).scores == nullptr;  // not a multiple of 8: the caller's generic path
            CHECK(generic);
            for (int hd : {8, 16, 24, 48, 64, 80, 128, 136, 256}) {
                const AttnKernels ak = attn_kernels(hd, allow_512);
                if (!ak.scores) continue;  // AVX-512: multiples of 16 only
                for (int count = 1; count <= 16; ++count) {
                    INFO("hd " << hd << " rows " << count);
                    const size_t stride = static_cast<size_t>(hd) + 7;
                    std::vector<float> q(static_cast<size_t>(hd)), k(stride * count), v(stride * count);
                    for (auto& x : q) x = u(rng);
                    for (auto& x : k) x = u(rng);
                    for (auto& x : v) x = u(rng);
                    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
                    std::vector<float> s(static_cast<size_t>(count) + 1, std::nanf(""));
                    ak.scores(hd, q.data(), k.data(), stride, count, scale, s.data());
                    CHECK(std::isnan(s[static_cast<size_t>(count)]));  // nothing written past count
                    for (int j = 0; j < count; ++j) {
                        double exact = 0, l1 = 0;
                        for (int d = 0; d < hd; ++d) {
                            exact += double{q[static_cast<size_t>(d)]} * k[static_cast<size_t>(j) * stride + static_cast<size_t>(d)];
                            l1 += std::fabs(double{q[static_cast<size_t>(d)]} * k[static_cast<size_t>(j) * stride + static_cast<size_t>(d)]);
                        }
                        CHECK(std::fabs(s[static_cast<size_t>(j)] - exact * scale) <= 1e-6 * l1 * scale);
                    }
                    // Softmax of scores spread over 60: e^(s - max) within 1e-6 relative of e^ of the float difference, 1 / sum
                    // as summed.
                    std::vector<float> sm(static_cast<size_t>(count) + 1, std::nanf(""));
                    for (int j = 0; j < count; ++j) sm[static_cast<size_t>(j)] = 30.0f * u(rng);
                    const std::vector<float> before = sm;
                    const float mx = *std::max_element(before.begin(), before.begin() + count);
                    const float inv = ak.softmax(sm.data(), count);
                    double sum = 0;
                    for (int j = 0; j < count; ++j) {
                        const float arg = before[static_cast<size_t>(j)] - mx;  // rounded to float, as the generic path's std::exp gets it
                        const double want = std::exp(double{arg});
                        CHECK(std::fabs(sm[static_cast<size_t>(j)] - want) <= 1e-6 * want + 1e-38);
                        sum += sm[static_cast<size_t>(j)];
                    }
                    CHECK(std::isnan(sm[static_cast<size_t>(count)]));
                    CHECK(std::fabs(inv - 1.0 / sum) <= 1e-7 / sum);
                    // The weighted sum: the same FMAs as axpy row by row, so the same bits.
                    std::vector<float> o(static_cast<size_t>(hd) + 1, std::nanf("")), want(static_cast<size_t>(hd));
                    for (int d = 0; d < hd; ++d) o[static_cast<size_t>(d)] = want[static_cast<size_t>(d)] = u(rng);
                    ak.weighted_sum(hd, sm.data(), inv, v.data(), stride, count, o.data());
                    for (int j = 0; j < count; ++j)
                        for (int d = 0; d < hd; ++d)
                            want[static_cast<size_t>(d)] = std::fma(sm[static_cast<size_t>(j)] * inv, v[static_cast<size_t>(j) * stride + static_cast<size_t>(d)],
                                                                    want[static_cast<size_t>(d)]);
                    CHECK(std::memcmp(o.data(), want.data(), want.size() * sizeof(float)) == 0);
                    CHECK(std::isnan(o[static_cast<size_t>(hd)]));
                }
            }
            const AttnKernels ak = attn_kernels(64, allow_512);
            // A NaN score is no number's max and makes every output NaN (as std::exp's path does), never a finite answer.
            std::vector<float> sn = {1.0f, std::nanf(""), 2.0f};
            CHECK(std::isnan(ak.softmax(sn.data(), 3)));
            // Far below the max: 0 (e^-200, e^-inf), not a stray tiny number; the max itself 1.
            std::vector<float> far = {0.0f, -200.0f, -std::numeric_limits<float>::infinity()};
            CHECK(ak.softmax(far.data(), 3) == 1.0f);
            CHECK(far[0] == 1.0f);
            CHECK(far[1] == 0.0f);
            CHECK(far[2] == 0.0f);
        }
        const bool has512 = attn_kernels(64).scores != attn_kernels(64, false).scores;
        CHECK(forms == (std::string(simd_level()) == "avx2" ? 1 + has512 : 0));
        if (!has512) MESSAGE("no AVX-512 on this CPU: the AVX-512 attention kernels are not tested here");
    }

    TEST_CASE("swiglu's silu(g) * u: every form against float64") {
        // g over [-100, 100] (e^-g from far below 1 to overflow), NaN and infinities, lengths 1 to 40
        // (vector tails), outputs fenced; each form (AVX-512, AVX2, portable) within 2e-6 relative of
        // float64 or below 1e-30.
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        std::uniform_real_distribution<float> wide(-100.0f, 100.0f), narrow(-6.0f, 6.0f), uu(-2.0f, 2.0f);
        for (int form = 0; form < 3; ++form) {
            INFO("form " << form);
            force_portable(form == 2);
            const SiluMulFn f = silu_mul_fn(form == 0);
            for (int n = 1; n <= 40; ++n) {
                std::vector<float> g(static_cast<size_t>(n) + 1), u(static_cast<size_t>(n));
                for (int i = 0; i < n; ++i) {
                    g[static_cast<size_t>(i)] = i % 3 ? narrow(rng) : wide(rng);
                    u[static_cast<size_t>(i)] = uu(rng);
                }
                g[static_cast<size_t>(n)] = 12345.0f;
                const std::vector<float> g0 = g;
                f(g.data(), u.data(), static_cast<size_t>(n));
                CHECK(g[static_cast<size_t>(n)] == 12345.0f);  // nothing written past n
                for (int i = 0; i < n; ++i) {
                    const double x = g0[static_cast<size_t>(i)];
                    const double want = x / (1.0 + std::exp(-x)) * u[static_cast<size_t>(i)];
                    CHECK(std::fabs(g[static_cast<size_t>(i)] - want) <= 2e-6 * std::fabs(want) + 1e-30);
                }
            }
            std::vector<float> sp = {std::nanf(""), std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(), 0.0f};
            const std::vector<float> one(4, 1.0f);
            f(sp.data(), one.data(), sp.size());
            CHECK(std::isnan(sp[0]));
            CHECK(sp[1] == std::numeric_limits<float>::infinity());
            CHECK(sp[3] == 0.0f);
            CHECK((sp[2] == 0.0f || std::isnan(sp[2])));  // -inf / (1 + e^inf): -inf / inf is NaN in float, as std::exp's path gives
        }
        force_portable(false);
    }

    TEST_CASE("float weights: odd lengths and extreme halves") {
        const unsigned seed = fresh_seed();
        INFO("seed " << seed);
        std::mt19937 rng(seed);
        force_portable(false);
        const bool avx2 = std::string(simd_level()) == "avx2";
        for (Type t : {Type::F32, Type::F16, Type::BF16})
            for (int64_t n : {1, 7, 8, 9, 31, 33, 63, 65, 1000}) {
                INFO(nm(t) << " n=" << n);
                const auto wf = gaussian(rng, n, 2.0f);
                const auto x = gaussian(rng, n, 1.0f);
                auto w = quantize(t, wf);
                if (t == Type::F16 && n > 2) {
                    put16(w, 0, 0x7BFF);  // largest half
                    put16(w, 2, 0x0001);  // smallest subnormal
                }
                std::vector<float> wd(static_cast<size_t>(n));
                dequantize_row(t, w.data(), wd.data(), n);
                double exact = 0.0, l1 = 0.0;
                for (int64_t i = 0; i < n; ++i) {
                    exact += double(wd[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)];
                    l1 += std::fabs(double(wd[static_cast<size_t>(i)]) * x[static_cast<size_t>(i)]);
                }
                std::vector<uint8_t> act(row_bytes(Type::F32, n));
                prepare_activation(t, x.data(), act.data(), n);
                CHECK(std::memcmp(act.data(), x.data(), act.size()) == 0);
                force_portable(true);
                const float got_p = vec_dot(t, n, w.data(), act.data());
                force_portable(false);
                const float got_v = vec_dot(t, n, w.data(), act.data());
                CHECK(std::fabs(got_p - exact) <= 1e-6 * l1);
                if (avx2) CHECK(std::fabs(got_v - exact) <= 1e-6 * l1);
            }
    }

    // ---- errors and dispatch ---------------------------------------------------------------------------

    TEST_CASE("unsupported types and bad lengths fail with a status and the type's name") {
        float f[256] = {};
        uint8_t buf[1024] = {};
        auto status_of = [](auto&& fn, std::string* msg) {
            try {
                fn();
            } catch (const minfer::Error& e) {
                *msg = e.what();
                return e.status();
            }
            return MINFER_OK;
        };
        std::string msg;
        CHECK(status_of([&] { dequantize_row(Type::IQ2_XXS, buf, f, 256); }, &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("iq2_xxs") != std::string::npos);
        CHECK(status_of([&] { quantize_row(Type::IQ4_NL, f, buf, 32); }, &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("iq4_nl") != std::string::npos);
        CHECK(status_of([&] { vec_dot_type(Type::Q8_K); }, &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("q8_K") != std::string::npos);
        CHECK(status_of([&] { vec_dot_fn(Type::I32); }, &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("i32") != std::string::npos);
        CHECK(status_of([&] { prepare_activation(Type::TQ2_0, f, buf, 256); }, &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(status_of([&] { dequantize_row(static_cast<Type>(4), buf, f, 32); }, &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("q4_2") != std::string::npos);
        CHECK(status_of([&] { dequantize_row(static_cast<Type>(99), buf, f, 32); }, &msg) == MINFER_ERR_UNSUPPORTED);
        CHECK(msg.find("99") != std::string::npos);
        CHECK(status_of([&] { row_bytes(Type::Q4_K, 100); }, &msg) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(status_of([&] { quantize_row(Type::Q8_0, f, buf, 33); }, &msg) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(status_of([&] { prepare_activation(Type::Q4_K, f, buf, 32); }, &msg) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(row_bytes(Type::IQ2_XXS, 256) == 66);  // geometry is known even where compute is not
        CHECK(row_bytes(Type::Q4_K, 0) == 0);
    }

    TEST_CASE("simd level and force_portable") {
        force_portable(false);
        const std::string level = simd_level();
        CHECK((level == "avx2" || level == "scalar"));
        force_portable(true);
        CHECK(std::string(simd_level()) == "scalar");
        for (Type t : kWeightTypes) {
            const bool have = vec_dot_fn(t) != nullptr;
            CHECK(have);
        }
        const VecDotFn portable = vec_dot_fn(Type::Q4_K);
        force_portable(false);
        const bool differs = vec_dot_fn(Type::Q4_K) != portable;
        if (level == "avx2")
            CHECK(differs);
        else
            MESSAGE("AVX2+FMA+F16C not available on this CPU");
    }
}
