// cuBLAS as an optional f16 GEMM, loaded at run time with dlopen: libminfer has no link-time dependency
// on it, so machines without the library still load minfer and use the own kernel. cuBLAS dispatches to
// Hopper-class (wgmma) kernels that the own 64x64 WMMA kernel does not match.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <string>

namespace minfer::cuda {

// True when libcublas could be loaded and resolved (tried once per process); otherwise `why` says why.
bool cublas_available(std::string* why);

// The GEMM algorithm chosen by measurement (option gemm_tune), one per model, shared by its contexts:
// cuBLASLt (loaded at run time like cuBLAS) is asked for its candidates for a GEMM shape, each is timed
// on the call that first meets the shape, with cublasGemmEx's default choice among them, and the fastest
// is kept for every later call of that shape; the tokens count goes by powers of two (a shape first met
// at 300 tokens serves 257 to 512). Thread-safe. On the H200 the candidate cuBLASLt ranks first is the
// algorithm cublasGemmEx runs; the one measured fastest took the 7B's four GEMMs of a layer at 2,048
// tokens in 3.7% less time (up to 16% on one shape: tests/bench_cublaslt, docs/perf.md), for about 0.1 s
// more on the first call of each size. Off by default until a whole-prefill A/B on the device settles it
// (docs/perf.md, 2026-12-04, third session).
class GemmTuner;
// A tuner where cuBLASLt loads (null otherwise, `why` saying why); log_level: the model's, for one line
// per decision at debug level.
std::shared_ptr<GemmTuner> make_gemm_tuner(int log_level, std::string* why);

// One cuBLAS handle bound to one stream, with `workspace` (device memory of workspace_bytes, outliving
// the handle; null: cuBLAS's own) as its workspace where the library can take one, and the model's
// tuner (null: cublasGemmEx's own choice every time). Throws Error (MINFER_ERR_UNSUPPORTED when the
// library is missing, MINFER_ERR_DEVICE / OUT_OF_MEMORY on failures).
class Cublas {
public:
    Cublas(cudaStream_t stream, void* workspace, size_t workspace_bytes, GemmTuner* tuner = nullptr);
    ~Cublas();
    Cublas(const Cublas&) = delete;
    Cublas& operator=(const Cublas&) = delete;
    // The contract of gemm_f16: C[m][n] = sum_k A[m][k] * B[n][k] (accumulate: C[m][n] += the sum), f16
    // in, f32 accumulation and out.
    void gemm(const __half* a, const __half* b, float* c, int m, int n, int k, bool accumulate = false);
    // C[m][n] = sum_k A[m][k] * B[n][k] rounded to f16 (f32 accumulation), by cublasGemmEx's own choice of
    // algorithm (not the tuner's), in calls of at most MINFER_GEMM16_ROWS rows of A and C.
    void gemm16(const __half* a, const __half* b, __half* c, int m, int n, int k);

private:
    void gemm_ex(const __half* a, const __half* b, float* c, int m, int n, int k, bool accumulate);
    void* handle_ = nullptr;
    cudaStream_t stream_ = nullptr;
    void* workspace_ = nullptr;
    size_t workspace_bytes_ = 0;
    GemmTuner* tuner_ = nullptr;
};

// device::testing's hooks (lib/device/cuda_backend.h).
namespace testing_hooks {
void gemm_tune_force(bool on);
void gemm_tune_counts(uint64_t* decisions, uint64_t* lt_runs);
}  // namespace testing_hooks

}  // namespace minfer::cuda
