// The sampler chain: defaults, greedy ties, penalties (hand-computed values and window edges), logit
// bias, top-k / top-p / min-p truncation and their order, seeded determinism, the drawn distribution
// against softmax at two temperatures, validation that changes nothing, and NaN / infinity handling.
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"
#include "sampling/sampler.h"

using minfer::sampling::default_params;
using minfer::sampling::Sampler;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Plain sampling: no truncation, no penalties.
minfer_sampler_params plain(float temperature, uint64_t seed = 42) {
    minfer_sampler_params p = default_params();
    p.temperature = temperature;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.seed = seed;
    return p;
}

bool same_params(const minfer_sampler_params& a, const minfer_sampler_params& b) {
    auto bits = [](float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; };
    return a.size == b.size && bits(a.temperature) == bits(b.temperature) && a.top_k == b.top_k &&
           bits(a.top_p) == bits(b.top_p) && bits(a.min_p) == bits(b.min_p) &&
           bits(a.repeat_penalty) == bits(b.repeat_penalty) && bits(a.presence_penalty) == bits(b.presence_penalty) &&
           bits(a.frequency_penalty) == bits(b.frequency_penalty) && a.penalty_last_n == b.penalty_last_n &&
           a.seed == b.seed;
}

// configure() that must fail: returns the message, checks the status.
std::string config_error(Sampler& s, const minfer_sampler_params& p) {
    try {
        s.configure(p);
    } catch (const minfer::Error& e) {
        CHECK(e.status() == MINFER_ERR_INVALID_ARGUMENT);
        return e.what();
    }
    return "(no error)";
}

std::vector<int32_t> draws(Sampler& s, const std::vector<float>& logits, int n, const std::vector<int32_t>& history = {}) {
    std::vector<int32_t> out;
    out.reserve(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i) out.push_back(s.sample(logits, history));
    return out;
}

std::vector<long> counts(Sampler& s, const std::vector<float>& logits, int n) {
    std::vector<long> c(logits.size(), 0);
    for (int i = 0; i < n; ++i) {
        const int32_t t = s.sample(logits, {});
        REQUIRE(t >= 0);
        REQUIRE(static_cast<size_t>(t) < logits.size());
        ++c[static_cast<size_t>(t)];
    }
    return c;
}

// Softmax of logits / temperature over the tokens in `keep` (all when empty); 0 elsewhere.
std::vector<double> softmax(const std::vector<float>& logits, double temperature, std::vector<int> keep = {}) {
    if (keep.empty()) {
        keep.resize(logits.size());
        std::iota(keep.begin(), keep.end(), 0);
    }
    std::vector<double> p(logits.size(), 0.0);
    double z = 0.0;
    for (int i : keep) z += p[static_cast<size_t>(i)] = std::exp(logits[static_cast<size_t>(i)] / temperature);
    for (double& v : p) v /= z;
    return p;
}

// Observed counts against expected probabilities: every zero-probability token must have count 0; the
// rest must pass a chi-square test (bound beyond the 1e-5 quantile for every number of degrees of
// freedom used here, so a fixed seed cannot be unlucky, yet a wrong distribution of these sizes exceeds
// it many times over) and a per-token z test at 5 standard errors.
void check_distribution(const std::vector<long>& c, const std::vector<double>& p, long n) {
    REQUIRE(c.size() == p.size());
    double chi2 = 0.0;
    int dof = -1;
    for (size_t i = 0; i < c.size(); ++i) {
        if (p[i] == 0.0) {
            CHECK_MESSAGE(c[i] == 0, "token ", i, " should never be drawn");
            continue;
        }
        const double e = p[i] * static_cast<double>(n);
        const double d = static_cast<double>(c[i]) - e;
        chi2 += d * d / e;
        ++dof;
        const double se = std::sqrt(static_cast<double>(n) * p[i] * (1.0 - p[i]));
        CHECK_MESSAGE(std::fabs(d) <= 5.0 * se + 1e-9, "token ", i, ": ", c[i], " drawn, expected ", e);
    }
    REQUIRE(dof >= 1);
    const double bound = dof + 8.0 * std::sqrt(2.0 * dof) + 8.0;
    CHECK_MESSAGE(chi2 < bound, "chi2 ", chi2, " with ", dof, " degrees of freedom");
}

// Greedy probe of the value a token's logit has after penalties and bias: bans every other token, adds
// a reference token (the highest id) with logit r, and asks greedy which wins. The token wins iff its
// value >= r (equal values go to the lower id), so checking r = v and r = nextafter(v, +inf) proves the
// value is exactly v.
bool has_value(const minfer_sampler_params& params, const std::vector<float>& logits,
               const std::vector<int32_t>& history, int32_t token, float v) {
    auto wins = [&](float r) {
        Sampler s;
        minfer_sampler_params p = params;
        p.temperature = 0.0f;
        s.configure(p);
        std::vector<float> ext = logits;
        ext.push_back(r);
        for (size_t i = 0; i < logits.size(); ++i)
            if (static_cast<int32_t>(i) != token) s.set_bias(static_cast<int32_t>(i), -kInf);
        return s.sample(ext, history) == token;
    };
    return wins(v) && !wins(std::nextafter(v, kInf));
}

}  // namespace

TEST_SUITE("sampling") {
    TEST_CASE("documented defaults; a new sampler is greedy with them otherwise") {
        const minfer_sampler_params d = default_params();
        CHECK(d.size == sizeof(minfer_sampler_params));
        CHECK(d.temperature == 0.8f);
        CHECK(d.top_k == 40);
        CHECK(d.top_p == 0.95f);
        CHECK(d.min_p == 0.05f);
        CHECK(d.repeat_penalty == 1.0f);
        CHECK(d.presence_penalty == 0.0f);
        CHECK(d.frequency_penalty == 0.0f);
        CHECK(d.penalty_last_n == 64);
        CHECK(d.seed == 42);

        Sampler s;
        minfer_sampler_params expect = d;
        expect.temperature = 0.0f;
        CHECK(same_params(s.params(), expect));
        // Greedy: the argmax every time.
        const std::vector<float> logits = {0.1f, 0.3f, 2.0f, 1.9f, -1.0f};
        for (int i = 0; i < 50; ++i) CHECK(s.sample(logits, {}) == 2);
    }

    TEST_CASE("greedy is the argmax, lowest id among equal logits, for any temperature <= 0") {
        Sampler s;
        for (float t : {0.0f, -0.0f, -1.0f, -1e30f}) {
            s.configure(plain(t));
            CHECK(s.sample(std::vector<float>{1.0f, 3.0f, 3.0f, 2.0f}, {}) == 1);
            CHECK(s.sample(std::vector<float>{5.0f, 5.0f, 5.0f}, {}) == 0);
            CHECK(s.sample(std::vector<float>{-3.0f, -2.0f, -7.0f, -2.0f}, {}) == 1);
            CHECK(s.sample(std::vector<float>{0.0f, 0.0f, 1e-30f}, {}) == 2);
            CHECK(s.sample(std::vector<float>{42.0f}, {}) == 0);
        }
        // Greedy ignores top-k / top-p / min-p entirely.
        minfer_sampler_params p = default_params();
        p.temperature = 0.0f;
        p.top_k = 1;
        p.top_p = 0.0f;
        p.min_p = 1.0f;
        s.configure(p);
        CHECK(s.sample(std::vector<float>{1.0f, 4.0f, 4.0f}, {}) == 1);
    }

    TEST_CASE("penalties change exactly the tokens of the window, by hand-computed amounts") {
        // Exactly representable values so every expected result is exact in float.
        const std::vector<float> logits = {2.0f, -1.0f, 0.5f, 3.0f, 1.0f, 0.0f};
        const std::vector<float> orig = logits;
        const std::vector<int32_t> history = {3, 0, 1, 0, 2, 0, 5};  // oldest first
        minfer_sampler_params p = plain(0.0f);
        p.repeat_penalty = 2.0f;
        p.presence_penalty = 0.25f;
        p.frequency_penalty = 0.125f;

        SUBCASE("window of 5: tokens 1, 0 (x2), 2, 5; token 3 just outside") {
            p.penalty_last_n = 5;  // window = {1, 0, 2, 0, 5}
            CHECK(has_value(p, logits, history, 0, 2.0f / 2 - 0.25f - 2 * 0.125f));   // 0.5
            CHECK(has_value(p, logits, history, 1, -1.0f * 2 - 0.25f - 0.125f));      // -2.375
            CHECK(has_value(p, logits, history, 2, 0.5f / 2 - 0.25f - 0.125f));       // -0.125
            CHECK(has_value(p, logits, history, 3, 3.0f));                            // outside
            CHECK(has_value(p, logits, history, 4, 1.0f));                            // never seen
            CHECK(has_value(p, logits, history, 5, 0.0f - 0.25f - 0.125f));           // 0 * 2 = 0
        }
        SUBCASE("window of 6 adds a third 0; 7 and more take in token 3") {
            p.penalty_last_n = 6;
            CHECK(has_value(p, logits, history, 0, 1.0f - 0.25f - 3 * 0.125f));
            CHECK(has_value(p, logits, history, 3, 3.0f));
            for (int32_t n : {7, 8, 1000, -1}) {
                CAPTURE(n);
                p.penalty_last_n = n;
                CHECK(has_value(p, logits, history, 0, 1.0f - 0.25f - 3 * 0.125f));
                CHECK(has_value(p, logits, history, 3, 3.0f / 2 - 0.25f - 0.125f));
                CHECK(has_value(p, logits, history, 4, 1.0f));
            }
        }
        SUBCASE("window of 1: only the newest token") {
            p.penalty_last_n = 1;
            CHECK(has_value(p, logits, history, 5, -0.375f));
            CHECK(has_value(p, logits, history, 0, 2.0f));
            CHECK(has_value(p, logits, history, 2, 0.5f));
        }
        SUBCASE("penalty_last_n 0 and empty history change nothing") {
            p.penalty_last_n = 0;
            for (int32_t t = 0; t < 6; ++t) CHECK(has_value(p, logits, history, t, logits[static_cast<size_t>(t)]));
            p.penalty_last_n = -1;
            for (int32_t t = 0; t < 6; ++t) CHECK(has_value(p, logits, {}, t, logits[static_cast<size_t>(t)]));
        }
        SUBCASE("each penalty alone") {
            p.penalty_last_n = -1;
            minfer_sampler_params q = p;
            q.presence_penalty = q.frequency_penalty = 0.0f;
            CHECK(has_value(q, logits, history, 0, 1.0f));
            CHECK(has_value(q, logits, history, 1, -2.0f));
            q = p;
            q.repeat_penalty = 1.0f;
            q.frequency_penalty = 0.0f;
            CHECK(has_value(q, logits, history, 0, 1.75f));
            CHECK(has_value(q, logits, history, 4, 1.0f));
            q = p;
            q.repeat_penalty = 1.0f;
            q.presence_penalty = 0.0f;
            CHECK(has_value(q, logits, history, 0, 2.0f - 0.375f));
            CHECK(has_value(q, logits, history, 1, -1.125f));
            // Negative presence / frequency reward instead.
            q.frequency_penalty = -0.5f;
            CHECK(has_value(q, logits, history, 0, 3.5f));
            // repeat_penalty < 1 raises positive logits and lowers negative ones' magnitude.
            q = p;
            q.repeat_penalty = 0.5f;
            q.presence_penalty = q.frequency_penalty = 0.0f;
            CHECK(has_value(q, logits, history, 0, 4.0f));
            CHECK(has_value(q, logits, history, 1, -0.5f));
        }
        SUBCASE("history tokens outside the vocabulary are ignored") {
            p.penalty_last_n = -1;
            const std::vector<int32_t> odd = {-7, 1000, 4, std::numeric_limits<int32_t>::min()};
            CHECK(has_value(p, logits, odd, 4, 1.0f / 2 - 0.25f - 0.125f));
            CHECK(has_value(p, logits, odd, 0, 2.0f));
            // 6 = n_vocab (the probe's reference token would make it valid, so sample directly).
            Sampler s;
            s.configure(p);
            CHECK(s.sample(logits, std::vector<int32_t>{6, 3, 7, -1}) == 0);  // 3 -> 1.125
        }
        SUBCASE("penalties flip a greedy choice; the caller's logits are untouched") {
            p.penalty_last_n = 1;
            Sampler s;
            s.configure(p);
            CHECK(s.sample(logits, std::vector<int32_t>{2}) == 3);
            CHECK(s.sample(logits, std::vector<int32_t>{3}) == 0);  // 3 -> 1.125 < 2
            CHECK(logits == orig);
        }
    }

    TEST_CASE("logit bias: added after penalties, replaced by a second call, -INFINITY bans") {
        const std::vector<float> logits = {2.0f, 1.0f, 0.5f};
        minfer_sampler_params p = plain(0.0f);
        Sampler s;
        s.configure(p);
        CHECK(s.sample(logits, {}) == 0);
        s.set_bias(2, 1.5f);  // 2.0, tie with token 0: lower id wins
        CHECK(s.sample(logits, {}) == 0);
        s.set_bias(2, 1.75f);
        CHECK(s.sample(logits, {}) == 2);
        s.set_bias(2, 0.25f);  // replaces, does not accumulate
        CHECK(s.sample(logits, {}) == 0);
        s.set_bias(0, -kInf);
        CHECK(s.sample(logits, {}) == 1);
        s.set_bias(1, -kInf);
        CHECK(s.sample(logits, {}) == 2);
        s.set_bias(99, 100.0f);  // beyond this vocabulary: ignored
        CHECK(s.sample(logits, {}) == 2);
        s.clear_bias();
        CHECK(s.sample(logits, {}) == 0);

        // Order: penalty first, then bias. Token 0 (2.0), repeat penalty 2 -> 1.0, bias +0.75 -> 1.75;
        // bias first would give (2.0 + 0.75) / 2 = 1.375. Token 1 sits at 1.5 in between.
        p.repeat_penalty = 2.0f;
        p.penalty_last_n = -1;
        s.configure(p);
        s.set_bias(0, 0.75f);
        CHECK(s.sample(std::vector<float>{2.0f, 1.5f}, std::vector<int32_t>{0}) == 0);
        CHECK(has_value(p, {2.0f, 1.5f}, {0}, 0, 1.0f));

        // The bias bans in sampling mode too.
        s.clear_bias();
        s.configure(plain(1.0f));
        s.set_bias(1, -kInf);
        s.set_bias(3, -kInf);
        const std::vector<long> c = counts(s, {0.0f, 0.0f, 0.0f, 0.0f}, 20000);
        CHECK(c[1] == 0);
        CHECK(c[3] == 0);
        CHECK(c[0] > 9000);
        CHECK(c[2] > 9000);

        // Invalid bias: error, nothing changes.
        s.configure(plain(0.0f));
        s.clear_bias();
        s.set_bias(1, 5.0f);
        CHECK_THROWS_AS(s.set_bias(-1, 1.0f), minfer::Error);
        CHECK_THROWS_AS(s.set_bias(0, kNaN), minfer::Error);
        CHECK_THROWS_AS(s.set_bias(0, kInf), minfer::Error);
        CHECK(s.sample(logits, {}) == 1);
        s.set_bias(1, 0.0f);  // bias 0 = no bias
        CHECK(s.sample(logits, {}) == 0);
    }

    TEST_CASE("top_k = 1 is greedy at any temperature") {
        uint64_t state = 12345;
        auto rnd = [&] {  // small LCG, test-local
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            return static_cast<float>((state >> 40) % 16) * 0.25f - 2.0f;  // few distinct values: ties
        };
        Sampler g, s;
        for (float t : {0.05f, 1.0f, 100.0f, 1e30f}) {
            minfer_sampler_params p = plain(t, 7);
            p.top_k = 1;
            s.configure(p);
            for (int trial = 0; trial < 300; ++trial) {
                std::vector<float> logits(37);
                for (float& v : logits) v = rnd();
                CHECK(s.sample(logits, {}) == g.sample(logits, {}));
            }
        }
    }

    TEST_CASE("top_p 0 or tiny keeps only the first candidate: greedy") {
        const std::vector<float> logits = {0.0f, 3.0f, 1.0f, 3.0f, 2.9f};
        for (float tp : {0.0f, 1e-6f, 0.3f}) {
            CAPTURE(tp);
            Sampler s;
            minfer_sampler_params p = plain(1.0f);
            p.top_p = tp;
            s.configure(p);
            for (int32_t t : draws(s, logits, 2000)) CHECK(t == 1);
        }
    }

    TEST_CASE("min_p keeps p >= min_p * p_max, at temperature 1, whatever the temperature") {
        // Probability ratios to the best: 1, 0.5, 0.3, 0.2, 0.1.
        const std::vector<float> logits = {0.0f, std::log(0.5f), std::log(0.3f), std::log(0.2f), std::log(0.1f)};
        Sampler s;
        minfer_sampler_params p = plain(1.0f, 3);
        p.min_p = 0.25f;  // keeps 0, 1, 2
        s.configure(p);
        const long n = 60000;
        check_distribution(counts(s, logits, n), softmax(logits, 1.0, {0, 1, 2}), n);

        p.min_p = 0.15f;  // keeps 0..3
        p.temperature = 0.5f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 0.5, {0, 1, 2, 3}), n);

        // At temperature 3 the ratios flatten (token 4 would reach 0.46), but min-p still uses the
        // temperature-1 ratios.
        p.min_p = 0.4f;  // keeps 0, 1
        p.temperature = 3.0f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 3.0, {0, 1}), n);

        // min_p 1 keeps only tokens equal to the best; <= 0 is off.
        p.min_p = 1.0f;
        p.temperature = 1.0f;
        s.configure(p);
        const std::vector<long> c = counts(s, {1.0f, 2.0f, 2.0f, 0.0f}, 4000);
        CHECK(c[0] == 0);
        CHECK(c[3] == 0);
        CHECK(c[1] > 1700);
        CHECK(c[2] > 1700);
        p.min_p = -1.0f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 1.0), n);
    }

    TEST_CASE("the draw matches softmax at temperature 1 and at 0.5") {
        const std::vector<float> logits = {1.0f, 0.5f, 0.0f, -0.5f, -2.0f};
        const long n = 200000;
        Sampler s;
        s.configure(plain(1.0f, 2024));
        check_distribution(counts(s, logits, n), softmax(logits, 1.0), n);
        s.configure(plain(0.5f, 2025));
        check_distribution(counts(s, logits, n), softmax(logits, 0.5), n);
        s.configure(plain(2.0f, 2026));
        check_distribution(counts(s, logits, n), softmax(logits, 2.0), n);
        // 200 distinct probabilities: the draw's selection over more than a handful of candidates.
        std::vector<float> many(200);
        for (size_t i = 0; i < many.size(); ++i) many[(i * 37) % 200] = -3.0f + 0.02f * static_cast<float>(i);
        s.configure(plain(1.0f, 2028));
        check_distribution(counts(s, many, n), softmax(many, 1.0), n);
        // Shifting every logit changes nothing (up to rounding): large values stay finite in the math.
        std::vector<float> shifted = logits;
        for (float& v : shifted) v += 80.0f;
        s.configure(plain(1.0f, 2027));
        check_distribution(counts(s, shifted, n), softmax(logits, 1.0), n);
    }

    TEST_CASE("top-k and top-p truncation: excluded tokens are never drawn; the rest renormalized") {
        const std::vector<float> logits = {-0.5f, 1.0f, -2.0f, 0.5f, 0.0f};  // order: 1, 3, 4, 0, 2
        const long n = 100000;
        Sampler s;

        minfer_sampler_params p = plain(1.0f, 11);
        p.top_k = 3;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 1.0, {1, 3, 4}), n);

        // A few candidates out of many (weights computed per candidate) at temperatures 0.5 and 3.
        std::vector<float> wide(24);
        for (size_t i = 0; i < wide.size(); ++i) wide[i] = -0.25f * static_cast<float>((i * 7) % 24);  // 0 .. -5.75
        for (float t : {0.5f, 3.0f}) {
            CAPTURE(t);
            p = plain(t, 13);
            p.top_k = 4;  // ids 0, 7, 14, 21 (logits 0, -0.25, -0.5, -0.75)
            s.configure(p);
            check_distribution(counts(s, wide, n), softmax(wide, t, {0, 7, 14, 21}), n);
        }

        // Temperature-1 probabilities in candidate order: 0.4450, 0.2699, 0.1637, 0.0993, 0.0222;
        // cumulative 0.4450, 0.7149, 0.8786, 0.9778, 1. top_p 0.6 keeps {1, 3}. At temperature 2 the
        // first two hold only 0.5774, yet top-p still keeps exactly these two: it is computed at
        // temperature 1.
        p = plain(2.0f, 12);
        p.top_p = 0.6f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 2.0, {1, 3}), n);

        // top_p 0.9 keeps {1, 3, 4, 0}; 0.75 keeps {1, 3, 4}.
        p.top_p = 0.9f;
        p.temperature = 1.0f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 1.0, {1, 3, 4, 0}), n);
        p.top_p = 0.75f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 1.0, {1, 3, 4}), n);

        // top_p >= 1 is off.
        p.top_p = 1.0f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 1.0), n);
        p.top_p = 7.0f;
        s.configure(p);
        check_distribution(counts(s, logits, n), softmax(logits, 1.0), n);
    }

    TEST_CASE("top-p normalizes over the top-k candidates") {
        // Four equal logits. top_k 2, top_p 0.5: over the two top-k candidates token 0 alone holds 0.5,
        // so only token 0 is drawn; over all four it would take two tokens.
        Sampler s;
        minfer_sampler_params p = plain(1.0f, 5);
        p.top_k = 2;
        p.top_p = 0.5f;
        s.configure(p);
        for (int32_t t : draws(s, {0.0f, 0.0f, 0.0f, 0.0f}, 2000)) CHECK(t == 0);
        p.top_k = 0;
        s.configure(p);
        const std::vector<long> c = counts(s, {0.0f, 0.0f, 0.0f, 0.0f}, 20000);
        CHECK(c[0] > 9000);
        CHECK(c[1] > 9000);
        CHECK(c[2] == 0);
        CHECK(c[3] == 0);
    }

    TEST_CASE("the kept set equals a straightforward reference for random settings") {
        uint64_t state = 99;
        auto next = [&] {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            return state >> 33;
        };
        int checked = 0;
        for (int trial = 0; trial < 100; ++trial) {
            // Small vocabularies, and larger ones where the prefix searches take their selection path.
            // From trial 75 on, top-p alone (the path that cuts within one bucket of 1/16 logit) over
            // logits on the buckets' edges (multiples of 1/16) mixed with logits between them.
            const bool edges = trial >= 75;
            const size_t nv = trial < 60 ? 24 : 300;
            const int n_draws = trial < 60 ? 3000 : 12000;
            std::vector<float> logits(nv);
            for (float& v : logits)
                v = edges && next() % 2 ? static_cast<float>(next() % 64) / 16.0f - 2.0f : static_cast<float>(next() % 400) / 100.0f - 2.0f;
            minfer_sampler_params p = plain(50.0f, next());
            p.top_k = static_cast<int32_t>(next() % (nv + 6));  // 0 (off) .. >= n (off)
            p.top_p = static_cast<float>(next() % 110) / 100.0f;
            p.min_p = static_cast<float>(next() % 60) / 100.0f;
            if (edges) p.top_k = 0, p.min_p = 0.0f, p.top_p = 0.3f + static_cast<float>(next() % 60) / 100.0f;
            CAPTURE(trial);
            CAPTURE(p.top_k);
            CAPTURE(p.top_p);
            CAPTURE(p.min_p);

            // Reference: full sort, then the steps one by one.
            std::vector<int> order(nv);
            std::iota(order.begin(), order.end(), 0);
            std::sort(order.begin(), order.end(), [&](int a, int b) {
                return logits[static_cast<size_t>(a)] > logits[static_cast<size_t>(b)] ||
                       (logits[static_cast<size_t>(a)] == logits[static_cast<size_t>(b)] && a < b);
            });
            if (p.top_k > 0 && static_cast<size_t>(p.top_k) < nv) order.resize(static_cast<size_t>(p.top_k));
            const float best = logits[static_cast<size_t>(order[0])];
            if (p.top_p < 1.0f) {
                double z = 0.0;
                for (int i : order) z += std::exp(logits[static_cast<size_t>(i)] - best);
                double cum = 0.0;
                size_t keep = order.size();
                bool close = false;  // a prefix mass within rounding of the target: either answer is right
                for (size_t j = 0; j < order.size(); ++j) {
                    cum += std::exp(logits[static_cast<size_t>(order[j])] - best);
                    close = close || std::fabs(cum - static_cast<double>(p.top_p) * z) < 1e-5 * z;
                    if (cum >= static_cast<double>(p.top_p) * z) {
                        keep = j + 1;
                        break;
                    }
                }
                if (close) continue;
                order.resize(keep);
            }
            if (p.min_p > 0.0f)
                std::erase_if(order, [&](int i) { return logits[static_cast<size_t>(i)] - best < std::log(p.min_p); });
            std::vector<bool> expect(nv, false);
            for (int i : order) expect[static_cast<size_t>(i)] = true;

            Sampler s;
            s.configure(p);
            std::vector<bool> seen(nv, false);
            for (int32_t t : draws(s, logits, n_draws)) seen[static_cast<size_t>(t)] = true;
            CHECK(seen == expect);
            ++checked;
        }
        CHECK(checked >= 80);
    }

    TEST_CASE("seeded determinism: same seed same stream, other seed other stream, reconfigure reseeds") {
        const std::vector<float> logits = {0.3f, 0.1f, 0.0f, -0.2f, 0.25f, 0.05f, -0.1f, 0.2f};
        minfer_sampler_params p = default_params();
        p.temperature = 1.0f;
        p.top_k = 0;
        p.top_p = 1.0f;
        p.min_p = 0.0f;
        Sampler a, b;
        a.configure(p);
        b.configure(p);
        const std::vector<int32_t> sa = draws(a, logits, 1000);
        CHECK(sa == draws(b, logits, 1000));
        // Not a constant stream.
        CHECK(std::count(sa.begin(), sa.end(), sa[0]) < 500);

        a.configure(p);  // reseeds: the stream starts over
        CHECK(draws(a, logits, 1000) == sa);

        for (uint64_t seed : {0ull, 1ull, 43ull, ~0ull}) {
            CAPTURE(seed);
            p.seed = seed;
            b.configure(p);
            const std::vector<int32_t> sb = draws(b, logits, 1000);
            CHECK(sb != sa);
            CHECK(std::count(sb.begin(), sb.end(), sb[0]) < 500);
        }

        // Pinned values: the generator is defined bit for bit (xoshiro256** seeded by splitmix64), so
        // a seed gives the same stream everywhere. With 256 equal logits every weight is exactly 1 and
        // the draw is floor(u * 256): the top 8 bits of each generator output.
        {
            Sampler g;
            g.configure(plain(1.0f, 42));
            const std::vector<float> flat(256, 0.5f);
            CHECK(draws(g, flat, 16) ==
                  std::vector<int32_t>{21, 97, 174, 236, 253, 197, 184, 217, 194, 149, 174, 74, 205, 82, 182, 224});
            g.configure(plain(1.0f, 0));
            CHECK(draws(g, flat, 16) ==
                  std::vector<int32_t>{153, 191, 26, 106, 187, 255, 108, 137, 219, 235, 29, 17, 27, 167, 126, 75});
        }
        p.seed = 42;

        // One uniform per call whatever the logits: after different first calls the streams line up.
        Sampler c, d;
        c.configure(p);
        d.configure(p);
        c.sample(logits, {});
        d.sample(std::vector<float>{5.0f, -kInf, kNaN}, {});  // even a one-candidate call draws
        CHECK(draws(c, logits, 200) == draws(d, logits, 200));

        // Drawing from a copy of the generator leaves the sampler's own alone until it is set.
        Sampler e, f;
        e.configure(p);
        f.configure(p);
        Sampler::Generator gen = e.generator();
        const int32_t first = e.sample(logits, {}, gen);
        CHECK(gen != e.generator());
        CHECK(e.generator() == f.generator());
        CHECK(e.sample(logits, {}) == first);  // the same draw, now from its own generator
        CHECK(e.generator() == gen);
        e.set_generator(f.generator());  // back
        CHECK(draws(e, logits, 50) == draws(f, logits, 50));
    }

    TEST_CASE("validation names the field and changes nothing") {
        Sampler s, ref;
        minfer_sampler_params good = plain(1.0f, 77);
        good.top_k = 3;
        s.configure(good);
        ref.configure(good);
        const std::vector<float> logits = {0.5f, 0.4f, 0.3f, 0.2f, 0.1f};
        CHECK(draws(s, logits, 10) == draws(ref, logits, 10));

        struct Bad {
            const char* field;
            void (*edit)(minfer_sampler_params&);
        };
        const Bad bad[] = {
            {"size", [](minfer_sampler_params& p) { p.size = 0; }},
            {"size", [](minfer_sampler_params& p) { p.size = sizeof(minfer_sampler_params) - 1; }},
            {"size", [](minfer_sampler_params& p) { p.size = sizeof(minfer_sampler_params) + 8; }},
            {"temperature", [](minfer_sampler_params& p) { p.temperature = kNaN; }},
            {"temperature", [](minfer_sampler_params& p) { p.temperature = kInf; }},
            {"temperature", [](minfer_sampler_params& p) { p.temperature = -kInf; }},
            {"top_p", [](minfer_sampler_params& p) { p.top_p = kNaN; }},
            {"top_p", [](minfer_sampler_params& p) { p.top_p = -0.01f; }},
            {"top_p", [](minfer_sampler_params& p) { p.top_p = kInf; }},
            {"min_p", [](minfer_sampler_params& p) { p.min_p = kNaN; }},
            {"min_p", [](minfer_sampler_params& p) { p.min_p = 1.01f; }},
            {"min_p", [](minfer_sampler_params& p) { p.min_p = -kInf; }},
            {"repeat_penalty", [](minfer_sampler_params& p) { p.repeat_penalty = 0.0f; }},
            {"repeat_penalty", [](minfer_sampler_params& p) { p.repeat_penalty = -1.0f; }},
            {"repeat_penalty", [](minfer_sampler_params& p) { p.repeat_penalty = kNaN; }},
            {"repeat_penalty", [](minfer_sampler_params& p) { p.repeat_penalty = kInf; }},
            {"presence_penalty", [](minfer_sampler_params& p) { p.presence_penalty = kNaN; }},
            {"presence_penalty", [](minfer_sampler_params& p) { p.presence_penalty = -kInf; }},
            {"frequency_penalty", [](minfer_sampler_params& p) { p.frequency_penalty = kInf; }},
            {"frequency_penalty", [](minfer_sampler_params& p) { p.frequency_penalty = kNaN; }},
            {"penalty_last_n", [](minfer_sampler_params& p) { p.penalty_last_n = -2; }},
            {"penalty_last_n", [](minfer_sampler_params& p) { p.penalty_last_n = std::numeric_limits<int32_t>::min(); }},
        };
        for (const Bad& b : bad) {
            CAPTURE(b.field);
            minfer_sampler_params p = plain(0.0f, 1);  // would change temperature, top_k and seed
            b.edit(p);
            const std::string msg = config_error(s, p);
            CHECK_MESSAGE(msg.find(b.field) != std::string::npos, msg);
            CHECK(same_params(s.params(), good));
            // The generator was not reseeded and the settings still apply.
            CHECK(draws(s, logits, 10) == draws(ref, logits, 10));
        }

        // Boundary values that are accepted.
        auto accepted = [&](void (*edit)(minfer_sampler_params&)) {
            minfer_sampler_params p = good;
            edit(p);
            Sampler t;
            t.configure(p);
            CHECK(same_params(t.params(), p));
            const int32_t tok = t.sample(logits, std::vector<int32_t>{0, 1, 2});
            CHECK((tok >= 0 && tok < 5));
        };
        accepted([](minfer_sampler_params& p) { p.top_p = 0.0f; });
        accepted([](minfer_sampler_params& p) { p.top_p = 1.0f; });
        accepted([](minfer_sampler_params& p) { p.top_p = 1e30f; });
        accepted([](minfer_sampler_params& p) { p.min_p = 0.0f; });
        accepted([](minfer_sampler_params& p) { p.min_p = 1.0f; });
        accepted([](minfer_sampler_params& p) { p.min_p = -5.0f; });
        accepted([](minfer_sampler_params& p) { p.temperature = -3.0f; });
        accepted([](minfer_sampler_params& p) { p.temperature = 1e-30f; });
        accepted([](minfer_sampler_params& p) { p.temperature = 1e30f; });
        accepted([](minfer_sampler_params& p) { p.top_k = -4; });
        accepted([](minfer_sampler_params& p) { p.top_k = std::numeric_limits<int32_t>::max(); });
        accepted([](minfer_sampler_params& p) { p.repeat_penalty = 1e-30f; });
        accepted([](minfer_sampler_params& p) { p.presence_penalty = -2.0f; });
        accepted([](minfer_sampler_params& p) { p.penalty_last_n = -1; });
        accepted([](minfer_sampler_params& p) { p.penalty_last_n = std::numeric_limits<int32_t>::max(); });
        accepted([](minfer_sampler_params& p) { p.seed = 0; });

        // No logits at all is an error too.
        CHECK_THROWS_AS(s.sample(std::span<const float>{}, {}), minfer::Error);
    }

    TEST_CASE("NaN and infinities") {
        Sampler g;  // greedy
        Sampler s;
        s.configure(plain(1.0f, 9));
        minfer_sampler_params pk = plain(1.0f, 9);
        pk.top_k = 2;
        Sampler k;
        k.configure(pk);

        // NaN is never chosen while anything else is there.
        const std::vector<float> with_nan = {kNaN, -5.0f, kNaN, -6.0f, kNaN};
        CHECK(g.sample(with_nan, {}) == 1);
        for (int32_t t : draws(s, with_nan, 3000)) CHECK((t == 1 || t == 3));
        for (int32_t t : draws(k, with_nan, 3000)) CHECK((t == 1 || t == 3));
        const std::vector<float> nan_first = {kNaN, 1.0f};
        CHECK(g.sample(nan_first, {}) == 1);

        // Everything NaN or -inf: nothing to choose. An error that says so, and the generator stays put.
        auto refused = [](Sampler& x, const std::vector<float>& v) {
            const Sampler::Generator before = x.generator();
            try {
                const int32_t t = x.sample(v, {});
                FAIL_CHECK("token ", t, " was chosen although every token is banned");
            } catch (const minfer::Error& e) {
                CHECK(e.status() == MINFER_ERR_INVALID_ARGUMENT);
                CHECK_MESSAGE(std::string(e.what()).find("every token is banned") != std::string::npos, e.what());
            }
            CHECK(x.generator() == before);
        };
        minfer_sampler_params pbig = plain(1.0f, 9);
        pbig.top_k = 4097;  // the selection path of top-k (above the heap's limit)
        Sampler big;
        big.configure(pbig);
        for (const std::vector<float>& v : {std::vector<float>{kNaN, kNaN, kNaN}, std::vector<float>{-kInf, -kInf},
                                            std::vector<float>{-kInf, kNaN, -kInf}}) {
            refused(g, v);
            refused(s, v);
            refused(k, v);
        }
        refused(big, std::vector<float>(5000, -kInf));
        // Everything banned by bias.
        s.set_bias(0, -kInf);
        s.set_bias(1, -kInf);
        refused(s, {1.0f, 2.0f});
        s.clear_bias();

        // -inf tokens are never drawn even at a huge temperature.
        s.configure(plain(1e30f, 9));
        for (int32_t t : draws(s, {-kInf, 0.0f, -kInf, -1000.0f}, 3000)) CHECK((t == 1 || t == 3));

        // +inf: greedy takes the first; sampling draws the +inf tokens alike and nothing else.
        const std::vector<float> with_inf = {1.0f, kInf, 3.0f, kInf, kNaN, 2.0f};
        CHECK(g.sample(with_inf, {}) == 1);
        for (Sampler* x : {&s, &k}) {
            x->configure(x == &s ? plain(1.0f, 10) : pk);
            const std::vector<long> c = counts(*x, with_inf, 20000);
            CHECK(c[1] + c[3] == 20000);
            CHECK(c[1] > 9000);
            CHECK(c[3] > 9000);
        }
        // A penalty on +inf keeps it +inf; a huge frequency penalty (inf - inf = NaN) bans it.
        minfer_sampler_params pp = plain(0.0f);
        pp.penalty_last_n = -1;
        pp.frequency_penalty = 3e38f;
        Sampler q;
        q.configure(pp);
        CHECK(q.sample(with_inf, std::vector<int32_t>{1, 1, 3}) == 3);  // 1: inf - inf = NaN; 3: stays inf
        CHECK(q.sample(with_inf, std::vector<int32_t>{1, 1, 3, 3}) == 2);  // both NaN now

        // Large finite logits do not overflow the softmax.
        s.configure(plain(1.0f, 10));
        const std::vector<long> c = counts(s, {3e38f, 3e38f, -3e38f}, 10000);
        CHECK(c[2] == 0);
        CHECK(c[0] > 4500);
        CHECK(c[1] > 4500);
    }

    TEST_CASE("large vocabulary: the top-k heap and the sort-avoiding paths agree with each other") {
        const size_t n = 152064;
        std::vector<float> logits(n);
        uint64_t state = 5;
        for (float& v : logits) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            v = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53 * 20.0 - 10.0);
        }

        std::vector<int32_t> idx(n);
        std::iota(idx.begin(), idx.end(), 0);
        std::sort(idx.begin(), idx.end(), [&](int32_t a, int32_t b) {
            const float la = logits[static_cast<size_t>(a)], lb = logits[static_cast<size_t>(b)];
            return la > lb || (la == lb && a < b);
        });

        // top_k 40: every draw is among the 40 best.
        minfer_sampler_params p = default_params();
        p.temperature = 1.5f;
        p.min_p = 0.0f;
        p.top_p = 1.0f;
        Sampler s;
        s.configure(p);
        std::vector<bool> top40(n, false);
        for (size_t i = 0; i < 40; ++i) top40[static_cast<size_t>(idx[i])] = true;
        std::vector<bool> seen(n, false);
        for (int32_t t : draws(s, logits, 2000)) {
            CHECK(top40[static_cast<size_t>(t)]);
            seen[static_cast<size_t>(t)] = true;
        }
        CHECK(std::count(seen.begin(), seen.end(), true) >= 30);

        // top_k 5000 (a selection rather than the heap): every draw ranks below 5000, some near it.
        {
            minfer_sampler_params q = plain(1.0f, 21);
            q.top_k = 5000;
            Sampler sk;
            sk.configure(q);
            std::vector<size_t> rank_of(n);
            for (size_t i = 0; i < n; ++i) rank_of[static_cast<size_t>(idx[i])] = i;
            size_t hi = 0;
            for (int32_t t : draws(sk, logits, 200)) hi = std::max(hi, rank_of[static_cast<size_t>(t)]);
            CHECK(hi < 5000);
            CHECK(hi > 4000);
        }

        // Only 3042 tokens allowed: top_k 3042 takes the heap, top_k 0 the passes over the whole
        // vocabulary; same candidates, same draws.
        std::vector<float> sparse(n, -kInf);
        for (size_t i = 0; i < n; i += 50) sparse[i] = logits[i];
        for (float top_p : {0.5f, 0.999f, 1.0f}) {
            for (float min_p : {0.0f, 1e-4f, 0.05f}) {
                CAPTURE(top_p);
                CAPTURE(min_p);
                minfer_sampler_params a = plain(1.0f, 8);
                a.top_p = top_p;
                a.min_p = min_p;
                minfer_sampler_params b = a;
                b.top_k = 3042;
                Sampler sa, sb;
                sa.configure(a);
                sb.configure(b);
                CHECK(draws(sa, sparse, 100) == draws(sb, sparse, 100));
            }
        }

        // top_k 0 over the full vocabulary: every draw lies in the reference top-p prefix (and min-p
        // set), and both ends of the kept range are reached.
        double z = 0.0;
        const float best = logits[static_cast<size_t>(idx[0])];
        for (float v : logits) z += std::exp(v - best);
        size_t prefix = 0;  // length of the top-p 0.5 prefix
        for (double cum = 0.0; cum < 0.5 * z; ++prefix) cum += std::exp(logits[static_cast<size_t>(idx[prefix])] - best);
        std::vector<size_t> rank(n);
        for (size_t i = 0; i < n; ++i) rank[static_cast<size_t>(idx[i])] = i;
        for (float min_p : {0.0f, 0.5f}) {
            CAPTURE(min_p);
            size_t kept = prefix;
            if (min_p > 0.0f)
                while (kept > 1 && logits[static_cast<size_t>(idx[kept - 1])] - best < std::log(min_p)) --kept;
            REQUIRE(kept > 100);
            minfer_sampler_params h = plain(1.0f, 9);
            h.top_p = 0.5f;
            h.min_p = min_p;
            Sampler sh;
            sh.configure(h);
            size_t lo = n, hi = 0;
            for (int32_t t : draws(sh, logits, 300)) {
                lo = std::min(lo, rank[static_cast<size_t>(t)]);
                hi = std::max(hi, rank[static_cast<size_t>(t)]);
            }
            CHECK(hi < kept);
            CHECK(hi > kept * 8 / 10);  // nearly flat weights over the kept range: the far end is drawn
            CHECK(lo < kept / 5);
        }
    }

    TEST_CASE("large candidate sets: the draw matches the distribution, equal logits included") {
        // 12000 tokens in 10 groups of equal logits (interleaved ids); pure temperature sampling draws
        // over all of them. Group g has logit -0.3 g.
        const size_t n = 12000, groups = 10;
        std::vector<float> logits(n);
        for (size_t i = 0; i < n; ++i) logits[i] = -0.3f * static_cast<float>(i % groups);
        std::vector<double> expect(groups);
        double z = 0.0;
        for (size_t g = 0; g < groups; ++g) z += expect[g] = std::exp(-0.3 * static_cast<double>(g) / 0.7);
        for (double& e : expect) e /= z;
        Sampler s;
        s.configure(plain(0.7f, 31));
        const long draws_n = 6000;
        std::vector<long> c(groups, 0);
        std::vector<bool> seen(n, false);
        for (long d = 0; d < draws_n; ++d) {
            const int32_t t = s.sample(logits, {});
            ++c[static_cast<size_t>(t) % groups];
            seen[static_cast<size_t>(t)] = true;
        }
        check_distribution(c, expect, draws_n);
        // Within a group every id is as likely: draws spread over the ids (about 3870 distinct expected;
        // drawing only the lowest ids of each group would give far fewer).
        CHECK(std::count(seen.begin(), seen.end(), true) > 3500);
    }

    TEST_CASE("logits a hair apart: top-p's narrowing has no buckets to make, and draws a kept token") {
        // 32,000 equal logits but one, 1e-37 above the rest by a bias: the logit range is too small for
        // a bucket width (its scale overflows to infinity, and 0 x inf made a NaN bucket index that wrote
        // out of bounds). Top-p alone, top-k with top-p, min-p with top-p.
        std::vector<float> logits(32000, 0.0f);
        for (int mode = 0; mode < 3; ++mode) {
            CAPTURE(mode);
            minfer_sampler_params p = plain(1.0f, 7);
            p.top_p = 0.95f;
            p.top_k = mode == 1 ? 5000 : 0;
            p.min_p = mode == 2 ? 0.05f : 0.0f;
            Sampler s;
            s.configure(p);
            s.set_bias(5, 1e-37f);
            for (int i = 0; i < 20; ++i) {
                const int32_t t = s.sample(logits, {});
                CHECK(t >= 0);
                CHECK(t < 32000);
            }
        }
    }

    TEST_CASE("the weights: eight lanes (AVX2) and four give the same bits, within 4 ulp of exp") {
        // Both widths over the same inputs (past the ends of their loops too: 1,003 values), with
        // temperature 1 (no division) and 0.7; each weight against a double exp: a polynomial term
        // wrong or a lane shifted moves weights by far more than 4 ulp.
        std::mt19937 rng(99);
        std::uniform_real_distribution<float> d(-95.0f, 0.0f);
        std::vector<float> in(1003);
        for (float& x : in) x = d(rng);
        in[5] = -std::numeric_limits<float>::infinity();
        in[6] = std::numeric_limits<float>::quiet_NaN();
        in[7] = 0.0f;
        in[1002] = -1e-30f;
        const bool wide = minfer::sampling::testing::exp_wide_available();
        for (float div : {1.0f, 0.7f}) {
            CAPTURE(div);
            std::vector<float> four(in.size(), -1.0f), eight(in.size(), -2.0f);
            minfer::sampling::testing::exp_weights(in.data(), 0.0f, div, four.data(), in.size(), false);
            minfer::sampling::testing::exp_weights(in.data(), 0.0f, div, eight.data(), in.size(), true);
            CHECK(std::memcmp(four.data(), eight.data(), four.size() * sizeof(float)) == 0);
            for (size_t i = 0; i < in.size(); ++i) {
                CAPTURE(i);
                const double x = in[i] / div;  // divided in float, as the sampler divides
                if (!(x >= -87.0)) {  // NaN, -inf and below -87 weigh 0
                    CHECK(four[i] == 0.0f);
                    continue;
                }
                const double want = std::exp(x);
                CHECK(std::fabs(four[i] - want) <= 4.0 * std::numeric_limits<float>::epsilon() * want);
            }
        }
        if (wide) MESSAGE("eight lanes (AVX2) against four");
        else MESSAGE("this CPU has no AVX2: four lanes against themselves");
    }

    TEST_CASE("the draw goes in token-id order: the same u picks the same token whichever path found the candidates") {
        // u revealed: 1000 equal logits draw token floor(1000 u) in id order (up to rounding at the edges).
        std::vector<float> flat(1000, 0.0f);
        // Two tokens: id 1 weighs 1 (the higher logit), id 0 a third of it: in id order token 0 is drawn
        // exactly when u < 1/4 (in logit order it would be when u >= 3/4).
        const std::vector<float> two = {-std::log(3.0f), 0.0f};
        Sampler sa, sb;
        sa.configure(plain(1.0f, 77));
        sb.configure(plain(1.0f, 77));
        int checked = 0, zeros = 0;
        for (int i = 0; i < 400; ++i) {
            const int32_t t = sa.sample(flat, {});
            const int32_t b = sb.sample(two, {});
            if (t == 249 || t == 250) continue;  // rounding at the boundary
            CHECK((b == 0) == (t < 250));
            ++checked;
            zeros += b == 0;
        }
        CHECK(checked > 390);
        CHECK(zeros > 60);  // about 100 expected

        // 6,000 allowed tokens of 30,000 (more than the heap's 4,096, so the candidates found by a
        // selection or reordered by top-p go back to id order through the vocabulary's mask), weights
        // within a factor e of each other, and one more allowed token 1,000 below them, which weighs 0
        // everywhere and which top_k 6000 leaves out (so the selection runs and reorders its
        // candidates): no setting below cuts any of the 6,000, so every path has the same candidates of
        // nonzero weight and must draw the same tokens.
        const size_t n = 30000;
        std::vector<float> logits(n, -kInf);
        uint64_t state = 11;
        for (size_t i = 0; i < n; i += 5) {
            state = state * 6364136223846793005ull + 1442695040888963407ull;
            logits[i] = static_cast<float>(static_cast<double>(state >> 11) * 0x1.0p-53);
        }
        logits[12346] = -1000.0f;
        auto with = [](int top_k, float top_p, float min_p) {
            minfer_sampler_params p = plain(0.9f, 5);
            p.top_k = top_k;
            p.top_p = top_p;
            p.min_p = min_p;
            return p;
        };
        Sampler ref;
        ref.configure(with(0, 1.0f, 0.0f));  // temperature alone: the draw over the ids themselves
        const std::vector<int32_t> expect = draws(ref, logits, 300);
        const minfer_sampler_params others[] = {
            with(6000, 1.0f, 0.0f),      // a selection (top_k > 4,096), put back in order
            with(7000, 1.0f, 0.0f),      // the same, top_k above the candidates
            with(0, 1.0f, 1e-30f),       // min-p: the filtered pass over the ids, in order already
            with(0, 0.99999f, 0.0f),     // top-p over the whole vocabulary: reordered, put back
            with(6000, 0.99999f, 0.0f),  // a selection and top-p
            with(static_cast<int>(n), 1.0f, 0.0f),  // top_k = n: the pass over every id
        };
        for (const minfer_sampler_params& p : others) {
            CAPTURE(p.top_k);
            CAPTURE(p.top_p);
            CAPTURE(p.min_p);
            Sampler s;
            s.configure(p);
            CHECK(draws(s, logits, 300) == expect);
        }
        std::vector<bool> seen(n, false);
        for (int32_t t : expect) {
            REQUIRE(t >= 0);
            CHECK(logits[static_cast<size_t>(t)] >= 0.0f);
            seen[static_cast<size_t>(t)] = true;
        }
        CHECK(std::count(seen.begin(), seen.end(), true) > 250);  // 300 draws over 6,000 tokens: few repeats

        // At most 4,096 candidates (the heap, then the mask) and at most 1,024 (the heap, then a sort by
        // id) against the same sets found by the pass over the ids: every 10th and every 50th token.
        for (size_t step : {10, 50}) {
            CAPTURE(step);
            std::vector<float> fewer(n, -kInf);
            for (size_t i = 0; i < n; i += step) fewer[i] = logits[i];
            Sampler r2, h;
            r2.configure(with(0, 1.0f, 0.0f));
            h.configure(with(step == 10 ? 4000 : 1000, 1.0f, 0.0f));
            CHECK(draws(h, fewer, 300) == draws(r2, fewer, 300));
        }
    }

    TEST_CASE("the candidates' form: the row's m best raw logits and the affected tokens give the whole row's token") {
        // What the GPU path brings back instead of the row (candidates_needed's m best in candidate order,
        // NaN as -inf, and the penalized and biased tokens' raw logits, in any order): sample_candidates
        // must draw the token sample() draws from the whole row, with the same generator.
        std::mt19937_64 rng(20261207);
        auto uni = [&](double a, double b) { return std::uniform_real_distribution<double>(a, b)(rng); };
        auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
        int compared = 0, banned = 0, penalized = 0;
        for (int trial = 0; trial < 400; ++trial) {
            const size_t nv = std::array<size_t, 5>{7, 64, 300, 2000, 9000}[pick(5)];
            std::vector<float> logits(nv);
            const bool coarse = pick(3) == 0;  // many equal logits: ties at the m-th place
            for (float& v : logits) v = coarse ? static_cast<float>(pick(8)) * 0.5f : static_cast<float>(uni(-6.0, 6.0));
            for (size_t j = pick(4); j-- > 0;) logits[pick(nv)] = std::array<float, 3>{kNaN, -kInf, kInf}[pick(3)];
            if (pick(20) == 0) std::fill(logits.begin(), logits.end(), -kInf);  // every token banned
            minfer_sampler_params p = default_params();
            p.temperature = std::array<float, 6>{0.0f, 0.3f, 0.8f, 1.0f, 1.0f, 1.7f}[pick(6)];
            p.top_k = static_cast<int32_t>(1 + pick(std::min<size_t>(nv - 1, 300)));
            p.top_p = pick(3) == 0 ? 1.0f : static_cast<float>(uni(0.05, 1.0));
            p.min_p = pick(3) == 0 ? 0.0f : static_cast<float>(uni(0.0, 0.3));
            if (pick(2) == 0) {
                p.repeat_penalty = static_cast<float>(uni(0.7, 1.5));
                p.presence_penalty = static_cast<float>(uni(-1.0, 2.0));
                p.frequency_penalty = static_cast<float>(uni(-0.5, 1.0));
                p.penalty_last_n = std::array<int32_t, 3>{-1, 8, 64}[pick(3)];
            }
            p.seed = rng();
            Sampler full, part;
            full.configure(p);
            part.configure(p);
            for (size_t j = pick(4); j-- > 0;) {
                const int32_t t = static_cast<int32_t>(pick(nv + 3));  // some beyond the vocabulary
                const float b = pick(4) == 0 ? -kInf : static_cast<float>(uni(-4.0, 8.0));
                full.set_bias(t, b);
                part.set_bias(t, b);
            }
            std::vector<int32_t> history;
            for (size_t j = pick(100); j-- > 0;) history.push_back(static_cast<int32_t>(pick(4) == 0 ? pick(std::min<size_t>(nv, 5)) : pick(nv + 2)) - (pick(30) == 0 ? 7 : 0));
            CAPTURE(trial);
            CAPTURE(nv);
            CAPTURE(p.temperature);
            CAPTURE(p.top_k);
            Sampler::Generator g1 = full.generator(), g2 = part.generator();
            // the rows' candidate order: higher logit first (NaN as -inf), lower id among equal ones
            std::vector<int32_t> order(nv);
            std::iota(order.begin(), order.end(), 0);
            auto key = [&](int32_t i) { const float v = logits[static_cast<size_t>(i)]; return v != v ? -kInf : v; };
            std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
            for (int step = 0; step < 6; ++step) {
                std::vector<int32_t> affected;
                const size_t m = part.candidates_needed(nv, history, affected);
                REQUIRE(m > 0);
                REQUIRE(m <= nv);
                REQUIRE(m >= std::min(nv, static_cast<size_t>(p.temperature > 0.0f ? p.top_k : 1)));
                penalized += !affected.empty();
                std::vector<int32_t> ids(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(m));
                ids.insert(ids.end(), affected.begin(), affected.end());
                std::shuffle(ids.begin(), ids.end(), rng);
                std::vector<float> raw;
                for (int32_t i : ids) raw.push_back(logits[static_cast<size_t>(i)]);
                int32_t a = -2, b = -3;
                bool a_threw = false, b_threw = false;
                try {
                    a = full.sample(logits, history, g1);
                } catch (const minfer::Error&) {
                    a_threw = true;
                }
                try {
                    b = part.sample_candidates(nv, ids, raw, history, g2);
                } catch (const minfer::Error& e) {
                    b_threw = true;
                    CHECK(e.status() == MINFER_ERR_INVALID_ARGUMENT);
                }
                CHECK(a_threw == b_threw);
                if (a_threw) {
                    ++banned;
                    break;
                }
                CHECK(a == b);
                CHECK(g1 == g2);
                ++compared;
                history.push_back(a);
            }
        }
        MESSAGE(compared, " tokens compared, ", banned, " rows with every token banned, ", penalized, " with affected tokens");
        CHECK(compared > 1500);
        CHECK(banned > 5);
        CHECK(penalized > 500);
    }
}
