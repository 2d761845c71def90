// The device-resident qwen3 / qwen3_moe forward (see cuda_model.h).
#include "model/cuda/cuda_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_group.h"
#include "backend/cuda/selection_draw.h"
#include "backend/cuda/top_entries.h"
#include "backend/cuda/vmm_kv_storage.h"
#include "backend/cuda/x_planes.h"
#include "model/checkpoint.h"
#include "model/flat_kv_cache.h"
#include "model/layers.h"
#include "util/knobs.h"

namespace pagedkv::model::cuda {
namespace {

namespace bc = backend::cuda;
using backend::Weight;

const void* wdata(const Weight& w) { return static_cast<const bc::CudaWeight&>(w).data(); }
// Bytes of one element of a device weight (f32, or bf16 / f16).
size_t elem(const Weight& w) { return w.dtype() == backend::WeightDType::kF32 ? 4 : 2; }

// A flat row's K/V in device memory: per layer K then V, [capacity][kv_heads][head_dim].
class DeviceFlatKV final : public FlatKVCache::Attachment {
 public:
  bc::DeviceBuffer buf;
  int32_t capacity = 0;
  // A copied FlatKVCache gets its own device copy (between steps: the model's
  // stream is idle then); nullptr when the device has no room.
  std::unique_ptr<FlatKVCache::Attachment> clone() const override {
    auto c = std::make_unique<DeviceFlatKV>();
    if (buf.size() > 0) {
      auto b = bc::DeviceBuffer::allocate(buf.size());
      if (!b.ok()) return nullptr;
      if (cudaMemcpy(b->data(), buf.data(), buf.size(), cudaMemcpyDeviceToDevice) != cudaSuccess)
        return nullptr;
      c->buf = std::move(*b);
    }
    c->capacity = capacity;
    return c;
  }
};

// Pinned host memory for the step's metadata (one async copy per step).
class PinnedInts {
 public:
  ~PinnedInts() {
    if (p_ != nullptr) cudaFreeHost(p_);
  }
  StatusOr<int32_t*> get(size_t n) {
    if (n > n_) {
      if (p_ != nullptr) cudaFreeHost(p_);
      p_ = nullptr;
      n_ = 0;
      PKV_CUDA_RETURN_IF_ERROR(cudaMallocHost(reinterpret_cast<void**>(&p_), n * sizeof(int32_t)));
      n_ = n;
    }
    return p_;
  }

 private:
  int32_t* p_ = nullptr;
  size_t n_ = 0;
};

// PAGEDKV_CUDA_PROFILE=1: where a step's wall time goes (host enqueue of the
// layers, waiting for them, the logits and their copy, the host NaN check),
// printed to stderr when the model is destroyed. Off by default (it adds a sync).
struct StepProfile {
  bool on = false;
  int64_t steps = 0;
  double enqueue_ms = 0, layers_ms = 0, logits_ms = 0, check_ms = 0;
};
using ProfClock = std::chrono::steady_clock;
double ms_since(ProfClock::time_point t) {
  return std::chrono::duration<double, std::milli>(ProfClock::now() - t).count();
}

// CUDA graphs of decode-sized steps (PAGEDKV_CUDA_GRAPHS, on by default): a paged
// step of at most kMaxGraphTokens tokens is padded to its token bucket (1, 2, 4, 8,
// then multiples of 8), its block-table width and attention partition count to
// powers of two; one graph per bucket replays every launch of the step. (Exact
// partition counts up to 8, tried on an H100, won nothing at 64 rows — the padded
// partition's blocks leave at once — and lost 2–5% at 32, where the smaller
// per-token launch took the eight-warp blocks: docs/performance.md.)
constexpr int64_t kMaxGraphTokens = 64;
int32_t next_pow2(int32_t v) {
  int32_t p = 1;
  while (p < v) p <<= 1;
  return p;
}
int32_t token_bucket(int32_t t) { return t <= 8 ? next_pow2(t) : (t + 7) / 8 * 8; }

// The ints of a MoE layer's device lists for tk routed slots over e experts: the
// rows and slots of each list entry, then moe_group's band list.
size_t moe_list_ints(int64_t tk, int32_t e) {
  return static_cast<size_t>(2 * tk + 1 + 2 * int64_t{bc::moe_group_max_bands(tk, e)});
}

// How a row's token is found after a step: not on the device (the caller reads the
// logits or takes the greedy token), or a seeded draw finished from the row's best
// entries, or one drawn by selection over the whole row.
enum class RowDrawWay : uint8_t { kNone, kEntries, kSelection };

struct GraphKey {
  int32_t tokens = 0, width = 0, parts = 0;
  // Attention's launch shape: StepArgs::packed_partitions, whether a row brings more
  // than one token (prefill tiles) and StepArgs::decode_tokens.
  int32_t packed = 0;
  bool prompt = false;
  int32_t decode_tokens = 0;
  bool operator<(const GraphKey& o) const {
    return std::tie(tokens, width, parts, packed, prompt, decode_tokens) <
           std::tie(o.tokens, o.width, o.parts, o.packed, o.prompt, o.decode_tokens);
  }
};

struct Layer {
  WeightPtr input_norm, post_norm;
  AttentionWeights attn;
  MlpWeights mlp;
  backend::RopeParams rope;
  // qwen3_moe's sparse layers: softmax router, top_k experts (MoeWeights::experts).
  bool is_moe = false;
  MoeWeights moe;
  // PAGEDKV_CUDA_FUSED (on by default): q/k/v and gate/up as one weight each,
  // their rows concatenated at load (attn.q/k/v and mlp.gate/up then null).
  WeightPtr qkv, gate_up;
  // Fused MoE layers: every expert's [gate; up] rows, expert after expert, as one
  // weight [E · 2 · moe_inter][H] (the experts' gate/up then null).
  WeightPtr experts_gate_up;
  // And a device array of 2E weight pointers for bc::gemm_grouped: expert e's
  // [gate; up] rows in experts_gate_up at e, its down weight at E + e (empty where
  // expert_weight_pointers() finds a pointer not 16-byte aligned or the down weights
  // unalike: that model's MoE steps then run eagerly, without graphs).
  bc::DeviceBuffer expert_weights;
};

// One weight whose rows are those of `ws` in order (same dtype and columns), on
// the device: a GEMM over it computes every output column as the separate GEMMs
// did (each column's dot product over k is independent of the others).
StatusOr<WeightPtr> concat_rows(const std::vector<const Weight*>& ws) {
  const Weight& w0 = *ws[0];
  int64_t rows = 0;
  for (const Weight* w : ws) {
    if (w->dtype() != w0.dtype() || w->cols() != w0.cols())
      return internal_error("cuda model: fused weights differ in dtype or columns");
    rows += w->rows();
  }
  const size_t row_bytes = static_cast<size_t>(w0.cols()) * elem(w0);
  PKV_ASSIGN_OR_RETURN(bc::DeviceBuffer buf,
                       bc::DeviceBuffer::allocate(static_cast<size_t>(rows) * row_bytes));
  size_t off = 0;
  for (const Weight* w : ws) {
    const size_t n = static_cast<size_t>(w->rows()) * row_bytes;
    PKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpy(buf.as<std::byte>() + off, wdata(*w), n, cudaMemcpyDeviceToDevice));
    off += n;
  }
  backend::HostTensorView v;
  v.dtype = w0.dtype();
  v.rows = rows;
  v.cols = w0.cols();
  return WeightPtr(new bc::CudaWeight(v, std::move(buf)));
}

// A fused MoE layer's 2E weight pointers for bc::gemm_grouped (Layer::expert_weights),
// copied to the device once; an empty buffer where one is not 16-byte aligned (the
// bf16 kernels' weight loads need it) or the down weights differ in dtype or shape
// (one grouped launch takes one of each).
StatusOr<bc::DeviceBuffer> expert_weight_pointers(const Layer& L) {
  const Weight& gu = *L.experts_gate_up;
  const size_t E = L.moe.experts.size();
  const Weight& down0 = *L.moe.experts[0].down;
  for (const MlpWeights& ew : L.moe.experts)
    if (ew.down->dtype() != down0.dtype() || ew.down->rows() != down0.rows() ||
        ew.down->cols() != down0.cols())
      return bc::DeviceBuffer{};
  const size_t stride = static_cast<size_t>(gu.rows()) / E * static_cast<size_t>(gu.cols()) *
                        elem(gu);  // one expert's [gate; up] rows, in bytes
  std::vector<const void*> ptrs(2 * E);
  for (size_t e = 0; e < E; ++e) {
    ptrs[e] = static_cast<const std::byte*>(wdata(gu)) + e * stride;
    ptrs[E + e] = wdata(*L.moe.experts[e].down);
  }
  for (const void* p : ptrs)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0) return bc::DeviceBuffer{};
  PKV_ASSIGN_OR_RETURN(bc::DeviceBuffer buf,
                       bc::DeviceBuffer::allocate(ptrs.size() * sizeof(const void*)));
  PKV_CUDA_RETURN_IF_ERROR(cudaMemcpy(buf.data(), ptrs.data(), ptrs.size() * sizeof(const void*),
                                      cudaMemcpyHostToDevice));
  return buf;
}

class CudaQwen3Model final : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  const KVGeometry& kv_geometry() const override { return geom_; }
  std::shared_ptr<kv::KVStorage> kv_storage() const override { return storage_; }
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;
  bool samples_greedy() const override { return device_greedy_; }
  int32_t draw_entries_cap() const override { return draw_cap_; }
  // The attention kernel, a GEMM plane count other than 3, then the kernels'
  // numerics version, nvcc and architecture (backend/cuda/numerics.h).
  std::string kv_numerics() const override {
    std::string n = !mma_attention_                           ? "attention simt"
                    : mma_operands_ == bc::MmaOperands::kBf16 ? "attention mma-bf16"
                                                              : "attention mma";
    if (bc::gemm_planes() != 3) n += ", gemm planes " + std::to_string(bc::gemm_planes());
    return n + ", " + be_->numerics();
  }
  const CudaModelStats& stats() const { return stats_; }
  ~CudaQwen3Model() override {
    clear_graphs();
    if (prof_.on && prof_.steps > 0) {
      const double n = static_cast<double>(prof_.steps);
      std::fprintf(
          stderr,
          "cuda model profile: %lld steps; per step %.3f ms enqueue, %.3f ms waiting for "
          "the layers, %.3f ms logits (norm, head, NaN flag, copy), %.3f ms host NaN scan\n",
          static_cast<long long>(prof_.steps), prof_.enqueue_ms / n, prof_.layers_ms / n,
          prof_.logits_ms / n, prof_.check_ms / n);
    }
  }

  static StatusOr<std::unique_ptr<Model>> create(const std::string& dir, const LoadOptions& options,
                                                 int device);

 private:
  // Device scratch slots, grown on demand (contents garbage between uses).
  enum Slot {
    kX,
    kH,
    kY,
    kQ,
    kK,
    kV,
    kAttn,
    kG,
    kU,
    kWs,
    kSel,
    kLogits,
    kMeta,
    kRouter,
    kRouteIds,
    kRouteW,
    kXin,
    kYout,
    kResults,
    kMoeRows,
    kQKV,
    kGU,
    kMoeBegin,
    kMoeGU,
    kMoeAct,
    kDrawJobs,
    kDrawOut,
    kSelection,
    kSlots
  };
  StatusOr<float*> scratch(Slot s, size_t floats);
  Status gemm(const float* x, int64_t m, const Weight& w, float* y) {
    return bc::gemm(x, m, w.cols(), wdata(w), w.dtype(), w.rows(), y, stream());
  }
  Status rms_norm(const float* x, int64_t m, const Weight& w, float* y) {
    return bc::rms_norm(x, m, w.cols(), wdata(w), w.dtype(), eps_, false, y, stream());
  }
  // The model's one attention kernel (mma_attention_; p.mma_operands is mma_operands_).
  Status attention(const bc::PagedAttentionParams& p, cudaStream_t st) const {
    return mma_attention_ ? bc::paged_attention_mma(p, st) : bc::paged_attention(p, st);
  }
  cudaStream_t stream() const { return be_->stream(); }
  bc::KvType kv_type() const {
    return geom_.dtype == KVDType::kF32 ? bc::KvType::kF32 : bc::KvType::kBF16;
  }
  // Checks that the paged store's layer buffers are device memory laid out as
  // [num_blocks][block_size][row] (LayerKVPool), so block ids address them.
  Status check_paged_store(KVBlockStore& store) const;
  // Makes every flat row's device cache hold its span (growing keeps the contents).
  Status reserve_flat(const ForwardBatch& batch);
  // y = the sparse MoE of h (T rows): the CPU's moe_block order (layers.h) on the
  // device; the routing ids come to the host once per layer to group the tokens.
  // grouped (a graph step: no host sync): the chosen experts' GEMMs in one grouped
  // launch each, their row lists read on the device (each GEMM row is computed
  // alone, so the rows keep the per-expert launches' bits).
  Status moe_ffn(const Layer& L, const float* h, int64_t T, float* y, bool grouped);
  // Sizes the MoE scratch of a T-token step before a capture (no reallocation,
  // hence no sync, inside it).
  Status alloc_moe(int64_t T);

  // One step's shape and device buffers: T tokens (padded to the bucket on a
  // graph step), P logits rows, the block-table width and the largest position
  // attention sizes its partitions for.
  struct StepArgs {
    bool paged = true;
    bool graph = false;  // captured: no host sync (MoE runs padded)
    int64_t T = 0, P = 0;
    int32_t maxb = 1, max_pos = 0;
    // Attention's launch shape (PagedAttentionParams' hints): the leading one-token
    // rows of a step that also has longer ones (run in decode launches of their own),
    // and the most and fewest tokens of one row after them.
    int32_t decode_tokens = 0;
    int32_t max_query_len = 0;
    int32_t min_query_len = 0;
    int32_t packed_partitions = 0;  // attention partitions the rows' shared prefixes fill
    const int32_t *ids = nullptr, *pos = nullptr, *seq = nullptr, *pick = nullptr, *tab = nullptr;
    float *x = nullptr, *h = nullptr, *y = nullptr, *q = nullptr, *k = nullptr, *v = nullptr;
    float *attn = nullptr, *g = nullptr, *u = nullptr, *ws = nullptr, *sel = nullptr;
    float* logits = nullptr;
    float *qkv = nullptr, *gu = nullptr;  // fused projections' outputs
  };
  // Decode attention's early copies in a step of a's shape (timings only: each
  // path's bits are the same, tests/backend/cuda_attention_test.cc and
  // tests/engine/cuda_engine_test.cc). `settled`: PagedAttentionParams::
  // keys_below_position_settled — a decode step's attention may copy the keys below
  // each token's position before its wait; `trigger`: the q/k/v prep lets attention
  // launch at its entry (QkvPrepParams::trigger_next_at_entry), so those copies run
  // under the q/k/v GEMM too. Where rows share a cached prefix, attention is two
  // launches, the second beside the first (packed partitions, then the others), and
  // the first's copies before its wait delay the second's launch: there, on an H200
  // and an H100, both cost 2–7% at 8 and 32 rows, and the copies alone gained 2–3%
  // only at 64 rows (the q/k/v prep of 64 tokens outlasts them). So: both in a step
  // of one attention launch, the copies alone in a packed step of kMaxGraphTokens
  // tokens (docs/performance.md, "Decode: the step's metadata, earlier keys…").
  struct EarlyKeys {
    bool settled = false, trigger = false;
  };
  EarlyKeys early_attention_keys(const StepArgs& a) const {
    EarlyKeys e;
    if (!early_keys_ || !a.paged || a.decode_tokens != 0 || a.max_query_len != 1) return e;
    const bool one_launch = a.packed_partitions == 0;
    e.settled = one_launch || a.T >= kMaxGraphTokens;
    e.trigger = one_launch && prep_trigger_;
    return e;
  }
  // The scratch of a step of a's shape; the metadata array holds n_ints ints (the
  // metadata, then the results region after it).
  Status alloc_step(StepArgs* a, size_t n_ints);
  // Enqueues the step from the embedding to the logits (no host sync on the
  // paged path of a dense model, so it can be captured into a graph).
  Status enqueue_step(const ForwardBatch& batch, const StepArgs& a);
  void clear_graphs();

  // Declared first: destroyed last, after every device buffer below.
  std::unique_ptr<bc::CudaBackend> be_;
  std::shared_ptr<bc::CudaKVStorage> storage_;
  ModelConfig cfg_;
  KVGeometry geom_;
  float eps_ = 1e-6f;
  int64_t inter_ = 0;
  EmbeddingWeights io_;
  std::vector<Layer> layers_;
  bc::DeviceBuffer slots_[kSlots];
  PinnedInts pinned_, moe_pinned_, draw_jobs_pinned_, draw_out_pinned_;
  PinnedInts selection_pinned_;  // rows without top-k: SelectionJobs, then their tokens
  StepProfile prof_;
  // Decode graphs per bucket; invalid once a scratch buffer or the pool moves.
  bool graphs_on_ = true;
  bool device_greedy_ = true;   // PAGEDKV_CUDA_DEVICE_SAMPLING
  int32_t draw_cap_ = 0;        // PAGEDKV_CUDA_DEVICE_SAMPLING: kMaxTopEntries
  bool fused_ = false;          // PAGEDKV_CUDA_FUSED
  bool fuse_norms_ = false;     // PAGEDKV_CUDA_FUSED_NORMS
  bool early_keys_ = true;      // PAGEDKV_CUDA_ATTN_EARLY_KEYS
  bool prep_trigger_ = true;    // PAGEDKV_CUDA_PREP_EARLY_TRIGGER
  bool mma_attention_ = false;  // PAGEDKV_CUDA_ATTENTION: the tensor-core kernel
  bc::MmaOperands mma_operands_ = bc::MmaOperands::kSplit;  // and its operands (mma-bf16)
  bool has_moe_ = false;
  bool moe_grouped_ = false;  // every MoE layer has expert_weights (graph steps)
  std::map<GraphKey, cudaGraphExec_t> graphs_;
  std::set<GraphKey> seen_;
  uint64_t scratch_gen_ = 0, graphs_gen_ = 0;
  std::vector<const void*> kv_bases_;
  // Each row's RowDrawWay this step and, by selection, its settings (kept between
  // steps so that a step allocates nothing).
  std::vector<RowDrawWay> step_draw_way_;
  std::vector<SelectionSettings> step_draw_set_;
  CudaModelStats stats_;
};

StatusOr<float*> CudaQwen3Model::scratch(Slot s, size_t floats) {
  bc::DeviceBuffer& b = slots_[s];
  const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  if (b.size() < bytes) {
    PKV_RETURN_IF_ERROR(be_->synchronize());  // the old buffer may still be in use
    b.reset();
    ++scratch_gen_;  // graphs captured with the old address are stale
    PKV_ASSIGN_OR_RETURN(b, bc::DeviceBuffer::allocate(bytes + bytes / 4));
  }
  return b.as<float>();
}

Status unsupported(const std::string& what) {
  return failed_precondition("cuda model: " + what + " is not supported on the CUDA device yet");
}

StatusOr<std::unique_ptr<Model>> CudaQwen3Model::create(const std::string& dir,
                                                        const LoadOptions& options, int device) {
  if (options.backend != nullptr)
    return invalid_argument("load_cuda_model: options.backend must be null");
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<bc::CudaBackend> gpu, bc::CudaBackend::create(device));
  // The CPU load validates config.json and every tensor's shape (zero-copy views of
  // the mapped checkpoint) and resolves the geometry (block size; the KV dtype from
  // options, else PAGEDKV_KV_DTYPE, else the device's default bf16) as `--device
  // cpu` would.
  std::unique_ptr<Model> host;
  {
    LoadOptions ho = options;
    ho.backend = nullptr;
    PKV_ASSIGN_OR_RETURN(ho.kv_dtype, resolve_kv_dtype(options, KVDType::kBF16));
    PKV_ASSIGN_OR_RETURN(host, load_model(dir, ho));
  }
  std::unique_ptr<CudaQwen3Model> m(new CudaQwen3Model());
  m->be_ = std::move(gpu);
  m->cfg_ = host->config();
  m->geom_ = host->kv_geometry();
  host.reset();
  const ModelConfig& mc = m->cfg_;
  const bool moe_family = mc.model_type == "qwen3_moe";
  if (mc.model_type != "qwen3" && !moe_family)
    return unsupported("model_type '" + mc.model_type + "'");
  if (m->geom_.dtype == KVDType::kF16) return unsupported("KV dtype f16 (use f32 or bf16)");
  const int32_t D = mc.head_dim;
  if (D != 16 && D != 32 && D != 64 && D != 128 && D != 256)
    return unsupported("head_dim " + std::to_string(D) + " (16, 32, 64, 128 or 256)");
  if (mc.num_attention_heads / mc.num_key_value_heads > 16)
    return unsupported("a GQA group of " +
                       std::to_string(mc.num_attention_heads / mc.num_key_value_heads) +
                       " query heads per KV head (at most 16)");

  PKV_ASSIGN_OR_RETURN(std::shared_ptr<const Checkpoint> ckpt, Checkpoint::open(dir));
  const ConfigReader& c = ckpt->config();
  PKV_ASSIGN_OR_RETURN(m->eps_, read_norm_eps(c, "rms_norm_eps", 1e-6));
  PKV_ASSIGN_OR_RETURN(bool bias, c.get_bool_or("attention_bias", false));
  if (bias) return unsupported("attention_bias");
  PKV_ASSIGN_OR_RETURN(bool use_sw, c.get_bool_or("use_sliding_window", false));
  PKV_ASSIGN_OR_RETURN(auto layer_types, c.get_string_list_or_empty("layer_types"));
  for (const std::string& t : layer_types)
    if (t != "full_attention") use_sw = true;
  if (use_sw) return unsupported("sliding-window layers");
  PKV_ASSIGN_OR_RETURN(m->inter_, c.get_int("intermediate_size"));
  // qwen3_moe: the same fields and layer rule as families/qwen3.cc (which has
  // validated them by now).
  int64_t num_experts = 0, top_k = 0, moe_inter = 0, sparse_step = 1;
  bool norm_topk = false;
  std::vector<int64_t> mlp_only;
  if (moe_family) {
    PKV_ASSIGN_OR_RETURN(num_experts,
                         c.get_int(c.has("num_experts") ? "num_experts" : "num_local_experts"));
    PKV_ASSIGN_OR_RETURN(top_k, c.get_int("num_experts_per_tok"));
    PKV_ASSIGN_OR_RETURN(moe_inter, c.get_int("moe_intermediate_size"));
    PKV_ASSIGN_OR_RETURN(sparse_step, c.get_int_or("decoder_sparse_step", 1));
    PKV_ASSIGN_OR_RETURN(norm_topk, c.get_bool_or("norm_topk_prob", false));
    PKV_ASSIGN_OR_RETURN(mlp_only, c.get_int_list_or_empty("mlp_only_layers"));
    if (num_experts > 1024) return unsupported("more than 1024 experts");
  }

  backend::Backend& be = *m->be_;
  const int64_t H = mc.hidden_size, V = mc.vocab_size, NH = mc.num_attention_heads,
                KVH = mc.num_key_value_heads;
  PKV_ASSIGN_OR_RETURN(
      m->io_, load_embedding_weights(*ckpt, be, V, H, mc.tie_word_embeddings, "model.norm.weight"));
  m->layers_.resize(static_cast<size_t>(mc.num_hidden_layers));
  for (int32_t i = 0; i < mc.num_hidden_layers; ++i) {
    Layer& L = m->layers_[static_cast<size_t>(i)];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    PKV_RETURN_IF_ERROR(load_weights(*ckpt, be, p,
                                     {{&L.input_norm, "input_layernorm.weight", {H}},
                                      {&L.post_norm, "post_attention_layernorm.weight", {H}}}));
    bool in_mlp_only = false;
    for (int64_t x : mlp_only) in_mlp_only |= x == i;
    L.is_moe = moe_family && !in_mlp_only && num_experts > 0 && sparse_step > 0 &&
               (i + 1) % sparse_step == 0;
    if (L.is_moe) {
      PKV_ASSIGN_OR_RETURN(L.moe.router,
                           load_weight(*ckpt, be, p + "mlp.gate.weight", {num_experts, H}));
      L.moe.top_k = static_cast<int32_t>(top_k);
      L.moe.norm_topk_prob = norm_topk;
      L.moe.experts.resize(static_cast<size_t>(num_experts));
      for (int64_t e = 0; e < num_experts; ++e) {
        MlpWeights& ew = L.moe.experts[static_cast<size_t>(e)];
        PKV_RETURN_IF_ERROR(load_weights(*ckpt, be, p + "mlp.experts." + std::to_string(e) + ".",
                                         {{&ew.gate, "gate_proj.weight", {moe_inter, H}},
                                          {&ew.up, "up_proj.weight", {moe_inter, H}},
                                          {&ew.down, "down_proj.weight", {H, moe_inter}}}));
      }
    } else {
      PKV_RETURN_IF_ERROR(load_weights(*ckpt, be, p + "mlp.",
                                       {{&L.mlp.gate, "gate_proj.weight", {m->inter_, H}},
                                        {&L.mlp.up, "up_proj.weight", {m->inter_, H}},
                                        {&L.mlp.down, "down_proj.weight", {H, m->inter_}}}));
    }
    PKV_ASSIGN_OR_RETURN(L.attn,
                         load_attention_weights(*ckpt, be, p + "self_attn.", NH, KVH, D, H, false));
    if (!L.attn.q_norm || !L.attn.k_norm) return unsupported("qwen3 without q_norm/k_norm");
    PKV_ASSIGN_OR_RETURN(L.rope, parse_rope(c, D, "full_attention"));
  }

  // The pool's per-layer buffers: each reserves the address range of the most one
  // layer's K (or V) could ever take of this device, and maps memory as it grows.
  size_t free_b = 0, total_b = 0;
  PKV_CUDA_RETURN_IF_ERROR(cudaMemGetInfo(&free_b, &total_b));
  const size_t per_buffer = total_b / (2 * static_cast<size_t>(mc.num_hidden_layers)) + 1;
  PKV_ASSIGN_OR_RETURN(m->storage_, bc::CudaKVStorage::create(device, per_buffer));
  m->prof_.on = resolve_knob<bool>("PAGEDKV_CUDA_PROFILE", std::nullopt, false);
  m->graphs_on_ = resolve_knob<bool>("PAGEDKV_CUDA_GRAPHS", std::nullopt, true);
  m->device_greedy_ = resolve_knob<bool>("PAGEDKV_CUDA_DEVICE_SAMPLING", std::nullopt, true);
  m->draw_cap_ = m->device_greedy_ ? bc::kMaxTopEntries : 0;
  if (resolve_knob<bool>("PAGEDKV_CUDA_FUSED", std::nullopt, true)) {
    for (Layer& L : m->layers_) {
      PKV_ASSIGN_OR_RETURN(L.qkv, concat_rows({L.attn.q.get(), L.attn.k.get(), L.attn.v.get()}));
      L.attn.q.reset();
      L.attn.k.reset();
      L.attn.v.reset();
      if (L.is_moe) {
        std::vector<const Weight*> gu;
        for (const MlpWeights& ew : L.moe.experts) {
          gu.push_back(ew.gate.get());
          gu.push_back(ew.up.get());
        }
        PKV_ASSIGN_OR_RETURN(L.experts_gate_up, concat_rows(gu));
        for (MlpWeights& ew : L.moe.experts) {
          ew.gate.reset();
          ew.up.reset();
        }
        PKV_ASSIGN_OR_RETURN(L.expert_weights, expert_weight_pointers(L));
        continue;
      }
      PKV_ASSIGN_OR_RETURN(L.gate_up, concat_rows({L.mlp.gate.get(), L.mlp.up.get()}));
      L.mlp.gate.reset();
      L.mlp.up.reset();
    }
    m->fused_ = true;
  }
  m->fuse_norms_ = resolve_knob<bool>("PAGEDKV_CUDA_FUSED_NORMS", std::nullopt, true);
  m->early_keys_ = resolve_knob<bool>("PAGEDKV_CUDA_ATTN_EARLY_KEYS", std::nullopt, true);
  m->prep_trigger_ = resolve_knob<bool>("PAGEDKV_CUDA_PREP_EARLY_TRIGGER", std::nullopt, true);
  // One attention kernel for every launch of this model: each has its own fixed
  // order, so mixing them would make a query's bits depend on how it was launched.
  const std::string attention =
      resolve_knob<std::string>("PAGEDKV_CUDA_ATTENTION", std::nullopt, std::string("mma"));
  if (attention != "mma" && attention != "mma-bf16" && attention != "simt")
    return invalid_argument("PAGEDKV_CUDA_ATTENTION=" + attention +
                            ": use mma, mma-bf16 (q and the softmax weights rounded to bf16) or "
                            "simt");
  m->mma_operands_ = attention == "mma-bf16" ? bc::MmaOperands::kBf16 : bc::MmaOperands::kSplit;
  m->mma_attention_ =
      attention != "simt" &&
      bc::paged_attention_mma_supports(static_cast<int32_t>(mc.head_dim), static_cast<int32_t>(NH),
                                       static_cast<int32_t>(KVH), m->kv_type());
  m->moe_grouped_ = m->fused_;
  for (const Layer& L : m->layers_) {
    m->has_moe_ |= L.is_moe;
    if (L.is_moe) m->moe_grouped_ &= L.expert_weights.data() != nullptr;
  }
  return std::unique_ptr<Model>(std::move(m));
}

Status CudaQwen3Model::check_paged_store(KVBlockStore& store) const {
  const size_t block_bytes = static_cast<size_t>(geom_.block_size) * geom_.num_kv_heads *
                             geom_.head_dim * kv_dtype_size(geom_.dtype);
  cudaPointerAttributes attr{};
  const cudaError_t e = cudaPointerGetAttributes(&attr, store.k_block(0, 0));
  if (e != cudaSuccess || (attr.type != cudaMemoryTypeDevice && attr.type != cudaMemoryTypeManaged))
    return invalid_argument(
        "cuda model: the paged KV store is not in device memory (build the pool on "
        "Model::kv_storage(), as engine::make_paged_cache does)");
  const int32_t last = store.num_blocks() - 1;
  for (int32_t l = 0; l < geom_.num_layers; ++l) {
    const std::byte* k0 = store.k_block(l, 0);
    const std::byte* v0 = store.v_block(l, 0);
    if (store.k_block(l, last) != k0 + static_cast<size_t>(last) * block_bytes ||
        store.v_block(l, last) != v0 + static_cast<size_t>(last) * block_bytes)
      return invalid_argument("cuda model: layer " + std::to_string(l) +
                              " of the paged KV store is not one contiguous [blocks][block_size]"
                              " buffer");
  }
  return ok_status();
}

Status CudaQwen3Model::reserve_flat(const ForwardBatch& batch) {
  const size_t row_bytes =
      static_cast<size_t>(geom_.num_kv_heads) * geom_.head_dim * kv_dtype_size(geom_.dtype);
  const size_t layers2 = 2 * static_cast<size_t>(geom_.num_layers);
  for (const ForwardRow& row : batch.rows) {
    auto* d = dynamic_cast<DeviceFlatKV*>(row.flat->attachment());
    if (row.flat->attachment() != nullptr && d == nullptr)
      return invalid_argument("cuda model: a flat cache holds another backend's attachment");
    if (d == nullptr && row.context_len > 0)
      return invalid_argument(
          "cuda model: a flat cache holds " + std::to_string(row.context_len) +
          " tokens but no device copy of them (filled by another backend, or a copy failed)");
    if (d == nullptr) {
      auto fresh = std::make_unique<DeviceFlatKV>();
      d = fresh.get();
      row.flat->set_attachment(std::move(fresh));
    }
    const int32_t need = row.context_len + row.num_tokens;
    if (need <= d->capacity) continue;
    const int32_t bs = geom_.block_size;
    int32_t cap = d->capacity == 0 ? bs : d->capacity;
    while (cap < need) cap *= 2;
    cap = (cap + bs - 1) / bs * bs;
    PKV_ASSIGN_OR_RETURN(bc::DeviceBuffer nb,
                         bc::DeviceBuffer::allocate(layers2 * cap * row_bytes));
    // Keep the tokens already written (context_len of them) in every layer's K and V.
    const size_t keep = static_cast<size_t>(row.context_len) * row_bytes;
    for (size_t s = 0; s < layers2 && keep > 0; ++s) {
      PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(nb.as<std::byte>() + s * cap * row_bytes,
                                               d->buf.as<std::byte>() + s * d->capacity * row_bytes,
                                               keep, cudaMemcpyDeviceToDevice, stream()));
    }
    PKV_RETURN_IF_ERROR(be_->synchronize());
    d->buf = std::move(nb);
    d->capacity = cap;
  }
  return ok_status();
}

Status CudaQwen3Model::alloc_moe(int64_t T) {
  for (const Layer& L : layers_) {
    if (!L.is_moe) continue;
    const int64_t E = static_cast<int64_t>(L.moe.experts.size()), K = L.moe.top_k;
    const int64_t H = cfg_.hidden_size, TK = T * K, mi = L.moe.experts[0].down->cols();
    PKV_RETURN_IF_ERROR(scratch(kRouter, T * E).status());
    PKV_RETURN_IF_ERROR(scratch(kRouteIds, TK).status());
    PKV_RETURN_IF_ERROR(scratch(kRouteW, TK).status());
    PKV_RETURN_IF_ERROR(scratch(kMoeRows, moe_list_ints(TK, E)).status());
    PKV_RETURN_IF_ERROR(scratch(kMoeBegin, E + 1).status());
    PKV_RETURN_IF_ERROR(scratch(kResults, TK * H).status());
    PKV_RETURN_IF_ERROR(scratch(kMoeGU, TK * 2 * mi).status());
    PKV_RETURN_IF_ERROR(scratch(kMoeAct, TK * mi).status());
    PKV_RETURN_IF_ERROR(scratch(kYout, TK * H).status());
    PKV_RETURN_IF_ERROR(scratch(kXin, TK * H).status());
    break;  // every MoE layer has the same shape
  }
  return ok_status();
}

Status CudaQwen3Model::moe_ffn(const Layer& L, const float* h, int64_t T, float* y, bool grouped) {
  const MoeWeights& w = L.moe;
  const int32_t E = static_cast<int32_t>(w.experts.size()), K = w.top_k;
  const int64_t H = cfg_.hidden_size, TK = T * K;
  const int64_t mi = w.experts[0].down->cols();
  cudaStream_t st = stream();
  PKV_ASSIGN_OR_RETURN(float* logits, scratch(kRouter, T * E));
  PKV_ASSIGN_OR_RETURN(float* ids_f, scratch(kRouteIds, TK));
  PKV_ASSIGN_OR_RETURN(float* wts, scratch(kRouteW, TK));
  int32_t* ids = reinterpret_cast<int32_t*>(ids_f);
  PKV_RETURN_IF_ERROR(gemm(h, T, *w.router, logits));
  PKV_RETURN_IF_ERROR(
      bc::topk_route(logits, T, E, K, /*softmax_first=*/true, w.norm_topk_prob, ids, wts, st));
  // The device groups each expert's tokens (rows of h) and slots (token · K +
  // rank) in token order — the CPU's grouping — and cuts the list into bands.
  PKV_ASSIGN_OR_RETURN(float* lists_f, scratch(kMoeRows, moe_list_ints(TK, E)));
  PKV_ASSIGN_OR_RETURN(float* begin_f, scratch(kMoeBegin, E + 1));
  int32_t* d_rows = reinterpret_cast<int32_t*>(lists_f);
  int32_t* d_slots = d_rows + TK;
  int32_t* d_bands = d_slots + TK;
  int32_t* d_begin = reinterpret_cast<int32_t*>(begin_f);
  PKV_RETURN_IF_ERROR(bc::moe_group(ids, TK, K, E, d_begin, d_rows, d_slots, d_bands, st));
  PKV_ASSIGN_OR_RETURN(float* results, scratch(kResults, TK * H));
  PKV_ASSIGN_OR_RETURN(float* xin, scratch(kXin, TK * H));
  PKV_ASSIGN_OR_RETURN(float* yout, scratch(kYout, TK * H));
  PKV_ASSIGN_OR_RETURN(float* gu, scratch(kMoeGU, TK * 2 * mi));
  PKV_ASSIGN_OR_RETURN(float* act, scratch(kMoeAct, TK * mi));
  if (grouped) {
    // No host sync: the listed slots' rows of h in list order, every chosen
    // expert's [gate; up] GEMM in one launch, the SwiGLU, the down GEMMs in one
    // launch, each slot's row scaled into place. Only the listed slots are touched
    // (begin[E]: all TK, as the router's ids are in range).
    const int32_t* listed = d_begin + E;
    const int32_t bands = bc::moe_group_max_bands(TK, E);
    const auto* wp = L.expert_weights.as<const void*>();
    const Weight& gu_w = *L.experts_gate_up;
    const Weight& down_w = *w.experts[0].down;
    PKV_RETURN_IF_ERROR(bc::gather_rows(h, d_rows, TK, H, xin, st, listed));
    PKV_RETURN_IF_ERROR(
        bc::gemm_grouped(xin, T, H, wp, gu_w.dtype(), 2 * mi, d_begin, d_bands, bands, gu, st));
    PKV_RETURN_IF_ERROR(bc::silu_mul_halves(gu, TK, mi, act, st, listed));
    PKV_RETURN_IF_ERROR(
        bc::gemm_grouped(act, T, mi, wp + E, down_w.dtype(), H, d_begin, d_bands, bands, yout, st));
    PKV_RETURN_IF_ERROR(bc::scale_to_slots(yout, d_slots, wts, TK, H, results, st, listed));
    return bc::sum_ranks(results, T, K, H, y, st);
  }
  // Eager: the list bounds come to the host (one small copy and sync), and each
  // chosen expert runs on exactly its rows.
  PKV_ASSIGN_OR_RETURN(int32_t * hbegin, moe_pinned_.get(static_cast<size_t>(E) + 1));
  PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(hbegin, d_begin, (static_cast<size_t>(E) + 1) * 4,
                                           cudaMemcpyDeviceToHost, st));
  PKV_RETURN_IF_ERROR(be_->synchronize());
  if (hbegin[E] != TK)
    return internal_error("cuda moe: the router chose an expert id out of range");
  std::vector<int64_t> begin(hbegin, hbegin + E + 1);
  for (int32_t e = 0; e < E; ++e) {
    const int64_t b = begin[static_cast<size_t>(e)], M = begin[static_cast<size_t>(e) + 1] - b;
    if (M == 0) continue;  // an expert no token chose is skipped
    const MlpWeights& ew = w.experts[static_cast<size_t>(e)];
    PKV_RETURN_IF_ERROR(bc::gather_rows(h, d_rows + b, M, H, xin, st));
    if (L.experts_gate_up) {
      const Weight& g = *L.experts_gate_up;
      const void* we =
          static_cast<const std::byte*>(wdata(g)) + static_cast<size_t>(e) * 2 * mi * H * elem(g);
      PKV_RETURN_IF_ERROR(bc::gemm(xin, M, H, we, g.dtype(), 2 * mi, gu, st));
      PKV_RETURN_IF_ERROR(bc::silu_mul_halves(gu, M, mi, act, st));
    } else {
      PKV_RETURN_IF_ERROR(gemm(xin, M, *ew.gate, gu));
      PKV_RETURN_IF_ERROR(gemm(xin, M, *ew.up, gu + M * mi));
      PKV_RETURN_IF_ERROR(bc::silu_mul(gu, gu + M * mi, M * mi, act, st));
    }
    PKV_RETURN_IF_ERROR(gemm(act, M, *ew.down, yout));
    PKV_RETURN_IF_ERROR(bc::scale_to_slots(yout, d_slots + b, wts, M, H, results, st));
  }
  return bc::sum_ranks(results, T, K, H, y, st);
}

Status CudaQwen3Model::alloc_step(StepArgs* a, size_t n_ints) {
  const int64_t T = a->T, H = cfg_.hidden_size;
  const int64_t qd = int64_t{cfg_.num_attention_heads} * cfg_.head_dim,
                kd = int64_t{cfg_.num_key_value_heads} * cfg_.head_dim;
  PKV_ASSIGN_OR_RETURN(float* meta_f, scratch(kMeta, n_ints));
  int32_t* d_meta = reinterpret_cast<int32_t*>(meta_f);
  a->ids = d_meta;
  a->pos = d_meta + T;
  a->seq = d_meta + 2 * T;
  a->pick = d_meta + 3 * T;
  a->tab = d_meta + 3 * T + a->P;
  PKV_ASSIGN_OR_RETURN(a->x, scratch(kX, T * H));
  PKV_ASSIGN_OR_RETURN(a->h, scratch(kH, T * H));
  PKV_ASSIGN_OR_RETURN(a->y, scratch(kY, T * H));
  PKV_ASSIGN_OR_RETURN(a->q, scratch(kQ, T * qd));
  PKV_ASSIGN_OR_RETURN(a->k, scratch(kK, T * kd));
  PKV_ASSIGN_OR_RETURN(a->v, scratch(kV, T * kd));
  PKV_ASSIGN_OR_RETURN(a->attn, scratch(kAttn, T * qd));
  PKV_ASSIGN_OR_RETURN(a->g, scratch(kG, T * inter_));
  PKV_ASSIGN_OR_RETURN(a->u, scratch(kU, T * inter_));
  PKV_ASSIGN_OR_RETURN(a->ws, scratch(kWs, bc::attention_workspace_floats(
                                               static_cast<int32_t>(T), cfg_.num_attention_heads,
                                               cfg_.head_dim, a->max_pos)));
  if (fused_) {
    PKV_ASSIGN_OR_RETURN(a->qkv, scratch(kQKV, T * (qd + 2 * kd)));
    PKV_ASSIGN_OR_RETURN(a->gu, scratch(kGU, T * 2 * inter_));
  }
  if (has_moe_) PKV_RETURN_IF_ERROR(alloc_moe(T));
  if (a->P > 0) {
    PKV_ASSIGN_OR_RETURN(a->sel, scratch(kSel, a->P * H));
    PKV_ASSIGN_OR_RETURN(a->logits, scratch(kLogits, a->P * int64_t{cfg_.vocab_size}));
  }
  return ok_status();
}

void CudaQwen3Model::clear_graphs() {
  for (auto& [key, exec] : graphs_) cudaGraphExecDestroy(exec);
  graphs_.clear();
}

Status CudaQwen3Model::enqueue_step(const ForwardBatch& batch, const StepArgs& a) {
  const int64_t T = a.T, H = cfg_.hidden_size;
  const int32_t NH = cfg_.num_attention_heads, KVH = cfg_.num_key_value_heads, D = cfg_.head_dim;
  const int64_t qd = int64_t{NH} * D, kd = int64_t{KVH} * D;
  const int32_t bs = geom_.block_size;
  float *x = a.x, *h = a.h, *y = a.y, *q = a.q, *k = a.k, *v = a.v, *attn = a.attn, *g = a.g,
        *u = a.u;
  cudaStream_t st = stream();
  PKV_RETURN_IF_ERROR(
      bc::embedding(a.ids, T, wdata(*io_.embed), io_.embed->dtype(), io_.embed->rows(), H, x, st));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  // h's bf16 planes for the GEMM that reads h next, where its producer wrote them
  // (x_planes.h: the k-split GEMM's operands, written by the add + RMSNorm or SwiGLU).
  bc::XPlanes h_planes;
  auto planes_for = [&](const Weight* w) {
    return fuse_norms_ && w != nullptr ? bc::gemm_x_planes(T, w->cols(), w->rows(), w->dtype(), st)
                                       : bc::XPlanes{};
  };
  for (int32_t l = 0; l < geom_.num_layers; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    // Fused norms: the previous layer's residual add already normalized x into h.
    const bool prep = fuse_norms_ && L.qkv != nullptr;
    if (l == 0 || !fuse_norms_) {
      PKV_RETURN_IF_ERROR(rms_norm(x, T, *L.input_norm, h));
      h_planes = {};
    }
    if (L.qkv) {
      PKV_RETURN_IF_ERROR(bc::gemm_on_planes(h, h_planes, T, L.qkv->cols(), wdata(*L.qkv),
                                             L.qkv->dtype(), L.qkv->rows(), a.qkv, st));
      if (!prep) PKV_RETURN_IF_ERROR(bc::split_qkv(a.qkv, T, qd, kd, q, k, v, st));
    } else {
      PKV_RETURN_IF_ERROR(gemm(h, T, *L.attn.q, q));
      PKV_RETURN_IF_ERROR(gemm(h, T, *L.attn.k, k));
      PKV_RETURN_IF_ERROR(gemm(h, T, *L.attn.v, v));
    }
    if (!prep) {
      PKV_RETURN_IF_ERROR(rms_norm(q, T * NH, *L.attn.q_norm, q));
      PKV_RETURN_IF_ERROR(rms_norm(k, T * KVH, *L.attn.k_norm, k));
      PKV_RETURN_IF_ERROR(bc::rope(q, T, NH, D, a.pos, L.rope, st));
      PKV_RETURN_IF_ERROR(bc::rope(k, T, KVH, D, a.pos, L.rope, st));
    }
    // The K/V write: write_kv, or (prep) qkv_norm_rope_write's one pass over the
    // fused GEMM's output (norms, RoPE, q out, K/V into the cache).
    bc::QkvPrepParams qp;
    qp.num_heads = NH;
    qp.q_norm = wdata(*L.attn.q_norm);
    qp.k_norm = wdata(*L.attn.k_norm);
    qp.norm_dtype = L.attn.q_norm->dtype();
    qp.eps = eps_;
    auto write = [&](const bc::KvWriteParams& kw, int64_t first, int32_t n) -> Status {
      if (!prep) return bc::write_kv(kw, st);
      if (L.attn.k_norm->dtype() != qp.norm_dtype)
        return internal_error("cuda model: q_norm and k_norm differ in dtype");
      qp.qkv = a.qkv + first * (qd + 2 * kd);
      qp.q = q + first * qd;
      qp.num_tokens = n;
      qp.kv = kw;
      return bc::qkv_norm_rope_write(qp, L.rope, st);
    };

    bc::KvWriteParams w;
    w.num_kv_heads = KVH;
    w.head_dim = D;
    w.kv_type = kv_type();
    w.block_size = bs;
    bc::PagedAttentionParams p;
    p.num_heads = NH;
    p.num_kv_heads = KVH;
    p.head_dim = D;
    p.scale = scale;
    p.kv_type = kv_type();
    p.block_size = bs;
    p.workspace = a.ws;
    p.mma_operands = mma_operands_;
    if (a.paged) {
      w.k = k;
      w.v = v;
      w.num_tokens = static_cast<int32_t>(T);
      w.positions = a.pos;
      w.token_seq = a.seq;
      w.layout = bc::KvLayout::kBlockTable;
      w.k_cache = batch.kv_store->k_block(l, 0);
      w.v_cache = batch.kv_store->v_block(l, 0);
      w.block_tables = a.tab;
      w.max_blocks_per_seq = a.maxb;
      // A decode step (one token a row): the write is the kernel before attention
      // and stores only each token's own key; the others are earlier steps'. So the
      // decode blocks may copy them before their wait, and the write may let them
      // launch at its entry (timings only; the same bits): early_attention_keys.
      const EarlyKeys early = early_attention_keys(a);
      qp.trigger_next_at_entry = early.trigger;
      PKV_RETURN_IF_ERROR(write(w, 0, static_cast<int32_t>(T)));
      p.q = q;
      p.out = attn;
      p.num_tokens = static_cast<int32_t>(T);
      p.positions = a.pos;
      p.token_seq = a.seq;
      p.max_position = a.max_pos;
      p.layout = bc::KvLayout::kBlockTable;
      p.k_cache = w.k_cache;
      p.v_cache = w.v_cache;
      p.block_tables = a.tab;
      p.max_blocks_per_seq = a.maxb;
      p.decode_tokens = a.decode_tokens;
      p.max_query_len = a.max_query_len;
      p.min_query_len = a.min_query_len;
      p.packed_partitions = a.packed_partitions;
      p.keys_below_position_settled = early.settled;
      PKV_RETURN_IF_ERROR(attention(p, st));
    } else {
      // Flat: each row over its own contiguous device cache (only the addressing
      // differs from the paged launch above).
      const size_t row_bytes = static_cast<size_t>(kd) * kv_dtype_size(geom_.dtype);
      for (const ForwardRow& row : batch.rows) {
        auto* dev = static_cast<DeviceFlatKV*>(row.flat->attachment());
        std::byte* base = dev->buf.as<std::byte>();
        const size_t layer_bytes = static_cast<size_t>(dev->capacity) * row_bytes;
        w.k = k + row.first_token * kd;
        w.v = v + row.first_token * kd;
        w.num_tokens = row.num_tokens;
        w.positions = a.pos + row.first_token;
        w.token_seq = nullptr;
        w.layout = bc::KvLayout::kContiguous;
        w.k_cache = base + (2 * static_cast<size_t>(l)) * layer_bytes;
        w.v_cache = base + (2 * static_cast<size_t>(l) + 1) * layer_bytes;
        w.seq_capacity = dev->capacity;
        PKV_RETURN_IF_ERROR(write(w, row.first_token, row.num_tokens));
        p.q = q + row.first_token * qd;
        p.out = attn + row.first_token * qd;
        p.num_tokens = row.num_tokens;
        p.positions = a.pos + row.first_token;
        p.token_seq = nullptr;
        p.max_position = row.context_len + row.num_tokens - 1;
        p.layout = bc::KvLayout::kContiguous;
        p.k_cache = w.k_cache;
        p.v_cache = w.v_cache;
        p.seq_capacity = dev->capacity;
        p.max_query_len = row.num_tokens;
        p.min_query_len = row.num_tokens;
        PKV_RETURN_IF_ERROR(attention(p, st));
      }
    }
    PKV_RETURN_IF_ERROR(gemm(attn, T, *L.attn.o, y));
    if (fuse_norms_) {
      h_planes = L.is_moe ? bc::XPlanes{} : planes_for(L.gate_up.get());
      PKV_RETURN_IF_ERROR(bc::add_rms_norm(x, y, T, H, wdata(*L.post_norm), L.post_norm->dtype(),
                                           eps_, h, st, h_planes));
    } else {
      PKV_RETURN_IF_ERROR(bc::add(x, y, T * H, st));
      PKV_RETURN_IF_ERROR(rms_norm(x, T, *L.post_norm, h));
    }
    if (L.is_moe) {
      PKV_RETURN_IF_ERROR(moe_ffn(L, h, T, y, /*grouped=*/a.graph));
    } else if (L.gate_up) {
      PKV_RETURN_IF_ERROR(bc::gemm_on_planes(h, h_planes, T, L.gate_up->cols(), wdata(*L.gate_up),
                                             L.gate_up->dtype(), L.gate_up->rows(), a.gu, st));
      const bc::XPlanes g_planes = planes_for(L.mlp.down.get());
      PKV_RETURN_IF_ERROR(bc::silu_mul_halves(a.gu, T, inter_, g, st, g_planes));
      PKV_RETURN_IF_ERROR(bc::gemm_on_planes(g, g_planes, T, L.mlp.down->cols(), wdata(*L.mlp.down),
                                             L.mlp.down->dtype(), L.mlp.down->rows(), y, st));
    } else {
      PKV_RETURN_IF_ERROR(gemm(h, T, *L.mlp.gate, g));
      PKV_RETURN_IF_ERROR(gemm(h, T, *L.mlp.up, u));
      PKV_RETURN_IF_ERROR(bc::silu_mul(g, u, T * inter_, g, st));
      PKV_RETURN_IF_ERROR(gemm(g, T, *L.mlp.down, y));
    }
    if (fuse_norms_ && l + 1 < geom_.num_layers) {
      const Layer& N = layers_[static_cast<size_t>(l) + 1];
      const Weight& next = *N.input_norm;
      h_planes = planes_for(N.qkv.get());
      PKV_RETURN_IF_ERROR(
          bc::add_rms_norm(x, y, T, H, wdata(next), next.dtype(), eps_, h, st, h_planes));
    } else {
      PKV_RETURN_IF_ERROR(bc::add(x, y, T * H, st));
    }
  }
  if (a.P == 0) return ok_status();
  PKV_RETURN_IF_ERROR(bc::gather_rows(x, a.pick, a.P, H, a.sel, st));
  PKV_RETURN_IF_ERROR(rms_norm(a.sel, a.P, *io_.final_norm, a.sel));
  return gemm(a.sel, a.P, *io_.lm_head, a.logits);
}

Status CudaQwen3Model::forward(const ForwardBatch& batch, ForwardOutput* out) {
  const auto t_call = ProfClock::now();
  PKV_RETURN_IF_ERROR(validate_batch(batch, geom_, cfg_.vocab_size));
  PKV_CUDA_RETURN_IF_ERROR(cudaSetDevice(be_->device()));  // the engine's step thread
  const bool paged = batch.path == KVPath::kPaged;
  if (paged) {
    PKV_RETURN_IF_ERROR(check_paged_store(*batch.kv_store));
  } else {
    PKV_RETURN_IF_ERROR(reserve_flat(batch));
  }
  const int64_t T = batch.num_tokens();
  const int32_t R = static_cast<int32_t>(batch.rows.size());
  const int64_t V = cfg_.vocab_size;
  const int32_t bs = geom_.block_size;

  const std::vector<int64_t> pick = requested_logits_tokens(batch, cfg_.vocab_size, out);
  const int64_t P = static_cast<int64_t>(pick.size());
  int32_t maxb = 1, max_pos = 0;
  for (const ForwardRow& row : batch.rows) {
    const int32_t total = row.context_len + row.num_tokens;
    maxb = std::max(maxb, (total + bs - 1) / bs);
    max_pos = std::max(max_pos, total - 1);
  }
  // Rows whose caller needs only the greedy token (ForwardRow::greedy_only).
  out->tokens.assign(static_cast<size_t>(R), -1);
  bool any_greedy = false;
  for (const ForwardRow& row : batch.rows)
    any_greedy |= row.greedy_only && row.logits == LogitsRequest::kLast;
  // Seeded rows the caller lets us finish on the device (ForwardRow::draw), each
  // asked once a step how: by selection over the whole row (a draw without top-k;
  // its settings), or from its best entries. PAGEDKV_CUDA_SELECTION_DRAW=0 (read
  // once) never by selection, for A/B (the same tokens: the row's best entries, or
  // the row, instead).
  static const bool selection_draws = env_bool("PAGEDKV_CUDA_SELECTION_DRAW").value_or(true);
  std::vector<RowDrawWay>& draw_way = step_draw_way_;
  std::vector<SelectionSettings>& draw_set = step_draw_set_;
  draw_way.assign(static_cast<size_t>(R), RowDrawWay::kNone);
  draw_set.resize(static_cast<size_t>(R));
  bool any_draw = false;
  for (int32_t r = 0; r < R; ++r) {
    const ForwardRow& row = batch.rows[static_cast<size_t>(r)];
    if (draw_cap_ <= 0 || row.draw == nullptr || row.greedy_only ||
        row.logits != LogitsRequest::kLast)
      continue;
    any_draw = true;
    draw_way[static_cast<size_t>(r)] =
        selection_draws && row.draw->selection(&draw_set[static_cast<size_t>(r)])
            ? RowDrawWay::kSelection
            : RowDrawWay::kEntries;
  }
  auto is_draw = [&](int32_t r) { return draw_way[static_cast<size_t>(r)] != RowDrawWay::kNone; };
  auto by_selection = [&](int32_t r) {
    return draw_way[static_cast<size_t>(r)] == RowDrawWay::kSelection;
  };

  // A decode-sized paged step of a dense model replays a CUDA graph captured for
  // its bucket (tokens, block-table width, attention partitions), its tokens
  // padded to the bucket; the first step of a bucket runs eagerly (it loads the
  // kernels), the second captures.
  const int32_t parts = max_pos / bc::kAttnPartition + 1;
  // The attention partitions that requests behind one cached prefix read from the
  // same KV blocks: over every two consecutive rows that start with one block, the
  // fewest leading blocks they share, in whole partitions. Attention runs such
  // rows together there (a launch shape; the same bits).
  int64_t shared_tokens = -1;  // −1: no two consecutive rows share a block
  for (size_t r = 1; paged && r < batch.rows.size(); ++r) {
    const ForwardRow &prev = batch.rows[r - 1], &row = batch.rows[r];
    if (prev.block_tables.empty() || row.block_tables.empty()) continue;
    const auto &a_ids = prev.block_tables[0], &b_ids = row.block_tables[0];
    size_t same = 0;
    while (same < a_ids.size() && same < b_ids.size() && a_ids[same] == b_ids[same]) ++same;
    if (same == 0) continue;
    const int64_t tokens = static_cast<int64_t>(same) * bs;
    shared_tokens = shared_tokens < 0 ? tokens : std::min(shared_tokens, tokens);
  }
  const int32_t packed_partitions =
      shared_tokens > 0 ? static_cast<int32_t>(shared_tokens / bc::kAttnPartition) : 0;
  // A step with prompt rows runs its leading decode rows (the scheduler puts them
  // first) in attention launches of their own; a graph's count is rounded down to a
  // multiple of 8 (fewer graphs; the rows past it run in the prefill tiles).
  size_t lead = 0;
  while (lead < batch.rows.size() && batch.rows[lead].num_tokens == 1) ++lead;
  const bool prompt = lead < batch.rows.size();
  const int32_t decode_tokens = prompt ? static_cast<int32_t>(lead) : 0;
  const GraphKey key{token_bucket(static_cast<int32_t>(T)),
                     std::max(8, next_pow2(maxb)),
                     next_pow2(parts),
                     packed_partitions,
                     prompt,
                     decode_tokens / 8 * 8};
  // qwen3_moe runs its experts grouped in a graph (no host sync): needs the fused
  // [gate; up] expert weights and their pointer arrays.
  bool use_graph =
      graphs_on_ && paged && (!has_moe_ || moe_grouped_) && !prof_.on && T <= kMaxGraphTokens;
  if (use_graph && seen_.insert(key).second) use_graph = false;

  // The step's metadata, uploaded once: ids, positions, each token's row, the
  // requested logits rows, and (paged) every row's block table padded to the
  // table width. A graph step pads the tokens to the bucket: a padding token is
  // id 0 at position 0 of an extra row whose table is all null blocks, so its K/V
  // land in the null block (never read by a real row) and it attends only there.
  StepArgs a;
  a.paged = paged;
  a.graph = use_graph;
  a.T = use_graph ? key.tokens : T;
  a.P = use_graph ? key.tokens : P;
  a.maxb = use_graph ? key.width : maxb;
  a.max_pos = use_graph ? key.parts * bc::kAttnPartition - 1 : max_pos;
  a.packed_partitions = packed_partitions;
  a.decode_tokens = use_graph ? key.decode_tokens : decode_tokens;
  for (size_t r = static_cast<size_t>(a.decode_tokens); r < batch.rows.size(); ++r) {
    const int32_t n = batch.rows[r].num_tokens;
    a.max_query_len = std::max(a.max_query_len, n);
    a.min_query_len = a.min_query_len == 0 ? n : std::min(a.min_query_len, n);
  }
  const int64_t Tm = a.T, Pm = a.P;
  // After the metadata (padded to 8 bytes), the step's results region: the NaN flag
  // and a pad int, then the greedy rows' argmax keys (bc::argmax_keys; room for the
  // bucket's Pm, so the slot does not grow within a bucket). The metadata upload
  // zeroes the flag and the keys (no memset), and they come back in one copy.
  const size_t n_meta =
      (static_cast<size_t>(3 * Tm + Pm) + (paged ? static_cast<size_t>(Tm) * a.maxb : 0) + 1) / 2 *
      2;
  // The ints of the region the step moves each way: the flag, its pad and P keys
  // when the device takes the argmax, else the flag alone.
  const size_t n_results = any_greedy ? 2 + 2 * static_cast<size_t>(P) : 1;
  PKV_ASSIGN_OR_RETURN(int32_t * meta, pinned_.get(n_meta + 2 + 2 * static_cast<size_t>(Pm)));
  int32_t* h_ids = meta;
  int32_t* h_pos = h_ids + Tm;
  int32_t* h_seq = h_pos + Tm;
  int32_t* h_pick = h_seq + Tm;
  int32_t* h_tab = h_pick + Pm;
  std::memcpy(h_ids, batch.token_ids.data(), static_cast<size_t>(T) * sizeof(int32_t));
  std::memcpy(h_pos, batch.positions.data(), static_cast<size_t>(T) * sizeof(int32_t));
  std::fill(h_ids + T, h_ids + Tm, 0);
  std::fill(h_pos + T, h_pos + Tm, 0);
  std::fill(h_seq + T, h_seq + Tm, R);
  const size_t W = static_cast<size_t>(a.maxb);
  for (int32_t r = 0; r < R; ++r) {
    const ForwardRow& row = batch.rows[static_cast<size_t>(r)];
    std::fill(h_seq + row.first_token, h_seq + row.first_token + row.num_tokens, r);
    if (!paged) continue;
    const int32_t used = (row.context_len + row.num_tokens + bs - 1) / bs;
    std::copy_n(row.block_tables[0].data(), used, h_tab + static_cast<size_t>(r) * W);
    std::fill(h_tab + static_cast<size_t>(r) * W + used, h_tab + static_cast<size_t>(r + 1) * W, 0);
  }
  if (paged) std::fill(h_tab + static_cast<size_t>(R) * W, h_tab + static_cast<size_t>(Tm) * W, 0);
  for (int64_t i = 0; i < P; ++i) h_pick[i] = static_cast<int32_t>(pick[static_cast<size_t>(i)]);
  std::fill(h_pick + P, h_pick + Pm, 0);
  int32_t* h_nan = meta + n_meta;  // the results region's host copy: the flag, the keys
  std::fill(h_nan, h_nan + n_results, 0);
  auto* h_keys = reinterpret_cast<const unsigned long long*>(h_nan + 2);
  PKV_RETURN_IF_ERROR(alloc_step(&a, n_meta + 2 + 2 * static_cast<size_t>(Pm)));
  cudaStream_t st = stream();
  PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(const_cast<int32_t*>(a.ids), meta,
                                           (n_meta + n_results) * sizeof(int32_t),
                                           cudaMemcpyHostToDevice, st));
  int32_t* d_nan = const_cast<int32_t*>(a.ids) + n_meta;
  const auto t_uploaded = ProfClock::now();

  auto t_step = ProfClock::now();
  if (use_graph) {
    // A graph holds the addresses it was captured with: the scratch buffers and
    // the pool's layer buffers (which move when the pool grows by generation swap).
    std::vector<const void*> bases(2 * static_cast<size_t>(geom_.num_layers));
    for (int32_t l = 0; l < geom_.num_layers; ++l) {
      bases[2 * static_cast<size_t>(l)] = batch.kv_store->k_block(l, 0);
      bases[2 * static_cast<size_t>(l) + 1] = batch.kv_store->v_block(l, 0);
    }
    if (bases != kv_bases_ || scratch_gen_ != graphs_gen_) {
      clear_graphs();
      kv_bases_ = std::move(bases);
      graphs_gen_ = scratch_gen_;
    }
    auto it = graphs_.find(key);
    if (it == graphs_.end()) {
      PKV_CUDA_RETURN_IF_ERROR(cudaStreamBeginCapture(st, cudaStreamCaptureModeRelaxed));
      Status enq = enqueue_step(batch, a);
      cudaGraph_t graph = nullptr;
      const cudaError_t end = cudaStreamEndCapture(st, &graph);
      if (!enq.ok()) {
        if (graph != nullptr) cudaGraphDestroy(graph);
        return enq;
      }
      PKV_CUDA_RETURN_IF_ERROR(end);
      cudaGraphExec_t exec = nullptr;
      const cudaError_t inst = cudaGraphInstantiate(&exec, graph, 0);
      cudaGraphDestroy(graph);
      PKV_CUDA_RETURN_IF_ERROR(inst);
      it = graphs_.emplace(key, exec).first;
      ++stats_.graph_captures;
    }
    ++stats_.graph_replays;
    PKV_CUDA_RETURN_IF_ERROR(cudaGraphLaunch(it->second, st));
  } else {
    PKV_RETURN_IF_ERROR(enqueue_step(batch, a));
  }

  const auto t_launched = ProfClock::now();
  if (prof_.on) {
    prof_.enqueue_ms += ms_since(t_step);
    t_step = ProfClock::now();
    PKV_RETURN_IF_ERROR(be_->synchronize());
    prof_.layers_ms += ms_since(t_step);
    t_step = ProfClock::now();
  }
  int32_t* h_draw = nullptr;  // seeded rows: [n][2] counts, then their entries
  int32_t* h_sel = nullptr;   // rows without top-k: their selection draws' tokens
  bool all_copied = true;
  if (P > 0) {
    // The NaN check runs on the device; the host scan (check_logits, which names
    // the row and id) only when it found one.
    if (any_greedy) {
      // Greedy rows: the argmax on the device (engine::argmax's rule), P keys back;
      // its one pass over every row sets the NaN flag too.
      PKV_RETURN_IF_ERROR(bc::argmax_keys(
          a.logits, P, V, reinterpret_cast<unsigned long long*>(d_nan + 2), d_nan, st));
    } else {
      PKV_RETURN_IF_ERROR(bc::flag_nan(a.logits, P * V, d_nan, st));
    }
    PKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_nan, d_nan, n_results * sizeof(int32_t), cudaMemcpyDeviceToHost, st));
    // The logits rows the caller reads, in runs of consecutive rows.
    int64_t run_begin = 0, run_end = 0;
    auto flush = [&]() -> Status {
      if (run_end > run_begin)
        PKV_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(out->logits.data() + run_begin * V, a.logits + run_begin * V,
                            static_cast<size_t>((run_end - run_begin) * V) * sizeof(float),
                            cudaMemcpyDeviceToHost, st));
      run_begin = run_end = 0;
      return ok_status();
    };
    for (int32_t r = 0; r < R; ++r) {
      const ForwardRow& row = batch.rows[static_cast<size_t>(r)];
      const int64_t b = out->row_begin[static_cast<size_t>(r)],
                    n = out->row_count[static_cast<size_t>(r)];
      if (n == 0) continue;
      if ((row.greedy_only && row.logits == LogitsRequest::kLast) || is_draw(r)) {
        all_copied = false;
        continue;
      }
      if (run_end != b) PKV_RETURN_IF_ERROR(flush());
      if (run_end == run_begin) run_begin = b;
      run_end = b + n;
    }
    PKV_RETURN_IF_ERROR(flush());
    if (any_draw) {
      // Seeded rows without top-k: their draw by selection over the whole row
      // (backend/cuda/selection_draw.h), certified or declined (then the row is
      // copied). The others: each row's best entries in the sampler's order (as
      // many as its draw may need), and the counts, back in one copy.
      int32_t n = 0, total = 0, ns = 0;
      for (int32_t r = 0; r < R; ++r) {
        if (!is_draw(r)) continue;
        if (by_selection(r)) {
          ++ns;
        } else {
          ++n;
          total += std::clamp(batch.rows[static_cast<size_t>(r)].draw->entries(), 1, draw_cap_);
        }
      }
      if (n > 0) {
        PKV_ASSIGN_OR_RETURN(int32_t * jobs, draw_jobs_pinned_.get(3 * static_cast<size_t>(n)));
        int32_t j = 0, off = 0;
        for (int32_t r = 0; r < R; ++r) {
          const ForwardRow& row = batch.rows[static_cast<size_t>(r)];
          if (!is_draw(r) || by_selection(r)) continue;
          const int32_t want = std::clamp(row.draw->entries(), 1, draw_cap_);
          jobs[3 * j] = out->row_begin[static_cast<size_t>(r)];
          jobs[3 * j + 1] = want;
          jobs[3 * j + 2] = off;
          off += want;
          ++j;
        }
        const size_t out_ints = 2 * static_cast<size_t>(n) + 2 * static_cast<size_t>(total);
        PKV_ASSIGN_OR_RETURN(float* jobs_f, scratch(kDrawJobs, 3 * static_cast<size_t>(n)));
        PKV_ASSIGN_OR_RETURN(float* dout_f, scratch(kDrawOut, out_ints));
        int32_t* d_counts = reinterpret_cast<int32_t*>(dout_f);
        PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(jobs_f, jobs, 3 * static_cast<size_t>(n) * 4,
                                                 cudaMemcpyHostToDevice, st));
        PKV_RETURN_IF_ERROR(bc::top_entries(a.logits, V, reinterpret_cast<const int32_t*>(jobs_f),
                                            n, reinterpret_cast<bc::TopEntry*>(d_counts + 2 * n),
                                            d_counts, st));
        PKV_ASSIGN_OR_RETURN(h_draw, draw_out_pinned_.get(out_ints));
        PKV_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(h_draw, d_counts, out_ints * 4, cudaMemcpyDeviceToHost, st));
      }
      if (ns > 0) {
        constexpr size_t kJobInts = sizeof(bc::SelectionJob) / sizeof(int32_t);
        static_assert(kJobInts * sizeof(int32_t) == sizeof(bc::SelectionJob));
        const size_t ints = (kJobInts + 1) * static_cast<size_t>(ns);  // jobs, then tokens
        // At least the workspace of 128 rows (~4 MiB), so that the slot does not grow
        // (and invalidate every captured decode graph) as the sampled rows ramp up.
        const size_t work_floats = std::max(bc::selection_draw_workspace_bytes(ns),
                                            bc::selection_draw_workspace_bytes(128)) /
                                   sizeof(float);
        PKV_ASSIGN_OR_RETURN(int32_t * sel, selection_pinned_.get(ints));
        auto* sel_jobs = reinterpret_cast<bc::SelectionJob*>(sel);
        int32_t js = 0;
        for (int32_t r = 0; r < R; ++r) {
          if (!by_selection(r)) continue;
          const SelectionSettings& set = draw_set[static_cast<size_t>(r)];
          sel_jobs[js++] =
              bc::SelectionJob{static_cast<int32_t>(out->row_begin[static_cast<size_t>(r)]),
                               set.inv_t, set.u, set.top_p, set.min_p};
        }
        // The device side: the workspace (8-byte aligned), then the jobs and tokens.
        PKV_ASSIGN_OR_RETURN(float* sel_f, scratch(kSelection, work_floats + ints));
        auto* d_jobs = reinterpret_cast<bc::SelectionJob*>(sel_f + work_floats);
        int32_t* d_sel = reinterpret_cast<int32_t*>(sel_f + work_floats) + kJobInts * ns;
        PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(d_jobs, sel_jobs, sizeof(bc::SelectionJob) * ns,
                                                 cudaMemcpyHostToDevice, st));
        PKV_RETURN_IF_ERROR(bc::selection_draw(a.logits, V, d_jobs, ns, d_sel, sel_f, st));
        h_sel = sel + kJobInts * ns;
        PKV_CUDA_RETURN_IF_ERROR(
            cudaMemcpyAsync(h_sel, d_sel, sizeof(int32_t) * ns, cudaMemcpyDeviceToHost, st));
      }
    }
  }
  PKV_RETURN_IF_ERROR(be_->synchronize());
  const auto t_results = ProfClock::now();
  for (const ForwardRow& row : batch.rows)
    if (!paged) row.flat->set_length(row.context_len + row.num_tokens);
  if (any_greedy)  // (a greedy row asks for its last logits, so P > 0)
    for (int32_t r = 0; r < R; ++r) {
      const ForwardRow& row = batch.rows[static_cast<size_t>(r)];
      if (row.greedy_only && row.logits == LogitsRequest::kLast) {
        out->tokens[static_cast<size_t>(r)] =
            bc::argmax_key_id(h_keys[out->row_begin[static_cast<size_t>(r)]]);
        ++stats_.device_greedy_rows;
      }
    }
  auto nan_check = [&]() -> Status {
    if (*h_nan == 0) return ok_status();
    if (!all_copied)  // the scan needs every row on the host
      PKV_CUDA_RETURN_IF_ERROR(cudaMemcpy(out->logits.data(), a.logits,
                                          static_cast<size_t>(P * V) * sizeof(float),
                                          cudaMemcpyDeviceToHost));
    return check_logits(*out);
  };
  // The seeded draws: a row without top-k takes its selection draw's token, the
  // others are finished on the host from their best entries; a draw the selection
  // declined or that needs more entries (a candidate list longer than them) gets
  // the row.
  auto finish_draws = [&]() -> Status {
    if ((h_draw == nullptr && h_sel == nullptr) || *h_nan != 0)
      return ok_status();  // NaN: the check's error
    int32_t n = 0;         // the rows drawn from their best entries
    for (int32_t r = 0; r < R; ++r) n += is_draw(r) && !by_selection(r) ? 1 : 0;
    static_assert(sizeof(bc::TopEntry) == sizeof(DrawEntry));
    const auto* entries =
        h_draw != nullptr ? reinterpret_cast<const DrawEntry*>(h_draw + 2 * n) : nullptr;
    int32_t j = 0, off = 0, js = 0;
    for (int32_t r = 0; r < R; ++r) {
      const ForwardRow& row = batch.rows[static_cast<size_t>(r)];
      if (!is_draw(r)) continue;
      int32_t tok = -1;
      if (by_selection(r)) {
        tok = h_sel[js++];  // certified: the sorted draw's token (selection_draw.h), or -1
        if (tok >= 0) ++stats_.device_selection_rows;
      } else {
        const int32_t want = std::clamp(row.draw->entries(), 1, draw_cap_);
        const int32_t got = h_draw[2 * j], valid = h_draw[2 * j + 1];
        tok = row.draw->draw(std::span<const DrawEntry>(entries + off, static_cast<size_t>(got)),
                             got == valid);
        off += want;
        ++j;
      }
      if (tok >= 0) {
        out->tokens[static_cast<size_t>(r)] = tok;
        ++stats_.device_draw_rows;
        continue;
      }
      const int64_t b = out->row_begin[static_cast<size_t>(r)];
      PKV_CUDA_RETURN_IF_ERROR(cudaMemcpy(out->logits.data() + b * V, a.logits + b * V,
                                          static_cast<size_t>(V) * sizeof(float),
                                          cudaMemcpyDeviceToHost));
      ++stats_.device_draw_fallbacks;
    }
    return ok_status();
  };
  if (!prof_.on) {
    PKV_RETURN_IF_ERROR(nan_check());
    PKV_RETURN_IF_ERROR(finish_draws());
    using Ms = std::chrono::duration<double, std::milli>;
    stats_.before_upload_ms += Ms(t_uploaded - t_call).count();
    stats_.upload_to_launched_ms += Ms(t_launched - t_uploaded).count();
    stats_.launch_to_results_ms += Ms(t_results - t_launched).count();
    stats_.after_results_ms += ms_since(t_results);
    return ok_status();
  }
  prof_.logits_ms += ms_since(t_step);
  t_step = ProfClock::now();
  Status checked = nan_check();
  if (checked.ok()) checked = finish_draws();
  prof_.check_ms += ms_since(t_step);
  ++prof_.steps;
  return checked;
}
}  // namespace

CudaModelStats cuda_model_stats(const Model& m) {
  const auto* c = dynamic_cast<const CudaQwen3Model*>(&m);
  return c != nullptr ? c->stats() : CudaModelStats{};
}

StatusOr<std::unique_ptr<Model>> load_cuda_model(const std::string& dir, const LoadOptions& options,
                                                 int device) {
  return CudaQwen3Model::create(dir, options, device);
}

}  // namespace pagedkv::model::cuda
