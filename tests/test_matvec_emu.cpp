// The decode mat-vec's device code (cuda/matvec_impl.cuh) run on the CPU through the CUDA emulation in
// tests/emu/cuda/matvec_ptx.cuh, against float64: every quantized type through the tensor-core path and
// f32/f16/bf16 through the plain path, on quantized and on raw random blocks (every code and sub-scale
// value), ragged row counts, partial k-tiles and CTAs of one or several row tiles. Each case also runs in
// reverse lane order with cp.async copies landing at issue, and in forward order with copies landing at
// their wait, over shared memory prefilled with NaN or random bytes: missing barriers, early reads and
// reliance on zeroed memory change the result. The f16 arithmetic that must be exact is checked to be.
// No GPU is needed; cuda_tests checks the same kernels on one.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <type_traits>
#include <vector>

#include "cuda/matvec_impl.cuh"  // with tests/emu first on the include path: the emulated CUDA
#include "emu_test.h"
#include "quant/f16.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace {

using minfer::quant::Type;
namespace mv = minfer::cuda::mv;
namespace quant = minfer::quant;
using emu_test::Config;
using emu_test::kConfigs;
using emu_test::launch;
using emu_test::normal;
using emu_test::rel_l2;


// Byte offsets of the f16 scale fields of a block (-1: none).
void scale_fields(Type t, int& f0, int& f1) {
    f0 = 0;
    f1 = -1;
    switch (t) {
        case Type::Q4_1: case Type::Q5_1: case Type::Q4_K: case Type::Q5_K: f1 = 2; break;
        case Type::Q2_K: f0 = 80; f1 = 82; break;
        case Type::Q3_K: f0 = 108; break;
        case Type::Q6_K: f0 = 208; break;
        default: break;
    }
}

// The GGUF type whose bytes a kernel type holds: q8_0 for its regrouped layout (mv::kQ8_0G), q6_K for its
// padded copy (mv::kQ6_KP), q5_0 for its grouped copy (mv::kQ5_0G), else itself.
// (q2_K and q3_K for their arranged copies, mv::kQ2_KP and kQ3_KP.)
Type stored(Type t) {
    return t == mv::kQ8_0G   ? Type::Q8_0
           : t == mv::kQ6_KP ? Type::Q6_K
           : t == mv::kQ5_0G ? Type::Q5_0
           : t == mv::kQ2_KP ? Type::Q2_K
           : t == mv::kQ3_KP ? Type::Q3_K
                             : t;
}
const char* name_of(Type t) {
    return t == mv::kQ8_0G   ? "q8_0 grouped"
           : t == mv::kQ6_KP ? "q6_K padded"
           : t == mv::kQ5_0G ? "q5_0 grouped"
           : t == mv::kQ2_KP ? "q2_K arranged"
           : t == mv::kQ3_KP ? "q3_K arranged"
                             : quant::type_info(t).name;
}

// A q8_0 matrix in the grouped layout: rows of whole 256-column groups regrouped in place by the device
// function the load's kernel runs (mv::q80_group_one, a thread per group), on a copy; other rows copied
// with a padded last group by the copy kernel's (mv::q80_group_copy_one, a thread per group) into a
// poisoned buffer, so a byte it leaves unwritten fails ungrouped below.
std::vector<uint8_t> grouped(std::vector<uint8_t> w, int64_t rows, int64_t cols) {
    REQUIRE(w.size() == static_cast<size_t>(rows * (cols / 32) * 34));
    const int threads = 64;
    if (cols % 256 != 0) {
        const int64_t groups = rows * ((cols + 255) / 256);
        std::vector<uint8_t> out(static_cast<size_t>(rows * mv::q80g_row_bytes(cols)), 0xA5);
        launch((groups + threads - 1) / threads, threads, 0, kConfigs[0], [&] {
            const int64_t i = int64_t{blockIdx.x} * threads + threadIdx.x;
            if (i < groups) mv::q80_group_copy_one(w.data(), out.data(), cols, i);
        });
        return out;
    }
    const int64_t groups = rows * (cols / 256);
    launch((groups + threads - 1) / threads, threads, 0, kConfigs[0], [&] {
        const int64_t g = int64_t{blockIdx.x} * threads + threadIdx.x;
        if (g < groups) mv::q80_group_one(w.data(), g);
    });
    return w;
}
// Its inverse, written from the layout's description (cuda/block_bits.cuh) rather than from the code: rows
// of ceil(cols / 256) groups of 272 bytes, in each group block b's f16 scale at bytes 2b, 2b + 1 and its
// codes at 16 + 32b .. 16 + 32b + 31; a padded last group's absent blocks all zeros.
std::vector<uint8_t> ungrouped(const std::vector<uint8_t>& g, int64_t rows, int64_t cols) {
    const int64_t nb = cols / 32, rb = (cols + 255) / 256 * 272;
    REQUIRE(g.size() == static_cast<size_t>(rows * rb));
    std::vector<uint8_t> w(static_cast<size_t>(rows * nb * 34));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < (nb + 7) / 8 * 8; ++k) {
            const uint8_t* grp = &g[static_cast<size_t>(r * rb + k / 8 * 272)];
            const int64_t b = k % 8;
            if (k >= nb) {
                REQUIRE(grp[2 * b] == 0);
                REQUIRE(grp[2 * b + 1] == 0);
                for (int i = 0; i < 32; ++i) REQUIRE(grp[16 + 32 * b + i] == 0);
                continue;
            }
            uint8_t* blk = &w[static_cast<size_t>((r * nb + k) * 34)];
            blk[0] = grp[2 * b];
            blk[1] = grp[2 * b + 1];
            std::memcpy(blk + 2, grp + 16 + 32 * b, 32);
        }
    return w;
}

// A q5_0 matrix copied grouped by the device function the load's kernel runs (mv::q50_group_copy_one, a
// thread per group) into a poisoned buffer, so a byte it leaves unwritten fails q50_ungrouped below.
std::vector<uint8_t> q50_grouped(const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
    REQUIRE(w.size() == static_cast<size_t>(rows * (cols / 32) * 22));
    const int threads = 64;
    const int64_t groups = rows * ((cols + 255) / 256);
    std::vector<uint8_t> out(static_cast<size_t>(rows * mv::q50g_row_bytes(cols)), 0xA5);
    launch((groups + threads - 1) / threads, threads, 0, kConfigs[0], [&] {
        const int64_t i = int64_t{blockIdx.x} * threads + threadIdx.x;
        if (i < groups) mv::q50_group_copy_one(w.data(), out.data(), cols, i);
    });
    return out;
}
// Its inverse, from the layout's description (cuda/block_bits.cuh): rows of ceil(cols / 256) groups of
// 176 bytes, in each group block b's qs at 16b, its qh at 128 + 4b, its d at 160 + 2b; a padded last
// group's absent blocks all zeros.
std::vector<uint8_t> q50_ungrouped(const std::vector<uint8_t>& g, int64_t rows, int64_t cols) {
    const int64_t nb = cols / 32, rb = (cols + 255) / 256 * 176;
    REQUIRE(g.size() == static_cast<size_t>(rows * rb));
    std::vector<uint8_t> w(static_cast<size_t>(rows * nb * 22));
    for (int64_t r = 0; r < rows; ++r)
        for (int64_t k = 0; k < (nb + 7) / 8 * 8; ++k) {
            const uint8_t* grp = &g[static_cast<size_t>(r * rb + k / 8 * 176)];
            const int64_t b = k % 8;
            if (k >= nb) {
                for (int i = 0; i < 16; ++i) REQUIRE(grp[16 * b + i] == 0);
                for (int i = 0; i < 4; ++i) REQUIRE(grp[128 + 4 * b + i] == 0);
                for (int i = 0; i < 2; ++i) REQUIRE(grp[160 + 2 * b + i] == 0);
                continue;
            }
            uint8_t* blk = &w[static_cast<size_t>((r * nb + k) * 22)];
            std::memcpy(blk, grp + 160 + 2 * b, 2);
            std::memcpy(blk + 2, grp + 128 + 4 * b, 4);
            std::memcpy(blk + 6, grp + 16 * b, 16);
        }
    return w;
}

// A q6_K matrix copied padded by the device function the load's kernel runs (mv::q6k_pad_one, a thread
// per block).
std::vector<uint8_t> padded(const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
    REQUIRE(cols % 256 == 0);
    const int64_t blocks = rows * (cols / 256);
    REQUIRE(w.size() == static_cast<size_t>(blocks * 210));
    std::vector<uint8_t> out(static_cast<size_t>(blocks * 224), 0xA5);  // poisoned: every byte must be written
    const int threads = 64;
    launch((blocks + threads - 1) / threads, threads, 0, kConfigs[0], [&] {
        const int64_t b = int64_t{blockIdx.x} * threads + threadIdx.x;
        if (b < blocks) mv::q6k_pad_one(w.data(), out.data(), b);
    });
    return out;
}
// Its inverse, written from the layout's description (cuda/block_bits.cuh) rather than from the code: in
// each 224-byte block, unit p = 4n + v's ql[64n + 8v ..] at 16p, ql[64n + 32 + 8v ..] at 16p + 8, qh[32n +
// 8v ..] at 128 + 8p, then the scales and d as the file has them at 192 and zeros from 210. A padding byte
// that is not zero fails.
std::vector<uint8_t> unpadded(const std::vector<uint8_t>& g) {
    REQUIRE(g.size() % 224 == 0);
    std::vector<uint8_t> w(g.size() / 224 * 210);
    for (size_t b = 0; b < g.size() / 224; ++b) {
        const uint8_t* s = &g[224 * b];
        uint8_t* d = &w[210 * b];
        for (int n = 0; n < 2; ++n)
            for (int v = 0; v < 4; ++v) {
                const int p = 4 * n + v;
                std::memcpy(d + 64 * n + 8 * v, s + 16 * p, 8);
                std::memcpy(d + 64 * n + 32 + 8 * v, s + 16 * p + 8, 8);
                std::memcpy(d + 128 + 32 * n + 8 * v, s + 128 + 8 * p, 8);
            }
        std::memcpy(d + 192, s + 192, 18);
        for (int i = 210; i < 224; ++i) REQUIRE(s[i] == 0);
    }
    return w;
}

// A q2_K or q3_K matrix copied arranged (t: mv::kQ2_KP or kQ3_KP) by the device function the load's kernel
// runs (mv::k23_arrange_one, a thread per block) into a poisoned buffer, so a byte it leaves unwritten fails
// unarranged below.
std::vector<uint8_t> arranged(Type t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols) {
    const bool q3 = t == mv::kQ3_KP;
    const int in = q3 ? 110 : 84, out = q3 ? 112 : 84;
    REQUIRE(cols % 256 == 0);
    const int64_t blocks = rows * (cols / 256);
    REQUIRE(w.size() == static_cast<size_t>(blocks * in));
    std::vector<uint8_t> o(static_cast<size_t>(blocks * out), 0xA5);
    const int threads = 64;
    launch((blocks + threads - 1) / threads, threads, 0, kConfigs[0], [&] {
        const int64_t b = int64_t{blockIdx.x} * threads + threadIdx.x;
        if (b >= blocks) return;
        if (q3) mv::k23_arrange_one<true>(w.data(), o.data(), b);
        else mv::k23_arrange_one<false>(w.data(), o.data(), b);
    });
    return o;
}
// Its inverse, written from the layout's description (cuda/block_bits.cuh) rather than from the code: in
// each block, unit p = 4n + j (columns 128n + 32j + e, e = 0..31) has the 2-bit code of column e in byte
// 8p + 4 (e / 16) + e % 4, bits 2 ((e % 16) / 4) and up; q3_K (112 bytes) its third bit in byte 64 + 4p + e % 4,
// bit e / 4, then the file's scales and d at 96 and two zeros; q2_K (84 bytes) the file's scales at 64, d and
// dmin at 80. The file (ggml's layout): the code is bits 2j of qs[32n + e] (qs at 32 in q3_K, 16 in q2_K),
// q3_K's third bit is bit 4n + j of hmask[e] (at 0), q2_K's scales at 0 and d, dmin at 80.
std::vector<uint8_t> unarranged(Type t, const std::vector<uint8_t>& g) {
    const bool q3 = t == mv::kQ3_KP;
    const size_t in = q3 ? 110 : 84, out = q3 ? 112 : 84;
    REQUIRE(g.size() % out == 0);
    std::vector<uint8_t> w(g.size() / out * in, 0);
    for (size_t blk = 0; blk < g.size() / out; ++blk) {
        const uint8_t* s = &g[out * blk];
        uint8_t* d = &w[in * blk];
        uint8_t* qs = d + (q3 ? 32 : 16);
        for (int p = 0; p < 8; ++p) {
            const int n = p / 4, j = p % 4;
            for (int e = 0; e < 32; ++e) {
                const int code = (s[8 * p + 4 * (e / 16) + e % 4] >> (2 * ((e % 16) / 4))) & 3;
                qs[32 * n + e] = static_cast<uint8_t>(qs[32 * n + e] | code << (2 * j));
                if (q3) d[e] = static_cast<uint8_t>(d[e] | ((s[64 + 4 * p + e % 4] >> (e / 4)) & 1) << (4 * n + j));
            }
        }
        if (q3) {
            std::memcpy(d + 96, s + 96, 14);
            CHECK(s[110] == 0);
            CHECK(s[111] == 0);
        } else {
            std::memcpy(d, s + 64, 16);
            std::memcpy(d + 80, s + 80, 4);
        }
    }
    return w;
}

// Weights: the CPU quantizer's blocks from normal values, or random bytes with benign f16 scales (kQ8_0G:
// q8_0's, regrouped; kQ6_KP: q6_K's, padded).
std::vector<uint8_t> weights(Type t, int64_t rows, int64_t cols, bool random_bytes, uint64_t seed) {
    if (t == mv::kQ8_0G) return grouped(weights(Type::Q8_0, rows, cols, random_bytes, seed), rows, cols);
    if (t == mv::kQ6_KP) return padded(weights(Type::Q6_K, rows, cols, random_bytes, seed), rows, cols);
    if (t == mv::kQ5_0G) return q50_grouped(weights(Type::Q5_0, rows, cols, random_bytes, seed), rows, cols);
    if (t == mv::kQ2_KP || t == mv::kQ3_KP) return arranged(t, weights(stored(t), rows, cols, random_bytes, seed), rows, cols);
    const size_t rb = quant::row_bytes(t, cols);
    std::vector<uint8_t> out(rb * static_cast<size_t>(rows));
    if (!random_bytes) {
        const auto v = normal(static_cast<size_t>(rows * cols), seed);
        for (int64_t r = 0; r < rows; ++r) quant::quantize_row(t, v.data() + r * cols, out.data() + r * rb, cols);
        return out;
    }
    std::mt19937_64 rng(seed);
    for (uint8_t& b : out) b = static_cast<uint8_t>(rng());
    const auto& info = quant::type_info(t);
    if (info.block_elems == 1) {  // plain types: values in [-1, 1)
        std::uniform_real_distribution<float> u(-1.0f, 1.0f);
        for (size_t i = 0; i < out.size() / info.block_bytes; ++i) {
            const float f = u(rng);
            if (t == Type::F32) std::memcpy(&out[4 * i], &f, 4);
            else if (t == Type::F16) {
                const uint16_t hb = quant::f32_to_f16(f);
                std::memcpy(&out[2 * i], &hb, 2);
            } else {
                const uint16_t hb = static_cast<uint16_t>(quant::f32_bits(f) >> 16);
                std::memcpy(&out[2 * i], &hb, 2);
            }
        }
        return out;
    }
    int f0, f1;
    scale_fields(t, f0, f1);
    std::uniform_real_distribution<float> u(1e-3f, 1e-2f);
    for (size_t b = 0; b < out.size() / info.block_bytes; ++b) {
        uint8_t* blk = &out[b * info.block_bytes];
        for (int f : {f0, f1}) {
            if (f < 0) continue;
            const uint16_t hb = quant::f32_to_f16((rng() & 1) && f == 2 ? -u(rng) : u(rng));  // an offset m may be negative
            std::memcpy(blk + f, &hb, 2);
        }
    }
    return out;
}

std::vector<double> reference(Type t, const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const std::vector<float>& x) {
    if (t == mv::kQ8_0G) return reference(Type::Q8_0, ungrouped(w, rows, cols), rows, cols, x);
    if (t == mv::kQ6_KP) return reference(Type::Q6_K, unpadded(w), rows, cols, x);
    if (t == mv::kQ5_0G) return reference(Type::Q5_0, q50_ungrouped(w, rows, cols), rows, cols, x);
    if (t == mv::kQ2_KP || t == mv::kQ3_KP) return reference(stored(t), unarranged(t, w), rows, cols, x);
    const size_t rb = quant::row_bytes(t, cols);
    std::vector<float> row(static_cast<size_t>(cols));
    std::vector<double> y(static_cast<size_t>(rows));
    for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(t, w.data() + r * rb, row.data(), cols);
        double acc = 0;
        for (int64_t k = 0; k < cols; ++k) acc += static_cast<double>(row[static_cast<size_t>(k)]) * x[static_cast<size_t>(k)];
        y[static_cast<size_t>(r)] = acc;
    }
    return y;
}



template <Type T>
std::vector<float> run_mma(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const std::vector<float>& x,
                           int64_t resident, const Config& cfg, const std::vector<float>* x_up = nullptr, int warps = mv::kWarps) {
    const mv::MmaGrid g = mv::mma_grid(rows, resident);
    std::vector<float> y(static_cast<size_t>(rows) + 8, std::nanf(""));
    for (size_t i = static_cast<size_t>(rows); i < y.size(); ++i) y[i] = 12345.0f;
    mv_emu::readable = {{w.data(), w.size()}, {x.data(), x.size() * sizeof(float)}};
    if (x_up) mv_emu::readable.push_back({x_up->data(), x_up->size() * sizeof(float)});
    const int64_t row_bytes = static_cast<int64_t>(quant::row_bytes(stored(T), cols)), tiles = (rows + 15) / 16;
    std::vector<mv_emu::DepRegion> dep = {emu_test::region(x), emu_test::region(y)};
    if (x_up) dep.push_back(emu_test::region(*x_up));
    const emu_test::Dependent guard(std::move(dep));
    launch(g.grid, 32 * warps, static_cast<size_t>(mv::mma_smem_bytes<T>(g.maxk, warps)), cfg, [&] {
        mv::matvec_mma_kernel<T>(mv::one_segment(w.data(), y.data(), rows), x.data(), x_up ? x_up->data() : nullptr, nullptr,
                                 static_cast<int>(cols), row_bytes, tiles, g.maxk, false, 1);
    });
    REQUIRE_MESSAGE(std::all_of(y.begin() + rows, y.end(), [](float v) { return v == 12345.0f; }), "y written past its end");
    y.resize(static_cast<size_t>(rows));
    return y;
}

// Inputs quantized by xq_put4 as quantize_x does it (a thread per 4 columns), into one buffer: one
// input in the one-row layout, several block-interleaved (the layout of rows > 1); back: each input as
// the kernels see it.
std::vector<int4> quantize_rows(const std::vector<std::vector<float>>& xs, const Config& cfg, std::vector<std::vector<float>>& back) {
    const int nrows = static_cast<int>(xs.size());
    const int64_t cols = static_cast<int64_t>(xs[0].size());
    std::vector<int4> buf(static_cast<size_t>(mv::xq_bytes(cols) * nrows / 16));
    std::memset(buf.data(), 0x5a, buf.size() * sizeof(int4));
    auto* q = reinterpret_cast<uint8_t*>(buf.data());
    mv_emu::readable.clear();
    for (const auto& x : xs) mv_emu::readable.push_back({x.data(), x.size() * sizeof(float)});
    const int threads = 128;
    for (int r = 0; r < nrows; ++r) {
        const auto& x = xs[static_cast<size_t>(r)];
        launch((cols / 4 + threads - 1) / threads, threads, 0, cfg, [&] {
            const int64_t i = int64_t{blockIdx.x} * threads + threadIdx.x;
            const bool valid = 4 * i < cols;
            float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
            if (valid) v = make_float4(x[4 * i], x[4 * i + 1], x[4 * i + 2], x[4 * i + 3]);
            mv::xq_put4(v, 4 * i, cols, q, valid, r, nrows);
        });
    }
    back.assign(static_cast<size_t>(nrows), std::vector<float>(static_cast<size_t>(cols)));
    for (int r = 0; r < nrows; ++r)
        for (int64_t c = 0; c < cols; ++c) back[static_cast<size_t>(r)][static_cast<size_t>(c)] = mv::xq_value(q, cols, c, r, nrows);
    return buf;
}

// One input, its bytes.
std::vector<uint8_t> quantize(const std::vector<float>& x, const Config& cfg) {
    std::vector<std::vector<float>> back;
    const auto buf = quantize_rows({x}, cfg, back);
    const auto* q = reinterpret_cast<const uint8_t*>(buf.data());
    return {q, q + mv::xq_bytes(static_cast<int64_t>(x.size()))};
}

// x as the int8 kernels see it: d (256 hi + lo) per column.
std::vector<float> dequantize(const std::vector<uint8_t>& xq, int64_t cols) {
    std::vector<float> x(static_cast<size_t>(cols));
    for (int64_t c = 0; c < cols; ++c) x[static_cast<size_t>(c)] = mv::xq_value(xq.data(), cols, c);
    return x;
}

// One input quantized (quantize) in a 16-byte aligned buffer, as the kernels read it, and as they see it
// (dequantize: the reference's input).
struct AlignedXq {
    std::vector<int4> buf;
    std::vector<float> seen;
    const uint8_t* data() const { return reinterpret_cast<const uint8_t*>(buf.data()); }
};
AlignedXq aligned_xq(const std::vector<float>& x, const Config& cfg) {
    const auto bytes = quantize(x, cfg);
    AlignedXq q{std::vector<int4>((bytes.size() + 15) / 16), dequantize(bytes, static_cast<int64_t>(x.size()))};
    std::memcpy(q.buf.data(), bytes.data(), bytes.size());
    return q;
}

// The int8 kernel on the quantized x (xq from quantize, copied to a 16-byte aligned buffer).
template <Type T>
std::vector<float> run_i8(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const std::vector<uint8_t>& xq_in,
                          int64_t resident, const Config& cfg, int warps = mv::kWarps) {
    const mv::MmaGrid g = mv::mma_grid(rows, resident);
    std::vector<float> y(static_cast<size_t>(rows) + 8, std::nanf(""));
    for (size_t i = static_cast<size_t>(rows); i < y.size(); ++i) y[i] = 12345.0f;
    std::vector<int4> xq_buf((xq_in.size() + 15) / 16);
    std::memcpy(xq_buf.data(), xq_in.data(), xq_in.size());
    const auto* xq = reinterpret_cast<const uint8_t*>(xq_buf.data());
    mv_emu::readable = {{w.data(), w.size()}, {xq, xq_in.size()}};
    const int64_t row_bytes = static_cast<int64_t>(quant::row_bytes(stored(T), cols)), tiles = (rows + 15) / 16;
    const emu_test::Dependent guard({emu_test::region(xq_buf), emu_test::region(y)});
    launch(g.grid, 32 * warps, static_cast<size_t>(mv::mma_smem_bytes<T, true>(g.maxk, warps)), cfg, [&] {
        mv::matvec_mma_kernel<T, true>(mv::one_segment(w.data(), y.data(), rows), nullptr, nullptr, xq, static_cast<int>(cols),
                                       row_bytes, tiles, g.maxk, false, 1);
    });
    REQUIRE_MESSAGE(std::all_of(y.begin() + rows, y.end(), [](float v) { return v == 12345.0f; }), "y written past its end");
    y.resize(static_cast<size_t>(rows));
    return y;
}

// Three matrices of `rows[i]` rows in separate buffers, one launch (q, k, v): each buffer readable alone,
// each y[i] poisoned and fenced.
// kI8: the int8 kernel on x quantized (xq, 16-byte aligned).
template <Type T, bool kI8 = false>
std::vector<std::vector<float>> run_mma_segments(const std::vector<std::vector<uint8_t>>& w, const int64_t (&rows)[3], int64_t cols,
                                                 const std::vector<float>& x, int64_t resident, const Config& cfg,
                                                 const uint8_t* xq = nullptr) {
    std::vector<std::vector<float>> y(3);
    mv::Segments seg;
    mv_emu::readable = {{x.data(), x.size() * sizeof(float)}};
    if (kI8) mv_emu::readable.push_back({xq, static_cast<size_t>(mv::xq_bytes(cols))});
    int64_t end = 0;
    for (int i = 0; i < 3; ++i) {
        y[static_cast<size_t>(i)].assign(static_cast<size_t>(rows[i]) + 8, std::nanf(""));
        for (size_t j = static_cast<size_t>(rows[i]); j < y[static_cast<size_t>(i)].size(); ++j) y[static_cast<size_t>(i)][j] = 12345.0f;
        mv_emu::readable.push_back({w[static_cast<size_t>(i)].data(), w[static_cast<size_t>(i)].size()});
        seg.w[i] = w[static_cast<size_t>(i)].data();
        seg.y[i] = y[static_cast<size_t>(i)].data();
        end += rows[i];
        seg.end[i] = end;
    }
    seg.n = 3;
    const mv::MmaGrid g = mv::mma_grid(end, resident);
    const int64_t row_bytes = static_cast<int64_t>(quant::row_bytes(stored(T), cols)), tiles = (end + 15) / 16;
    std::vector<mv_emu::DepRegion> dep = {kI8 ? emu_test::region(xq, static_cast<size_t>(mv::xq_bytes(cols))) : emu_test::region(x)};
    for (auto& yi : y) dep.push_back(emu_test::region(yi));
    const emu_test::Dependent guard(std::move(dep));
    launch(g.grid, mv::kThreads, static_cast<size_t>(mv::mma_smem_bytes<T, kI8>(g.maxk)), cfg, [&] {
        mv::matvec_mma_kernel<T, kI8>(seg, kI8 ? nullptr : x.data(), nullptr, xq, static_cast<int>(cols), row_bytes, tiles, g.maxk, false,
                                      1);
    });
    for (int i = 0; i < 3; ++i) {
        auto& v = y[static_cast<size_t>(i)];
        REQUIRE_MESSAGE(std::all_of(v.begin() + rows[i], v.end(), [](float f) { return f == 12345.0f; }), "y written past its end");
        v.resize(static_cast<size_t>(rows[i]));
    }
    return y;
}

// The int8 kernel over ncols inputs (up to kN = 8 per launch) and 1 to 3 matrices (segments):
// xq holds the ncols quantized inputs, block-interleaved (quantize_rows); y[i] is [ncols][rows[i]],
// poisoned (or `init`, accumulate true) and fenced.
template <Type T, int kN>
std::vector<std::vector<float>> run_i8_cols(const std::vector<std::vector<uint8_t>>& w, const std::vector<int64_t>& rows, int64_t cols,
                                            const uint8_t* xq, int ncols, int64_t resident, const Config& cfg,
                                            const std::vector<std::vector<float>>* init = nullptr) {
    const size_t nm = w.size();
    std::vector<std::vector<float>> y(nm);
    mv::Segments seg;
    mv_emu::readable = {{xq, static_cast<size_t>(mv::xq_bytes(cols) * ncols)}};
    int64_t end = 0;
    for (size_t i = 0; i < nm; ++i) {
        // fenced up to kN columns: a write for a column past ncols would land there
        const size_t n = static_cast<size_t>(rows[i] * ncols);
        y[i].assign(static_cast<size_t>(rows[i] * kN) + 8, std::nanf(""));
        if (init) std::copy((*init)[i].begin(), (*init)[i].end(), y[i].begin());
        for (size_t j = n; j < y[i].size(); ++j) y[i][j] = 12345.0f;
        mv_emu::readable.push_back({w[i].data(), w[i].size()});
        seg.w[i] = w[i].data();
        seg.y[i] = y[i].data();
        end += rows[i];
        seg.end[i] = end;
    }
    for (size_t i = nm; i < 3; ++i) seg.end[i] = end;
    seg.n = static_cast<int>(nm);
    const mv::MmaGrid g = mv::mma_grid(end, resident, mv::kMaxTilesPerCtaN);
    const int64_t row_bytes = static_cast<int64_t>(quant::row_bytes(stored(T), cols)), tiles = (end + 15) / 16;
    std::vector<mv_emu::DepRegion> dep = {emu_test::region(xq, static_cast<size_t>(mv::xq_bytes(cols) * ncols))};
    for (auto& yi : y) dep.push_back(emu_test::region(yi));
    const emu_test::Dependent guard(std::move(dep));
    launch(g.grid, mv::kThreads, static_cast<size_t>(mv::mma_smem_bytes<T, true, kN>(g.maxk)), cfg, [&] {
        mv::matvec_mma_kernel<T, true, kN>(seg, nullptr, nullptr, xq, static_cast<int>(cols), row_bytes, tiles, g.maxk, init != nullptr,
                                           ncols);
    });
    for (size_t i = 0; i < nm; ++i) {
        const size_t n = static_cast<size_t>(rows[i] * ncols);
        REQUIRE_MESSAGE(std::all_of(y[i].begin() + static_cast<std::ptrdiff_t>(n), y[i].end(), [](float f) { return f == 12345.0f; }),
                        "y written past its end");
        y[i].resize(n);
    }
    return y;
}

template <Type T, int R>
std::vector<float> run_plain(const std::vector<uint8_t>& w, int64_t rows, int64_t cols, const std::vector<float>& x,
                             const Config& cfg) {
    std::vector<float> y(static_cast<size_t>(rows) + 8, std::nanf(""));
    for (size_t i = static_cast<size_t>(rows); i < y.size(); ++i) y[i] = 12345.0f;
    mv_emu::readable = {{w.data(), w.size()}, {x.data(), x.size() * sizeof(float)}};
    const emu_test::Dependent guard({emu_test::region(x), emu_test::region(y)});
    launch((rows + R - 1) / R, 128, 0, cfg, [&] { mv::matvec_plain_kernel<T, R>(mv::one_segment(w.data(), y.data(), rows), x.data(), cols, false); });
    REQUIRE_MESSAGE(std::all_of(y.begin() + rows, y.end(), [](float v) { return v == 12345.0f; }), "y written past its end");
    y.resize(static_cast<size_t>(rows));
    return y;
}

// x: normal; with outliers (a k-tile's scale follows its largest value); with a k-tile of zeros and one
// of tiny values.
std::vector<float> make_x(int64_t cols, int variant, uint64_t seed) {
    auto x = normal(static_cast<size_t>(cols), seed);
    for (int64_t i = 0; i < cols; ++i) {
        float& v = x[static_cast<size_t>(i)];
        if (variant == 1 && i % 97 == 5) v *= 3000.0f;
        if (variant == 2 && i < 256) v = 0.0f;
        if (variant == 2 && i >= 256 && i < 512) v *= 1e-30f;
    }
    return x;
}

// Both tensor-core families on the same shapes: rows x cols, and the resident CTAs the grid assumes (1 or
// 2: CTAs of several row tiles, warps whose items start inside a k-tile; 16 x 4096: one row tile per CTA,
// four k-tiles per warp). The f16 family against float64 of the dequantized weights times x; the int8
// family (kI8) times x as quantized (tight: only f32 roundings remain).
template <Type T, bool kI8 = false>
void check_mma_type() {
    const int64_t b = quant::type_info(stored(T)).block_elems;
    const bool legacy = b == 32;
    const int64_t shapes[][3] = {{1, b, 1000},  {7, 2 * b, 1000}, {33, 3 * b, 1000}, {45, legacy ? 11 * b : 2 * b, 2},
                                 {70, 2048, 2}, {48, 1280, 1},    {16, 4096, 1000}};
    uint64_t seed = (kI8 ? 177 : 77) + static_cast<uint64_t>(T);
    int n = 0;
    for (const auto& sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1], resident = sh[2];
        if (T == mv::kQ8_0G && cols % 256 != 0) continue;  // the layout's rows are whole 256-column groups
        for (bool random_bytes : {false, true}) {
            const auto w = weights(T, rows, cols, random_bytes, seed++);
            for (int variant = 0; variant < 3; ++variant) {
                const auto x = make_x(cols, variant, seed++);
                const Config& cfg = kConfigs[n++ % 2];
                CAPTURE(name_of(T));
                CAPTURE(kI8);
                CAPTURE(rows);
                CAPTURE(cols);
                CAPTURE(resident);
                CAPTURE(random_bytes);
                CAPTURE(variant);
                CAPTURE(cfg.reverse);
                // CTAs of kWarps warps, and on the wide shapes wider CTAs as the launcher may choose (the
                // CTA's items split among 7 or up to 16 warps)
                for (int warps : {mv::kWarps, cols >= 4096 ? 16 : cols >= 2048 ? 7 : 0}) {
                    if (warps == 0) continue;
                    // as the launcher, no wider than shared memory allows (227 KB)
                    while (mv::mma_smem_bytes<T, kI8>(mv::mma_grid(rows, resident).maxk, warps) + 64 > static_cast<int>(mv::kEmuSmemBytes)) --warps;
                    CAPTURE(warps);
                    if constexpr (kI8) {
                        const auto xq = quantize(x, cfg);
                        CHECK(rel_l2(run_i8<T>(w, rows, cols, xq, resident, cfg, warps), reference(T, w, rows, cols, dequantize(xq, cols))) <
                              1e-5);
                    } else {
                        mv_emu::rt.inexact = 0;
                        const auto y = run_mma<T>(w, rows, cols, x, resident, cfg, nullptr, warps);
                        CHECK(mv_emu::rt.inexact == 0);
                        CHECK(rel_l2(y, reference(T, w, rows, cols, x)) < 1e-5);
                    }
                }
            }
        }
    }
}

// The int8 kernel over several inputs: each column against float64 of the weights times that input as
// quantized; ragged rows, partial k-tiles, CTAs of one and several tiles, 2 to 8 inputs, and
// accumulation into y.
template <Type T>
void check_cols_type() {
    const int64_t b = quant::type_info(stored(T)).block_elems;
    const bool legacy = b == 32;
    const int64_t shapes[][3] = {{33, 3 * b, 1000}, {45, legacy ? 11 * b : 2 * b, 2}, {70, 1024, 1}, {16, 2048, 1000}};
    uint64_t seed = 707 + static_cast<uint64_t>(T);
    int n = 0;
    for (const auto& sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1], resident = sh[2];
        if (T == mv::kQ8_0G && cols % 256 != 0) continue;  // the layout's rows are whole 256-column groups
        for (int ncols : {2, 5, 8}) {
            const bool random_bytes = (n / 2) % 2 == 1, accumulate = n % 3 == 2;  // independent of cfg (n % 2)
            const Config& cfg = kConfigs[n++ % 2];
            const auto w = weights(T, rows, cols, random_bytes, seed++);
            std::vector<std::vector<float>> xs, xd;
            for (int c = 0; c < ncols; ++c) xs.push_back(make_x(cols, c % 3, seed++));
            const auto buf = quantize_rows(xs, cfg, xd);
            const auto* q = reinterpret_cast<const uint8_t*>(buf.data());
            std::vector<std::vector<float>> init;
            if (accumulate) init.push_back(normal(static_cast<size_t>(rows * ncols), seed++, 10.0f));
            const auto y = run_i8_cols<T, mv::kColsN>({w}, {rows}, cols, q, ncols, resident, cfg, accumulate ? &init : nullptr);
            for (int c = 0; c < ncols; ++c) {
                CAPTURE(name_of(T));
                CAPTURE(rows);
                CAPTURE(cols);
                CAPTURE(resident);
                CAPTURE(ncols);
                CAPTURE(c);
                CAPTURE(random_bytes);
                CAPTURE(accumulate);
                auto ref = reference(T, w, rows, cols, xd[static_cast<size_t>(c)]);
                std::vector<float> yc(y[0].begin() + c * rows, y[0].begin() + (c + 1) * rows);
                if (accumulate)
                    for (int64_t r = 0; r < rows; ++r) ref[static_cast<size_t>(r)] += init[0][static_cast<size_t>(c * rows + r)];
                CHECK(rel_l2(yc, ref) < 1e-5);
            }
        }
    }
}

template <Type T>
void check_plain_type() {
    const int64_t shapes[][2] = {{1, 8}, {5, 16}, {9, 1000}, {67, 4104}};
    uint64_t seed = 300 + static_cast<uint64_t>(T);
    int n = 0;
    for (const auto& sh : shapes) {
        const int64_t rows = sh[0], cols = sh[1];
        const auto w = weights(T, rows, cols, true, seed++);
        const auto x = make_x(cols, n % 3, seed++);
        const auto ref = reference(T, w, rows, cols, x);
        const Config& cfg = kConfigs[n++ % 2];
        CAPTURE(name_of(T));
        CAPTURE(rows);
        CAPTURE(cols);
        CHECK(rel_l2(run_plain<T, 1>(w, rows, cols, x, cfg), ref) < 1e-5);
        CHECK(rel_l2(run_plain<T, 4>(w, rows, cols, x, cfg), ref) < 1e-5);
    }
}

}  // namespace

TEST_CASE("emulated mat-vec: three matrices in one launch (q, k, v) match three launches and float64") {
    // Segments of 32 and 16 rows (whole tiles) and a ragged 21; one and two resident CTAs, so CTAs span
    // segment boundaries.
    const int64_t rows[3] = {32, 16, 21};
    uint64_t seed = 4242;
    for (int64_t resident : {1, 2, 1000}) {
        for (Type t : {Type::Q4_K, Type::Q6_K, Type::Q8_0, Type::Q5_0}) {
            CAPTURE(quant::type_info(t).name);
            CAPTURE(resident);
            const int64_t cols = 2 * 256;
            std::vector<std::vector<uint8_t>> w;
            for (int i = 0; i < 3; ++i) w.push_back(weights(t, rows[i], cols, true, seed++));
            const auto x = make_x(cols, 0, seed++);
            const Config& cfg = kConfigs[static_cast<size_t>(seed % 2)];
            std::vector<std::vector<float>> y;
            switch (t) {
                case Type::Q4_K: y = run_mma_segments<Type::Q4_K>(w, rows, cols, x, resident, cfg); break;
                case Type::Q6_K: y = run_mma_segments<Type::Q6_K>(w, rows, cols, x, resident, cfg); break;
                case Type::Q8_0: y = run_mma_segments<Type::Q8_0>(w, rows, cols, x, resident, cfg); break;
                default: y = run_mma_segments<Type::Q5_0>(w, rows, cols, x, resident, cfg); break;
            }
            for (int i = 0; i < 3; ++i) {
                CAPTURE(i);
                CHECK(rel_l2(y[static_cast<size_t>(i)], reference(t, w[static_cast<size_t>(i)], rows[i], cols, x)) < 1e-5);
            }
            if (t == Type::Q5_0) continue;  // no int8 kernel
            // the int8 kernel on the same segments, against float64 of x as quantized
            const AlignedXq xq = aligned_xq(x, cfg);
            const auto* q = xq.data();
            const auto& xd = xq.seen;
            switch (t) {
                case Type::Q4_K: y = run_mma_segments<Type::Q4_K, true>(w, rows, cols, x, resident, cfg, q); break;
                case Type::Q6_K: y = run_mma_segments<Type::Q6_K, true>(w, rows, cols, x, resident, cfg, q); break;
                default: y = run_mma_segments<Type::Q8_0, true>(w, rows, cols, x, resident, cfg, q); break;
            }
            for (int i = 0; i < 3; ++i) {
                CAPTURE(i);
                INFO("int8");
                CHECK(rel_l2(y[static_cast<size_t>(i)], reference(t, w[static_cast<size_t>(i)], rows[i], cols, xd)) < 1e-5);
            }
        }
    }
}

// A kernel of CTAs of R rows and `threads` threads (the dp4a q4_K and the staged kernels) over 1 to 3
// matrices (segments of `rows`, each but the last a multiple of R), y poisoned (or holding `init` to
// accumulate into) and fenced per matrix, run in forward or reverse CTA order. kernel(seg) runs one CTA's
// threads, with `smem` bytes of dynamic shared memory. xq (the kernel before's output) and y are poison
// until every thread of a CTA has reached pdl_wait (the emulator's check of the programmatic launch): the
// weights alone may be read before it.
template <int R, class Kernel>
std::vector<std::vector<float>> run_cta_rows(const std::vector<std::vector<uint8_t>>& w, const std::vector<int64_t>& rows, int64_t cols,
                                             const uint8_t* xq, const Config& cfg, const std::vector<float>* init, size_t smem,
                                             Kernel kernel, int threads = mv::kDpThreads) {
    mv::Segments seg;
    mv_emu::readable = {{xq, static_cast<size_t>(mv::xq_bytes(cols))}};
    std::vector<std::vector<float>> y(rows.size());
    int64_t end = 0;
    for (size_t i = 0; i < rows.size(); ++i) {
        y[i].assign(static_cast<size_t>(rows[i]) + 8, std::nanf(""));
        if (init) std::copy(init->begin(), init->begin() + rows[i], y[i].begin());
        for (size_t k = static_cast<size_t>(rows[i]); k < y[i].size(); ++k) y[i][k] = 12345.0f;
        mv_emu::readable.push_back({w[i].data(), w[i].size()});
        seg.w[seg.n] = w[i].data();
        seg.y[seg.n] = y[i].data();
        end += rows[i];
        seg.end[seg.n++] = end;
    }
    for (int i = seg.n; i < 3; ++i) seg.end[i] = end;
    const int64_t grid = (end + R - 1) / R;
    std::vector<int64_t> order(static_cast<size_t>(grid));
    for (int64_t b = 0; b < grid; ++b) order[static_cast<size_t>(b)] = cfg.reverse ? grid - 1 - b : b;
    {
        std::vector<mv_emu::DepRegion> dep = {{const_cast<uint8_t*>(xq), static_cast<size_t>(mv::xq_bytes(cols))}};
        for (auto& yi : y) dep.push_back(emu_test::region(yi));
        const emu_test::Dependent guard(std::move(dep));
        launch(grid, threads, smem, cfg, [&] { kernel(seg); }, &order);
    }
    for (size_t i = 0; i < rows.size(); ++i) {
        REQUIRE_MESSAGE(std::all_of(y[i].begin() + rows[i], y[i].end(), [](float v) { return v == 12345.0f; }), "y written past its end");
        y[i].resize(static_cast<size_t>(rows[i]));
    }
    return y;
}

// F: the block format of matvec_dp4a_kernel (mv::DpK<false> q4_K, mv::DpK<true> q5_K, mv::DpQ40 q4_0,
// mv::DpQ6K q6_K, and the others check_dp4a names).
// kGang: one-warp row groups a CTA (kLanes 32), so a CTA's R kGang rows may span segments.
template <class F, int R, int kLanes, bool kPrefetch, int kGang = 1>
std::vector<std::vector<float>> run_dp4a(const std::vector<std::vector<uint8_t>>& w, const std::vector<int64_t>& rows, int64_t cols,
                                         const uint8_t* xq, const Config& cfg, const std::vector<float>* init = nullptr) {
    auto kernel = [&](const mv::Segments& seg) {
        mv::matvec_dp4a_kernel<F, R, kLanes, kPrefetch, kGang>(seg, xq, static_cast<int>(cols), init != nullptr);
    };
    return run_cta_rows<R * kGang>(w, rows, cols, xq, cfg, init, 0, kernel, kLanes * kGang);
}
template <Type T, int R>
std::vector<std::vector<float>> run_staged(const std::vector<std::vector<uint8_t>>& w, const std::vector<int64_t>& rows, int64_t cols,
                                           const uint8_t* xq, const Config& cfg, const std::vector<float>* init = nullptr) {
    return run_cta_rows<R>(w, rows, cols, xq, cfg, init, static_cast<size_t>(mv::staged_smem<T, R>()), [&](const mv::Segments& seg) {
        mv::matvec_staged_kernel<T, R, 4>(seg, xq, static_cast<int>(cols), init != nullptr);
    });
}

// Kernels of CTAs of R rows on type T against float64 of x as quantized: for each row length in
// `blocks` (blocks a row) and each list of segment row counts shapes(blocks), quantizer and random
// weight blocks (every code, scale and min), fresh inputs, y accumulated into every third time.
// run(w, rows, cols, xq, cfg, init, check) runs each variant and hands check a label of it (its rows a CTA, its lanes a
// group) and y.
template <Type T, class Shapes, class Run>
void check_cta_rows(std::initializer_list<int64_t> blocks, uint64_t seed, Shapes shapes, Run run) {
    int n = 0;
    for (int64_t nblk : blocks) {
        const int64_t cols = quant::type_info(stored(T)).block_elems * nblk;
        for (const std::vector<int64_t>& rows : shapes(nblk)) {
            for (bool random_bytes : {false, true}) {
                std::vector<std::vector<uint8_t>> w;
                for (int64_t r : rows) w.push_back(weights(T, r, cols, random_bytes, seed++));
                const auto x = make_x(cols, n % 3, seed++);
                const Config& cfg = kConfigs[static_cast<size_t>(n++ % 2)];
                const AlignedXq q = aligned_xq(x, cfg);
                const bool acc = n % 3 == 0;
                const auto init = normal(32, seed++);
                std::vector<std::vector<double>> ref;
                for (size_t i = 0; i < rows.size(); ++i) {
                    ref.push_back(reference(T, w[i], rows[i], cols, q.seen));
                    if (acc)
                        for (size_t k = 0; k < ref[i].size(); ++k) ref[i][k] += init[k];
                }
                CAPTURE(cols);
                CAPTURE(rows.size());
                CAPTURE(random_bytes);
                CAPTURE(acc);
                run(w, rows, cols, q.data(), cfg, acc ? &init : nullptr, [&](int variant, const std::vector<std::vector<float>>& y) {
                    CAPTURE(variant);
                    for (size_t i = 0; i < rows.size(); ++i) {
                        CAPTURE(i);
                        CHECK(rel_l2(y[i], ref[i]) < 1e-5);
                    }
                });
            }
        }
    }
}

// Row lengths (`blocks`, blocks of T a row) with fewer units than threads, exactly as many, and a second
// partial round; segments of several matrices (q, k, v; gate, up), a ragged last one; 2 and 4 rows a
// CTA, CTAs of 1, 2 and 4 warps, and of 3 one-warp row groups; each unit loaded one iteration ahead or at
// the top of its own.
template <Type T>
void check_dp4a(std::initializer_list<int64_t> blocks, uint64_t seed) {
    using F = std::conditional_t<
        T == Type::Q4_0, mv::DpQ40,
        std::conditional_t<
            T == Type::Q6_K, mv::DpQ6K,
            std::conditional_t<
                T == mv::kQ6_KP, mv::DpQ6KP,
                std::conditional_t<
                    T == mv::kQ8_0G, mv::DpQ80G,
                    std::conditional_t<
                        T == mv::kQ5_0G, mv::DpQ50G,
                        std::conditional_t<
                            T == mv::kQ2_KP, mv::DpQ2KP,
                            std::conditional_t<
                                T == mv::kQ3_KP, mv::DpQ3KP,
                                std::conditional_t<T == Type::Q4_1, mv::DpQ41,
                                                   std::conditional_t<T == Type::Q5_1, mv::DpQ51, mv::DpK<T == Type::Q5_K>>>>>>>>>>;
    check_cta_rows<T>(
        blocks, seed, [](int64_t) { return std::vector<std::vector<int64_t>>{{5}, {8, 4, 7}, {12, 9}}; },
        [](const auto& w, const auto& rows, int64_t cols, const uint8_t* xq, const Config& cfg, const auto* in, auto check) {
            for (bool prefetch : {true, false}) {
                CAPTURE(prefetch);
                auto each_lanes = [&]<int R>() {
                    CAPTURE(R);
                    auto run = [&]<int kLanes, int kGang = 1>() {
                        return prefetch ? run_dp4a<F, R, kLanes, true, kGang>(w, rows, cols, xq, cfg, in)
                                        : run_dp4a<F, R, kLanes, false, kGang>(w, rows, cols, xq, cfg, in);
                    };
                    check(32, run.template operator()<32>());
                    check(64, run.template operator()<64>());
                    check(128, run.template operator()<128>());
                    // one-warp row groups 3 to a CTA (CTAs across segment ends, warps past the last row),
                    // labelled -3
                    check(-3, run.template operator()<32, 3>());
                };
                each_lanes.template operator()<2>();
                each_lanes.template operator()<4>();
            }
        });
}

// 1, 2, 16, 17 and 19 super-blocks a row.
TEST_CASE("emulated mat-vec: q4_K by dp4a on the int8 input matches float64") { check_dp4a<Type::Q4_K>({1, 2, 16, 17, 19}, 9191); }

// The same kernel on q5_K blocks (its fifth bits from qh; random blocks set every one of them).
TEST_CASE("emulated mat-vec: q5_K by the dp4a kernel on the int8 input matches float64") {
    check_dp4a<Type::Q5_K>({1, 2, 16, 17, 19}, 9292);
}

// q4_0 on direct loads (rows of whole 256-column groups: 8 blocks, 144 bytes): rows of 8, 16, 136 and 152
// blocks.
TEST_CASE("emulated mat-vec: q4_0 by dp4a on direct loads of 8-block groups matches float64") {
    check_dp4a<Type::Q4_0>({8, 16, 136, 152}, 9393);
}

// q4_1 and q5_1 on direct loads of the file's blocks (rows 16-byte aligned: multiples of 4 and 2 blocks).
// Rows of whole 8-block groups and rows ending in a short one (q4_1: 4 blocks; q5_1: 2, 4 and 6), 28
// blocks (the 0.5B's 896 columns), and rows of more units than a CTA has threads (a second round). The
// matrices end at their last block, so a load past one fails the emulator's bounds check.
TEST_CASE("emulated mat-vec: q4_1 and q5_1 by dp4a on direct loads of the file's blocks match float64") {
    SUBCASE("q4_1") { check_dp4a<Type::Q4_1>({4, 8, 12, 16, 28, 140}, 9411); }
    SUBCASE("q5_1") { check_dp4a<Type::Q5_1>({2, 6, 8, 12, 14, 28, 138}, 9511); }
}

// q6_K on direct loads (210-byte blocks at every even address: a block's shift in its aligned 8 bytes
// is 2 (row blocks + b) mod 8, so rows of 1, 2, 3, 17 and 19 blocks meet every shift and both halves of
// a 4-byte word; the matrices end at their last block, so a load past one fails the emulator's bounds
// check).
TEST_CASE("emulated mat-vec: q6_K by dp4a on direct loads of 2-byte aligned blocks matches float64") {
    check_dp4a<Type::Q6_K>({1, 2, 3, 16, 17, 19}, 9494);
}

// q6_K copied padded at load (mv::kQ6_KP): its one reader, the dp4a kernel of one input, against float64
// of the file's blocks, which the test recovers from the padded bytes by the layout's description
// (unpadded), so a copy and a reader that agree with each other but not with the description fail too.
TEST_CASE("emulated mat-vec: q6_K padded for the one-token mat-vec (kQ6_KP) by dp4a matches float64") {
    SUBCASE("the copy") {
        for (bool random_bytes : {false, true}) {
            const auto w = weights(Type::Q6_K, 5, 768, random_bytes, 4343);
            const auto p = padded(w, 5, 768);
            CHECK(p.size() == w.size() / 210 * 224);
            CHECK(unpadded(p) == w);
        }
    }
    // rows of 1, 2, 3, 16, 17 and 19 blocks, as DpQ6K's
    SUBCASE("dp4a on direct loads") { check_dp4a<mv::kQ6_KP>({1, 2, 3, 16, 17, 19}, 9696); }
}

// q4_K beside padded q6_K in one launch (matvec_dp4a_mixed_kernel: a Q4_K_M layer's q and k with a v of more
// bits): segments 0 .. n0 - 1 of q4_K, the rest of kQ6_KP, each against float64 of its own type. Rows of 1, 2,
// 16 and 17 super-blocks; one and two matrices of either type; 2 and 4 rows a CTA, CTAs of 1, 2 and 4 warps,
// with and without prefetch. A kernel that read a segment in the other format, or split the types one
// matrix off, would fail every check of that segment.
TEST_CASE("emulated mat-vec: q4_K beside padded q6_K in one launch (the mixed dp4a kernel) matches float64") {
    struct Shape {
        std::vector<int64_t> rows;
        int n0;
    };
    const Shape shapes[] = {{{16, 8, 12}, 2}, {{16, 5}, 1}, {{8, 16, 9}, 1}};
    uint64_t seed = 9797;
    int n = 0;
    for (int64_t nblk : {1, 2, 16, 17}) {
        const int64_t cols = 256 * nblk;
        for (const Shape& sh : shapes)
            for (bool random_bytes : {false, true}) {
                std::vector<std::vector<uint8_t>> w;
                std::vector<std::vector<double>> ref;
                const auto x = make_x(cols, n % 3, seed++);
                const Config& cfg = kConfigs[static_cast<size_t>(n++ % 2)];
                const AlignedXq q = aligned_xq(x, cfg);
                const bool acc = n % 3 == 0;
                const auto init = normal(32, seed++);
                for (size_t i = 0; i < sh.rows.size(); ++i) {
                    const Type t = static_cast<int>(i) < sh.n0 ? Type::Q4_K : mv::kQ6_KP;
                    w.push_back(weights(t, sh.rows[i], cols, random_bytes, seed++));
                    ref.push_back(reference(t, w.back(), sh.rows[i], cols, q.seen));
                    if (acc)
                        for (size_t k = 0; k < ref[i].size(); ++k) ref[i][k] += init[k];
                }
                CAPTURE(cols);
                CAPTURE(sh.rows.size());
                CAPTURE(sh.n0);
                CAPTURE(random_bytes);
                CAPTURE(acc);
                auto check = [&]<int R, int kLanes, bool kPrefetch>() {
                    CAPTURE(R);
                    CAPTURE(kLanes);
                    CAPTURE(kPrefetch);
                    const auto y = run_cta_rows<R>(
                        w, sh.rows, cols, q.data(), cfg, acc ? &init : nullptr, 0,
                        [&](const mv::Segments& seg) {
                            mv::matvec_dp4a_mixed_kernel<mv::DpK<false>, mv::DpQ6KP, R, kLanes, kPrefetch>(seg, sh.n0, q.data(), static_cast<int>(cols),
                                                                                                         acc);
                        },
                        kLanes);
                    for (size_t i = 0; i < sh.rows.size(); ++i) {
                        CAPTURE(i);
                        CHECK(rel_l2(y[i], ref[i]) < 1e-5);
                    }
                };
                check.template operator()<4, 32, true>();
                check.template operator()<4, 64, true>();
                check.template operator()<4, 128, true>();
                check.template operator()<4, 64, false>();
                check.template operator()<2, 128, false>();
            }
    }
}

// q8_0 regrouped at load (mv::kQ8_0G): its readers are the dp4a kernel (one input), the int8 MMA kernel
// (one input: builds without dp4a; several: a few tokens) and the f16-input MMA kernel (matvec_int8 off),
// each against float64 of the file's blocks, which the test recovers from the grouped bytes by the
// layout's description (ungrouped), so a regrouping and a reader that agree with each other but not with
// the description fail too.
TEST_CASE("emulated mat-vec: q8_0 regrouped for the mat-vecs (kQ8_0G) through every kernel that reads it matches float64") {
    SUBCASE("the regrouping") {
        for (bool random_bytes : {false, true}) {
            const auto w = weights(Type::Q8_0, 5, 768, random_bytes, 4242);
            const auto g = grouped(w, 5, 768);
            CHECK(g != w);
            CHECK(ungrouped(g, 5, 768) == w);
        }
    }
    // The load's copy with a padded last group (MINFER_Q80_COPY): rows of 1, 9 and 28 blocks (the 0.5B's
    // 896 columns)
    SUBCASE("the grouped copy") {
        for (int64_t nb : {1, 9, 28})
            for (bool random_bytes : {false, true}) {
                CAPTURE(nb);
                const auto w = weights(Type::Q8_0, 3, 32 * nb, random_bytes, 4244);
                const auto g = grouped(w, 3, 32 * nb);
                CHECK(g.size() == static_cast<size_t>(3 * ((nb + 7) / 8) * 272));
                CHECK(ungrouped(g, 3, 32 * nb) == w);
            }
    }
    // rows of 8, 16, 136 and 152 blocks, as q4_0's direct loads; and the copies' rows of 1, 9, 28 and 137
    // blocks (a padded last group: units of that group past the row never loaded)
    SUBCASE("dp4a on direct loads") { check_dp4a<mv::kQ8_0G>({8, 16, 136, 152, 1, 9, 28, 137}, 9595); }
    SUBCASE("int8 MMA, one input") { check_mma_type<mv::kQ8_0G, true>(); }
    SUBCASE("int8 MMA, several inputs") { check_cols_type<mv::kQ8_0G>(); }
    SUBCASE("f16 MMA") { check_mma_type<mv::kQ8_0G>(); }
}

// q5_0 copied grouped at load (mv::kQ5_0G, MINFER_Q50_COPY): its one reader, the dp4a kernel of one input,
// against float64 of the file's blocks, which the test recovers from the grouped bytes by the layout's
// description (q50_ungrouped), so a copy and a reader that agree with each other but not with the
// description fail too. Random blocks set every fifth bit and nibble.
TEST_CASE("emulated mat-vec: q5_0 copied grouped for the one-token mat-vec (kQ5_0G) by dp4a matches float64") {
    SUBCASE("the copy") {  // rows of 1, 9 and 28 blocks (the 0.5B's 896 columns: a padded last group), and 16
        for (int64_t nb : {1, 9, 16, 28})
            for (bool random_bytes : {false, true}) {
                CAPTURE(nb);
                const auto w = weights(Type::Q5_0, 3, 32 * nb, random_bytes, 4545);
                const auto g = q50_grouped(w, 3, 32 * nb);
                CHECK(g.size() == static_cast<size_t>(3 * ((nb + 7) / 8) * 176));
                CHECK(q50_ungrouped(g, 3, 32 * nb) == w);
            }
    }
    // rows of whole groups (8, 16, 152 blocks) and with a padded last group (1, 9, 28, 137)
    SUBCASE("dp4a on direct loads") { check_dp4a<mv::kQ5_0G>({8, 16, 152, 1, 9, 28, 137}, 9797); }
}

// Segments whose byte lengths are multiples of 16, as the launcher requires of the staged kernel
// (cuda/matvec.cu; blocks of 2 x odd bytes: rows x blocks a multiple of 8), so any read past a matrix
// fails the emulator's bounds check; row counts that are not multiples of R where the length allows.
std::vector<std::vector<int64_t>> staged_shapes(int64_t nblk) {
    if (nblk % 8 == 0) return {{5}, {8, 4, 7}, {12, 9}};
    if (nblk % 4 == 0) return {{6}, {8, 4, 6}};
    if (nblk % 2 == 0) return {{4}, {8, 4, 12}};
    return {{8}, {16, 8, 24}};
}
template <Type T>
void check_staged(std::initializer_list<int64_t> blocks, uint64_t seed) {
    check_cta_rows<T>(blocks, seed, staged_shapes,
                      [](const auto& w, const auto& rows, int64_t cols, const uint8_t* xq, const Config& cfg, const auto* in, auto check) {
                          for (const auto& m : w) REQUIRE(m.size() % 16 == 0);
                          check(2, run_staged<T, 2>(w, rows, cols, xq, cfg, in));
                          check(4, run_staged<T, 4>(w, rows, cols, xq, cfg, in));
                      });
}

TEST_CASE("emulated mat-vec: q6_K, q8_0 and q4_0 by staged dp4a on the int8 input match float64") {
    // Row lengths with fewer groups than warps, a partial group, a warp's second and third group (the
    // loads issued a group ahead); odd lengths put every other row at a 2-byte aligned address; 1 to 3
    // segments; 2 and 4 rows a CTA.
    SUBCASE("q6_K") { check_staged<Type::Q6_K>({1, 2, 3, 16, 17, 19, 40}, 6161); }
    SUBCASE("q8_0") { check_staged<Type::Q8_0>({1, 7, 16, 17, 64, 65, 150}, 6262); }
    SUBCASE("q4_0") { check_staged<Type::Q4_0>({1, 7, 16, 17, 64, 65, 150}, 6363); }
}

TEST_CASE("emulated mat-vec: SwiGLU formed as the input is loaded equals the product of silu(gate) * up") {
    uint64_t seed = 5151;
    for (int64_t cols : {256, 3 * 256}) {
        const auto w = weights(Type::Q4_K, 40, cols, true, seed++);
        const auto gate = make_x(cols, 0, seed++), up = make_x(cols, 0, seed++);
        std::vector<float> h(static_cast<size_t>(cols));
        for (size_t i = 0; i < h.size(); ++i) h[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
        CAPTURE(cols);
        CHECK(rel_l2(run_mma<Type::Q4_K>(w, 40, cols, gate, 2, kConfigs[0], &up), reference(Type::Q4_K, w, 40, cols, h)) < 1e-5);
        // and not the product of gate alone
        CHECK(rel_l2(run_mma<Type::Q4_K>(w, 40, cols, gate, 2, kConfigs[1]), reference(Type::Q4_K, w, 40, cols, h)) > 1e-2);
    }
}

TEST_CASE("emulated mat-vec: the grid shares tiles evenly") {
    for (int64_t rows : {1, 16, 17, 3584, 18944, 152064, 1000000}) {
        const mv::MmaGrid g = mv::mma_grid(rows, 528);
        const int64_t tiles = (rows + 15) / 16;
        CAPTURE(rows);
        CHECK(g.maxk >= 1);
        CHECK(g.maxk <= mv::kMaxTilesPerCta);
        CHECK(g.grid * g.maxk >= tiles);       // every tile has a CTA
        CHECK(g.grid * (g.maxk - 1) < tiles);  // and every CTA gets maxk or maxk - 1 tiles
        if (tiles <= 528) CHECK(g.grid == tiles);
    }
}

TEST_CASE("emulated mat-vec: legacy types through the tensor cores") {
    check_mma_type<Type::Q4_0>();
    check_mma_type<Type::Q4_1>();
    check_mma_type<Type::Q5_0>();
    check_mma_type<Type::Q5_1>();
    check_mma_type<Type::Q8_0>();
}

TEST_CASE("emulated mat-vec: K-quants through the tensor cores") {
    check_mma_type<Type::Q2_K>();
    check_mma_type<Type::Q3_K>();
    check_mma_type<Type::Q4_K>();
    check_mma_type<Type::Q5_K>();
    check_mma_type<Type::Q6_K>();
}

TEST_CASE("emulated mat-vec: f32, f16, bf16") {
    check_plain_type<Type::F32>();
    check_plain_type<Type::F16>();
    check_plain_type<Type::BF16>();
}

TEST_CASE("emulated mat-vec: the int8 input keeps 15 bits of each 32-column block") {
    uint64_t seed = 909;
    for (int64_t cols : {32, 96, 1024}) {
        for (int variant = 0; variant < 3; ++variant) {
            const auto x = make_x(cols, variant, seed++);
            const auto xq = quantize(x, kConfigs[variant % 2]);
            const auto back = dequantize(xq, cols);
            CAPTURE(cols);
            CAPTURE(variant);
            for (int64_t b0 = 0; b0 < cols; b0 += 32) {
                double am = 0;
                for (int64_t c = b0; c < b0 + 32; ++c) am = std::max(am, std::fabs(double(x[size_t(c)])));
                int sums[2] = {0, 0};
                for (int64_t c = b0; c < b0 + 32; ++c) {
                    const int hi = static_cast<int8_t>(xq[size_t(c)]), lo = static_cast<int8_t>(xq[size_t(cols + c)]);
                    CHECK(std::abs(hi) <= 127);
                    sums[(c - b0) / 16] += 256 * hi + lo;
                    // within half a digit (plus the f32 rounding of the scale)
                    CHECK(std::fabs(double(back[size_t(c)]) - x[size_t(c)]) <= am * (0.5 / 32512 + 3e-7));
                }
                int rec[4];
                std::memcpy(rec, &xq[size_t(2 * cols + b0 / 32 * 16)], 16);
                CHECK(rec[1] == sums[0]);
                CHECK(rec[2] == sums[1]);
                CHECK(rec[3] == 0);
                if (am == 0) CHECK(rec[0] == 0);
            }
        }
    }
    // a block of values below 1e-33 becomes zeros, its neighbours keep theirs
    std::vector<float> x(64, 1e-35f);
    for (int i = 32; i < 64; ++i) x[size_t(i)] = float(i);
    const auto back = dequantize(quantize(x, kConfigs[0]), 64);
    CHECK(back[0] == 0.0f);
    CHECK(std::fabs(back[40] - 40.0f) < 1e-3f);
}

TEST_CASE("emulated mat-vec: int8 family (q4_0, q8_0, q4_K, q6_K) on the quantized input") {
    check_mma_type<Type::Q4_0, true>();
    check_mma_type<Type::Q8_0, true>();
    check_mma_type<Type::Q4_K, true>();
    check_mma_type<Type::Q6_K, true>();
}

TEST_CASE("emulated mat-vec: several inputs quantized block-interleaved hold what each quantized alone holds") {
    uint64_t seed = 6060;
    for (int nrows : {2, 3, 8}) {
        std::vector<std::vector<float>> xs, back;
        for (int r = 0; r < nrows; ++r) xs.push_back(make_x(96, r % 3, seed++));
        const auto buf = quantize_rows(xs, kConfigs[nrows % 2], back);
        for (int r = 0; r < nrows; ++r) {
            CAPTURE(nrows);
            CAPTURE(r);
            const auto alone = dequantize(quantize(xs[static_cast<size_t>(r)], kConfigs[0]), 96);
            CHECK(std::equal(alone.begin(), alone.end(), back[static_cast<size_t>(r)].begin()));
        }
        // every byte written (the buffer was filled with 0x5a): the records' zero words say so
        const auto* q = reinterpret_cast<const uint8_t*>(buf.data());
        for (int64_t b = 0; b < 3 * nrows; ++b) {
            int w = 1;
            std::memcpy(&w, q + 2 * 96 * nrows + b * 16 + 12, 4);
            CHECK(w == 0);
        }
    }
}

TEST_CASE("emulated mat-vec: int8 family over several inputs (a few tokens in one read of the weights)") {
    check_cols_type<Type::Q4_0>();
    check_cols_type<Type::Q8_0>();
    check_cols_type<Type::Q4_K>();
    check_cols_type<Type::Q6_K>();
}

TEST_CASE("emulated mat-vec: int8 family over several inputs and three matrices in one launch") {
    // q, k, v of 32, 16 and 21 rows: y[i] is [ncols][rows[i]] per matrix.
    const std::vector<int64_t> rows = {32, 16, 21};
    const int64_t cols = 512;
    const int ncols = 3;
    uint64_t seed = 8080;
    for (int64_t resident : {1, 1000}) {
        std::vector<std::vector<uint8_t>> w;
        for (int i = 0; i < 3; ++i) w.push_back(weights(Type::Q4_K, rows[static_cast<size_t>(i)], cols, true, seed++));
        std::vector<std::vector<float>> xs, xd;
        for (int c = 0; c < ncols; ++c) xs.push_back(make_x(cols, 0, seed++));
        const auto buf = quantize_rows(xs, kConfigs[0], xd);
        const auto* q = reinterpret_cast<const uint8_t*>(buf.data());
        const auto y = run_i8_cols<Type::Q4_K, mv::kColsN>(w, rows, cols, q, ncols, resident, kConfigs[resident % 2]);
        for (size_t i = 0; i < 3; ++i)
            for (int c = 0; c < ncols; ++c) {
                CAPTURE(resident);
                CAPTURE(i);
                CAPTURE(c);
                std::vector<float> yc(y[i].begin() + c * rows[i], y[i].begin() + (c + 1) * rows[i]);
                CHECK(rel_l2(yc, reference(Type::Q4_K, w[i], rows[i], cols, xd[static_cast<size_t>(c)])) < 1e-5);
            }
    }
}

// q2_K and q3_K copied arranged at load (mv::kQ2_KP, kQ3_KP, MINFER_K23_COPY): their one reader, the dp4a kernel
// of one input, against float64 of the file's blocks, which the test recovers from the arranged bytes by
// the layout's description (unarranged), so a copy and a reader that agree with each other but not with
// the description fail too. Random blocks set every code, third bit, scale and min.
TEST_CASE("emulated mat-vec: q2_K and q3_K arranged for the one-token mat-vec (kQ2_KP, kQ3_KP) by dp4a match float64") {
    // the copy, both types (every subcase runs it)
    for (Type t : {mv::kQ2_KP, mv::kQ3_KP})
        for (bool random_bytes : {false, true}) {
            CAPTURE(name_of(t));
            CAPTURE(random_bytes);
            const auto w = weights(stored(t), 5, 768, random_bytes, 4646);
            const auto a = arranged(t, w, 5, 768);
            CHECK(a.size() == w.size() / quant::type_info(stored(t)).block_bytes * (t == mv::kQ3_KP ? 112 : 84));
            CHECK(a != w);
            CHECK(unarranged(t, a) == w);
        }
    // rows of 1, 2, 3, 16, 17 and 19 blocks, as the q6_K formats'
    SUBCASE("q2_K: dp4a on direct loads") { check_dp4a<mv::kQ2_KP>({1, 2, 3, 16, 17, 19}, 9898); }
    SUBCASE("q3_K: dp4a on direct loads") { check_dp4a<mv::kQ3_KP>({1, 2, 3, 16, 17, 19}, 9999); }
}
