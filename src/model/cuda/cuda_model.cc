// The device-resident qwen3 / qwen3_moe forward (see cuda_model.h).
#include "model/cuda/cuda_model.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/vmm_kv_storage.h"
#include "model/checkpoint.h"
#include "model/flat_kv_cache.h"
#include "model/layers.h"
#include "util/knobs.h"

namespace pagedkv::model::cuda {
namespace {

namespace bc = backend::cuda;
using backend::Weight;

const void* wdata(const Weight& w) { return static_cast<const bc::CudaWeight&>(w).data(); }

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

struct Layer {
  WeightPtr input_norm, post_norm;
  AttentionWeights attn;
  MlpWeights mlp;
  backend::RopeParams rope;
  // qwen3_moe's sparse layers: softmax router, top_k experts (MoeWeights::experts).
  bool is_moe = false;
  MoeWeights moe;
};

class CudaQwen3Model final : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  const KVGeometry& kv_geometry() const override { return geom_; }
  std::shared_ptr<kv::KVStorage> kv_storage() const override { return storage_; }
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;
  ~CudaQwen3Model() override {
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
    kNanFlag,
    kSlots
  };
  StatusOr<float*> scratch(Slot s, size_t floats);
  Status gemm(const float* x, int64_t m, const Weight& w, float* y) {
    return bc::gemm(x, m, w.cols(), wdata(w), w.dtype(), w.rows(), y, stream());
  }
  Status rms_norm(const float* x, int64_t m, const Weight& w, float* y) {
    return bc::rms_norm(x, m, w.cols(), wdata(w), w.dtype(), eps_, false, y, stream());
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
  Status moe_ffn(const Layer& L, const float* h, int64_t T, float* y);

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
  PinnedInts pinned_, moe_pinned_, nan_pinned_;
  StepProfile prof_;
};

StatusOr<float*> CudaQwen3Model::scratch(Slot s, size_t floats) {
  bc::DeviceBuffer& b = slots_[s];
  const size_t bytes = std::max<size_t>(floats, 1) * sizeof(float);
  if (b.size() < bytes) {
    PKV_RETURN_IF_ERROR(be_->synchronize());  // the old buffer may still be in use
    b.reset();
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

Status CudaQwen3Model::moe_ffn(const Layer& L, const float* h, int64_t T, float* y) {
  const MoeWeights& w = L.moe;
  const int32_t E = static_cast<int32_t>(w.experts.size()), K = w.top_k;
  const int64_t H = cfg_.hidden_size, TK = T * K;
  const int64_t mi = w.experts[0].gate->rows();
  cudaStream_t st = stream();
  PKV_ASSIGN_OR_RETURN(float* logits, scratch(kRouter, T * E));
  PKV_ASSIGN_OR_RETURN(float* ids_f, scratch(kRouteIds, TK));
  PKV_ASSIGN_OR_RETURN(float* wts, scratch(kRouteW, TK));
  int32_t* ids = reinterpret_cast<int32_t*>(ids_f);
  PKV_RETURN_IF_ERROR(gemm(h, T, *w.router, logits));
  PKV_RETURN_IF_ERROR(
      bc::topk_route(logits, T, E, K, /*softmax_first=*/true, w.norm_topk_prob, ids, wts, st));
  // Host: the ids, then per expert its tokens (rows of h) and their slots
  // (token · K + rank), in token order — the CPU's grouping.
  PKV_ASSIGN_OR_RETURN(int32_t * hbuf, moe_pinned_.get(static_cast<size_t>(3 * TK)));
  PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(hbuf, ids, static_cast<size_t>(TK) * sizeof(int32_t),
                                           cudaMemcpyDeviceToHost, st));
  PKV_RETURN_IF_ERROR(be_->synchronize());
  int32_t* rows = hbuf + TK;
  int32_t* slots = rows + TK;
  std::vector<int64_t> begin(static_cast<size_t>(E) + 1, 0);
  int64_t n = 0;
  for (int32_t e = 0; e < E; ++e) {
    begin[static_cast<size_t>(e)] = n;
    for (int64_t s = 0; s < TK; ++s) {
      if (hbuf[s] != e) continue;
      rows[n] = static_cast<int32_t>(s / K);
      slots[n] = static_cast<int32_t>(s);
      ++n;
    }
  }
  begin[static_cast<size_t>(E)] = n;
  if (n != TK) return internal_error("cuda moe: the router chose an expert id out of range");
  PKV_ASSIGN_OR_RETURN(float* lists_f, scratch(kMoeRows, 2 * TK));
  int32_t* d_rows = reinterpret_cast<int32_t*>(lists_f);
  int32_t* d_slots = d_rows + TK;
  PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(
      d_rows, rows, static_cast<size_t>(2 * TK) * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  PKV_ASSIGN_OR_RETURN(float* xin, scratch(kXin, TK * H));
  PKV_ASSIGN_OR_RETURN(float* yout, scratch(kYout, TK * H));
  PKV_ASSIGN_OR_RETURN(float* results, scratch(kResults, TK * H));
  PKV_ASSIGN_OR_RETURN(float* g, scratch(kG, std::max(T * inter_, TK * mi)));
  PKV_ASSIGN_OR_RETURN(float* u, scratch(kU, std::max(T * inter_, TK * mi)));
  for (int32_t e = 0; e < E; ++e) {
    const int64_t b = begin[static_cast<size_t>(e)], M = begin[static_cast<size_t>(e) + 1] - b;
    if (M == 0) continue;  // an expert no token chose is skipped
    const MlpWeights& ew = w.experts[static_cast<size_t>(e)];
    PKV_RETURN_IF_ERROR(bc::gather_rows(h, d_rows + b, M, H, xin, st));
    PKV_RETURN_IF_ERROR(gemm(xin, M, *ew.gate, g));
    PKV_RETURN_IF_ERROR(gemm(xin, M, *ew.up, u));
    PKV_RETURN_IF_ERROR(bc::silu_mul(g, u, M * mi, g, st));
    PKV_RETURN_IF_ERROR(gemm(g, M, *ew.down, yout));
    PKV_RETURN_IF_ERROR(bc::scale_to_slots(yout, d_slots + b, wts, M, H, results, st));
  }
  return bc::sum_ranks(results, T, K, H, y, st);
}

Status CudaQwen3Model::forward(const ForwardBatch& batch, ForwardOutput* out) {
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
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  const int32_t NH = cfg_.num_attention_heads, KVH = cfg_.num_key_value_heads, D = cfg_.head_dim;
  const int64_t qd = int64_t{NH} * D, kd = int64_t{KVH} * D;
  const int32_t bs = geom_.block_size;

  // The step's metadata, uploaded once: ids, positions, each token's row, the
  // requested logits rows, and (paged) every row's block table padded to maxb.
  const std::vector<int64_t> pick = requested_logits_tokens(batch, cfg_.vocab_size, out);
  const int64_t P = static_cast<int64_t>(pick.size());
  int32_t maxb = 1, max_pos = 0;
  for (const ForwardRow& row : batch.rows) {
    const int32_t total = row.context_len + row.num_tokens;
    maxb = std::max(maxb, (total + bs - 1) / bs);
    max_pos = std::max(max_pos, total - 1);
  }
  const size_t n_meta = static_cast<size_t>(3 * T + P) + (paged ? size_t{1} * R * maxb : 0);
  PKV_ASSIGN_OR_RETURN(int32_t * meta, pinned_.get(n_meta));
  int32_t* h_ids = meta;
  int32_t* h_pos = h_ids + T;
  int32_t* h_seq = h_pos + T;
  int32_t* h_pick = h_seq + T;
  int32_t* h_tab = h_pick + P;
  std::memcpy(h_ids, batch.token_ids.data(), static_cast<size_t>(T) * sizeof(int32_t));
  std::memcpy(h_pos, batch.positions.data(), static_cast<size_t>(T) * sizeof(int32_t));
  for (int32_t r = 0; r < R; ++r) {
    const ForwardRow& row = batch.rows[static_cast<size_t>(r)];
    std::fill(h_seq + row.first_token, h_seq + row.first_token + row.num_tokens, r);
    if (!paged) continue;
    const int32_t used = (row.context_len + row.num_tokens + bs - 1) / bs;
    std::copy_n(row.block_tables[0].data(), used, h_tab + static_cast<size_t>(r) * maxb);
    std::fill(h_tab + static_cast<size_t>(r) * maxb + used,
              h_tab + static_cast<size_t>(r + 1) * maxb, 0);
  }
  for (int64_t i = 0; i < P; ++i) h_pick[i] = static_cast<int32_t>(pick[static_cast<size_t>(i)]);
  PKV_ASSIGN_OR_RETURN(float* meta_dev_f, scratch(kMeta, n_meta));
  int32_t* d_meta = reinterpret_cast<int32_t*>(meta_dev_f);
  PKV_CUDA_RETURN_IF_ERROR(
      cudaMemcpyAsync(d_meta, meta, n_meta * sizeof(int32_t), cudaMemcpyHostToDevice, stream()));
  const int32_t* d_ids = d_meta;
  const int32_t* d_pos = d_ids + T;
  const int32_t* d_seq = d_pos + T;
  const int32_t* d_pick = d_seq + T;
  const int32_t* d_tab = d_pick + P;

  PKV_ASSIGN_OR_RETURN(float* x, scratch(kX, T * H));
  PKV_ASSIGN_OR_RETURN(float* h, scratch(kH, T * H));
  PKV_ASSIGN_OR_RETURN(float* y, scratch(kY, T * H));
  PKV_ASSIGN_OR_RETURN(float* q, scratch(kQ, T * qd));
  PKV_ASSIGN_OR_RETURN(float* k, scratch(kK, T * kd));
  PKV_ASSIGN_OR_RETURN(float* v, scratch(kV, T * kd));
  PKV_ASSIGN_OR_RETURN(float* attn, scratch(kAttn, T * qd));
  PKV_ASSIGN_OR_RETURN(float* g, scratch(kG, T * inter_));
  PKV_ASSIGN_OR_RETURN(float* u, scratch(kU, T * inter_));
  PKV_ASSIGN_OR_RETURN(float* ws, scratch(kWs, bc::attention_workspace_floats(
                                                   static_cast<int32_t>(T), NH, D, max_pos)));

  cudaStream_t st = stream();
  auto t_step = ProfClock::now();
  PKV_RETURN_IF_ERROR(
      bc::embedding(d_ids, T, wdata(*io_.embed), io_.embed->dtype(), io_.embed->rows(), H, x, st));
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  for (int32_t l = 0; l < geom_.num_layers; ++l) {
    const Layer& L = layers_[static_cast<size_t>(l)];
    PKV_RETURN_IF_ERROR(rms_norm(x, T, *L.input_norm, h));
    PKV_RETURN_IF_ERROR(gemm(h, T, *L.attn.q, q));
    PKV_RETURN_IF_ERROR(gemm(h, T, *L.attn.k, k));
    PKV_RETURN_IF_ERROR(gemm(h, T, *L.attn.v, v));
    PKV_RETURN_IF_ERROR(rms_norm(q, T * NH, *L.attn.q_norm, q));
    PKV_RETURN_IF_ERROR(rms_norm(k, T * KVH, *L.attn.k_norm, k));
    PKV_RETURN_IF_ERROR(bc::rope(q, T, NH, D, d_pos, L.rope, st));
    PKV_RETURN_IF_ERROR(bc::rope(k, T, KVH, D, d_pos, L.rope, st));

    bc::KvWriteParams w;
    w.num_kv_heads = KVH;
    w.head_dim = D;
    w.kv_type = kv_type();
    w.block_size = bs;
    bc::PagedAttentionParams a;
    a.num_heads = NH;
    a.num_kv_heads = KVH;
    a.head_dim = D;
    a.scale = scale;
    a.kv_type = kv_type();
    a.block_size = bs;
    a.workspace = ws;
    if (paged) {
      w.k = k;
      w.v = v;
      w.num_tokens = static_cast<int32_t>(T);
      w.positions = d_pos;
      w.token_seq = d_seq;
      w.layout = bc::KvLayout::kBlockTable;
      w.k_cache = batch.kv_store->k_block(l, 0);
      w.v_cache = batch.kv_store->v_block(l, 0);
      w.block_tables = d_tab;
      w.max_blocks_per_seq = maxb;
      PKV_RETURN_IF_ERROR(bc::write_kv(w, st));
      a.q = q;
      a.out = attn;
      a.num_tokens = static_cast<int32_t>(T);
      a.positions = d_pos;
      a.token_seq = d_seq;
      a.max_position = max_pos;
      a.layout = bc::KvLayout::kBlockTable;
      a.k_cache = w.k_cache;
      a.v_cache = w.v_cache;
      a.block_tables = d_tab;
      a.max_blocks_per_seq = maxb;
      PKV_RETURN_IF_ERROR(bc::paged_attention(a, st));
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
        w.positions = d_pos + row.first_token;
        w.token_seq = nullptr;
        w.layout = bc::KvLayout::kContiguous;
        w.k_cache = base + (2 * static_cast<size_t>(l)) * layer_bytes;
        w.v_cache = base + (2 * static_cast<size_t>(l) + 1) * layer_bytes;
        w.seq_capacity = dev->capacity;
        PKV_RETURN_IF_ERROR(bc::write_kv(w, st));
        a.q = q + row.first_token * qd;
        a.out = attn + row.first_token * qd;
        a.num_tokens = row.num_tokens;
        a.positions = d_pos + row.first_token;
        a.token_seq = nullptr;
        a.max_position = row.context_len + row.num_tokens - 1;
        a.layout = bc::KvLayout::kContiguous;
        a.k_cache = w.k_cache;
        a.v_cache = w.v_cache;
        a.seq_capacity = dev->capacity;
        PKV_RETURN_IF_ERROR(bc::paged_attention(a, st));
      }
    }
    PKV_RETURN_IF_ERROR(gemm(attn, T, *L.attn.o, y));
    PKV_RETURN_IF_ERROR(bc::add(x, y, T * H, st));
    PKV_RETURN_IF_ERROR(rms_norm(x, T, *L.post_norm, h));
    if (L.is_moe) {
      PKV_RETURN_IF_ERROR(moe_ffn(L, h, T, y));
    } else {
      PKV_RETURN_IF_ERROR(gemm(h, T, *L.mlp.gate, g));
      PKV_RETURN_IF_ERROR(gemm(h, T, *L.mlp.up, u));
      PKV_RETURN_IF_ERROR(bc::silu_mul(g, u, T * inter_, g, st));
      PKV_RETURN_IF_ERROR(gemm(g, T, *L.mlp.down, y));
    }
    PKV_RETURN_IF_ERROR(bc::add(x, y, T * H, st));
  }

  if (prof_.on) {
    prof_.enqueue_ms += ms_since(t_step);
    t_step = ProfClock::now();
    PKV_RETURN_IF_ERROR(be_->synchronize());
    prof_.layers_ms += ms_since(t_step);
    t_step = ProfClock::now();
  }
  PKV_ASSIGN_OR_RETURN(int32_t * h_nan, nan_pinned_.get(1));
  *h_nan = 0;
  if (P > 0) {
    PKV_ASSIGN_OR_RETURN(float* nan_f, scratch(kNanFlag, 1));
    int32_t* nan_flag = reinterpret_cast<int32_t*>(nan_f);
    PKV_ASSIGN_OR_RETURN(float* sel, scratch(kSel, P * H));
    PKV_ASSIGN_OR_RETURN(float* logits, scratch(kLogits, P * V));
    PKV_RETURN_IF_ERROR(bc::gather_rows(x, d_pick, P, H, sel, st));
    PKV_RETURN_IF_ERROR(rms_norm(sel, P, *io_.final_norm, sel));
    PKV_RETURN_IF_ERROR(gemm(sel, P, *io_.lm_head, logits));
    // The NaN check runs on the device; the host scan (check_logits, which names
    // the row and id) only when it found one.
    PKV_CUDA_RETURN_IF_ERROR(cudaMemsetAsync(nan_flag, 0, sizeof(int32_t), st));
    PKV_RETURN_IF_ERROR(bc::flag_nan(logits, P * V, nan_flag, st));
    PKV_CUDA_RETURN_IF_ERROR(
        cudaMemcpyAsync(h_nan, nan_flag, sizeof(int32_t), cudaMemcpyDeviceToHost, st));
    PKV_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(out->logits.data(), logits,
                                             static_cast<size_t>(P * V) * sizeof(float),
                                             cudaMemcpyDeviceToHost, st));
  }
  PKV_RETURN_IF_ERROR(be_->synchronize());
  for (const ForwardRow& row : batch.rows)
    if (!paged) row.flat->set_length(row.context_len + row.num_tokens);
  if (!prof_.on) return *h_nan != 0 ? check_logits(*out) : ok_status();
  prof_.logits_ms += ms_since(t_step);
  t_step = ProfClock::now();
  Status checked = *h_nan != 0 ? check_logits(*out) : ok_status();
  prof_.check_ms += ms_since(t_step);
  ++prof_.steps;
  return checked;
}

}  // namespace

StatusOr<std::unique_ptr<Model>> load_cuda_model(const std::string& dir, const LoadOptions& options,
                                                 int device) {
  return CudaQwen3Model::create(dir, options, device);
}

}  // namespace pagedkv::model::cuda
