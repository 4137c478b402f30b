// A float64 forward pass of Qwen2 and Qwen3 written with straight loops, sharing no kernel with the
// engine: weights are read with the dequantizer (test_quant pins it to hand-worked values), everything
// else is computed here in double. The whole-model tests of both backends (test_forward.cpp for the CPU,
// test_cuda.cpp for CUDA) compare the engine's logits with it, and the mutation check shows that each
// planted bug (engine/testing.h) moves the logits past the bound those comparisons use.
#pragma once

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace test::ref {

using Vec = std::vector<double>;

enum class Activations {
    exact,    // every matmul input in double: the function the model defines
    cpu_int8  // a quantized weight's matmul input rounded as the CPU backend rounds it (q8_0, q8_1 or q8_K
              // blocks, quant::vec_dot_type), the rest in double: the CPU backend's arithmetic, exactly
};

// Logits of the last of `tokens`, computed over the whole sequence at once (no KV cache).
Vec logits(const minfer::gguf::File& f, const std::vector<int32_t>& tokens, Activations acts = Activations::exact);

struct Rel {
    double l2 = 0;   // ||got - want|| / ||want||
    double max = 0;  // max |got - want| / max |want|
};
// Fails the test (REQUIRE) on a non-finite value in `got`.
Rel compare(const std::vector<float>& got, const Vec& want);

std::vector<int32_t> random_tokens(int n, int vocab, std::mt19937_64& rng);

}  // namespace test::ref
