#include "cpu/threadpool.h"

#include <algorithm>

namespace minfer::cpu {

int resolve_threads(int64_t option) {
    if (option > 0) return static_cast<int>(option);
    return std::max(1u, std::thread::hardware_concurrency());
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    workers_.reserve(static_cast<size_t>(n_threads_ - 1));
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back(&ThreadPool::worker, this, i);
}

ThreadPool::~ThreadPool() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_ = true;
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
}

void ThreadPool::run_tasks(int thread) {
    for (;;) {
        const int64_t task = next_.fetch_add(1, std::memory_order_relaxed);
        if (task >= n_tasks_) break;
        try {
            (*fn_)(task, thread);
        } catch (...) {
            std::lock_guard<std::mutex> lock(mutex_);
            if (!error_) error_ = std::current_exception();
        }
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        {
            std::unique_lock<std::mutex> lock(mutex_);
            start_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
            if (stop_) return;
            seen = generation_;
        }
        run_tasks(index);
        {
            std::lock_guard<std::mutex> lock(mutex_);
            if (--busy_workers_ == 0) done_cv_.notify_one();
        }
    }
}

void ThreadPool::parallel_for(int64_t n_tasks, const std::function<void(int64_t, int)>& fn) {
    if (n_tasks <= 0) return;
    if (n_threads_ == 1 || n_tasks == 1) {
        for (int64_t t = 0; t < n_tasks; ++t) fn(t, 0);
        return;
    }
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = &fn;
        n_tasks_ = n_tasks;
        next_.store(0, std::memory_order_relaxed);
        error_ = nullptr;
        busy_workers_ = n_threads_ - 1;
        ++generation_;
    }
    start_cv_.notify_all();
    run_tasks(0);
    std::exception_ptr error;
    {
        std::unique_lock<std::mutex> lock(mutex_);
        done_cv_.wait(lock, [&] { return busy_workers_ == 0; });
        fn_ = nullptr;
        error = error_;
    }
    if (error) std::rethrow_exception(error);
}

}  // namespace minfer::cpu
