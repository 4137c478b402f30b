// Process-wide logging. Silent until the host installs a callback with minfer_set_log_callback; the
// `log_level` option (process default or per model) chooses which levels reach it.
#pragma once

#include "minfer.h"

namespace minfer {

void set_log_callback(minfer_log_fn fn, void* user_data);
void set_progress_callback(minfer_progress_fn fn, void* user_data);

// Emits one line at `level` if `level <= max_level` (0 disables everything).
void log_line(int max_level, minfer_log_level level, const char* fmt, ...) __attribute__((format(printf, 3, 4)));

// Reports progress; throws Error(MINFER_ERR_CANCELLED) when the callback asks to stop.
void report_progress(const char* stage, uint64_t done, uint64_t total);

}  // namespace minfer
