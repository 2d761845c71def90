// ThreadPool (see thread_pool.h).
#include "backend/cpu/thread_pool.h"

#include <chrono>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define PKV_CPU_RELAX() _mm_pause()
#else
#define PKV_CPU_RELAX() std::this_thread::yield()
#endif

namespace pagedkv::backend::cpu {
namespace {

// How long an idle thread polls before it sleeps: a decode step's parallel regions
// follow each other within microseconds; idle periods longer than this sleep.
constexpr int64_t kSpinMicros = 100;

// Spins until pred() or kSpinMicros elapse; true when pred() became true.
template <typename Pred>
bool spin_until(Pred pred) {
  auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      PKV_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(kSpinMicros))
      return pred();
  }
}

// Set while this thread runs a region's chunk: a parallel_for issued from inside
// one (the region lock is held) runs inline instead of deadlocking.
thread_local bool t_in_region = false;

struct RegionFlag {
  RegionFlag() { t_in_region = true; }
  ~RegionFlag() { t_in_region = false; }
};

}  // namespace

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_job(int index) {
  RegionFlag in_region;
  if (dynamic_) {
    for (;;) {
      int64_t b = next_.fetch_add(grain_, std::memory_order_relaxed);
      if (b >= n_) break;
      int64_t e = b + grain_ < n_ ? b + grain_ : n_;
      (*job_)(b, e);
    }
    return;
  }
  const int64_t units = (n_ + grain_ - 1) / grain_;
  const int t = num_threads_;
  int64_t b = units * index / t * grain_, e = units * (index + 1) / t * grain_;
  if (b > n_) b = n_;
  if (e > n_) e = n_;
  if (b < e) (*job_)(b, e);
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    if (!spin_until([&] { return generation_.load(std::memory_order_acquire) != seen; })) {
      generation_.wait(seen, std::memory_order_acquire);
      if (generation_.load(std::memory_order_acquire) == seen) continue;
    }
    seen = generation_.load(std::memory_order_acquire);
    if (stop_.load()) return;
    run_job(index);
    if (pending_.fetch_sub(1, std::memory_order_acq_rel) == 1) pending_.notify_one();
  }
}

void ThreadPool::dispatch_and_wait() {
  pending_.store(num_threads_ - 1, std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  run_job(0);
  if (!spin_until([&] { return pending_.load(std::memory_order_acquire) == 0; })) {
    for (int p; (p = pending_.load(std::memory_order_acquire)) != 0;) pending_.wait(p);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t units = (n + grain - 1) / grain;
  if (num_threads_ == 1 || units < 2 || t_in_region) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  job_ = &fn;
  n_ = n;
  grain_ = grain;
  dynamic_ = false;
  dispatch_and_wait();
}

void ThreadPool::parallel_dynamic(int64_t n, int64_t grain,
                                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || n <= grain || t_in_region) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  job_ = &fn;
  n_ = n;
  grain_ = grain;
  dynamic_ = true;
  next_.store(0, std::memory_order_relaxed);
  dispatch_and_wait();
}

}  // namespace pagedkv::backend::cpu
