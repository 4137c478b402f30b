// The CUDA backend's device state, shared by cuda/backend.cu (loading, the op-level interface) and
// cuda/forward.cu (the forward pass): RAII device memory charged to a VRAM account, a stream, and the
// model on the device (weights by tensor, the f16 weight cache, the prefill path, poisoning).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>

#include "core/error.h"
#include "cuda/block_bits.cuh"  // mv::kQ8_0G
#include "cuda/common.cuh"
#include "cuda/kernels.cuh"  // NarrowScratch
#include "device/cuda_backend.h"
#include "model/config.h"
#include "quant/types.h"

namespace minfer::cuda {

// Device memory charged to one VRAM account while it lives.
class DeviceMemory {
public:
    DeviceMemory() = default;
    DeviceMemory(uint64_t bytes, std::atomic<uint64_t>* account, const char* what) : account_(account) {
        if (bytes == 0) return;
        void* p = nullptr;
        const cudaError_t err = cudaMalloc(&p, bytes);
        if (err == cudaErrorMemoryAllocation) {
            size_t free_b = 0, total_b = 0;
            cudaMemGetInfo(&free_b, &total_b);
            cudaGetLastError();  // the failed allocation's error is not sticky
            fail(MINFER_ERR_OUT_OF_MEMORY, "%s: cannot allocate %s of GPU memory (%s free of %s)", what, device::mib(bytes).c_str(),
                 device::mib(free_b).c_str(), device::mib(total_b).c_str());
        }
        check(err, what);
        ptr_ = p;
        bytes_ = bytes;
        if (account_) account_->fetch_add(bytes_);
    }
    DeviceMemory(DeviceMemory&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_), account_(o.account_) { o.ptr_ = nullptr; }
    DeviceMemory& operator=(DeviceMemory&& o) noexcept {
        if (this != &o) {
            release();
            ptr_ = o.ptr_;
            bytes_ = o.bytes_;
            account_ = o.account_;
            o.ptr_ = nullptr;
        }
        return *this;
    }
    DeviceMemory(const DeviceMemory&) = delete;
    DeviceMemory& operator=(const DeviceMemory&) = delete;
    ~DeviceMemory() { release(); }

    template <typename T>
    T* as() const { return static_cast<T*>(ptr_); }
    // Hands the allocation to the caller, who frees it with cudaFree (and settles the account).
    void* take() {
        void* p = ptr_;
        ptr_ = nullptr;
        return p;
    }
    uint64_t bytes() const { return bytes_; }

private:
    void release() {
        if (!ptr_) return;
        cudaFree(ptr_);  // an error here (a poisoned context) cannot be acted on; the memory is gone either way
        if (account_) account_->fetch_sub(bytes_);
        ptr_ = nullptr;
    }
    void* ptr_ = nullptr;
    uint64_t bytes_ = 0;
    std::atomic<uint64_t>* account_ = nullptr;
};

class Stream {
public:
    Stream() { check(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreate"); }
    ~Stream() {
        if (s_) cudaStreamDestroy(s_);
    }
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;
    cudaStream_t get() const { return s_; }
    void sync(const char* what) const { check(cudaStreamSynchronize(s_), what); }

private:
    cudaStream_t s_ = nullptr;
};

}  // namespace minfer::cuda

namespace minfer::cuda {
class GemmTuner;  // cuda/cublas.cuh
}  // namespace minfer::cuda

// q8_0 matrices regrouped at load for the decode mat-vecs (cuda/block_bits.cuh, kQ8_0G): after the warm
// pass, each q8_0 matmul weight whose rows are whole 256-column groups, that has an f16 copy and is not
// the embedding table is rewritten in place, its eight blocks of each 256 columns as their eight scales
// and then their codes, so that the one-token mat-vec loads every block's codes straight into registers
// (DpQ80G, two 16-byte loads) where the file's 34-byte blocks, 2-byte aligned, go through shared memory.
// Nothing but the mat-vecs reads the quantized bytes of such a weight: the GEMMs of several tokens take
// its f16 copy (hence the condition), and CudaModel::device_type hands the mat-vecs the layout. The
// staged kernel streams q8_0 at 2.4-3.0 TB/s on the 7B's shapes against the direct-load q4_K kernel's 3.85
// (docs/perf.md), and q8_0's earlier direct loads, from the file's layout, lost 2% end to end to their
// overlapping loads and selects (24 16-byte loads a group of 17 units). 0: no regrouping (the A/B knob).
// Written without a GPU (2026-12-05, eighth session); measured on the H200 (docs/perf.md, 2026-12-05):
// the 7B's q8_0 tg128 318.7 -> 412.2-412.8 t/s (+29%), at depth 8,192 286.3 -> 362.9-365.7; on
// (device::testing::cuda_q80_groups turns it on or off at run time for the tests, for models loaded after).
#ifndef MINFER_Q80_GROUPS
#define MINFER_Q80_GROUPS 1
#endif

// q6_K matrices copied at load into a padded layout for the one-token mat-vec (cuda/block_bits.cuh,
// kQ6_KP): after the upload (and the warm pass, if any), each distinct q6_K matmul weight gets a copy in
// 224-byte blocks, 32-byte aligned, that the one-input dp4a kernel (DpQ6KP) reads with four loads a unit and
// no shifts, where the file's 210-byte blocks, 2-byte aligned, go through shared memory (the staged kernel,
// 2.3 TB/s on the 7B's down projection) or ten loads and funnel shifts a unit (DpQ6K, 2.9 TB/s on its
// output projection; docs/perf.md). The file's bytes stay for every other reader (several tokens, the
// GEMMs, the f16-input kernels): the copy costs 224/210 of the q6_K bytes in device memory (1.2 GB for a
// 7B q4_K_M file), and is made only where it leaves kW16Reserve free. Measured on the H200 (docs/perf.md,
// 2026-12-05, tenth session): the 7B's output projection 154.3 -> 118.1 µs (4.04 TB/s of the copy's
// bytes), its down projection unchanged (24.4 µs), q4_K_M tg128 479.5 -> 489.0 t/s (+1.9%). 0: no copy
// (the A/B knob; the tests turn it on or off at run time, device::testing::cuda_q6k_pad).
#ifndef MINFER_Q6K_PAD
#define MINFER_Q6K_PAD 1
#endif

// q8_0 matrices the load does not regroup in place (MINFER_Q80_GROUPS above: a model without the f16
// cache, as every model under the cache's size gate, w16_enable_bytes; or rows that are not whole
// 256-column groups, as the 0.5B's 896) copied grouped for the one-token mat-vec (cuda::q80_group_copy,
// a padded last group where a row needs one), which DpQ80G then reads by direct loads where the file's
// bytes take the staged kernel; the file's bytes stay for every other reader, and the copy is made only
// where it leaves kW16Reserve free. A qwen2-0.5b q8_0 token spends about half its time in the staged
// kernel (docs/perf.md, 2026-12-06: every mat-vec of that file, 1.0-1.5 TB/s under ncu), and the grouped
// layout made the 7B's q8_0 tg128 29% faster. Costs the copied q8_0 bytes again in device memory (8/7 of
// them for rows of 896 columns, 4 groups for 28 blocks: about 0.58 GB for the 0.5B, its tied output table
// included, 1.11 times its 0.525 GB of q8_0 matmul weights).
// Written without a GPU (2026-12-06, fifteenth session); measured in the sixteenth (H100, same call,
// docs/perf.md): the 0.5B's q8_0 tg128 1,336 -> 1,623 t/s (+21.5%), the 7B's q8_0 (regrouped in place,
// so no copy) and pp2048 unchanged. On; 0 is the A/B knob, and device::testing::cuda_q80_copy turns it
// on or off at run time for the tests, for models loaded after.
#ifndef MINFER_Q80_COPY
#define MINFER_Q80_COPY 1
#endif

// q5_0 matrices copied grouped for the one-token mat-vec (cuda::q50_group_copy, cuda/block_bits.cuh's
// kQ5_0G: the eight blocks' low nibbles, fifth bits and scales of each 256 columns apart, a padded last
// group where a row needs one), which the dp4a kernel (DpQ50G) reads by direct loads where the file's
// q5_0 had no int8 path at all: its one-token mat-vecs took the f16-input MMA kernel. q5_0 is what a
// qwen2-0.5b q4_K_M file keeps its 896-column matrices in (llama.cpp's fallback for rows that are not
// whole q4_K super-blocks); an H100 profile of such a token (docs/perf.md, 2026-12-06, sixteenth session)
// had those MMA launches at 42% of it. Measured there (H100, same call): the 0.5B's q4_K_M tg128 1,245 ->
// 1,505 t/s (+21%), its all-q5_0 mix 1,235 -> 1,619 (+31%). Costs the q5_0 bytes again in device memory (a whole group is the
// file's 176 bytes; 8/7 of them for 896-column rows), made only where kW16Reserve stays free; the file's
// bytes stay for every other reader. 0: no copy (the A/B knob; device::testing::cuda_q50_copy turns it on or off at
// run time for the tests, for models loaded after).
#ifndef MINFER_Q50_COPY
#define MINFER_Q50_COPY 1
#endif

// q2_K and q3_K matrices copied at load for the one-token mat-vec (cuda::k23_arrange, cuda/block_bits.cuh's
// kQ2_KP and kQ3_KP: each 32-column input block's 2-bit codes in 8 bytes together, q3_K's third bits in 4,
// the file's scales beside them), which the dp4a kernel (DpQ2KP, DpQ3KP) reads by direct loads where the
// file's bytes had no int8 path: their one-token mat-vecs took the f16-input MMA kernel, which streamed
// them at 18-22% of the copy bandwidth on the 7B's large shapes (docs/perf.md, 2026-12-01), against
// 64-100% for the dp4a kernel on q4_K. In the file a column's codes share bytes with three other input
// blocks' (and q3_K's 110-byte blocks are 2-byte aligned), which a thread of the dp4a kernel could only
// load as 32 bytes for the 8 it uses. Costs the q2_K bytes again in device memory (84 bytes a
// super-block, the file's size) and 112/110 of the q3_K bytes, made only where kW16Reserve stays free;
// the file's bytes stay for every other reader. Measured on an H100 (docs/perf.md, 2026-12-07, thirtieth
// session, same call): the 7B's q3_K tg128 268.6-269.8 -> 528.5-532.8 t/s (1.97x), its q2_K 384.0-385.2
// -> 659.5-663.2 (1.72x). On; 0: no copy (the A/B knob; device::testing::cuda_k23_copy turns it on or off
// at run time for the tests, for models loaded after).
#ifndef MINFER_K23_COPY
#define MINFER_K23_COPY 1
#endif

namespace minfer::device {

// A compile-time knob that the tests may override at run time: mode -1 the build's value, 0 off, 1 on.
template <int kBuilt>
struct RuntimeKnob {
    std::atomic<int> mode{-1};
    bool on() const {
        const int m = mode.load(std::memory_order_relaxed);
        return m < 0 ? kBuilt != 0 : m != 0;
    }
    int set(int m) { return mode.exchange(m < 0 ? -1 : m != 0, std::memory_order_relaxed); }  // the previous mode
};

class CudaModel {
public:
    WeightRegistry registry;
    std::unordered_map<const gguf::TensorInfo*, WeightKey> by_tensor;
    std::atomic<uint64_t> kv_bytes{0}, scratch_bytes{0}, w16_bytes{0};
    PrefillPath path = PrefillPath::two_pass;
    bool use_cublas = false;
    // gemm_tune: the cuBLAS GEMMs' algorithm per shape, chosen by measurement (cuda/cublas.cuh); null
    // without cuBLAS or cuBLASLt, or with gemm_tune=false.
    std::shared_ptr<cuda::GemmTuner> gemm_tuner;
    double warm_ms = 0.0;
    // The persistent f16 weight cache: the f16 copy of a registered weight, keyed by its device address
    // (stable for the model's lifetime, see WeightKey). Filled once by the warm pass, then read-only. The
    // copies lie in one allocation in the order the warm pass is given the weights (lib/engine lists each
    // layer's q, k, v, o, gate, up, down), each on a 256-byte boundary: where a copy's bytes are a multiple of 256, the next
    // one follows it directly, so a layer's q, k and v (and its gate and up) form one matrix of their rows
    // together, which PrefillGemm::run_concat multiplies in one GEMM (it checks the adjacency itself).
    cuda::DeviceMemory w16_arena;
    std::unordered_map<WeightKey, const __half*> w16;

    const __half* w16_of(WeightKey key) const {
        auto it = w16.find(key);
        return it == w16.end() ? nullptr : it->second;
    }

    // The q8_0 matrices regrouped at load (MINFER_Q80_GROUPS above); the type the mat-vecs are given for
    // a weight: cuda::mv::kQ8_0G for those, its file's type for every other.
    std::unordered_set<WeightKey> q80_grouped;
    quant::Type device_type(WeightKey key, quant::Type file_type) const {
        return q80_grouped.count(key) ? cuda::mv::kQ8_0G : file_type;
    }

    // Copies of matmul weights that the one-input int8 mat-vec reads in a layout of its own (`type`), in
    // one allocation, by the weight they copy (cuda/backend.cu, copy_for_matvec).
    struct MatvecCopies {
        quant::Type type;
        cuda::DeviceMemory arena;
        std::unordered_map<WeightKey, const void*> by_weight;
        const void* of(WeightKey key) const {  // the weight's copy, or null where it has none
            auto it = by_weight.find(key);
            return it == by_weight.end() ? nullptr : it->second;
        }
    };
    MatvecCopies q6k{cuda::mv::kQ6_KP, {}, {}};  // padded q6_K (MINFER_Q6K_PAD above)
    MatvecCopies q80{cuda::mv::kQ8_0G, {}, {}};  // grouped q8_0 not regrouped in place (MINFER_Q80_COPY)
    MatvecCopies q50{cuda::mv::kQ5_0G, {}, {}};  // grouped q5_0 (MINFER_Q50_COPY)
    MatvecCopies q2k{cuda::mv::kQ2_KP, {}, {}};  // arranged q2_K (MINFER_K23_COPY)
    MatvecCopies q3k{cuda::mv::kQ3_KP, {}, {}};  // arranged q3_K (MINFER_K23_COPY)

    WeightKey device_of(const engine::Weight& w) const {
        auto it = by_tensor.find(w.info);
        if (it == by_tensor.end())
            fail(MINFER_ERR_INTERNAL, "CUDA: tensor %s was not uploaded", w.info ? w.info->name.c_str() : "(none)");
        return it->second;
    }
    void poison(const std::string& message) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (poison_.empty()) poison_ = message;
    }
    void check_healthy() const {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!poison_.empty())
            fail(MINFER_ERR_DEVICE, "the GPU reported an error earlier and this model can no longer be used: %s", poison_.c_str());
    }

private:
    mutable std::mutex mutex_;
    std::string poison_;
};

}  // namespace minfer::device

// Where the narrow GEMM (kernels.cuh) replaces cuBLAS (or the own 64x64 GEMM): the joint launches of
// several weights on one input (q, k, v; gate, up) of up to MINFER_GEMM_NARROW_MAX tokens (0: never) and
// MINFER_GEMM_NARROW_BYTES of f16 weights. Measured on the H200 (docs/perf.md, bench_gemm_narrow): one
// launch for q, k and v of the 7B (33 MB) takes 0.5-0.8x the time of cuBLAS's three calls at 9 to 64
// tokens, while on single matrices and on the 7B's gate and up (271 MB) cuBLAS's persistent Hopper
// kernels are as fast or faster, up to 1.5x at 64 tokens: the narrow GEMM re-reads the input from L2 in
// every CTA (ncu, gate/up at 64 tokens: L2 at 68% of its peak while DRAM is at 47%).
#ifndef MINFER_GEMM_NARROW_MAX
#define MINFER_GEMM_NARROW_MAX 64
#endif
#ifndef MINFER_GEMM_NARROW_BYTES
#define MINFER_GEMM_NARROW_BYTES (64 << 20)
#endif
// The narrow GEMM on the quantized weights themselves (q4_K, q6_K, q8_0) for the matmuls of up to
// MINFER_GEMM_NARROW_MAX tokens, joint or single: 0 never; 1 weights without an f16 copy (there it
// replaces a dequantization pass into the scratch and a GEMM); 2 also q4_K and q8_0 weights that have
// one; 3 every such weight. 2 and 3 measured slower than 1 (H200, the 7B q4_K_M at 16 to 64 sequences:
// 0.65-0.81x and 0.52-0.64x the decode rate; docs/perf.md): the kernel dequantizes into a shared f16
// tile at 360-780 GB/s of quantized bytes, where cuBLAS and the f16 narrow GEMM read the cache at
// 2.6-4.1 TB/s.
// (Matrices regrouped by MINFER_Q80_GROUPS below are not taken by 2 or 3: they reach the narrow GEMM as
// cuda::mv::kQ8_0G, which it does not read, and go to their f16 copy.)
#ifndef MINFER_GEMM_NARROW_QUANT
#define MINFER_GEMM_NARROW_QUANT 1
#endif
static_assert(MINFER_GEMM_NARROW_QUANT >= 0 && MINFER_GEMM_NARROW_QUANT <= 3, "MINFER_GEMM_NARROW_QUANT is 0 to 3");
// One GEMM over a layer's concatenated f16 copies (PrefillGemm::run_concat) instead of one a matrix (or
// the narrow GEMM's joint launch): bit 1 q, k and v, bit 2 gate and up; MINFER_GEMM_CONCAT for steps of
// more than MINFER_GEMM_NARROW_MAX tokens (prefill), MINFER_GEMM_CONCAT_NARROW for steps up to it (a
// decode step of many sequences). Measured on the H200 (docs/perf.md, 2026-12-02 night; the 7B q4_K_M,
// 32 sequences): q/k/v 12.2 us as one cuBLAS GEMM against 19.4 us in the narrow GEMM, gate/up 75.7 us
// against 2 x 39.5; decode of 16 / 32 / 64 sequences +3% / +6% / +7% with both (3), less with either
// alone; prefill of 512 and 2,048 tokens within noise.
#ifndef MINFER_GEMM_CONCAT
#define MINFER_GEMM_CONCAT 3
#endif
#ifndef MINFER_GEMM_CONCAT_NARROW
#define MINFER_GEMM_CONCAT_NARROW 3
#endif
// The concatenated gate/up GEMM of a step of more than MINFER_GEMM_NARROW_MAX tokens (prefill chunks;
// batch steps of more than 64 sequences) writes its product in f16 where cuBLAS runs it (the SwiGLU then reads half the bytes, and cublasGemmEx's f16-output
// algorithms measured faster on the 7B's gate/up at 512 to 4,096 tokens: tests/bench_cublaslt,
// docs/perf.md, 2026-12-04, fifth session); 0 keeps the f32 product.
#ifndef MINFER_GATEUP_F16
#define MINFER_GATEUP_F16 1
#endif
// f16 weights (which have no f16 cache copy) uploaded so that each layer's q, k and v, and its gate and
// up, lie back to back (WeightRegistry::register_group), so a prefill step multiplies each group in one
// GEMM as it does the cache's copies (run_concat; the gate/up product then in f16 as above). 0: one
// allocation a tensor, and an f16 model's prefill runs seven GEMMs a layer where a quantized one on the
// cache runs four. Measured on the H200 (docs/perf.md, 2026-12-04, sixth session): the 7B f16 pp2048
// 41,345 against 39,746 (with the deferred add below), 42,806 against 39,976 (with the RoPE table).
#ifndef MINFER_F16_GROUPS
#define MINFER_F16_GROUPS 1
#endif
// The output and down projections of a step of more than MINFER_GEMM_NARROW_MAX tokens, where cuBLAS runs
// them, write W x into a scratch (beta = 0) instead of adding it into the residual stream in the GEMM's
// epilogue (beta = 1), and the next RMSNorm (or the final gather of the rows asked for) adds it: cuBLAS's
// choice for the accumulating form of those shapes measured 14-16% slower than cuBLASLt's best at 2,048
// tokens (tests/bench_cublaslt, docs/perf.md, 2026-12-04, third session), and PyTorch's bf16 calls of the
// same shapes (beta = 0) reach 699-754 TFLOP/s against its 557-560 (shared/anchors.md). 0 keeps the
// epilogue add. Either way the residual gets one f32 addition of the product (whose own last bits
// depend on the algorithm cuBLAS picks, as always). The price: each norm reads the product and writes x
// back, traffic the epilogue's read of C does not have (58 MB a norm at 2,048 tokens on the 7B: about
// 0.8 ms of the call at the copy bandwidth, against some 4 ms the GEMM rates above put within reach),
// so only a whole-prefill A/B decides. It did not pay (H200, docs/perf.md, 2026-12-04, sixth session):
// pp2048 42,151 / 42,326 against 41,828 / 42,310, pp8192 36,918 / 36,842 against 36,990 / 37,091, and
// bench_cublaslt in the same call had cuBLAS's beta-0 down projection slower (500.8 us at 2,048 tokens
// against 451.4 accumulating): the premise failed. Off.
#ifndef MINFER_DEFER_RESIDUAL
#define MINFER_DEFER_RESIDUAL 0
#endif

namespace minfer::cuda {

class Cublas;

// The matmul of n > 1 tokens on one stream, by the model's prefill path: the input converted to f16,
// the weight from the f16 cache, dequantized into a scratch (two-pass) or in the GEMM's tiles (fused),
// then the own GEMM or cuBLAS, or for joint launches of a few tokens the narrow GEMM (below). Owns the
// scratch of up to max_tokens tokens (none for max_tokens <= 1).
class PrefillGemm {
public:
    PrefillGemm(device::CudaModel& m, const model::Config& c, int max_tokens, cudaStream_t stream);
    ~PrefillGemm();
    PrefillGemm(const PrefillGemm&) = delete;
    PrefillGemm& operator=(const PrefillGemm&) = delete;
    // out[t][r] = dot(W row r, x[t]) for t < n (accumulate: out[t][r] += it, the residual add); `name`
    // names the weight in errors. same_input: x is the input of the previous call and unchanged since, so
    // its f16 copy is reused (q, k, v; gate, up).
    void run(quant::Type type, const void* w, int64_t rows, int64_t cols, const float* x, int n, float* out, const char* name,
             bool same_input = false, bool accumulate = false);
    // run() for nw (1 to 3) weights of one width on the same x (q, k, v; gate, up), out[i] = W_i x: one
    // narrow-GEMM launch for all of them when n <= MINFER_GEMM_NARROW_MAX and either every weight takes
    // the quantized narrow GEMM (narrow_quant) or every weight is f16 in memory (f16 weights or the f16
    // cache) and they hold at most MINFER_GEMM_NARROW_BYTES; else one run() each.
    struct Weight {
        quant::Type type;
        const void* w;
        int64_t rows;
        const char* name;
    };
    void run_joint(int nw, const Weight* w, int64_t cols, const float* x, int n, float* const* out, bool same_input);
    // out = x [W_0; W_1; ...]^T as one GEMM: [n][the weights' rows together], token t's outputs of W_i at
    // columns rows_0 + ... + rows_{i-1} on, where 2 or 3 weights of one width have f16 copies (or are f16)
    // lying back to back in that order (the f16 cache's arena) and `bit` is set in the knob for n tokens
    // (MINFER_GEMM_CONCAT, _NARROW); false, having done nothing, otherwise. out16, when given, offers an f16
    // destination of the same shape: cuBLAS writes the product there (Cublas::gemm16), and *out16 comes
    // back null unless it did (the own GEMM writes `out` in f32; false writes nothing).
    bool run_concat(int bit, int nw, const Weight* w, int64_t cols, const float* x, int n, float* out, bool same_input,
                    __half** out16 = nullptr);
    // The f16 input scratch, for a kernel that writes the f16 copy of x ([n][cols]) itself (an RMSNorm, the
    // SwiGLU product): the next run() with same_input and this x reads it as it stands. x_holds: x itself
    // holds the values too (false: x only names the copy, as the SwiGLU product's gate or a norm that wrote
    // the f16 copy alone; a later call with same_input that would have to convert x again, its n or cols
    // differing, fails instead of reading it).
    __half* input16(const float* x, int n, int64_t cols, bool x_holds);
    // Whether run() takes n tokens of this weight to cuBLAS (its f16 copy, or its dequantization into the
    // scratch): where a residual add may leave the GEMM's epilogue (MINFER_DEFER_RESIDUAL).
    bool cublas_runs(quant::Type type, const void* w, int n, int64_t cols) const { return cublas_ && !narrow_quant(type, w, n, cols); }
    // Whether run() takes n tokens of this weight through the narrow GEMM on its quantized blocks.
    bool narrow_quant(quant::Type type, const void* w, int n, int64_t cols) const {
        if (MINFER_GEMM_NARROW_QUANT == 0 || !narrow(n) || !gemm_narrow_quant_supports(type, cols)) return false;
        return !f16_weight(type, w) || MINFER_GEMM_NARROW_QUANT == 3 || (MINFER_GEMM_NARROW_QUANT == 2 && type != quant::Type::Q6_K);
    }

private:
    static constexpr uint64_t kCublasWorkspace = uint64_t{32} << 20;  // what cuBLAS asks for on Hopper
    void prepare_input(const float* x, int n, int64_t cols, const char* name, bool same_input);
    bool last_x_holds_ = true;  // input16's x_holds for last_x_
    // The f16 weight in memory without a dequantization pass (f16 weights, the f16 cache), or null.
    const __half* f16_weight(quant::Type type, const void* w) const;
    bool narrow(int n) const { return n <= kNarrowMax && narrow_.ws != nullptr; }
    static constexpr int kNarrowMax = MINFER_GEMM_NARROW_MAX;  // the most tokens the narrow GEMM takes (0: never)
    static constexpr int64_t kNarrowBytes = int64_t{MINFER_GEMM_NARROW_BYTES};  // the most weight bytes it takes
    static_assert(kNarrowMax >= 0 && kNarrowMax <= kNarrowMaxTokens, "the narrow GEMM takes up to kNarrowMaxTokens tokens");
    device::CudaModel& m_;
    cudaStream_t stream_;
    DeviceMemory a16_;  // f16 copy of the input
    DeviceMemory w16_;  // f16 dequantized weight (the two-pass path)
    DeviceMemory workspace_;  // cuBLAS's
    DeviceMemory narrow_ws_, narrow_counters_;  // the narrow GEMM's (kernels.cuh)
    NarrowScratch narrow_;
    const float* last_x_ = nullptr;  // the input a16_ holds
    int last_n_ = 0;
    int64_t last_cols_ = 0;
    std::unique_ptr<Cublas> cublas_;  // bound to the stream; null with the own GEMM
};

}  // namespace minfer::cuda
