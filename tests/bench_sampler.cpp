// Microbenchmark of the host sampler (lib/sampling): µs a token for a 152,064-entry logit row (Qwen2's
// vocabulary) under the settings services send: the library's defaults (top-k 40), and top-k off with
// top-p and min-p on or off (an OpenAI-style request: temperature and top_p only), and two large top-k
// (a heap of 1,000, a selection of 8,192). Logits are Gaussian
// with two spreads (a flat and a peaked distribution). A sampled decode step pays this on the host after
// its logits are copied back, once per sequence. Times are the median of 5 batches of `reps` calls.
//
//   build/tests/bench_sampler [--reps N] [--vocab N]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "sampling/sampler.h"

namespace {

struct Setting {
    const char* name;
    int top_k;
    float top_p, min_p;
};

}  // namespace

int main(int argc, char** argv) {
    int reps = 100;
    size_t vocab = 152064;
    for (int i = 1; i < argc; ++i) {
        if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::max(1, std::atoi(argv[++i]));
        else if (!std::strcmp(argv[i], "--vocab") && i + 1 < argc) vocab = static_cast<size_t>(std::max(2, std::atoi(argv[++i])));
        else {
            std::fprintf(stderr, "usage: %s [--reps N] [--vocab N]\n", argv[0]);
            return 2;
        }
    }
    const Setting settings[] = {
        {"defaults: top_k 40, top_p 0.95, min_p 0.05", 40, 0.95f, 0.05f},
        {"temperature alone (top_k 0, top_p 1, min_p 0)", 0, 1.0f, 0.0f},
        {"top_k 0, top_p 1, min_p 0.05", 0, 1.0f, 0.05f},
        {"top_k 0, top_p 0.95, min_p 0.05", 0, 0.95f, 0.05f},
        {"top_k 0, top_p 0.95, min_p 0", 0, 0.95f, 0.0f},
        {"top_k 1000, top_p 1, min_p 0", 1000, 1.0f, 0.0f},
        {"top_k 8192, top_p 1, min_p 0", 8192, 1.0f, 0.0f},
    };
    std::printf("host sampler, %zu logits, temperature 0.8, median of 5 x %d calls (µs a call)\n\n", vocab, reps);
    std::printf("| setting | logits N(0, 1) | logits N(0, 3) |\n|---|---|---|\n");
    std::mt19937 rng(1);
    std::vector<std::vector<float>> rows;
    for (float sigma : {1.0f, 3.0f}) {
        std::normal_distribution<float> nd(0.0f, sigma);
        std::vector<float> l(vocab);
        for (float& v : l) v = nd(rng);
        rows.push_back(std::move(l));
    }
    const std::vector<int32_t> history(64, 5);
    long sink = 0;
    auto sampler = [](const Setting& st) {
        minfer_sampler_params p = minfer::sampling::default_params();
        p.temperature = 0.8f;
        p.top_k = st.top_k;
        p.top_p = st.top_p;
        p.min_p = st.min_p;
        minfer::sampling::Sampler s;
        s.configure(p);
        return s;
    };
    // A warm-up over every setting first (the clock and the caches, not only the scratch buffers: the
    // first row measured a quarter slower without it).
    for (const Setting& st : settings) {
        minfer::sampling::Sampler s = sampler(st);
        for (int i = 0; i < 20; ++i) sink += s.sample(rows[0], history);
    }
    for (const Setting& st : settings) {
        std::printf("| %s |", st.name);
        for (const std::vector<float>& l : rows) {
            minfer::sampling::Sampler s = sampler(st);
            for (int i = 0; i < 5; ++i) sink += s.sample(l, history);  // the scratch buffers
            std::vector<double> us;
            for (int b = 0; b < 5; ++b) {
                const auto t0 = std::chrono::steady_clock::now();
                for (int i = 0; i < reps; ++i) sink += s.sample(l, history);
                const auto t1 = std::chrono::steady_clock::now();
                us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / reps);
            }
            std::sort(us.begin(), us.end());
            std::printf(" %.1f |", us[2]);
        }
        std::printf("\n");
    }
    // The host's part where the GPU brings the row's candidates (Sampler::sample_candidates): the
    // defaults' 40 best logits, chosen here outside the timing.
    std::printf("| defaults, from the 40 candidates a GPU brings (sample_candidates) |");
    for (const std::vector<float>& l : rows) {
        minfer::sampling::Sampler s = sampler(settings[0]);
        std::vector<int32_t> affected;
        const size_t m = s.candidates_needed(l.size(), history, affected);
        std::vector<int32_t> ids(l.size());
        for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>(i);
        std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(m), ids.end(),
                          [&](int32_t a, int32_t b) { return l[static_cast<size_t>(a)] > l[static_cast<size_t>(b)] || (l[static_cast<size_t>(a)] == l[static_cast<size_t>(b)] && a < b); });
        ids.resize(m);
        ids.insert(ids.end(), affected.begin(), affected.end());
        std::vector<float> raw;
        for (int32_t i : ids) raw.push_back(l[static_cast<size_t>(i)]);
        for (int i = 0; i < 5; ++i) sink += s.sample_candidates(l.size(), ids, raw, history);
        std::vector<double> us;
        for (int b = 0; b < 5; ++b) {
            const auto t0 = std::chrono::steady_clock::now();
            for (int i = 0; i < reps; ++i) sink += s.sample_candidates(l.size(), ids, raw, history);
            const auto t1 = std::chrono::steady_clock::now();
            us.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / reps);
        }
        std::sort(us.begin(), us.end());
        std::printf(" %.1f |", us[2]);
    }
    std::printf("\n");
    std::fprintf(stderr, "(%ld)\n", sink % 7);  // the draws are used
    return 0;
}
