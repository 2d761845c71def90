// A fixed-size thread pool for the CPU kernels. parallel_for splits a range of
// independent tasks (output column groups, attention (row, token, head) tasks,
// element-wise rows) into chunks and returns when all are done. The chunks are a
// fixed function of (n, grain, thread count) and kernels only ever split work
// whose results are independent of each other, so neither the thread count nor
// which thread runs which chunk changes a result — only the speed.
//
// Chunks are claimed, not assigned: the caller and every awake worker take the
// next unclaimed chunk until none is left, then the caller waits only for chunks
// a worker is still running. A worker that is asleep, descheduled (a machine
// shared with other builds) or slow to wake costs the region nothing but its
// share of the speed-up; the caller never waits for a thread that has not started.
//
// Wait policy (docs/backend.md, "The thread pool's wait policy"): an idle worker
// polls for the next region for `spin_micros` (default kDefaultSpinMicros, env
// PAGEDKV_CPU_SPIN_US), then sleeps on a futex (std::atomic::wait); the caller,
// after its own chunks, polls for the workers' chunks as long, then sleeps. A
// decode step's regions follow each other within microseconds on a many-core
// host, where polling keeps fork/join at ~1 µs; a longer gap (the engine between
// steps, serial work of a small model) costs at most spin_micros of polling per
// thread, and the CPU seconds it burns are counted by `pagedkv bench`.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace pagedkv::backend::cpu {

// How long an idle thread polls before it sleeps, in microseconds. About the cost
// of a futex sleep + wake-up on the hosts measured (docs/backend.md): polling
// longer than a sleep would cost gains nothing on a loaded machine, and shorter
// would make a many-core decode step sleep and re-wake its workers between the
// regions of one layer.
inline constexpr int64_t kDefaultSpinMicros = 100;

class ThreadPool {
 public:
  // spin_micros < 0 means kDefaultSpinMicros; 0 sleeps at once.
  explicit ThreadPool(int num_threads, int64_t spin_micros = -1);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  int64_t spin_micros() const { return spin_micros_; }
  // Calls fn(begin, end) on disjoint chunks covering [0, n); chunk i of t is
  // [units·i/t, units·(i+1)/t) in units of `grain` (the last may be short), t the
  // thread count; any thread may run any chunk. Runs inline when n is small, with
  // one thread, or when called from inside a region.
  void parallel_for(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);
  // Calls fn(begin, end) on the chunks [c·grain, (c+1)·grain) ∩ [0, n), handed out
  // first come, first served (for tasks of uneven cost whose results are
  // independent: attention).
  void parallel_dynamic(int64_t n, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

 private:
  void worker_loop();
  // Claims and runs chunks of the open region until none is left.
  void run_chunks();
  void run_region(int64_t n, int64_t grain, int64_t chunks, bool dynamic,
                  const std::function<void(int64_t, int64_t)>& fn);

  int num_threads_;
  int64_t spin_micros_;
  std::vector<std::thread> workers_;
  // The open region, written by the caller before it publishes open_.
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t n_ = 0, grain_ = 1, chunks_ = 0;
  bool dynamic_ = false;
  uint64_t last_region_ = 0;  // the caller's region counter
  // Read by every worker per region (one cache line).
  alignas(64) std::atomic<uint32_t> generation_{0};  // bumped per region: what workers wait on
  std::atomic<uint64_t> open_{0};                    // id of the open region, 0 when none is
  std::atomic<int> sleeping_{0};                     // workers blocked in generation_.wait
  std::atomic<bool> stop_{false};
  // Written per chunk / per worker (a line each).
  alignas(64) std::atomic<int64_t> next_{0};  // next unclaimed chunk
  alignas(64) std::atomic<int> active_{0};    // workers that may be inside the open region
  std::atomic<bool> caller_waiting_{false};
  std::mutex call_mu_;  // one parallel region at a time
};

}  // namespace pagedkv::backend::cpu
