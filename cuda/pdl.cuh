// Programmatic dependent launch (sm_90) for the kernels of a decode step: a kernel launched with
// launch_pdl may have its CTAs scheduled while the kernel before it on the stream is still running, once
// every CTA of that kernel has called pdl_launch_dependents (or exited). It must call pdl_wait before it
// reads or writes memory that earlier work touches; what it does before (index math, loads of weights,
// which nothing writes) overlaps the previous kernel's tail and the launch latency. pdl_wait is a no-op
// in a kernel launched without the attribute, so every kernel here may call both unconditionally.
#pragma once

#include <cuda_runtime.h>

#include <utility>

#include "cuda/early_trigger.h"  // MINFER_EARLY_TRIGGER and its bits

namespace minfer::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// The early trigger (-DMINFER_EARLY_TRIGGER=MASK; cuda/early_trigger.h has the bits and the default): a
// kernel that calls pdl_enter<B>() with bit B set in the mask calls pdl_launch_dependents before its
// pdl_wait instead of after it, so its dependent may be scheduled while this kernel's own predecessor
// still runs (two kernels ahead instead of one) and do its work before the wait (weight loads, the
// decode attention's copies of earlier keys) under that predecessor. Safe only because every kernel that
// can follow one of these reads before its own pdl_wait nothing any kernel of the step writes (weights;
// positions, slots and page tables copied before the step's first kernel; earlier steps' keys), and its
// pdl_wait waits for this kernel's completion, which follows its predecessor's. A kernel after which
// something reads this step's writes before its wait (gather_rows before the pruned last layer's
// attention, cuda/forward.cu) keeps pdl_wait first.
// allowed: where the launch says whether its dependent may go early (the same for every thread).
template <int kBit>
__device__ __forceinline__ void pdl_enter(bool allowed = true) {
    if ((MINFER_EARLY_TRIGGER & kBit) != 0 && allowed) {
        pdl_launch_dependents();
        pdl_wait();
    } else {
        pdl_wait();
        pdl_launch_dependents();
    }
}

// Launches k<<<grid, block, smem, stream>>>(args...) as a programmatic dependent (see above); the
// launch's error, as cudaGetLastError would give it.
template <class... P, class... A>
cudaError_t launch_pdl(void (*k)(P...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, A&&... args) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[0].val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cudaLaunchKernelEx(&cfg, k, std::forward<A>(args)...);
}

}  // namespace minfer::cuda
