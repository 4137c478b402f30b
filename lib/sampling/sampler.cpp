// The sampler chain. The exact order, for every call of sample():
//
//  1. Copy the logits (the caller's array is never modified).
//  2. Penalties over the window = the last `penalty_last_n` tokens of `history` (-1: the whole history,
//     0: none; tokens outside [0, n_vocab) are ignored). For each distinct token t of the window, seen
//     c times in it, in this order: repeat penalty (logit > 0 ? logit / repeat_penalty
//     : logit * repeat_penalty), then presence (logit -= presence_penalty, once), then frequency
//     (logit -= frequency_penalty * c). Tokens outside the window keep their logit.
//  3. Logit bias: logit += bias for each biased token below n_vocab (-INFINITY bans the token).
//  From here NaN counts as -INFINITY, and a token whose logit is -INFINITY is never chosen. When every
//  token is -INFINITY or NaN there is nothing to choose: sample() throws Error(MINFER_ERR_INVALID_ARGUMENT,
//  "every token is banned ...") and the generator does not advance.
//  4. temperature <= 0: greedy, the highest logit, the lowest id among equal ones. No random number is
//     used. Done.
//  5. One uniform double u in [0, 1) is drawn from the generator on every call from here on that returns
//     a token, whatever the logits (so the generator's stream does not depend on them).
//  6. Candidates: the tokens that are not banned, ordered by logit descending, lower id first among
//     equal logits. top_k > 0 keeps the first top_k of them.
//     If the best logit is +INFINITY, only the +INFINITY tokens stay, all treated as equal (logit 0).
//  7. top-p (when top_p < 1) on the softmax at temperature 1 of the candidates left by top-k, with
//     weights exp(logit - best_logit): keeps the shortest prefix whose weight is >= top_p times
//     the total, never fewer than one token (top_p 0 keeps exactly the first candidate).
//  8. min-p (when min_p > 0): keeps the candidates with p >= min_p * p_max, evaluated as
//     logit - best_logit >= log(min_p) (float); the best candidate always stays.
//  9. Temperature: weights exp((logit - best_logit) / temperature) over what is left. (Weights are
//     float, from an exp of plain float arithmetic, the same bits on every IEEE platform.)
// 10. Draw: the first candidate in token-id order whose cumulative weight (summed in double) exceeds
//     u * total. (Any fixed order draws each candidate with its weight; id order is the one every path
//     reaches without sorting by logit, and the same candidates give the same draw whichever path
//     found them, up to rounding: the paths group their sums differently.)
//
// Steps 7 and 8 each keep a prefix of the candidate order, and min-p's test does not depend on the
// normalization, so the code applies min-p first (as a filter while collecting when top_k is off); the
// top-p total is still taken over all the top-k candidates, so the result is the same set.
//
// Nothing sorts the whole vocabulary: top-k takes a bounded heap (a selection for top_k > 4096), the
// prefix search of top-p is a bucket pass by logit plus a quickselect on the cumulative weight, and the
// draw sums the weights in blocks of consecutive candidates, then walks the one block where u * total is
// reached. Sums are therefore taken in an unspecified order (the same for the same inputs, so results
// are reproducible); the token drawn for a given u is the inverse-CDF one up to rounding.
//
// The generator is xoshiro256** seeded through splitmix64, so a seed gives the same stream on every
// platform and compiler; the uniform double takes the top 53 bits of one 64-bit output.
#include "sampling/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

#include "core/error.h"

namespace minfer::sampling {

namespace {

using Cand = std::pair<float, int32_t>;

// a is ordered before b: higher logit first, then lower id. (A function object, so it inlines.)
struct Before {
    bool operator()(const Cand& a, const Cand& b) const {
        return a.first > b.first || (a.first == b.first && a.second < b.second);
    }
};
constexpr Before before{};

inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t splitmix64(uint64_t& state) {
    state += 0x9E3779B97F4A7C15ull;
    uint64_t z = state;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t next_u64(Sampler::Generator& s) {
    const uint64_t out = rotl(s[1] * 5, 7) * 9;
    const uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

// Uniform in [0, 1): the top 53 bits of one output, scaled exactly.
double next_uniform(Sampler::Generator& s) { return static_cast<double>(next_u64(s) >> 11) * 0x1.0p-53; }

// Up to this top_k a bounded heap picks the candidates; above it, a selection over all of them.
constexpr size_t kHeapMax = 4096;
// The draw puts top-k's candidates back in id order by a sort up to this many, by a mask of the
// vocabulary above (a pass over the ids, cheaper than sorting a few thousand).
constexpr size_t kSortMax = 1024;

// exp(x) for x <= 0 on every lane of a vector at once, within a few ulp; 0 below -87, for -inf and for
// NaN. Plain float arithmetic on GCC/Clang vector types (no library call), so a lane gets the same bits
// whether computed alone, four wide or eight wide (AVX2: no FMA is enabled there, so none is formed).
// Every x86-64 build without FMA (the default target) gets the same bits; a build that enables FMA
// (-march=native on an FMA CPU, aarch64) lets the compiler fuse multiply-adds and differs from them in
// the last bits: the promise is the same draws for the same seed on the same build.
typedef float F4 __attribute__((vector_size(16)));
typedef int32_t I4 __attribute__((vector_size(16)));
typedef float F8 __attribute__((vector_size(32)));
typedef int32_t I8 __attribute__((vector_size(32)));

template <class F, class I>
[[gnu::always_inline]] inline void exp_negv(F& x) {  // in place: no vector passed by value
    const I keep = x >= -87.0f;  // all ones or 0 per lane; false for NaN
    // (F)i and (I)f: a vector cast between types of one size keeps the bits (no call, unlike bit_cast)
    x = (F)(((I)x & keep) | (std::bit_cast<int32_t>(-87.0f) & ~keep));
    const F fn = (x * 1.44269504f + 12582912.0f) - 12582912.0f;  // round(x / ln 2), in [-126, 0]
    const F r = (x - fn * 0.693145751953125f) - fn * 1.428606820309417e-6f;  // |r| <= ln(2) / 2
    F p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;  // Taylor series of e^r to degree 7: error < 3e-9
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const I scale = (__builtin_convertvector(fn, I) + 127) << 23;  // 2^fn
    x = (F)((I)(p * (F)scale) & keep);
}
inline F4 exp_neg4(F4 x) {
    exp_negv<F4, I4>(x);
    return x;
}

inline float exp_neg(float x) {
    const F4 v = {x, 0.0f, 0.0f, 0.0f};
    return exp_neg4(v)[0];
}

// out[i] = exp_neg((in[i] - sub) / div) for i < n (no division where div is 1: x / 1 is x, bit for bit),
// two independent vectors of F's width at a time.
template <class F, class I, bool kDiv>
[[gnu::always_inline]] inline void exp_array_v(const float* in, float sub, float div, float* out, size_t n) {
    constexpr size_t w = sizeof(F) / sizeof(float);
    size_t i = 0;
    F a, b;
    for (; i + 2 * w <= n; i += 2 * w) {
        std::memcpy(&a, in + i, sizeof a);
        std::memcpy(&b, in + i + w, sizeof b);
        a = a - sub;
        b = b - sub;
        if constexpr (kDiv) a = a / div, b = b / div;
        exp_negv<F, I>(a);
        exp_negv<F, I>(b);
        std::memcpy(out + i, &a, sizeof a);
        std::memcpy(out + i + w, &b, sizeof b);
    }
    for (; i < n; ++i) out[i] = exp_neg(kDiv ? (in[i] - sub) / div : in[i] - sub);
}
template <bool kDiv>
void exp_array_sse(const float* in, float sub, float div, float* out, size_t n) {
    exp_array_v<F4, I4, kDiv>(in, sub, div, out, n);
}
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// The same lanes eight wide where the CPU has AVX2 (checked at run time): the same operations per lane,
// so the same bits; about twice the rate of the four-wide form.
template <bool kDiv>
[[gnu::target("avx2")]] void exp_array_avx2(const float* in, float sub, float div, float* out, size_t n) {
    exp_array_v<F8, I8, kDiv>(in, sub, div, out, n);
}
const bool kHaveAvx2 = __builtin_cpu_supports("avx2");
#endif
template <bool kDiv>
void exp_array_as(const float* in, float sub, float div, float* out, size_t n) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (kHaveAvx2) return exp_array_avx2<kDiv>(in, sub, div, out, n);
#endif
    exp_array_sse<kDiv>(in, sub, div, out, n);
}
void exp_array(const float* in, float sub, float div, float* out, size_t n) {
    if (div == 1.0f) exp_array_as<false>(in, sub, div, out, n);
    else exp_array_as<true>(in, sub, div, out, n);
}

// The sum of at(0) .. at(n - 1) in double with four accumulators (a fixed order, so a fixed result).
template <class At>
double sum_of(size_t n, At at) {
    double a[4] = {0.0, 0.0, 0.0, 0.0};
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (size_t j = 0; j < 4; ++j) a[j] += at(i + j);
    for (; i < n; ++i) a[0] += at(i);
    return (a[0] + a[1]) + (a[2] + a[3]);
}
double sum(const float* v, size_t n) {
    return sum_of(n, [v](size_t i) { return static_cast<double>(v[i]); });
}

constexpr float kInf = std::numeric_limits<float>::infinity();

inline F4 select(I4 mask, F4 a, F4 b) {
    return std::bit_cast<F4>((std::bit_cast<I4>(a) & mask) | (std::bit_cast<I4>(b) & ~mask));
}

// NaN becomes -inf, in place. The largest value comes back (-inf when there is nothing else), taken in
// the same pass by eight running maxima (no long dependency chain).
float nan_to_ninf_max(float* v, size_t n) {
    const F4 lowest = {-kInf, -kInf, -kInf, -kInf};
    F4 m0 = lowest, m1 = lowest, a, b;
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        std::memcpy(&a, v + i, sizeof a);
        std::memcpy(&b, v + i + 4, sizeof b);
        a = select(a == a, a, lowest);
        b = select(b == b, b, lowest);
        std::memcpy(v + i, &a, sizeof a);
        std::memcpy(v + i + 4, &b, sizeof b);
        m0 = select(a > m0, a, m0);
        m1 = select(b > m1, b, m1);
    }
    float best = -kInf;
    for (int j = 0; j < 4; ++j) best = std::max({best, m0[j], m1[j]});
    for (; i < n; ++i) {
        if (std::isnan(v[i])) v[i] = -kInf;
        if (v[i] > best) best = v[i];
    }
    return best;
}

// NaN becomes -inf.
void nan_to_ninf(float* v, size_t n) { (void)nan_to_ninf_max(v, n); }

// Buckets of logits below the best one: bucket(best - logit), non-decreasing in the distance, so the
// bucket order agrees with the candidate order; distances beyond the range (and +inf) share the last.
constexpr int kBuckets = 1024;
struct Bucketer {
    float scale;
    int operator()(float distance) const {
        return static_cast<int>(std::min(distance * scale, static_cast<float>(kBuckets - 1)));
    }
};

// Adds weight[i] to mass[bucket(best - logit[i])] for i < n, through four interleaved histograms (one
// long dependency chain through a popular bucket is the slow part otherwise), summed in a fixed order.
template <class Logit, class Weight>
void histogram(size_t n, Logit logit, Weight weight, float best, Bucketer bucket, double (&mass)[kBuckets]) {
    static thread_local double part[4][kBuckets];
    for (auto& h : part) std::fill(std::begin(h), std::end(h), 0.0);
    size_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (size_t j = 0; j < 4; ++j) part[j][bucket(best - logit(i + j))] += weight(i + j);
    for (; i < n; ++i) part[0][bucket(best - logit(i))] += weight(i);
    for (int b = 0; b < kBuckets; ++b) mass[b] = (part[0][b] + part[1][b]) + (part[2][b] + part[3][b]);
}

}  // namespace

// Eight lanes, each keeping its first maximum and where it was; then the best lane, lowest id on ties.
int32_t argmax(std::span<const float> v) {
    const size_t n = v.size();
    const F4 lowest = {-kInf, -kInf, -kInf, -kInf};
    const I4 step = {8, 8, 8, 8};
    F4 m0 = lowest, m1 = lowest, a, b;
    I4 at0 = {0, 0, 0, 0}, at1 = at0, id0 = {0, 1, 2, 3}, id1 = {4, 5, 6, 7};
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        std::memcpy(&a, v.data() + i, sizeof a);
        std::memcpy(&b, v.data() + i + 4, sizeof b);
        const I4 g0 = a > m0, g1 = b > m1;
        m0 = select(g0, a, m0);
        m1 = select(g1, b, m1);
        at0 = (id0 & g0) | (at0 & ~g0);
        at1 = (id1 & g1) | (at1 & ~g1);
        id0 += step;
        id1 += step;
    }
    float best = -kInf;
    int32_t best_id = -1;
    auto consider = [&](float m, int32_t at) {
        if (m > best || (m == best && m > -kInf && at < best_id)) {
            best = m;
            best_id = at;
        }
    };
    for (int j = 0; j < 4; ++j) {
        consider(m0[j], at0[j]);
        consider(m1[j], at1[j]);
    }
    for (; i < n; ++i) consider(v[i], static_cast<int32_t>(i));  // later ids: equal values never win
    return best > -kInf ? best_id : -1;
}

namespace {

[[noreturn]] void every_token_banned(size_t n) {
    fail(MINFER_ERR_INVALID_ARGUMENT,
         "sample: every token is banned: all %zu logits are -INFINITY or NaN after the penalties and the logit bias", n);
}

constexpr size_t kDrawBlock = 256;

// Step 9 and the first half of step 10 over every id at once: out[i] = exp_neg((in[i] - sub) / div)
// as exp_array writes it, and per block of kDrawBlock ids the sum draw_from<true, false> takes of them
// (lane j of each four into accumulator j, the same additions in the same order: the same bits), in
// `block`; one pass over the vocabulary where two would read it.
void exp_blocks(const float* in, float sub, float div, float* out, size_t n, std::vector<double>& block) {
    block.clear();
    for (size_t b0 = 0; b0 < n; b0 += kDrawBlock) {
        const size_t m = std::min(n - b0, kDrawBlock);
        exp_array(in + b0, sub, div, out + b0, m);  // then summed while in the first-level cache
        block.push_back(sum(out + b0, m));
    }
}

// Top-p's cut applied over every id: prob[i] = 0 for the tokens ordered after `cut` (logit below its
// logit, or equal with a higher id), and per block of kDrawBlock ids the sum draw_from<true, false>
// takes of them (as exp_blocks gives them), in `block`.
void cut_blocks(const float* logit, const Cand& cut, float* prob, size_t n, std::vector<double>& block) {
    const F4 cv = {cut.first, cut.first, cut.first, cut.first};
    const I4 cid = {cut.second, cut.second, cut.second, cut.second};
    const F4 zero = {0.0f, 0.0f, 0.0f, 0.0f};
    block.clear();
    for (size_t b0 = 0; b0 < n; b0 += kDrawBlock) {
        const size_t b1 = std::min(n, b0 + kDrawBlock);
        size_t i = b0;
        for (; i + 4 <= b1; i += 4) {
            F4 v, p;
            std::memcpy(&v, logit + i, sizeof v);
            std::memcpy(&p, prob + i, sizeof p);
            const int32_t j = static_cast<int32_t>(i);
            const I4 id = {j, j + 1, j + 2, j + 3};
            p = select((v > cv) | ((v == cv) & (id <= cid)), p, zero);
            std::memcpy(prob + i, &p, sizeof p);
        }
        for (; i < b1; ++i)
            if (before(cut, Cand{logit[i], static_cast<int32_t>(i)})) prob[i] = 0.0f;
        block.push_back(sum(prob + b0, b1 - b0));
    }
}

// The draw of step 10 over the m candidates c in id order, weights `prob` by id; kIds: over the ids 0 ..
// m - 1 themselves (c unused; a banned one weighs 0); kCut: the candidates ordered after *cut (step 6's
// order) weigh 0. Per block of kDrawBlock candidates a sum over four interleaved chains (no single chain
// of dependent additions over the whole set), the blocks' running total to find the one where u * total
// is passed, and a walk through that block. Where rounding leaves the target unpassed in the walk, the
// block's last candidate of positive weight (before it, if it has none). The best candidate weighs
// exp(0) = 1, so the total is positive and a candidate of positive weight exists. `block`: scratch, or
// the block sums already taken (blocks_given: exp_blocks).
template <bool kIds, bool kCut>
int32_t draw_from(const float* prob, const Cand* c, size_t m, const Cand* cut, double u, std::vector<double>& block,
                  bool blocks_given = false) {
    auto id = [&](size_t i) {
        if constexpr (kIds) return static_cast<int32_t>(i);
        else return c[i].second;
    };
    auto weight = [&](size_t i) {
        if constexpr (kCut)
            if (before(*cut, c[i])) return 0.0;
        return static_cast<double>(prob[static_cast<size_t>(id(i))]);
    };
    double total = 0.0;
    if (blocks_given) {
        for (double x : block) total += x;
    } else {
        block.clear();
        for (size_t b0 = 0; b0 < m; b0 += kDrawBlock) {
            block.push_back(sum_of(std::min(m - b0, kDrawBlock), [&](size_t i) { return weight(b0 + i); }));
            total += block.back();
        }
    }
    const double target = u * total;
    double acc = 0.0;
    size_t b = 0;
    for (; b + 1 < block.size() && !(acc + block[b] > target); ++b) acc += block[b];
    const size_t b0 = b * kDrawBlock, b1 = std::min(m, b0 + kDrawBlock);
    size_t last = b0;
    for (size_t i = b0; i < b1; ++i) {
        const double w = weight(i);
        if (!(w > 0.0)) continue;  // never drawn
        acc += w;
        last = i;
        if (acc > target) return id(i);
    }
    if (!(weight(last) > 0.0))  // (a block of zero weights only: the last positive one before it)
        for (size_t i = b0; i-- > 0;)
            if (weight(i) > 0.0) return id(i);
    return id(last);
}

}  // namespace

minfer_sampler_params default_params() {
    minfer_sampler_params p{};
    p.size = sizeof(minfer_sampler_params);
    p.temperature = 0.8f;
    p.top_k = 40;
    p.top_p = 0.95f;
    p.min_p = 0.05f;
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.frequency_penalty = 0.0f;
    p.penalty_last_n = 64;
    p.seed = 42;
    return p;
}

Sampler::Sampler() : params_(default_params()), rng_{} {
    params_.temperature = 0.0f;
    configure(params_);
}

void Sampler::configure(const minfer_sampler_params& p) {
    constexpr auto E = MINFER_ERR_INVALID_ARGUMENT;
    if (p.size != sizeof(minfer_sampler_params))
        fail(E, "sampler params: size is %u, expected %zu (fill them with minfer_sampler_params_init)", p.size,
             sizeof(minfer_sampler_params));
    if (!std::isfinite(p.temperature)) fail(E, "sampler params: temperature must be finite (got %g)", p.temperature);
    if (!std::isfinite(p.top_p) || p.top_p < 0.0f)
        fail(E, "sampler params: top_p must be a finite value >= 0 (>= 1: off) (got %g)", p.top_p);
    if (!std::isfinite(p.min_p) || p.min_p > 1.0f)
        fail(E, "sampler params: min_p must be a finite value <= 1 (<= 0: off) (got %g)", p.min_p);
    if (!std::isfinite(p.repeat_penalty) || !(p.repeat_penalty > 0.0f))
        fail(E, "sampler params: repeat_penalty must be finite and > 0 (got %g)", p.repeat_penalty);
    if (!std::isfinite(p.presence_penalty))
        fail(E, "sampler params: presence_penalty must be finite (got %g)", p.presence_penalty);
    if (!std::isfinite(p.frequency_penalty))
        fail(E, "sampler params: frequency_penalty must be finite (got %g)", p.frequency_penalty);
    if (p.penalty_last_n < -1)
        fail(E, "sampler params: penalty_last_n must be >= -1 (-1: whole context, 0: off) (got %d)",
             p.penalty_last_n);

    params_ = p;
    uint64_t state = p.seed;
    for (uint64_t& w : rng_) w = splitmix64(state);
}

void Sampler::set_bias(int32_t token, float bias) {
    constexpr auto E = MINFER_ERR_INVALID_ARGUMENT;
    if (token < 0) fail(E, "logit bias: token %d is negative", token);
    if (std::isnan(bias) || bias == std::numeric_limits<float>::infinity())
        fail(E, "logit bias: bias for token %d must be finite or -INFINITY (got %g)", token, bias);
    if (bias == 0.0f)
        bias_.erase(token);
    else
        bias_[token] = bias;
}

void Sampler::clear_bias() { bias_.clear(); }

bool Sampler::greedy_only() const {
    const minfer_sampler_params& P = params_;
    const bool any_penalty = P.repeat_penalty != 1.0f || P.presence_penalty != 0.0f || P.frequency_penalty != 0.0f;
    return !(P.temperature > 0.0f) && !(any_penalty && P.penalty_last_n != 0) && bias_.empty();
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history) {
    Generator gen = rng_;
    const int32_t token = sample(logits, history, gen);
    rng_ = gen;
    return token;
}

// Steps 2 and 3 on the logits logit(t) gives (a float& for token t < n): each distinct token of the
// penalty window, then each biased token.
// The tokens of `history` the penalties look at: its last penalty_last_n (all for -1), none when no
// penalty is set.
std::span<const int32_t> Sampler::penalty_window(std::span<const int32_t> history) const {
    const minfer_sampler_params& P = params_;
    const bool any_penalty = P.repeat_penalty != 1.0f || P.presence_penalty != 0.0f || P.frequency_penalty != 0.0f;
    if (!any_penalty || P.penalty_last_n == 0) return {};
    return P.penalty_last_n > 0 && history.size() > static_cast<size_t>(P.penalty_last_n) ? history.last(static_cast<size_t>(P.penalty_last_n))
                                                                                          : history;
}

template <class Logit>
void Sampler::penalize(size_t n, std::span<const int32_t> history, Logit&& logit) {
    const minfer_sampler_params& P = params_;
    const std::span<const int32_t> window = penalty_window(history);
    if (!window.empty()) {
        recent_.assign(window.begin(), window.end());
        std::sort(recent_.begin(), recent_.end());
        for (size_t i = 0; i < recent_.size();) {
            size_t j = i;
            while (j < recent_.size() && recent_[j] == recent_[i]) ++j;
            const int32_t t = recent_[i];
            const size_t count = j - i;
            i = j;
            if (t < 0 || static_cast<size_t>(t) >= n) continue;
            float& v = logit(t);
            if (P.repeat_penalty != 1.0f) v = v > 0.0f ? v / P.repeat_penalty : v * P.repeat_penalty;
            v -= P.presence_penalty;
            v -= P.frequency_penalty * static_cast<float>(count);
        }
    }
    for (const auto& [t, b] : bias_)
        if (static_cast<size_t>(t) < n) logit(t) += b;
}

int32_t Sampler::sample(std::span<const float> logits, std::span<const int32_t> history, Generator& gen) {
    const size_t n = logits.size();
    if (n == 0) fail(MINFER_ERR_INVALID_ARGUMENT, "sample: no logits");
    if (n > static_cast<size_t>(std::numeric_limits<int32_t>::max()) - 16)
        fail(MINFER_ERR_INVALID_ARGUMENT, "sample: %zu logits is more than token ids can address", n);
    const minfer_sampler_params& P = params_;

    // 1. copy
    work_.assign(logits.begin(), logits.end());

    // 2. penalties over the recent window, 3. logit bias
    penalize(n, history, [&](int32_t t) -> float& { return work_[static_cast<size_t>(t)]; });

    // 4. greedy
    if (!(P.temperature > 0.0f)) {
        const int32_t token = argmax(work_);
        if (token < 0) every_token_banned(n);
        return token;
    }

    // 5. the one uniform of this call (the caller drops `gen` when this call throws)
    const double u = next_uniform(gen);

    // 6. candidates and top-k, with the top-p total z and min-p folded in where that saves work. z is
    // taken over the top-k candidates before min-p removes any, so applying min-p first gives the same
    // set as top-p first: both keep a prefix of the candidate order, and the result is the shorter one.
    const bool use_top_p = P.top_p < 1.0f;
    const float min_p_cut = P.min_p > 0.0f ? std::log(P.min_p) : -kInf;  // keep: logit - best >= cut
    const size_t k = P.top_k > 0 ? static_cast<size_t>(P.top_k) : 0;
    cand_.clear();
    prob_.resize(n);       // weights by token id; only the candidates' entries are meaningful
    bool have_w1 = false;  // prob_ holds the temperature-1 weights of every candidate
    bool dense = true;     // a candidate's logit is work_[id] (false after the +inf remap)
    bool every_id = false;  // the candidates are every token (banned ones weigh 0): cand_ is not built
    bool cut_known = false;  // top-p's last candidate found already (edge_cut): every_id with a cut
    Cand cut{};              // top-p's last candidate kept
    float best = -kInf;
    double z = 0.0;
    if (k > kHeapMax && k < n) nan_to_ninf(work_.data(), n);  // there, banned == -inf
    if (k == 0 || k >= n) {
        // No top-k: one pass for the best logit (NaN made -inf on the way: banned == -inf), one for all
        // weights and z when top-p needs them, one that keeps what min-p keeps.
        best = nan_to_ninf_max(work_.data(), n);
        if (best == -kInf) every_token_banned(n);
        if (best == kInf) {
            // Only the +inf tokens can be drawn, all alike.
            for (size_t i = 0; i < n; ++i) {
                if (work_[i] != kInf) continue;
                cand_.emplace_back(0.0f, static_cast<int32_t>(i));
                prob_[i] = 1.0f;
            }
            best = 0.0f;
            z = static_cast<double>(cand_.size());
            have_w1 = true;
            dense = false;
        } else {
            // Buckets 1/16 logit wide; 64 below the best, weights are e^-64 of the best's: negligible
            // next to any top-p short of 1 that a float can hold.
            const Bucketer bucket{16.0f};
            int last_bucket = kBuckets - 1;  // candidates are in buckets <= this one
            if (use_top_p) {
                exp_array(work_.data(), best, 1.0f, prob_.data(), n);  // banned tokens weigh 0
                z = sum(prob_.data(), n);
                have_w1 = true;
            }
            if (use_top_p && !(P.min_p > 0.0f)) {  // (min-p usually bounds the candidates much harder)
                // The bucket where the top-p mass is reached: later ones cannot be in the prefix.
                double mass[kBuckets];
                histogram(n, [&](size_t i) { return work_[i]; }, [&](size_t i) { return prob_[i]; }, best, bucket, mass);
                const double target = static_cast<double>(P.top_p) * z;
                double acc = 0.0;
                int b = 0;
                for (; b < kBuckets - 1 && !(acc + mass[b] >= target); ++b) acc += mass[b];
                last_bucket = b;
                // Every token of an earlier bucket is kept; the cut falls among bucket b's tokens. Where
                // they are few (bucket b is 1/16 logit wide), they alone are put in candidate order, and
                // the draw then goes over the ids with the cut as its predicate: no candidate list of the
                // tens of thousands of tokens a top-p of flat logits keeps.
                if (b < kBuckets - 1) cut_known = edge_cut(best, bucket.scale, b, acc, target, cut);
            }
            // bucket(d) <= last_bucket  <=>  d * 16 < last_bucket + 1, for the buckets before the last.
            const float bucket_limit = last_bucket == kBuckets - 1 ? kInf : static_cast<float>(last_bucket + 1);
            // Nothing to cut (temperature alone), or the cut known: the draw goes over the ids themselves.
            every_id = (!use_top_p && !(P.min_p > 0.0f)) || cut_known;
            // Without branches or push_back bookkeeping: write every token, advance past kept ones.
            cand_.resize(every_id ? 0 : n);
            if (!every_id) {
                Cand* out = cand_.data();
                size_t m = 0;
                for (size_t i = 0; i < n; ++i) {
                    const float v = work_[i];
                    out[m] = {v, static_cast<int32_t>(i)};
                    m += static_cast<size_t>((v != -kInf) & (v - best >= min_p_cut) & ((best - v) * bucket.scale < bucket_limit));
                }
                cand_.resize(m);
            }
        }
    } else {
        if (k <= kHeapMax) {
            // A bounded heap whose front is the worst kept candidate. Ids arrive in increasing order, so
            // a newcomer equal to the worst kept one comes after it and never replaces it.
            cand_.reserve(k);
            size_t i = 0;
            for (; i < n && cand_.size() < k; ++i) {
                if (!(work_[i] > -kInf)) continue;  // banned or NaN
                cand_.emplace_back(work_[i], static_cast<int32_t>(i));
                std::push_heap(cand_.begin(), cand_.end(), before);
            }
            if (cand_.size() == k) {
                float worst = cand_.front().first;
                F4 worst4 = {worst, worst, worst, worst}, a[4];
                while (i < n) {
                    if (i + 16 <= n) {  // most blocks of 16 hold nothing better than the worst kept
                        std::memcpy(a, work_.data() + i, sizeof a);
                        const I4 g = (a[0] > worst4) | (a[1] > worst4) | (a[2] > worst4) | (a[3] > worst4);
                        if ((g[0] | g[1] | g[2] | g[3]) == 0) {
                            i += 16;
                            continue;
                        }
                    }
                    for (const size_t end = std::min(n, i + 16); i < end; ++i) {
                        const float v = work_[i];
                        if (!(v > worst)) continue;  // NaN and -inf included
                        std::pop_heap(cand_.begin(), cand_.end(), before);
                        cand_.back() = {v, static_cast<int32_t>(i)};
                        std::push_heap(cand_.begin(), cand_.end(), before);
                        worst = cand_.front().first;
                    }
                    worst4 = F4{worst, worst, worst, worst};
                }
            }
            // In candidate order: the heap's layout depends on every token it saw, the sorted list only on
            // the candidates, so the candidates' form (sample_candidates) sums them in the same order.
            std::sort_heap(cand_.begin(), cand_.end(), before);
        } else {
            for (size_t i = 0; i < n; ++i)
                if (work_[i] != -kInf) cand_.emplace_back(work_[i], static_cast<int32_t>(i));
            if (k < cand_.size()) {
                std::nth_element(cand_.begin(), cand_.begin() + static_cast<std::ptrdiff_t>(k), cand_.end(), before);
                cand_.resize(k);
            }
        }
        return from_topk(n, k, u, /*dense=*/true);
    }

    return finish(n, k, u, best, z, have_w1, dense, every_id, cut_known, cut);
}

size_t Sampler::candidates_needed(size_t n, std::span<const int32_t> history, std::vector<int32_t>& affected) const {
    const minfer_sampler_params& P = params_;
    affected.clear();
    for (int32_t t : penalty_window(history))
        if (t >= 0 && static_cast<size_t>(t) < n) affected.push_back(t);
    for (const auto& [t, b] : bias_)
        if (static_cast<size_t>(t) < n) affected.push_back(t);
    std::sort(affected.begin(), affected.end());
    affected.erase(std::unique(affected.begin(), affected.end()), affected.end());
    // The k best after the penalties and the bias: unaffected tokens keep their logits, and at most
    // affected.size() tokens can stand above them, so they are among the k + affected.size() best raw
    // logits (in candidate order, NaN as -inf); the affected ones come with their own raw logits.
    const size_t k = P.temperature > 0.0f ? (P.top_k > 0 ? static_cast<size_t>(P.top_k) : 0) : 1;
    // top-k off: every token may be drawn. Above kHeapMax, sample() selects its candidates without
    // sorting them, so its sums may round otherwise than the candidates' form's: whole rows there.
    if (k == 0 || k >= n || k > kHeapMax) return 0;
    return std::min(n, k + affected.size());
}

int32_t Sampler::sample_candidates(size_t n, std::span<const int32_t> ids, std::span<const float> raw,
                                   std::span<const int32_t> history) {
    Generator gen = rng_;
    const int32_t token = sample_candidates(n, ids, raw, history, gen);
    rng_ = gen;
    return token;
}

int32_t Sampler::sample_candidates(size_t n, std::span<const int32_t> ids, std::span<const float> raw,
                                   std::span<const int32_t> history, Generator& gen) {
    const minfer_sampler_params& P = params_;
    if (ids.size() != raw.size() || ids.empty() || n == 0 || n > static_cast<size_t>(std::numeric_limits<int32_t>::max()) - 16)
        fail(MINFER_ERR_INTERNAL, "sample_candidates: %zu ids, %zu logits, %zu tokens", ids.size(), raw.size(), n);
    // 1. the candidates by id, each once (a token may come both as a best one and as an affected one)
    cand_.clear();
    for (size_t i = 0; i < ids.size(); ++i) {
        if (ids[i] < 0 || static_cast<size_t>(ids[i]) >= n) fail(MINFER_ERR_INTERNAL, "sample_candidates: token %d of %zu", ids[i], n);
        cand_.emplace_back(raw[i], ids[i]);
    }
    std::sort(cand_.begin(), cand_.end(), [](const Cand& a, const Cand& b) { return a.second < b.second; });
    cand_.erase(std::unique(cand_.begin(), cand_.end(), [](const Cand& a, const Cand& b) { return a.second == b.second; }), cand_.end());
    auto at = [&](int32_t t) -> float& {
        const auto it = std::lower_bound(cand_.begin(), cand_.end(), t, [](const Cand& c, int32_t id) { return c.second < id; });
        if (it == cand_.end() || it->second != t) fail(MINFER_ERR_INTERNAL, "sample_candidates: token %d, affected, was not brought", t);
        return it->first;
    };
    // 2. penalties and 3. the logit bias, as sample() applies them
    penalize(n, history, at);
    // NaN counts as -inf from here: banned either way
    std::erase_if(cand_, [](const Cand& c) { return !(c.first > -kInf); });
    if (cand_.empty()) every_token_banned(n);
    // 4. greedy: the best, the lowest id among equal ones (cand_ is in id order)
    if (!(P.temperature > 0.0f)) {
        const Cand* best = &cand_[0];
        for (const Cand& c : cand_)
            if (c.first > best->first) best = &c;
        return best->second;
    }
    // 5. the uniform, 6. top-k in candidate order
    const double u = next_uniform(gen);
    const size_t k = P.top_k > 0 ? static_cast<size_t>(P.top_k) : 0;
    if (k == 0 || k >= n) fail(MINFER_ERR_INTERNAL, "sample_candidates: top_k %d of %zu tokens", P.top_k, n);
    std::sort(cand_.begin(), cand_.end(), before);
    if (cand_.size() > k) cand_.resize(k);
    return from_topk(n, k, u, /*dense=*/false);
}

// Steps 6 to 10 where top-k is on (0 < k < n) and cand_ holds its candidates in candidate order (the
// heap's output sorted, or the candidates' form's list): the same candidates in the same order give the
// same token, sums included. `dense`: a candidate's logit is also work_[id].
int32_t Sampler::from_topk(size_t n, size_t k, double u, bool dense) {
    const minfer_sampler_params& P = params_;
    const bool use_top_p = P.top_p < 1.0f;
    const float min_p_cut = P.min_p > 0.0f ? std::log(P.min_p) : -kInf;
    prob_.resize(n);
    float best = -kInf;
    double z = 0.0;
    bool have_w1 = false;
    if (cand_.empty()) every_token_banned(n);
    for (const Cand& c : cand_) best = std::max(best, c.first);
    if (best == kInf) {
        std::erase_if(cand_, [&](const Cand& c) { return c.first != kInf; });
        for (Cand& c : cand_) c.first = 0.0f;
        best = 0.0f;
        dense = false;
    }
    if (use_top_p) {
        for (const Cand& c : cand_) z += prob_[static_cast<size_t>(c.second)] = exp_neg(c.first - best);
        have_w1 = true;
    }
    if (P.min_p > 0.0f) std::erase_if(cand_, [&](const Cand& c) { return !(c.first - best >= min_p_cut); });
    return finish(n, k, u, best, z, have_w1, dense, false, false, Cand{});
}

// Steps 7 to 10 over cand_ (or over every id: every_id, cut_known), with the state steps 1 to 6 left.
int32_t Sampler::finish(size_t n, size_t k, double u, float best, double z, bool have_w1, bool dense, bool every_id, bool cut_known,
                        Cand cut) {
    const minfer_sampler_params& P = params_;
    const bool use_top_p = P.top_p < 1.0f;
    // 7. top-p (8. min-p is already applied), at temperature 1. The search reorders cand_: where it was in
    // id order (a pass over the ids collected it), a copy keeps that order for the draw, which takes the
    // candidates up to the cut (the last one kept) from it.
    const bool by_ids = k == 0 || k >= n;  // cand_ collected in id order
    if (use_top_p && !cut_known) {
        if (by_ids) ordered_.assign(cand_.begin(), cand_.end());
        cand_.resize(first_reaching(static_cast<double>(P.top_p) * z, false, best) + 1);
        cut = cand_.back();
    }

    // 9. temperature and 10. the draw
    const float temp = P.temperature;
    const float* w = prob_.data();
    if (cut_known) {  // top-p's weights at temperature 1 are there for every id
        if (temp != 1.0f) exp_array(work_.data(), best, temp, prob_.data(), n);
        cut_blocks(work_.data(), cut, prob_.data(), n, block_);
        return draw_from<true, false>(w, nullptr, n, nullptr, u, block_, true);
    }
    if (every_id) {  // (have_w1 is false: no top-p)
        exp_blocks(work_.data(), best, temp, prob_.data(), n, block_);
        return draw_from<true, false>(w, nullptr, n, nullptr, u, block_, true);
    }
    if (!(have_w1 && temp == 1.0f)) {  // else (logit - best) / 1 is exact: the weights are already there
        if (dense && cand_.size() > n / 4) {
            exp_array(work_.data(), best, temp, prob_.data(), n);
        } else {
            for (const Cand& c : cand_) prob_[static_cast<size_t>(c.second)] = exp_neg((c.first - best) / temp);
        }
    }
    // 10. in id order: over every id, or cand_ where a pass over the ids collected it, or that order
    // before top-p up to the cut; other candidates (top-k's) are sorted when few, put back in order
    // through a mask of the vocabulary when many.
    if (by_ids && use_top_p) return draw_from<false, true>(w, ordered_.data(), ordered_.size(), &cut, u, block_);
    if (!by_ids) {
        auto by_id = [](const Cand& a, const Cand& b) { return a.second < b.second; };
        const size_t m = cand_.size();
        if (m <= kSortMax) {
            std::sort(cand_.begin(), cand_.end(), by_id);
        } else {
            kept_.assign(n, 0);
            for (const Cand& c : cand_) kept_[static_cast<size_t>(c.second)] = 1;
            // Branchless: every id written, the position advanced past kept ones (a spare slot for the
            // writes after the last). The logits are not read from here on: only the ids are put back.
            cand_.emplace_back();
            size_t j = 0;
            for (size_t i = 0; i < n; ++i) {
                cand_[j].second = static_cast<int32_t>(i);
                j += kept_[i];
            }
            cand_.resize(m);
        }
    }
    return draw_from<false, false>(w, cand_.data(), cand_.size(), nullptr, u, block_);
}

// Top-p's cut where it falls in bucket b of the logits' histogram (no top-k, no min-p): bucket b's tokens
// (work_, NaN already -inf) in candidate order, with `acc` the weight (prob_, temperature 1) of every
// token of an earlier bucket, and the first whose cumulative weight reaches `target` (the bucket's last
// where rounding leaves it unreached) is the cut. False, with nothing decided, where the bucket holds more
// than kEdgeMax tokens: first_reaching's narrowing is then the faster way.
bool Sampler::edge_cut(float best, float scale, int b, double acc, double target, Cand& cut) {
    constexpr size_t kEdgeMax = 4096;
    const size_t n = work_.size();
    // A token is in bucket b < kBuckets - 1 when its distance d = best - logit has b <= d * scale < b + 1
    // (bucket() truncates d * scale, which is >= 0: the same test); -inf's distance is +inf.
    const float bf = static_cast<float>(b), bf1 = bf + 1.0f;
    const F4 best4 = {best, best, best, best}, scale4 = {scale, scale, scale, scale}, lo4 = {bf, bf, bf, bf}, hi4 = {bf1, bf1, bf1, bf1};
    auto in_bucket = [&](float v) {
        const float t = (best - v) * scale;
        return t >= bf && t < bf1;
    };
    edge_.clear();
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        F4 x, y;
        std::memcpy(&x, work_.data() + i, sizeof x);
        std::memcpy(&y, work_.data() + i + 4, sizeof y);
        x = (best4 - x) * scale4;
        y = (best4 - y) * scale4;
        const I4 in = ((x >= lo4) & (x < hi4)) | ((y >= lo4) & (y < hi4));
        if ((in[0] | in[1] | in[2] | in[3]) == 0) continue;  // most groups of eight hold none of them
        for (size_t j = i; j < i + 8; ++j)
            if (in_bucket(work_[j])) {
                if (edge_.size() == kEdgeMax) return false;
                edge_.emplace_back(work_[j], static_cast<int32_t>(j));
            }
    }
    for (; i < n; ++i)
        if (in_bucket(work_[i])) {
            if (edge_.size() == kEdgeMax) return false;
            edge_.emplace_back(work_[i], static_cast<int32_t>(i));
        }
    if (edge_.empty()) return false;  // (the histogram put the target's mass there: not reached)
    std::sort(edge_.begin(), edge_.end(), before);
    for (const Cand& c : edge_) {
        acc += static_cast<double>(prob_[static_cast<size_t>(c.second)]);
        if (acc >= target) {
            cut = c;
            return true;
        }
    }
    cut = edge_.back();
    return true;
}

// In candidate order (logit descending, lower id first), the position r of the first candidate whose
// cumulative weight (prob_ by token id) reaches `target` (exceeds it when `strict`), or the last one
// when rounding leaves the target unreached. Reorders cand_ so that cand_[0..r] are the first r + 1
// candidates (in no particular order, except cand_[r] itself) and returns r. `best` is the highest
// candidate logit. No full sort: a bucket pass by logit narrows a large set to the one bucket where the
// target is reached, then a quickselect on the cumulative weight, then a sort of at most 32.
size_t Sampler::first_reaching(double target, bool strict, float best) {
    auto reached = [&](double cum) { return strict ? cum > target : cum >= target; };
    auto weight = [&](const Cand& c) { return static_cast<double>(prob_[static_cast<size_t>(c.second)]); };
    auto it = [&](size_t i) { return cand_.begin() + static_cast<std::ptrdiff_t>(i); };
    size_t lo = 0, hi = cand_.size();
    double acc = 0.0;  // weight of every candidate before lo

    if (hi > 4 * static_cast<size_t>(kBuckets)) {
        float worst = best;
        for (const Cand& c : cand_) worst = std::min(worst, c.first);
        // The buckets span the candidates' logits, but at most 128 below the best (weights there are
        // e^-128 of the best's at temperature 1; further ones share the last bucket).
        const float range = std::min(best - worst, 128.0f);
        // (A range below about 3e-36 makes the scale infinite, and 0 x inf a NaN bucket: no buckets then.)
        const float scale = static_cast<float>(kBuckets - 1) / range;
        if (range > 0.0f && std::isfinite(scale)) {
            const Bucketer bucket{scale};
            double mass[kBuckets];
            histogram(cand_.size(), [&](size_t i) { return cand_[i].first; }, [&](size_t i) { return weight(cand_[i]); },
                      best, bucket, mass);
            int b = 0;
            for (; b < kBuckets && !reached(acc + mass[b]); ++b) acc += mass[b];
            if (b == kBuckets) {  // not reached: the last candidate
                std::iter_swap(std::max_element(cand_.begin(), cand_.end(), before), cand_.end() - 1);
                return cand_.size() - 1;
            }
            const auto m1 = std::partition(cand_.begin(), cand_.end(), [&](const Cand& c) { return bucket(best - c.first) < b; });
            const auto m2 = std::partition(m1, cand_.end(), [&](const Cand& c) { return bucket(best - c.first) == b; });
            lo = static_cast<size_t>(m1 - cand_.begin());
            hi = static_cast<size_t>(m2 - cand_.begin());
        }
    }
    while (hi - lo > 32) {
        const size_t mid = lo + (hi - lo) / 2;
        std::nth_element(it(lo), it(mid), it(hi), before);
        double m = 0.0;
        for (size_t i = lo; i < mid; ++i) m += weight(cand_[i]);
        if (reached(acc + m)) {
            hi = mid;
        } else {
            acc += m;
            lo = mid;
        }
    }
    std::sort(it(lo), it(hi), before);
    for (size_t i = lo; i < hi; ++i) {
        acc += weight(cand_[i]);
        if (reached(acc)) return i;
    }
    return hi - 1;
}

namespace testing {
void exp_weights(const float* in, float sub, float div, float* out, size_t n, bool wide) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    if (wide && kHaveAvx2) {
        if (div == 1.0f) exp_array_avx2<false>(in, sub, div, out, n);
        else exp_array_avx2<true>(in, sub, div, out, n);
        return;
    }
#endif
    (void)wide;
    if (div == 1.0f) exp_array_sse<false>(in, sub, div, out, n);
    else exp_array_sse<true>(in, sub, div, out, n);
}
bool exp_wide_available() {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
    return kHaveAvx2;
#else
    return false;
#endif
}
}  // namespace testing

}  // namespace minfer::sampling
