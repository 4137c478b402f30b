// What each operation of a one-token decode step costs inside the running CUDA graph: the step timed as
// `minfer bench -p 0 -n N` times it, once whole and once with each operation left out of every layer
// (device::testing::cuda_decode_skip), in alternating rounds; an operation's cost is the time a token
// loses by its presence. Unlike ncu, which runs each kernel alone, this counts what the programmatic
// launches overlap and what they do not. Timing only: the steps with parts left out compute wrong
// (finite) logits. Needs a GPU.
//
//   build/tests/bench_decode_parts -m MODEL.gguf [-n 128] [-d DEPTH] [-r 3] [--masks M,M,...]
//
// --masks: the decode_part bit sets to time (decimal, comma-separated), each against the whole step; by
// default every single part, then the four small row kernels together (both RMSNorms, qkv_finish, the
// SwiGLU's quantization) and the four mat-vec launches together. A part the model's step does not have
// (the SwiGLU's quantization where the down projection takes f32 input) costs nothing but noise.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "device/cuda_backend.h"
#include "minfer.h"

namespace {

namespace dp = minfer::device::testing::decode_part;

const char* const kPartNames[dp::kCount] = {"attention RMSNorm", "q/k/v mat-vec", "qkv_finish", "decode attention", "o mat-vec",
                                            "feed-forward RMSNorm", "gate/up mat-vec", "SwiGLU quantization", "down mat-vec"};

std::string describe(uint32_t mask) {
    if (mask == 0) return "whole step";
    std::string s;
    for (int b = 0; b < dp::kCount; ++b)
        if (mask & (1u << b)) s += (s.empty() ? "" : " + ") + std::string(kPartNames[b]);
    return s;
}

int usage(const char* argv0) {
    std::fprintf(stderr, "usage: %s -m MODEL.gguf [-n N] [-d DEPTH] [-r REPS] [--masks M,M,...]\n", argv0);
    return 2;
}

bool ok(minfer_status st, const char* what) {
    if (st == MINFER_OK) return true;
    std::fprintf(stderr, "bench_decode_parts: %s: %s\n", what, minfer_last_error());
    return false;
}

// One timed run: a fresh context (so its decode graphs are captured with the mask set now), `depth`
// random tokens prefilled (at least one); twice, untimed, n greedy decode steps and the context cut back
// to the prefilled tokens (the last one prefilled again for its logits), so that every form of the step
// the positions take (the attention's, by length) has run twice and been captured as a graph (on its
// second run); then the same n steps timed, as `minfer bench` times them on its warmed context. Tokens
// per second, or -1.
double run_once(minfer_model* m, const std::vector<int32_t>& tokens, int depth, int n) {
    minfer_context* ctx = nullptr;
    if (!ok(minfer_context_create(m, &ctx), "context")) return -1;
    double rate = -1;
    int32_t tok = 0;
    const int p = std::max(depth, 1);
    minfer_status st = minfer_prefill(ctx, tokens.data(), static_cast<size_t>(p));
    for (int pass = 0; pass < 2; ++pass) {
        for (int i = 0; i < n && st == MINFER_OK; ++i) st = minfer_decode(ctx, &tok);
        if (st == MINFER_OK) st = minfer_context_truncate(ctx, p - 1);
        if (st == MINFER_OK) st = minfer_prefill(ctx, tokens.data() + p - 1, 1);
    }
    if (ok(st, "warm-up")) {
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < n && st == MINFER_OK; ++i) st = minfer_decode(ctx, &tok);
        const auto t1 = std::chrono::steady_clock::now();
        if (ok(st, "decode")) rate = n / std::chrono::duration<double>(t1 - t0).count();
    }
    minfer_context_free(ctx);
    return rate;
}

void mean_sd(const std::vector<double>& v, double& mean, double& sd) {
    mean = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    sd = 0;
    for (double x : v) sd += (x - mean) * (x - mean);
    sd = v.size() > 1 ? std::sqrt(sd / static_cast<double>(v.size() - 1)) : 0.0;
}

}  // namespace

// A whole decimal number in [lo, hi] (digits only), or -1.
long number(const char* s, long lo, long hi) {
    if (!*s || std::strspn(s, "0123456789") != std::strlen(s) || std::strlen(s) > 9) return -1;
    const long v = std::strtol(s, nullptr, 10);
    return v < lo || v > hi ? -1 : v;
}

int main(int argc, char** argv) {
    const char* path = nullptr;
    long n = 128, depth = 0, reps = 3;
    std::vector<uint32_t> masks;
    for (int i = 1; i < argc; ++i) {
        const bool has = i + 1 < argc;
        if (!std::strcmp(argv[i], "-m") && has) path = argv[++i];
        else if (!std::strcmp(argv[i], "-n") && has) n = number(argv[++i], 1, 1 << 20);
        else if (!std::strcmp(argv[i], "-d") && has) depth = number(argv[++i], 0, 1 << 24);
        else if (!std::strcmp(argv[i], "-r") && has) reps = number(argv[++i], 1, 1000);
        else if (!std::strcmp(argv[i], "--masks") && has) {
            const std::string list = argv[++i];
            for (size_t at = 0; at <= list.size();) {  // comma-separated, none empty
                const size_t end = std::min(list.find(',', at), list.size());
                const long v = number(list.substr(at, end - at).c_str(), 1, (1l << dp::kCount) - 1);
                if (v < 0) return usage(argv[0]);
                masks.push_back(static_cast<uint32_t>(v));
                at = end + 1;
            }
        } else return usage(argv[0]);
    }
    if (!path || n < 0 || depth < 0 || reps < 0) return usage(argv[0]);
    if (masks.empty()) {
        for (int b = 0; b < dp::kCount; ++b) masks.push_back(1u << b);
        masks.push_back(dp::kAttnNorm | dp::kQkvFinish | dp::kFfnNorm | dp::kSwiglu);
        masks.push_back(dp::kQkv | dp::kO | dp::kGateUp | dp::kDown);
    }
    masks.insert(masks.begin(), 0u);  // the whole step, first in every round

    const std::string ctx_len = std::to_string(std::max(depth, 1L) + n);
    const char* keys[] = {"ctx_len", "device"};
    const char* values[] = {ctx_len.c_str(), "cuda"};
    minfer_model* m = nullptr;
    if (!ok(minfer_open_with_options(path, keys, values, 2, &m), "open")) return 1;
    std::mt19937 rng(7);
    std::vector<int32_t> tokens(static_cast<size_t>(std::max(depth, 1L)));
    for (int32_t& t : tokens) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(minfer_model_n_vocab(m)));
    int32_t n_layer = minfer_model_n_layer(m);

    // A warm-up run (the kernels' first launches, the clocks), then the rounds. A mask whose run fails
    // (its message printed) is left out of the later rounds and of the table.
    if (run_once(m, tokens, static_cast<int>(depth), static_cast<int>(n)) < 0) return 1;
    std::vector<std::vector<double>> rates(masks.size());
    std::vector<bool> failed(masks.size(), false);
    for (long r = 0; r < reps; ++r) {
        for (size_t i = 0; i < masks.size(); ++i) {
            if (failed[i]) continue;
            minfer::device::testing::cuda_decode_skip(masks[i]);
            const double t = run_once(m, tokens, static_cast<int>(depth), static_cast<int>(n));
            minfer::device::testing::cuda_decode_skip(0);
            if (t < 0) {
                std::fprintf(stderr, "round %ld, mask %u: failed\n", r + 1, masks[i]);
                if (i == 0) return 1;  // the whole step itself
                failed[i] = true;
                continue;
            }
            rates[i].push_back(t);
            std::fprintf(stderr, "round %ld, mask %u: %.2f t/s\n", r + 1, masks[i], t);
        }
    }
    minfer_close(m);

    // Each mask against the whole step of the same round: µs a token saved, and per layer.
    std::printf("%s, %d layers: %ld decode steps after %ld prefilled token(s), %ld rounds\n\n", path, n_layer, n, std::max(depth, 1L),
                reps);
    std::printf("| left out | t/s | µs a token | µs a token saved (its cost) | µs a layer |\n|---|---|---|---|---|\n");
    for (size_t i = 0; i < masks.size(); ++i) {
        if (failed[i]) {
            std::printf("| %s | failed (see above) | | | |\n", describe(masks[i]).c_str());
            continue;
        }
        double mean = 0, sd = 0;
        mean_sd(rates[i], mean, sd);
        std::vector<double> saved;
        for (long r = 0; r < reps; ++r) saved.push_back(1e6 / rates[0][static_cast<size_t>(r)] - 1e6 / rates[i][static_cast<size_t>(r)]);
        double s_mean = 0, s_sd = 0;
        mean_sd(saved, s_mean, s_sd);
        if (i == 0) std::printf("| %s | %.2f ± %.2f | %.1f | | |\n", describe(masks[i]).c_str(), mean, sd, 1e6 / mean);
        else
            std::printf("| %s | %.2f ± %.2f | %.1f | %.1f ± %.1f | %.2f |\n", describe(masks[i]).c_str(), mean, sd, 1e6 / mean, s_mean, s_sd,
                        s_mean / n_layer);
    }
    return 0;
}
