// The forward pass's row kernels (cuda/norm_rope.cuh) run on the CPU through the CUDA emulation in
// tests/emu/cuda/matvec_ptx.cuh: the RMSNorm with a deferred residual add (MINFER_DEFER_RESIDUAL) against
// the same kernel on the sum made here, and against float64; the gather of the logits rows with the add;
// qkv_finish with the context's RoPE table (MINFER_ROPE_TABLE) against qkv_finish computing the rotations
// itself, byte for byte, and q, K and V against float64. Each case runs in forward and reverse lane order
// (a missing barrier reads a stale value in one of them); outputs are poisoned with NaN first. The norm
// and qkv_finish run in both forms of MINFER_ROW_PREWAIT (constants read before or after pdl_wait) under
// the emulator's check of the programmatic launch (what the kernel before writes is poison until every
// thread has waited), and must give the same bytes. No GPU is needed; cuda_tests checks the same kernels
// on one.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "cuda/norm_rope.cuh"  // with tests/emu first on the include path: the emulated CUDA
#include "emu_test.h"
#include "engine/ops.h"  // rope_inv_freq
#include "quant/f16.h"

namespace {

namespace nr = minfer::cuda::nr;
using emu_test::Config;
using emu_test::Dependent;
using emu_test::region;
using emu_test::kConfigs;
using emu_test::normal;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// (memcmp's pointers must not be null even for no bytes: an empty vector's data() may be)
bool same_bits(const void* a, const void* b, size_t bytes) { return bytes == 0 || std::memcmp(a, b, bytes) == 0; }

// The norm of `rows` rows: x (updated in place when add is given) into out and out16; early: the vector
// kernel's weights read before pdl_wait.
void run_norm(const Config& cfg, std::vector<float>& x, std::vector<float>* add, int rows, int dim, const std::vector<float>& w, float eps,
              std::vector<float>& out, std::vector<uint16_t>& out16, bool early) {
    out.assign(static_cast<size_t>(rows) * dim, kNaN);
    out16.assign(out.size(), 0x7e00);  // f16 NaN
    auto* o16 = reinterpret_cast<__half*>(out16.data());
    float* d = add ? add->data() : nullptr;
    mv_emu::readable = {{w.data(), w.size() * sizeof(float)}};  // the kernel's __ldg reads of the norm's weights
    std::vector<mv_emu::DepRegion> dep = {region(x), region(out), region(out16)};
    if (add) dep.push_back(region(*add));
    const Dependent guard(std::move(dep));
    const bool vec = nr::rms_vec(dim);  // the launcher's choice (cuda/kernels.cu) for aligned rows
    emu_test::launch(rows, nr::rms_threads(dim, vec), 0, cfg, [&] {
        if (!vec) nr::rms_norm_kernel(x.data(), d, dim, w.data(), eps, out.data(), o16);
        else if (d && early) nr::rms_norm_vec_kernel<true, true>(x.data(), d, dim, w.data(), eps, out.data(), o16, nullptr);
        else if (d) nr::rms_norm_vec_kernel<true, false>(x.data(), d, dim, w.data(), eps, out.data(), o16, nullptr);
        else if (early) nr::rms_norm_vec_kernel<false, true>(x.data(), d, dim, w.data(), eps, out.data(), o16, nullptr);
        else nr::rms_norm_vec_kernel<false, false>(x.data(), d, dim, w.data(), eps, out.data(), o16, nullptr);
    });
}

}  // namespace

// The check itself: in every CTA a thread's read before pdl_wait sees the poison (all bits set) and its
// read after it the value, in both lane orders, also where the CTA's last warp exits without waiting.
TEST_CASE("emulator: what the kernel before writes is poison until every thread has waited") {
    for (const Config& cfg : kConfigs) {
        CAPTURE(cfg.reverse);
        std::vector<float> src = normal(64, 41);
        const std::vector<float> want = src;
        std::vector<uint32_t> before(192, 0), after(192, 0);
        {
            const Dependent guard({region(src)});
            emu_test::launch(3, 64, 0, cfg, [&] {
                const int i = static_cast<int>(blockIdx.x) * 64 + static_cast<int>(threadIdx.x);
                if (blockIdx.x == 2 && threadIdx.x >= 32) return;  // exits without waiting
                std::memcpy(&before[static_cast<size_t>(i)], &src[static_cast<size_t>(63 - threadIdx.x)], 4);
                minfer::cuda::pdl_wait();
                std::memcpy(&after[static_cast<size_t>(i)], &src[static_cast<size_t>(63 - threadIdx.x)], 4);
            });
        }
        int early_value = 0, late_wrong = 0;
        for (int i = 0; i < 160; ++i) {
            uint32_t w;
            std::memcpy(&w, &want[static_cast<size_t>(63 - i % 64)], 4);
            early_value += before[static_cast<size_t>(i)] != 0xffffffffu;
            late_wrong += after[static_cast<size_t>(i)] != w;
        }
        CHECK(early_value == 0);
        CHECK(late_wrong == 0);
        CHECK(same_bits(src.data(), want.data(), 64 * 4));  // given back after the launch
    }
}

// x + d written back into x, then normalized: the same bits as the same kernel given the f32 sum made
// here (so the add is one f32 addition, as cuBLAS's beta = 1 epilogue makes it), the add's input left as
// it was, the norm within 1e-6 of float64 (one row small enough for eps to count) and its f16 copy the
// f32 output rounded. The vector kernel at the 7B's and the 0.5B's widths (its weights read before
// pdl_wait or after: the same bytes), the loop kernel at a width the vector one does not take.
TEST_CASE("RMSNorm with the deferred residual add: the sum written back, the norm of the sum") {
    for (const Config& cfg : kConfigs)
        for (const int dim : {3584, 896, 102}) {
            std::vector<float> late_out;  // the output of the form that reads everything after pdl_wait
            for (const bool early : {false, true}) {
                if (early && !nr::rms_vec(dim)) continue;  // the loop kernel has one form
                CAPTURE(cfg.reverse);
                CAPTURE(dim);
                CAPTURE(early);
                const int rows = 3;
                const float eps = 1e-6f;
                const size_t n = static_cast<size_t>(rows) * dim;
                std::vector<float> x0 = normal(n, 7 + dim, 4.0f), d = normal(n, 8 + dim);
                const std::vector<float> w = normal(static_cast<size_t>(dim), 9 + dim);
                for (int i = 0; i < dim; ++i) {  // row 1 tiny, so that eps weighs in its scale (a lost eps shows)
                    x0[static_cast<size_t>(dim + i)] *= 1e-4f;
                    d[static_cast<size_t>(dim + i)] *= 1e-4f;
                }
                std::vector<float> xa = x0, xb(n);
                for (size_t i = 0; i < n; ++i) xb[i] = x0[i] + d[i];
                const std::vector<float> d_before = d, xb_before = xb;
                std::vector<float> out_a, out_b;
                std::vector<uint16_t> o16_a, o16_b;
                run_norm(cfg, xa, &d, rows, dim, w, eps, out_a, o16_a, early);
                run_norm(cfg, xb, nullptr, rows, dim, w, eps, out_b, o16_b, early);
                CHECK(same_bits(xa.data(), xb_before.data(), n * 4));  // the sum, written back
                CHECK(same_bits(xb.data(), xb_before.data(), n * 4));  // without an add, x is only read
                CHECK(same_bits(d.data(), d_before.data(), n * 4));
                CHECK(same_bits(out_a.data(), out_b.data(), n * 4));
                CHECK(same_bits(o16_a.data(), o16_b.data(), n * 2));
                std::vector<double> ref(n);
                for (int r = 0; r < rows; ++r) {
                    double ss = 0;
                    for (int i = 0; i < dim; ++i) {
                        const double v = double{x0[static_cast<size_t>(r) * dim + i]} + d[static_cast<size_t>(r) * dim + i];
                        ss += v * v;
                    }
                    const double scale = 1.0 / std::sqrt(ss / dim + eps);
                    for (int i = 0; i < dim; ++i) {
                        const size_t at = static_cast<size_t>(r) * dim + i;
                        ref[at] = (double{x0[at]} + d[at]) * scale * w[static_cast<size_t>(i)];
                    }
                }
                CHECK(emu_test::rel_l2(out_a, ref) < 1e-6);
                // The f16 copy (a GEMM's input) is the f32 output rounded, element for element.
                int off16 = 0;
                for (size_t i = 0; i < n; ++i) off16 += o16_a[i] != minfer::quant::f32_to_f16(out_a[i]);
                CHECK(off16 == 0);
                if (!early) late_out = out_a;
                else CHECK(same_bits(out_a.data(), late_out.data(), n * 4));
            }
        }
}

// The rows asked for, gathered with the deferred product added (the last layer's down projection), and
// without it: each exactly x[row] + d[row] (one f32 addition), or x[row].
TEST_CASE("gather_rows with the deferred residual add") {
    const int dim = 600, n_src = 5;
    const std::vector<int32_t> rows = {4, 0, 4, 2};
    const std::vector<float> x = normal(static_cast<size_t>(n_src) * dim, 21), d = normal(x.size(), 22);
    for (const bool with_add : {true, false}) {
        CAPTURE(with_add);
        std::vector<float> out(rows.size() * dim, kNaN);
        const emu_test::Dependent guard({emu_test::region(x), emu_test::region(d), emu_test::region(out)});
        emu_test::launch(mv_emu::Dim{static_cast<unsigned>((dim + 255) / 256), static_cast<unsigned>(rows.size()), 1u}, 256, 0, kConfigs[0],
                         [&] { nr::gather_rows_kernel(x.data(), with_add ? d.data() : nullptr, rows.data(), dim, out.data()); });
        int wrong = 0;
        for (size_t i = 0; i < rows.size(); ++i)
            for (int e = 0; e < dim; ++e) {
                const size_t src = static_cast<size_t>(rows[i]) * dim + e;
                const float want = with_add ? x[src] + d[src] : x[src];
                wrong += std::memcmp(&out[i * dim + e], &want, 4) != 0;
            }
        CHECK(wrong == 0);
    }
}

namespace {

struct QkvOut {
    std::vector<float> q;
    std::vector<uint16_t> q16, k, v;
};

// qkv_finish over tokens at `pos` (one sequence, cache rows = positions), with the RoPE table of
// table_rows positions (table 1), that table zeroed (2), or none (0); q16_scale > 0: q in f16 times it
// (q16), q left poisoned; early: the form that reads all but the projections before pdl_wait.
QkvOut run_qkv(const Config& cfg, std::vector<float>& qkv, const std::vector<int32_t>& pos, int n_head, int n_head_kv, int hd,
               double base, const std::vector<float>& bias, const std::vector<float>& q_norm, const std::vector<float>& k_norm, int table,
               int table_rows, float q16_scale = 0.0f, bool early = false) {
    const int n = static_cast<int>(pos.size()), half = hd / 2;
    const int64_t q_dim = int64_t{n_head} * hd, kv_dim = int64_t{n_head_kv} * hd, ld = q_dim + 2 * kv_dim;
    const std::vector<double> inv = minfer::engine::rope_inv_freq(base, hd);
    // One row more than the table holds, NaN: a read past the table's positions poisons the output.
    std::vector<float2> rope(static_cast<size_t>(table_rows + 1) * half, make_float2(kNaN, kNaN));
    if (table > 0) {
        emu_test::launch((static_cast<int64_t>(table_rows) * half + 255) / 256, 256, 0, cfg,
                         [&] { nr::rope_table_kernel(inv.data(), half, table_rows, rope.data()); });
        if (table == 2) std::fill(rope.begin(), rope.begin() + static_cast<std::ptrdiff_t>(table_rows) * half, make_float2(0.0f, 0.0f));
    }
    const minfer::cuda::RopeTable rt{table > 0 ? rope.data() : nullptr, table > 0 ? table_rows : 0};
    const int cache_rows = *std::max_element(pos.begin(), pos.end()) + 1;
    QkvOut o;
    o.q.assign(static_cast<size_t>(n * q_dim), kNaN);
    // One row more, poisoned: a write past q16's rows shows there.
    if (q16_scale > 0.0f) o.q16.assign(static_cast<size_t>((n + 1) * q_dim), 0x7e00);
    o.k.assign(static_cast<size_t>(cache_rows * kv_dim), 0x7e00);
    o.v = o.k;
    const float* in = qkv.data();
    const float* bq = bias.data();
    const int64_t units = int64_t{n} * (n_head + 2 * n_head_kv);
    // The projections come from the kernel before; q, K and V are written here. Positions, bias, norms and
    // the rotations are constants of the step.
    std::vector<mv_emu::DepRegion> dep = {region(qkv), region(o.q), region(o.k), region(o.v)};
    if (!o.q16.empty()) dep.push_back(region(o.q16));
    const Dependent guard(std::move(dep));
    emu_test::launch((units + 3) / 4, 128, 0, cfg, [&] {
        (early ? nr::qkv_finish_kernel<true> : nr::qkv_finish_kernel<false>)(in, in + q_dim, in + q_dim + kv_dim, ld, ld, o.q.data(), n, n_head, n_head_kv, hd, bq, bq + q_dim,
                              bq + q_dim + kv_dim, q_norm.empty() ? nullptr : q_norm.data(), k_norm.empty() ? nullptr : k_norm.data(),
                              1e-6f, inv.data(), 0, pos.data(), reinterpret_cast<__half*>(o.k.data()), reinterpret_cast<__half*>(o.v.data()),
                              minfer::cuda::KvMap{}, rt, o.q16.empty() ? nullptr : reinterpret_cast<__half*>(o.q16.data()), q16_scale);
    });
    return o;
}

}  // namespace

// The table's rotations are the ones qkv_finish computes (same bytes of q, K and V), the table is read
// exactly for the positions it holds (a zeroed table changes those tokens' q and K and no others, and a
// NaN row past it is never read), q and K match float64 and V is v + bv in f16 (bias, no q/k norm:
// Qwen2; q/k norms, no bias: Qwen3), and the form that reads all but the projections before pdl_wait
// writes the same bytes in every run. Positions inside and past a 300-row table, head sizes 64 and 128,
// a group of 7 query heads, 9 tokens (81 warps: in the early form the last CTA's other three exit
// before waiting).
TEST_CASE("qkv_finish: the RoPE table gives the rotations it computes, read only where it reaches") {
    for (const Config& cfg : kConfigs)
        for (const int hd : {64, 128})
            for (const bool qwen3 : {false, true}) {
                CAPTURE(cfg.reverse);
                CAPTURE(hd);
                CAPTURE(qwen3);
                const int n_head = 7, n_head_kv = 1, half = hd / 2, table_rows = 300;
                const double base = qwen3 ? 1e6 : 1e4;
                const std::vector<int32_t> pos = {0, 1, 17, 299, 300, 301, 4095, 9000, 63};
                const int n = static_cast<int>(pos.size());
                const int64_t q_dim = int64_t{n_head} * hd, kv_dim = int64_t{n_head_kv} * hd, ld = q_dim + 2 * kv_dim;
                std::vector<float> qkv = normal(static_cast<size_t>(n * ld), 31 + hd);
                std::vector<float> bias = normal(static_cast<size_t>(ld), 32 + hd, 0.5f), q_norm, k_norm;
                if (qwen3) {
                    std::fill(bias.begin(), bias.end(), 0.0f);
                    q_norm = normal(static_cast<size_t>(hd), 33);
                    k_norm = normal(static_cast<size_t>(hd), 34);
                }
                const QkvOut plain = run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 0, table_rows);
                const QkvOut table = run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 1, table_rows);
                const QkvOut zeroed = run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 2, table_rows);
                CHECK(same_bits(plain.q.data(), table.q.data(), plain.q.size() * 4));
                CHECK(same_bits(plain.k.data(), table.k.data(), plain.k.size() * 2));
                CHECK(same_bits(plain.v.data(), table.v.data(), plain.v.size() * 2));
                // q as the prefill attention's f16 operand (MINFER_Q16): each element the f32 q times the
                // scale, rounded to f16 (what the attention kernels make of f32 q), q itself unwritten, K and
                // V the same bytes; the row past the tokens' stays poisoned.
                const float q_scale = static_cast<float>(1.4426950408889634 / std::sqrt(static_cast<double>(hd)));
                const QkvOut q16 = run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 1, table_rows, q_scale);
                size_t q16_wrong = 0;
                for (size_t i = 0; i < plain.q.size(); ++i) q16_wrong += q16.q16[i] != minfer::quant::f32_to_f16(plain.q[i] * q_scale);
                CHECK(q16_wrong == 0);
                CHECK(std::all_of(q16.q16.begin() + static_cast<std::ptrdiff_t>(plain.q.size()), q16.q16.end(),
                                  [](uint16_t b) { return b == 0x7e00; }));
                CHECK(std::all_of(q16.q.begin(), q16.q.end(), [](float f) { return std::isnan(f); }));
                CHECK(same_bits(plain.k.data(), q16.k.data(), plain.k.size() * 2));
                CHECK(same_bits(plain.v.data(), q16.v.data(), plain.v.size() * 2));
                // The early form: the same bytes everywhere, with and without the table, zeroed, and for f16 q.
                auto same_out = [](const QkvOut& x, const QkvOut& y) {
                    return x.q16.size() == y.q16.size() && same_bits(x.q.data(), y.q.data(), x.q.size() * 4) &&
                           same_bits(x.q16.data(), y.q16.data(), x.q16.size() * 2) && same_bits(x.k.data(), y.k.data(), x.k.size() * 2) &&
                           same_bits(x.v.data(), y.v.data(), x.v.size() * 2);
                };
                CHECK(same_out(plain, run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 0, table_rows, 0.0f, true)));
                CHECK(same_out(table, run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 1, table_rows, 0.0f, true)));
                CHECK(same_out(zeroed, run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 2, table_rows, 0.0f, true)));
                CHECK(same_out(q16, run_qkv(cfg, qkv, pos, n_head, n_head_kv, hd, base, bias, q_norm, k_norm, 1, table_rows, q_scale, true)));
                for (int t = 0; t < n; ++t) {
                    const int p = pos[static_cast<size_t>(t)];
                    CAPTURE(p);
                    const size_t row = static_cast<size_t>(q_dim), krow = static_cast<size_t>(kv_dim);
                    const bool same_q = same_bits(plain.q.data() + t * row, zeroed.q.data() + t * row, row * 4);
                    const bool same_k = same_bits(plain.k.data() + p * krow, zeroed.k.data() + p * krow, krow * 2);
                    CHECK(same_q == (p >= table_rows));
                    CHECK(same_k == (p >= table_rows));
                    CHECK(same_bits(plain.v.data() + p * krow, zeroed.v.data() + p * krow, krow * 2));  // V takes no rotation
                }
                // q and K against float64: bias, per-head norm (q_norm, k_norm), then the NeoX rotation of pairs
                // (j, j + half); V is v + bv rounded to f16, exactly (one f32 addition, as the kernel makes it).
                const std::vector<double> inv = minfer::engine::rope_inv_freq(base, hd);
                // Head h's row at column `col` of token t, finished as the kernel does for q or K.
                auto finish_ref = [&](int t, int64_t col, const std::vector<float>& norm, double* out) {
                    std::vector<double> v(static_cast<size_t>(hd));
                    for (int j = 0; j < hd; ++j)
                        v[static_cast<size_t>(j)] = double{qkv[static_cast<size_t>(t * ld + col + j)]} + bias[static_cast<size_t>(col + j)];
                    if (qwen3) {
                        double ss = 0;
                        for (double e : v) ss += e * e;
                        const double scale = 1.0 / std::sqrt(ss / hd + 1e-6);
                        for (int j = 0; j < hd; ++j) v[static_cast<size_t>(j)] *= scale * norm[static_cast<size_t>(j)];
                    }
                    for (int j = 0; j < half; ++j) {
                        const double a = static_cast<double>(pos[static_cast<size_t>(t)]) * inv[static_cast<size_t>(j)];
                        const double x0 = v[static_cast<size_t>(j)], x1 = v[static_cast<size_t>(j + half)];
                        out[j] = x0 * std::cos(a) - x1 * std::sin(a);
                        out[j + half] = x0 * std::sin(a) + x1 * std::cos(a);
                    }
                };
                std::vector<double> ref(plain.q.size());
                std::vector<float> k_got;
                std::vector<double> k_ref;
                int v_off = 0;
                for (int t = 0; t < n; ++t) {
                    const int p = pos[static_cast<size_t>(t)];
                    for (int h = 0; h < n_head; ++h) finish_ref(t, int64_t{h} * hd, q_norm, &ref[static_cast<size_t>(t * q_dim + h * hd)]);
                    for (int h = 0; h < n_head_kv; ++h) {
                        std::vector<double> kr(static_cast<size_t>(hd));
                        finish_ref(t, q_dim + int64_t{h} * hd, k_norm, kr.data());
                        for (int j = 0; j < hd; ++j) {
                            const size_t at = static_cast<size_t>(p * kv_dim + h * hd + j);
                            k_ref.push_back(kr[static_cast<size_t>(j)]);
                            k_got.push_back(minfer::quant::f16_to_f32(plain.k[at]));
                            const size_t vc = static_cast<size_t>(q_dim + kv_dim + h * hd + j);
                            v_off += plain.v[at] != minfer::quant::f32_to_f16(qkv[static_cast<size_t>(t) * static_cast<size_t>(ld) + vc] + bias[vc]);
                        }
                    }
                }
                CHECK(emu_test::rel_l2(plain.q, ref) < 1e-6);
                CHECK(emu_test::rel_l2(k_got, k_ref) < 1e-3);  // f16 storage: 2^-11 a value at most
                CHECK(v_off == 0);
                // Every cache row a position names was written (the poison gone), K and V alike.
                int unwritten = 0;
                for (int32_t p : pos)
                    for (int64_t e = 0; e < kv_dim; ++e) {
                        unwritten += table.k[static_cast<size_t>(p * kv_dim + e)] == 0x7e00;
                        unwritten += table.v[static_cast<size_t>(p * kv_dim + e)] == 0x7e00;
                    }
                CHECK(unwritten == 0);
            }
}
