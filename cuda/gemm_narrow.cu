// Launcher of the narrow GEMM (device code and design: cuda/gemm_narrow.cuh).
#include <algorithm>
#include <climits>
#include <cstdint>

#include "cuda/common.cuh"
#include "cuda/gemm_narrow.cuh"
#include "cuda/kernels.cuh"
#include "quant/quant.h"

// Weight rows per warp in n8 tiles: 2 or 4 (64 or 128 rows per CTA); 0 picks per launch.
#ifndef MINFER_GN_NW
#define MINFER_GN_NW 0
#endif
static_assert(MINFER_GN_NW == 0 || MINFER_GN_NW == 2 || MINFER_GN_NW == 4, "narrow GEMM: NW is 2 or 4 (or 0: chosen per launch)");

namespace minfer::cuda {
namespace {

constexpr int kMinUnits = 4;  // k-tiles a CTA takes at least (where the weight has as many): a short piece is mostly pipeline fill

// CTAs of the kernel per SM; sets its shared-memory limit once.
template <int MT, int NW, bool Q>
int occupancy() {
    static const int occ = [] {
        constexpr int smem = gn::smem_bytes<MT, NW, Q>();
        check(cudaFuncSetAttribute(gn::gemm_narrow_kernel<MT, NW, Q>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem),
              "narrow GEMM shared memory limit");
        int o = 0;
        check(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o, gn::gemm_narrow_kernel<MT, NW, Q>, gn::kThreads, smem),
              "narrow GEMM occupancy");
        if (o < 1) fail(MINFER_ERR_DEVICE, "CUDA narrow GEMM: a CTA (%d bytes of shared memory) does not fit an SM", smem);
        return o;
    }();
    return occ;
}

// The workspace one launch of this instantiation may need: two slots per resident CTA.
template <int MT, int NW, bool Q>
int64_t ws_floats() {
    return int64_t{2} * sm_count() * occupancy<MT, NW, Q>() * gn::acc_floats<MT, NW>();
}
template <int MT>
int64_t ws_floats_mt() {
    return std::max({ws_floats<MT, 2, false>(), ws_floats<MT, 4, false>(), ws_floats<MT, 2, true>(), ws_floats<MT, 4, true>()});
}

struct Plan {
    int tiles[3] = {0, 0, 0}, total = 0, k_tiles = 0, per_cta = 0, grid = 0;
    int64_t units = 0;
};

template <int NW>
Plan plan(int nseg, const int64_t* rows, int64_t k, int resident) {
    Plan p;
    for (int i = 0; i < nseg; ++i) {
        p.tiles[i] = static_cast<int>((rows[i] + gn::tile_rows<NW>() - 1) / gn::tile_rows<NW>());
        p.total += p.tiles[i];
    }
    p.k_tiles = static_cast<int>((k + gn::kBK - 1) / gn::kBK);
    p.units = int64_t{p.total} * p.k_tiles;
    const int64_t per = std::max<int64_t>((p.units + resident - 1) / resident, std::min(p.k_tiles, kMinUnits));
    p.per_cta = static_cast<int>(per);
    p.grid = static_cast<int>((p.units + per - 1) / per);
    return p;
}

// The launch's matrices: f16 (w) or quantized (q, as types).
struct Mats {
    int nseg = 0;
    const __half* const* w = nullptr;
    const quant::Type* types = nullptr;
    const void* const* q = nullptr;
    const int64_t* rows = nullptr;
    float* const* y = nullptr;
};

gn::Fmt fmt_of(quant::Type t) {
    switch (t) {
        case quant::Type::Q4_K: return gn::kQ4_K;
        case quant::Type::Q6_K: return gn::kQ6_K;
        case quant::Type::Q8_0: return gn::kQ8_0;
        default: return gn::kF16;
    }
}

template <int MT, int NW, bool Q>
void launch(gn::Args a, const Plan& p, const Mats& mats, const NarrowScratch& s, cudaStream_t stream) {
    if (p.total > s.n_counters)
        fail(MINFER_ERR_INTERNAL, "narrow GEMM: %d tiles exceed the %lld counters", p.total, static_cast<long long>(s.n_counters));
    if (int64_t{2} * p.grid * gn::acc_floats<MT, NW>() > s.ws_floats)
        fail(MINFER_ERR_INTERNAL, "narrow GEMM: %d CTAs exceed the workspace", p.grid);
    gn::Seg* seg[3] = {&a.s0, &a.s1, &a.s2};
    for (int i = 0; i < mats.nseg; ++i) {
        gn::Seg& sg = *seg[i];
        sg.y = mats.y[i];
        sg.n = static_cast<int>(mats.rows[i]);
        if constexpr (Q) {
            sg.q = static_cast<const uint8_t*>(mats.q[i]);
            sg.fmt = fmt_of(mats.types[i]);
            sg.row_bytes = static_cast<int64_t>(quant::row_bytes(mats.types[i], a.k));
            sg.bytes = sg.row_bytes * mats.rows[i];
        } else {
            sg.w = mats.w[i];
        }
    }
    a.tiles0 = p.tiles[0];
    a.tiles01 = p.tiles[0] + p.tiles[1];
    a.k_tiles = p.k_tiles;
    a.units = static_cast<int>(p.units);
    a.per_cta = p.per_cta;
    check(launch_pdl(gn::gemm_narrow_kernel<MT, NW, Q>, dim3(static_cast<unsigned>(p.grid)), dim3(gn::kThreads),
                     gn::smem_bytes<MT, NW, Q>(), stream, a),
          "narrow GEMM");
}

template <int MT, bool Q>
void launch_mt(const gn::Args& a, const Mats& mats, const NarrowScratch& s, cudaStream_t stream) {
    const int sms = sm_count();
    const int nseg = mats.nseg;
    const int64_t* rows = mats.rows;
    const Plan wide = plan<4>(nseg, rows, a.k, sms * occupancy<MT, 4, Q>());
    // 128 weight rows per CTA halve the input's re-reads and the ldmatrix work per weight byte; 64 halve a
    // piece's workspace slot, which pays where CTAs cover less than a tile (many pieces per tile).
    const bool use_wide = MINFER_GN_NW == 4 || (MINFER_GN_NW == 0 && wide.per_cta >= wide.k_tiles);
    if (use_wide) launch<MT, 4, Q>(a, wide, mats, s, stream);
    else launch<MT, 2, Q>(a, plan<2>(nseg, rows, a.k, sms * occupancy<MT, 2, Q>()), mats, s, stream);
}

// Checks the shapes, then launches the instantiation for m tokens.
template <bool Q>
void run(const __half* x, int m, int64_t k, const Mats& mats, bool accumulate, const NarrowScratch& scratch, cudaStream_t stream) {
    const int nseg = mats.nseg;
    if (m < 1 || m > kNarrowMaxTokens || nseg < 1 || nseg > gn::kMaxSegs || k < 8 || k % 8 != 0 || k > INT_MAX / 2)
        fail(MINFER_ERR_INTERNAL, "narrow GEMM: m = %d, %d matrices, k = %lld unsupported", m, nseg, static_cast<long long>(k));
    int64_t units = 0;
    for (int i = 0; i < nseg; ++i) {
        const int64_t rows = mats.rows[i];
        const uintptr_t addr = Q ? reinterpret_cast<uintptr_t>(mats.q[i]) : reinterpret_cast<uintptr_t>(mats.w[i]);
        if (rows < 1 || rows > INT_MAX / 2 || addr % 16 != 0)
            fail(MINFER_ERR_INTERNAL, "narrow GEMM: matrix %d (%lld rows) unsupported or misaligned", i, static_cast<long long>(rows));
        if (Q && !gemm_narrow_quant_supports(mats.types[i], k))
            fail(MINFER_ERR_INTERNAL, "narrow GEMM: matrix %d: type %d at width %lld unsupported", i, static_cast<int>(mats.types[i]),
                 static_cast<long long>(k));
        units += (rows + gn::tile_rows<2>() - 1) / gn::tile_rows<2>() * ((k + gn::kBK - 1) / gn::kBK);
    }
    if (units > INT_MAX || reinterpret_cast<uintptr_t>(x) % 16 != 0)
        fail(MINFER_ERR_INTERNAL, "narrow GEMM: %lld work units or a misaligned input", static_cast<long long>(units));
    gn::Args a;
    a.x = x;
    a.m = m;
    a.k = static_cast<int>(k);
    a.accumulate = accumulate;
    a.ws = scratch.ws;
    a.counters = scratch.counters;
    switch ((m + 15) / 16) {
        case 1: launch_mt<1, Q>(a, mats, scratch, stream); break;
        case 2: launch_mt<2, Q>(a, mats, scratch, stream); break;
        case 3: launch_mt<3, Q>(a, mats, scratch, stream); break;
        default: launch_mt<4, Q>(a, mats, scratch, stream); break;
    }
}

}  // namespace

int64_t gemm_narrow_ws_floats() {
    return std::max({ws_floats_mt<1>(), ws_floats_mt<2>(), ws_floats_mt<3>(), ws_floats_mt<4>()});
}

int64_t gemm_narrow_counters(int64_t rows) {
    return rows / gn::tile_rows<2>() + gn::kMaxSegs;  // the most tiles `rows` rows in up to three matrices make
}

void gemm_narrow(const __half* x, int m, int64_t k, int nseg, const __half* const* w, const int64_t* rows, float* const* y,
                 bool accumulate, const NarrowScratch& scratch, cudaStream_t stream) {
    run<false>(x, m, k, Mats{nseg, w, nullptr, nullptr, rows, y}, accumulate, scratch, stream);
}

bool gemm_narrow_quant_supports(quant::Type t, int64_t k) {
    // K-quant k-tiles are quarters of one 256-weight block; a q8_0 k-tile is two blocks.
    return ((t == quant::Type::Q4_K || t == quant::Type::Q6_K) && k % 256 == 0) || (t == quant::Type::Q8_0 && k % 64 == 0);
}

void gemm_narrow_quant(const __half* x, int m, int64_t k, int nseg, const quant::Type* types, const void* const* w, const int64_t* rows,
                       float* const* y, bool accumulate, const NarrowScratch& scratch, cudaStream_t stream) {
    run<true>(x, m, k, Mats{nseg, nullptr, types, w, rows, y}, accumulate, scratch, stream);
}

}  // namespace minfer::cuda
