// The tensor-core prefill attention's device code (cuda/attention_mma.cuh) run on the CPU through the CUDA
// emulation in tests/emu/cuda/matvec_ptx.cuh, against a float64 causal attention over the same f16 KV
// cache: head_dim 64 and 128, one and two 16-row tiles per warp, query groups of 1, 4 and 7 heads per KV
// head, query counts that are not multiples of the 64- or 128-query and 64-key tiles, a continuation from
// a filled cache, a shuffled page table.
// Each case runs in forward lane order with cp.async copies landing at their wait over NaN-filled shared
// memory, and in reverse order with copies landing at issue over random bytes: missing barriers and early
// reads change the result. The output is poisoned with NaN and fenced. No GPU is needed; cuda_tests
// checks the same kernel on one.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "cuda/attention_mma.cuh"  // with tests/emu first on the include path: the emulated CUDA
#include "attention_ref.h"
#include "emu_test.h"
#include "quant/f16.h"

namespace {

namespace fa = minfer::cuda::fa;
namespace mv = minfer::cuda::mv;
namespace quant = minfer::quant;
using emu_test::Config;
using emu_test::kConfigs;
using emu_test::normal;
using emu_test::rel_l2;


struct Case {
    int n_head, n_head_kv, hd, n, pos0;
};

// The sequence's KV cache: `rows` pool rows of random f16 (every row, used or not), positions mapped
// through a shuffled page table.
struct Cache {
    int kv_dim = 0;
    std::vector<uint16_t> k, v;
    std::vector<int32_t> pages;
    int64_t row(int p) const {
        constexpr int shift = minfer::cuda::kKvPageShift;
        return int64_t{pages[static_cast<size_t>(p >> shift)]} << shift | (p & ((1 << shift) - 1));
    }
};

Cache make_cache(int n_head_kv, int hd, int positions, uint64_t seed) {
    Cache c;
    c.kv_dim = n_head_kv * hd;
    const int n_pages = (positions + 15) / 16 + 3;  // spare pages: rows no position maps to
    c.pages.resize(static_cast<size_t>(n_pages));
    for (int i = 0; i < n_pages; ++i) c.pages[static_cast<size_t>(i)] = i;
    std::shuffle(c.pages.begin(), c.pages.end(), std::mt19937_64(seed));
    const size_t elems = static_cast<size_t>(n_pages) * 16 * static_cast<size_t>(c.kv_dim);
    const auto kf = normal(elems, seed + 1, 1.0f), vf = normal(elems, seed + 2, 1.0f);
    c.k.resize(elems);
    c.v.resize(elems);
    for (size_t i = 0; i < elems; ++i) {
        c.k[i] = quant::f32_to_f16(kf[i]);
        c.v[i] = quant::f32_to_f16(vf[i]);
    }
    return c;
}

// float64 causal attention of the queries over the cache's f16 values.
std::vector<double> reference(const Case& cs, const std::vector<float>& q, const Cache& c) {
    auto at = [&](const std::vector<uint16_t>& kv, int p, int kvh, int d) {
        return static_cast<double>(quant::f16_to_f32(kv[static_cast<size_t>(c.row(p)) * c.kv_dim + static_cast<size_t>(kvh) * cs.hd + d]));
    };
    return causal_attention_f64(
        q.data(), cs.n, cs.pos0, cs.n_head, cs.n_head_kv, cs.hd, [&](int p, int kvh, int d) { return at(c.k, p, kvh, d); },
        [&](int p, int kvh, int d) { return at(c.v, p, kvh, d); });
}

template <int HD, int MT>
std::vector<float> run(const Case& cs, const std::vector<float>& q, const Cache& c, const Config& cfg) {
    const size_t n_out = static_cast<size_t>(cs.n) * static_cast<size_t>(cs.n_head) * HD;
    std::vector<float> out(n_out + 64, std::nanf(""));
    for (size_t i = n_out; i < out.size(); ++i) out[i] = 12345.0f;
    mv_emu::readable = {{q.data(), q.size() * sizeof(float)},
                        {c.k.data(), c.k.size() * 2},
                        {c.v.data(), c.v.size() * 2},
                        {c.pages.data(), c.pages.size() * sizeof(int32_t)}};
    minfer::cuda::KvMap kv;
    kv.pages = c.pages.data();
    kv.stride = static_cast<int>(c.pages.size());
    const float qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(HD)));
    const auto* kc = reinterpret_cast<const __half*>(c.k.data());
    const auto* vc = reinterpret_cast<const __half*>(c.v.data());
    const size_t smem = static_cast<size_t>(fa::smem_bytes<HD, MT>());
    emu_test::launch(fa::grid_size<MT>(cs.n, cs.n_head), fa::kThreads, smem, cfg, [&] {
        fa::attn_prefill_mma_kernel<HD, MT>(q.data(), kc, vc, out.data(), cs.n, cs.pos0, cs.n_head, cs.n_head / cs.n_head_kv, c.kv_dim,
                                            qscale, kv);
    });
    REQUIRE_MESSAGE(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(n_out), out.end(), [](float v) { return v == 12345.0f; }),
                    "output written past its end");
    out.resize(n_out);
    return out;
}

}  // namespace

// The kernel rounds q * scale * log2(e) and the softmax weights to f16 (the MMA operands) and sums in f32:
// 2.2e-4 to 3.4e-4 of relative L2 from the float64 attention (printed); bound 1e-3. Planted bugs measured
// 1.5e-3 and more: the last key of each query tile missing (1.5e-3 to 4.7e-2), one key too many per row
// (2.5e-2 to 0.59), one too few (the diagonal masked: 0.02 to inf), the second row tile masked as the
// first (0.2 to 0.62), no rescale of l, a wrong KV head, a tile read before its copies landed (0.02 to inf).
TEST_CASE("prefill attention (tensor cores, emulated): against a float64 attention over the f16 cache") {
    const Case cases[] = {
        {2, 2, 64, 17, 0},     // group 1, one partial query tile
        {4, 1, 64, 130, 0},    // group 4, three query tiles, three key tiles
        {2, 1, 64, 64, 64},    // whole tiles, continuing from 64 cached positions
        {7, 1, 128, 70, 0},    // group 7, head_dim 128
        {7, 1, 128, 45, 100},  // continuing mid-tile: the diagonal crosses two key tiles
        {4, 2, 128, 2, 45},    // a few tokens over a filled cache
    };
    uint64_t seed = 7000;
    for (const Case& cs : cases) {
        CAPTURE(cs.n_head);
        CAPTURE(cs.n_head_kv);
        CAPTURE(cs.hd);
        CAPTURE(cs.n);
        CAPTURE(cs.pos0);
        const Cache c = make_cache(cs.n_head_kv, cs.hd, cs.pos0 + cs.n, seed);  // seeds seed .. seed + 2
        const auto q = normal(static_cast<size_t>(cs.n) * cs.n_head * cs.hd, seed + 3, 2.0f);  // sd 2: peaked rows
        seed += 4;
        const auto ref = reference(cs, q, c);
        for (int mt : {1, 2}) {
            CAPTURE(mt);
            for (const Config& cfg : kConfigs) {
                CAPTURE(cfg.reverse);
                const auto out = cs.hd == 64 ? (mt == 1 ? run<64, 1>(cs, q, c, cfg) : run<64, 2>(cs, q, c, cfg))
                                             : (mt == 1 ? run<128, 1>(cs, q, c, cfg) : run<128, 2>(cs, q, c, cfg));
                const double err = rel_l2(out, ref);
                MESSAGE("rel L2 " << err);
                CHECK(err < 1e-3);
            }
        }
    }
}
