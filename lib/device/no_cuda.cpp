// Linked when the build has no CUDA backend: discovery says so, and the backend's entry points (which the
// engine never calls in such a build) fail with MINFER_ERR_UNSUPPORTED. Each definition names its namespace, so
// one whose signature no longer matches its declaration in device/cuda_backend.h fails to compile
// instead of becoming an overload that leaves the declared function undefined at link time.
#include "core/error.h"
#include "device/cuda_backend.h"
#include "device/device.h"

namespace minfer {

device::Probe device::probe_cuda() { return Probe{false, 0, "built without CUDA"}; }

namespace {
[[noreturn]] void no_cuda() { fail(MINFER_ERR_UNSUPPORTED, "this build of minfer has no CUDA backend (-Dcuda=disabled)"); }
}  // namespace

class device::CudaModel {};

device::WeightRegistry::~WeightRegistry() = default;
const device::WeightRegistry::Entry& device::WeightRegistry::register_weight(const std::string&, const void*, uint64_t, int32_t,
                                                                             const int64_t*) {
    no_cuda();
}
std::vector<const device::WeightRegistry::Entry*> device::WeightRegistry::register_group(const std::vector<Upload>&) { no_cuda(); }
std::string device::cuda_unsupported_reason(const model::Config&, const model::Plan&) { return "this build has no CUDA backend"; }
std::shared_ptr<device::CudaModel> device::cuda_load(const gguf::File&, const std::vector<const gguf::TensorInfo*>&,
                                                     const gguf::TensorInfo*, const CudaSettings&, int) {
    no_cuda();
}
device::PrefillPath device::cuda_prefill_path(const CudaModel&) { return PrefillPath::two_pass; }
const char* device::cuda_gemm_name(const CudaModel&) { return ""; }
double device::cuda_warm_ms(const CudaModel&) { return 0.0; }
std::unique_ptr<engine::Ops> device::cuda_make_ops(std::shared_ptr<CudaModel>, const model::Config&, int, int64_t, int) { no_cuda(); }
std::unique_ptr<engine::Runner> device::cuda_make_runner(std::shared_ptr<CudaModel>, const model::Config&, const model::Plan&,
                                                         const engine::RunnerShape&, const options::Values&) {
    no_cuda();
}
device::Vram device::cuda_vram(const CudaModel&) { return Vram{}; }
double device::cuda_dequant_sweep_ms(CudaModel&, const std::vector<engine::Weight>&, int) { no_cuda(); }
void device::cuda_inject_fault() { no_cuda(); }

std::vector<uint16_t> device::testing::cuda_dequant_f16(int32_t, const void*, uint64_t, int64_t, int64_t) { no_cuda(); }
std::vector<float> device::testing::cuda_gemm_f16(const std::vector<uint16_t>&, const std::vector<uint16_t>&, int, int, int,
                                                  const std::vector<float>*, bool, int, const std::vector<uint8_t>*, int32_t) {
    no_cuda();
}
uint64_t device::testing::cuda_free_bytes() { no_cuda(); }
int device::testing::cuda_compute_capability() { no_cuda(); }
bool device::testing::cuda_attention_wgmma_knob() { no_cuda(); }
bool device::testing::cuda_matvec_int8_supported(int32_t, int) { no_cuda(); }
bool device::testing::cuda_matvec_int8_takes(int32_t, int, int64_t) { no_cuda(); }
std::vector<float> device::testing::cuda_matvec(int32_t, const void*, uint64_t, int64_t, int64_t, const std::vector<float>&, bool) {
    no_cuda();
}
std::vector<float> device::testing::cuda_matvec_int8(int32_t, const void*, uint64_t, int64_t, int64_t, const std::vector<float>&,
                                                     std::vector<float>*, int) {
    no_cuda();
}
std::vector<float> device::testing::cuda_attention_decode(const std::vector<float>&, const std::vector<uint16_t>&,
                                                          const std::vector<uint16_t>&, int, int, int, int, bool) {
    no_cuda();
}
uint64_t device::testing::cuda_concat_gemms(uint64_t*) { no_cuda(); }
uint64_t device::testing::cuda_deferred_residuals() { no_cuda(); }
int device::testing::cuda_prune_last(int) { no_cuda(); }
uint64_t device::testing::cuda_pruned_layers(uint64_t*, uint64_t*) { no_cuda(); }
int device::testing::cuda_q16(int) { no_cuda(); }
int device::testing::cuda_attn_one_chunk(int) { no_cuda(); }
uint32_t device::testing::cuda_decode_skip(uint32_t) { no_cuda(); }
uint64_t device::testing::cuda_attn_one_chunk_launches(uint64_t*) { no_cuda(); }
uint64_t device::testing::cuda_q16_layers() { no_cuda(); }
std::vector<uint8_t> device::testing::cuda_download(const void*, uint64_t) { no_cuda(); }
uint64_t device::testing::cuda_f16_groups() { no_cuda(); }
int device::testing::cuda_q80_groups(int) { no_cuda(); }
uint64_t device::testing::cuda_q80_grouped() { no_cuda(); }
int device::testing::cuda_q6k_pad(int) { no_cuda(); }
uint64_t device::testing::cuda_q6k_padded() { no_cuda(); }
uint64_t device::testing::cuda_q6k_pad_reads() { no_cuda(); }
int device::testing::cuda_q80_copy(int) { no_cuda(); }
uint64_t device::testing::cuda_q80_copied() { no_cuda(); }
uint64_t device::testing::cuda_q80g_reads() { no_cuda(); }
int device::testing::cuda_q50_copy(int) { no_cuda(); }
uint64_t device::testing::cuda_q50_copied() { no_cuda(); }
uint64_t device::testing::cuda_q50g_reads() { no_cuda(); }
int device::testing::cuda_k23_copy(int) { no_cuda(); }
uint64_t device::testing::cuda_k23_copied() { no_cuda(); }
uint64_t device::testing::cuda_k23_reads() { no_cuda(); }
uint64_t device::testing::cuda_q41_q51_reads() { no_cuda(); }
bool device::testing::cuda_matvec_padded_q80() { no_cuda(); }
bool device::testing::cuda_matvec_pair_knob() { no_cuda(); }
uint64_t device::testing::cuda_matvec_pair_launches() { no_cuda(); }
std::vector<uint8_t> device::testing::cuda_qkv_finish(const std::vector<float>&, const std::vector<int32_t>&, int, int, int, double, int,
                                                      int) {
    no_cuda();
}
void device::testing::cuda_gemm_tune_force(bool) { no_cuda(); }
void device::testing::cuda_gemm_tune_counts(uint64_t*, uint64_t*) { no_cuda(); }
std::vector<float> device::testing::cuda_attention_decode_rows(const std::vector<float>&, const std::vector<uint16_t>&,
                                                               const std::vector<uint16_t>&, const std::vector<int32_t>&, int,
                                                               const std::vector<int32_t>&, int, int, int, std::vector<uint16_t>*,
                                                               std::vector<uint8_t>*, std::vector<uint8_t>*) {
    no_cuda();
}
std::vector<float> device::testing::cuda_attention_prefill(const std::vector<float>&, const std::vector<uint16_t>&,
                                                           const std::vector<uint16_t>&, const std::vector<int32_t>&, int, int, int, int,
                                                           int, bool, std::string*, bool) {
    no_cuda();
}

}  // namespace minfer
