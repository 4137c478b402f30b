// The narrow GEMM's device code (cuda/gemm_narrow.cuh) run on the CPU through the CUDA emulation in
// tests/emu/cuda/matvec_ptx.cuh, against float64 products of the same f16 values: 9 to 64 tokens (one to
// four m16 tiles, rows past m zero-filled), one and three weight matrices per launch with row counts off
// the 64- and 128-row tiles, widths off the 64-wide k-tile, both tile widths, and work cut into CTAs of
// 1 unit to several tiles (whole tiles written directly, tiles split into pieces summed by the CTA that
// completes them), CTAs run in ascending and in shuffled order, with and without the accumulate epilogue.
// Each case runs in forward lane order with cp.async copies landing at their wait over NaN-filled shared
// memory, and in reverse order with copies landing at issue over random bytes. Outputs are poisoned and
// fenced; the counters must be zero again afterwards. The quantized kernel (q4_K, q6_K, q8_0 weights,
// mixed in one launch, q6_K blocks at every even offset from a 16-byte boundary and q8_0 k-tiles at every
// multiple of 4, the matrix's last chunk cut short) must give the f16 kernel's bits on the dequantized
// weights. No GPU is needed; cuda_tests checks the same kernels on one.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/gemm_narrow.cuh"  // with tests/emu first on the include path: the emulated CUDA
#include "emu_test.h"
#include "quant/f16.h"
#include "quant/quant.h"

namespace {

namespace gn = minfer::cuda::gn;
namespace quant = minfer::quant;
using emu_test::Config;
using emu_test::kConfigs;
using emu_test::normal;

std::vector<uint16_t> f16_normal(size_t n, uint64_t seed) {
    const std::vector<float> f = normal(n, seed);
    std::vector<uint16_t> h(n);
    for (size_t i = 0; i < n; ++i) h[i] = quant::f32_to_f16(f[i]);
    return h;
}

constexpr float kGuard = 12345.0f;  // the value of the fence after each output
constexpr int kFence = 16;
// The quantized kernel's bound against float64 (run_quant_case): measured 2.0e-4 to 2.8e-4 on q8_0 and
// q6_K, 4.6e-4 to 5.2e-4 on q4_K (its f16 dmin m, one rounding shared by a sub-block's 32 weights),
// where the f16 kernel on the cache's values measures 1.9e-4 to 2.3e-4; the min of the wrong sub-block
// makes 0.44, and any wrong scale, min or code is of that order.
constexpr double kQuantRel = 1e-3;

struct Case {
    int m;
    int k;
    std::vector<int> rows;  // one to three matrices
    int per_cta;            // units per CTA (0: one tile's worth plus one, across tile boundaries)
    bool accumulate;
};

// Runs one case with NW n8 tiles per warp; returns the worst |error| / (sum of |products| + |c0|).
template <int MT, int NW>
double run_case(const Case& cs, const Config& cfg, bool shuffled, uint64_t seed) {
    const int nseg = static_cast<int>(cs.rows.size());
    auto x = f16_normal(static_cast<size_t>(cs.m) * cs.k, seed);  // poisoned until pdl_wait (dependent below)
    std::vector<std::vector<uint16_t>> w(3);
    std::vector<std::vector<float>> y(3), c0(3);
    gn::Args a;
    a.x = reinterpret_cast<const __half*>(x.data());
    a.m = cs.m;
    a.k = cs.k;
    a.accumulate = cs.accumulate;
    gn::Seg* segs[3] = {&a.s0, &a.s1, &a.s2};
    int tiles[3] = {0, 0, 0}, total = 0;
    for (int i = 0; i < nseg; ++i) {
        const int n = cs.rows[static_cast<size_t>(i)];
        w[i] = f16_normal(static_cast<size_t>(n) * cs.k, seed + 10 + i);
        c0[i] = normal(static_cast<size_t>(cs.m) * n, seed + 20 + i, static_cast<float>(std::sqrt(cs.k)));
        y[i].assign(static_cast<size_t>(cs.m) * n + kFence, kGuard);
        if (cs.accumulate) std::copy(c0[i].begin(), c0[i].end(), y[i].begin());
        else std::fill(y[i].begin(), y[i].end() - kFence, NAN);
        *segs[i] = gn::Seg{reinterpret_cast<const __half*>(w[i].data()), y[i].data(), n};
        tiles[i] = (n + gn::tile_rows<NW>() - 1) / gn::tile_rows<NW>();
        total += tiles[i];
    }
    a.tiles0 = tiles[0];
    a.tiles01 = tiles[0] + tiles[1];
    a.k_tiles = (cs.k + gn::kBK - 1) / gn::kBK;
    a.units = total * a.k_tiles;
    a.per_cta = cs.per_cta > 0 ? cs.per_cta : a.k_tiles + 1;
    const int grid = (a.units + a.per_cta - 1) / a.per_cta;
    std::vector<float> ws(static_cast<size_t>(2 * grid) * gn::acc_floats<MT, NW>(), NAN);
    std::vector<int> counters(static_cast<size_t>(total), 0);
    a.ws = ws.data();
    a.counters = counters.data();

    auto& readable = mv_emu::readable;
    readable.clear();
    readable.push_back({x.data(), x.size() * 2});
    readable.push_back({ws.data(), ws.size() * 4});
    for (int i = 0; i < nseg; ++i) readable.push_back({w[i].data(), w[i].size() * 2});
    std::vector<int64_t> order(static_cast<size_t>(grid));
    std::iota(order.begin(), order.end(), 0);
    if (shuffled) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + 99));
    {
        // x (the kernel before's output) and y: poison until every thread of a CTA has reached pdl_wait.
        std::vector<mv_emu::DepRegion> dep = {emu_test::region(x)};
        for (int i = 0; i < nseg; ++i) dep.push_back(emu_test::region(y[i]));
        const emu_test::Dependent guard(std::move(dep));
        emu_test::launch(grid, gn::kThreads, gn::smem_bytes<MT, NW>(), cfg, [&] { gn::gemm_narrow_kernel<MT, NW>(a); }, &order);
    }
    readable.clear();

    CHECK(std::all_of(counters.begin(), counters.end(), [](int c) { return c == 0; }));
    double worst = 0;
    for (int i = 0; i < nseg; ++i) {
        const int n = cs.rows[static_cast<size_t>(i)];
        CHECK_MESSAGE(std::all_of(y[i].end() - kFence, y[i].end(), [](float v) { return v == kGuard; }), "written past y");
        for (int t = 0; t < cs.m; ++t)
            for (int r = 0; r < n; ++r) {
                const size_t at = static_cast<size_t>(t) * n + r;
                double ref = cs.accumulate ? c0[i][at] : 0.0, mag = cs.accumulate ? std::fabs(c0[i][at]) : 0.0;
                for (int e = 0; e < cs.k; ++e) {
                    const double p = static_cast<double>(quant::f16_to_f32(x[static_cast<size_t>(t) * cs.k + e])) *
                                     quant::f16_to_f32(w[i][static_cast<size_t>(r) * cs.k + e]);
                    ref += p;
                    mag += std::fabs(p);
                }
                const float got = y[i][at];
                if (!std::isfinite(got)) return INFINITY;
                worst = std::max(worst, std::fabs(got - ref) / (mag + 1e-30));
            }
    }
    return worst;
}

// The quantized kernel against float64 products of the same x and the CPU's dequantized weights, beside
// the f16 kernel on those weights rounded to f16 (what the f16 cache holds): q8_0 gives the f16 kernel's
// bits; q4_K and q6_K (one rounding of a block constant more, dequant_rows) stay within kQuantRel of
// float64 in relative L2; no NaN, counters back at zero,
// fences intact. Returns the largest relative L2 of the quantized kernel over the segments.
template <int MT, int NW>
double run_quant_case(const Case& cs, const std::vector<quant::Type>& types, const Config& cfg, bool shuffled, uint64_t seed) {
    const int nseg = static_cast<int>(cs.rows.size());
    auto x = f16_normal(static_cast<size_t>(cs.m) * cs.k, seed);  // poisoned until pdl_wait (dependent below)
    std::vector<std::vector<uint8_t>> q(3);
    std::vector<std::vector<uint16_t>> w16(3);
    std::vector<std::vector<float>> yq(3), yf(3), wx(3), c0s(3);
    gn::Args aq, af;
    for (gn::Args* a : {&aq, &af}) {
        a->x = reinterpret_cast<const __half*>(x.data());
        a->m = cs.m;
        a->k = cs.k;
        a->accumulate = cs.accumulate;
    }
    gn::Seg* sq[3] = {&aq.s0, &aq.s1, &aq.s2};
    gn::Seg* sf[3] = {&af.s0, &af.s1, &af.s2};
    int tiles[3] = {0, 0, 0}, total = 0;
    for (int i = 0; i < nseg; ++i) {
        const int n = cs.rows[static_cast<size_t>(i)];
        const quant::Type t = types[static_cast<size_t>(i)];
        const size_t rb = quant::row_bytes(t, cs.k);
        // Rows of varied magnitude (scales from tiny to large), quantized by the CPU quantizer.
        std::vector<float> v = normal(static_cast<size_t>(n) * cs.k, seed + 10 + i);
        for (int r = 0; r < n; ++r)
            for (int e = 0; e < cs.k; ++e) v[static_cast<size_t>(r) * cs.k + e] *= std::ldexp(1.0f, r % 7 - 3);
        q[i].resize(rb * n);
        w16[i].resize(static_cast<size_t>(n) * cs.k);
        wx[i].resize(static_cast<size_t>(n) * cs.k);
        for (int r = 0; r < n; ++r) {
            float* back = wx[i].data() + static_cast<size_t>(r) * cs.k;
            quant::quantize_row(t, v.data() + static_cast<size_t>(r) * cs.k, q[i].data() + rb * r, cs.k);
            quant::dequantize_row(t, q[i].data() + rb * r, back, cs.k);
            for (int e = 0; e < cs.k; ++e) w16[i][static_cast<size_t>(r) * cs.k + e] = quant::f32_to_f16(back[e]);
        }
        c0s[i] = normal(static_cast<size_t>(cs.m) * n, seed + 20 + i);
        const std::vector<float>& c0 = c0s[i];
        for (auto* y : {&yq[i], &yf[i]}) {
            y->assign(static_cast<size_t>(cs.m) * n + kFence, kGuard);
            if (cs.accumulate) std::copy(c0.begin(), c0.end(), y->begin());
            else std::fill(y->begin(), y->end() - kFence, NAN);
        }
        *sf[i] = gn::Seg{reinterpret_cast<const __half*>(w16[i].data()), yf[i].data(), n};
        gn::Seg& g = *sq[i];
        g.y = yq[i].data();
        g.n = n;
        g.q = q[i].data();
        g.row_bytes = static_cast<int64_t>(rb);
        g.bytes = static_cast<int64_t>(q[i].size());
        g.fmt = t == quant::Type::Q4_K ? gn::kQ4_K : t == quant::Type::Q6_K ? gn::kQ6_K : gn::kQ8_0;
        tiles[i] = (n + gn::tile_rows<NW>() - 1) / gn::tile_rows<NW>();
        total += tiles[i];
    }
    std::vector<int64_t> order;
    for (gn::Args* a : {&aq, &af}) {
        a->tiles0 = tiles[0];
        a->tiles01 = tiles[0] + tiles[1];
        a->k_tiles = cs.k / gn::kBK;
        a->units = total * a->k_tiles;
        a->per_cta = cs.per_cta > 0 ? cs.per_cta : a->k_tiles + 1;
    }
    const int grid = (aq.units + aq.per_cta - 1) / aq.per_cta;
    order.resize(static_cast<size_t>(grid));
    std::iota(order.begin(), order.end(), 0);
    if (shuffled) std::shuffle(order.begin(), order.end(), std::mt19937_64(seed + 99));
    auto run = [&](gn::Args& a, bool quantized) {
        std::vector<float> ws(static_cast<size_t>(2 * grid) * gn::acc_floats<MT, NW>(), NAN);
        std::vector<int> counters(static_cast<size_t>(total), 0);
        a.ws = ws.data();
        a.counters = counters.data();
        auto& readable = mv_emu::readable;
        readable.clear();
        readable.push_back({x.data(), x.size() * 2});
        readable.push_back({ws.data(), ws.size() * 4});
        for (int i = 0; i < nseg; ++i) {
            if (quantized) readable.push_back({q[i].data(), q[i].size()});  // the exact bytes: no read past the matrix
            else readable.push_back({w16[i].data(), w16[i].size() * 2});
        }
        std::vector<mv_emu::DepRegion> dep = {emu_test::region(x)};  // as in run_case
        for (int i = 0; i < nseg; ++i) dep.push_back(emu_test::region(quantized ? yq[i] : yf[i]));
        const emu_test::Dependent guard(std::move(dep));
        if (quantized)
            emu_test::launch(grid, gn::kThreads, gn::smem_bytes<MT, NW, true>(), cfg, [&] { gn::gemm_narrow_kernel<MT, NW, true>(a); }, &order);
        else
            emu_test::launch(grid, gn::kThreads, gn::smem_bytes<MT, NW>(), cfg, [&] { gn::gemm_narrow_kernel<MT, NW>(a); }, &order);
        readable.clear();
        CHECK(std::all_of(counters.begin(), counters.end(), [](int c) { return c == 0; }));
    };
    run(aq, true);
    run(af, false);
    double worst = 0;
    for (int i = 0; i < nseg; ++i) {
        const quant::Type t = types[static_cast<size_t>(i)];
        const int n = cs.rows[static_cast<size_t>(i)];
        CAPTURE(i);
        CAPTURE(static_cast<int>(t));
        CHECK_MESSAGE(std::all_of(yq[i].end() - kFence, yq[i].end(), [](float v) { return v == kGuard; }), "written past y");
        CHECK(std::all_of(yq[i].begin(), yq[i].end(), [](float v) { return std::isfinite(v); }));
        if (t == quant::Type::Q8_0) {
            size_t differ = 0;
            for (size_t j = 0; j < yq[i].size(); ++j) differ += quant::f32_bits(yq[i][j]) != quant::f32_bits(yf[i][j]);
            CHECK(differ == 0);
        }
        // The products alone (c0 taken out in double), against float64.
        double nq = 0, nf = 0, den = 0;
        for (int tk = 0; tk < cs.m; ++tk)
            for (int r = 0; r < n; ++r) {
                double ref = 0;
                for (int e = 0; e < cs.k; ++e)
                    ref += static_cast<double>(quant::f16_to_f32(x[static_cast<size_t>(tk) * cs.k + e])) * wx[i][static_cast<size_t>(r) * cs.k + e];
                const size_t j = static_cast<size_t>(tk) * n + r;
                const double base = cs.accumulate ? c0s[i][j] : 0.0;
                nq += (yq[i][j] - base - ref) * (yq[i][j] - base - ref);
                nf += (yf[i][j] - base - ref) * (yf[i][j] - base - ref);
                den += ref * ref;
            }
        const double eq = std::sqrt(nq / den), ef = std::sqrt(nf / den);
        CAPTURE(eq);
        CAPTURE(ef);
        CHECK(eq < kQuantRel);
        worst = std::max(worst, eq);
    }
    return worst;
}

template <int MT>
void run_all(const Case& cs, uint64_t seed) {
    for (const Config& cfg : kConfigs)
        for (bool shuffled : {false, true}) {
            CAPTURE(cfg.reverse);
            CAPTURE(shuffled);
            // f16 x f16 products are exact in f32 (and in the emulated MMA); the f32 sums round: about
            // 1e-7 of the magnitude (the bound of the GPU test). A missing k-tile, piece or row, or c0
            // dropped or added twice, is an error of order one.
            CHECK(run_case<MT, 2>(cs, cfg, shuffled, seed) < 1e-5);
            CHECK(run_case<MT, 4>(cs, cfg, shuffled, seed + 1) < 1e-5);
        }
}

}  // namespace

TEST_CASE("narrow GEMM: against float64 for 9 to 64 tokens, one and three matrices, whole tiles and pieces") {
    const Case cases[] = {
        {9, 136, {200}, 0, false},             // one m16 tile; k off the 64-wide tile; tiles cut across CTAs
        {16, 200, {70}, 1, true},               // a CTA per k-tile: every tile in pieces; accumulate
        {17, 128, {130, 40, 40}, 2, false},     // two m16 tiles; q/k/v-like matrices, pieces across segments
        {40, 64, {64, 64, 8}, 1, true},         // one k-tile per tile: every tile whole
        {64, 256, {96, 33, 40}, 7, false},      // four m16 tiles; CTAs of more than a tile
        {64, 192, {300}, 3, true},              // a tile per CTA exactly
    };
    uint64_t seed = 1000;
    for (const Case& cs : cases) {
        CAPTURE(cs.m);
        CAPTURE(cs.k);
        CAPTURE(cs.rows.size());
        CAPTURE(cs.per_cta);
        switch ((cs.m + 15) / 16) {
            case 1: run_all<1>(cs, seed); break;
            case 2: run_all<2>(cs, seed); break;
            case 3: run_all<3>(cs, seed); break;
            default: run_all<4>(cs, seed); break;
        }
        seed += 100;
    }
}

TEST_CASE("narrow GEMM on quantized weights: float64 products of the dequantized weights, q8_0 the f16 kernel's bits") {
    using T = quant::Type;
    const Case cases[] = {
        {9, 512, {200}, 0, false},           // q4_K, two blocks a row; tiles cut across CTAs
        {16, 256, {70}, 1, true},             // q6_K, a CTA per k-tile (each a quarter block); accumulate
        {33, 512, {130, 40, 40}, 3, false},   // q/k/v of a q4_K_M file: q4_K, q4_K, q6_K in one launch
        {64, 192, {97}, 2, true},             // q8_0, 204-byte rows: k-tiles at offsets 0, 4, 8, 12; the last chunk cut
        {24, 768, {40, 72}, 0, false},        // q8_0 and q6_K (816- and 630-byte rows), a tile per CTA and more
    };
    const std::vector<T> types[] = {{T::Q4_K}, {T::Q6_K}, {T::Q4_K, T::Q4_K, T::Q6_K}, {T::Q8_0}, {T::Q8_0, T::Q6_K}};
    uint64_t seed = 5000;
    double worst = 0;
    for (size_t c = 0; c < std::size(cases); ++c) {
        const Case& cs = cases[c];
        const std::vector<T>& ts = types[c];
        CAPTURE(cs.m);
        CAPTURE(cs.k);
        CAPTURE(cs.rows.size());
        CAPTURE(cs.per_cta);
        for (const Config& cfg : kConfigs)
            for (bool shuffled : {false, true}) {
                CAPTURE(cfg.reverse);
                CAPTURE(shuffled);
                switch ((cs.m + 15) / 16) {
                    case 1: worst = std::max({worst, run_quant_case<1, 2>(cs, ts, cfg, shuffled, seed), run_quant_case<1, 4>(cs, ts, cfg, shuffled, seed)}); break;
                    case 2: worst = std::max({worst, run_quant_case<2, 2>(cs, ts, cfg, shuffled, seed), run_quant_case<2, 4>(cs, ts, cfg, shuffled, seed)}); break;
                    case 3: worst = std::max({worst, run_quant_case<3, 2>(cs, ts, cfg, shuffled, seed), run_quant_case<3, 4>(cs, ts, cfg, shuffled, seed)}); break;
                    default: worst = std::max({worst, run_quant_case<4, 2>(cs, ts, cfg, shuffled, seed), run_quant_case<4, 4>(cs, ts, cfg, shuffled, seed)}); break;
                }
            }
        seed += 100;
    }
    MESSAGE("quantized narrow GEMM, largest relative L2 against float64: " << worst);
}
