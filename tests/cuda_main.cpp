// Main of the CUDA tests: exits 77 (meson: skipped) with the reason when no GPU can run them, so the
// suite is reported as skipped on GPU-less machines instead of passing vacuously.
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "device/device.h"
#include "minfer.h"

int main(int argc, char** argv) {
    const minfer::device::Probe probe = minfer::device::probe_cuda();
    if (!probe.built || probe.n_devices == 0) {
        std::printf("SKIP: the CUDA tests need a GPU: %s\n", probe.message.c_str());
        return 77;
    }
    std::printf("CUDA tests on %s\n", probe.message.c_str());
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
