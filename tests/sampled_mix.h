// Sequences sampled every way the sampler allows, for the tests that hold the sampled rows' candidates
// (engine::testing::set_sample_candidates: the GPU's choice of each row's best logits) to the whole rows:
// a batch of 72 sequences (greedy, temperature alone, top-k from 1 to 250 with top-p, min-p and the
// penalties, one group of rows past Runner::kFetchRows) and five contexts (logit bias, penalties, greedy
// with a repeat penalty). Their tokens, batch sequences first in the order they were added. The same
// seed gives the same sequences and settings.
#pragma once

#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "minfer.h"

namespace test {

// Steps batch b until its sequences ids (as minfer_batch_add gave them) are done: each one's tokens, in
// the order of ids; every sequence must end with MINFER_OK.
inline std::vector<std::vector<int32_t>> step_until_done(minfer_batch* b, const std::vector<uint64_t>& ids, int max_steps) {
    const size_t n_seqs = ids.size();
    std::vector<std::vector<int32_t>> got(n_seqs);
    std::vector<minfer_batch_event> ev(n_seqs);
    size_t done = 0;
    for (int step = 0; step < max_steps && done < n_seqs; ++step) {
        size_t n = 0;
        REQUIRE_MESSAGE(minfer_batch_step(b, 0, ev.data(), n_seqs, &n) == MINFER_OK, minfer_last_error());
        for (size_t e = 0; e < n; ++e) {
            const size_t i = static_cast<size_t>(std::find(ids.begin(), ids.end(), ev[e].id) - ids.begin());
            REQUIRE(i < ids.size());
            if (ev[e].token >= 0) got[i].push_back(ev[e].token);
            if (ev[e].finished) {
                CHECK_MESSAGE(ev[e].status == MINFER_OK, ev[e].error);
                ++done;
            }
        }
    }
    CHECK(done == n_seqs);
    return got;
}

// The two runs of sampled_mix, every sequence's tokens alike; more than `min_tokens` tokens in all.
inline void check_same_mix(const std::vector<std::vector<int32_t>>& whole, const std::vector<std::vector<int32_t>>& cand, size_t min_tokens) {
    REQUIRE(whole.size() == cand.size());
    size_t same = 0, tokens = 0;
    for (size_t i = 0; i < whole.size(); ++i) {
        CAPTURE(i);
        CHECK(cand[i] == whole[i]);
        same += cand[i] == whole[i];
        tokens += whole[i].size();
    }
    CHECK(same == whole.size());
    CHECK(tokens > min_tokens);
}

inline std::vector<std::vector<int32_t>> sampled_mix(minfer_model* m, uint64_t seed) {
    std::mt19937_64 rng(seed);
    auto uni = [&](double a, double b) { return static_cast<float>(std::uniform_real_distribution<double>(a, b)(rng)); };
    const int vocab = minfer_model_n_vocab(m);
    auto prompt_of = [&](size_t n) {
        std::vector<int32_t> p(n);
        for (int32_t& t : p) t = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min(vocab, 256)));
        return p;
    };
    // The settings of sequence i: kind 0 greedy, 1 temperature alone (never cut short), the others top-k
    // (250 with penalties asks for more than 256 candidates: those rows go whole beside the others).
    auto settings = [&](int i, minfer_sampler_params& sp) {
        minfer_sampler_params_init(&sp);
        sp.seed = rng();
        sp.temperature = std::array<float, 3>{0.5f, 1.0f, 1.5f}[rng() % 3];
        const int kind = i % 8;
        if (kind == 1) {
            sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f;
            return;
        }
        sp.top_k = std::array<int32_t, 6>{1, 3, 40, 100, 200, 250}[rng() % 6];
        sp.top_p = rng() % 3 == 0 ? 1.0f : uni(0.5, 1.0);
        sp.min_p = rng() % 3 == 0 ? 0.0f : uni(0.0, 0.2);
        if (kind % 2 == 0) {
            sp.repeat_penalty = uni(1.1, 1.6);
            sp.presence_penalty = uni(0.0, 1.0);
            sp.frequency_penalty = uni(0.0, 0.5);
            sp.penalty_last_n = std::array<int32_t, 3>{8, 64, -1}[rng() % 3];
        }
    };
    std::vector<std::vector<int32_t>> got;

    constexpr int kSeqs = 72;
    minfer_batch_params bp;
    minfer_batch_params_init(&bp);
    bp.max_sequences = kSeqs;
    bp.max_step_tokens = kSeqs * 12;
    bp.kv_tokens = kSeqs * 40;
    minfer_batch* b = nullptr;
    REQUIRE_MESSAGE(minfer_batch_create(m, &bp, &b) == MINFER_OK, minfer_last_error());
    std::vector<uint64_t> ids(kSeqs);
    for (int i = 0; i < kSeqs; ++i) {
        const std::vector<int32_t> prompt = prompt_of(1 + rng() % 12);
        minfer_sampler_params sp;
        settings(i, sp);
        minfer_sequence_params q;
        minfer_sequence_params_init(&q);
        q.prompt = prompt.data();
        q.n_prompt = prompt.size();
        q.max_tokens = 12;
        q.sampler = i % 8 == 0 ? nullptr : &sp;
        REQUIRE(minfer_batch_add(b, &q, &ids[static_cast<size_t>(i)]) == MINFER_OK);
    }
    const std::vector<std::vector<int32_t>> batch = step_until_done(b, ids, 300);
    minfer_batch_free(b);
    got.insert(got.end(), batch.begin(), batch.end());

    // Contexts: top-k with a logit bias (one token pushed up, one banned) and penalties; the last one greedy
    // with a repeat penalty (no longer greedy_only: one candidate plus the penalized ones).
    for (int c = 0; c < 5; ++c) {
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        minfer_sampler_params sp;
        settings(2 + c, sp);
        if (c == 4) sp.temperature = 0.0f, sp.repeat_penalty = 1.5f, sp.penalty_last_n = 64;
        REQUIRE(minfer_context_set_sampler(ctx, &sp) == MINFER_OK);
        REQUIRE(minfer_context_set_logit_bias(ctx, static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)), uni(1.0, 4.0)) == MINFER_OK);
        REQUIRE(minfer_context_set_logit_bias(ctx, static_cast<int32_t>(rng() % static_cast<uint64_t>(vocab)), -INFINITY) == MINFER_OK);
        const std::vector<int32_t> prompt = prompt_of(3 + rng() % 10);
        REQUIRE(minfer_prefill(ctx, prompt.data(), prompt.size()) == MINFER_OK);
        std::vector<int32_t> toks;
        for (int i = 0; i < 24; ++i) {
            int32_t t = -1;
            REQUIRE_MESSAGE(minfer_decode(ctx, &t) == MINFER_OK, minfer_last_error());
            toks.push_back(t);
        }
        got.push_back(toks);
        minfer_context_free(ctx);
    }
    return got;
}

}  // namespace test
