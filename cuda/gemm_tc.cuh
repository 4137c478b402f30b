// The prefill GEMM of our own: C[m][n] (+)= A[m][k] B[n][k]^T with A the f16 activations (m tokens) and
// B the weights, f16 (gemm_f16: the two-pass path's scratch, the f16 cache where cuBLAS is not used) or
// quantized as stored (gemm_fused: the fused path, no copy of the weights). The device code only, so
// that tests/test_gemm_tc_emu.cpp runs it on the CPU through tests/emu; cuda/gemm.cu launches it.
//
// A CTA owns a tile of BM (128 or 256) tokens by kBN = 128 weight rows, with BM / 16 warps; K advances in
// k-tiles of 64 through kS cp.async stages into 128-byte swizzled shared rows. On sm_90a each warpgroup
// (4 warps) multiplies 64 of the tokens by the 128 rows with wgmma m64n128k16 from shared-memory
// descriptors; elsewhere (and in tests/emu) each warp takes 64 tokens x 32 rows as 4 x 4 mma.sync m16n8k16
// tiles, fragments by ldmatrix. f16 operands, f32 accumulators either way.
// The CTAs of one weight panel are adjacent in the grid (token tiles first), so a panel is read from
// memory about once and from L2 by the rest.
//
// Quantized B (the formats of the narrow GEMM, cuda/gemm_narrow.cuh: q4_K, q6_K, q8_0) travels through
// the stages as the raw bytes gn::raw_chunk names, raw_ld<F>() per row. Each iteration dequantizes the next
// k-tile's raw bytes into one of two f16 tiles while the MMAs read the other, so the ALU work of the
// dequantization and the tensor work of the MMAs interleave across warps under one barrier per k-tile.
// The dequantized values are the f16 cache's bits (the CPU's f32 dequantization rounded to f16), so the
// fused path gives the two-pass path's result bit for bit: both run this kernel, the same MMAs in the
// same order on the same f16 tile. Other quantized types (kGen) are dequantized from global memory by
// a decoder the launcher supplies (dequant.cuh's deq8), with the same f16 tile and the same bits.
//
// Why this kernel: its WMMA predecessor (64 x 64 tiles, 2 stages, K-steps of 32) ran at about 100
// TFLOP/s and re-dequantized every weight panel once per 64 tokens; this one runs the fused 2,048-token
// prefill 3x as fast (docs/perf.md).
#pragma once

#include <cstdint>

#include "cuda/matvec_ptx.cuh"  // first: CUDA (or, in tests/emu, its stand-ins)
#include "cuda/block_bits.cuh"
#include "cuda/gemm_narrow.cuh"  // gn::raw_chunk and the raw formats
#include "cuda/wgmma.cuh"

namespace minfer::cuda::gt {

constexpr int kBN = 128, kBK = 64;  // weight rows, k per CTA tile (tokens: the template's BM)
constexpr int kWM = 64, kWN = 32;   // per warp: BM / 64 warps along the tokens, 4 along the rows
constexpr int kMT = kWM / 16, kNT = kWN / 8;
// Shared f16 tiles: rows of the k-tile's 64 elements (128 bytes), the 16-byte chunk c of row r at chunk
// c ^ (r % 8) (the 128-byte swizzle of the Hopper tensor-core descriptors; ldmatrix is conflict-free on
// it too), tiles 1024-byte aligned.
constexpr int kRowBytes = kBK * 2;
static_assert(kRowBytes == 128, "rows of the 128-byte swizzle");
__host__ __device__ constexpr uint32_t sw(int r, int c) { return wg::sw128(r, c); }
static_assert(kBK == gn::kBK, "the raw chunks of gn::raw_chunk are 64-weight k-tiles");
template <int BM>
constexpr int threads() {
    static_assert(BM == 128 || BM == 256, "token tiles of 128 or 256");
    return 32 * (BM / kWM) * (kBN / kWN);
}

// B formats: gn's f16 and raw formats, and kGen (a decoder from global memory).
constexpr int kF16 = gn::kF16, kGen = 16;

#ifndef MINFER_GT_STAGES
#define MINFER_GT_STAGES 3
#endif
#ifndef MINFER_GT_STAGES_Q
#define MINFER_GT_STAGES_Q 3
#endif
// f16 B waits for k-tile j at iteration j (kS - 1 tiles in flight); dequantized B waits for j + 1 (it
// is dequantized one iteration ahead), so it takes at least three stages to have one in flight.
template <int F>
constexpr int stages() {
    return F == kF16 ? MINFER_GT_STAGES : MINFER_GT_STAGES_Q;
}
static_assert(MINFER_GT_STAGES >= 2 && MINFER_GT_STAGES_Q >= 3, "stages");
// Bytes of one row's raw k-tile in shared memory: gn::raw_chunk's offsets (q4_K 3 chunks, q8_0 5, q6_K 10).
template <int F>
constexpr int raw_ld() {
    return F == gn::kQ4_K ? 48 : F == gn::kQ8_0 ? 80 : F == gn::kQ6_K ? 160 : 0;
}
constexpr int kBTile = kBN * kRowBytes;  // one f16 tile of B
template <int F, int BM>
constexpr int stage_bytes() {
    return BM * kRowBytes + (F == kF16 ? kBTile : kBN * raw_ld<F>());
}
static_assert(kBN * raw_ld<gn::kQ4_K>() % 1024 == 0 && kBN * raw_ld<gn::kQ8_0>() % 1024 == 0 && kBN * raw_ld<gn::kQ6_K>() % 1024 == 0,
              "stages keep tiles 1024-byte aligned");
// Dynamic shared memory: the stages, then (dequantizing formats) the two f16 tiles of B, and room to
// align the start to 1024 bytes.
template <int F, int BM>
constexpr int smem_bytes() {
    return stages<F>() * stage_bytes<F, BM>() + (F == kF16 ? 0 : 2 * kBTile) + 1024;
}

struct Args {
    const __half* a = nullptr;  // [m][k], rows 16-byte aligned (k % 8 == 0)
    const __half* b = nullptr;  // kF16: [n][k]
    const uint8_t* q = nullptr; // quantized: n rows of row_bytes, `bytes` in all (nothing past them is read)
    int64_t row_bytes = 0, bytes = 0;
    float* c = nullptr;  // [m][n]
    int m = 0, n = 0, k = 0;
    int m_tiles = 0;  // ceil(m / BM); the grid is m_tiles x ceil(n / kBN), token tiles first
    bool accumulate = false;
};

// A decoder for kGen: unused by the other formats.
struct NoGen {
    __device__ void operator()(const uint8_t*, int, float*) const {}
};

// The float of an integer 0 <= v < 2^23, exactly, by the magic number (one PRMT and one FADD where an
// I2F runs at a quarter of the FP32 rate): byte i of w.
__device__ __forceinline__ float byte_float(uint32_t w, int i) {
    return __int_as_float(static_cast<int>(__byte_perm(w, 0x4B000000u, 0x7440u + static_cast<uint32_t>(i)))) - 8388608.0f;
}
// Columns 16 qq .. 16 qq + 15 of row r of a k-tile (k0, a multiple of 64) from the row's raw bytes at
// offset R of mv_smem (as gn::raw_chunk placed them; `row` is the row's global address, for the offsets of the 2-byte-aligned
// formats), as the CPU's f32 dequantization (quant.cpp, and deq8 in dequant.cuh) computes them, rounded
// to f16: out[i] holds columns 2i and 2i + 1 of the 16.
//  q4_K: w = d sc q - dmin m: d sc and dmin m are exact f32 products (11 x 6 bits), and so is d sc q (21
//    bits), so the CPU's product-then-difference rounds once, as one fused multiply-add does.
//  q6_K: w = (d sc) (q - 32); q8_0: w = q d: exact products of small integers and an f16, one rounding.
template <int F>
__device__ __forceinline__ void dequant_raw(uint32_t R, uintptr_t row, int k0, int qq, uint32_t (&out)[8]) {
    const int c = (k0 >> 6) & 3, hh = qq >> 1, l0 = 16 * (qq & 1);  // c: the k-tile's quarter of a super-block
    if constexpr (F == gn::kQ4_K) {
        // sub-block 2c + hh: the low (hh = 0) or high nibbles of code bytes 32 (c & 1)... at R + 16
        const uint4 h = mv::ld128(R);
        uint32_t sc, mn;
        mv::k4_scales(h, c, sc, mn);  // byte 2 (c & 1) + hh: sub-block 2c + hh
        const int sh = 8 * (2 * (c & 1) + hh);
        const float ds = __fmul_rn(mv::f16_lo(h.x), static_cast<float>((sc >> sh) & 0xFFu));
        const float ndm = -__fmul_rn(mv::f16_hi(h.x), static_cast<float>((mn >> sh) & 0xFFu));
        const uint4 q4 = mv::ld128(R + 16 + l0);
        const uint32_t q[4] = {q4.x, q4.y, q4.z, q4.w};
        #pragma unroll
        for (int w = 0; w < 4; ++w) {
            const uint32_t v = (q[w] >> (4 * hh)) & 0x0F0F0F0Fu;
            #pragma unroll
            for (int j = 0; j < 2; ++j)
                out[2 * w + j] = mv::pack_f16x2(__fmaf_rn(ds, byte_float(v, 2 * j), ndm), __fmaf_rn(ds, byte_float(v, 2 * j + 1), ndm));
        }
    } else if constexpr (F == gn::kQ6_K) {
        // Weights 64c + 32hh + l: code field k = 2 (c & 1) + hh of half hs = c >> 1: low bits in
        // ql[64 hs + 32 hh + l] (low nibble for c even, high for odd), high bits in qh[32 hs + l] at 2k,
        // scale sc[4c + 2hh + l / 16].
        const uintptr_t b = row + uintptr_t(k0 >> 8) * 210, hs = (k0 >> 7) & 1;
        const int o0 = static_cast<int>((b + 64 * hs) & 15), o1 = 80 + static_cast<int>((b + 128 + 32 * hs) & 15);
        const int o2 = 128 + static_cast<int>((b + 192) & 15);
        const float ds = __fmul_rn(mv::ld_f16(R + o2 + 16), static_cast<float>(static_cast<int8_t>(mv::mv_smem[R + o2 + 4 * c + 2 * hh + (qq & 1)])));
        uint32_t ql[4], qh[4];
        mv::ld_words<4>(R + o0 + 32 * hh + l0, ql);  // reads a word past: inside the row's raw bytes
        mv::ld_words<4>(R + o1 + l0, qh);
        const int kk = 2 * (c & 1) + hh;
        #pragma unroll
        for (int w = 0; w < 4; ++w) {
            const uint32_t v = ((ql[w] >> (4 * (c & 1))) & 0x0F0F0F0Fu) | (((qh[w] >> (2 * kk)) & 0x03030303u) << 4);
            #pragma unroll
            for (int j = 0; j < 2; ++j)
                out[2 * w + j] = mv::pack_f16x2(__fmul_rn(ds, byte_float(v, 2 * j) - 32.0f), __fmul_rn(ds, byte_float(v, 2 * j + 1) - 32.0f));
        }
    } else if constexpr (F == gn::kQ8_0) {
        const int o = static_cast<int>((row + uintptr_t(k0 >> 5) * 34) & 15) + 34 * hh;  // block hh of the k-tile
        const float d = mv::ld_f16(R + o);
        uint32_t q[4];
        mv::ld_words<4>(R + o + 2 + l0, q);  // reads a word past: inside the shared memory (a raw row or an f16 tile)
        #pragma unroll
        for (int w = 0; w < 4; ++w) {
            const uint32_t v = q[w] ^ 0x80808080u;  // code + 128
            #pragma unroll
            for (int j = 0; j < 2; ++j)
                out[2 * w + j] = mv::pack_f16x2(__fmul_rn(byte_float(v, 2 * j) - 128.0f, d), __fmul_rn(byte_float(v, 2 * j + 1) - 128.0f, d));
        }
    }
}

// ---- Hopper warpgroup MMA (sm_90a) ----------------------------------------------------------------------
// Built where nvcc compiles for sm_90a (__CUDA_ARCH_FEAT_SM90_ALL: meson's cuda-arch 90); -DMINFER_GT_WGMMA=0
// keeps mma.sync there too (the A/B knob). Elsewhere, and in tests/emu, mma.sync.
#ifndef MINFER_GT_WGMMA
#define MINFER_GT_WGMMA 1
#endif
#if MINFER_GT_WGMMA && MINFER_WGMMA_BUILT
#define MINFER_GT_USE_WGMMA 1
#else
#define MINFER_GT_USE_WGMMA 0
#endif

template <int F, int BM, class Gen = NoGen>
__global__ __launch_bounds__(threads<BM>(), BM == 128 ? 2 : 1) void gemm_tc_kernel(const Args p, const Gen gen) {
    constexpr int kThreads = threads<BM>(), kS = stages<F>(), kStage = stage_bytes<F, BM>(), kRawLd = raw_ld<F>();
    constexpr bool kDeq = F != kF16;
    const int tid = static_cast<int>(threadIdx.x), warp = tid >> 5, lane = tid & 31, g = lane >> 2, t = lane & 3;
    const int tile = static_cast<int>(blockIdx.x), m0 = (tile % p.m_tiles) * BM, n0 = (tile / p.m_tiles) * kBN;
    const int nk = (p.k + kBK - 1) / kBK;

    // Shared addresses (the tiles from a 1024-byte-aligned start) and the generic pointer to it.
    const uint32_t s0 = static_cast<uint32_t>(__cvta_generic_to_shared(mv::mv_smem));
    const uint32_t sbase = (s0 + 1023u) & ~1023u;
    uint8_t* const sptr = mv::mv_smem + (sbase - s0);
    auto a_st = [&](int s) { return static_cast<uint32_t>(s * kStage); };  // offsets from sbase
    auto b_st = [&](int s) { return a_st(s) + static_cast<uint32_t>(BM * kRowBytes); };
    auto bf = [&](int i) { return static_cast<uint32_t>(kS * kStage + i * kBTile); };

    // k-tile j into stage s: A and f16 B as 16-byte chunks (rows past m or n, columns past k zero-filled),
    // raw B as gn::raw_chunk's chunks (rows past n and bytes past the matrix zero-filled).
    auto load = [&](int j, int s) {
        const int k0 = j * kBK;
        for (int i = tid; i < BM * 8; i += kThreads) {
            const int r = i >> 3, c = i & 7, gk = k0 + 8 * c;
            const bool ok = m0 + r < p.m && gk < p.k;
            mv::cp_async16<0>(sbase + a_st(s) + sw(r, c), ok ? p.a + int64_t{m0 + r} * p.k + gk : p.a, ok ? 16 : 0);
        }
        if constexpr (F == kF16) {
            for (int i = tid; i < kBN * 8; i += kThreads) {
                const int r = i >> 3, c = i & 7, gk = k0 + 8 * c;
                const bool ok = n0 + r < p.n && gk < p.k;
                mv::cp_async16<0>(sbase + b_st(s) + sw(r, c), ok ? p.b + int64_t{n0 + r} * p.k + gk : p.b, ok ? 16 : 0);
            }
        } else if constexpr (F != kGen) {
            constexpr int nch = gn::raw_chunks(F);
            const uintptr_t base = reinterpret_cast<uintptr_t>(p.q), end = base + static_cast<uintptr_t>(p.bytes);
            for (int i = tid; i < kBN * nch; i += kThreads) {
                const int r = i / nch, j2 = i - r * nch;
                int dst = 0;
                const uintptr_t src = gn::raw_chunk(F, base + static_cast<uintptr_t>(int64_t{n0 + r} * p.row_bytes), k0, j2, dst);
                const int len = n0 + r >= p.n || src >= end ? 0 : end - src >= 16 ? 16 : static_cast<int>(end - src);
                mv::cp_async16<0>(sbase + b_st(s) + static_cast<uint32_t>(r * kRawLd + dst), len > 0 ? reinterpret_cast<const void*>(src) : p.q,
                                  len);
            }
        }
    };
    // Dequantizes k-tile j (its raw bytes in stage s; kGen: from global memory) into f16 tile `buf`, in
    // pieces of 16 columns (two chunks): piece u is row u / 4, columns 16 (u % 4) .. +15.
    auto dequant = [&](int j, int s, int buf) {
        const int k0 = j * kBK;
        #pragma unroll
        for (int u = tid; u < kBN * 4; u += kThreads) {
            const int r = u >> 2, qq = u & 3;
            uint32_t out[8];
            if constexpr (F == kGen) {
                const uint8_t* row = p.q + int64_t{n0 + r} * p.row_bytes;
                #pragma unroll
                for (int i = 0; i < 2; ++i) {
                    const int e0 = k0 + 16 * qq + 8 * i;
                    float y[8] = {0, 0, 0, 0, 0, 0, 0, 0};
                    if (n0 + r < p.n && e0 < p.k) gen(row, e0, y);
                    #pragma unroll
                    for (int e = 0; e < 4; ++e) out[4 * i + e] = mv::pack_f16x2(y[2 * e], y[2 * e + 1]);
                }
            } else {
                const uint32_t R = (sbase - s0) + b_st(s) + static_cast<uint32_t>(r * kRawLd);  // offset in mv_smem
                dequant_raw<F>(R, reinterpret_cast<uintptr_t>(p.q) + static_cast<uintptr_t>(int64_t{n0 + r} * p.row_bytes), k0, qq, out);
            }
            uint8_t* tilep = sptr + bf(buf);
            *reinterpret_cast<uint4*>(tilep + sw(r, 2 * qq)) = make_uint4(out[0], out[1], out[2], out[3]);
            *reinterpret_cast<uint4*>(tilep + sw(r, 2 * qq + 1)) = make_uint4(out[4], out[5], out[6], out[7]);
        }
    };

    for (int s = 0; s < kS - 1; ++s) {
        if (s < nk) load(s, s);
        mv::cp_async_commit();
    }
    if constexpr (kDeq) {
        mv::cp_async_wait<kS - 2>();
        __syncthreads();  // k-tile 0's raw bytes landed for every thread
        dequant(0, 0, 0);
    }

    // 64 accumulators a thread. mma.sync: warp (wm, wn) of the BM / 64 x 4 grid owns tokens 64 wm.., weight
    // rows 32 wn..; acc[(4 mt + nt) * 4 + e] is token 64 wm + 16 mt + g + 8 (e >> 1), row 32 wn + 8 nt + 2t +
    // (e & 1). wgmma: warpgroup wg = warp / 4 owns tokens 64 wg.. and all 128 rows; acc[4i + e] is token 64 wg
    // + 16 (warp % 4) + g + 8 (e >> 1), row 8i + 2t + (e & 1).
    float acc[64];
    #pragma unroll
    for (int i = 0; i < 64; ++i) acc[i] = 0.0f;

    for (int j = 0; j < nk; ++j) {
        // f16: k-tile j landed; dequantizing: j + 1 landed too, and f16 tile j % 2 is whole. Stage (j - 1) % kS
        // and f16 tile (j + 1) % 2 were last read before this barrier.
        if constexpr (kDeq) mv::cp_async_wait<kS - 3>();
        else mv::cp_async_wait<kS - 2>();
#if MINFER_GT_USE_WGMMA
        // This thread's copies and dequantized stores, to the tensor cores' reads. A missing fence (or
        // wg::fence below) would show only as an occasional race that no test catches reliably: these
        // orderings are kept by review.
        wg::fence_async_smem();
#endif
        __syncthreads();
        if (j + kS - 1 < nk) load(j + kS - 1, (j + kS - 1) % kS);
        mv::cp_async_commit();
        const uint32_t as = a_st(j % kS), bs = kDeq ? bf(j & 1) : b_st(j % kS);
#if MINFER_GT_USE_WGMMA
        // The group's 64 token rows against the 128 weight rows, k in four steps of 16 (32 bytes into the
        // swizzled rows), issued before the next tile's dequantization, which overlaps them.
        wg::fence();
        #pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk)
            wg::mma_ss<kBN>(acc, wg::desc_k(sbase + as + static_cast<uint32_t>((warp >> 2) * 64 * kRowBytes + 32 * kk)),
                            wg::desc_k(sbase + bs + static_cast<uint32_t>(32 * kk)), true);
        wg::commit();
        if constexpr (kDeq)
            if (j + 1 < nk) dequant(j + 1, (j + 1) % kS, (j + 1) & 1);
        wg::wait<0>();
        wg::fence_regs(acc);  // the epilogue's reads stay after the last wait
#else
        if constexpr (kDeq)
            if (j + 1 < nk) dequant(j + 1, (j + 1) % kS, (j + 1) & 1);
        const int wm = warp / (kBN / kWN), wn = warp % (kBN / kWN);
        #pragma unroll
        for (int kk = 0; kk < kBK / 16; ++kk) {
            uint32_t af[kMT][4];
            #pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
                // matrices: token rows 0-7 and 8-15 of the m16 tile at k kk*16, then at kk*16 + 8
                const int row = wm * kWM + 16 * mt + (lane & 7) + 8 * ((lane >> 3) & 1), c = 2 * kk + (lane >> 4);
                mv::ldsm_x4(af[mt], sbase + as + sw(row, c));
            }
            #pragma unroll
            for (int np = 0; np < kNT; np += 2) {
                // matrices: weight rows np*8 .. +7 at k kk*16 and +8, then rows np*8 + 8 .. +15 likewise
                const int row = wn * kWN + np * 8 + (lane & 7) + 8 * (lane >> 4), c = 2 * kk + ((lane >> 3) & 1);
                uint32_t b[4];
                mv::ldsm_x4(b, sbase + bs + sw(row, c));
                #pragma unroll
                for (int mt = 0; mt < kMT; ++mt) {
                    float(&d0)[4] = *reinterpret_cast<float(*)[4]>(&acc[(mt * kNT + np) * 4]);
                    float(&d1)[4] = *reinterpret_cast<float(*)[4]>(&acc[(mt * kNT + np + 1) * 4]);
                    mv::mma(d0, af[mt][0], af[mt][1], af[mt][2], af[mt][3], make_uint2(b[0], b[1]));
                    mv::mma(d1, af[mt][0], af[mt][1], af[mt][2], af[mt][3], make_uint2(b[2], b[3]));
                }
            }
        }
#endif
    }
    mv::cp_async_wait<0>();

    const bool pairs = (p.n & 1) == 0 && reinterpret_cast<uintptr_t>(p.c) % 8 == 0;  // 8-byte aligned pairs: float2 stores
    #pragma unroll
    for (int f = 0; f < 64; f += 2) {
#if MINFER_GT_USE_WGMMA
        const int tok = m0 + 64 * (warp >> 2) + 16 * (warp & 3) + g + 8 * ((f >> 1) & 1), col = n0 + 8 * (f >> 2) + 2 * t;
#else
        const int wm = warp / (kBN / kWN), wn = warp % (kBN / kWN), mt = f / (4 * kNT), nt = (f / 4) % kNT;
        const int tok = m0 + wm * kWM + 16 * mt + g + 8 * ((f >> 1) & 1), col = n0 + wn * kWN + 8 * nt + 2 * t;
#endif
        if (tok >= p.m || col >= p.n) continue;
        float* c = p.c + int64_t{tok} * p.n + col;
        const float v0 = acc[f], v1 = acc[f + 1];
        if (pairs) {
            float2 o = p.accumulate ? *reinterpret_cast<const float2*>(c) : make_float2(0.0f, 0.0f);
            o.x = p.accumulate ? o.x + v0 : v0;
            o.y = p.accumulate ? o.y + v1 : v1;
            *reinterpret_cast<float2*>(c) = o;
        } else {
            c[0] = p.accumulate ? c[0] + v0 : v0;
            if (col + 1 < p.n) c[1] = p.accumulate ? c[1] + v1 : v1;
        }
    }
}

}  // namespace minfer::cuda::gt
