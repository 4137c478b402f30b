// The sampler chain of a context: penalties over recent tokens, logit bias, then top-k, top-p, min-p,
// temperature and a seeded draw; greedy when temperature <= 0.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "minfer.h"

namespace minfer::sampling {

// The documented defaults of minfer_sampler_params (what minfer_sampler_params_init fills): size =
// sizeof, temperature 0.8, top_k 40, top_p 0.95, min_p 0.05, repeat_penalty 1, presence 0, frequency 0,
// penalty_last_n 64, seed 42.
minfer_sampler_params default_params();

// The greedy choice: the highest logit, the lowest id among equal ones; NaN never wins; -1 when every
// logit is -INFINITY or NaN.
int32_t argmax(std::span<const float> logits);

class Sampler {
public:
    Sampler();  // greedy (temperature 0), no penalties, seed 42

    // Throws Error(MINFER_ERR_INVALID_ARGUMENT) naming the bad field; then nothing changes.
    void configure(const minfer_sampler_params& p);
    const minfer_sampler_params& params() const { return params_; }
    void set_bias(int32_t token, float bias);
    void clear_bias();

    // The state of the generator (xoshiro256**).
    using Generator = std::array<uint64_t, 4>;
    const Generator& generator() const { return rng_; }
    // True when sample() is argmax(logits) whatever the history: temperature <= 0, no penalty, no bias.
    bool greedy_only() const;
    void set_generator(const Generator& g) { rng_ = g; }

    // Picks a token from `logits` (n_vocab floats, not modified) given the context's token history
    // (oldest first). Deterministic for a given seed, settings, logits and history. Throws
    // Error(MINFER_ERR_INVALID_ARGUMENT) when every token is banned (each logit is -INFINITY or NaN
    // after the penalties and the logit bias); the generator then stays as it was.
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history);
    // The same, drawing from `gen` instead of the sampler's own generator, which is left alone: the
    // caller keeps the draw with set_generator(gen), or drops it.
    int32_t sample(std::span<const float> logits, std::span<const int32_t> history, Generator& gen);

    // The candidates' form of sample(), for logits that stay where they were computed (the GPU): the
    // same token from the same generator as sample() over the whole row, given fewer of its logits.
    // candidates_needed says what it needs: the count m of the row's best raw logits (in candidate
    // order: higher logit first, lower id among equal ones, NaN as -INFINITY), and `affected`, the tokens
    // the penalties and the logit bias change (sorted, distinct, < n_vocab), whose raw logits it needs
    // too. m is 0 where the row cannot be cut short: top_k off (or >= n_vocab, or above 4,096) at
    // temperature > 0.
    size_t candidates_needed(size_t n_vocab, std::span<const int32_t> history, std::vector<int32_t>& affected) const;
    // ids/raw: the m best (any order) and the affected tokens (a token may be in both). Throws as
    // sample() does, and Error(MINFER_ERR_INTERNAL) where an affected token is missing.
    int32_t sample_candidates(size_t n_vocab, std::span<const int32_t> ids, std::span<const float> raw,
                              std::span<const int32_t> history, Generator& gen);
    // The same with the sampler's own generator, advanced where a token is drawn.
    int32_t sample_candidates(size_t n_vocab, std::span<const int32_t> ids, std::span<const float> raw,
                              std::span<const int32_t> history);

private:
    std::span<const int32_t> penalty_window(std::span<const int32_t> history) const;
    template <class Logit>
    void penalize(size_t n, std::span<const int32_t> history, Logit&& logit);
    int32_t from_topk(size_t n, size_t k, double u, bool dense);
    int32_t finish(size_t n, size_t k, double u, float best, double z, bool have_w1, bool dense, bool every_id, bool cut_known,
                   std::pair<float, int32_t> cut);
    size_t first_reaching(double target, bool strict, float best);
    bool edge_cut(float best, float scale, int b, double acc, double target, std::pair<float, int32_t>& cut);

    minfer_sampler_params params_;
    std::unordered_map<int32_t, float> bias_;
    Generator rng_;
    std::vector<float> work_;                        // scratch logits
    std::vector<std::pair<float, int32_t>> cand_;    // scratch candidates
    std::vector<int32_t> recent_;                    // scratch: sorted penalty window
    std::vector<float> prob_;                        // scratch: candidate weights by token id
    std::vector<std::pair<float, int32_t>> ordered_;  // scratch: the candidates in id order before top-p
    std::vector<uint8_t> kept_;                      // scratch: the draw's candidates by token id
    std::vector<double> block_;                      // scratch: the draw's block sums
    std::vector<std::pair<float, int32_t>> edge_;    // scratch: the tokens of the bucket where top-p's cut falls
};

namespace testing {
// The weights exp((in[i] - sub) / div), clamped to 0 below -87, as the sampler computes them: four lanes
// at a time (`wide` false) or eight (AVX2, where the CPU has it). The two must agree bit for bit.
void exp_weights(const float* in, float sub, float div, float* out, size_t n, bool wide);
bool exp_wide_available();
}  // namespace testing

}  // namespace minfer::sampling
