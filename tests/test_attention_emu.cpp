// The tensor-core attention kernels' device code (cuda/attention_mma.cuh) run on the CPU through the CUDA
// emulation in tests/emu/cuda/matvec_ptx.cuh, against a float64 causal attention over the same f16 KV
// cache. Prefill: head_dim 64 and 128, one and two 16-row tiles per warp, query groups of 1, 4 and 7 heads
// per KV head, query counts that are not multiples of the 64- or 128-query and 64-key tiles, a
// continuation from a filled cache, a shuffled page table. Decode: groups of 1, 4, 7 and 20 heads, one
// to six key tiles a warp, one chunk and several (their partials merged by the combine kernel, up to 200
// chunks a head), lengths given or read on the device, several rows in one launch, blocks run in reverse
// order.
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

// f16: the kernel's f16 output (out16; out must stay untouched), returned as f32 values. q16: the queries
// given as f16 rows already times the scale (qkv_finish's q16, made here with the same product and
// rounding), q poisoned.
template <int HD, int MT>
std::vector<float> run(const Case& cs, const std::vector<float>& q_in, const Cache& c, const Config& cfg, bool f16 = false,
                       bool q16 = false) {
    const float qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(HD)));
    std::vector<float> q = q_in;
    std::vector<__half> qh(q16 ? q.size() : 0);
    if (q16)
        for (size_t i = 0; i < q.size(); ++i) {
            qh[i] = __float2half_rn(__fmul_rn(q[i], qscale));
            q[i] = std::nanf("");
        }
    const size_t n_out = static_cast<size_t>(cs.n) * static_cast<size_t>(cs.n_head) * HD;
    std::vector<float> out(n_out + 64, std::nanf(""));
    for (size_t i = n_out; i < out.size(); ++i) out[i] = 12345.0f;
    std::vector<__half> out16(f16 ? n_out + 64 : 0, __half{0x7e00});
    for (size_t i = n_out; i < out16.size(); ++i) out16[i].bits = 12345;
    mv_emu::readable = {{q16 ? static_cast<const void*>(qh.data()) : q.data(), q16 ? qh.size() * 2 : q.size() * sizeof(float)},
                        {c.k.data(), c.k.size() * 2},
                        {c.v.data(), c.v.size() * 2},
                        {c.pages.data(), c.pages.size() * sizeof(int32_t)}};
    minfer::cuda::KvMap kv;
    kv.pages = c.pages.data();
    kv.stride = static_cast<int>(c.pages.size());
    const auto* kc = reinterpret_cast<const __half*>(c.k.data());
    const auto* vc = reinterpret_cast<const __half*>(c.v.data());
    const size_t smem = static_cast<size_t>(fa::smem_bytes<HD, MT>());
    emu_test::launch(fa::grid_size<MT>(cs.n, cs.n_head), fa::kThreads, smem, cfg, [&] {
        fa::attn_prefill_mma_kernel<HD, MT>(q.data(), q16 ? qh.data() : nullptr, kc, vc, out.data(), f16 ? out16.data() : nullptr, cs.n,
                                            cs.pos0, cs.n_head, cs.n_head / cs.n_head_kv, c.kv_dim, qscale, kv);
    });
    REQUIRE_MESSAGE(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(n_out), out.end(), [](float v) { return v == 12345.0f; }),
                    "output written past its end");
    out.resize(n_out);
    if (!f16) return out;
    REQUIRE_MESSAGE(std::all_of(out.begin(), out.end(), [](float v) { return std::isnan(v); }), "f32 output written beside the f16 one");
    REQUIRE_MESSAGE(std::all_of(out16.begin() + static_cast<std::ptrdiff_t>(n_out), out16.end(), [](__half v) { return v.bits == 12345; }),
                    "f16 output written past its end");
    for (size_t i = 0; i < n_out; ++i) out[i] = quant::f16_to_f32(out16[i].bits);
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
                // The f16 output (the output projection's input) is the f32 output rounded, element for element.
                const auto out16 = cs.hd == 64 ? (mt == 1 ? run<64, 1>(cs, q, c, cfg, true) : run<64, 2>(cs, q, c, cfg, true))
                                               : (mt == 1 ? run<128, 1>(cs, q, c, cfg, true) : run<128, 2>(cs, q, c, cfg, true));
                size_t bad = 0;
                for (size_t i = 0; i < out.size(); ++i) bad += out16[i] != quant::f16_to_f32(quant::f32_to_f16(out[i]));
                CHECK(bad == 0);
                // The queries as qkv_finish's f16 rows (q poisoned): the same output, bit for bit.
                const auto outq = cs.hd == 64 ? (mt == 1 ? run<64, 1>(cs, q, c, cfg, false, true) : run<64, 2>(cs, q, c, cfg, false, true))
                                              : (mt == 1 ? run<128, 1>(cs, q, c, cfg, false, true) : run<128, 2>(cs, q, c, cfg, false, true));
                CHECK(std::memcmp(outq.data(), out.data(), out.size() * sizeof(float)) == 0);
            }
        }
    }
}

namespace {

struct DecodeCase {
    int n_head, n_head_kv, hd, max_splits;
    std::vector<int> lengths;  // one row (query token) each, over the same cached sequence
    bool on_device;            // lengths from pos_dev (a CUDA graph's step); else one row, L given
};

// The decode kernel's rows, then, as the launcher (cuda/attention.cu) runs it, the combine kernel over
// the rows of several chunks; out16 must be the f32 output rounded, and xq (its int8 form,
// block-interleaved rows) must decode to it within the quantization's step (2^-15 of the 32-column
// block's largest magnitude; the GPU test compares its bytes with quantize_x's), whichever kernel wrote
// the row. The combine runs under the same check of the programmatic launch (the partials, the outputs
// poison until its wait).
// Under the emulator's check of the programmatic launch, q and the outputs are poison until every thread
// of a block has reached pdl_wait, and so is a single row's last key and value (this step's, written by
// qkv_finish); the earlier keys (earlier steps') may be copied before it. (Rows of one launch belong to
// different sequences in the forward; here they share one cache, so with several rows each one's last
// key is an earlier key of the longer rows, and only q and the outputs are checked.)
template <int HD>
std::vector<float> run_decode(const DecodeCase& cs, std::vector<float>& q, Cache& c, const Config& cfg) {
    const int rows = static_cast<int>(cs.lengths.size()), group = cs.n_head / cs.n_head_kv, zc = (group + 15) / 16;
    const size_t q_dim = static_cast<size_t>(cs.n_head) * HD, per_head = static_cast<size_t>(fa::part_stride<HD>());
    const size_t n_out = static_cast<size_t>(rows) * q_dim;
    std::vector<float> out(n_out + 64, std::nanf("")), part(static_cast<size_t>(rows) * cs.n_head * cs.max_splits * per_head + 64, std::nanf(""));
    std::vector<__half> out16(n_out + 64, __half{0x7e00});
    const int64_t xq_row = mv::xq_bytes(static_cast<int64_t>(q_dim));
    std::vector<uint8_t> xq(static_cast<size_t>(rows * xq_row) + 64, 0xff);
    for (size_t i = xq.size() - 64; i < xq.size(); ++i) xq[i] = 0xa5;
    for (size_t i = n_out; i < out.size(); ++i) out[i] = out16[i].bits = 12345;
    for (size_t i = part.size() - 64; i < part.size(); ++i) part[i] = 12345.0f;
    std::vector<int32_t> pos;
    for (int L : cs.lengths) pos.push_back(L - 1);
    const std::vector<int32_t> slots(static_cast<size_t>(rows), 0);
    mv_emu::readable = {{q.data(), q.size() * sizeof(float)},      {c.k.data(), c.k.size() * 2},
                        {c.v.data(), c.v.size() * 2},              {c.pages.data(), c.pages.size() * sizeof(int32_t)},
                        {pos.data(), pos.size() * sizeof(int32_t)}, {slots.data(), slots.size() * sizeof(int32_t)}};
    minfer::cuda::KvMap kv;
    kv.pages = c.pages.data();
    kv.slot = slots.data();
    kv.stride = static_cast<int>(c.pages.size());
    const float qscale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(HD)));
    const auto* kc = reinterpret_cast<const __half*>(c.k.data());
    const auto* vc = reinterpret_cast<const __half*>(c.v.data());
    const int L0 = cs.lengths[0];
    const fa::DecodeSplit host = fa::decode_split_for(L0, cs.max_splits);
    const unsigned gy = static_cast<unsigned>(cs.on_device ? cs.max_splits : host.n_split);
    const mv_emu::Dim grid{static_cast<unsigned>(cs.n_head_kv), gy, static_cast<unsigned>(zc * rows)};
    std::vector<int64_t> order(size_t{grid.x} * grid.y * grid.z);  // blocks in reverse: no order assumed
    for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(order.size() - 1 - i);
    {
        using emu_test::region;
        std::vector<mv_emu::DepRegion> dep = {region(q), region(out), region(part), region(out16), region(xq)};
        if (rows == 1) {
            const size_t at = static_cast<size_t>(c.row(L0 - 1) * c.kv_dim), bytes = static_cast<size_t>(c.kv_dim) * 2;
            dep.push_back({c.k.data() + at, bytes});
            dep.push_back({c.v.data() + at, bytes});
        }
        const emu_test::Dependent guard(std::move(dep));
        emu_test::launch(grid, fa::kThreads, static_cast<size_t>(fa::dec_smem_bytes<HD>()), cfg, [&] {
            fa::attn_decode_mma_kernel<HD>(q.data(), kc, vc, part.data(), out.data(), cs.on_device ? 0 : L0, group, c.kv_dim, qscale,
                                           cs.on_device ? 0 : host.chunk, cs.on_device ? pos.data() : nullptr, zc, kv, out16.data(),
                                           xq.data(), 0, rows, true);
        }, &order);
    }
    if (gy > 1) {  // as the launcher: a grid of one chunk a row has no combine
        using emu_test::region;
        const emu_test::Dependent guard({region(part), region(out), region(out16), region(xq)});
        emu_test::launch(mv_emu::Dim{static_cast<unsigned>(cs.n_head), static_cast<unsigned>(rows), 1u}, fa::kCombineThreads, 0, cfg, [&] {
            fa::attn_combine_kernel<HD>(part.data(), out.data(), static_cast<int>(gy), cs.on_device ? pos.data() : nullptr, out16.data(),
                                        xq.data(), 0, rows);
        });
    }
    REQUIRE_MESSAGE(std::all_of(xq.end() - 64, xq.end(), [](uint8_t v) { return v == 0xa5; }), "xq written past its end");
    REQUIRE_MESSAGE(std::all_of(out.begin() + static_cast<std::ptrdiff_t>(n_out), out.end(), [](float v) { return v == 12345.0f; }),
                    "output written past its end");
    REQUIRE_MESSAGE(std::all_of(part.end() - 64, part.end(), [](float v) { return v == 12345.0f; }), "partials written past their end");
    for (int r = 0; r < rows; ++r) {
        for (int h = 0; h < cs.n_head; ++h) {
            const float* o = out.data() + static_cast<size_t>(r) * q_dim + static_cast<size_t>(h) * HD;
            size_t differ16 = 0, off = 0;
            for (int d = 0; d < HD; ++d) {
                differ16 += out16[static_cast<size_t>(o - out.data()) + d].bits != quant::f32_to_f16(o[d]);
                const int64_t col = int64_t{h} * HD + d;
                float am = 0.0f;
                for (int e = 0; e < 32; ++e) am = std::max(am, std::fabs(o[d / 32 * 32 + e]));
                off += !(std::fabs(mv::xq_value(xq.data(), static_cast<int64_t>(q_dim), col, r, rows) - o[d]) <= am * 0x1p-15f);
            }
            CHECK(differ16 == 0);
            CHECK(off == 0);
        }
    }
    out.resize(n_out);
    return out;
}

}  // namespace

// The decode kernel (tensor cores, Q and P as f16 hi + lo pairs) and the combine against float64: rel L2
// about 1e-7 (printed); bound 1e-5, the bound of the CUDA-core kernel it replaced (tests/test_cuda.cpp).
// Planted bugs: in the combine, no rescale of a warp's sums when a later batch raises its maximum, a
// batch's chunks adjacent instead of 16 apart, the warps merged unweighted, a batch's later chunks
// dropped; in the decode kernel, P or Q without its lo half (2e-4 .. 4e-4), the last key copied before the
// wait (and never again), the last tile's mask off by one, the first tile's wait for all but one group;
// with two slot pairs a warp (fa::kDecSlots), the K or the V wait one group short, a tile read from the
// next tile's slots, a refill one tile too far, this step's key copied only into the first pair.
TEST_CASE("decode attention (tensor cores, emulated): against a float64 attention over the f16 cache") {
    const DecodeCase cases[] = {
        {7, 1, 128, 8, {1000}, false},               // group 7, 8 chunks of 128 keys: two tiles a warp
        {7, 1, 128, 3, {1000, 17, 1, 130}, true},    // 3 chunks of 352 keys: six tiles a warp; rows of 1 and 17 keys
        {4, 2, 64, 4, {65, 64, 2, 300}, true},       // group 4, head_dim 64; lengths at the tile's edges
        {2, 2, 64, 1, {200}, false},                 // group 1, one chunk of 200 keys (warps end at different tiles)
        {20, 1, 64, 2, {150, 33}, true},             // group 20: two blocks of heads (16 and 4)
        {7, 1, 128, 3, {130}, false},                // one row whose last key is in a warp's first tile (the
        {4, 2, 64, 4, {17}, false},                  // copies before the wait): chunks of 64, the last one of 2 keys
        {7, 1, 128, 1, {256, 129, 1, 64}, true},     // one chunk a row on the device (a short step, MINFER_ATTN_ONE_CHUNK):
        {14, 2, 64, 1, {200}, true},                 // up to four tiles a warp, refilled; one row, the 0.5B's heads
        {2, 1, 64, 80, {5100}, false},               // 80 chunks of 64 keys: the combine's warps take two batches
        {4, 2, 64, 72, {4600, 1200, 65}, true},      // 72, 19 and 2 chunks: batches of several chunks a warp
        {2, 1, 128, 200, {12800}, false},            // head_dim 128 in the combine: 200 chunks, four batches
        {4, 2, 128, 80, {5000, 300}, true},          // for warps 0-7; 79 and 5 chunks of one launch's 80
        {2, 1, 64, 1, {2207}, true},                 // one chunk of 2,207 keys: warps past 32 tiles, whose page
                                                     // look-ups are not read ahead; one key short of a tile
    };
    uint64_t seed = 9100;
    for (const DecodeCase& cs : cases) {
        CAPTURE(cs.n_head);
        CAPTURE(cs.n_head_kv);
        CAPTURE(cs.hd);
        CAPTURE(cs.max_splits);
        const int most = *std::max_element(cs.lengths.begin(), cs.lengths.end());
        Cache c = make_cache(cs.n_head_kv, cs.hd, most, seed);
        const size_t q_dim = static_cast<size_t>(cs.n_head) * cs.hd;
        auto q = normal(cs.lengths.size() * q_dim, seed + 3, 2.0f);  // sd 2: peaked rows
        seed += 4;
        for (const Config& cfg : kConfigs) {
            CAPTURE(cfg.reverse);
            const auto out = cs.hd == 64 ? run_decode<64>(cs, q, c, cfg) : run_decode<128>(cs, q, c, cfg);
            for (size_t r = 0; r < cs.lengths.size(); ++r) {
                CAPTURE(r);
                const int L = cs.lengths[r];
                const Case one{cs.n_head, cs.n_head_kv, cs.hd, 1, L - 1};
                const std::vector<float> qr(q.begin() + static_cast<std::ptrdiff_t>(r * q_dim), q.begin() + static_cast<std::ptrdiff_t>((r + 1) * q_dim));
                const std::vector<float> got(out.begin() + static_cast<std::ptrdiff_t>(r * q_dim), out.begin() + static_cast<std::ptrdiff_t>((r + 1) * q_dim));
                const double err = rel_l2(got, reference(one, qr, c));
                MESSAGE("rel L2 " << err);
                CHECK(err < 1e-5);
            }
        }
    }
}
