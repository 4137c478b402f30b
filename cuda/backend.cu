// The CUDA backend: the weight registry, the per-model device state (weights, VRAM accounts, poisoning)
// and engine::Ops on the GPU. Every CUDA call is checked; failures become minfer::Error, device memory is
// owned by RAII holders so an exception at any point frees what was allocated.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>
#include <mutex>
#include <unordered_set>

#include "core/error.h"
#include "core/log.h"
#include "cuda/common.cuh"
#include "cuda/cublas.cuh"
#include "cuda/kernels.cuh"
#include "cuda/matvec_impl.cuh"  // mv::xq_value
#include "cuda/model.cuh"
#include "device/cuda_backend.h"
#include "options/options.h"
#include "quant/f16.h"
#include "quant/quant.h"
#include "quant/types.h"

namespace minfer::cuda {

namespace {
std::atomic<uint64_t> g_f16_groups{0};  // device::testing::cuda_f16_groups: groups uploaded by cuda_load
device::RuntimeKnob<MINFER_Q80_GROUPS> g_q80_groups;  // device::testing::cuda_q80_groups
std::atomic<uint64_t> g_q80_grouped{0};               // device::testing::cuda_q80_grouped: matrices regrouped
device::RuntimeKnob<MINFER_Q6K_PAD> g_q6k_pad;        // device::testing::cuda_q6k_pad
std::atomic<uint64_t> g_q6k_padded{0};                // device::testing::cuda_q6k_padded: matrices copied
device::RuntimeKnob<MINFER_Q80_COPY> g_q80_copy;      // device::testing::cuda_q80_copy
std::atomic<uint64_t> g_q80_copied{0};                // device::testing::cuda_q80_copied: matrices copied
device::RuntimeKnob<MINFER_Q50_COPY> g_q50_copy;      // device::testing::cuda_q50_copy
std::atomic<uint64_t> g_q50_copied{0};                // device::testing::cuda_q50_copied: matrices copied
device::RuntimeKnob<MINFER_K23_COPY> g_k23_copy;      // device::testing::cuda_k23_copy
std::atomic<uint64_t> g_k23_copied{0};                // device::testing::cuda_k23_copied: matrices copied
}  // namespace

void check(cudaError_t err, const char* what) {
    if (err == cudaSuccess) return;
    cudaGetLastError();  // clear a non-sticky error so the next call starts clean
    if (err == cudaErrorMemoryAllocation)
        fail(MINFER_ERR_OUT_OF_MEMORY, "%s: out of GPU memory (%s)", what, cudaGetErrorString(err));
    fail(MINFER_ERR_DEVICE, "%s: %s: %s", what, cudaGetErrorName(err), cudaGetErrorString(err));
}

int compute_capability() {
    int dev = 0, major = 0, minor = 0;
    check(cudaGetDevice(&dev), "cudaGetDevice");
    check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev), "cudaDeviceGetAttribute");
    check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev), "cudaDeviceGetAttribute");
    return 10 * major + minor;
}

int sm_count() {
    static const int n = [] {
        int dev = 0, v = 0;
        if (cudaGetDevice(&dev) != cudaSuccess || cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) != cudaSuccess ||
            v <= 0) {
            cudaGetLastError();  // clears the non-sticky error
            return 132;
        }
        return v;
    }();
    return n;
}

}  // namespace minfer::cuda

namespace minfer::device {

using cuda::check;
using cuda::DeviceMemory;

// ---- weight registry ---------------------------------------------------------------------------------------

WeightRegistry::~WeightRegistry() {
    for (void* p : allocations_) cudaFree(p);
}

WeightRegistry::Entry& WeightRegistry::add_live(const std::string& name, const void* device, uint64_t bytes, int32_t type,
                                                const int64_t shape[4]) {
    auto it = live_.find(name);
    if (it != live_.end()) retired_.push_back(it->second);  // never freed while the registry lives
    Entry& e = live_[name];
    e.device = device;
    e.bytes = bytes;
    e.type = type;
    for (int i = 0; i < 4; ++i) e.shape[i] = shape[i];
    device_bytes_ += bytes;
    return e;
}

const WeightRegistry::Entry& WeightRegistry::register_weight(const std::string& name, const void* host, uint64_t bytes,
                                                             int32_t type, const int64_t shape[4]) {
    auto it = live_.find(name);
    if (it != live_.end() && it->second.bytes == bytes) return it->second;
    allocations_.reserve(allocations_.size() + 1);  // so the push below cannot throw with the memory in hand
    DeviceMemory mem(bytes, nullptr, name.c_str());
    check(cudaMemcpy(mem.as<void>(), host, bytes, cudaMemcpyHostToDevice), "upload");
    void* p = mem.take();
    allocations_.push_back(p);
    return add_live(name, p, bytes, type, shape);
}

std::vector<const WeightRegistry::Entry*> WeightRegistry::register_group(const std::vector<Upload>& weights) {
    auto padded = [](uint64_t b) { return (b + 255) / 256 * 256; };
    // Each new name's offset in the group's allocation; -1: registered before, or a repeat in the group.
    std::vector<int64_t> offset(weights.size(), -1);
    std::unordered_set<std::string> fresh;
    uint64_t total = 0;
    for (size_t i = 0; i < weights.size(); ++i) {
        const std::string& name = *weights[i].name;
        if (live_.count(name) || !fresh.insert(name).second) continue;
        offset[i] = static_cast<int64_t>(total);
        total += padded(weights[i].bytes);
    }
    std::vector<const Entry*> out(weights.size(), nullptr);
    if (total > 0) {
        allocations_.reserve(allocations_.size() + 1);  // so the push below cannot throw with the memory in hand
        DeviceMemory mem(total, nullptr, weights.front().name->c_str());
        for (size_t i = 0; i < weights.size(); ++i)
            if (offset[i] >= 0) check(cudaMemcpy(mem.as<uint8_t>() + offset[i], weights[i].host, weights[i].bytes, cudaMemcpyHostToDevice), "upload");
        uint8_t* base = static_cast<uint8_t*>(mem.take());
        allocations_.push_back(base);
        for (size_t i = 0; i < weights.size(); ++i)
            if (offset[i] >= 0) out[i] = &add_live(*weights[i].name, base + offset[i], weights[i].bytes, weights[i].type, weights[i].shape);
    }
    for (size_t i = 0; i < weights.size(); ++i)  // names registered before, and repeats: register_weight's rules
        if (!out[i]) out[i] = &register_weight(*weights[i].name, weights[i].host, weights[i].bytes, weights[i].type, weights[i].shape);
    return out;
}

}  // namespace minfer::device

// ---- the model on the device --------------------------------------------------------------------------------

namespace minfer::device {

std::string cuda_unsupported_reason(const model::Config& c, const model::Plan& plan) {
    if (!cuda::attention_head_dim_supported(c.head_dim))
        return strprintf("head_dim %d (the CUDA attention kernels take 64 or 128)", c.head_dim);
    auto check_weight = [&](const gguf::TensorInfo* t) -> std::string {
        if (!t) return "";
        const auto type = static_cast<quant::Type>(t->type);
        if (!cuda::type_supported(type)) return strprintf("%s: type %s", t->name.c_str(), quant::type_info(type).name);
        if (t->ne[0] % 8 != 0) return strprintf("%s: rows of %lld elements (a multiple of 8 is needed)", t->name.c_str(),
                                                static_cast<long long>(t->ne[0]));
        return "";
    };
    std::vector<const gguf::TensorInfo*> ts = model::layer_matmuls(plan);
    ts.push_back(plan.tok_embd);
    ts.push_back(plan.output);
    for (const gguf::TensorInfo* t : ts)
        if (std::string why = check_weight(t); !why.empty()) return why;
    return "";
}

namespace {

// The warm pass: one f16 copy per distinct non-f16 matmul weight, dequantized on the device.
void warm_w16_cache(CudaModel& m, const std::vector<engine::Weight>& weights, int log_level) {
    const auto t0 = std::chrono::steady_clock::now();
    cuda::Stream stream;
    auto padded = [](uint64_t bytes) { return (bytes + 255) / 256 * 256; };
    uint64_t total = 0, done = 0;
    for (const engine::Weight& w : weights) total += padded(static_cast<uint64_t>(w.rows * w.cols) * sizeof(__half));
    report_progress("warm", 0, total);
    m.w16_arena = DeviceMemory(total, &m.w16_bytes, "f16 weight cache");  // all or nothing: the caller falls back on OUT_OF_MEMORY
    for (const engine::Weight& w : weights) {  // distinct weights (cuda_load), in its order
        const WeightKey key = m.device_of(w);
        const uint64_t bytes = static_cast<uint64_t>(w.rows * w.cols) * sizeof(__half);
        __half* copy = reinterpret_cast<__half*>(m.w16_arena.as<uint8_t>() + done);
        cuda::dequant_f16(w.type, key, w.rows, w.cols, copy, stream.get());
        m.w16.emplace(key, copy);
        done += padded(bytes);
        report_progress("warm", done, total);
    }
    stream.sync("warm pass");
    m.warm_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    log_line(log_level, MINFER_LOG_INFO, "CUDA: warm pass: %zu weights, %s of f16 in %.1f ms", m.w16.size(),
             mib(m.w16_bytes.load()).c_str(), m.warm_ms);
}

// MINFER_Q80_GROUPS (cuda/model.cuh): each distinct q8_0 weight of `weights` (the matmul weights) that has
// an f16 copy, rows of whole 256-column groups and is not the embedding table, regrouped in place for the
// mat-vecs (cuda::q80_group); CudaModel::device_type names them from then on.
void group_q80(CudaModel& m, const std::vector<engine::Weight>& weights, const gguf::TensorInfo* embedding, int log_level) {
    cuda::Stream stream;
    uint64_t bytes = 0;
    for (const engine::Weight& w : weights) {
        if (w.type != quant::Type::Q8_0 || w.cols % 256 != 0 || w.info == embedding) continue;
        const WeightKey key = m.device_of(w);
        if (!m.w16_of(key) || m.q80_grouped.count(key)) continue;
        // The registry's own allocation, read-only to everything else: rewritten once, before any context
        // exists, on a stream that is synchronized before the model is handed out.
        cuda::q80_group(const_cast<void*>(key), w.rows, w.cols, stream.get());
        m.q80_grouped.insert(key);
        bytes += w.info->n_bytes;
    }
    stream.sync("q8_0 regrouping");
    cuda::g_q80_grouped.fetch_add(m.q80_grouped.size(), std::memory_order_relaxed);
    if (!m.q80_grouped.empty())
        log_line(log_level, MINFER_LOG_INFO, "CUDA: %zu q8_0 matrices (%s) regrouped for the mat-vecs (MINFER_Q80_GROUPS)",
                 m.q80_grouped.size(), mib(bytes).c_str());
}

// Copies of matmul weights for the one-token mat-vec, all in one allocation (copies.arena), made only
// where kW16Reserve stays free after it (else none, logged): one of each distinct weight of `weights` for
// which bytes_of gives its size (0: none), written by make(tensor, weight's key, copy, stream); `copies`
// names them by weight from then on. `what` names them in the log; returns how many were made.
template <class BytesOf, class Make>
size_t copy_for_matvec(CudaModel& m, const std::vector<const gguf::TensorInfo*>& weights, CudaModel::MatvecCopies& copies,
                       const char* what, int log_level, BytesOf bytes_of, Make make) {
    std::vector<std::pair<const gguf::TensorInfo*, uint64_t>> todo;  // each weight and its copy's offset
    std::unordered_set<const gguf::TensorInfo*> seen;
    uint64_t bytes = 0;
    for (const gguf::TensorInfo* t : weights) {
        if (!t || !seen.insert(t).second) continue;
        const uint64_t n = bytes_of(*t);
        if (n == 0) continue;
        todo.emplace_back(t, bytes);
        bytes += (n + 255) / 256 * 256;
    }
    if (todo.empty()) return 0;
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (bytes + kW16Reserve > free_b) {
        log_line(log_level, MINFER_LOG_INFO, "CUDA: no %s for the mat-vecs: they need %s and %s is free (keeping %s for contexts)", what,
                 mib(bytes).c_str(), mib(free_b).c_str(), mib(kW16Reserve).c_str());
        return 0;
    }
    copies.arena = DeviceMemory(bytes, nullptr, what);
    cuda::Stream stream;
    for (const auto& [t, at] : todo) {
        const WeightKey key = m.device_of(engine::Weight::of(t));
        uint8_t* dst = copies.arena.as<uint8_t>() + at;
        make(*t, key, dst, stream.get());
        copies.by_weight.emplace(key, dst);
    }
    stream.sync(what);
    log_line(log_level, MINFER_LOG_INFO, "CUDA: %zu matrices in %s for the mat-vecs: %s", copies.by_weight.size(), what, mib(bytes).c_str());
    return copies.by_weight.size();
}

// MINFER_Q6K_PAD (cuda/model.cuh): a padded copy (cuda::q6k_pad) of each distinct q6_K matmul weight of
// `weights`; CudaModel::q6k names them from then on.
void pad_q6k(CudaModel& m, const std::vector<const gguf::TensorInfo*>& weights, int log_level) {
    if (!cuda::matvec_int8_supported(cuda::mv::kQ6_KP, 1)) return;  // no reader (a build without the dp4a kernel)
    const size_t n = copy_for_matvec(
        m, weights, m.q6k, "padded q6_K copies (MINFER_Q6K_PAD)", log_level,
        [](const gguf::TensorInfo& t) -> uint64_t {
            const engine::Weight w = engine::Weight::of(&t);
            if (static_cast<quant::Type>(t.type) != quant::Type::Q6_K || w.cols % 256 != 0) return 0;
            return static_cast<uint64_t>(w.rows * cuda::mv::q6kp_row_bytes(w.cols));
        },
        [](const gguf::TensorInfo& t, WeightKey key, uint8_t* dst, cudaStream_t stream) {
            const engine::Weight w = engine::Weight::of(&t);
            cuda::q6k_pad(key, dst, w.rows, w.cols, stream);
        });
    cuda::g_q6k_padded.fetch_add(n, std::memory_order_relaxed);
}

// MINFER_Q80_COPY (cuda/model.cuh): a grouped copy (cuda::q80_group_copy) of each distinct q8_0 matmul
// weight of `weights` that the load did not regroup in place; CudaModel::q80 names them from then on.
void copy_q80(CudaModel& m, const std::vector<const gguf::TensorInfo*>& weights, int log_level) {
    const size_t n = copy_for_matvec(
        m, weights, m.q80, "grouped q8_0 copies (MINFER_Q80_COPY)", log_level,
        [&m](const gguf::TensorInfo& t) -> uint64_t {
            const engine::Weight w = engine::Weight::of(&t);
            if (static_cast<quant::Type>(t.type) != quant::Type::Q8_0 || m.q80_grouped.count(m.device_of(w))) return 0;
            if (w.cols % 256 != 0 && !cuda::matvec_reads_padded_q80()) return 0;  // rows with a padded group: no reader
            return static_cast<uint64_t>(w.rows * cuda::mv::q80g_row_bytes(w.cols));
        },
        [](const gguf::TensorInfo& t, WeightKey key, uint8_t* dst, cudaStream_t stream) {
            const engine::Weight w = engine::Weight::of(&t);
            cuda::q80_group_copy(key, dst, w.rows, w.cols, stream);
        });
    cuda::g_q80_copied.fetch_add(n, std::memory_order_relaxed);
}

// MINFER_Q50_COPY (cuda/model.cuh): a grouped copy (cuda::q50_group_copy) of each distinct q5_0 matmul
// weight of `weights`, where this build's one-input int8 mat-vec reads it; CudaModel::q50 names them from
// then on.
void copy_q50(CudaModel& m, const std::vector<const gguf::TensorInfo*>& weights, int log_level) {
    if (!cuda::matvec_int8_supported(cuda::mv::kQ5_0G, 1)) return;  // no reader
    const size_t n = copy_for_matvec(
        m, weights, m.q50, "grouped q5_0 copies (MINFER_Q50_COPY)", log_level,
        [](const gguf::TensorInfo& t) -> uint64_t {
            const engine::Weight w = engine::Weight::of(&t);
            if (static_cast<quant::Type>(t.type) != quant::Type::Q5_0) return 0;
            return static_cast<uint64_t>(w.rows * cuda::mv::q50g_row_bytes(w.cols));
        },
        [](const gguf::TensorInfo& t, WeightKey key, uint8_t* dst, cudaStream_t stream) {
            const engine::Weight w = engine::Weight::of(&t);
            cuda::q50_group_copy(key, dst, w.rows, w.cols, stream);
        });
    cuda::g_q50_copied.fetch_add(n, std::memory_order_relaxed);
}

// MINFER_K23_COPY (cuda/model.cuh): an arranged copy (cuda::k23_arrange) of each distinct q2_K and q3_K
// matmul weight of `weights`, where this build's one-input int8 mat-vec reads them; CudaModel::q2k and
// q3k name them from then on.
void copy_k23(CudaModel& m, const std::vector<const gguf::TensorInfo*>& weights, int log_level) {
    for (CudaModel::MatvecCopies* set : {&m.q2k, &m.q3k}) {
        if (!cuda::matvec_int8_supported(set->type, 1)) continue;  // no reader
        const quant::Type file = set->type == cuda::mv::kQ3_KP ? quant::Type::Q3_K : quant::Type::Q2_K;
        const size_t n = copy_for_matvec(
            m, weights, *set, file == quant::Type::Q3_K ? "arranged q3_K copies (MINFER_K23_COPY)" : "arranged q2_K copies (MINFER_K23_COPY)",
            log_level,
            [&](const gguf::TensorInfo& t) -> uint64_t {
                const engine::Weight w = engine::Weight::of(&t);
                if (static_cast<quant::Type>(t.type) != file || w.cols % 256 != 0) return 0;
                return static_cast<uint64_t>(w.rows * cuda::mv::k23p_row_bytes(set->type, w.cols));
            },
            [&](const gguf::TensorInfo& t, WeightKey key, uint8_t* dst, cudaStream_t stream) {
                const engine::Weight w = engine::Weight::of(&t);
                cuda::k23_arrange(file, key, dst, w.rows, w.cols, stream);
            });
        cuda::g_k23_copied.fetch_add(n, std::memory_order_relaxed);
    }
}

// The groups of f16 matmul weights to upload back to back (MINFER_F16_GROUPS): each layer's q, k and v,
// and its gate and up, where every member is an f16 tensor of the same width, appears once, and takes a
// multiple of 256 bytes (so the next one follows directly: PrefillGemm::run_concat checks the adjacency
// itself). matmul_weights begins with each layer's q, k, v, o, gate, up and down (model::layer_matmuls);
// what follows the whole layers (the engine adds the output projection) takes no group.
std::vector<std::vector<const gguf::TensorInfo*>> f16_groups(const std::vector<const gguf::TensorInfo*>& matmul_weights) {
    std::vector<std::vector<const gguf::TensorInfo*>> groups;
    if (!MINFER_F16_GROUPS) return groups;
    std::unordered_set<const gguf::TensorInfo*> taken;
    for (size_t l = 0; l + 7 <= matmul_weights.size(); l += 7)
        for (auto [first, count] : {std::pair<size_t, size_t>{0, 3}, {4, 2}}) {
            std::vector<const gguf::TensorInfo*> g(matmul_weights.begin() + static_cast<std::ptrdiff_t>(l + first),
                                                   matmul_weights.begin() + static_cast<std::ptrdiff_t>(l + first + count));
            const bool ok = std::all_of(g.begin(), g.end(), [&](const gguf::TensorInfo* t) {
                return t && static_cast<quant::Type>(t->type) == quant::Type::F16 && t->ne[0] == g[0]->ne[0] && t->n_bytes % 256 == 0 &&
                       !taken.count(t);
            });
            std::unordered_set<const gguf::TensorInfo*> distinct(g.begin(), g.end());
            if (!ok || distinct.size() != g.size()) continue;
            taken.insert(g.begin(), g.end());
            groups.push_back(std::move(g));
        }
    return groups;
}

}  // namespace

std::shared_ptr<CudaModel> cuda_load(const gguf::File& file, const std::vector<const gguf::TensorInfo*>& matmul_weights,
                                     const gguf::TensorInfo* embedding, const CudaSettings& settings, int log_level) {
    check(cudaSetDevice(0), "cudaSetDevice");
    auto m = std::make_shared<CudaModel>();
    const auto& tensors = file.tensors();
    uint64_t total = 0;
    for (const gguf::TensorInfo& t : tensors) total += t.n_bytes;
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    if (total > free_b)
        fail(MINFER_ERR_OUT_OF_MEMORY, "the weights need %s of GPU memory, %s are free (of %s)", mib(total).c_str(), mib(free_b).c_str(),
             mib(total_b).c_str());

    // The GEMM: cuBLAS when asked for (it must load) or, with auto, when it loads.
    std::string why;
    const bool have_cublas = cuda::cublas_available(&why);
    if (settings.gemm == options::kGemmCublas && !have_cublas) fail(MINFER_ERR_UNSUPPORTED, "gemm=cublas: %s", why.c_str());
    m->use_cublas = settings.gemm == options::kGemmCublas || (settings.gemm == options::kGemmAuto && have_cublas);
    if (settings.gemm == options::kGemmAuto && !have_cublas)
        log_line(log_level, MINFER_LOG_INFO, "CUDA: gemm=auto: using the own tensor-core GEMM (%s)", why.c_str());
    if (m->use_cublas && settings.gemm_tune) {
        std::string why_lt;
        m->gemm_tuner = cuda::make_gemm_tuner(log_level, &why_lt);
        if (!m->gemm_tuner)
            log_line(log_level, MINFER_LOG_INFO, "CUDA: gemm_tune=true: cuBLAS keeps its own algorithm choice (%s)", why_lt.c_str());
    }

    uint64_t done = 0;
    report_progress("upload", 0, total);
    // f16 matmul weights that a prefill step multiplies together (MINFER_F16_GROUPS): uploaded as a group,
    // back to back, when the first of them comes up; the rest one allocation each.
    std::unordered_map<const gguf::TensorInfo*, size_t> group_of;
    const std::vector<std::vector<const gguf::TensorInfo*>> groups = f16_groups(matmul_weights);
    for (size_t g = 0; g < groups.size(); ++g)
        for (const gguf::TensorInfo* t : groups[g]) group_of.emplace(t, g);
    for (const gguf::TensorInfo& t : tensors) {
        if (m->by_tensor.count(&t)) continue;  // uploaded with its group
        auto g = group_of.find(&t);
        if (g == group_of.end()) {
            m->by_tensor[&t] = m->registry.register_weight(t.name, t.data, t.n_bytes, t.type, t.ne).device;
            done += t.n_bytes;
        } else {
            const std::vector<const gguf::TensorInfo*>& members = groups[g->second];
            std::vector<WeightRegistry::Upload> ups;
            for (const gguf::TensorInfo* u : members) ups.push_back({&u->name, u->data, u->n_bytes, u->type, u->ne});
            const std::vector<const WeightRegistry::Entry*> es = m->registry.register_group(ups);
            cuda::g_f16_groups.fetch_add(1, std::memory_order_relaxed);
            for (size_t i = 0; i < members.size(); ++i) {
                m->by_tensor[members[i]] = es[i]->device;
                done += members[i]->n_bytes;
            }
        }
        report_progress("upload", done, total);
    }
    log_line(log_level, MINFER_LOG_INFO, "CUDA: uploaded %zu tensors, %s", tensors.size(), mib(m->registry.device_bytes()).c_str());

    // The prefill path, decided once here.
    std::vector<engine::Weight> convert;
    std::unordered_set<const gguf::TensorInfo*> seen;
    uint64_t convert_bytes = 0, f16_bytes = 0;
    for (const gguf::TensorInfo* t : matmul_weights) {
        if (!t || static_cast<quant::Type>(t->type) == quant::Type::F16 || !seen.insert(t).second) continue;
        convert.push_back(engine::Weight::of(t));
        convert_bytes += t->n_bytes;
        f16_bytes += t->n_elems * sizeof(__half);
    }
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    const PathChoice choice = choose_prefill_path(settings, convert_bytes, f16_bytes, free_b);
    m->path = choice.path;
    if (m->path == PrefillPath::w16_cache) {
        try {
            warm_w16_cache(*m, convert, log_level);
        } catch (const Error& e) {
            if (e.status() != MINFER_ERR_OUT_OF_MEMORY) throw;
            m->w16.clear();
            m->w16_arena = DeviceMemory();
            m->path = PrefillPath::two_pass;
            log_line(log_level, MINFER_LOG_WARN, "CUDA: the f16 weight cache did not fit (%s); using the two-pass path", e.what());
        }
        if (m->path == PrefillPath::w16_cache && cuda::g_q80_groups.on()) group_q80(*m, convert, embedding, log_level);
    }
    if (cuda::g_q6k_pad.on()) pad_q6k(*m, matmul_weights, log_level);
    if (cuda::g_q80_copy.on()) copy_q80(*m, matmul_weights, log_level);
    if (cuda::g_q50_copy.on()) copy_q50(*m, matmul_weights, log_level);
    if (cuda::g_k23_copy.on()) copy_k23(*m, matmul_weights, log_level);
    log_line(log_level, MINFER_LOG_INFO, "CUDA: prefill path %s with the %s GEMM: %s", prefill_path_name(m->path),
             m->path == PrefillPath::fused ? "own fused" : m->use_cublas ? "cuBLAS" : "own", choice.reason.c_str());
    return m;
}

PrefillPath cuda_prefill_path(const CudaModel& m) { return m.path; }
const char* cuda_gemm_name(const CudaModel& m) { return m.path == PrefillPath::fused || !m.use_cublas ? "own" : "cublas"; }
double cuda_warm_ms(const CudaModel& m) { return m.warm_ms; }

Vram cuda_vram(const CudaModel& m) {
    Vram v;
    v.weights = m.registry.device_bytes() + m.q6k.arena.bytes() + m.q80.arena.bytes() + m.q50.arena.bytes() + m.q2k.arena.bytes() +
                m.q3k.arena.bytes();
    v.w16_cache = m.w16_bytes.load();
    v.kv_cache = m.kv_bytes.load();
    v.scratch = m.scratch_bytes.load();
    return v;
}


}  // namespace minfer::device

namespace minfer::cuda {

PrefillGemm::PrefillGemm(device::CudaModel& m, const model::Config& c, int max_tokens, cudaStream_t stream)
    : m_(m), stream_(stream) {
    // The widest matmul input and the largest weight a prefill matmul dequantizes (the output projection
    // comes here only for the rows of a batch, from the f16 cache or through the quantized narrow GEMM,
    // neither of which dequantizes into the scratch; otherwise mat-vecs).
    int64_t max_cols = 0, max_w = 0;
    for (int64_t d : {int64_t{c.n_embd}, int64_t{c.n_head} * c.head_dim, int64_t{c.n_ff}}) max_cols = std::max(max_cols, d);
    const int64_t q_dim = int64_t{c.n_head} * c.head_dim, kv_dim = int64_t{c.n_head_kv} * c.head_dim;
    for (int64_t e : {q_dim * c.n_embd, kv_dim * c.n_embd, int64_t{c.n_ff} * c.n_embd}) max_w = std::max(max_w, e);
    if (max_tokens <= 1) return;  // mat-vecs only
    a16_ = DeviceMemory(static_cast<uint64_t>(max_tokens) * max_cols * sizeof(__half), &m.scratch_bytes, "f16 activations");
    if (m.path == device::PrefillPath::two_pass)
        w16_ = DeviceMemory(static_cast<uint64_t>(max_w) * sizeof(__half), &m.scratch_bytes, "f16 weight scratch");
    if (m.use_cublas && m.path != device::PrefillPath::fused) {
        workspace_ = DeviceMemory(kCublasWorkspace, &m.scratch_bytes, "cuBLAS workspace");
        cublas_ = std::make_unique<Cublas>(stream, workspace_.as<void>(), kCublasWorkspace, m.gemm_tuner.get());
    }
    if (kNarrowMax > 0) {
        // The most weight rows one launch takes: q, k and v together, gate and up, or the output matrix.
        const int64_t rows = std::max({q_dim + 2 * kv_dim, int64_t{2} * c.n_ff, int64_t{c.n_vocab}, int64_t{c.n_embd}});
        narrow_.ws_floats = gemm_narrow_ws_floats();
        narrow_.n_counters = gemm_narrow_counters(rows);
        narrow_ws_ = DeviceMemory(static_cast<uint64_t>(narrow_.ws_floats) * sizeof(float), &m.scratch_bytes, "narrow GEMM workspace");
        narrow_counters_ = DeviceMemory(static_cast<uint64_t>(narrow_.n_counters) * sizeof(int), &m.scratch_bytes, "narrow GEMM counters");
        check(cudaMemsetAsync(narrow_counters_.as<void>(), 0, narrow_counters_.bytes(), stream), "narrow GEMM counters");
        narrow_.ws = narrow_ws_.as<float>();
        narrow_.counters = narrow_counters_.as<int>();
    }
}

PrefillGemm::~PrefillGemm() = default;

__half* PrefillGemm::input16(const float* x, int n, int64_t cols, bool x_holds) {
    if (static_cast<uint64_t>(n) * static_cast<uint64_t>(cols) * sizeof(__half) > a16_.bytes())
        fail(MINFER_ERR_INTERNAL, "CUDA matmul: %d x %lld activations exceed the scratch", n, static_cast<long long>(cols));
    last_x_ = x, last_n_ = n, last_cols_ = cols, last_x_holds_ = x_holds;
    return a16_.as<__half>();
}

void PrefillGemm::prepare_input(const float* x, int n, int64_t cols, const char* name, bool same_input) {
    if (static_cast<uint64_t>(n) * static_cast<uint64_t>(cols) * sizeof(__half) > a16_.bytes())
        fail(MINFER_ERR_INTERNAL, "CUDA matmul %s: %d x %lld activations exceed the scratch", name, n, static_cast<long long>(cols));
    if (!same_input || x != last_x_ || n != last_n_ || cols != last_cols_) {
        // A caller that meant to reuse the f16 copy of an x that holds no values of its own (same_input;
        // without it, x has been written since and is converted as it stands).
        if (same_input && x == last_x_ && !last_x_holds_)
            fail(MINFER_ERR_INTERNAL, "CUDA matmul %s: its input was written as an f16 copy alone, which this call cannot reuse", name);
        to_f16(x, a16_.as<__half>(), int64_t{n} * cols, stream_);
        last_x_holds_ = true;
    }
    last_x_ = x, last_n_ = n, last_cols_ = cols;
}

const __half* PrefillGemm::f16_weight(quant::Type type, const void* w) const {
    return type == quant::Type::F16 ? static_cast<const __half*>(w) : m_.w16_of(w);
}

void PrefillGemm::run(quant::Type type, const void* wd, int64_t w_rows, int64_t w_cols, const float* x, int n, float* out,
                      const char* name, bool same_input, bool accumulate) {
    prepare_input(x, n, w_cols, name, same_input);
    if (narrow_quant(type, wd, n, w_cols)) {
        float* y[1] = {out};
        gemm_narrow_quant(a16_.as<__half>(), n, w_cols, 1, &type, &wd, &w_rows, y, accumulate, narrow_, stream_);
        return;
    }
    const int rows = static_cast<int>(w_rows), cols = static_cast<int>(w_cols);
    const __half* b = f16_weight(type, wd);
    if (!b) {
        if (m_.path == device::PrefillPath::fused) {
            gemm_fused(type, a16_.as<__half>(), wd, out, n, rows, cols, stream_, accumulate);
            return;
        }
        // two-pass: this call's own dequantization sweep
        if (static_cast<uint64_t>(w_rows) * static_cast<uint64_t>(w_cols) * sizeof(__half) > w16_.bytes())
            fail(MINFER_ERR_INTERNAL, "CUDA matmul: %s exceeds the f16 weight scratch", name);
        dequant_f16(type, wd, w_rows, w_cols, w16_.as<__half>(), stream_);
        b = w16_.as<__half>();
    }
    if (cublas_) cublas_->gemm(a16_.as<__half>(), b, out, n, rows, cols, accumulate);
    else gemm_f16(a16_.as<__half>(), b, out, n, rows, cols, stream_, accumulate);
}

namespace {
std::atomic<uint64_t> g_concat_gemms{0};    // device::testing::cuda_concat_gemms
std::atomic<uint64_t> g_concat_gemms16{0};  // the f16-output ones among them
}  // namespace

bool PrefillGemm::run_concat(int bit, int nw, const Weight* w, int64_t cols, const float* x, int n, float* out, bool same_input,
                             __half** out16) {
    __half* const dst16 = out16 ? *out16 : nullptr;
    if (out16) *out16 = nullptr;  // until the f16 product is written
    if (((n <= kNarrowMax ? MINFER_GEMM_CONCAT_NARROW : MINFER_GEMM_CONCAT) & bit) == 0 || nw < 2 || nw > 3 || cols > INT_MAX) return false;
    const __half* b0 = nullptr;
    int64_t total = 0;
    for (int i = 0; i < nw; ++i) {
        const __half* b = f16_weight(w[i].type, w[i].w);
        if (!b || narrow_quant(w[i].type, w[i].w, n, cols) || (i > 0 && b != b0 + total * cols)) return false;
        if (i == 0) b0 = b;
        total += w[i].rows;
    }
    if (total > INT_MAX) return false;
    prepare_input(x, n, cols, w[0].name, same_input);
    const int rows = static_cast<int>(total), k = static_cast<int>(cols);
    if (cublas_ && dst16) {
        cublas_->gemm16(a16_.as<__half>(), b0, dst16, n, rows, k);
        *out16 = dst16;
        g_concat_gemms16.fetch_add(1, std::memory_order_relaxed);
    } else if (cublas_) {
        cublas_->gemm(a16_.as<__half>(), b0, out, n, rows, k);
    } else {
        gemm_f16(a16_.as<__half>(), b0, out, n, rows, k, stream_);
    }
    g_concat_gemms.fetch_add(1, std::memory_order_relaxed);
    return true;
}

void PrefillGemm::run_joint(int nw, const Weight* w, int64_t cols, const float* x, int n, float* const* out, bool same_input) {
    const __half* b[3] = {};
    int64_t rows[3] = {}, total = 0;
    bool quant = nw >= 1 && nw <= 3;
    for (int i = 0; quant && i < nw; ++i) quant = narrow_quant(w[i].type, w[i].w, n, cols);
    if (quant) {  // the quantized blocks, types mixed as they come (a q6_K v beside q4_K q and k)
        quant::Type types[3] = {};
        const void* q[3] = {};
        for (int i = 0; i < nw; ++i) types[i] = w[i].type, q[i] = w[i].w, rows[i] = w[i].rows;
        prepare_input(x, n, cols, w[0].name, same_input);
        gemm_narrow_quant(a16_.as<__half>(), n, cols, nw, types, q, rows, out, false, narrow_, stream_);
        return;
    }
    bool joint = nw >= 1 && nw <= 3 && narrow(n) && cols % 8 == 0;
    for (int i = 0; joint && i < nw; ++i) {
        b[i] = f16_weight(w[i].type, w[i].w);
        rows[i] = w[i].rows;
        total += rows[i];
        joint = b[i] != nullptr;
    }
    joint = joint && total * cols * 2 <= kNarrowBytes;
    if (!joint) {
        for (int i = 0; i < nw; ++i) run(w[i].type, w[i].w, w[i].rows, cols, x, n, out[i], w[i].name, same_input || i > 0);
        return;
    }
    prepare_input(x, n, cols, w[0].name, same_input);
    gemm_narrow(a16_.as<__half>(), n, cols, nw, b, rows, out, false, narrow_, stream_);
}

}  // namespace minfer::cuda

namespace minfer::device {

namespace {

__global__ void fault_kernel(int* p) { p[threadIdx.x] = 1; }

using engine::Buf;
using engine::Weight;

class CudaOps final : public engine::Ops {
public:
    CudaOps(std::shared_ptr<CudaModel> model, const model::Config& c, int n_ctx, int64_t kv_rows, int max_tokens)
        : m_(std::move(model)), c_(c), n_ctx_(n_ctx), kv_rows_(kv_rows), max_tokens_(max_tokens) {
        m_->check_healthy();
        check(cudaSetDevice(0), "cudaSetDevice");
        kv_dim_ = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
        const uint64_t kv_elems = static_cast<uint64_t>(c.n_layer) * static_cast<uint64_t>(kv_rows) * static_cast<uint64_t>(kv_dim_);
        pages_ = DeviceMemory(static_cast<uint64_t>(engine::KvPool::pages_for(n_ctx)) * sizeof(int32_t), &m_->scratch_bytes, "page table");
        k_cache_ = DeviceMemory(kv_elems * sizeof(__half), &m_->kv_bytes, "KV cache (keys)");
        v_cache_ = DeviceMemory(kv_elems * sizeof(__half), &m_->kv_bytes, "KV cache (values)");
        tokens_ = DeviceMemory(static_cast<uint64_t>(max_tokens) * sizeof(int32_t), &m_->scratch_bytes, "token scratch");
        gemm_ = std::make_unique<cuda::PrefillGemm>(*m_, c, max_tokens, stream_.get());
        const std::vector<double> inv = engine::rope_inv_freq(c.rope_freq_base, c.head_dim);
        inv_freq_ = DeviceMemory(inv.size() * sizeof(double), &m_->scratch_bytes, "RoPE table");
        check(cudaMemcpy(inv_freq_.as<void>(), inv.data(), inv.size() * sizeof(double), cudaMemcpyHostToDevice), "RoPE table");
        partial_ = DeviceMemory(
            static_cast<uint64_t>(cuda::attention_partial_floats(c.n_head, c.n_head_kv, c.head_dim, 1)) * sizeof(float),
            &m_->scratch_bytes, "attention scratch");
    }

    ~CudaOps() override {
        if (stream_.get()) cudaStreamSynchronize(stream_.get());  // no kernel may outlive the buffers it uses
    }

    void begin(int64_t) override {
        m_->check_healthy();
        check(cudaSetDevice(0), "cudaSetDevice");
    }

    Buf alloc(size_t n) override {
        buffers_.emplace_back(static_cast<uint64_t>(n) * sizeof(float), &m_->scratch_bytes, "activation scratch");
        return Buf{buffers_.back().as<float>(), n};
    }

    void embed(const Weight& table, const int32_t* tokens, int n, Buf out) override {
        if (n > max_tokens_) fail(MINFER_ERR_INTERNAL, "CUDA embed: %d tokens, scratch for %d", n, max_tokens_);
        check(cudaMemcpyAsync(tokens_.as<void>(), tokens, static_cast<size_t>(n) * sizeof(int32_t), cudaMemcpyHostToDevice, s()),
              "token upload");
        const WeightKey key = m_->device_of(table);
        cuda::embed_rows(m_->device_type(key, table.type), key, table.cols, tokens_.as<int32_t>(), n, out.data, s());
    }

    void rms_norm(Buf x, int64_t rows, int64_t dim, const Weight& w, float eps, Buf out) override {
        cuda::rms_norm(x.data, rows, static_cast<int>(dim), static_cast<const float*>(m_->device_of(w)), eps, out.data, s());
    }

    void matmul(const Weight& w, Buf x, int n, Buf out, bool /*same_input*/) override {
        const void* wd = m_->device_of(w);
        const quant::Type t = m_->device_type(wd, w.type);
        if (n == 1) cuda::matvec(t, wd, w.rows, w.cols, x.data, out.data, s());
        else gemm_->run(t, wd, w.rows, w.cols, x.data, n, out.data, w.info ? w.info->name.c_str() : "?");
    }

    void add_bias(Buf x, int64_t rows, const Weight& b) override {
        cuda::add_bias(x.data, rows, static_cast<int>(b.cols), static_cast<const float*>(m_->device_of(b)), s());
    }

    void rope(Buf x, int n, int n_heads, int pos0) override {
        cuda::rope(x.data, n, n_heads, c_.head_dim, pos0, inv_freq_.as<double>(), s());
    }

    void store_kv(int layer, engine::KvPages pages, int pos0, int n, Buf k, Buf v) override {
        const int64_t at = int64_t{layer} * kv_rows_ * kv_dim_;
        cuda::store_kv(k.data, v.data, k_cache_.as<__half>() + at, v_cache_.as<__half>() + at, n, kv_dim_, pos0, map(pages), s());
    }

    void attention(int layer, engine::KvPages pages, Buf q, int n, int pos0, Buf out) override {
        const int64_t at = int64_t{layer} * kv_rows_ * kv_dim_;
        cuda::attention(q.data, k_cache_.as<__half>() + at, v_cache_.as<__half>() + at, out.data, n, pos0, c_.n_head,
                        c_.n_head_kv, c_.head_dim, partial_.as<float>(), s(), nullptr, map(pages));
    }

    void swiglu(Buf gate, Buf up) override { cuda::swiglu(gate.data, up.data, static_cast<int64_t>(gate.n), s()); }
    void add(Buf x, Buf y) override { cuda::add(x.data, y.data, static_cast<int64_t>(x.n), s()); }

    void read(Buf src, float* host) override {
        check(cudaMemcpyAsync(host, src.data, src.n * sizeof(float), cudaMemcpyDeviceToHost, s()), "read back");
        stream_.sync("forward pass");
    }

    void write(const float* host, Buf dst) override {
        check(cudaMemcpyAsync(dst.data, host, dst.n * sizeof(float), cudaMemcpyHostToDevice, s()), "write");
        stream_.sync("write");
    }

    void on_error(const Error& e) override {
        if (e.status() == MINFER_ERR_DEVICE) m_->poison(e.what());
    }

private:
    cudaStream_t s() const { return stream_.get(); }

    // The page table on the device (copied when it differs from the last one copied).
    cuda::KvMap map(engine::KvPages pages) {
        if (pages.size() > static_cast<size_t>(engine::KvPool::pages_for(n_ctx_)))
            fail(MINFER_ERR_INTERNAL, "CUDA ops: a page table of %zu entries for %d positions", pages.size(), n_ctx_);
        if (!std::equal(pages.begin(), pages.end(), pages_host_.begin(), pages_host_.end())) {
            pages_host_.assign(pages.begin(), pages.end());
            check(cudaMemcpyAsync(pages_.as<void>(), pages_host_.data(), pages.size() * sizeof(int32_t), cudaMemcpyHostToDevice, s()),
                  "page table upload");
        }
        cuda::KvMap m;
        m.pages = pages_.as<int32_t>();
        return m;
    }

    std::shared_ptr<CudaModel> m_;
    model::Config c_;
    int n_ctx_;
    int64_t kv_rows_;
    int max_tokens_;
    int64_t kv_dim_ = 0;
    cuda::Stream stream_;
    DeviceMemory k_cache_, v_cache_;  // [n_layer][kv_rows][n_head_kv * head_dim] f16
    DeviceMemory pages_;              // the page table of the last call
    std::vector<int32_t> pages_host_; // what pages_ holds
    DeviceMemory tokens_;             // [max_tokens] token ids of the current call
    DeviceMemory inv_freq_;           // [head_dim / 2] RoPE frequencies, double
    DeviceMemory partial_;            // decode attention split partials
    std::vector<DeviceMemory> buffers_;
    std::unique_ptr<cuda::PrefillGemm> gemm_;
};

}  // namespace

std::unique_ptr<engine::Ops> cuda_make_ops(std::shared_ptr<CudaModel> model, const model::Config& config, int n_ctx,
                                           int64_t kv_rows, int max_tokens) {
    return std::make_unique<CudaOps>(std::move(model), config, n_ctx, kv_rows, max_tokens);
}

double cuda_dequant_sweep_ms(CudaModel& m, const std::vector<engine::Weight>& weights, int reps) {
    m.check_healthy();
    int64_t largest = 0;
    for (const engine::Weight& w : weights) largest = std::max(largest, w.rows * w.cols);
    DeviceMemory scratch(static_cast<uint64_t>(largest) * sizeof(__half), &m.scratch_bytes, "dequant sweep scratch");
    cuda::Stream stream;
    cudaEvent_t ev[2] = {nullptr, nullptr};
    check(cudaEventCreate(&ev[0]), "cudaEventCreate");
    std::vector<float> times;
    try {
        check(cudaEventCreate(&ev[1]), "cudaEventCreate");
        for (int r = -1; r < reps; ++r) {  // r = -1: warm-up
            check(cudaEventRecord(ev[0], stream.get()), "cudaEventRecord");
            // (a regrouped q8_0 matrix, MINFER_Q80_GROUPS, dequantized as q8_0: the same work, values unused)
            for (const engine::Weight& w : weights)
                if (w.type != quant::Type::F16)
                    cuda::dequant_f16(w.type, m.device_of(w), w.rows, w.cols, scratch.as<__half>(), stream.get());
            check(cudaEventRecord(ev[1], stream.get()), "cudaEventRecord");
            check(cudaEventSynchronize(ev[1]), "dequant sweep");
            float ms = 0;
            check(cudaEventElapsedTime(&ms, ev[0], ev[1]), "cudaEventElapsedTime");
            if (r >= 0) times.push_back(ms);
        }
    } catch (...) {
        cudaEventDestroy(ev[0]);
        if (ev[1]) cudaEventDestroy(ev[1]);
        throw;
    }
    cudaEventDestroy(ev[0]);
    cudaEventDestroy(ev[1]);
    std::sort(times.begin(), times.end());
    return times[times.size() / 2];
}

void cuda_inject_fault() {
    fault_kernel<<<1, 32>>>(reinterpret_cast<int*>(uintptr_t{16}));
    cudaDeviceSynchronize();
}

// ---- test entry points ----------------------------------------------------------------------------------------

namespace testing {

// The hooks upload with cudaMemcpy and poison with cudaMemset, on the legacy default stream, which does
// not order the hook's own (non-blocking) stream: each waits for them before its first launch.
static void inputs_landed() { check(cudaDeviceSynchronize(), "test inputs"); }

std::vector<uint16_t> cuda_dequant_f16(int32_t type, const void* bytes, uint64_t n_bytes, int64_t rows, int64_t cols) {
    cuda::Stream stream;
    DeviceMemory src(n_bytes, nullptr, "test input"), dst(static_cast<uint64_t>(rows * cols) * 2, nullptr, "test output");
    check(cudaMemcpy(src.as<void>(), bytes, n_bytes, cudaMemcpyHostToDevice), "test upload");
    inputs_landed();
    cuda::dequant_f16(static_cast<quant::Type>(type), src.as<void>(), rows, cols, dst.as<__half>(), stream.get());
    stream.sync("dequant_f16");
    std::vector<uint16_t> out(static_cast<size_t>(rows * cols));
    check(cudaMemcpy(out.data(), dst.as<void>(), out.size() * 2, cudaMemcpyDeviceToHost), "test download");
    return out;
}

std::vector<float> cuda_gemm_f16(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int m, int n, int k,
                                 const std::vector<float>* c0, bool narrow, int parts, const std::vector<uint8_t>* bq, int32_t bq_type) {
    cuda::Stream stream;
    const quant::Type qt = static_cast<quant::Type>(bq_type);
    if (bq && (!narrow || !cuda::gemm_narrow_quant_supports(qt, k) || bq->size() != quant::row_bytes(qt, k) * static_cast<size_t>(n)))
        fail(MINFER_ERR_INVALID_ARGUMENT, "cuda_gemm_f16: quantized B of type %d, %d x %d, %zu bytes", bq_type, n, k, bq->size());
    const size_t b_bytes = bq ? bq->size() : b.size() * 2;
    DeviceMemory da(a.size() * 2, nullptr, "A"), db(b_bytes, nullptr, "B"), dc(static_cast<uint64_t>(m) * n * 4, nullptr, "C");
    check(cudaMemcpy(da.as<void>(), a.data(), a.size() * 2, cudaMemcpyHostToDevice), "upload A");
    check(cudaMemcpy(db.as<void>(), bq ? static_cast<const void*>(bq->data()) : b.data(), b_bytes, cudaMemcpyHostToDevice), "upload B");
    if (c0) check(cudaMemcpy(dc.as<void>(), c0->data(), dc.bytes(), cudaMemcpyHostToDevice), "upload C");
    else check(cudaMemset(dc.as<void>(), 0xff, dc.bytes()), "poison C");  // NaN everywhere: unwritten cells fail
    inputs_landed();
    if (!narrow) {
        cuda::gemm_f16(da.as<__half>(), db.as<__half>(), dc.as<float>(), m, n, k, stream.get(), c0 != nullptr);
        stream.sync("gemm_f16");
    } else {
        // parts matrices of consecutive rows of B (the last takes the remainder), each with its own C, as
        // the forward gives q, k and v; C is then gathered back into [m][n].
        if (parts < 1 || parts > 3 || n < parts) fail(MINFER_ERR_INVALID_ARGUMENT, "cuda_gemm_f16: %d parts of %d rows", parts, n);
        const __half* w[3];
        const void* wq[3];
        const quant::Type types[3] = {qt, qt, qt};
        int64_t rows[3];
        float* y[3];
        std::vector<DeviceMemory> ys, qparts;  // quantized: each matrix in its own allocation, as the weights are
        for (int i = 0, r0 = 0; i < parts; ++i) {
            rows[i] = i + 1 < parts ? n / parts : n - r0;
            w[i] = db.as<__half>() + int64_t{r0} * k;
            if (bq) {
                const size_t rb = quant::row_bytes(qt, k);
                qparts.emplace_back(rb * rows[i], nullptr, "B part");
                check(cudaMemcpy(qparts.back().as<void>(), bq->data() + rb * r0, rb * rows[i], cudaMemcpyHostToDevice), "upload B part");
                wq[i] = qparts.back().as<void>();
            }
            ys.emplace_back(static_cast<uint64_t>(m) * rows[i] * 4, nullptr, "C part");
            y[i] = ys.back().as<float>();
            std::vector<float> part(static_cast<size_t>(m) * rows[i], NAN);
            for (int t = 0; t < m; ++t)
                for (int64_t r = 0; r < rows[i]; ++r)
                    if (c0) part[static_cast<size_t>(t * rows[i] + r)] = (*c0)[static_cast<size_t>(t) * n + r0 + r];
            check(cudaMemcpy(y[i], part.data(), part.size() * 4, cudaMemcpyHostToDevice), "upload C part");
            r0 += static_cast<int>(rows[i]);
        }
        const int64_t floats = cuda::gemm_narrow_ws_floats(), counters = cuda::gemm_narrow_counters(n);
        DeviceMemory ws(static_cast<uint64_t>(floats) * 4, nullptr, "narrow GEMM workspace"),
            cnt(static_cast<uint64_t>(counters) * 4, nullptr, "narrow GEMM counters");
        check(cudaMemset(cnt.as<void>(), 0, cnt.bytes()), "zero the counters");
        const cuda::NarrowScratch scratch{ws.as<float>(), floats, cnt.as<int>(), counters};
        inputs_landed();
        if (bq) cuda::gemm_narrow_quant(da.as<__half>(), m, k, parts, types, wq, rows, y, c0 != nullptr, scratch, stream.get());
        else cuda::gemm_narrow(da.as<__half>(), m, k, parts, w, rows, y, c0 != nullptr, scratch, stream.get());
        stream.sync("gemm_narrow");
        std::vector<int> left(static_cast<size_t>(counters));
        check(cudaMemcpy(left.data(), cnt.as<void>(), cnt.bytes(), cudaMemcpyDeviceToHost), "download the counters");
        for (int v : left)
            if (v != 0) fail(MINFER_ERR_INTERNAL, "cuda_gemm_f16: the narrow GEMM left a counter at %d", v);
        std::vector<float> c(static_cast<size_t>(m) * n);
        for (int i = 0, r0 = 0; i < parts; ++i) {
            std::vector<float> part(static_cast<size_t>(m) * rows[i]);
            check(cudaMemcpy(part.data(), y[i], part.size() * 4, cudaMemcpyDeviceToHost), "download C part");
            for (int t = 0; t < m; ++t)
                for (int64_t r = 0; r < rows[i]; ++r) c[static_cast<size_t>(t) * n + r0 + r] = part[static_cast<size_t>(t * rows[i] + r)];
            r0 += static_cast<int>(rows[i]);
        }
        return c;
    }
    std::vector<float> c(static_cast<size_t>(m) * n);
    check(cudaMemcpy(c.data(), dc.as<void>(), c.size() * 4, cudaMemcpyDeviceToHost), "download C");
    return c;
}

std::vector<uint8_t> cuda_download(const void* device, uint64_t bytes) {
    std::vector<uint8_t> out(bytes);
    check(cudaMemcpy(out.data(), device, bytes, cudaMemcpyDeviceToHost), "test download");
    return out;
}

uint64_t cuda_f16_groups() { return cuda::g_f16_groups.load(); }
int cuda_q80_groups(int mode) { return cuda::g_q80_groups.set(mode); }
uint64_t cuda_q80_grouped() { return cuda::g_q80_grouped.load(); }
int cuda_q6k_pad(int mode) { return cuda::g_q6k_pad.set(mode); }
uint64_t cuda_q6k_padded() { return cuda::g_q6k_padded.load(); }
uint64_t cuda_q6k_pad_reads() { return cuda::q6kp_matvec_launches(); }
int cuda_q80_copy(int mode) { return cuda::g_q80_copy.set(mode); }
uint64_t cuda_q80_copied() { return cuda::g_q80_copied.load(); }
uint64_t cuda_q80g_reads() { return cuda::q80g_matvec_launches(); }
int cuda_q50_copy(int mode) { return cuda::g_q50_copy.set(mode); }
uint64_t cuda_q50_copied() { return cuda::g_q50_copied.load(); }
uint64_t cuda_q50g_reads() { return cuda::q50g_matvec_launches(); }
int cuda_k23_copy(int mode) { return cuda::g_k23_copy.set(mode); }
uint64_t cuda_k23_copied() { return cuda::g_k23_copied.load(); }
uint64_t cuda_k23_reads() { return cuda::k23p_matvec_launches(); }
uint64_t cuda_q41_q51_reads() { return cuda::q41_q51_matvec_launches(); }
bool cuda_matvec_padded_q80() { return cuda::matvec_reads_padded_q80(); }
bool cuda_matvec_pair_knob() { return cuda::matvec_xq_pairs(quant::Type::Q4_K, cuda::mv::kQ6_KP); }
uint64_t cuda_matvec_pair_launches() { return cuda::matvec_pair_launches(); }

uint64_t cuda_concat_gemms(uint64_t* f16_out) {
    if (f16_out) *f16_out = cuda::g_concat_gemms16.load();
    return cuda::g_concat_gemms.load();
}
void cuda_gemm_tune_force(bool on) { cuda::testing_hooks::gemm_tune_force(on); }
void cuda_gemm_tune_counts(uint64_t* decisions, uint64_t* lt_runs) { cuda::testing_hooks::gemm_tune_counts(decisions, lt_runs); }

bool cuda_matvec_int8_supported(int32_t type, int ncols) { return cuda::matvec_int8_supported(static_cast<quant::Type>(type), ncols); }
bool cuda_matvec_int8_takes(int32_t type, int ncols, int64_t cols) {
    return cuda::matvec_int8_takes(static_cast<quant::Type>(type), ncols, cols);
}

bool cuda_attention_wgmma_knob() { return cuda::testing_hooks::attention_wgmma_knob(); }

int cuda_compute_capability() { return cuda::compute_capability(); }

uint64_t cuda_free_bytes() {
    size_t free_b = 0, total_b = 0;
    check(cudaMemGetInfo(&free_b, &total_b), "cudaMemGetInfo");
    return free_b;
}

std::vector<uint8_t> cuda_qkv_finish(const std::vector<float>& qkv, const std::vector<int32_t>& pos, int n_head, int n_head_kv,
                                     int head_dim, double rope_base, int table, int table_rows) {
    const int n = static_cast<int>(pos.size());
    const int64_t q_dim = int64_t{n_head} * head_dim, kv_dim = int64_t{n_head_kv} * head_dim, ld = q_dim + 2 * kv_dim;
    if (n == 0 || qkv.size() != static_cast<size_t>(n * ld)) fail(MINFER_ERR_INTERNAL, "cuda_qkv_finish: %zu values for %d tokens", qkv.size(), n);
    const int rows = *std::max_element(pos.begin(), pos.end()) + 1;
    cuda::Stream stream;
    const std::vector<double> inv = engine::rope_inv_freq(rope_base, head_dim);
    DeviceMemory din(qkv.size() * 4, nullptr, "qkv"), dpos(pos.size() * 4, nullptr, "positions"), dq(static_cast<uint64_t>(n * q_dim) * 4, nullptr, "q"),
        dk(static_cast<uint64_t>(rows * kv_dim) * 2, nullptr, "K"), dv(dk.bytes(), nullptr, "V"), dinv(inv.size() * 8, nullptr, "inv_freq"),
        dtab(static_cast<uint64_t>(table > 0 ? table_rows : 0) * static_cast<uint64_t>(head_dim / 2) * sizeof(float2), nullptr, "RoPE table");
    check(cudaMemcpy(din.as<void>(), qkv.data(), din.bytes(), cudaMemcpyHostToDevice), "upload qkv");
    check(cudaMemcpy(dpos.as<void>(), pos.data(), dpos.bytes(), cudaMemcpyHostToDevice), "upload positions");
    check(cudaMemcpy(dinv.as<void>(), inv.data(), dinv.bytes(), cudaMemcpyHostToDevice), "upload inv_freq");
    for (DeviceMemory* d : {&dq, &dk, &dv}) check(cudaMemset(d->as<void>(), 0xff, d->bytes()), "poison");  // NaN: unwritten values fail
    inputs_landed();
    cuda::RopeTable rope;
    if (table > 0) {
        cuda::rope_table(dinv.as<double>(), head_dim, table_rows, dtab.as<float2>(), stream.get());
        if (table == 2) check(cudaMemsetAsync(dtab.as<void>(), 0, dtab.bytes(), stream.get()), "zero the table");
        // Finished before qkv_finish starts, as a context's table is (made when the context is created):
        // with MINFER_ROW_PREWAIT qkv_finish reads it before its pdl_wait, which orders nothing before that.
        stream.sync("RoPE table");
        rope = {dtab.as<float2>(), table_rows};
    }
    const float* in = din.as<float>();
    cuda::qkv_finish({in, in + q_dim, in + q_dim + kv_dim, ld, ld}, dq.as<float>(), n, n_head, n_head_kv, head_dim, nullptr, nullptr, nullptr,
                     nullptr, nullptr, 1e-6f, dinv.as<double>(), 0, dpos.as<int32_t>(), dk.as<__half>(), dv.as<__half>(), cuda::KvMap{},
                     stream.get(), rope);
    stream.sync("qkv_finish");
    std::vector<uint8_t> out(dq.bytes() + dk.bytes() + dv.bytes());
    check(cudaMemcpy(out.data(), dq.as<void>(), dq.bytes(), cudaMemcpyDeviceToHost), "download q");
    check(cudaMemcpy(out.data() + dq.bytes(), dk.as<void>(), dk.bytes(), cudaMemcpyDeviceToHost), "download K");
    check(cudaMemcpy(out.data() + dq.bytes() + dk.bytes(), dv.as<void>(), dv.bytes(), cudaMemcpyDeviceToHost), "download V");
    return out;
}

std::vector<float> cuda_matvec(int32_t type, const void* bytes, uint64_t n_bytes, int64_t rows, int64_t cols,
                               const std::vector<float>& x, bool reference) {
    cuda::Stream stream;
    DeviceMemory dw(n_bytes, nullptr, "W"), dx(x.size() * 4, nullptr, "x"), dy(static_cast<uint64_t>(rows) * 4, nullptr, "y");
    check(cudaMemcpy(dw.as<void>(), bytes, n_bytes, cudaMemcpyHostToDevice), "upload W");
    check(cudaMemcpy(dx.as<void>(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
    check(cudaMemset(dy.as<void>(), 0xff, dy.bytes()), "poison y");  // NaN everywhere: unwritten rows fail
    inputs_landed();
    if (static_cast<quant::Type>(type) == cuda::mv::kQ8_0G) {  // q8_0 given
        if (reference) fail(MINFER_ERR_INVALID_ARGUMENT, "cuda_matvec: the reference kernel reads the file's layout only");
        cuda::q80_group(dw.as<void>(), rows, cols, stream.get());
    }
    if (reference)
        cuda::matvec_reference(static_cast<quant::Type>(type), dw.as<void>(), rows, cols, dx.as<float>(), dy.as<float>(), stream.get());
    else
        cuda::matvec(static_cast<quant::Type>(type), dw.as<void>(), rows, cols, dx.as<float>(), dy.as<float>(), stream.get());
    stream.sync("matvec");
    std::vector<float> y(static_cast<size_t>(rows));
    check(cudaMemcpy(y.data(), dy.as<void>(), y.size() * 4, cudaMemcpyDeviceToHost), "download y");
    return y;
}

std::vector<float> cuda_matvec_int8(int32_t type, const void* bytes, uint64_t n_bytes, int64_t rows, int64_t cols,
                                    const std::vector<float>& x, std::vector<float>* x_used, int ncols) {
    cuda::Stream stream;
    const auto t = static_cast<quant::Type>(type);
    const auto xq_bytes = static_cast<uint64_t>(cuda::matvec_xq_bytes(cols));
    if (x.size() != static_cast<size_t>(cols * ncols)) fail(MINFER_ERR_INTERNAL, "cuda_matvec_int8: x is not ncols x cols");
    DeviceMemory dw(n_bytes, nullptr, "W"), dx(x.size() * 4, nullptr, "x"), dy(static_cast<uint64_t>(rows * ncols) * 4, nullptr, "y"),
        dq(xq_bytes * static_cast<uint64_t>(ncols), nullptr, "xq");
    check(cudaMemcpy(dw.as<void>(), bytes, n_bytes, cudaMemcpyHostToDevice), "upload W");
    check(cudaMemcpy(dx.as<void>(), x.data(), x.size() * 4, cudaMemcpyHostToDevice), "upload x");
    check(cudaMemset(dy.as<void>(), 0xff, dy.bytes()), "poison y");
    check(cudaMemset(dq.as<void>(), 0xff, dq.bytes()), "poison xq");
    inputs_landed();
    // q8_0 given: regrouped in place where its rows are whole groups, else its grouped copy (a padded last
    // group, as the load's MINFER_Q80_COPY makes it)
    const bool q80_copy = t == cuda::mv::kQ8_0G && cols % 256 != 0;
    if (t == cuda::mv::kQ8_0G && !q80_copy) cuda::q80_group(dw.as<void>(), rows, cols, stream.get());
    DeviceMemory padded;
    if (q80_copy) {
        padded = DeviceMemory(static_cast<uint64_t>(rows * cuda::mv::q80g_row_bytes(cols)), nullptr, "grouped W");
        cuda::q80_group_copy(dw.as<void>(), padded.as<void>(), rows, cols, stream.get());
    }
    if (t == cuda::mv::kQ6_KP) {  // q6_K given: its padded copy
        padded = DeviceMemory(static_cast<uint64_t>(rows * cuda::mv::q6kp_row_bytes(cols)), nullptr, "padded W");
        cuda::q6k_pad(dw.as<void>(), padded.as<void>(), rows, cols, stream.get());
    }
    if (t == cuda::mv::kQ2_KP || t == cuda::mv::kQ3_KP) {  // q2_K or q3_K given: its arranged copy
        padded = DeviceMemory(static_cast<uint64_t>(rows * cuda::mv::k23p_row_bytes(t, cols)), nullptr, "arranged W");
        cuda::k23_arrange(t == cuda::mv::kQ3_KP ? quant::Type::Q3_K : quant::Type::Q2_K, dw.as<void>(), padded.as<void>(), rows, cols,
                          stream.get());
    }
    if (t == cuda::mv::kQ5_0G) {  // q5_0 given: its grouped copy (a padded last group where cols needs one)
        padded = DeviceMemory(static_cast<uint64_t>(rows * cuda::mv::q50g_row_bytes(cols)), nullptr, "grouped W");
        cuda::q50_group_copy(dw.as<void>(), padded.as<void>(), rows, cols, stream.get());
    }
    cuda::quantize_x(dx.as<float>(), nullptr, cols, dq.as<void>(), stream.get(), ncols);
    const void* w = padded.as<void>() ? padded.as<void>() : dw.as<void>();
    float* y = dy.as<float>();
    cuda::matvec_xq(t, 1, &w, &rows, cols, dq.as<void>(), &y, stream.get(), false, ncols);
    stream.sync("matvec_xq");
    std::vector<float> out(static_cast<size_t>(rows * ncols));
    check(cudaMemcpy(out.data(), dy.as<void>(), out.size() * 4, cudaMemcpyDeviceToHost), "download y");
    std::vector<uint8_t> q(dq.bytes());
    check(cudaMemcpy(q.data(), dq.as<void>(), q.size(), cudaMemcpyDeviceToHost), "download xq");
    if (x_used) {
        x_used->resize(x.size());
        for (int j = 0; j < ncols; ++j)
            for (int64_t c = 0; c < cols; ++c)
                (*x_used)[static_cast<size_t>(j * cols + c)] = cuda::mv::xq_value(q.data(), cols, c, j, ncols);
    }
    return out;
}

std::vector<float> cuda_attention_decode(const std::vector<float>& q, const std::vector<uint16_t>& k16, const std::vector<uint16_t>& v16,
                                         int L, int n_head, int n_head_kv, int head_dim, bool device_pos) {
    cuda::Stream stream;
    const size_t q_dim = static_cast<size_t>(n_head) * head_dim;
    DeviceMemory dq(q_dim * 4, nullptr, "q"), dout(q_dim * 4, nullptr, "out"), dk(k16.size() * 2, nullptr, "K"),
        dv(v16.size() * 2, nullptr, "V"), dpos(4, nullptr, "position"),
        part(static_cast<uint64_t>(cuda::attention_partial_floats(n_head, n_head_kv, head_dim, 1)) * 4, nullptr, "partials");
    const int32_t pos = L - 1;
    check(cudaMemcpy(dq.as<void>(), q.data(), q_dim * 4, cudaMemcpyHostToDevice), "upload q");
    check(cudaMemcpy(dk.as<void>(), k16.data(), k16.size() * 2, cudaMemcpyHostToDevice), "upload K");
    check(cudaMemcpy(dv.as<void>(), v16.data(), v16.size() * 2, cudaMemcpyHostToDevice), "upload V");
    check(cudaMemcpy(dpos.as<void>(), &pos, 4, cudaMemcpyHostToDevice), "upload position");
    check(cudaMemset(dout.as<void>(), 0xff, dout.bytes()), "poison out");
    inputs_landed();
    cuda::attention(dq.as<float>(), dk.as<__half>(), dv.as<__half>(), dout.as<float>(), 1, device_pos ? 0 : pos, n_head, n_head_kv,
                    head_dim, part.as<float>(), stream.get(), device_pos ? dpos.as<int32_t>() : nullptr);
    stream.sync("attention");
    std::vector<float> out(q_dim);
    check(cudaMemcpy(out.data(), dout.as<void>(), q_dim * 4, cudaMemcpyDeviceToHost), "download out");
    return out;
}

std::vector<float> cuda_attention_prefill(const std::vector<float>& q, const std::vector<uint16_t>& k16, const std::vector<uint16_t>& v16,
                                          const std::vector<int32_t>& pages, int n, int pos0, int n_head, int n_head_kv, int head_dim,
                                          bool force_mma, std::string* kernel, bool f16_out) {
    if (n < 2) fail(MINFER_ERR_INVALID_ARGUMENT, "cuda_attention_prefill: n = %d (the prefill kernel takes two or more queries)", n);
    cuda::testing_hooks::attention_force_mma(force_mma);
    struct Restore {
        ~Restore() { cuda::testing_hooks::attention_force_mma(false); }
    } restore;
    if (kernel) *kernel = cuda::attention_prefill_kernel(head_dim, n);
    cuda::Stream stream;
    const size_t out_floats = static_cast<size_t>(n) * static_cast<size_t>(n_head) * static_cast<size_t>(head_dim);
    constexpr size_t kTail = 64;  // poisoned elements past each output, which must stay so
    DeviceMemory dq(q.size() * 4, nullptr, "q"), dout((out_floats + kTail) * 4, nullptr, "out"), dk(k16.size() * 2, nullptr, "K"),
        dv(v16.size() * 2, nullptr, "V"), dpages(pages.size() * 4, nullptr, "page table"),
        dout16(f16_out ? (out_floats + kTail) * 2 : 0, nullptr, "out16");
    check(cudaMemcpy(dq.as<void>(), q.data(), q.size() * 4, cudaMemcpyHostToDevice), "upload q");
    check(cudaMemcpy(dk.as<void>(), k16.data(), k16.size() * 2, cudaMemcpyHostToDevice), "upload K");
    check(cudaMemcpy(dv.as<void>(), v16.data(), v16.size() * 2, cudaMemcpyHostToDevice), "upload V");
    check(cudaMemcpy(dpages.as<void>(), pages.data(), pages.size() * 4, cudaMemcpyHostToDevice), "upload pages");
    check(cudaMemset(dout.as<void>(), 0xff, dout.bytes()), "poison out");
    if (f16_out) check(cudaMemset(dout16.as<void>(), 0xff, dout16.bytes()), "poison out16");
    inputs_landed();
    cuda::KvMap map;
    map.pages = dpages.as<int32_t>();
    map.stride = static_cast<int>(pages.size());
    cuda::attention(dq.as<float>(), dk.as<__half>(), dv.as<__half>(), dout.as<float>(), n, pos0, n_head, n_head_kv, head_dim, nullptr,
                    stream.get(), nullptr, map, f16_out ? dout16.as<__half>() : nullptr);
    stream.sync("attention");
    std::vector<float> out(out_floats + kTail);
    check(cudaMemcpy(out.data(), dout.as<void>(), out.size() * 4, cudaMemcpyDeviceToHost), "download out");
    for (size_t i = out_floats; i < out.size(); ++i)
        if (!std::isnan(out[i])) fail(MINFER_ERR_INTERNAL, "cuda_attention_prefill: written past the end of the output");
    out.resize(out_floats);
    if (!f16_out) return out;
    // The f32 output must stay poisoned (NaN); the f16 one is returned as f32 values.
    for (const float x : out)
        if (!std::isnan(x)) fail(MINFER_ERR_INTERNAL, "cuda_attention_prefill: the f32 output was written beside the f16 one");
    std::vector<uint16_t> bits(out_floats + kTail);
    check(cudaMemcpy(bits.data(), dout16.as<void>(), bits.size() * 2, cudaMemcpyDeviceToHost), "download out16");
    for (size_t i = out_floats; i < bits.size(); ++i)
        if (bits[i] != 0xffff) fail(MINFER_ERR_INTERNAL, "cuda_attention_prefill: written past the end of the f16 output");
    for (size_t i = 0; i < out_floats; ++i) out[i] = quant::f16_to_f32(bits[i]);
    return out;
}

std::vector<float> cuda_attention_decode_rows(const std::vector<float>& q, const std::vector<uint16_t>& k16, const std::vector<uint16_t>& v16,
                                              const std::vector<int32_t>& pages, int stride, const std::vector<int32_t>& pos,
                                              int n_head, int n_head_kv, int head_dim, std::vector<uint16_t>* out16,
                                              std::vector<uint8_t>* xq, std::vector<uint8_t>* xq_ref) {
    cuda::Stream stream;
    const int rows = static_cast<int>(pos.size());
    const int64_t q_dim = int64_t{n_head} * head_dim;
    const size_t xq_size = static_cast<size_t>(rows * cuda::matvec_xq_bytes(q_dim));
    DeviceMemory dxq(xq ? xq_size : 0, nullptr, "xq"), dxq_ref(xq ? xq_size : 0, nullptr, "xq reference");
    std::vector<int32_t> slots(pos.size());
    for (int r = 0; r < rows; ++r) slots[static_cast<size_t>(r)] = r;
    DeviceMemory dq(q.size() * 4, nullptr, "q"), dout(q.size() * 4, nullptr, "out"), dk(k16.size() * 2, nullptr, "K"),
        dv(v16.size() * 2, nullptr, "V"), dpos(pos.size() * 4, nullptr, "positions"), dslot(slots.size() * 4, nullptr, "slots"),
        dpages(pages.size() * 4, nullptr, "page tables"), dout16(out16 ? q.size() * 2 : 0, nullptr, "out16"),
        part(static_cast<uint64_t>(cuda::attention_partial_floats(n_head, n_head_kv, head_dim, rows)) * 4, nullptr, "partials");
    check(cudaMemcpy(dq.as<void>(), q.data(), q.size() * 4, cudaMemcpyHostToDevice), "upload q");
    check(cudaMemcpy(dk.as<void>(), k16.data(), k16.size() * 2, cudaMemcpyHostToDevice), "upload K");
    check(cudaMemcpy(dv.as<void>(), v16.data(), v16.size() * 2, cudaMemcpyHostToDevice), "upload V");
    check(cudaMemcpy(dpos.as<void>(), pos.data(), pos.size() * 4, cudaMemcpyHostToDevice), "upload positions");
    check(cudaMemcpy(dslot.as<void>(), slots.data(), slots.size() * 4, cudaMemcpyHostToDevice), "upload slots");
    check(cudaMemcpy(dpages.as<void>(), pages.data(), pages.size() * 4, cudaMemcpyHostToDevice), "upload pages");
    check(cudaMemset(dout.as<void>(), 0xff, dout.bytes()), "poison out");
    if (out16) check(cudaMemset(dout16.as<void>(), 0xff, dout16.bytes()), "poison out16");
    if (xq) check(cudaMemset(dxq.as<void>(), 0xff, dxq.bytes()), "poison xq");
    inputs_landed();
    cuda::KvMap map;
    map.pages = dpages.as<int32_t>();
    map.slot = dslot.as<int32_t>();
    map.stride = stride;
    cuda::attention_decode_rows(dq.as<float>(), dk.as<__half>(), dv.as<__half>(), dout.as<float>(), rows, dpos.as<int32_t>(), n_head,
                                n_head_kv, head_dim, part.as<float>(), stream.get(), map, out16 ? dout16.as<__half>() : nullptr,
                                xq ? dxq.as<void>() : nullptr, 0, rows);
    if (xq) cuda::quantize_x(dout.as<float>(), nullptr, q_dim, dxq_ref.as<void>(), stream.get(), rows);  // what the launch replaces
    stream.sync("attention");
    if (xq) {
        xq->resize(xq_size);
        check(cudaMemcpy(xq->data(), dxq.as<void>(), xq_size, cudaMemcpyDeviceToHost), "download xq");
        if (xq_ref) {
            xq_ref->resize(xq_size);
            check(cudaMemcpy(xq_ref->data(), dxq_ref.as<void>(), xq_size, cudaMemcpyDeviceToHost), "download xq reference");
        }
    }
    std::vector<float> out(q.size());
    check(cudaMemcpy(out.data(), dout.as<void>(), q.size() * 4, cudaMemcpyDeviceToHost), "download out");
    if (out16) {
        out16->resize(q.size());
        check(cudaMemcpy(out16->data(), dout16.as<void>(), q.size() * 2, cudaMemcpyDeviceToHost), "download out16");
    }
    return out;
}

}  // namespace testing
}  // namespace minfer::device
