#include "reference.h"

#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>

#include "model/config.h"
#include "quant/quant.h"

namespace test::ref {
namespace {

namespace quant = minfer::quant;

// A weight as a dense [rows][cols] float64 matrix, with the type it is stored in.
struct Mat {
    int64_t rows = 0, cols = 0;
    quant::Type type = quant::Type::F32;
    Vec v;
    const double* row(int64_t r) const { return v.data() + r * cols; }
};

Mat load(const minfer::gguf::TensorInfo* t) {
    Mat m;
    m.cols = t->ne[0];
    m.rows = t->ne[1];
    m.type = static_cast<quant::Type>(t->type);
    const size_t rb = quant::row_bytes(m.type, m.cols);
    std::vector<float> f(static_cast<size_t>(m.cols));
    m.v.resize(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
        quant::dequantize_row(m.type, t->data + static_cast<size_t>(r) * rb, f.data(), m.cols);
        for (int64_t c = 0; c < m.cols; ++c) m.v[static_cast<size_t>(r * m.cols + c)] = f[static_cast<size_t>(c)];
    }
    return m;
}

// y = W x. With Activations::cpu_int8 and a quantized W, x is first rounded to float and then to the
// 8-bit blocks the CPU backend's dot product consumes; the product itself is exact.
Vec matvec(const Mat& w, const double* x, Activations acts) {
    Vec xr(x, x + w.cols);
    const quant::Type at = quant::vec_dot_type(w.type);
    if (acts == Activations::cpu_int8 && at != quant::Type::F32) {
        std::vector<float> xf(xr.begin(), xr.end()), back(xf.size());
        std::vector<uint8_t> blocks(quant::row_bytes(at, w.cols));
        quant::prepare_activation(w.type, xf.data(), blocks.data(), w.cols);
        quant::dequantize_row(at, blocks.data(), back.data(), w.cols);
        xr.assign(back.begin(), back.end());
    }
    Vec y(static_cast<size_t>(w.rows));
    for (int64_t r = 0; r < w.rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < w.cols; ++c) s += w.row(r)[c] * xr[static_cast<size_t>(c)];
        y[static_cast<size_t>(r)] = s;
    }
    return y;
}

void rmsnorm(double* x, int64_t n, const Mat& w, double eps) {
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += x[i] * x[i];
    const double s = 1.0 / std::sqrt(ss / static_cast<double>(n) + eps);
    for (int64_t i = 0; i < n; ++i) x[i] = x[i] * s * w.v[static_cast<size_t>(i)];
}

// NeoX rotary embedding of one head at position p.
void rope(double* x, int hd, int p, double base) {
    for (int i = 0; i < hd / 2; ++i) {
        const double theta = p * std::pow(base, -2.0 * i / hd);
        const double a = x[i], b = x[i + hd / 2];
        x[i] = a * std::cos(theta) - b * std::sin(theta);
        x[i + hd / 2] = a * std::sin(theta) + b * std::cos(theta);
    }
}

}  // namespace

Vec logits(const minfer::gguf::File& f, const std::vector<int32_t>& tokens, Activations acts) {
    const auto c = minfer::model::read_config(f);
    const auto plan = minfer::model::plan_tensors(f, c);
    const int T = static_cast<int>(tokens.size()), d = c.n_embd, hd = c.head_dim, nh = c.n_head, nkv = c.n_head_kv;
    const double eps = c.rms_norm_eps;
    const Mat emb = load(plan.tok_embd);
    std::vector<Vec> x(static_cast<size_t>(T));
    for (int t = 0; t < T; ++t) x[t] = Vec(emb.row(tokens[t]), emb.row(tokens[t]) + d);

    for (const auto& L : plan.layers) {
        const Mat an = load(L.attn_norm), wq = load(L.wq), wk = load(L.wk), wv = load(L.wv), wo = load(L.wo);
        std::vector<Vec> q(T), k(T), v(T);
        for (int t = 0; t < T; ++t) {
            Vec h = x[t];
            rmsnorm(h.data(), d, an, eps);
            q[t] = matvec(wq, h.data(), acts);
            k[t] = matvec(wk, h.data(), acts);
            v[t] = matvec(wv, h.data(), acts);
            if (c.qkv_bias) {
                const Mat bq = load(L.bq), bk = load(L.bk), bv = load(L.bv);
                for (size_t i = 0; i < q[t].size(); ++i) q[t][i] += bq.v[i];
                for (size_t i = 0; i < k[t].size(); ++i) k[t][i] += bk.v[i];
                for (size_t i = 0; i < v[t].size(); ++i) v[t][i] += bv.v[i];
            }
            for (int h2 = 0; h2 < nh; ++h2) {
                if (c.qk_norm) rmsnorm(q[t].data() + h2 * hd, hd, load(L.q_norm), eps);
                rope(q[t].data() + h2 * hd, hd, t, c.rope_freq_base);
            }
            for (int h2 = 0; h2 < nkv; ++h2) {
                if (c.qk_norm) rmsnorm(k[t].data() + h2 * hd, hd, load(L.k_norm), eps);
                rope(k[t].data() + h2 * hd, hd, t, c.rope_freq_base);
            }
        }
        for (int t = 0; t < T; ++t) {
            Vec att(static_cast<size_t>(nh * hd), 0.0);
            for (int h2 = 0; h2 < nh; ++h2) {
                const int g = h2 / (nh / nkv);
                Vec s(static_cast<size_t>(t + 1));
                double mx = -1e300;
                for (int j = 0; j <= t; ++j) {
                    double dot = 0;
                    for (int i = 0; i < hd; ++i) dot += q[t][h2 * hd + i] * k[j][g * hd + i];
                    s[j] = dot / std::sqrt(static_cast<double>(hd));
                    mx = std::max(mx, s[j]);
                }
                double sum = 0;
                for (int j = 0; j <= t; ++j) sum += (s[j] = std::exp(s[j] - mx));
                for (int j = 0; j <= t; ++j)
                    for (int i = 0; i < hd; ++i) att[h2 * hd + i] += s[j] / sum * v[j][g * hd + i];
            }
            const Vec o = matvec(wo, att.data(), acts);
            for (int i = 0; i < d; ++i) x[t][i] += o[i];
        }
        const Mat fn = load(L.ffn_norm), wg = load(L.w_gate), wu = load(L.w_up), wd = load(L.w_down);
        for (int t = 0; t < T; ++t) {
            Vec h = x[t];
            rmsnorm(h.data(), d, fn, eps);
            Vec g = matvec(wg, h.data(), acts);
            const Vec u = matvec(wu, h.data(), acts);
            for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const Vec o = matvec(wd, g.data(), acts);
            for (int i = 0; i < d; ++i) x[t][i] += o[i];
        }
    }
    Vec last = x[T - 1];
    rmsnorm(last.data(), d, load(plan.output_norm), eps);
    return matvec(load(plan.output), last.data(), acts);
}

Rel compare(const std::vector<float>& got, const Vec& want) {
    REQUIRE(got.size() == want.size());
    double num = 0, den = 0, mx = 0, wmax = 0;
    for (size_t i = 0; i < want.size(); ++i) {
        REQUIRE(std::isfinite(got[i]));
        const double e = got[i] - want[i];
        num += e * e;
        den += want[i] * want[i];
        mx = std::max(mx, std::fabs(e));
        wmax = std::max(wmax, std::fabs(want[i]));
    }
    return Rel{std::sqrt(num / den), mx / wmax};
}

std::vector<int32_t> random_tokens(int n, int vocab, std::mt19937_64& rng) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    return t;
}

}  // namespace test::ref
