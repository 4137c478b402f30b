#include "cpu/threadpool.h"

#include <algorithm>
#include <chrono>
#include <fstream>
#include <set>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#endif

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace minfer::cpu {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
    _mm_pause();
#endif
}

// How long a thread spins on a flag before it sleeps on a condition variable: a decode step calls
// parallel_for about ten times per layer, almost all under 10 microseconds apart, plus about two gaps
// of 100-300 microseconds per token (the step's end and start; measured on the 2-core dev machine,
// docs/perf.md), and a sleeping thread takes tens of microseconds or more to wake on a virtual
// machine. 500 covers every gap of a decode step (100 let the workers sleep twice a token); past it
// the thread sleeps and costs nothing.
constexpr auto kSpin = std::chrono::microseconds(500);

// Spins until ready() or kSpin elapsed; true when ready.
template <class F>
bool spin_until(F ready) {
    const auto until = std::chrono::steady_clock::now() + kSpin;
    for (;;) {
        for (int i = 0; i < 64; ++i) {
            if (ready()) return true;
            cpu_relax();
        }
        if (std::chrono::steady_clock::now() >= until) return ready();
    }
}

}  // namespace

int physical_cores() {
    static const int n = [] {
        const int logical = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
#if defined(__linux__)
        // The (package, core) pairs of the CPUs this process may run on: SMT siblings share a core and
        // would only split its load and store units between two threads streaming the same weights.
        cpu_set_t set;
        CPU_ZERO(&set);
        if (sched_getaffinity(0, sizeof set, &set) != 0) return logical;
        std::set<std::pair<int, int>> cores;
        for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
            if (!CPU_ISSET(cpu, &set)) continue;
            const std::string dir = "/sys/devices/system/cpu/cpu" + std::to_string(cpu) + "/topology/";
            std::ifstream pkg(dir + "physical_package_id"), core(dir + "core_id");
            int p = -1, c = -1;
            if (!(pkg >> p) || !(core >> c)) return std::min(logical, CPU_COUNT(&set));  // no topology: count CPUs
            cores.insert({p, c});
        }
        return cores.empty() ? logical : static_cast<int>(cores.size());
#else
        return logical;
#endif
    }();
    return n;
}

int resolve_threads(int64_t option) {
    if (option > 0) return static_cast<int>(option);
    return physical_cores();
}

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
    try {
        workers_.reserve(static_cast<size_t>(n_threads_ - 1));
        for (int i = 1; i < n_threads_; ++i) workers_.emplace_back(&ThreadPool::worker, this, i);
    } catch (...) {
        // A thread that cannot start: the ones that did are stopped and joined (a joinable std::thread
        // destroyed would terminate the process), and the caller gets the error.
        stop_workers();
        throw;
    }
}

ThreadPool::~ThreadPool() { stop_workers(); }

void ThreadPool::stop_workers() {
    {
        std::lock_guard<std::mutex> lock(mutex_);
        stop_.store(true, std::memory_order_release);
    }
    start_cv_.notify_all();
    for (auto& t : workers_) t.join();
    workers_.clear();
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

// A worker waits for a new generation: spinning first, then asleep. The generation is advanced under
// the mutex and the sleeper checks it under the mutex, so no wake-up is lost.
void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        auto ready = [&] { return stop_.load(std::memory_order_acquire) || generation_.load(std::memory_order_acquire) != seen; };
        if (!spin_until(ready)) {
            std::unique_lock<std::mutex> lock(mutex_);
            start_cv_.wait(lock, ready);
        }
        if (stop_.load(std::memory_order_acquire)) return;
        seen = generation_.load(std::memory_order_acquire);
        run_tasks(index);
        if (busy_workers_.fetch_sub(1, std::memory_order_acq_rel) == 1) {
            std::lock_guard<std::mutex> lock(mutex_);  // the caller may be checking the count to sleep
            done_cv_.notify_one();
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
        busy_workers_.store(n_threads_ - 1, std::memory_order_relaxed);
        generation_.fetch_add(1, std::memory_order_release);
    }
    start_cv_.notify_all();
    run_tasks(0);
    auto done = [&] { return busy_workers_.load(std::memory_order_acquire) == 0; };
    if (!spin_until(done)) {
        std::unique_lock<std::mutex> lock(mutex_);
        done_cv_.wait(lock, done);
    }
    std::exception_ptr error;
    {
        std::lock_guard<std::mutex> lock(mutex_);
        fn_ = nullptr;
        error = error_;
    }
    if (error) std::rethrow_exception(error);
}

}  // namespace minfer::cpu
