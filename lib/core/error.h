// Internal error type. Engine code throws minfer::Error; the C shims in lib/api catch it and turn it
// into a status plus the thread's last-error message. Nothing throws across the ABI.
#pragma once

#include <cstdarg>
#include <stdexcept>
#include <string>

#include "minfer.h"

namespace minfer {

class Error : public std::runtime_error {
public:
    Error(minfer_status status, std::string message) : std::runtime_error(std::move(message)), status_(status) {}
    minfer_status status() const noexcept { return status_; }

private:
    minfer_status status_;
};

// printf-style formatting into a std::string (g++ 12 has no <format>).
std::string strprintf(const char* fmt, ...) __attribute__((format(printf, 1, 2)));
std::string vstrprintf(const char* fmt, va_list ap);

[[noreturn]] void fail(minfer_status status, const char* fmt, ...) __attribute__((format(printf, 2, 3)));

// The exception being handled, as an Error: an Error as it is, std::bad_alloc as MINFER_ERR_OUT_OF_MEMORY
// ("out of host memory"), any other as MINFER_ERR_INTERNAL with its message. Call it only inside a catch
// block. The C shims (lib/api) report failures this way, and so do the places that must fail something
// (a batch's sequences, a poisoned model) whatever was thrown. Never throws: where even the message
// cannot be made, the answer is the out-of-memory one, made once beforehand.
Error current_error() noexcept;

}  // namespace minfer
