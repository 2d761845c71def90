// A tiny fixed-size thread pool for the CPU kernels. parallel_for splits a range
// of independent tasks (output rows/columns, attention (token, head) pairs) over
// the caller plus N-1 workers and returns when all are done. Kernels only ever
// split work whose results are independent of each other, so the thread count
// never changes a result — only the speed.
#pragma once

#include <condition_variable>
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
  // Calls fn(begin, end) on disjoint chunks covering [0, n); chunks are multiples
  // of `grain` (except the last). Runs inline when n is small or one thread.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable cv_work_, cv_done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  std::vector<std::pair<int64_t, int64_t>> chunks_;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stop_ = false;
  std::mutex call_mu_;  // one parallel_for at a time
};

}  // namespace pagedkv::backend::cpu
