// Shared layers every family is assembled from: weight loading with shape checks,
// RoPE parameters from config.json, the KV addressing of a forward batch (paged or
// flat), the attention block (projections, q/k norm, RoPE, K/V write, attention,
// output projection), the gated MLP and the top-k mixture of experts. A family
// file (families/*.cc) only reads its config, names its tensors and strings these
// together, so adding a family is one file plus, at most, a new layer here.
//
// All layers process the whole flattened batch (T tokens of every row) with one
// matrix product per projection (the weights stream once per step for all rows);
// attention runs every row's (token, head) tasks in one backend call. Every
// result is per token and M-invariant (backend.h), so batching never changes bits.
#pragma once

#include <cstdint>
#include <functional>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/checkpoint.h"
#include "model/flat_kv_cache.h"
#include "model/forward_batch.h"
#include "model/model.h"

namespace pagedkv::model {

using WeightPtr = std::unique_ptr<backend::Weight>;

// Activation scratch reused across layers and steps on this thread: a fresh
// multi-megabyte vector per layer costs page faults (kernel zeroing, and the mm
// lock with 16 compute threads) on every prefill. Each slot is one live buffer;
// its contents are garbage until written. The slots in use at once must differ.
enum ScratchSlot : int {
  kScratchX = 0,  // the family's residual stream and its norms (x, h, y)
  kScratchH,
  kScratchY,
  kScratchQ,  // attention q / MLP gate
  kScratchK,  // attention k / MLP up
  kScratchV,
  kScratchAttn,
  kScratchSlots
};
class ScratchBuffer {
 public:
  ScratchBuffer(int slot, size_t n) : slot_(slot), data_(acquire(slot, n)), size_(n) {}
  float* data() { return data_; }
  const float* data() const { return data_; }
  size_t size() const { return size_; }
  bool empty() const { return size_ == 0; }
  void resize(size_t n) {
    data_ = acquire(slot_, n);
    size_ = n;
  }

 private:
  static float* acquire(int slot, size_t n);
  int slot_;
  float* data_;
  size_t size_;
};

// Loads tensor `name` with exactly `shape` (1-D or 2-D) through the backend.
StatusOr<WeightPtr> load_weight(const Checkpoint& ckpt, backend::Backend& be,
                                const std::string& name, const std::vector<int64_t>& shape);
// Same, or nullptr when the tensor is absent (optional biases).
StatusOr<WeightPtr> load_optional_weight(const Checkpoint& ckpt, backend::Backend& be,
                                         const std::string& name,
                                         const std::vector<int64_t>& shape);

// One weight of a table-driven load: where it goes, its name after a common
// prefix, its exact shape.
struct WeightSlot {
  WeightPtr* dst;
  const char* name;
  std::vector<int64_t> shape;
};
// Loads every slot (load_weight(prefix + name, shape)); the first failure returns.
Status load_weights(const Checkpoint& ckpt, backend::Backend& be, const std::string& prefix,
                    std::initializer_list<WeightSlot> slots);

// RoPE for a layer of type `layer_type` ("full_attention", "sliding_attention"):
// rope_parameters[layer_type] when it is a per-layer-type map, else
// rope_parameters, else the legacy rope_theta / rope_scaling / partial_rotary_factor.
// rope_type "default" and "linear" are supported; others are InvalidArgument.
StatusOr<backend::RopeParams> parse_rope(const ConfigReader& cfg, int32_t head_dim,
                                         const std::string& layer_type);

// Reads the optional paged-cache fields (CacheConfig) every family accepts.
StatusOr<CacheConfig> read_cache_config(const ConfigReader& cfg);

// The paged block size: options.block_size if set, else env PAGEDKV_PAGED_BLOCK_SIZE
// (1..256), else config paged_block_size, else 16.
int32_t resolve_block_size(const LoadOptions& options, const CacheConfig& cache);

// Checks a batch against the model before anything is written: spans inside the
// token arrays and back to back, positions = context_len + i, ids < vocab, a KV
// view of the right kind per row, block tables long enough.
Status validate_batch(const ForwardBatch& batch, const KVGeometry& geom, int32_t vocab_size);

class KVAccess;

// A family's decoder stack over the residual stream x [T][hidden] (h, y: [T][hidden]
// scratch it may use freely).
using DecoderStack = std::function<void(KVAccess& kv, float* x, float* h, float* y, int64_t T)>;

// The token embedding, final norm and LM head every family has.
struct EmbeddingWeights {
  WeightPtr embed;       // [vocab][hidden]
  WeightPtr final_norm;  // [hidden]
  WeightPtr lm_head_owned;
  const backend::Weight* lm_head = nullptr;  // lm_head_owned, or embed when tied
};

// Loads `embed_name` (model.embed_tokens.weight), `final_norm_name` and lm_head.weight — or, when
// `tied` and the checkpoint has no lm_head.weight, uses the embedding as the head.
StatusOr<EmbeddingWeights> load_embedding_weights(
    const Checkpoint& ckpt, backend::Backend& be, int64_t vocab, int64_t hidden, bool tied,
    const std::string& final_norm_name,
    const std::string& embed_name = "model.embed_tokens.weight");

struct DecoderFrame {
  const KVGeometry* geometry = nullptr;
  int32_t vocab_size = 0;
  int64_t hidden = 0;
  const EmbeddingWeights* io = nullptr;
  float final_eps = 1e-6f;
};

// The frame of every family's forward(): validates the batch, grows each flat
// row's cache, embeds the tokens into x, runs `stack`, then advances every row's
// flat length and recurrent state to context_len + num_tokens and returns the
// requested logits (compute_logits).
Status run_decoder(backend::Backend& be, const DecoderFrame& f, const ForwardBatch& batch,
                   const DecoderStack& stack, ForwardOutput* out);

// A NaN logit is an error naming the batch row and vocabulary index, never a
// token (a degenerate checkpoint or config would otherwise sample garbage).
Status check_logits(const ForwardOutput& out);

// Where each row's K/V live, in each layer's cache-group shape and element type
// (f32, bf16 or f16; KVGeometry::layer_token_bytes / layer_dtype).
class KVAccess {
 public:
  KVAccess(const ForwardBatch& batch, const KVGeometry& geom);
  // Destination of position `pos` of batch row `row` in `layer`.
  std::byte* k_slot(size_t row, int32_t layer, int32_t pos);
  std::byte* v_slot(size_t row, int32_t layer, int32_t pos);
  // Writes n f32 values at dst in `layer`'s KV element type (bf16/f16: rounded to
  // nearest even).
  void store(int32_t layer, std::byte* dst, const float* src, int64_t n) const;
  // `layer`'s element type as the backend names it (AttentionArgs::kv_dtype).
  backend::WeightDType element_type(int32_t layer) const;

  // Tile pointers covering positions [0, num_tiles * block_size).
  void tiles(size_t row, int32_t layer, int32_t num_tiles, std::vector<const float*>* k,
             std::vector<const float*>* v);
  // --- sliding-window groups (gemma) ---
  // Same, but tiles before `first_tile` (wholly outside every query's window; in a
  // paged sliding group their table entries may be the null block 0) are nullptr
  // and never looked up.
  void tiles_from(size_t row, int32_t layer, int32_t first_tile, int32_t num_tiles,
                  std::vector<const float*>* k, std::vector<const float*>* v);
  int32_t block_size() const { return geom_.block_size; }

 private:
  std::byte* k_base(size_t row, int32_t layer, int32_t tile);
  std::byte* v_base(size_t row, int32_t layer, int32_t tile);
  const ForwardBatch& batch_;
  const KVGeometry& geom_;
  std::vector<size_t> token_bytes_;  // per layer
};

struct AttentionSpec {
  int32_t layer = 0;     // this layer's index (its KV slot)
  int32_t kv_layer = 0;  // the layer whose KV it reads (== layer unless KV-shared)
  int32_t num_heads = 0;
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  float rms_eps = 1e-6f;
  bool qk_norm_one_plus = false;
  backend::RopeParams rope;
  int32_t sliding_window = 0;
  float scale = 1.0f;
  bool use_rope = true;  // false: no positional rotation (NemotronH attention)
  // Gated attention (Qwen3-Next, Qwen3.5): q_proj emits per head [query | gate]
  // (2 * head_dim rows); the attention output is multiplied by sigmoid(gate)
  // before o_proj.
  bool output_gate = false;
};

struct AttentionWeights {
  WeightPtr q, k, v, o;
  WeightPtr q_bias, k_bias, v_bias, o_bias;  // optional
  WeightPtr q_norm, k_norm;                  // optional (qwen3: present)
};

// Tensor names of an attention block below its prefix (defaults: Hugging Face's
// Llama/Qwen names; LFM2 says out_proj, q_layernorm, k_layernorm).
struct AttentionNames {
  std::string o = "o_proj";
  std::string q_norm = "q_norm";  // "" = no q/k norm
  std::string k_norm = "k_norm";
};

// Loads q/k/v/o projections ([heads·head_dim][hidden] ...), the per-head q/k norms
// and, when `bias`, the q/k/v biases and an optional o bias.
StatusOr<AttentionWeights> load_attention_weights(const Checkpoint& ckpt, backend::Backend& be,
                                                  const std::string& prefix, int64_t num_heads,
                                                  int64_t num_kv_heads, int64_t head_dim,
                                                  int64_t hidden, bool bias,
                                                  const AttentionNames& names = {});

// out[T][hidden] = o_proj(attention(h)); writes this step's K/V first.
void attention_block(backend::Backend& be, const AttentionSpec& spec, const AttentionWeights& w,
                     const ForwardBatch& batch, KVAccess& kv, const float* h, int64_t T,
                     float* out);

// kRelu2 (relu(x)², NemotronH) is applied on the host: CPU backend only.
enum class Activation { kSilu, kGeluTanh, kRelu2 };

struct MlpWeights {
  WeightPtr gate, up, down;  // gate null: a non-gated MLP
};

// out = down(act(gate(h)) * up(h)) for T rows; a non-gated MLP (w.gate null)
// computes out = down(act(up(h))) instead (plain_mlp).
void gated_mlp(backend::Backend& be, const MlpWeights& w, Activation act, const float* h, int64_t T,
               float* out);

// --- non-gated MLP (NemotronH: relu² MLP layers, experts and shared experts) ---
// out = down(act(up(h))) for T rows; act kSilu, kGeluTanh or kRelu2.
void plain_mlp(backend::Backend& be, const MlpWeights& w, Activation act, const float* h, int64_t T,
               float* out);

// How a router turns its logits into expert scores.
enum class RouterScore { kSoftmax, kSigmoid };

struct MoeWeights {
  WeightPtr router;  // [num_experts][hidden]
  std::vector<MlpWeights> experts;
  int32_t top_k = 1;
  bool norm_topk_prob = false;
  Activation act = Activation::kSilu;
  // --- Router generalization (sigmoid routers with a score-correction bias:
  // lfm2_moe, nemotron_h). The defaults are qwen3_moe's softmax router, which
  // keeps its exact code path (Backend::topk_route).
  RouterScore score = RouterScore::kSoftmax;
  // Per expert, added to the scores for choosing the top-k only; the weights are
  // the unbiased scores (lfm2_moe `expert_bias`, nemotron_h
  // `e_score_correction_bias`). Empty: no bias.
  std::vector<float> selection_bias;
  // norm_topk_prob divides the chosen weights by (their sum + norm_eps)
  // (lfm2_moe: 1e-6, nemotron_h: 1e-20).
  float norm_eps = 0.0f;
  // Multiplies every chosen weight after normalization (routed_scaling_factor).
  float routed_scale = 1.0f;
  // Group-limited selection (DeepSeek-V3 style: n_group groups of experts, only
  // the topk_group best groups eligible; a group scores the sum of its two best
  // selection scores). 1/1 = off. n_group must divide the experts and the
  // eligible groups must hold at least top_k experts (a family checks at load).
  int32_t n_group = 1;
  int32_t topk_group = 1;
};

// The router's choice for T tokens from logits [T][num_experts]: ids/weights
// [T][top_k], in descending selection score (score + selection_bias), ties →
// lower expert id. Each token's result depends only on its own logits.
void route_experts(backend::Backend& be, const MoeWeights& w, const float* logits, int64_t T,
                   int32_t* ids, float* weights);

// Sparse MoE: per token the top-k experts of route_experts(router(h)); out =
// Σ_rank w·expert(h) summed in rank order. Experts run on the tokens routed to
// them (M-invariant rows); an expert no token chose is skipped.
void moe_block(backend::Backend& be, const MoeWeights& w, const float* h, int64_t T, int64_t hidden,
               float* out);

// The second half of a pre-norm decoder layer: x += ffn(rms_norm(x, norm)), where
// ffn is the MoE when `is_moe`, else the gated SiLU MLP. h and y are [T][hidden]
// scratch.
void residual_ffn(backend::Backend& be, const backend::Weight& norm, float eps, bool is_moe,
                  const MlpWeights& mlp, const MoeWeights& moe, float* x, float* h, float* y,
                  int64_t T, int64_t hidden);

// Loads a small 1-D tensor (a router bias) as host floats of any stored dtype,
// checking it has exactly n elements.
StatusOr<std::vector<float>> load_host_vector(const Checkpoint& ckpt, const std::string& name,
                                              int64_t n);

// --- MoE experts after routing (shared by moe_block and gemma4's router) ---
// out[t] = Σ_rank weights[t][rank] · experts[ids[t][rank]](h[t]), summed in rank
// order; each expert runs once on the tokens routed to it (M-invariant rows), the
// experts in parallel over Backend::parallel_for (same bits as one after another).
void moe_experts(backend::Backend& be, const std::vector<MlpWeights>& experts, Activation act,
                 const int32_t* ids, const float* weights, int32_t top_k, const float* h, int64_t T,
                 int64_t hidden, float* out);

// --- logits rows a batch asks for (shared by families) ---
// Fills out->row_begin/row_count/vocab_size, sizes out->logits, and returns the
// flattened token indices whose logits are wanted, in output order.
std::vector<int64_t> requested_logits_tokens(const ForwardBatch& batch, int32_t vocab_size,
                                             ForwardOutput* out);

// A shared expert beside the routed ones (Qwen3-Next, Qwen3.5-MoE): every token
// runs it, scaled by its own sigmoid gate.
struct SharedExpertWeights {
  MlpWeights mlp;
  WeightPtr gate;  // [1][hidden]
};

// out[t] += sigmoid(gate · h[t]) · mlp(h[t]) for T rows.
void add_shared_expert(backend::Backend& be, const SharedExpertWeights& w, Activation act,
                       const float* h, int64_t T, int64_t hidden, float* out);

// The logits a batch asked for (ForwardRow::logits): gathers the requested rows of
// the final hidden states x [T][hidden], applies the final RMSNorm (weight, or
// 1 + weight when one_plus) and the LM head, and checks for NaN (check_logits).
Status compute_logits(backend::Backend& be, const ForwardBatch& batch, const float* x,
                      int64_t hidden, const backend::Weight& final_norm, float eps, bool one_plus,
                      const backend::Weight& lm_head, int32_t vocab_size, ForwardOutput* out);

// --- the two ends of a decoder stack and the step's bookkeeping (shared by families) ---
// eos_token_id (config.json merged with generation_config.json) and bos_token_id
// into `mc`; an id outside int32 is InvalidArgument naming the field.
Status read_special_token_ids(const ConfigReader& c, const std::string& dir, ModelConfig* mc);

// A norm epsilon field (rms_norm_eps, layer_norm_epsilon): in (0, 1] and not 0
// as a float (rsqrt(mean + eps) could divide by 0), else InvalidArgument.
StatusOr<float> read_norm_eps(const ConfigReader& c, const std::string& field, double dflt);

// Before the layers: makes every flat row's cache hold its span.
void reserve_flat_rows(const ForwardBatch& batch);

// After the layers (x [T][hidden] = the residual stream): advances every row's
// flat cache and recurrent state by its span, then fills `out` with the logits the
// rows ask for — final RMSNorm of those rows of x, times lm_head — NaN-checked.
Status finish_forward(backend::Backend& be, const ForwardBatch& batch, const float* x,
                      int64_t hidden, const EmbeddingWeights& ends, float eps, int32_t vocab,
                      ForwardOutput* out);

}  // namespace pagedkv::model
