#include "cuda/cublas.cuh"

#include <cublas_v2.h>  // types and enums only: every function is resolved with dlsym
#include <dlfcn.h>

#include <mutex>
#include <string>

#include "core/error.h"

namespace minfer::cuda {
namespace {

struct Api {
    decltype(&cublasCreate_v2) create = nullptr;
    decltype(&cublasDestroy_v2) destroy = nullptr;
    decltype(&cublasSetStream_v2) set_stream = nullptr;
    decltype(&cublasSetWorkspace_v2) set_workspace = nullptr;  // optional: null when the library lacks it
    // cublasGemmEx is overloaded in C++ (a legacy cudaDataType compute type); the C entry point is this one.
    using GemmEx = cublasStatus_t (*)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                                      const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                                      cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t);
    GemmEx gemm_ex = nullptr;
    std::string error;  // why the library is unusable, empty when it is
};

const Api& api() {
    static Api a;
    static std::once_flag once;
    std::call_once(once, [] {
        // Newest first; each failure's dlerror is kept, so the message says what every attempt ran into.
        void* lib = nullptr;
        std::string tried;
        for (const char* name : {"libcublas.so.13", "libcublas.so.12", "libcublas.so"}) {
            if ((lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) != nullptr) break;
            const char* e = dlerror();
            tried += tried.empty() ? "" : "; ";
            tried += std::string(name) + " (" + (e ? e : "no dlerror") + ")";
        }
        if (!lib) {
            a.error = "cannot load cuBLAS; tried " + tried;
            return;
        }
        auto sym = [&](const char* name) {
            void* p = dlsym(lib, name);
            if (!p && a.error.empty()) a.error = std::string("libcublas lacks ") + name;
            return p;
        };
        a.create = reinterpret_cast<decltype(a.create)>(sym("cublasCreate_v2"));
        a.destroy = reinterpret_cast<decltype(a.destroy)>(sym("cublasDestroy_v2"));
        a.set_stream = reinterpret_cast<decltype(a.set_stream)>(sym("cublasSetStream_v2"));
        a.gemm_ex = reinterpret_cast<decltype(a.gemm_ex)>(sym("cublasGemmEx"));
        a.set_workspace = reinterpret_cast<decltype(a.set_workspace)>(dlsym(lib, "cublasSetWorkspace_v2"));
        // The library stays loaded for the life of the process (handles may outlive any one model).
    });
    return a;
}

void check_cublas(cublasStatus_t st, const char* what) {
    if (st == CUBLAS_STATUS_SUCCESS) return;
    if (st == CUBLAS_STATUS_ALLOC_FAILED) fail(MINFER_ERR_OUT_OF_MEMORY, "%s: cuBLAS could not allocate GPU memory", what);
    fail(MINFER_ERR_DEVICE, "%s: cuBLAS status %d", what, static_cast<int>(st));
}

}  // namespace

bool cublas_available(std::string* why) {
    const Api& a = api();
    if (why) *why = a.error;
    return a.error.empty();
}

Cublas::Cublas(cudaStream_t stream, void* workspace, size_t workspace_bytes) {
    const Api& a = api();
    if (!a.error.empty()) fail(MINFER_ERR_UNSUPPORTED, "gemm=cublas: %s", a.error.c_str());
    cublasHandle_t h = nullptr;
    check_cublas(a.create(&h), "cublasCreate");
    handle_ = h;
    cublasStatus_t st = a.set_stream(h, stream);
    if (st != CUBLAS_STATUS_SUCCESS) {
        a.destroy(h);
        handle_ = nullptr;
        check_cublas(st, "cublasSetStream");
    }
    // A workspace of our own: cuBLAS then allocates nothing while a CUDA graph is being captured.
    if (a.set_workspace && workspace) {
        st = a.set_workspace(h, workspace, workspace_bytes);
        if (st != CUBLAS_STATUS_SUCCESS) {
            a.destroy(h);
            handle_ = nullptr;
            check_cublas(st, "cublasSetWorkspace");
        }
    }
}

Cublas::~Cublas() {
    if (handle_) api().destroy(static_cast<cublasHandle_t>(handle_));
}

void Cublas::gemm(const __half* a, const __half* b, float* c, int m, int n, int k, bool accumulate) {
    // Row-major C[m][n] is column-major C^T (n x m, ld n) = B (as k x n column-major, transposed) times
    // A (k x m column-major).
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    check_cublas(api().gemm_ex(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16F, k, a,
                               CUDA_R_16F, k, &beta, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

}  // namespace minfer::cuda
