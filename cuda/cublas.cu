#include "cuda/cublas.cuh"

#include <cublasLt.h>  // types and enums only: every function is resolved with dlsym
#include <cublas_v2.h>
#include <dlfcn.h>

#include <algorithm>
#include <atomic>
#include <initializer_list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>

#include "core/error.h"
#include "core/log.h"
#include "cuda/common.cuh"

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

// The first of `names` (newest first) that dlopen loads, or null with `error` saying what every attempt
// ran into (each failure's dlerror).
void* open_library(std::initializer_list<const char*> names, const char* what, std::string& error) {
    std::string tried;
    for (const char* name : names) {
        if (void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL)) return lib;
        const char* e = dlerror();
        tried += tried.empty() ? "" : "; ";
        tried += std::string(name) + " (" + (e ? e : "no dlerror") + ")";
    }
    error = std::string("cannot load ") + what + "; tried " + tried;
    return nullptr;
}

const Api& api() {
    static Api a;
    static std::once_flag once;
    std::call_once(once, [] {
        void* lib = open_library({"libcublas.so.13", "libcublas.so.12", "libcublas.so"}, "cuBLAS", a.error);
        if (!lib) return;
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

// cuBLASLt's entry points (the tuner's), resolved the same way from libcublasLt.
struct LtApi {
    decltype(&cublasLtCreate) create = nullptr;
    decltype(&cublasLtDestroy) destroy = nullptr;
    decltype(&cublasLtMatmulDescCreate) desc_create = nullptr;
    decltype(&cublasLtMatmulDescDestroy) desc_destroy = nullptr;
    decltype(&cublasLtMatmulDescSetAttribute) desc_set = nullptr;
    decltype(&cublasLtMatrixLayoutCreate) layout_create = nullptr;
    decltype(&cublasLtMatrixLayoutDestroy) layout_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceCreate) pref_create = nullptr;
    decltype(&cublasLtMatmulPreferenceDestroy) pref_destroy = nullptr;
    decltype(&cublasLtMatmulPreferenceSetAttribute) pref_set = nullptr;
    decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic = nullptr;
    decltype(&cublasLtMatmulAlgoCheck) algo_check = nullptr;
    decltype(&cublasLtMatmul) matmul = nullptr;
    std::string error;
};

const LtApi& lt_api() {
    static LtApi a;
    static std::once_flag once;
    std::call_once(once, [] {
        void* lib = open_library({"libcublasLt.so.13", "libcublasLt.so.12", "libcublasLt.so"}, "cuBLASLt", a.error);
        if (!lib) return;
        auto sym = [&](auto& f, const char* name) {
            f = reinterpret_cast<std::remove_reference_t<decltype(f)>>(dlsym(lib, name));
            if (!f && a.error.empty()) a.error = std::string("libcublasLt lacks ") + name;
        };
        sym(a.create, "cublasLtCreate");
        sym(a.destroy, "cublasLtDestroy");
        sym(a.desc_create, "cublasLtMatmulDescCreate");
        sym(a.desc_destroy, "cublasLtMatmulDescDestroy");
        sym(a.desc_set, "cublasLtMatmulDescSetAttribute");
        sym(a.layout_create, "cublasLtMatrixLayoutCreate");
        sym(a.layout_destroy, "cublasLtMatrixLayoutDestroy");
        sym(a.pref_create, "cublasLtMatmulPreferenceCreate");
        sym(a.pref_destroy, "cublasLtMatmulPreferenceDestroy");
        sym(a.pref_set, "cublasLtMatmulPreferenceSetAttribute");
        sym(a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
        sym(a.algo_check, "cublasLtMatmulAlgoCheck");
        sym(a.matmul, "cublasLtMatmul");
    });
    return a;
}

std::atomic<bool> g_force_lt{false};          // device::testing::cuda_gemm_tune_force
std::atomic<uint64_t> g_decisions{0}, g_lt_runs{0};  // device::testing::cuda_gemm_tune_counts

// Candidates asked of cuBLASLt's heuristic per shape, and timed runs of each (the fastest counts).
constexpr int kCandidates = 8, kTimedRuns = 3;

}  // namespace

class GemmTuner {
public:
    GemmTuner(cublasLtHandle_t h, int log_level) : h_(h), log_level_(log_level) {}
    ~GemmTuner() {
        for (auto& [key, p] : plans_) p.release();
        lt_api().destroy(h_);
    }
    GemmTuner(const GemmTuner&) = delete;
    GemmTuner& operator=(const GemmTuner&) = delete;

    // C = A B^T (+ C) as Cublas::gemm states it, through the shape's decision (made here, timing the
    // candidates on this call, where there is none yet and the stream is not being captured). ex runs
    // cublasGemmEx's default into a given output. False: nothing was run (cublasGemmEx's turn).
    template <class Ex>
    bool run(const __half* a, const __half* b, float* c, int m, int n, int k, bool acc, void* ws, size_t ws_bytes, cudaStream_t stream,
             Ex&& ex) {
        std::lock_guard<std::mutex> lock(mu_);
        const int align = alignment(a, b, c);
        const auto shape = std::make_tuple(bucket(m), n, k, acc, align);
        auto d = decisions_.find(shape);
        if (d == decisions_.end()) {
            cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
            check(cudaStreamIsCapturing(stream, &st), "cuBLASLt: capture status");
            if (st != cudaStreamCaptureStatusNone) return false;  // no timing inside a graph: cuBLAS's own choice
            const std::optional<Decision> made = tune(a, b, c, m, n, k, acc, align, ws, ws_bytes, stream, ex);
            if (!made) return false;  // no scratch for the timing now: cuBLAS's choice, and a try next time
            d = decisions_.emplace(shape, *made).first;
            g_decisions.fetch_add(1, std::memory_order_relaxed);
        }
        if (!d->second.lt) return false;
        Plan& p = plan(m, n, k, acc, align);
        if (p.ok < 0) {  // the bucket's algorithm on this exact shape
            cublasLtMatmulHeuristicResult_t r{};
            p.ok = lt_api().algo_check(h_, p.op, p.a, p.b, p.c, p.c, &d->second.algo, &r) == CUBLAS_STATUS_SUCCESS &&
                   r.workspaceSize <= ws_bytes;
        }
        if (!p.ok) return false;
        if (matmul(p, d->second.algo, a, b, c, acc, ws, ws_bytes, stream) != CUBLAS_STATUS_SUCCESS) {
            // Not expected (the algorithm was checked on this shape and alignment): cuBLAS's choice instead,
            // from now on for this shape.
            cudaGetLastError();
            p.ok = 0;
            return false;
        }
        g_lt_runs.fetch_add(1, std::memory_order_relaxed);
        return true;
    }

private:
    struct Plan {
        cublasLtMatmulDesc_t op = nullptr;
        cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
        int ok = -1;  // the decision's algorithm checked on this shape: -1 not yet
        void release() {
            const LtApi& lt = lt_api();
            if (b) lt.layout_destroy(b);
            if (c) lt.layout_destroy(c);
            if (a) lt.layout_destroy(a);
            if (op) lt.desc_destroy(op);
            *this = Plan{};
        }
    };
    struct Decision {
        bool lt = false;  // false: cublasGemmEx's own choice
        cublasLtMatmulAlgo_t algo{};
    };
    using Key = std::tuple<int, int, int, bool, int>;  // (tokens or their bucket, n, k, accumulate, alignment)
    // Tokens by powers of two: one decision serves a bucket.
    static int bucket(int m) {
        int b = 1;
        while (b < m && b < (1 << 30)) b <<= 1;
        return b;
    }
    // The alignment the three operands share, up to 256 bytes: the candidates are asked for with it (a
    // chunk's output rows can start anywhere in the logits), and decisions are kept per alignment.
    static int alignment(const void* a, const void* b, const void* c) {
        const uintptr_t x = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) | reinterpret_cast<uintptr_t>(c) | 256u;
        return static_cast<int>(x & (~x + 1));
    }
    static void check_lt(cublasStatus_t st, const char* what) {
        if (st == CUBLAS_STATUS_SUCCESS) return;
        if (st == CUBLAS_STATUS_ALLOC_FAILED) fail(MINFER_ERR_OUT_OF_MEMORY, "%s: cuBLASLt could not allocate", what);
        fail(MINFER_ERR_DEVICE, "%s: cuBLASLt status %d", what, static_cast<int>(st));
    }
    // The descriptors of one exact shape, as cublasGemmEx is called: column-major D (n x m) = op(W)
    // op(X), W the weights ([n][k] row-major: k x n column-major, transposed), X the activations ([m][k]).
    // Kept only when complete.
    Plan& plan(int m, int n, int k, bool acc, int align) {
        const Key key{m, n, k, acc, align};
        auto it = plans_.find(key);
        if (it != plans_.end()) return it->second;
        const LtApi& lt = lt_api();
        struct Building {
            Plan p;
            ~Building() { p.release(); }
        } b;
        check_lt(lt.desc_create(&b.p.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "cublasLtMatmulDescCreate");
        const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
        check_lt(lt.desc_set(b.p.op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof ta), "cublasLtMatmulDescSetAttribute");
        check_lt(lt.desc_set(b.p.op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof tb), "cublasLtMatmulDescSetAttribute");
        check_lt(lt.layout_create(&b.p.a, CUDA_R_16F, static_cast<uint64_t>(k), static_cast<uint64_t>(n), k), "cublasLtMatrixLayoutCreate");
        check_lt(lt.layout_create(&b.p.b, CUDA_R_16F, static_cast<uint64_t>(k), static_cast<uint64_t>(m), k), "cublasLtMatrixLayoutCreate");
        check_lt(lt.layout_create(&b.p.c, CUDA_R_32F, static_cast<uint64_t>(n), static_cast<uint64_t>(m), n), "cublasLtMatrixLayoutCreate");
        Plan& p = plans_[key];
        p = b.p;
        b.p = Plan{};
        return p;
    }
    cublasStatus_t matmul(const Plan& p, const cublasLtMatmulAlgo_t& algo, const __half* a, const __half* b, float* c, bool acc, void* ws,
                          size_t ws_bytes, cudaStream_t stream) {
        const float alpha = 1.0f, beta = acc ? 1.0f : 0.0f;
        return lt_api().matmul(h_, p.op, &alpha, b, p.a, a, p.b, &beta, c, p.c, c, p.c, &algo, ws, ws_bytes, stream);
    }
    // Times cublasGemmEx's choice and cuBLASLt's candidates on this call's operands and keeps the fastest
    // (only cuBLASLt's under device::testing::cuda_gemm_tune_force). Without accumulation the candidates
    // write C itself (each overwrites it; the caller's run then writes the chosen one's result); with it,
    // a scratch output of C's size, freed after: where that cannot be had, no decision (nullopt). Where
    // cuBLASLt offers nothing for the shape, the decision is cublasGemmEx's choice.
    template <class Ex>
    std::optional<Decision> tune(const __half* a, const __half* b, float* c, int m, int n, int k, bool acc, int align, void* ws,
                                 size_t ws_bytes, cudaStream_t stream, Ex&& ex) {
        const LtApi& lt = lt_api();
        Plan& p = plan(m, n, k, acc, align);
        cublasLtMatmulPreference_t pref = nullptr;
        check_lt(lt.pref_create(&pref), "cublasLtMatmulPreferenceCreate");
        cublasLtMatmulHeuristicResult_t res[kCandidates] = {};
        int found = 0;
        const uint32_t align_bytes = static_cast<uint32_t>(align);
        cublasStatus_t st = lt.pref_set(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws_bytes, sizeof ws_bytes);
        for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                          CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
            if (st == CUBLAS_STATUS_SUCCESS) st = lt.pref_set(pref, attr, &align_bytes, sizeof align_bytes);
        if (st == CUBLAS_STATUS_SUCCESS) st = lt.heuristic(h_, p.op, p.a, p.b, p.c, p.c, pref, kCandidates, res, &found);
        lt.pref_destroy(pref);
        Decision best;
        if (st != CUBLAS_STATUS_SUCCESS || found <= 0) return best;  // NOT_SUPPORTED: nothing fits the shape
        float* out = c;
        struct Scratch {
            void* p = nullptr;
            ~Scratch() {
                if (p) cudaFree(p);
            }
        } scratch;
        if (acc) {
            if (cudaMalloc(&scratch.p, static_cast<size_t>(m) * n * sizeof(float)) != cudaSuccess) {
                cudaGetLastError();  // an allocation failure is not sticky: clear it
                scratch.p = nullptr;
                return std::nullopt;
            }
            check(cudaMemsetAsync(scratch.p, 0, static_cast<size_t>(m) * n * sizeof(float), stream), "cuBLASLt: tuning scratch");
            out = static_cast<float*>(scratch.p);
        }
        struct Events {
            cudaEvent_t e0 = nullptr, e1 = nullptr;
            ~Events() {
                if (e0) cudaEventDestroy(e0);
                if (e1) cudaEventDestroy(e1);
            }
        } ev;
        check(cudaEventCreate(&ev.e0), "cuBLASLt: tuning event");
        check(cudaEventCreate(&ev.e1), "cuBLASLt: tuning event");
        // The fastest of kTimedRuns runs after one untimed, in µs; a negative time where the run failed
        // (its error cleared).
        auto time = [&](auto&& launch) {
            if (!launch()) {
                cudaGetLastError();
                return -1.0f;
            }
            float t_min = 1e30f;
            for (int i = 0; i < kTimedRuns; ++i) {
                check(cudaEventRecord(ev.e0, stream), "cuBLASLt: tuning event");
                launch();
                check(cudaEventRecord(ev.e1, stream), "cuBLASLt: tuning event");
                check(cudaEventSynchronize(ev.e1), "cuBLASLt: tuning run");
                float ms = 0.0f;
                check(cudaEventElapsedTime(&ms, ev.e0, ev.e1), "cuBLASLt: tuning event");
                t_min = std::min(t_min, 1000.0f * ms);
            }
            return t_min;
        };
        const float t_ex = time([&] {
            ex(out);
            return true;
        });
        float t_best = g_force_lt.load() ? 1e30f : t_ex;
        int i_best = -1;
        for (int i = 0; i < found; ++i) {
            if (res[i].state != CUBLAS_STATUS_SUCCESS || res[i].workspaceSize > ws_bytes) continue;
            const float t = time([&] { return matmul(p, res[i].algo, a, b, out, acc, ws, ws_bytes, stream) == CUBLAS_STATUS_SUCCESS; });
            if (t >= 0.0f && t < t_best) t_best = t, i_best = i;
        }
        if (i_best >= 0) best = {true, res[i_best].algo};
        log_line(log_level_, MINFER_LOG_DEBUG,
                 "CUDA: GEMM %dx%dx%d%s (tokens up to %d, %d-byte aligned): %s, %.1f us (cublasGemmEx's choice %.1f us, %d candidates)", m, n,
                 k, acc ? " +=" : "", bucket(m), align, i_best >= 0 ? strprintf("cuBLASLt candidate %d", i_best).c_str() : "cublasGemmEx's choice",
                 t_best, t_ex, found);
        return best;
    }

    std::mutex mu_;
    cublasLtHandle_t h_;
    int log_level_;
    std::map<Key, Decision> decisions_;  // by token bucket
    std::map<Key, Plan> plans_;          // by exact tokens
};

std::shared_ptr<GemmTuner> make_gemm_tuner(int log_level, std::string* why) {
    const LtApi& lt = lt_api();
    if (!lt.error.empty()) {
        if (why) *why = lt.error;
        return nullptr;
    }
    cublasLtHandle_t h = nullptr;
    const cublasStatus_t st = lt.create(&h);
    if (st != CUBLAS_STATUS_SUCCESS) {
        if (why) *why = strprintf("cublasLtCreate: status %d", static_cast<int>(st));
        return nullptr;
    }
    return std::make_shared<GemmTuner>(h, log_level);
}

bool cublas_available(std::string* why) {
    const Api& a = api();
    if (why) *why = a.error;
    return a.error.empty();
}

Cublas::Cublas(cudaStream_t stream, void* workspace, size_t workspace_bytes, GemmTuner* tuner)
    : stream_(stream), workspace_(workspace), workspace_bytes_(workspace_bytes), tuner_(workspace ? tuner : nullptr) {
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
    if (tuner_ && tuner_->run(a, b, c, m, n, k, accumulate, workspace_, workspace_bytes_, stream_,
                              [&](float* out) { gemm_ex(a, b, out, m, n, k, accumulate); }))
        return;
    gemm_ex(a, b, c, m, n, k, accumulate);
}

// Rows of A and C a gemm16 call takes at most: on the H200 (cuBLAS 13.1), cublasGemmEx's f16-output
// choice for the 7B's gate/up took 1,506 us at 4,096 tokens but 3,557 at 8,192, against 3,301 for its f32
// output (tests/bench_cublaslt, docs/perf.md, 2026-12-04, fifth session): two calls of 4,096 rows beat one.
#ifndef MINFER_GEMM16_ROWS
#define MINFER_GEMM16_ROWS 4096
#endif
static_assert(MINFER_GEMM16_ROWS >= 1, "MINFER_GEMM16_ROWS is a row count");

void Cublas::gemm16(const __half* a, const __half* b, __half* c, int m, int n, int k) {
    const float alpha = 1.0f, beta = 0.0f;
    for (int m0 = 0; m0 < m; m0 += MINFER_GEMM16_ROWS) {
        const int rows = std::min(m - m0, MINFER_GEMM16_ROWS);
        check_cublas(api().gemm_ex(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, n, rows, k, &alpha, b, CUDA_R_16F, k,
                                   a + int64_t{m0} * k, CUDA_R_16F, k, &beta, c + int64_t{m0} * n, CUDA_R_16F, n, CUBLAS_COMPUTE_32F,
                                   CUBLAS_GEMM_DEFAULT),
                     "cublasGemmEx (f16 output)");
    }
}

void Cublas::gemm_ex(const __half* a, const __half* b, float* c, int m, int n, int k, bool accumulate) {
    // Row-major C[m][n] is column-major C^T (n x m, ld n) = B (as k x n column-major, transposed) times
    // A (k x m column-major).
    const float alpha = 1.0f, beta = accumulate ? 1.0f : 0.0f;
    check_cublas(api().gemm_ex(static_cast<cublasHandle_t>(handle_), CUBLAS_OP_T, CUBLAS_OP_N, n, m, k, &alpha, b, CUDA_R_16F, k, a,
                               CUDA_R_16F, k, &beta, c, CUDA_R_32F, n, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
                 "cublasGemmEx");
}

namespace testing_hooks {
void gemm_tune_force(bool on) { g_force_lt.store(on); }
void gemm_tune_counts(uint64_t* decisions, uint64_t* lt_runs) {
    *decisions = g_decisions.load();
    *lt_runs = g_lt_runs.load();
}
}  // namespace testing_hooks

}  // namespace minfer::cuda
