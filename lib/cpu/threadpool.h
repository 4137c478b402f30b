// A small fork-join pool: the calling thread and n-1 workers split `n_tasks` tasks with an atomic
// counter (dynamic scheduling, so uneven rows balance). One parallel_for at a time per pool; each
// context owns its pool, so contexts on different threads never share one. Waiting threads (workers
// between calls, the caller for the workers) spin for up to 500 microseconds, then sleep.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace minfer::cpu {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);  // n_threads >= 1, the caller included; throws std::system_error
                                         // when a thread cannot start (none is left running)
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // Runs fn(task, thread) for task in [0, n_tasks); thread in [0, size()). Returns when all are done.
    // An exception thrown by a task is rethrown here (the first one); the other tasks still finish.
    void parallel_for(int64_t n_tasks, const std::function<void(int64_t task, int thread)>& fn);

private:
    void worker(int index);
    void stop_workers();
    void run_tasks(int thread);

    int n_threads_;
    std::vector<std::thread> workers_;
    std::mutex mutex_;
    std::condition_variable start_cv_, done_cv_;
    std::atomic<uint64_t> generation_{0};  // advanced under mutex_, once per parallel_for
    std::atomic<bool> stop_{false};
    std::atomic<int> busy_workers_{0};     // workers still running the current call's tasks
    const std::function<void(int64_t, int)>* fn_ = nullptr;
    int64_t n_tasks_ = 0;
    std::atomic<int64_t> next_{0};
    std::exception_ptr error_;
};

// The number of threads to use for a `threads` option value (0 = one per physical core).
int resolve_threads(int64_t option);
// Physical cores among the CPUs this process may run on (Linux: sched_getaffinity and sysfs topology;
// elsewhere, or without topology, the hardware threads); at least 1. Read once.
int physical_cores();

}  // namespace minfer::cpu
