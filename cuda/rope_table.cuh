// RopeTable: a context's RoPE rotations as the kernels take them. No CUDA header: include it after CUDA's
// (or tests/emu's stand-ins), which declare float2.
#pragma once

namespace minfer::cuda {

// rope_table's output for positions 0 .. rows - 1 (rows 0: none; qkv_finish computes the rotations of
// positions past the table itself).
struct RopeTable {
    const float2* cs = nullptr;
    int rows = 0;
};

}  // namespace minfer::cuda
