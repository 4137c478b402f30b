// cuBLAS as an optional f16 GEMM, loaded at run time with dlopen: libminfer has no link-time dependency
// on it, so machines without the library still load minfer and use the own kernel. cuBLAS dispatches to
// Hopper-class (wgmma) kernels that the own 64x64 WMMA kernel does not match.
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <string>

namespace minfer::cuda {

// True when libcublas could be loaded and resolved (tried once per process); otherwise `why` says why.
bool cublas_available(std::string* why);

// One cuBLAS handle bound to one stream, with `workspace` (device memory of workspace_bytes, outliving
// the handle; null: cuBLAS's own) as its workspace where the library can take one. Throws Error (MINFER_ERR_UNSUPPORTED when the library is
// missing, MINFER_ERR_DEVICE / OUT_OF_MEMORY on failures).
class Cublas {
public:
    Cublas(cudaStream_t stream, void* workspace, size_t workspace_bytes);
    ~Cublas();
    Cublas(const Cublas&) = delete;
    Cublas& operator=(const Cublas&) = delete;
    // The contract of gemm_f16: C[m][n] = sum_k A[m][k] * B[n][k] (accumulate: C[m][n] += the sum), f16
    // in, f32 accumulation and out.
    void gemm(const __half* a, const __half* b, float* c, int m, int n, int k, bool accumulate = false);

private:
    void* handle_ = nullptr;
};

}  // namespace minfer::cuda
