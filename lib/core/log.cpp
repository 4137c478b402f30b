#include "core/log.h"

#include <mutex>
#include <string>

#include "core/error.h"

namespace minfer {
namespace {

std::mutex g_mutex;
minfer_log_fn g_log_fn = nullptr;
void* g_log_user = nullptr;
minfer_progress_fn g_progress_fn = nullptr;
void* g_progress_user = nullptr;

}  // namespace

void set_log_callback(minfer_log_fn fn, void* user_data) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_log_fn = fn;
    g_log_user = user_data;
}

void set_progress_callback(minfer_progress_fn fn, void* user_data) {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_progress_fn = fn;
    g_progress_user = user_data;
}

void log_line(int max_level, minfer_log_level level, const char* fmt, ...) {
    if (static_cast<int>(level) > max_level) return;
    minfer_log_fn fn;
    void* user;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        fn = g_log_fn;
        user = g_log_user;
    }
    if (!fn) return;
    va_list ap;
    va_start(ap, fmt);
    std::string line = vstrprintf(fmt, ap);
    va_end(ap);
    fn(level, line.c_str(), user);
}

void report_progress(const char* stage, uint64_t done, uint64_t total) {
    minfer_progress_fn fn;
    void* user;
    {
        std::lock_guard<std::mutex> lock(g_mutex);
        fn = g_progress_fn;
        user = g_progress_user;
    }
    if (fn && fn(stage, done, total, user) != 0) fail(MINFER_ERR_CANCELLED, "%s cancelled by the progress callback", stage);
}

}  // namespace minfer
