// The backend interface: the small set of tensor operations the model layers are
// written against. The CPU backend (cpu/) implements it now; a CUDA backend will
// implement the same interface later and keep weights and KV on the device.
//
// Memory model. Weights are uploaded once (upload()) and from then on referred to
// by an opaque Weight the backend owns: the CPU backend keeps a zero-copy view of
// the memory-mapped checkpoint, a CUDA backend would copy it to the device.
// Activation pointers (float*) and KV tile pointers passed to the ops live in the
// backend's memory space: host memory for the CPU backend.
//
// Exactness contract (DESIGN.md, "caching never changes an answer"): every op
// computes each output element in one fixed order that does not depend on how many
// rows are processed together, on the number of threads, or (for attention) on
// whether keys come from a flat buffer or from blocks. Consequently a row's result
// is bit-identical whether it runs alone or batched, whole or chunked.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv::backend {

enum class WeightDType : uint8_t { kF32 = 0, kBF16 = 1, kF16 = 2 };

// Host bytes of a weight to upload (row-major; a matrix is [rows][cols]).
struct HostTensorView {
  WeightDType dtype = WeightDType::kF32;
  int64_t rows = 1;
  int64_t cols = 0;
  const std::byte* data = nullptr;
};

// A weight resident where the backend computes. Matrices are [rows][cols] and are
// used as y = x · Wᵀ (Hugging Face Linear layout [out_features][in_features]).
class Weight {
 public:
  virtual ~Weight() = default;
  WeightDType dtype() const { return dtype_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }

 protected:
  WeightDType dtype_ = WeightDType::kF32;
  int64_t rows_ = 0, cols_ = 0;
};

// How a head's dimensions pair up and where the inverse frequencies come from.
//   kDefault:      pairs (i, i + R/2) for i < R/2, R = rotary_dim (the leading R
//                  dims rotate, "rotate_half" layout), inverse frequency theta^(-2i/R).
//   kProportional: Hugging Face rope_type "proportional" (Gemma 4): pairs
//                  (i, i + D/2) for i < R/2 (D = head_dim, R ≤ D), inverse frequency
//                  theta^(-2i/D); the other D/2 - R/2 pairs do not rotate.
enum class RopeKind : uint8_t { kDefault = 0, kProportional = 1 };

// RoPE parameters of one layer type. The angle of pair i at position p is
// (p / position_scale) · (1 / theta^e / inv_freq_divisor), each step rounded to f32
// in that order (a divisor or scale of 1 is skipped: the same bits).
struct RopeParams {
  float theta = 10000.0f;
  int32_t rotary_dim = 0;  // rotated dims of each head (0 = head_dim); kProportional: 2·angles
  float position_scale = 1.0f;  // "linear" rope scaling: positions divided by factor
  RopeKind kind = RopeKind::kDefault;
  float inv_freq_divisor = 1.0f;  // kProportional's "factor": inverse frequencies divided by it
};

// Attention of the query tokens of ONE request over its cached keys.
// Keys are addressed in tiles of `tile` tokens: tile t holds absolute positions
// [t*tile, (t+1)*tile) at k_tiles[t] / v_tiles[t], each [tile][num_kv_heads][head_dim]
// f32 (the layout of a paged block; a flat buffer is the same with tile pointers
// spaced tile*row apart). Query token i (absolute position positions[i]) attends to
// keys max(0, pos - window + 1) .. pos (window 0 = unlimited), visiting tiles in
// position order with an online softmax.
struct AttentionArgs {
  const float* q = nullptr;  // [num_tokens][num_heads][head_dim]
  float* out = nullptr;      // [num_tokens][num_heads][head_dim]
  int32_t num_tokens = 0;
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  const int32_t* positions = nullptr;
  float scale = 1.0f;
  int32_t tile = 16;
  const float* const* k_tiles = nullptr;
  const float* const* v_tiles = nullptr;
  int32_t num_tiles = 0;
  int32_t sliding_window = 0;
  // Element type of the K/V tiles (the pointers above then address uint16_t
  // bf16/f16 values); widened exactly to f32 on load.
  WeightDType kv_dtype = WeightDType::kF32;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;

  virtual StatusOr<std::unique_ptr<Weight>> upload(const HostTensorView& t) = 0;

  // y[m][n] = Σ_k x[m][k] · W[n][k]; x is [m][W.cols], y is [m][W.rows].
  virtual void matmul(const float* x, int64_t m, const Weight& w, float* y) = 0;
  // y[i] = table[ids[i]] widened to f32; y is [m][table.cols]. ids must be in range.
  virtual void embedding(const int32_t* ids, int64_t m, const Weight& table, float* y) = 0;
  // Per row of d = w.cols elements: y = x / sqrt(mean(x²) + eps) · w  (or · (1 + w)
  // when one_plus_weight). x and y may alias.
  virtual void rms_norm(const float* x, int64_t m, const Weight& w, float eps, bool one_plus_weight,
                        float* y) = 0;
  // In place on x [m][num_heads][head_dim]; token i rotated for position positions[i].
  virtual void rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim,
                    const int32_t* positions, const RopeParams& p) = 0;
  // out[i] = act(gate[i]) · up[i] for i < n; act = SiLU or GELU (tanh approximation).
  virtual void silu_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  virtual void gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out) = 0;
  // x[i] += y[i]
  virtual void add(float* x, const float* y, int64_t n) = 0;
  // In-place softmax of each row of x [m][n].
  virtual void softmax(float* x, int64_t m, int64_t n) = 0;
  // Top-k routing over router logits [m][num_experts]: probabilities = softmax (or
  // the raw logits when !softmax_first), the k largest (ties → lower expert id) in
  // descending order, renormalized to sum 1 when normalize. Writes ids/weights [m][k].
  virtual void topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k,
                          bool softmax_first, bool normalize, int32_t* ids, float* weights) = 0;
  virtual void attention(const AttentionArgs& a) = 0;
  // The attentions of several batch rows at once (a backend may run them as one
  // parallel region); each result equals attention(args[i]) alone.
  virtual void attention_batch(const AttentionArgs* args, size_t count) {
    for (size_t i = 0; i < count; ++i) attention(args[i]);
  }
  // Calls fn(begin, end) on disjoint ranges covering [0, n), possibly on several
  // threads at once, and returns when all are done. For host-side loops of the
  // model layers over independent items (recurrent heads, channels, tokens): the
  // caller must make each index's computation whole and independent of the others
  // and of the range it lands in, so the split (a function of n, grain and the
  // thread count) never changes a bit. Ranges hold at least `grain` indices
  // (except the last); work below two grains runs inline. fn must not call other
  // Backend ops (a nested call runs serially). Default: fn(0, n) on the caller.
  virtual void parallel_for(int64_t n, int64_t grain,
                            const std::function<void(int64_t begin, int64_t end)>& fn) {
    (void)grain;
    if (n > 0) fn(0, n);
  }
  // One line for --verbose: the backend and the code path it takes on this machine.
  virtual std::string describe() const { return name(); }
  // What decides the bits of this backend's arithmetic besides the model and its
  // weights: its kernels' numerics version and what else they depend on (the C
  // library's math functions, a compiler, a GPU architecture), e.g. "cpu kernels
  // v1, glibc 2.36". A model names it in its kv_numerics(), which the cold tier's
  // fingerprint includes, so K/V that another build computed are never restored.
  virtual std::string numerics() const { return {}; }
};

// A grain for Backend::parallel_for: indices per range so that a range holds at
// least ~256k multiply-adds (tens of µs on one core). Handing a range to another
// thread costs ~1 µs on an idle machine but far more on a loaded one, where the
// worker may not be running (the matmul's threshold reasons the same way).
inline int64_t grain_for_work(int64_t work_per_index) {
  constexpr int64_t kMinWork = int64_t{1} << 18;
  return work_per_index >= kMinWork ? 1 : kMinWork / (work_per_index > 0 ? work_per_index : 1);
}

// The process-wide CPU backend (threads from PAGEDKV_CPU_THREADS, default: the
// CPUs this process may run on).
Backend& cpu_backend();

}  // namespace pagedkv::backend
