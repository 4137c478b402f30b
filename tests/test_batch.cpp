// Batches (minfer_batch_*): many sequences in one forward pass, checked against each sequence run alone
// in a context; cancellation, KV pool exhaustion, queue limits, bad input, and threads adding and
// cancelling while one thread steps.
#include <doctest/doctest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <map>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "cpu/cpu_ops.h"         // testing::fail_next_thread_setups
#include "cuda/batch_runs.h"  // plain C++: the CUDA forward's cut of a batch
#include "engine/testing.h"
#include "helpers.h"
#include "sampled_mix.h"
#include "minfer.h"

namespace {

minfer_model* open_cpu(const std::string& path) {
    const char* keys[] = {"device", "threads"};
    const char* values[] = {"cpu", "2"};
    minfer_model* m = nullptr;
    REQUIRE_MESSAGE(minfer_open_with_options(path.c_str(), keys, values, 2, &m) == MINFER_OK, minfer_last_error());
    return m;
}

std::vector<int32_t> random_prompt(size_t n, int vocab, std::mt19937_64& rng) {
    std::vector<int32_t> t(n);
    // Ids below 256 are the synthetic vocabulary's byte tokens: ordinary text, never end-of-generation.
    for (auto& x : t) x = static_cast<int32_t>(rng() % static_cast<uint64_t>(std::min(vocab, 256)));
    return t;
}

// A sequence run alone in a context: its tokens, the text they make, and per token the gap between the
// two highest logits it was chosen from (a near tie may flip between two correct forward passes).
struct Alone {
    std::vector<int32_t> tokens;
    std::vector<float> gap;
    std::string text;
};

Alone run_alone(minfer_model* m, const std::vector<int32_t>& prompt, int max_tokens, const minfer_sampler_params* sp) {
    Alone a;
    minfer_context* ctx = nullptr;
    REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
    if (sp) REQUIRE(minfer_context_set_sampler(ctx, sp) == MINFER_OK);
    REQUIRE(minfer_prefill(ctx, prompt.data(), prompt.size()) == MINFER_OK);
    const int vocab = minfer_model_n_vocab(m);
    std::vector<float> logits(static_cast<size_t>(vocab));
    for (int i = 0; i < max_tokens; ++i) {
        REQUIRE(minfer_context_logits(ctx, logits.data(), logits.size()) == MINFER_OK);
        std::vector<float> sorted = logits;
        std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
        int32_t tok = -1;
        REQUIRE_MESSAGE(minfer_decode(ctx, &tok) == MINFER_OK, minfer_last_error());
        a.tokens.push_back(tok);
        a.gap.push_back(sorted[0] - sorted[1]);
        if (minfer_context_stop_reason(ctx) == MINFER_STOP_EOG) break;
    }
    minfer_context_free(ctx);
    std::vector<char> buf(4096);
    size_t len = 0;
    std::vector<int32_t> text_tokens = a.tokens;
    if (!text_tokens.empty() && minfer_token_is_eog(m, text_tokens.back())) text_tokens.pop_back();
    REQUIRE(minfer_detokenize(m, text_tokens.data(), text_tokens.size(), buf.data(), buf.size(), &len) == MINFER_OK);
    a.text.assign(buf.data(), len);
    return a;
}

// Greedy tokens of a batch sequence against the same sequence alone: equal, or equal up to a token
// chosen from a near tie (gap below 1e-3 of the logit scale), after which the two may differ.
void check_same_tokens(const std::vector<int32_t>& got, const Alone& want, bool exact_length) {
    size_t i = 0;
    for (; i < std::min(got.size(), want.tokens.size()); ++i) {
        if (got[i] == want.tokens[i]) continue;
        CAPTURE(i);
        CHECK_MESSAGE(want.gap[i] < 1e-3f, "tokens differ where the alone run's top two logits are " << want.gap[i] << " apart");
        return;
    }
    if (exact_length) CHECK(got.size() == want.tokens.size());
}

struct Seen {  // what a batch reported about one sequence
    std::vector<int32_t> tokens;
    std::string text;
    bool finished = false;
    minfer_status status = MINFER_OK;
    minfer_stop_reason reason = MINFER_STOP_NONE;
    int events_after_finish = 0;
};

// One step; records its events. Returns the number of events.
size_t step(minfer_batch* b, std::map<uint64_t, Seen>& seen, int wait_ms = 0) {
    minfer_batch_event ev[64];
    size_t n = 0;
    REQUIRE_MESSAGE(minfer_batch_step(b, wait_ms, ev, 64, &n) == MINFER_OK, minfer_last_error());
    for (size_t i = 0; i < n; ++i) {
        Seen& s = seen[ev[i].id];
        if (s.finished) ++s.events_after_finish;
        if (ev[i].token >= 0) s.tokens.push_back(ev[i].token);
        REQUIRE(ev[i].text != nullptr);
        REQUIRE(ev[i].text[ev[i].text_len] == 0);  // NUL-terminated (the text may hold NUL bytes itself)
        s.text.append(ev[i].text, ev[i].text_len);
        REQUIRE(ev[i].error != nullptr);
        if (ev[i].status != MINFER_OK) CHECK(std::strlen(ev[i].error) > 0);
        if (ev[i].finished) {
            s.finished = true;
            s.status = ev[i].status;
            s.reason = ev[i].reason;
        }
    }
    return n;
}

minfer_batch_stats stats(minfer_batch* b) {
    minfer_batch_stats s{};
    s.size = sizeof s;
    REQUIRE(minfer_batch_stats_get(b, &s) == MINFER_OK);
    return s;
}

uint64_t add(minfer_batch* b, const std::vector<int32_t>& prompt, int max_tokens, const minfer_sampler_params* sp = nullptr,
             std::vector<const char*> stops = {}) {
    minfer_sequence_params p;
    minfer_sequence_params_init(&p);
    p.prompt = prompt.data();
    p.n_prompt = prompt.size();
    p.max_tokens = max_tokens;
    p.sampler = sp;
    p.stops = stops.data();
    p.n_stops = stops.size();
    uint64_t id = 0;
    REQUIRE_MESSAGE(minfer_batch_add(b, &p, &id) == MINFER_OK, minfer_last_error());
    CHECK(id != 0);
    return id;
}

minfer_batch* make_batch(minfer_model* m, int max_seq, int step_tokens, int64_t kv_tokens = 0, int n_ctx = 0, int max_queue = 256) {
    minfer_batch_params bp;
    minfer_batch_params_init(&bp);
    bp.max_sequences = max_seq;
    bp.max_step_tokens = step_tokens;
    bp.kv_tokens = kv_tokens;
    bp.n_ctx = n_ctx;
    bp.max_queue = max_queue;
    minfer_batch* b = nullptr;
    REQUIRE_MESSAGE(minfer_batch_create(m, &bp, &b) == MINFER_OK, minfer_last_error());
    return b;
}

}  // namespace

TEST_SUITE("batch") {
    TEST_CASE("sequences joining and leaving at every step give the tokens each gives alone") {
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        for (const char* preset : {"qwen2-tiny", "qwen3-tiny"}) {
            CAPTURE(preset);
            const std::string path = test::tmp_path(std::string("batch-same-") + preset + ".gguf");
            REQUIRE(minfer_synth(path.c_str(), preset, "q8_0", rng()) == MINFER_OK);
            minfer_model* m = open_cpu(path);
            const int vocab = minfer_model_n_vocab(m);
            minfer_sampler_params sampled;
            minfer_sampler_params_init(&sampled);
            sampled.temperature = 0.9f;
            sampled.seed = rng();
            // 12 sequences over 4 slots: prompts of 1 to 70 tokens (prefill chunks cut at 24 tokens per step),
            // 1 to 24 new tokens; every third one sampled with a seed; a new one joins at each step.
            struct Want {
                std::vector<int32_t> prompt;
                int max_tokens;
                bool sampled;
                Alone alone;
            };
            std::vector<Want> want;
            for (int i = 0; i < 12; ++i) {
                Want w;
                w.prompt = random_prompt(1 + rng() % 70, vocab, rng);
                w.max_tokens = 1 + static_cast<int>(rng() % 24);
                w.sampled = i % 3 == 2;
                w.alone = run_alone(m, w.prompt, w.max_tokens, w.sampled ? &sampled : nullptr);
                want.push_back(std::move(w));
            }
            minfer_batch* b = make_batch(m, 4, 24);
            std::map<uint64_t, Seen> seen;
            std::vector<uint64_t> ids;
            size_t next = 0;
            for (int steps = 0; steps < 1000; ++steps) {
                if (next < want.size()) {
                    ids.push_back(add(b, want[next].prompt, want[next].max_tokens, want[next].sampled ? &sampled : nullptr));
                    ++next;
                }
                step(b, seen);
                const minfer_batch_stats st = stats(b);
                CHECK(st.last_step_tokens <= 24);
                CHECK(st.active <= 4);
                if (next == want.size() && st.active == 0 && st.queued == 0) break;
            }
            for (size_t i = 0; i < want.size(); ++i) {
                CAPTURE(i);
                const Seen& s = seen[ids[i]];
                REQUIRE(s.finished);
                CHECK(s.status == MINFER_OK);
                CHECK(s.events_after_finish == 0);
                if (want[i].sampled) {
                    CHECK(s.tokens == want[i].alone.tokens);  // the same draws from the same logits
                } else {
                    check_same_tokens(s.tokens, want[i].alone, true);
                }
                if (s.tokens == want[i].alone.tokens) {
                    CHECK(s.text == want[i].alone.text);
                    CHECK(s.reason == (minfer_token_is_eog(m, s.tokens.back()) ? MINFER_STOP_EOG : MINFER_STOP_LENGTH));
                }
            }
            const minfer_batch_stats st = stats(b);
            CHECK(st.kv_pages_free == st.kv_pages);
            CHECK(st.tokens_generated > 0);
            minfer_batch_free(b);
            minfer_close(m);
        }
    }

    TEST_CASE("a step of many sampled rows (side by side, in two groups) draws for each what it draws alone") {
        // 90 sequences in lockstep, 72 of them sampled, each with its own seed, the others greedy between
        // them: each decode step samples 72 rows, more than one group of Runner::kFetchRows (64), on the
        // sampling threads (threads = 2). A row read or written at the wrong place, a group left out or
        // a generator shared between threads changes some sequence's draws.
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        minfer::engine::testing::set_batch_fetch(true);  // the rows together, whatever MINFER_SAMPLE_TOGETHER built
        const std::string path = test::tmp_path("batch-sampled-rows.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", rng()) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        const int vocab = minfer_model_n_vocab(m);
        constexpr int kSeqs = 90;
        struct Want {
            std::vector<int32_t> prompt;
            int max_tokens = 0;
            minfer_sampler_params sp{};
            bool sampled = false;
            Alone alone;
            uint64_t id = 0;
        };
        std::vector<Want> want(kSeqs);
        for (int i = 0; i < kSeqs; ++i) {
            Want& w = want[static_cast<size_t>(i)];
            w.prompt = random_prompt(1 + rng() % 6, vocab, rng);
            w.max_tokens = 3 + static_cast<int>(rng() % 4);
            w.sampled = i % 5 != 4;
            minfer_sampler_params_init(&w.sp);
            w.sp.temperature = 1.0f;  // temperature alone (top_k 0, top_p 1, min_p 0): every token a candidate
            w.sp.top_k = 0;
            w.sp.top_p = 1.0f;
            w.sp.min_p = 0.0f;
            w.sp.seed = rng();
            w.alone = run_alone(m, w.prompt, w.max_tokens, w.sampled ? &w.sp : nullptr);
        }
        minfer_batch* b = make_batch(m, kSeqs, kSeqs * 8);
        for (Want& w : want) w.id = add(b, w.prompt, w.max_tokens, w.sampled ? &w.sp : nullptr);
        std::map<uint64_t, Seen> seen;
        int widest = 0;
        for (int steps = 0; steps < 200; ++steps) {
            const size_t n = step(b, seen);
            widest = std::max(widest, stats(b).last_step_sequences);
            const minfer_batch_stats st = stats(b);
            if (n == 0 && st.active == 0 && st.queued == 0) break;
        }
        CHECK(widest == kSeqs);  // every sequence decoded in the same steps
        size_t sampled_same = 0;
        for (const Want& w : want) {
            CAPTURE(w.id);
            const Seen& s = seen[w.id];
            REQUIRE(s.finished);
            CHECK(s.status == MINFER_OK);
            if (w.sampled) {
                CHECK(s.tokens == w.alone.tokens);
                sampled_same += s.tokens == w.alone.tokens;
            } else {
                check_same_tokens(s.tokens, w.alone, true);
            }
        }
        CHECK(sampled_same == 72);
        minfer_batch_free(b);
        minfer_close(m);
    }

    TEST_CASE("sampled rows cut short by top-k draw from their candidates what they draw from the whole rows") {
        // The CPU runner brings candidates here only for the tests (engine::testing::set_host_candidates):
        // the decode's and the batch's way through them (which rows go by candidates, how many, the
        // penalized and biased tokens with them, a group's rows mixed with whole ones), end to end. The
        // GPU's own choice of the candidates: cuda_tests and topk_emu.
        struct Restore {
            ~Restore() {
                minfer::engine::testing::set_sample_candidates(true);
                minfer::engine::testing::set_host_candidates(false);
            }
        } restore;
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        const std::string path = test::tmp_path("batch-candidates.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", rng()) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        const uint64_t mix = rng();
        minfer::engine::testing::set_sample_candidates(false);
        const auto whole = test::sampled_mix(m, mix);
        minfer::engine::testing::set_sample_candidates(true);
        minfer::engine::testing::set_host_candidates(true);
        test::check_same_mix(whole, test::sampled_mix(m, mix), 500);
        minfer_close(m);
    }

    TEST_CASE("stop strings: the text ends before the first stop string, also across tokens") {
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        const std::string path = test::tmp_path("batch-stops.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", rng()) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        const int vocab = minfer_model_n_vocab(m);
        int tried = 0;
        for (int attempt = 0; attempt < 40 && tried < 6; ++attempt) {
            const std::vector<int32_t> prompt = random_prompt(5, vocab, rng);
            const Alone a = run_alone(m, prompt, 40, nullptr);
            // A stop string of 2 to 4 bytes from the middle of the text, on character boundaries.
            const std::string& t = a.text;
            if (t.size() < 12) continue;
            size_t at = t.size() / 3 + rng() % (t.size() / 3);
            while (at < t.size() && (static_cast<unsigned char>(t[at]) & 0xC0) == 0x80) ++at;
            size_t end = std::min(t.size(), at + 2 + rng() % 3);
            while (end < t.size() && (static_cast<unsigned char>(t[end]) & 0xC0) == 0x80) ++end;
            if (at >= end) continue;
            const std::string stop = t.substr(at, end - at);
            // Stop strings are C strings: one holding a NUL byte (a byte token's text) would be cut there,
            // and one cut to nothing is refused by minfer_batch_add.
            if (stop.find('\0') != std::string::npos) continue;
            const size_t first = t.find(stop);
            ++tried;
            CAPTURE(stop);
            minfer_batch* b = make_batch(m, 2, 16);
            const uint64_t id = add(b, prompt, 40, nullptr, {stop.c_str(), "a stop string never generated \x01\x02"});
            std::map<uint64_t, Seen> seen;
            for (int i = 0; i < 200 && !seen[id].finished; ++i) step(b, seen);
            const Seen& s = seen[id];
            CHECK(s.finished);
            CHECK(s.status == MINFER_OK);
            CHECK(s.reason == MINFER_STOP_STRING);
            CHECK(s.text == t.substr(0, first));
            minfer_batch_free(b);
        }
        CHECK(tried >= 3);
        minfer_close(m);
    }

    TEST_CASE("cancelling mid-prefill and mid-decode frees the sequence; the others go on") {
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        const std::string path = test::tmp_path("batch-cancel.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q4_0", rng()) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        const int vocab = minfer_model_n_vocab(m);
        const std::vector<int32_t> long_prompt = random_prompt(100, vocab, rng), p3 = random_prompt(9, vocab, rng);
        // The sequence cancelled mid-decode must still be decoding then (a random tiny model may pick an
        // end-of-generation token at once): a prompt whose greedy continuation runs at least 10 tokens.
        std::vector<int32_t> p2 = random_prompt(7, vocab, rng);
        for (int i = 0; i < 100 && run_alone(m, p2, 10, nullptr).tokens.size() < 10; ++i) p2 = random_prompt(7, vocab, rng);
        REQUIRE(run_alone(m, p2, 10, nullptr).tokens.size() == 10);
        const Alone keep = run_alone(m, p3, 20, nullptr);
        minfer_batch* b = make_batch(m, 3, 16);
        std::map<uint64_t, Seen> seen;
        const uint64_t in_decode = add(b, p2, 50);
        const uint64_t kept = add(b, p3, 20);
        step(b, seen);  // both prompts read (prefill goes in arrival order)
        const uint64_t in_prefill = add(b, long_prompt, 10);
        step(b, seen);
        step(b, seen);  // the long prompt is still being read (14 tokens per step beside two decode tokens)
        CHECK(seen[in_prefill].tokens.empty());
        CHECK(!seen[in_decode].tokens.empty());
        CHECK(minfer_batch_cancel(b, in_prefill) == MINFER_OK);
        CHECK(minfer_batch_cancel(b, in_decode) == MINFER_OK);
        CHECK(minfer_batch_cancel(b, in_decode) == MINFER_OK);  // twice before the step: still known
        step(b, seen);
        CHECK(seen[in_prefill].finished);
        CHECK(seen[in_prefill].status == MINFER_ERR_CANCELLED);
        CHECK(seen[in_decode].finished);
        CHECK(seen[in_decode].status == MINFER_ERR_CANCELLED);
        CHECK(minfer_batch_cancel(b, in_decode) == MINFER_ERR_NOT_FOUND);
        CHECK(minfer_batch_cancel(b, 987654321) == MINFER_ERR_NOT_FOUND);
        // A queued sequence cancelled before it ever ran.
        const uint64_t queued = add(b, p2, 5);
        CHECK(minfer_batch_cancel(b, queued) == MINFER_OK);
        for (int i = 0; i < 100 && !(seen[kept].finished && seen[queued].finished); ++i) step(b, seen);
        CHECK(seen[queued].status == MINFER_ERR_CANCELLED);
        CHECK(seen[queued].tokens.empty());
        CHECK(seen[kept].status == MINFER_OK);
        check_same_tokens(seen[kept].tokens, keep, true);
        const minfer_batch_stats st = stats(b);
        CHECK(st.active == 0);
        CHECK(st.queued == 0);
        CHECK(st.kv_pages_free == st.kv_pages);
        minfer_batch_free(b);
        minfer_close(m);
    }

    TEST_CASE("an exhausted KV pool fails the sequence that needs a page; the others finish") {
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        const std::string path = test::tmp_path("batch-pool.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", rng()) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        const int vocab = minfer_model_n_vocab(m);
        const std::vector<int32_t> pa = random_prompt(8, vocab, rng), pb = random_prompt(8, vocab, rng);
        const Alone a = run_alone(m, pa, 200, nullptr), bb = run_alone(m, pb, 10, nullptr);
        // 64 positions (4 pages) for both; sequences of up to 512 positions.
        minfer_batch* b = make_batch(m, 2, 16, 64, 512);
        CHECK(stats(b).kv_pages == 4);
        std::map<uint64_t, Seen> seen;
        const uint64_t ida = add(b, pa, 200), idb = add(b, pb, 10);
        for (int i = 0; i < 300 && !(seen[ida].finished && seen[idb].finished); ++i) step(b, seen);
        CHECK(seen[idb].status == MINFER_OK);
        check_same_tokens(seen[idb].tokens, bb, true);
        if (a.tokens.size() > 60) {  // a grows past the pool (it did not end first)
            CHECK(seen[ida].status == MINFER_ERR_OUT_OF_MEMORY);
            CHECK(seen[ida].tokens.size() == 64 - pa.size() + 1);  // positions 0 .. 63 fed, plus the last sampled
            check_same_tokens(seen[ida].tokens, a, false);
        }
        // The pool is whole again, and a new sequence runs.
        CHECK(stats(b).kv_pages_free == 4);
        const uint64_t idc = add(b, pb, 10);
        for (int i = 0; i < 100 && !seen[idc].finished; ++i) step(b, seen);
        CHECK(seen[idc].status == MINFER_OK);
        check_same_tokens(seen[idc].tokens, bb, true);
        // A prompt larger than the pool is refused at once.
        const std::vector<int32_t> huge = random_prompt(65, vocab, rng);
        minfer_sequence_params p;
        minfer_sequence_params_init(&p);
        p.prompt = huge.data();
        p.n_prompt = huge.size();
        uint64_t id = 0;
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);
        minfer_batch_free(b);
        minfer_close(m);
    }

    // A forward can fail with something other than the library's own errors: here the CPU backend's
    // setup of new threads throws std::bad_alloc. The sequences of that forward fail with
    // OUT_OF_MEMORY events, the step itself succeeds, and the batch serves the next ones.
    TEST_CASE("a forward that runs out of host memory fails its sequences alone; the step and the batch go on") {
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        const std::string path = test::tmp_path("batch-oom.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", rng()) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        const int vocab = minfer_model_n_vocab(m);
        const std::vector<int32_t> pa = random_prompt(8, vocab, rng), pb = random_prompt(5, vocab, rng);
        minfer_batch* b = make_batch(m, 2, 16);
        std::map<uint64_t, Seen> seen;
        const uint64_t ida = add(b, pa, 10), idb = add(b, pb, 10);
        REQUIRE(minfer_set_option(m, "threads", "3") == MINFER_OK);  // the next forward sets the backend up anew
        minfer::cpu::testing::fail_next_thread_setups(1);
        step(b, seen);  // (it requires MINFER_OK)
        minfer::cpu::testing::fail_next_thread_setups(0);
        for (uint64_t id : {ida, idb}) {
            CAPTURE(id);
            CHECK(seen[id].finished);
            CHECK(seen[id].status == MINFER_ERR_OUT_OF_MEMORY);
            CHECK(seen[id].tokens.empty());
        }
        CHECK(stats(b).active == 0);
        CHECK(stats(b).kv_pages_free == stats(b).kv_pages);
        // The batch goes on, on three threads: a sequence gives the tokens it gives alone.
        const Alone a = run_alone(m, pa, 10, nullptr);
        const uint64_t idc = add(b, pa, 10);
        for (int i = 0; i < 100 && !seen[idc].finished; ++i) step(b, seen);
        CHECK(seen[idc].status == MINFER_OK);
        check_same_tokens(seen[idc].tokens, a, true);
        minfer_batch_free(b);
        minfer_close(m);
    }

    TEST_CASE("a burst of long prompts waits for pages instead of starving the running sequences") {
        const uint64_t seed = test::seed();
        CAPTURE(seed);
        std::mt19937_64 rng(seed);
        const std::string path = test::tmp_path("batch-burst.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", rng()) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        const int vocab = minfer_model_n_vocab(m);
        // 64 pages; 4 prompts of 25 pages each arrive at once. Admitted together they would take every
        // page and fail each other's decode tokens; admitted as pages allow, all finish.
        minfer_batch* b = make_batch(m, 4, 64, 64 * 16, 512);
        std::map<uint64_t, Seen> seen;
        std::vector<uint64_t> ids;
        for (int i = 0; i < 4; ++i) ids.push_back(add(b, random_prompt(400, vocab, rng), 40));
        for (int i = 0; i < 2000; ++i) {
            step(b, seen);
            const minfer_batch_stats st = stats(b);
            if (st.active == 0 && st.queued == 0) break;
        }
        for (uint64_t id : ids) {
            CAPTURE(id);
            CHECK(seen[id].finished);
            CHECK(seen[id].status == MINFER_OK);
        }
        CHECK(stats(b).kv_pages_free == 64);
        minfer_batch_free(b);
        minfer_close(m);
    }

    TEST_CASE("bad input and BUSY: clear statuses, nothing changes") {
        const std::string path = test::tmp_path("batch-bad.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", 5) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        minfer_batch_params bp;
        minfer_batch_params_init(&bp);
        minfer_batch* b = nullptr;
        CHECK(minfer_batch_create(nullptr, &bp, &b) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_batch_create(m, nullptr, &b) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_batch_create(m, &bp, nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        bp.size = 3;
        CHECK(minfer_batch_create(m, &bp, &b) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(std::string(minfer_last_error()).find("size") != std::string::npos);
        minfer_batch_params_init(&bp);
        bp.max_sequences = 0;
        CHECK(minfer_batch_create(m, &bp, &b) == MINFER_ERR_INVALID_ARGUMENT);
        bp.max_sequences = 8;
        bp.max_queue = 0;
        CHECK(minfer_batch_create(m, &bp, &b) == MINFER_ERR_INVALID_ARGUMENT);
        bp.max_queue = 256;
        bp.max_sequences = 8;
        bp.max_step_tokens = 4;
        CHECK(minfer_batch_create(m, &bp, &b) == MINFER_ERR_INVALID_ARGUMENT);
        bp.max_step_tokens = 512;
        bp.n_ctx = (1 << 22) + 1;  // past the ctx_len option's bound: refused, not left to fail every step
        CHECK(minfer_batch_create(m, &bp, &b) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(std::string(minfer_last_error()).find("n_ctx") != std::string::npos);
        CHECK(b == nullptr);

        b = make_batch(m, 2, 8, 0, 64, 2);
        const std::vector<int32_t> ok = {1, 2, 3};
        minfer_sequence_params p;
        minfer_sequence_params_init(&p);
        uint64_t id = 0;
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);  // empty prompt
        p.prompt = ok.data();
        p.n_prompt = ok.size();
        p.size = 0;
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);
        p.size = sizeof p;
        const std::vector<int32_t> bad = {1, minfer_model_n_vocab(m), 3};
        p.prompt = bad.data();
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);
        p.prompt = ok.data();
        p.n_prompt = 65;  // longer than n_ctx: refused before a token is read
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);
        p.n_prompt = ok.size();
        p.max_tokens = -1;
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);
        p.max_tokens = 4;
        minfer_sampler_params sp;
        minfer_sampler_params_init(&sp);
        sp.temperature = NAN;
        p.sampler = &sp;
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);
        p.sampler = nullptr;
        const char* empty_stop[] = {""};
        p.stops = empty_stop;
        p.n_stops = 1;
        CHECK(minfer_batch_add(b, &p, &id) == MINFER_ERR_INVALID_ARGUMENT);
        p.stops = nullptr;
        p.n_stops = 0;
        CHECK(minfer_batch_add(b, &p, nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(stats(b).queued == 0);

        // The queue holds 2.
        uint64_t a1 = 0, a2 = 0, a3 = 0;
        CHECK(minfer_batch_add(b, &p, &a1) == MINFER_OK);
        CHECK(minfer_batch_add(b, &p, &a2) == MINFER_OK);
        CHECK(minfer_batch_add(b, &p, &a3) == MINFER_ERR_BUSY);
        CHECK(stats(b).queued == 2);
        minfer_batch_event ev[4];
        size_t n = 0;
        CHECK(minfer_batch_step(b, 0, ev, 0, &n) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_batch_step(b, -1, ev, 4, &n) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_batch_step(nullptr, 0, ev, 4, &n) == MINFER_ERR_INVALID_ARGUMENT);
        CHECK(minfer_batch_stats_get(b, nullptr) == MINFER_ERR_INVALID_ARGUMENT);
        minfer_batch_stats st{};
        CHECK(minfer_batch_stats_get(b, &st) == MINFER_ERR_INVALID_ARGUMENT);  // size not set

        // Events beyond `cap` wait for the next call, which runs no forward pass.
        std::map<uint64_t, Seen> seen;
        CHECK(minfer_batch_step(b, 0, ev, 4, &n) == MINFER_OK);  // both admitted, both prefilled
        CHECK(n == 2);
        const uint64_t steps = stats(b).steps;
        CHECK(minfer_batch_step(b, 0, ev, 1, &n) == MINFER_OK);
        CHECK(n == 1);
        CHECK(stats(b).steps == steps + 1);
        CHECK(minfer_batch_step(b, 0, ev, 1, &n) == MINFER_OK);
        CHECK(n == 1);
        CHECK(stats(b).steps == steps + 1);

        // A second thread stepping while one waits in a step gets BUSY.
        for (int i = 0; i < 50 && (stats(b).active > 0 || stats(b).queued > 0); ++i) step(b, seen);
        std::atomic<bool> started{false};
        std::thread waiter([&] {
            minfer_batch_event e[4];
            size_t k = 0;
            started = true;
            // BUSY cuts both ways: one of the main thread's polling steps below may hold the batch when this
            // one comes in; then it tries again.
            minfer_status st = MINFER_ERR_BUSY;
            for (int i = 0; i < 1000 && st == MINFER_ERR_BUSY; ++i) st = minfer_batch_step(b, 2000, e, 4, &k);
            CHECK(st == MINFER_OK);
        });
        while (!started) std::this_thread::yield();
        // Until the waiter is inside its step (on a loaded machine it may start late; a step before that
        // finds nothing to do and returns at once), polled well within the waiter's 2 s.
        minfer_status busy = MINFER_OK;
        for (int i = 0; i < 300 && busy == MINFER_OK; ++i) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
            busy = minfer_batch_step(b, 0, ev, 4, &n);
        }
        CHECK(busy == MINFER_ERR_BUSY);
        CHECK(minfer_batch_add(b, &p, &a3) == MINFER_OK);  // wakes the waiter
        waiter.join();
        for (int i = 0; i < 50 && (stats(b).active > 0 || stats(b).queued > 0); ++i) step(b, seen);
        CHECK(stats(b).kv_pages_free == stats(b).kv_pages);
        minfer_batch_free(b);
        minfer_batch_free(nullptr);
        minfer_close(m);
    }
}

TEST_SUITE("batch") {
    // The CUDA forward's cut of a chunk (cuda/batch_runs.h: plain C++, run here without a GPU): a slot whose
    // rows are apart in the batch (engine::Runner allows it) gets a decode attention launch per row, since
    // the decode kernel copies a row's earlier keys before its wait, as written by earlier steps.
    TEST_CASE("the CUDA forward's runs and decode launches: a slot's second row of a step starts a launch") {
        using minfer::cuda::BatchRun;
        auto cut = [](std::vector<int32_t> pos, std::vector<int32_t> seq, size_t c0, size_t c1) {
            std::vector<BatchRun> runs;
            minfer::cuda::batch_runs(pos, seq, c0, c1, runs);
            return runs;
        };
        auto launches = [](const std::vector<BatchRun>& runs, size_t limit) {
            std::vector<std::pair<size_t, size_t>> out;  // [r, e) of each decode launch
            for (size_t r = 0; r < runs.size();) {
                if (runs[r].n > 1) {
                    ++r;
                    continue;
                }
                const size_t e = minfer::cuda::decode_group_end(runs, r, limit);
                out.emplace_back(r, e);
                r = e;
            }
            return out;
        };
        using L = std::vector<std::pair<size_t, size_t>>;
        // Slot 0 at 5, slot 1 at 9, slot 0 at 6: three runs, slot 0 twice; its second row a launch of its own.
        std::vector<BatchRun> runs = cut({5, 9, 6}, {0, 1, 0}, 0, 3);
        REQUIRE(runs.size() == 3);
        CHECK(runs[2].begin == 2);
        CHECK(runs[2].pos0 == 6);
        CHECK(runs[2].slot == 0);
        CHECK(minfer::cuda::slot_repeats(runs));
        CHECK(launches(runs, 16) == L{{0, 2}, {2, 3}});
        // Only the step's last decode launch may let its dependent start before its wait.
        CHECK_FALSE(minfer::cuda::decode_launch_last(runs, 2));
        CHECK(minfer::cuda::decode_launch_last(runs, 3));
        // Adjacent rows at consecutive positions are one run (a prefill chunk): no repeat, no decode launch.
        runs = cut({5, 6, 9}, {0, 0, 1}, 0, 3);
        REQUIRE(runs.size() == 2);
        CHECK(runs[0].n == 2);
        CHECK_FALSE(minfer::cuda::slot_repeats(runs));
        CHECK(launches(runs, 16) == L{{1, 2}});
        // Distinct slots: one launch up to the limit (the batch's sequences), then the next.
        runs = cut({3, 4, 5, 6, 7}, {0, 1, 2, 3, 4}, 0, 5);
        CHECK_FALSE(minfer::cuda::slot_repeats(runs));
        CHECK(launches(runs, 16) == L{{0, 5}});
        CHECK(launches(runs, 2) == L{{0, 2}, {2, 4}, {4, 5}});
        // A prefill chunk ends a launch; a chunk of the batch counts rows from its own start; the same slot
        // at a position that does not follow is a run of its own.
        runs = cut({1, 2, 3, 40, 41, 7, 8, 2}, {5, 5, 5, 3, 3, 1, 9, 5}, 2, 8);
        REQUIRE(runs.size() == 5);
        CHECK(runs[0].begin == 0);
        CHECK(runs[0].slot == 5);
        CHECK(runs[1].n == 2);
        CHECK(runs[4].begin == 5);
        CHECK(runs[4].pos0 == 2);
        CHECK(minfer::cuda::slot_repeats(runs));
        CHECK(launches(runs, 16) == L{{0, 1}, {2, 5}});
        CHECK_FALSE(minfer::cuda::decode_launch_last(runs, 1));
        CHECK(minfer::cuda::decode_launch_last(runs, 5));
        // A prefill chunk after the last decode launch does not count.
        runs = cut({9, 3, 4}, {1, 0, 0}, 0, 3);
        CHECK(launches(runs, 16) == L{{0, 1}});
        CHECK(minfer::cuda::decode_launch_last(runs, 1));
        runs = cut({4, 4, 5, 5}, {2, 3, 2, 3}, 0, 4);
        CHECK(launches(runs, 16) == L{{0, 2}, {2, 4}});
        // Adjacent rows of one slot whose positions do not follow are two runs.
        runs = cut({5, 7}, {0, 0}, 0, 2);
        REQUIRE(runs.size() == 2);
        CHECK(launches(runs, 16) == L{{0, 1}, {1, 2}});
    }
}

TEST_SUITE("concurrency") {
    TEST_CASE("batch: threads add and cancel while one thread steps; every sequence is reported once") {
        const std::string path = test::tmp_path("batch-threads.gguf");
        REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "q8_0", 11) == MINFER_OK);
        minfer_model* m = open_cpu(path);
        minfer_batch* b = make_batch(m, 4, 32, 512, 128, 1000);
        std::atomic<bool> stop{false};
        std::mutex mu;
        std::set<uint64_t> added;
        std::map<uint64_t, Seen> seen;
        std::thread stepper([&] {
            while (!stop) step(b, seen, 5);
        });
        std::vector<std::thread> clients;
        for (int t = 0; t < 3; ++t)
            clients.emplace_back([&, t] {
                std::mt19937_64 rng(100 + t);
                for (int i = 0; i < 8; ++i) {
                    const std::vector<int32_t> prompt = random_prompt(1 + rng() % 20, 256, rng);
                    minfer_sequence_params p;
                    minfer_sequence_params_init(&p);
                    p.prompt = prompt.data();
                    p.n_prompt = prompt.size();
                    p.max_tokens = 1 + static_cast<int>(rng() % 8);
                    uint64_t id = 0;
                    if (minfer_batch_add(b, &p, &id) != MINFER_OK) continue;
                    {
                        std::lock_guard<std::mutex> lock(mu);
                        added.insert(id);
                    }
                    if (rng() % 3 == 0) {
                        const minfer_status st = minfer_batch_cancel(b, id);
                        CHECK((st == MINFER_OK || st == MINFER_ERR_NOT_FOUND));  // it may have finished already
                    }
                    minfer_batch_stats s{};
                    s.size = sizeof s;
                    CHECK(minfer_batch_stats_get(b, &s) == MINFER_OK);
                }
            });
        for (auto& c : clients) c.join();
        for (int i = 0; i < 12000; ++i) {  // until idle, up to 60 s (a loaded machine)
            std::this_thread::sleep_for(std::chrono::milliseconds(5));
            minfer_batch_stats s{};
            s.size = sizeof s;
            REQUIRE(minfer_batch_stats_get(b, &s) == MINFER_OK);
            if (s.active == 0 && s.queued == 0) break;
        }
        stop = true;
        stepper.join();
        CHECK(added.size() == 24);
        CHECK(seen.size() == added.size());  // no events for an id that was not added
        for (uint64_t id : added) {
            CAPTURE(id);
            if (seen.count(id) == 0) {
                FAIL_CHECK("no event for a sequence that was added");
                continue;
            }
            const Seen& s = seen.at(id);
            CHECK(s.finished);
            CHECK(s.events_after_finish == 0);
            CHECK((s.status == MINFER_OK || s.status == MINFER_ERR_CANCELLED));
        }
        minfer_batch_free(b);
        minfer_close(m);
    }
}
