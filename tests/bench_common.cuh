// Helpers of the CUDA microbenchmarks (tests/bench_*.cu): exit on a CUDA error, time a launch between
// two events, the median of timings, a comma-separated list argument, and random inputs generated on the
// device. Included by one source file per program (the
// kernels are not inline).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

namespace bench {

inline void ck(cudaError_t e, const char* what) {
    if (e != cudaSuccess) {
        std::fprintf(stderr, "bench: %s: %s\n", what, cudaGetErrorString(e));
        std::exit(1);
    }
}

// The time of what `launch` enqueues on `stream`, in ms, between two events (waits for it).
template <class F>
float time_ms(cudaStream_t stream, cudaEvent_t e0, cudaEvent_t e1, F&& launch) {
    ck(cudaEventRecord(e0, stream), "record");
    launch();
    ck(cudaEventRecord(e1, stream), "record");
    ck(cudaEventSynchronize(e1), "run");
    float t = 0;
    ck(cudaEventElapsedTime(&t, e0, e1), "elapsed");
    return t;
}

// The median of timings (the upper one of an even count).
inline float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// "2048,8192" -> {2048, 8192} (each piece by atoi: an empty one is 0).
inline std::vector<int> int_list(const std::string& s) {
    std::vector<int> v;
    for (size_t at = 0; at <= s.size();) {
        const size_t comma = std::min(s.find(',', at), s.size());
        v.push_back(std::atoi(s.substr(at, comma - at).c_str()));
        at = comma + 1;
    }
    return v;
}

// A 64-bit mixing function (the murmur3 finalizer): hashes of consecutive indices look independent.
__device__ __forceinline__ uint64_t mix(uint64_t v) {
    v ^= v >> 33;
    v *= 0xff51afd7ed558ccdull;
    v ^= v >> 33;
    v *= 0xc4ceb9fe1a85ec53ull;
    v ^= v >> 33;
    return v;
}
__device__ __forceinline__ float unit(uint64_t v) { return static_cast<float>(mix(v) >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
// Roughly normal values (sum of four uniforms, centred, sd 1).
__device__ __forceinline__ float roughly_normal(uint64_t seed, uint64_t i) {
    float s = 0.0f;
    for (int j = 0; j < 4; ++j) s += unit(seed * 0x9E3779B97F4A7C15ull + 4 * i + j);
    return (s - 2.0f) * 1.7320508f;
}
__global__ void fill_f32(float* p, uint64_t n, uint64_t seed) {
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
        p[i] = roughly_normal(seed, i);
}
__global__ void fill_f16(__half* p, uint64_t n, uint64_t seed) {
    for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n; i += uint64_t(gridDim.x) * blockDim.x)
        p[i] = __float2half_rn(roughly_normal(seed, i));
}

}  // namespace bench
