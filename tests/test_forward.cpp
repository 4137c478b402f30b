// End to end on the CPU: a plain float64 reference forward pass, written here with straight loops and
// sharing no kernel with the engine (weights are read with the dequantizer, which test_quant pins to
// hand-worked values), against the engine's logits through the C API. Tiny Qwen2 and Qwen3 models in
// several types, at prompt lengths 1, 8 and 100 so RoPE and the KV cache are exercised.
#include <doctest/doctest.h>

#include <cmath>
#include <thread>

#include "helpers.h"
#include "model/config.h"
#include "quant/quant.h"

namespace {

using Vec = std::vector<double>;

// A weight as a dense [rows][cols] float64 matrix.
struct Mat {
    int64_t rows = 0, cols = 0;
    Vec v;
    const double* row(int64_t r) const { return v.data() + r * cols; }
};

Mat load(const minfer::gguf::TensorInfo* t) {
    Mat m;
    m.cols = t->ne[0];
    m.rows = t->ne[1];
    const auto type = static_cast<minfer::quant::Type>(t->type);
    const size_t rb = minfer::quant::row_bytes(type, m.cols);
    std::vector<float> f(static_cast<size_t>(m.cols));
    m.v.resize(static_cast<size_t>(m.rows * m.cols));
    for (int64_t r = 0; r < m.rows; ++r) {
        minfer::quant::dequantize_row(type, t->data + static_cast<size_t>(r) * rb, f.data(), m.cols);
        for (int64_t c = 0; c < m.cols; ++c) m.v[static_cast<size_t>(r * m.cols + c)] = f[static_cast<size_t>(c)];
    }
    return m;
}

Vec matvec(const Mat& w, const double* x) {
    Vec y(static_cast<size_t>(w.rows));
    for (int64_t r = 0; r < w.rows; ++r) {
        double s = 0;
        for (int64_t c = 0; c < w.cols; ++c) s += w.row(r)[c] * x[c];
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

// Logits of the last of `tokens`, computed over the whole sequence at once (no KV cache).
Vec reference_logits(const minfer::gguf::File& f, const std::vector<int32_t>& tokens) {
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
            q[t] = matvec(wq, h.data());
            k[t] = matvec(wk, h.data());
            v[t] = matvec(wv, h.data());
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
            const Vec o = matvec(wo, att.data());
            for (int i = 0; i < d; ++i) x[t][i] += o[i];
        }
        const Mat fn = load(L.ffn_norm), wg = load(L.w_gate), wu = load(L.w_up), wd = load(L.w_down);
        for (int t = 0; t < T; ++t) {
            Vec h = x[t];
            rmsnorm(h.data(), d, fn, eps);
            Vec g = matvec(wg, h.data());
            const Vec u = matvec(wu, h.data());
            for (size_t i = 0; i < g.size(); ++i) g[i] = g[i] / (1.0 + std::exp(-g[i])) * u[i];
            const Vec o = matvec(wd, g.data());
            for (int i = 0; i < d; ++i) x[t][i] += o[i];
        }
    }
    Vec last = x[T - 1];
    rmsnorm(last.data(), d, load(plan.output_norm), eps);
    return matvec(load(plan.output), last.data());
}

struct Rel {
    double l2 = 0, max = 0;
};

Rel compare(const std::vector<float>& got, const Vec& want) {
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

minfer_model* open_model(const std::string& path, const char* threads = "2") {
    const char* k[] = {"device", "threads", "ctx_len"};
    const char* v[] = {"cpu", threads, "256"};
    minfer_model* m = nullptr;
    REQUIRE_MESSAGE(minfer_open_with_options(path.c_str(), k, v, 3, &m) == MINFER_OK, minfer_last_error());
    return m;
}

std::vector<float> logits(minfer_context* ctx, int n_vocab) {
    std::vector<float> out(static_cast<size_t>(n_vocab), NAN);  // poisoned
    REQUIRE_MESSAGE(minfer_context_logits(ctx, out.data(), out.size()) == MINFER_OK, minfer_last_error());
    return out;
}

std::vector<int32_t> random_tokens(int n, int vocab, std::mt19937_64& rng) {
    std::vector<int32_t> t(static_cast<size_t>(n));
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab));
    return t;
}

// Bound on the relative L2 error of the logits per weight type. Float weights take f32 activations:
// only f32 rounding remains (measured 2e-7 to 4e-7). Quantized weights take activations quantized to
// q8_0/q8_1/q8_K, whose rounding dominates (measured 0.9% to 1.5% for q8_0, up to 1.8% for the 4- to
// 6-bit types, on the tiny presets over many seeds). A wrong RoPE, head mapping or norm moves the
// logits by 4% to over 100%.
double bound(const std::string& mix) {
    if (mix == "f32" || mix == "f16" || mix == "bf16") return 1e-5;
    if (mix == "q8_0") return 3e-2;
    return 4e-2;
}

}  // namespace

TEST_SUITE("forward") {
    TEST_CASE("engine logits match a float64 reference forward pass") {
        const uint64_t seed = std::random_device{}();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        for (const char* preset : {"qwen2-tiny", "qwen3-tiny"}) {
            for (const char* mix : {"f32", "f16", "bf16", "q8_0", "q4_0", "q4_K", "q5_0", "q6_K", "q4_K_M"}) {
                const std::string label = std::string(preset) + "/" + mix;
                CAPTURE(label);
                const std::string path = test::tmp_path("fwd-" + std::string(preset) + "-" + mix + ".gguf");
                REQUIRE_MESSAGE(minfer_synth(path.c_str(), preset, mix, rng()) == MINFER_OK, minfer_last_error());
                const auto file = minfer::gguf::File::open(path);
                minfer_model* m = open_model(path);
                const int vocab = minfer_model_n_vocab(m);
                for (int len : {1, 8, 100}) {
                    CAPTURE(len);
                    const std::vector<int32_t> toks = random_tokens(len, vocab, rng);
                    minfer_context* ctx = nullptr;
                    REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
                    REQUIRE_MESSAGE(minfer_prefill(ctx, toks.data(), toks.size()) == MINFER_OK, minfer_last_error());
                    CHECK(minfer_context_n_past(ctx) == len);
                    const Rel r = compare(logits(ctx, vocab), reference_logits(*file, toks));
                    MESSAGE(label, " len ", len, ": rel L2 ", r.l2, ", max rel ", r.max);
                    CHECK(r.l2 < bound(mix));
                    minfer_context_free(ctx);
                }
                minfer_close(m);
            }
        }
    }

    TEST_CASE("decode steps match the reference on the extended sequence, and greedy picks the argmax") {
        std::mt19937_64 rng(std::random_device{}());
        const std::string path = test::tmp_path("fwd-decode.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen3-tiny", "q8_0", rng()) == MINFER_OK);
        const auto file = minfer::gguf::File::open(path);
        minfer_model* m = open_model(path);
        const int vocab = minfer_model_n_vocab(m);
        std::vector<int32_t> seq = random_tokens(5, vocab, rng);
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        REQUIRE(minfer_prefill(ctx, seq.data(), seq.size()) == MINFER_OK);
        for (int step = 0; step < 4; ++step) {
            const std::vector<float> before = logits(ctx, vocab);
            int32_t tok = -1;
            REQUIRE_MESSAGE(minfer_decode(ctx, &tok) == MINFER_OK, minfer_last_error());
            CHECK(tok == std::max_element(before.begin(), before.end()) - before.begin());
            seq.push_back(tok);
            CHECK(minfer_context_n_past(ctx) == static_cast<int>(seq.size()));
            CHECK(compare(logits(ctx, vocab), reference_logits(*file, seq)).l2 < bound("q8_0"));
        }
        minfer_context_free(ctx);
        minfer_close(m);
    }

    TEST_CASE("a prefill of N tokens gives the last logits of N single-token steps") {
        std::mt19937_64 rng(std::random_device{}());
        for (const char* mix : {"f32", "q4_K_M"}) {
            const std::string path = test::tmp_path(std::string("fwd-steps-") + mix + ".gguf");
            REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", mix, rng()) == MINFER_OK);
            minfer_model* m = open_model(path, "3");
            const int vocab = minfer_model_n_vocab(m);
            const std::vector<int32_t> toks = random_tokens(37, vocab, rng);
            minfer_context *a = nullptr, *b = nullptr;
            REQUIRE(minfer_context_create(m, &a) == MINFER_OK);
            REQUIRE(minfer_context_create(m, &b) == MINFER_OK);
            REQUIRE(minfer_prefill(a, toks.data(), toks.size()) == MINFER_OK);
            for (int32_t t : toks) REQUIRE(minfer_prefill(b, &t, 1) == MINFER_OK);
            const std::vector<float> la = logits(a, vocab), lb = logits(b, vocab);
            Vec ref(lb.begin(), lb.end());
            CHECK(compare(la, ref).l2 < 1e-5);
            minfer_context_free(a);
            minfer_context_free(b);
            minfer_close(m);
        }
    }

    TEST_CASE("thread counts give the same logits within rounding") {
        const std::string path = test::tmp_path("fwd-threads.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen3-tiny", "q4_K", 9) == MINFER_OK);
        std::mt19937_64 rng(std::random_device{}());
        minfer_model* m = open_model(path, "1");
        const int vocab = minfer_model_n_vocab(m);
        const std::vector<int32_t> toks = random_tokens(20, vocab, rng);
        std::vector<std::vector<float>> out;
        for (const char* threads : {"1", "2", "5"}) {
            REQUIRE(minfer_set_option(m, "threads", threads) == MINFER_OK);
            minfer_context* ctx = nullptr;
            REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
            REQUIRE(minfer_prefill(ctx, toks.data(), toks.size()) == MINFER_OK);
            out.push_back(logits(ctx, vocab));
            minfer_context_free(ctx);
        }
        for (size_t i = 1; i < out.size(); ++i) CHECK(compare(out[i], Vec(out[0].begin(), out[0].end())).l2 < 1e-6);
        minfer_close(m);
    }

    TEST_CASE("context state: full, truncate, reset, bad ids leave it unchanged") {
        const std::string path = test::tmp_path("fwd-state.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", 3) == MINFER_OK);
        minfer_model* m = open_model(path);
        REQUIRE(minfer_set_option(m, "ctx_len", "10") == MINFER_OK);
        const int vocab = minfer_model_n_vocab(m);
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        std::vector<float> out(static_cast<size_t>(vocab));
        CHECK(minfer_context_logits(ctx, out.data(), out.size()) == MINFER_ERR_INVALID_ARGUMENT);
        const int32_t toks[] = {1, 2, 3, 4, 5, 6, 7, 8};
        REQUIRE(minfer_prefill(ctx, toks, 8) == MINFER_OK);
        const std::vector<float> after8 = logits(ctx, vocab);
        // Errors change nothing: logits and position stay.
        const int32_t bad[] = {1, 99999};
        CHECK(minfer_prefill(ctx, bad, 2) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_prefill(ctx, toks, 3) == MINFER_ERR_CONTEXT_FULL);
        CHECK(minfer_context_n_past(ctx) == 8);
        CHECK(logits(ctx, vocab) == after8);
        CHECK(minfer_context_logits(ctx, out.data(), out.size() - 1) == MINFER_ERR_BUFFER_TOO_SMALL);
        int32_t tok = 0;
        REQUIRE(minfer_decode(ctx, &tok) == MINFER_OK);
        REQUIRE(minfer_decode(ctx, &tok) == MINFER_OK);
        CHECK(minfer_context_n_past(ctx) == 10);
        const std::vector<float> full = logits(ctx, vocab);
        CHECK(minfer_decode(ctx, &tok) == MINFER_ERR_CONTEXT_FULL);
        CHECK(minfer_context_n_past(ctx) == 10);
        CHECK(logits(ctx, vocab) == full);
        // Truncate back to 8 and replay 5..8: the same logits as the first time.
        CHECK(minfer_context_truncate(ctx, 11) == MINFER_ERR_INVALID_ARGUMENT);
        REQUIRE(minfer_context_truncate(ctx, 4) == MINFER_OK);
        CHECK(minfer_context_n_past(ctx) == 4);
        CHECK(minfer_context_logits(ctx, out.data(), out.size()) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_decode(ctx, &tok) == MINFER_ERR_INVALID_ARGUMENT);
        REQUIRE(minfer_prefill(ctx, toks + 4, 4) == MINFER_OK);
        CHECK(compare(logits(ctx, vocab), Vec(after8.begin(), after8.end())).l2 < 1e-6);
        REQUIRE(minfer_context_reset(ctx) == MINFER_OK);
        CHECK(minfer_context_n_past(ctx) == 0);
        REQUIRE(minfer_prefill(ctx, toks, 8) == MINFER_OK);
        CHECK(compare(logits(ctx, vocab), Vec(after8.begin(), after8.end())).l2 < 1e-6);
        minfer_context_free(ctx);
        minfer_close(m);
    }

    TEST_CASE("a concurrent call on a busy context returns MINFER_ERR_BUSY and changes nothing") {
        const std::string path = test::tmp_path("fwd-busy.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "f16", 4) == MINFER_OK);
        const char* k[] = {"device", "log_level"};
        const char* v[] = {"cpu", "debug"};
        minfer_model* m = nullptr;
        REQUIRE(minfer_open_with_options(path.c_str(), k, v, 2, &m) == MINFER_OK);
        static minfer_context* ctx = nullptr;
        static std::vector<minfer_status> seen;
        seen.clear();
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        // The debug log line of prefill is emitted while the context is held: call into it from there,
        // from this thread and from another one.
        minfer_set_log_callback(
            [](minfer_log_level, const char* msg, void*) {
                if (std::string(msg).rfind("prefill", 0) != 0) return;
                const int32_t t[] = {1};
                seen.push_back(minfer_prefill(ctx, t, 1));
                std::thread other([] {
                    int32_t tok;
                    seen.push_back(minfer_decode(ctx, &tok));
                });
                other.join();
            },
            nullptr);
        const int32_t toks[] = {5, 6, 7};
        REQUIRE(minfer_prefill(ctx, toks, 3) == MINFER_OK);
        minfer_set_log_callback(nullptr, nullptr);
        REQUIRE(seen.size() == 2);
        CHECK(seen[0] == MINFER_ERR_BUSY);
        CHECK(seen[1] == MINFER_ERR_BUSY);
        CHECK(minfer_context_n_past(ctx) == 3);
        minfer_context_free(ctx);
        minfer_close(m);
    }
}
