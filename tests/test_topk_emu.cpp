// The GPU's choice of a row's best logits (cuda/topk.cuh, the sampled decode step's candidates) run on the
// CPU through the CUDA emulation in tests/emu: both passes over rows of random logits (many equal ones,
// NaN, infinities, whole rows of NaN or of one value, lengths on and off the chunk size), for m from 1 to
// the largest, against the first m of a plain sort in the sampler's candidate order (higher logit first,
// lower id among equal ones, NaN as -INFINITY, the two zeros equal), key for key; and the extra tokens' logits, bit for bit.
// Outputs are poisoned first; each case runs in forward and reverse lane order (a missing barrier reads a
// stale value in one of them) over garbage shared memory. No GPU is needed; cuda_tests checks the same
// kernels on one, through the sampled decode.
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "cuda/topk.cuh"  // with tests/emu first on the include path: the emulated CUDA
#include "emu_test.h"

namespace {

namespace tk = minfer::cuda::tk;
using emu_test::Config;
using emu_test::kConfigs;

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u;
}

// The passes over rows `rows` of `logits` (n_vocab each): the m best keys of each, and the extra tokens'
// logits (n_extra a row).
void run(const Config& cfg, const std::vector<float>& logits, int n_vocab, const std::vector<int32_t>& rows, int m,
         const std::vector<int32_t>& extra, int n_extra, std::vector<unsigned long long>& keys, std::vector<float>& extra_out) {
    const int nr = static_cast<int>(rows.size());
    const int chunks = (n_vocab + tk::kChunk - 1) / tk::kChunk;
    std::vector<unsigned long long> part(static_cast<size_t>(nr) * chunks * m, 0x5a5a5a5a5a5a5a5aull);
    keys.assign(static_cast<size_t>(nr) * m, 0x5a5a5a5a5a5a5a5aull);
    extra_out.assign(static_cast<size_t>(nr) * n_extra, kNaN);
    for (float& f : extra_out) f = std::bit_cast<float>(0x7fc0dead);  // a NaN no logit here has
    emu_test::launch(mv_emu::Dim{static_cast<unsigned>(chunks), static_cast<unsigned>(nr), 1u}, tk::kThreads, tk::top_keys_smem(tk::kChunk), cfg,
                     [&] { tk::topk_chunk_kernel(logits.data(), n_vocab, rows.data(), m, part.data()); });
    emu_test::launch(nr, tk::kThreads, tk::top_keys_smem(chunks * m), cfg, [&] {
        tk::topk_row_kernel(logits.data(), n_vocab, rows.data(), m, chunks, part.data(), keys.data(), extra.data(), n_extra, extra_out.data());
    });
}

}  // namespace

TEST_CASE("the m best logits of each row, in candidate order, and the extra tokens' logits") {
    std::mt19937_64 rng(7);
    auto pick = [&](size_t n) { return static_cast<size_t>(rng() % n); };
    int rows_checked = 0, short_rows = 0;
    const int sizes[] = {1, 7, 300, 4095, 4096, 4097, 12289, 20000};
    for (int trial = 0; trial < 24; ++trial) {
        const int n_vocab = sizes[trial % 8];
        const int m = std::array<int, 6>{1, 2, 40, 64, 255, 256}[pick(6)];
        const int n_rows = 1 + static_cast<int>(pick(3));
        const int total_rows = n_rows + 2;  // rows not asked for lie between
        std::vector<float> logits(static_cast<size_t>(total_rows) * n_vocab);
        for (int r = 0; r < total_rows; ++r) {
            float* row = logits.data() + static_cast<size_t>(r) * n_vocab;
            const int kind = static_cast<int>(pick(7));
            for (int i = 0; i < n_vocab; ++i) {
                if (kind == 0) row[i] = static_cast<float>(pick(6)) - 2.0f;  // many equal logits
                else if (kind == 6) row[i] = std::array<float, 4>{0.0f, -0.0f, 0.0f, -1.0f}[pick(4)];  // zeros of both signs: equal
                else if (kind == 1) row[i] = 1.5f;                          // one value
                else if (kind == 2) row[i] = kNaN;                          // NaN everywhere
                else row[i] = std::normal_distribution<float>(0.0f, 3.0f)(rng);
            }
            if (kind >= 3)
                for (int j = static_cast<int>(pick(8)); j-- > 0;) row[pick(static_cast<size_t>(n_vocab))] = std::array<float, 4>{kNaN, -kInf, kInf, -0.0f}[pick(4)];
        }
        std::vector<int32_t> rows;
        for (int r = 0; r < n_rows; ++r) rows.push_back(static_cast<int32_t>(pick(static_cast<size_t>(total_rows))));
        const int n_extra = static_cast<int>(pick(5));
        std::vector<int32_t> extra;
        for (int i = 0; i < n_rows * n_extra; ++i) extra.push_back(static_cast<int32_t>(pick(static_cast<size_t>(n_vocab))));
        CAPTURE(trial);
        CAPTURE(n_vocab);
        CAPTURE(m);
        for (const Config& cfg : kConfigs) {
            CAPTURE(cfg.reverse);
            std::vector<unsigned long long> keys;
            std::vector<float> extra_out;
            run(cfg, logits, n_vocab, rows, m, extra, n_extra, keys, extra_out);
            for (int r = 0; r < n_rows; ++r) {
                const float* row = logits.data() + static_cast<size_t>(rows[static_cast<size_t>(r)]) * n_vocab;
                // NaN as -inf, -0 as +0 (the keys' logit; the two zeros are one logit to the sampler)
                auto key = [&](int i) { return std::isnan(row[i]) ? -kInf : row[i] == 0.0f ? 0.0f : row[i]; };
                std::vector<int> order(static_cast<size_t>(n_vocab));
                std::iota(order.begin(), order.end(), 0);
                std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return key(a) > key(b); });
                const int have = std::min(m, n_vocab);
                short_rows += have < m;
                bool same = true;
                for (int j = 0; j < m; ++j) {
                    const unsigned long long k = keys[static_cast<size_t>(r) * m + static_cast<size_t>(j)];
                    if (j >= have) {
                        same = same && k == 0;
                        continue;
                    }
                    const int id = order[static_cast<size_t>(j)];
                    const uint32_t logit_bits = tk::float_bits_of(static_cast<uint32_t>(k >> 32));
                    const int32_t got_id = static_cast<int32_t>(0xFFFFFFFFu - static_cast<uint32_t>(k & 0xFFFFFFFFu));
                    same = same && got_id == id && logit_bits == bits(key(id));
                }
                CHECK(same);
                for (int i = 0; i < n_extra; ++i) {
                    const size_t at = static_cast<size_t>(r) * n_extra + static_cast<size_t>(i);
                    CHECK(bits(extra_out[at]) == bits(row[extra[at]]));
                }
                ++rows_checked;
            }
        }
    }
    MESSAGE(rows_checked, " rows checked, ", short_rows, " of them shorter than m");
    CHECK(rows_checked >= 80);
    CHECK(short_rows > 0);
}
