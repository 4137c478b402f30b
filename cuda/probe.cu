// Device discovery. The CUDA runtime is linked statically, so on a machine with no driver or no GPU
// this returns an error string instead of failing to load.
#include <cuda_runtime.h>

#include <cstdio>
#include <string>

#include "device/device.h"

namespace minfer::device {

Probe probe_cuda() {
    Probe p;
    p.built = true;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
        p.message = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
        cudaGetLastError();  // clear the non-sticky error so later calls start clean
        return p;
    }
    if (n == 0) {
        p.message = "no CUDA device";
        return p;
    }
    cudaDeviceProp prop;
    err = cudaGetDeviceProperties(&prop, 0);
    if (err != cudaSuccess) {
        p.message = std::string("cudaGetDeviceProperties: ") + cudaGetErrorString(err);
        cudaGetLastError();
        return p;
    }
    p.n_devices = n;
    char detail[64];
    std::snprintf(detail, sizeof detail, " (sm_%d%d, %.1f GiB)", prop.major, prop.minor,
                  static_cast<double>(prop.totalGlobalMem) / (1024.0 * 1024.0 * 1024.0));
    p.message = std::string(prop.name) + detail + (n > 1 ? " and " + std::to_string(n - 1) + " more" : "");
    return p;
}

}  // namespace minfer::device
