// What the engine knows about GPUs, through host-only declarations (no .cuh outside cuda/).
#pragma once

#include <string>

namespace minfer::device {

struct Probe {
    bool built = false;   // compiled with the CUDA backend
    int n_devices = 0;    // usable CUDA devices
    std::string message;  // "NVIDIA H200 (sm_90, 139.8 GiB)" or why there is none
};

// Never throws; a missing driver or GPU is reported in `message`.
Probe probe_cuda();

}  // namespace minfer::device
