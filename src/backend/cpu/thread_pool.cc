// ThreadPool (see thread_pool.h).
#include "backend/cpu/thread_pool.h"

namespace pagedkv::backend::cpu {

ThreadPool::ThreadPool(int num_threads) : num_threads_(num_threads < 1 ? 1 : num_threads) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> l(mu_);
    stop_ = true;
  }
  cv_work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::pair<int64_t, int64_t> chunk;
    const std::function<void(int64_t, int64_t)>* job;
    {
      std::unique_lock<std::mutex> l(mu_);
      cv_work_.wait(l, [&] { return stop_ || generation_ != seen; });
      if (stop_) return;
      seen = generation_;
      chunk = chunks_[index];
      job = job_;
    }
    if (chunk.first < chunk.second) (*job)(chunk.first, chunk.second);
    {
      std::lock_guard<std::mutex> l(mu_);
      if (--pending_ == 0) cv_done_.notify_one();
    }
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  int64_t units = (n + grain - 1) / grain;
  if (num_threads_ == 1 || units < 2) {
    fn(0, n);
    return;
  }
  std::lock_guard<std::mutex> call(call_mu_);
  int t = num_threads_;
  std::vector<std::pair<int64_t, int64_t>> chunks(t);
  for (int i = 0; i < t; ++i) {
    int64_t b = units * i / t * grain, e = units * (i + 1) / t * grain;
    chunks[i] = {b < n ? b : n, e < n ? e : n};
  }
  {
    std::lock_guard<std::mutex> l(mu_);
    chunks_ = chunks;
    job_ = &fn;
    pending_ = t - 1;
    ++generation_;
  }
  cv_work_.notify_all();
  if (chunks[0].first < chunks[0].second) fn(chunks[0].first, chunks[0].second);
  std::unique_lock<std::mutex> l(mu_);
  cv_done_.wait(l, [&] { return pending_ == 0; });
}

}  // namespace pagedkv::backend::cpu
