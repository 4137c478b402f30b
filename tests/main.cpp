// Main of the unit tests. The models they open run on the CPU (the reference backend) unless a test
// asks for another device: the process default of `device` is set to cpu before any test runs. The CUDA
// backend has its own executable (cuda_main.cpp).
#define DOCTEST_CONFIG_IMPLEMENT
#include <doctest/doctest.h>

#include <cstdio>

#include "minfer.h"

int main(int argc, char** argv) {
    if (minfer_set_option(nullptr, "device", "cpu") != MINFER_OK) {
        std::fprintf(stderr, "cannot set device=cpu: %s\n", minfer_last_error());
        return 1;
    }
    doctest::Context ctx(argc, argv);
    return ctx.run();
}
