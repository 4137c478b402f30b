// Tensor element types as GGUF numbers them, with their block geometry. The GGUF reader uses the table
// to validate every known type (so `minfer info` can describe any file); `supported` marks the types
// the engine computes with. Block layouts themselves live beside this file (one copy, shared with cuda/).
#pragma once

#include <cstdint>

namespace minfer::quant {

enum class Type : int32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ4_NL = 20, IQ3_S = 21, IQ2_S = 22, IQ4_XS = 23,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29, BF16 = 30,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39,
    // Not GGUF's: a layout the CUDA backend gives some q8_0 matrices on the device after loading them
    // (cuda/block_bits.cuh, cuda::mv::kQ8_0G). Never in a file (type_info knows no such id, so the
    // reader rejects it), never on the CPU. An enumerator only because nvcc's kernel stubs cannot name
    // a template argument of this enum that is none.
    Q8_0_GROUPED_DEVICE = 0x108,
    // The same for a copy of some q6_K matrices in 224-byte blocks (cuda/block_bits.cuh, cuda::mv::kQ6_KP).
    Q6_K_PADDED_DEVICE = 0x109,
    // The same for a copy of some q5_0 matrices in groups of 8 blocks (cuda/block_bits.cuh, cuda::mv::kQ5_0G).
    Q5_0_GROUPED_DEVICE = 0x10A,
    // The same for copies of some q2_K and q3_K matrices with each input block's codes together
    // (cuda/block_bits.cuh, cuda::mv::kQ2_KP and kQ3_KP).
    Q2_K_ARRANGED_DEVICE = 0x10B,
    Q3_K_ARRANGED_DEVICE = 0x10C,
};

enum class TypeStatus : uint8_t {
    unknown,    // never assigned
    removed,    // assigned once and withdrawn from the format (Q4_2, Q4_3, Q4_0_4_4, ...)
    known,      // valid in a GGUF file; the engine does not compute with it
    supported,  // the engine computes with it
};

struct TypeInfo {
    const char* name;     // "q4_K"; "" for unknown ids
    int32_t block_elems;  // elements per block (1 for plain types)
    int32_t block_bytes;  // bytes per block
    TypeStatus status;
};

// Any id, including negative or huge ones; unknown ids give {"", 0, 0, unknown}.
const TypeInfo& type_info(int32_t id);
inline const TypeInfo& type_info(Type t) { return type_info(static_cast<int32_t>(t)); }

}  // namespace minfer::quant
