// CpuBackend (see cpu_backend.h).
#include "backend/cpu/cpu_backend.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <thread>

#include "backend/cpu/kernels.h"
#include "backend/cpu/matmul_isa.h"
#include "backend/cpu/numerics.h"
#include "backend/half.h"
#include "util/check.h"
#include "util/knobs.h"

namespace pagedkv::backend {

Backend& cpu_backend() {
  static cpu::CpuBackend* b = [] {
    int threads = static_cast<int>(
        resolve_knob<uint64_t>("PAGEDKV_CPU_THREADS", std::nullopt, cpu::default_num_threads()));
    if (threads < 1) threads = 1;
    if (threads > 256) threads = 256;
    const uint64_t spin = resolve_knob<uint64_t>("PAGEDKV_CPU_SPIN_US", std::nullopt,
                                                 static_cast<uint64_t>(cpu::kDefaultSpinMicros));
    const bool huge = resolve_knob<bool>("PAGEDKV_CPU_HUGE_WEIGHTS", std::nullopt, true);
    auto* be =
        new cpu::CpuBackend(threads, static_cast<int64_t>(std::min<uint64_t>(spin, 100'000)), huge);
    // PAGEDKV_CPU_PROFILE=1: the op profile (set_profiling) of the whole process,
    // printed to stderr at exit (`pagedkv bench` with one --concurrency value gives
    // the per-op time of that run).
    if (resolve_knob<bool>("PAGEDKV_CPU_PROFILE", std::nullopt, false)) {
      be->set_profiling(true);
      std::atexit([] {
        auto& self = static_cast<cpu::CpuBackend&>(cpu_backend());
        std::fprintf(stderr, "cpu backend op profile (PAGEDKV_CPU_PROFILE):\n%s",
                     self.profile_report().c_str());
      });
    }
    return be;
  }();
  return *b;
}

namespace cpu {
namespace {
const CpuWeight& cw(const Weight& w) { return static_cast<const CpuWeight&>(w); }

// The profile (set_profiling): per op kind, calls, seconds and flops. Ops may be
// issued from several threads at once (MoE experts in parallel), so the sums are
// taken under a mutex, paid only while profiling; an op run on several threads at
// once counts each thread's time (the table is then CPU time, not wall time).
enum Op {
  kMatmulDecode,
  kMatmulPacked,
  kAttentionDecode,
  kAttentionPrompt,
  kRmsNorm,
  kRope,
  kActivation,
  kAdd,
  kEmbedding,
  kOther,
  kNumOps
};
const char* const kOpNames[kNumOps] = {"matmul m<16", "matmul m>=16", "attn decode", "attn prompt",
                                       "rms_norm",    "rope",         "silu/gelu",   "add",
                                       "embedding",   "softmax/route"};
bool g_profiling = false;
std::mutex g_profile_mutex;
double g_op_seconds[kNumOps] = {};
double g_op_flops[kNumOps] = {};
int64_t g_op_calls[kNumOps] = {};

class OpTimer {
 public:
  explicit OpTimer(Op op, double flops = 0) : op_(op) {
    if (!g_profiling) return;
    start_ = std::chrono::steady_clock::now();
    std::lock_guard lock(g_profile_mutex);
    g_op_flops[op] += flops;
    ++g_op_calls[op];
  }
  ~OpTimer() {
    if (!g_profiling) return;
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    std::lock_guard lock(g_profile_mutex);
    g_op_seconds[op_] += s;
  }

 private:
  Op op_;
  std::chrono::steady_clock::time_point start_;
};

// The multiply-adds of q·k and p·v over every (token, head, key) the calls
// attend (two flops each): the profile's attention GFLOP/s.
double attention_flops(const AttentionArgs* args, size_t count) {
  if (count == 0) return 0.0;
  double keys = 0;
  for (size_t i = 0; i < count; ++i) {
    const AttentionArgs& a = args[i];
    for (int32_t t = 0; t < a.num_tokens; ++t) {
      const int32_t pos = a.positions[t];
      const int32_t start = a.sliding_window > 0 ? std::max(0, pos - a.sliding_window + 1) : 0;
      keys += static_cast<double>(pos - start + 1) * a.num_heads;
    }
  }
  return keys * 4.0 * args[0].head_dim;
}
}  // namespace

void CpuBackend::set_profiling(bool on) { g_profiling = on; }

std::string CpuBackend::profile_report() {
  std::lock_guard lock(g_profile_mutex);
  double total = 0;
  for (double s : g_op_seconds) total += s;
  std::string out;
  char line[160];
  for (int i = 0; i < kNumOps; ++i) {
    if (g_op_calls[i] == 0) continue;
    std::snprintf(line, sizeof(line), "  %-14s %8.2f ms  %5.1f%%  %7lld calls", kOpNames[i],
                  g_op_seconds[i] * 1e3, total > 0 ? 100.0 * g_op_seconds[i] / total : 0.0,
                  static_cast<long long>(g_op_calls[i]));
    out += line;
    if (g_op_flops[i] > 0) {
      std::snprintf(line, sizeof(line), "  %7.1f GFLOP/s", g_op_flops[i] / g_op_seconds[i] / 1e9);
      out += line;
    }
    out += "\n";
    g_op_seconds[i] = g_op_flops[i] = 0;
    g_op_calls[i] = 0;
  }
  std::snprintf(line, sizeof(line), "  %-14s %8.2f ms\n", "all ops", total * 1e3);
  return out + line;
}

int default_num_threads() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  unsigned hc = std::thread::hardware_concurrency();
  return hc > 0 ? static_cast<int>(hc) : 1;
}

std::string CpuBackend::numerics() const { return cpu_numerics_identity(); }

std::string CpuBackend::describe() const {
  return "cpu backend: " + std::to_string(pool_.num_threads()) + " threads, matmul path " +
         isa_name();
}

CpuBackend::CpuBackend(int num_threads, int64_t spin_micros, bool huge_weights)
    : pool_(num_threads, spin_micros), huge_weights_(huge_weights) {}

CpuWeight::~CpuWeight() {
  if (owned_ != nullptr) munmap(owned_, owned_bytes_);
  if (live_) live_->fetch_sub(counted_);
}

bool CpuWeight::copy_to_huge_pages(size_t bytes, std::shared_ptr<std::atomic<int64_t>> live) {
  constexpr size_t kHuge = size_t{2} << 20;
  const size_t size = (bytes + kHuge - 1) / kHuge * kHuge;
  // Over-allocate by one huge page and trim, so the copy starts on a 2 MiB boundary.
  void* raw =
      mmap(nullptr, size + kHuge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return false;
  const uintptr_t r = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t a = (r + kHuge - 1) & ~(uintptr_t{kHuge} - 1);
  if (a > r) munmap(raw, a - r);
  if (r + kHuge > a) munmap(reinterpret_cast<void*>(a + size), r + kHuge - a);
  void* p = reinterpret_cast<void*>(a);
  madvise(p, size, MADV_HUGEPAGE);  // advice only: without THP the copy still works
  std::memcpy(p, data_, bytes);
  owned_ = p;
  owned_bytes_ = size;
  data_ = static_cast<const std::byte*>(p);
  if (live) {
    counted_ = static_cast<int64_t>(bytes);
    live->fetch_add(counted_);
    live_ = std::move(live);
  }
  return true;
}

StatusOr<std::unique_ptr<Weight>> CpuBackend::upload(const HostTensorView& t) {
  if (t.data == nullptr && t.rows * t.cols > 0) return invalid_argument("upload: null weight data");
  auto w = std::make_unique<CpuWeight>(t);
  const size_t bytes =
      static_cast<size_t>(t.rows * t.cols) * (t.dtype == WeightDType::kF32 ? 4 : 2);
  // The copies' budget: a quarter of the memory available at the first upload, for
  // the copies alive at once. The caller's bytes (a memory-mapped checkpoint) stay
  // mapped too, so a model too big for it keeps its remaining weights as views
  // rather than doubling its footprint.
  std::lock_guard lock(huge_mu_);
  if (huge_budget_ < 0) {
    const long pages = sysconf(_SC_AVPHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    huge_budget_ = pages > 0 && page > 0 ? static_cast<int64_t>(pages) * page / 4 : 0;
  }
  if (huge_weights_ && bytes >= kHugeWeightMinBytes &&
      huge_live_->load() + static_cast<int64_t>(bytes) <= huge_budget_)
    w->copy_to_huge_pages(bytes, huge_live_);
  return std::unique_ptr<Weight>(std::move(w));
}

void CpuBackend::matmul(const float* x, int64_t m, const Weight& w, float* y) {
  OpTimer t(m >= kPackMinRows ? kMatmulPacked : kMatmulDecode, 2.0 * m * w.cols() * w.rows());
  cpu::matmul(x, m, w.cols(), cw(w).data(), w.dtype(), w.rows(), y, &pool_);
}

void CpuBackend::embedding(const int32_t* ids, int64_t m, const Weight& table, float* y) {
  OpTimer t(kEmbedding);
  int64_t d = table.cols();
  for (int64_t i = 0; i < m; ++i) {
    PKV_CHECK(ids[i] >= 0 && ids[i] < table.rows());
    const std::byte* row = static_cast<const std::byte*>(cw(table).data());
    float* out = y + i * d;
    switch (table.dtype()) {
      case WeightDType::kF32:
        std::memcpy(out, row + ids[i] * d * 4, d * 4);
        break;
      case WeightDType::kBF16:
      case WeightDType::kF16: {
        const uint16_t* p = reinterpret_cast<const uint16_t*>(row) + ids[i] * d;
        for (int64_t j = 0; j < d; ++j)
          out[j] = table.dtype() == WeightDType::kBF16 ? bf16_to_f32(p[j]) : f16_to_f32(p[j]);
        break;
      }
    }
  }
}

void CpuBackend::rms_norm(const float* x, int64_t m, const Weight& w, float eps,
                          bool one_plus_weight, float* y) {
  OpTimer t(kRmsNorm);
  cpu::rms_norm(x, m, w.cols(), cw(w).data(), w.dtype(), eps, one_plus_weight, y, &pool_);
}

void CpuBackend::rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim,
                      const int32_t* positions, const RopeParams& p) {
  OpTimer t(kRope);
  cpu::rope(x, m, num_heads, head_dim, positions, p, &pool_);
}

// Element-wise ops: every element is computed alone, so splitting the range over
// threads cannot change a bit.
void CpuBackend::silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  OpTimer t(kActivation);
  cpu::silu_mul(gate, up, n, out, &pool_);
}

void CpuBackend::gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) {
  OpTimer t(kActivation);
  const float k0 = 0.7978845608028654f;  // sqrt(2/pi)
  elementwise(
      n, &pool_,
      [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i) {
          float g = gate[i];
          float inner = k0 * (g + 0.044715f * (g * g * g));
          out[i] = (0.5f * g * (1.0f + std::tanh(inner))) * up[i];
        }
      },
      /*heavy=*/true);
}

void CpuBackend::add(float* x, const float* y, int64_t n) {
  OpTimer t(kAdd);
  elementwise(n, &pool_, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] = x[i] + y[i];
  });
}

void CpuBackend::softmax(float* x, int64_t m, int64_t n) {
  OpTimer t(kOther);
  cpu::softmax_rows(x, m, n);
}

void CpuBackend::topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k,
                            bool softmax_first, bool normalize, int32_t* ids, float* weights) {
  OpTimer t(kOther);
  cpu::topk_route(logits, m, num_experts, k, softmax_first, normalize, ids, weights);
}

void CpuBackend::attention(const AttentionArgs& a) { attention_batch(&a, 1); }

void CpuBackend::attention_batch(const AttentionArgs* args, size_t count) {
  bool decode = true;
  for (size_t i = 0; i < count; ++i) {
    PKV_CHECK(args[i].tile > 0 && args[i].tile <= 256);
    PKV_CHECK(args[i].num_kv_heads > 0 && args[i].num_heads % args[i].num_kv_heads == 0);
    decode = decode && args[i].num_tokens == 1;
  }
  OpTimer t(decode ? kAttentionDecode : kAttentionPrompt,
            g_profiling ? attention_flops(args, count) : 0.0);
  cpu::attention_batch(args, count, &pool_);
}

void CpuBackend::parallel_for(int64_t n, int64_t grain,
                              const std::function<void(int64_t, int64_t)>& fn) {
  pool_.parallel_for(n, forced_grain_ > 0 ? forced_grain_ : grain, fn);
}

}  // namespace cpu
}  // namespace pagedkv::backend
