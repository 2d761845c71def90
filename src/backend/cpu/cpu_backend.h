// The CPU backend: Backend (backend.h) over the fixed-order kernels in kernels.h
// and a small thread pool. Weights are zero-copy views of host memory (the
// memory-mapped checkpoint), so the caller keeps that memory alive.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace pagedkv::backend::cpu {

// The CPUs this process may run on (its affinity mask), the default thread count.
int default_num_threads();

// A weight: a view of the caller's memory, or (huge-page copies, below) a copy the
// weight owns. Either way the same bytes, so the same results.
class CpuWeight : public Weight {
 public:
  CpuWeight(const HostTensorView& t) : data_(t.data) {
    dtype_ = t.dtype;
    rows_ = t.rows;
    cols_ = t.cols;
  }
  ~CpuWeight() override;
  // Owns its huge-page copy (unmapped once, in the destructor): not copyable.
  CpuWeight(const CpuWeight&) = delete;
  CpuWeight& operator=(const CpuWeight&) = delete;
  const void* data() const { return data_; }
  // Copies the bytes into 2 MiB-aligned anonymous memory advised for transparent
  // huge pages; false (and still a view) when that memory cannot be had.
  // `live`, when given, counts the copy's bytes while it lives.
  bool copy_to_huge_pages(size_t bytes, std::shared_ptr<std::atomic<int64_t>> live = nullptr);
  bool owns_copy() const { return owned_ != nullptr; }

 private:
  const std::byte* data_;
  void* owned_ = nullptr;
  size_t owned_bytes_ = 0;
  int64_t counted_ = 0;
  std::shared_ptr<std::atomic<int64_t>> live_;
};

// Weights of at least this many bytes are copied to huge pages at upload (when
// enabled): a matrix streamed from DRAM with 4 KiB pages costs a TLB miss per
// page (per weight column of 1,024 f32), which the prefill GEMM and the decode
// stream pay on every step (docs/backend.md, "Weights on huge pages").
inline constexpr size_t kHugeWeightMinBytes = size_t{2} << 20;

class CpuBackend : public Backend {
 public:
  // spin_micros: the pool's polling time before it sleeps (< 0: kDefaultSpinMicros).
  // huge_weights: copy large weights to huge pages at upload (PAGEDKV_CPU_HUGE_WEIGHTS
  // for the process-wide backend; off keeps zero-copy views of the caller's memory).
  explicit CpuBackend(int num_threads, int64_t spin_micros = -1, bool huge_weights = false);
  std::string name() const override { return "cpu"; }
  std::string numerics() const override;  // cpu_numerics_identity() (numerics.h)
  int num_threads() const { return pool_.num_threads(); }
  ThreadPool* pool() { return &pool_; }

  StatusOr<std::unique_ptr<Weight>> upload(const HostTensorView& t) override;
  void matmul(const float* x, int64_t m, const Weight& w, float* y) override;
  void embedding(const int32_t* ids, int64_t m, const Weight& table, float* y) override;
  void rms_norm(const float* x, int64_t m, const Weight& w, float eps, bool one_plus_weight,
                float* y) override;
  void rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
            const RopeParams& p) override;
  void silu_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) override;
  void add(float* x, const float* y, int64_t n) override;
  void softmax(float* x, int64_t m, int64_t n) override;
  void topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k,
                  bool softmax_first, bool normalize, int32_t* ids, float* weights) override;
  void attention(const AttentionArgs& a) override;
  void attention_batch(const AttentionArgs* args, size_t count) override;
  void parallel_for(int64_t n, int64_t grain,
                    const std::function<void(int64_t, int64_t)>& fn) override;
  std::string describe() const override;

  // Op timing for the benchmarks: while on, every op's wall time (and the
  // matmuls' flops) is summed per op kind; profile_report() returns the table and
  // starts over. Off by default (then an op pays one branch).
  void set_profiling(bool on);
  // Bytes of the huge-page weight copies alive now (tests).
  int64_t huge_copied_bytes() const { return huge_live_->load(); }
  std::string profile_report();

  // Tests: parallel_for ignores the caller's grain and uses this one (0 = off), so
  // a small model's loops really split over the threads.
  void set_parallel_for_grain_for_testing(int64_t grain) { forced_grain_ = grain; }

 private:
  ThreadPool pool_;
  bool huge_weights_ = false;
  std::mutex huge_mu_;
  int64_t huge_budget_ = -1;  // bytes; set at the first upload
  // Bytes of the copies alive now (a weight destroyed gives its bytes back).
  std::shared_ptr<std::atomic<int64_t>> huge_live_ = std::make_shared<std::atomic<int64_t>>(0);
  int64_t forced_grain_ = 0;
};

}  // namespace pagedkv::backend::cpu
