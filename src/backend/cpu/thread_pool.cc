// ThreadPool (see thread_pool.h; the protocol and the wait policy are described in
// docs/backend.md, "The thread pool's wait policy").
//
// A region: the caller writes the job, resets next_, publishes the region id in
// open_ and bumps generation_ (waking sleeping workers). Every thread claims chunk
// ids from next_ until they run out. A worker counts itself in active_ BEFORE it
// reads open_, and the caller, after closing the region (open_ = 0), waits for
// active_ to reach 0: a worker that saw the region open is therefore counted
// before the caller's final check, so the job it reads stays valid while it runs,
// and a worker that arrives after the close sees 0 and touches nothing. All these
// accesses are sequentially consistent (each pair is a Dekker handshake).
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

// Polls pred() for up to `micros`; true when pred() became true.
template <typename Pred>
bool spin_until(int64_t micros, Pred pred) {
  if (pred()) return true;
  if (micros <= 0) return false;
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    for (int i = 0; i < 64; ++i) {
      if (pred()) return true;
      PKV_CPU_RELAX();
    }
    if (std::chrono::steady_clock::now() - start > std::chrono::microseconds(micros)) return pred();
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

ThreadPool::ThreadPool(int num_threads, int64_t spin_micros)
    : num_threads_(num_threads < 1 ? 1 : num_threads),
      spin_micros_(spin_micros < 0 ? kDefaultSpinMicros : spin_micros) {
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_chunks() {
  RegionFlag in_region;
  const int64_t units = (n_ + grain_ - 1) / grain_;
  for (;;) {
    const int64_t c = next_.fetch_add(1, std::memory_order_relaxed);
    if (c >= chunks_) return;
    int64_t b, e;
    if (dynamic_) {
      b = c * grain_;
      e = b + grain_;
    } else {
      b = units * c / chunks_ * grain_;
      e = units * (c + 1) / chunks_ * grain_;
    }
    if (e > n_) e = n_;
    if (b < e) (*job_)(b, e);
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    if (!spin_until(spin_micros_, [&] { return generation_.load() != seen; })) {
      sleeping_.fetch_add(1);
      generation_.wait(seen);  // returns once generation_ != seen
      sleeping_.fetch_sub(1);
    }
    seen = generation_.load();
    if (stop_.load()) return;
    active_.fetch_add(1);
    if (open_.load() != 0) run_chunks();
    if (active_.fetch_sub(1) == 1 && caller_waiting_.load()) active_.notify_one();
  }
}

void ThreadPool::run_region(int64_t n, int64_t grain, int64_t chunks, bool dynamic,
                            const std::function<void(int64_t, int64_t)>& fn) {
  std::lock_guard<std::mutex> call(call_mu_);
  job_ = &fn;
  n_ = n;
  grain_ = grain;
  chunks_ = chunks;
  dynamic_ = dynamic;
  next_.store(0, std::memory_order_relaxed);
  open_.store(++last_region_);
  generation_.fetch_add(1);
  if (sleeping_.load() > 0) generation_.notify_all();
  run_chunks();
  open_.store(0);
  // Every chunk is claimed; wait for the workers still inside the region.
  if (!spin_until(spin_micros_, [&] { return active_.load() == 0; })) {
    caller_waiting_.store(true);
    for (int a; (a = active_.load()) != 0;) active_.wait(a);
    caller_waiting_.store(false);
  }
}

void ThreadPool::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  const int64_t units = (n + grain - 1) / grain;
  if (num_threads_ == 1 || units < 2 || t_in_region) {
    fn(0, n);
    return;
  }
  run_region(n, grain, num_threads_, /*dynamic=*/false, fn);
}

void ThreadPool::parallel_dynamic(int64_t n, int64_t grain,
                                  const std::function<void(int64_t, int64_t)>& fn) {
  if (n <= 0) return;
  if (grain < 1) grain = 1;
  if (num_threads_ == 1 || n <= grain || t_in_region) {
    fn(0, n);
    return;
  }
  run_region(n, grain, (n + grain - 1) / grain, /*dynamic=*/true, fn);
}

}  // namespace pagedkv::backend::cpu
