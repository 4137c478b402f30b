#include "core/error.h"

#include <cstdio>
#include <new>
#include <vector>

namespace minfer {

std::string vstrprintf(const char* fmt, va_list ap) {
    va_list copy;
    va_copy(copy, ap);
    char small[256];
    int n = std::vsnprintf(small, sizeof small, fmt, copy);
    va_end(copy);
    if (n < 0) return std::string(fmt);
    if (static_cast<size_t>(n) < sizeof small) return std::string(small, static_cast<size_t>(n));
    std::string out(static_cast<size_t>(n) + 1, '\0');
    std::vsnprintf(out.data(), out.size(), fmt, ap);
    out.resize(static_cast<size_t>(n));
    return out;
}

std::string strprintf(const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrprintf(fmt, ap);
    va_end(ap);
    return s;
}

void fail(minfer_status status, const char* fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    std::string s = vstrprintf(fmt, ap);
    va_end(ap);
    throw Error(status, std::move(s));
}

namespace {
// Made when the library loads, not at the first failure (which may be one of memory): copies cannot throw.
const Error out_of_memory(MINFER_ERR_OUT_OF_MEMORY, "out of host memory");
}  // namespace

Error current_error() noexcept {
    try {
        try {
            throw;
        } catch (const Error& e) {
            return e;
        } catch (const std::bad_alloc&) {
            return out_of_memory;
        } catch (const std::exception& e) {
            return Error(MINFER_ERR_INTERNAL, e.what());
        } catch (...) {
            return Error(MINFER_ERR_INTERNAL, "unknown exception");
        }
    } catch (...) {  // the message itself could not be made
        return out_of_memory;
    }
}

}  // namespace minfer
