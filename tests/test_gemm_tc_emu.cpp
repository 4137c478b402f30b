// The prefill GEMM's device code (cuda/gemm_tc.cuh) run on the CPU through the CUDA emulation in
// tests/emu/cuda/matvec_ptx.cuh. The f16 kernel against float64 products of the same f16 values: token and
// weight counts off the 128-row tiles, widths off the 64-wide k-tile, plain and accumulating. The
// quantized kernels (q4_K, q6_K, q8_0 as stored: q6_K rows at every even offset from a 16-byte boundary,
// q8_0 k-tiles at every multiple of 4, the matrix's last chunk cut short, rows of magnitudes 1/8 to 8;
// q5_K and q4_0 through the decoder from global memory)
// must give the f16 kernel's bits on the CPU's dequantized weights rounded to f16 (what the two-pass path
// and the f16 cache hold): that is the fused path's promise. Each case runs in forward lane order with
// cp.async copies landing at their wait over NaN-filled shared memory, and in reverse order with copies
// landing at issue over random bytes. Outputs are poisoned (NaN) and fenced. No GPU is needed;
// cuda_tests checks the same kernels on one.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/gemm_tc.cuh"  // with tests/emu first on the include path: the emulated CUDA
#include "emu_test.h"
#include "quant/decode.h"
#include "quant/f16.h"
#include "quant/quant.h"

namespace {

namespace gt = minfer::cuda::gt;
namespace gn = minfer::cuda::gn;
namespace quant = minfer::quant;
using emu_test::Config;
using emu_test::kConfigs;
using emu_test::normal;

constexpr float kGuard = 12345.0f;  // the value of the fence after each output
constexpr int kFence = 16;

struct Shape {
    int m, n, k;
};

// The output buffer of one launch: m x n cells (NaN, or c0 when accumulating) and a fence.
std::vector<float> output(const Shape& s, const std::vector<float>& c0, bool accumulate) {
    std::vector<float> y(static_cast<size_t>(s.m) * s.n + kFence, kGuard);
    if (accumulate) std::copy(c0.begin(), c0.end(), y.begin());
    else std::fill(y.begin(), y.end() - kFence, NAN);
    return y;
}

template <int BM>
gt::Args args(const Shape& s, const std::vector<uint16_t>& a, float* c, bool accumulate) {
    gt::Args p;
    p.a = reinterpret_cast<const __half*>(a.data());
    p.c = c;
    p.m = s.m;
    p.n = s.n;
    p.k = s.k;
    p.m_tiles = (s.m + BM - 1) / BM;
    p.accumulate = accumulate;
    return p;
}

int64_t grid_of(const gt::Args& p) { return int64_t{p.m_tiles} * ((p.n + gt::kBN - 1) / gt::kBN); }

template <int F, int BM, class Gen = gt::NoGen>
void run(const gt::Args& p, const Config& cfg, const std::vector<uint16_t>& a, const void* b, size_t b_bytes, const Gen& gen = {}) {
    auto& readable = mv_emu::readable;
    readable.clear();
    readable.push_back({a.data(), a.size() * 2});
    readable.push_back({b, b_bytes});  // the exact bytes: nothing past the matrix is read
    emu_test::launch(grid_of(p), gt::threads<BM>(), gt::smem_bytes<F, BM>(), cfg, [&] { gt::gemm_tc_kernel<F, BM, Gen>(p, gen); });
    readable.clear();
}

// The kGen decoder of the launcher: deq8, which runs quant::dec::decode8 (quant/decode.h) for these types,
// here in its host form: eight weights of a row from e0.
template <quant::Type T>
struct DecGen {
    void operator()(const uint8_t* row, int e0, float* y) const { quant::dec::decode8<T>(row, e0, y); }
};

std::vector<uint16_t> to_f16(const std::vector<float>& f) {
    std::vector<uint16_t> h(f.size());
    for (size_t i = 0; i < f.size(); ++i) h[i] = quant::f32_to_f16(f[i]);
    return h;
}

}  // namespace

namespace {

template <int BM>
void f16_cases() {
    // Tiles cut by m, n and k (k a multiple of 8, not of 64), one token, several token and row tiles.
    const Shape shapes[] = {{130, 200, 200}, {1, 67, 64}, {257, 129, 136}, {300, 128, 520}};
    uint64_t seed = 300;
    for (const Shape& s : shapes)
        for (bool accumulate : {false, true})
            for (const Config& cfg : kConfigs) {
                CAPTURE(s.m);
                CAPTURE(s.n);
                CAPTURE(s.k);
                CAPTURE(accumulate);
                CAPTURE(cfg.reverse);
                const auto a = to_f16(normal(static_cast<size_t>(s.m) * s.k, seed++));
                const auto b = to_f16(normal(static_cast<size_t>(s.n) * s.k, seed++));
                // c0 of the products' magnitude: a dropped or doubled c0 is an error of order 1.
                const auto c0 = normal(static_cast<size_t>(s.m) * s.n, seed++, static_cast<float>(std::sqrt(s.k)));
                std::vector<float> y = output(s, c0, accumulate);
                gt::Args p = args<BM>(s, a, y.data(), accumulate);
                p.b = reinterpret_cast<const __half*>(b.data());
                run<gt::kF16, BM>(p, cfg, a, b.data(), b.size() * 2);
                CHECK_MESSAGE(std::all_of(y.end() - kFence, y.end(), [](float v) { return v == kGuard; }), "written past C");
                double worst = 0;
                for (int i = 0; i < s.m; ++i)
                    for (int j = 0; j < s.n; ++j) {
                        const size_t at = static_cast<size_t>(i) * s.n + j;
                        double ref = accumulate ? c0[at] : 0.0, mag = accumulate ? std::fabs(c0[at]) : 0.0;
                        for (int e = 0; e < s.k; ++e) {
                            const double prod = static_cast<double>(quant::f16_to_f32(a[static_cast<size_t>(i) * s.k + e])) *
                                                quant::f16_to_f32(b[static_cast<size_t>(j) * s.k + e]);
                            ref += prod;
                            mag += std::fabs(prod);
                        }
                        REQUIRE_MESSAGE(std::isfinite(y[at]), "C[", i, "][", j, "] was not written");
                        worst = std::max(worst, std::fabs(y[at] - ref) / (mag + 1e-30));
                    }
                // f16 x f16 products are exact in f32; only the f32 accumulation rounds (about 1e-7 of the
                // products' magnitude); a lost k-tile, row or column is of order 1e-2 and more.
                CHECK(worst < 1e-5);
            }
}

template <int BM>
void quant_cases() {
    struct QCase {
        quant::Type t;
        Shape s;
    };
    // q6_K at 768 columns: 630-byte rows, so rows start at every even offset from a 16-byte boundary;
    // q8_0 at 320: 340-byte rows, k-tiles at every multiple of 4. q5_K and q4_0 take the decoder from
    // global memory (kGen), q4_0 at 96 columns with a k-tile cut short.
    const QCase cases[] = {{quant::Type::Q4_K, {130, 200, 512}}, {quant::Type::Q4_K, {9, 67, 768}},
                           {quant::Type::Q6_K, {130, 200, 768}}, {quant::Type::Q6_K, {5, 131, 256}},
                           {quant::Type::Q8_0, {130, 200, 320}}, {quant::Type::Q8_0, {7, 67, 64}},
                           {quant::Type::Q5_K, {130, 200, 512}}, {quant::Type::Q4_0, {9, 67, 96}}};
    uint64_t seed = 700;
    for (const QCase& qc : cases)
        for (bool accumulate : {false, true})
            for (const Config& cfg : kConfigs) {
                const Shape& s = qc.s;
                CAPTURE(static_cast<int>(qc.t));
                CAPTURE(s.m);
                CAPTURE(s.n);
                CAPTURE(s.k);
                CAPTURE(accumulate);
                CAPTURE(cfg.reverse);
                const auto a = to_f16(normal(static_cast<size_t>(s.m) * s.k, seed++));
                const size_t rb = quant::row_bytes(qc.t, s.k);
                std::vector<float> v = normal(static_cast<size_t>(s.n) * s.k, seed++);
                std::vector<uint8_t> q(rb * s.n);
                std::vector<float> back(static_cast<size_t>(s.k));
                std::vector<uint16_t> w16(static_cast<size_t>(s.n) * s.k);
                for (int r = 0; r < s.n; ++r) {
                    float* row = v.data() + static_cast<size_t>(r) * s.k;
                    for (int e = 0; e < s.k; ++e) row[e] *= std::ldexp(1.0f, r % 7 - 3);
                    quant::quantize_row(qc.t, row, q.data() + rb * r, s.k);
                    quant::dequantize_row(qc.t, q.data() + rb * r, back.data(), s.k);
                    for (int e = 0; e < s.k; ++e) w16[static_cast<size_t>(r) * s.k + e] = quant::f32_to_f16(back[static_cast<size_t>(e)]);
                }
                const auto c0 = normal(static_cast<size_t>(s.m) * s.n, seed++, static_cast<float>(std::sqrt(s.k)));
                std::vector<float> yq = output(s, c0, accumulate), yf = output(s, c0, accumulate);
                gt::Args pq = args<BM>(s, a, yq.data(), accumulate), pf = args<BM>(s, a, yf.data(), accumulate);
                pq.q = q.data();
                pq.row_bytes = static_cast<int64_t>(rb);
                pq.bytes = static_cast<int64_t>(q.size());
                pf.b = reinterpret_cast<const __half*>(w16.data());
                if (qc.t == quant::Type::Q4_K) run<gn::kQ4_K, BM>(pq, cfg, a, q.data(), q.size());
                else if (qc.t == quant::Type::Q6_K) run<gn::kQ6_K, BM>(pq, cfg, a, q.data(), q.size());
                else if (qc.t == quant::Type::Q8_0) run<gn::kQ8_0, BM>(pq, cfg, a, q.data(), q.size());
                else if (qc.t == quant::Type::Q5_K) run<gt::kGen, BM>(pq, cfg, a, q.data(), q.size(), DecGen<quant::Type::Q5_K>{});
                else run<gt::kGen, BM>(pq, cfg, a, q.data(), q.size(), DecGen<quant::Type::Q4_0>{});
                run<gt::kF16, BM>(pf, cfg, a, w16.data(), w16.size() * 2);
                CHECK_MESSAGE(std::all_of(yq.end() - kFence, yq.end(), [](float x) { return x == kGuard; }), "written past C");
                size_t differ = 0, unwritten = 0;
                for (size_t j = 0; j + kFence < yq.size(); ++j) {
                    unwritten += !std::isfinite(yq[j]);
                    differ += quant::f32_bits(yq[j]) != quant::f32_bits(yf[j]);
                }
                CHECK(unwritten == 0);
                CHECK(differ == 0);
            }
}

}  // namespace

TEST_CASE("prefill GEMM, f16 weights: float64 products of the same f16 values, token tiles of 128 and 256") {
    f16_cases<128>();
    f16_cases<256>();
}

TEST_CASE("prefill GEMM, quantized weights as stored: the f16 kernel's bits on the dequantized weights, token tiles of 128 and 256") {
    quant_cases<128>();
    quant_cases<256>();
}
