// The tests' float64 reference for the attention kernels (CUDA, and their device code in the emulator):
// causal grouped-query attention. Query row t of q ([n][n_head * hd]) sits at position pos0 + t and
// attends to positions 0 .. pos0 + t; query head h reads KV head h / (n_head / n_head_kv), whose element
// d at position p is key(p, kvh, d) and val(p, kvh, d) (each test maps that to its own cache layout).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>

template <class Key, class Val>
std::vector<double> causal_attention_f64(const float* q, int n, int pos0, int n_head, int n_head_kv, int hd, Key key, Val val) {
    const int group = n_head / n_head_kv;
    const size_t q_dim = static_cast<size_t>(n_head) * static_cast<size_t>(hd);
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    std::vector<double> out(static_cast<size_t>(n) * q_dim, 0.0), score;
    for (int t = 0; t < n; ++t) {
        const int keys = pos0 + t + 1;
        score.resize(static_cast<size_t>(keys));
        for (int h = 0; h < n_head; ++h) {
            const float* qh = q + static_cast<size_t>(t) * q_dim + static_cast<size_t>(h) * hd;
            const int kvh = h / group;
            double mx = -INFINITY;
            for (int p = 0; p < keys; ++p) {
                double dot = 0;
                for (int d = 0; d < hd; ++d) dot += static_cast<double>(qh[d]) * key(p, kvh, d);
                score[static_cast<size_t>(p)] = dot * scale;
                mx = std::max(mx, dot * scale);
            }
            double total = 0;
            double* o = out.data() + static_cast<size_t>(t) * q_dim + static_cast<size_t>(h) * hd;
            for (int p = 0; p < keys; ++p) {
                const double e = std::exp(score[static_cast<size_t>(p)] - mx);
                total += e;
                for (int d = 0; d < hd; ++d) o[d] += e * val(p, kvh, d);
            }
            for (int d = 0; d < hd; ++d) o[d] /= total;
        }
    }
    return out;
}
