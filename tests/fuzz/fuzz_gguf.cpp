// libFuzzer target for the GGUF reader and the model validation above it. Any input must end in a
// minfer::Error or success; a crash, a sanitizer report, an uncaught exception of another type or a
// read outside the buffer (the buffer is an exact-size heap copy, so ASan sees it) is a bug.
#include <cstddef>
#include <cstdint>

#include "core/error.h"
#include "gguf/gguf.h"
#include "model/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
    try {
        auto file = minfer::gguf::File::parse(minfer::gguf::copy_bytes({data, size}));
        // Touch the first and last byte of every tensor: the reader promised they are in bounds.
        unsigned sum = 0;
        for (const auto& t : file->tensors()) sum += t.data[0] + t.data[t.n_bytes - 1];
        for (const auto& kv : file->kvs())
            for (auto s : kv.value.strings) sum += s.empty() ? 0u : static_cast<unsigned char>(s.back());
        auto config = minfer::model::read_config(*file);
        minfer::model::plan_tensors(*file, config);
        static volatile unsigned sink;
        sink = sum;
    } catch (const minfer::Error&) {
    }
    return 0;
}
