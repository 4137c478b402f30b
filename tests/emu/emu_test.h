// Helpers shared by the emulator tests (tests/test_*_emu.cpp): the two
// run configurations, normal random inputs, the relative L2 error against a float64 reference, and a
// launcher that runs a kernel's CTAs over fresh, fenced shared memory. Include after the kernel header
// (which brings in tests/emu/cuda/matvec_ptx.cuh) and doctest.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

namespace emu_test {

// Forward lane order with cp.async copies landing at their wait over NaN-filled shared memory, and
// reverse order with copies landing at issue over random bytes.
struct Config {
    bool reverse, eager, nan_fill;
};
inline const Config kConfigs[] = {{false, false, true}, {true, true, false}};

inline std::vector<float> normal(size_t n, uint64_t seed, float sd = 1.0f) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> v(n);
    for (float& f : v) f = nd(rng);
    return v;
}

// ||a - ref|| / ||ref||; infinity when a holds a NaN or an infinity.
inline double rel_l2(const std::vector<float>& a, const std::vector<double>& ref) {
    double num = 0, den = 0;
    for (size_t i = 0; i < a.size(); ++i) {
        if (!std::isfinite(a[i])) return INFINITY;
        num += (a[i] - ref[i]) * (a[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return std::sqrt(num / std::max(den, 1e-300));
}

// The memory the kernel before writes and the kernel itself writes, for the emulator's check of pdl_wait
// (tests/emu/cuda/matvec_ptx.cuh, `dependent`), for the scope of one launch.
struct Dependent {
    explicit Dependent(std::vector<mv_emu::DepRegion> r) { mv_emu::dependent = std::move(r); }
    ~Dependent() { mv_emu::dependent.clear(); }
    Dependent(const Dependent&) = delete;
    Dependent& operator=(const Dependent&) = delete;
};
// (An input the kernel takes as const is poisoned all the same: its elements are no const objects.)
inline mv_emu::DepRegion region(const void* p, size_t n) { return {const_cast<void*>(p), n}; }
template <class T>
mv_emu::DepRegion region(const std::vector<T>& v) {
    return region(v.data(), v.size() * sizeof(T));
}
template <class T>
void region(const std::vector<T>&&) = delete;  // a temporary would be poisoned after its death

// Runs `kernel` as CTAs 0 .. grid-1 of `threads` threads over fresh shared memory (smem bytes used,
// fenced by 64 canary bytes checked after each CTA), one after another in the order `order` gives (a
// permutation of 0 .. grid-1; none: ascending).
// A grid of three dimensions: blocks in x-fastest order, the linear index b as (b % x, b / x % y, b / (x y)).
template <class K>
void launch(mv_emu::Dim grid, int threads, size_t smem, const Config& cfg, K kernel, const std::vector<int64_t>* order = nullptr) {
    namespace mv = minfer::cuda::mv;
    REQUIRE(smem + 64 <= mv::kEmuSmemBytes);
    auto& rt = mv_emu::rt;
    rt.reverse = cfg.reverse;
    rt.eager = cfg.eager;
    rt.grid = grid;
    const int64_t n = int64_t{grid.x} * grid.y * grid.z;
    std::mt19937 rng(static_cast<unsigned>(n));
    for (int64_t i = 0; i < n; ++i) {
        const int64_t b = order ? (*order)[static_cast<size_t>(i)] : i;
        for (size_t i = 0; i < smem; ++i) mv::mv_smem[i] = cfg.nan_fill ? 0xff : static_cast<uint8_t>(rng());
        std::memset(mv::mv_smem + smem, 0xa5, 64);
        const mv_emu::Dim block{static_cast<unsigned>(b % grid.x), static_cast<unsigned>(b / grid.x % grid.y),
                                static_cast<unsigned>(b / (int64_t{grid.x} * grid.y))};
        mv_emu::run_cta(block, threads, kernel);
        REQUIRE_MESSAGE(std::all_of(mv::mv_smem + smem, mv::mv_smem + smem + 64, [](uint8_t v) { return v == 0xa5; }),
                        "shared memory written past its size");
    }
}
template <class K>
void launch(int64_t grid, int threads, size_t smem, const Config& cfg, K kernel, const std::vector<int64_t>* order = nullptr) {
    launch(mv_emu::Dim{static_cast<unsigned>(grid), 1u, 1u}, threads, smem, cfg, kernel, order);
}

}  // namespace emu_test
