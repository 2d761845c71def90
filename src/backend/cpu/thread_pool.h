// A fixed-size thread pool for the CPU kernels. parallel_for splits a range of
// independent tasks (output column groups, attention (row, token, head) tasks,
// element-wise rows) over the caller plus N-1 workers and returns when all are
// done. The split is a fixed function of (n, grain, thread count), and kernels
// only ever split work whose results are independent of each other, so the thread
// count never changes a result — only the speed.
//
// Waking a sleeping thread costs tens of microseconds; a decode step issues a few
// hundred parallel regions. So workers spin briefly (kSpinMicros) on an atomic
// generation counter after each job before they sleep on it (std::atomic::wait),
// and the caller spins for the stragglers. On a machine shared with other work the
// spin is short enough not to matter; the CPU seconds it burns are counted by
// `pagedkv bench` like any other.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagedkv::backend::cpu {

class ThreadPool {
 public:
  explicit ThreadPool(int num_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); chunk i of t is
  // [units·i/t, units·(i+1)/t) in units of `grain` (the last may be short). Runs
  // inline when n is small, with one thread, or when called from inside a region.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // Calls fn(begin, end) on chunks of `grain` tasks handed out first come, first
  // served (for tasks of uneven cost whose results are independent: attention).
  void parallel_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);
  void run_job(int index);
  void dispatch_and_wait();

  int num_threads_;
  std::vector<std::thread> workers_;
  // Job description, written by the caller before it bumps generation_.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, grain_ = 1;
  bool dynamic_ = false;
  std::atomic<int64_t> next_{0};
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> pending_{0};
  std::atomic<bool> stop_{false};
  std::mutex call_mu_;  // one parallel region at a time
};

}  // namespace pagedkv::backend::cpu
