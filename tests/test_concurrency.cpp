// What the header promises about threads, exercised with real work on several threads at once: the
// read-only context queries while another thread decodes on that context, runtime options changed
// while a model runs, and contexts of one model decoding in parallel. scripts/test also runs this suite
// under ThreadSanitizer, which is what finds a data race here; without it these tests check the values.
#include <doctest/doctest.h>

#include <algorithm>
#include <cstdio>
#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include <sched.h>

#include "cpu/threadpool.h"
#include "helpers.h"

namespace {

minfer_model* open_tiny(const char* name) {
    const std::string path = test::tmp_path(name);
    REQUIRE(minfer_synth(path.c_str(), "qwen2-tiny", "f16", 5) == MINFER_OK);
    const char* k[] = {"device", "ctx_len"};
    const char* v[] = {"cpu", "64"};
    minfer_model* m = nullptr;
    REQUIRE_MESSAGE(minfer_open_with_options(path.c_str(), k, v, 2, &m) == MINFER_OK, std::string(minfer_last_error()));
    return m;
}

}  // namespace

TEST_SUITE("concurrency") {
    TEST_CASE("threads=0 is one thread per physical core; the pool runs every task once on any count") {
        using minfer::cpu::physical_cores;
        using minfer::cpu::resolve_threads;
        const int cores = physical_cores();
        CHECK(cores >= 1);
        CHECK(cores <= static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
        CHECK(resolve_threads(0) == cores);
        CHECK(resolve_threads(3) == 3);
        // Independently: lscpu's (core, socket) pairs, where lscpu is installed and this process may use
        // every CPU (as in CI).
        if (FILE* f = popen("lscpu -p=CORE,SOCKET 2>/dev/null | grep -v '^#' | sort -u | wc -l", "r")) {
            int n = 0;
            const bool read = fscanf(f, "%d", &n) == 1;
            pclose(f);
            if (read && n > 0 && static_cast<unsigned>(n) <= std::thread::hardware_concurrency()) {
                cpu_set_t set;
                CPU_ZERO(&set);
                if (sched_getaffinity(0, sizeof set, &set) == 0 && static_cast<unsigned>(CPU_COUNT(&set)) == std::thread::hardware_concurrency())
                    CHECK(cores == n);
            }
        }
        for (int threads : {1, 2, 5}) {
            minfer::cpu::ThreadPool pool(threads);
            for (int64_t n : {1, 2, 7, 1000}) {
                std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
                for (int round = 0; round < 3; ++round) pool.parallel_for(n, [&](int64_t t, int) { hits[static_cast<size_t>(t)]++; });
                for (auto& h : hits) CHECK(h.load() == 3);
            }
        }
    }
}

TEST_SUITE("concurrency") {
    TEST_CASE("n_past and stop_reason may be read while another thread prefills and decodes") {
        minfer_model* m = open_tiny("conc-poll.gguf");
        minfer_context* ctx = nullptr;
        REQUIRE(minfer_context_create(m, &ctx) == MINFER_OK);
        const int32_t n_ctx = minfer_context_n_ctx(ctx);
        const int32_t eog = 258;  // the synthetic vocabulary's end of text
        REQUIRE(minfer_token_is_eog(m, eog) == 1);
        constexpr int kRounds = 6, kDecodes = 10;
        std::atomic<bool> done{false};
        std::atomic<int> failures{0};
        std::thread worker([&] {
            const int32_t prompt[] = {10, 20, 30, 40};
            for (int round = 0; round < kRounds; ++round) {
                if (minfer_context_reset(ctx) != MINFER_OK) ++failures;
                // Every other round ends each decode with an end-of-generation token, so the stop reason
                // changes value too.
                if (minfer_context_set_logit_bias(ctx, eog, round % 2 ? 1e9f : 0.0f) != MINFER_OK) ++failures;
                if (minfer_prefill(ctx, prompt, 4) != MINFER_OK) ++failures;
                for (int i = 0; i < kDecodes; ++i) {
                    int32_t t = -1;
                    if (minfer_decode(ctx, &t) != MINFER_OK) ++failures;
                }
            }
            done.store(true);
        });
        long out_of_range = 0, bad_reason = 0;
        int32_t highest = 0;
        do {  // at least once, even if the worker is done already
            const int32_t n = minfer_context_n_past(ctx);
            const minfer_stop_reason r = minfer_context_stop_reason(ctx);
            if (n < 0 || n > n_ctx) ++out_of_range;
            highest = std::max(highest, n);
            if (r != MINFER_STOP_NONE && r != MINFER_STOP_EOG && r != MINFER_STOP_STRING) ++bad_reason;
        } while (!done.load());
        worker.join();
        CHECK(failures == 0);
        CHECK(out_of_range == 0);
        CHECK(bad_reason == 0);
        CHECK(highest <= 4 + kDecodes);
        CHECK(minfer_context_n_past(ctx) == 4 + kDecodes);
        CHECK(minfer_context_stop_reason(ctx) == MINFER_STOP_EOG);
        minfer_context_free(ctx);
        minfer_close(m);
    }

    TEST_CASE("contexts of one model decode in parallel while its runtime options change") {
        minfer_model* m = open_tiny("conc-parallel.gguf");
        constexpr int kThreads = 3, kDecodes = 12;
        std::vector<std::vector<int32_t>> out(kThreads);
        std::atomic<int> failures{0};
        std::atomic<bool> done{false};
        std::vector<std::thread> workers;
        for (int w = 0; w < kThreads; ++w)
            workers.emplace_back([&, w] {
                minfer_context* ctx = nullptr;
                if (minfer_context_create(m, &ctx) != MINFER_OK) {
                    ++failures;
                    return;
                }
                const int32_t prompt[] = {7, 8, 9};
                if (minfer_prefill(ctx, prompt, 3) != MINFER_OK) ++failures;
                for (int i = 0; i < kDecodes; ++i) {
                    int32_t t = -1;
                    if (minfer_decode(ctx, &t) != MINFER_OK) ++failures;
                    out[static_cast<size_t>(w)].push_back(t);
                }
                minfer_context_free(ctx);
            });
        std::thread options([&] {
            for (int i = 0; !done.load(); i = (i + 1) % 3) {
                const char* threads[] = {"1", "2", "0"};
                if (minfer_set_option(m, "threads", threads[i]) != MINFER_OK) ++failures;
                char buf[16];
                size_t len = 0;
                if (minfer_get_option(m, "threads", buf, sizeof buf, &len) != MINFER_OK) ++failures;
                std::this_thread::yield();
            }
        });
        for (auto& t : workers) t.join();
        done.store(true);
        options.join();
        CHECK(failures == 0);
        for (int w = 1; w < kThreads; ++w) CHECK(out[static_cast<size_t>(w)] == out[0]);  // greedy: the same tokens
        minfer_close(m);
    }
}
