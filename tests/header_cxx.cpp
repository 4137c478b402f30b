// Compiled as C++ with -Wall -Wextra -pedantic -Werror.
#include "minfer.h"

#include <cstdio>
#include <cstring>

int main() {
    if (std::strcmp(minfer_version(), MINFER_VERSION_STRING) != 0 || minfer_version_number() != MINFER_VERSION_NUMBER) {
        std::fprintf(stderr, "version mismatch: runtime %s, header %s\n", minfer_version(), MINFER_VERSION_STRING);
        return 1;
    }
    minfer_model* m = nullptr;
    if (minfer_open(nullptr, &m) != MINFER_ERR_INVALID_ARGUMENT || m != nullptr) return 1;
    std::printf("header_cxx: ok\n");
    return 0;
}
