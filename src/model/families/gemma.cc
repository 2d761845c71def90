// Gemma 3 (gemma3_text) and Gemma 4 (gemma4_text) text decoders.
//
// Both: scaled token embeddings (x · sqrt(hidden), the scale rounded to the
// embedding's dtype as Hugging Face does), per layer four RMSNorms (input,
// post-attention, pre-feedforward, post-feedforward) around attention and a gated
// GELU-tanh MLP, per-head q/k RMSNorm, layers of type sliding_attention (window
// `sliding_window`, a query at p sees keys (p - w, p]) or full_attention with RoPE
// parameters per layer type, and optional final logit softcapping.
//   gemma3_text: RMSNorm weights are applied as (1 + w); attention scale
//     query_pre_attn_scalar^-0.5; optional attn_logit_softcapping.
//   gemma4_text: RMSNorm weights applied as w; attention scale 1; a scale-free
//     RMSNorm on v; per-layer input embeddings (hidden_size_per_layer_input); the
//     last num_kv_shared_layers layers read the KV of the last earlier layer of
//     their type (KVGeometry::layer_kv_source) and own none; "proportional"
//     partial RoPE; attention_k_eq_v (full layers reuse k_proj for v); an optional
//     MoE block beside the MLP; a learned per-layer output scalar.
// KV geometry: one full-attention group and one sliding-window group (those that
// occur), layer_group per layer; each group has its layers' K/V row shape
// (gemma4_text full layers: global_head_dim, and with attention_k_eq_v
// num_global_key_value_heads, or per_layer_config), so a group's pool and the
// flat cache hold its layers' rows at their own size. Tensor names are Hugging Face's; a checkpoint
// of the multimodal wrapper (nested text_config, tensors under model.language_model., both resolved
// by Checkpoint, or language_model.model. of transformers 4.x) is read for its text part.
// docs/gemma.md lists the supported config fields.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>

#include "backend/half.h"
#include "model/families/family_model.h"
#include "model/gemma_ops.h"
#include "model/generation_config.h"
#include "model/layers.h"
#include "model/registry.h"

namespace pagedkv::model {
namespace {

struct GemmaLayer {
  bool sliding = false;
  int32_t window = 0;
  int32_t kv_heads = 0, head_dim = 0;        // this layer's K/V row shape (its group's)
  const backend::Weight* ones_hd = nullptr;  // [head_dim] ones: the scale-free v norm
  int32_t kv_source = -1;                    // KV-shared: the anchor layer; else -1
  WeightPtr input_norm, post_attn_norm, pre_ff_norm, post_ff_norm;
  // Attention.
  WeightPtr q, k, v, o, q_bias, k_bias, v_bias, o_bias, q_norm, k_norm;
  bool k_eq_v = false;
  bool proportional = false;
  backend::RopeParams rope;
  ProportionalRope prope;
  MlpWeights mlp;
  // gemma4: per-layer input.
  WeightPtr ple_gate, ple_proj, ple_norm;
  float layer_scalar = 1.0f;
  bool has_layer_scalar = false;
  // gemma4: MoE block.
  bool moe = false;
  WeightPtr router_proj, post_ff_norm1, post_ff_norm2, pre_ff_norm2;
  std::vector<float> router_scale, per_expert_scale;
  std::vector<MlpWeights> experts;
};

class GemmaModel : public FamilyModel {
 public:
  using FamilyModel::FamilyModel;
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;

  static StatusOr<std::unique_ptr<Model>> create(std::shared_ptr<const Checkpoint> ckpt,
                                                 const LoadOptions& options, backend::Backend& be);

 private:
  void attention(const GemmaLayer& L, int32_t layer, const ForwardBatch& batch, KVAccess& kv,
                 const float* h, int64_t T, float* out);
  void moe(const GemmaLayer& L, const float* residual, int64_t T, float* out);
  void norm(const float* x, int64_t m, const backend::Weight& w, float* y) {
    be_->rms_norm(x, m, w, eps_, one_plus_, y);
  }

  bool gemma4_ = false;
  bool one_plus_ = true;  // gemma3 (1 + w); gemma4 w
  float eps_ = 1e-6f;
  float embed_scale_ = 1.0f;
  float attn_scale_ = 1.0f;
  float attn_softcap_ = 0.0f;
  float final_softcap_ = 0.0f;
  int32_t num_heads_ = 0;
  // Per-layer input embeddings (gemma4; ple_dim_ == 0: none).
  int32_t ple_dim_ = 0, ple_vocab_ = 0;
  float ple_embed_scale_ = 1.0f;
  WeightPtr ple_embed_, ple_model_proj_, ple_proj_norm_;
  int32_t top_k_ = 0;
  std::vector<float> ones_storage_;       // the weight of scale-free RMSNorms (v, router)
  std::map<int64_t, WeightPtr> ones_hd_;  // per head_dim in use
  WeightPtr ones_h_;
  WeightPtr embed_, final_norm_, lm_head_owned_;
  const backend::Weight* lm_head_ = nullptr;
  std::vector<GemmaLayer> layers_;
};

StatusOr<int32_t> read_positive(const ConfigReader& c, const char* field,
                                std::optional<int64_t> dflt) {
  int64_t v;
  if (dflt) {
    PKV_ASSIGN_OR_RETURN(v, c.get_int_or(field, *dflt));
  } else {
    PKV_ASSIGN_OR_RETURN(v, c.get_int(field));
  }
  PKV_RETURN_IF_ERROR(check_positive(c, field, v));
  return static_cast<int32_t>(v);
}

// The scale Hugging Face multiplies an embedding by: a float32 tensor cast to the
// embedding's dtype (sqrt(3072) = 55.4256 becomes 55.5 in bf16).
float embedding_scale(double s, DType table) {
  float f = static_cast<float>(s);
  if (table == DType::kBF16) return bf16_to_f32(f32_to_bf16(f));
  if (table == DType::kF16) return f16_to_f32(f32_to_f16(f));
  return f;
}

// Rows [first_row, first_row + rows) of a row-major tensor as a [rows][cols] weight
// (one expert of a stacked [E][...][cols] tensor).
StatusOr<WeightPtr> upload_rows(backend::Backend& be, const TensorInfo& t, int64_t first_row,
                                int64_t rows, int64_t cols) {
  backend::HostTensorView v;
  v.dtype = t.dtype == DType::kBF16  ? backend::WeightDType::kBF16
            : t.dtype == DType::kF16 ? backend::WeightDType::kF16
                                     : backend::WeightDType::kF32;
  v.rows = rows;
  v.cols = cols;
  v.data = t.data + static_cast<size_t>(first_row * cols) * dtype_size(t.dtype);
  return be.upload(v);
}

StatusOr<std::vector<float>> host_vector(const Checkpoint& ckpt, const std::string& name,
                                         int64_t n) {
  PKV_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.require(name, {n}));
  return tensor_to_f32(*t);
}

struct KVShape {
  int32_t kv_heads = 0, head_dim = 0;
  bool operator==(const KVShape&) const = default;
};

std::string shape_str(const KVShape& s) {
  return std::to_string(s.kv_heads) + " KV heads x head_dim " + std::to_string(s.head_dim);
}

// Gemma 4's K/V row shape per layer, as transformers builds Gemma4TextAttention:
//  - `per_layer_config` (written by transformers versions that have it; {} =
//    no overrides) is authoritative: layer index -> {head_dim, num_key_value_heads};
//  - otherwise full-attention layers have head_dim `global_head_dim` (absent:
//    512, transformers' default; null: head_dim) and, with attention_k_eq_v,
//    num_key_value_heads `num_global_key_value_heads` (absent or null: the
//    sliding layers'); sliding layers have head_dim / num_key_value_heads.
// Every layer of one type must end with one shape (one cache group, one pool
// shape); a global_head_dim / num_global_key_value_heads beside a
// per_layer_config that says otherwise is refused (which one wins differs
// between transformers versions).
StatusOr<std::vector<KVShape>> gemma4_layer_shapes(const ConfigReader& c, const ModelConfig& mc,
                                                   const std::vector<std::string>& types,
                                                   bool k_eq_v) {
  const int32_t L = mc.num_hidden_layers;
  const KVShape base{mc.num_key_value_heads, mc.head_dim};
  std::vector<KVShape> shapes(static_cast<size_t>(L), base);
  auto check = [&](const char* field, int64_t heads, int64_t hd) -> Status {
    if (hd <= 0 || hd > 1024 || hd % 2 != 0)
      return c.error(field, "head_dim " + std::to_string(hd) + " must be even and in [2, 1024]");
    if (heads <= 0 || heads > mc.num_attention_heads || mc.num_attention_heads % heads != 0)
      return c.error(field, std::to_string(heads) + " KV heads must divide num_attention_heads (" +
                                std::to_string(mc.num_attention_heads) + ")");
    return ok_status();
  };
  // The classic fields.
  std::optional<int64_t> global_hd, global_kvh;
  if (c.has("global_head_dim")) {
    PKV_ASSIGN_OR_RETURN(int64_t v, c.get_int("global_head_dim"));
    global_hd = v;
  }
  if (c.has("num_global_key_value_heads")) {
    PKV_ASSIGN_OR_RETURN(int64_t v, c.get_int("num_global_key_value_heads"));
    global_kvh = v;
  }
  KVShape full = base;
  full.head_dim = static_cast<int32_t>(
      global_hd.value_or(c.json().contains("global_head_dim") ? mc.head_dim : 512));
  if (k_eq_v && global_kvh) full.kv_heads = static_cast<int32_t>(*global_kvh);
  if (global_hd) PKV_RETURN_IF_ERROR(check("global_head_dim", base.kv_heads, *global_hd));
  if (k_eq_v && global_kvh)
    PKV_RETURN_IF_ERROR(check("num_global_key_value_heads", *global_kvh, full.head_dim));
  if (!c.has("per_layer_config")) {
    for (int32_t i = 0; i < L; ++i)
      if (types[i] == "full_attention") shapes[i] = full;
    return shapes;
  }
  // per_layer_config: {"<layer>": {"head_dim": .., "num_key_value_heads": ..}}.
  const nlohmann::json& plc = c.json()["per_layer_config"];
  if (!plc.is_object())
    return c.error("per_layer_config", "must be an object of layer index -> overrides");
  for (const auto& [key, over] : plc.items()) {
    int64_t layer = -1;
    try {
      size_t used = 0;
      layer = std::stoll(key, &used);
      if (used != key.size()) layer = -1;
    } catch (...) {
      layer = -1;
    }
    const std::string where = "per_layer_config." + key;
    if (layer < 0 || layer >= L)
      return c.error("per_layer_config",
                     "key '" + key + "' is not a layer index in [0, " + std::to_string(L) + ")");
    if (!over.is_object()) return c.error(where.c_str(), "must be an object of overrides");
    KVShape& sh = shapes[static_cast<size_t>(layer)];
    for (const auto& [name, val] : over.items()) {
      if (name != "head_dim" && name != "num_key_value_heads")
        return c.error(where.c_str(), "override '" + name +
                                          "' is not supported (supported: head_dim, "
                                          "num_key_value_heads)");
      if (!val.is_number_integer())
        return c.error((where + "." + name).c_str(), "must be an integer");
      (name == "head_dim" ? sh.head_dim : sh.kv_heads) =
          static_cast<int32_t>(std::clamp<int64_t>(val.get<int64_t>(), INT32_MIN, INT32_MAX));
    }
    PKV_RETURN_IF_ERROR(check(where.c_str(), sh.kv_heads, sh.head_dim));
  }
  // A classic field beside it must agree with what it says for full layers.
  for (int32_t i = 0; i < L; ++i) {
    if (types[i] != "full_attention") continue;
    if (global_hd && shapes[i].head_dim != *global_hd)
      return c.error("global_head_dim",
                     "is " + std::to_string(*global_hd) + " but per_layer_config gives layer " +
                         std::to_string(i) + " head_dim " + std::to_string(shapes[i].head_dim) +
                         "; give one of them");
    if (k_eq_v && global_kvh && shapes[i].kv_heads != *global_kvh)
      return c.error("num_global_key_value_heads",
                     "is " + std::to_string(*global_kvh) + " but per_layer_config gives layer " +
                         std::to_string(i) + " " + std::to_string(shapes[i].kv_heads) +
                         " KV heads; give one of them");
  }
  return shapes;
}

StatusOr<std::unique_ptr<Model>> GemmaModel::create(std::shared_ptr<const Checkpoint> ckpt,
                                                    const LoadOptions& options,
                                                    backend::Backend& be) {
  std::unique_ptr<GemmaModel> m(new GemmaModel(ckpt, be));
  // A multimodal wrapper's text_config arrives merged by Checkpoint (checkpoint.h).
  const ConfigReader& c = ckpt->config();
  ModelConfig& mc = m->cfg_;
  PKV_ASSIGN_OR_RETURN(mc.model_type, c.get_string("model_type"));
  m->gemma4_ = mc.model_type.rfind("gemma4", 0) == 0;
  const bool g4 = m->gemma4_;
  m->one_plus_ = !g4;
  // Tensor names: Gemma*ForCausalLM writes model.*, the multimodal wrapper
  // model.language_model.* (transformers 5) or language_model.model.* (4.x).
  std::string pre = "model.";
  for (const char* p : {"model.", "language_model.model."}) {
    if (ckpt->find(std::string(p) + "embed_tokens.weight") != nullptr) {
      pre = p;
      break;
    }
  }
  const std::string head_name =
      pre == "language_model.model." ? "language_model.lm_head.weight" : "lm_head.weight";

  PKV_ASSIGN_OR_RETURN(mc.vocab_size, read_positive(c, "vocab_size", std::nullopt));
  PKV_ASSIGN_OR_RETURN(mc.hidden_size, read_positive(c, "hidden_size", std::nullopt));
  PKV_ASSIGN_OR_RETURN(mc.num_hidden_layers, read_positive(c, "num_hidden_layers", std::nullopt));
  PKV_ASSIGN_OR_RETURN(mc.num_attention_heads,
                       read_positive(c, "num_attention_heads", std::nullopt));
  PKV_ASSIGN_OR_RETURN(mc.num_key_value_heads,
                       read_positive(c, "num_key_value_heads", mc.num_attention_heads));
  if (mc.num_attention_heads % mc.num_key_value_heads != 0)
    return c.error("num_key_value_heads", "must divide num_attention_heads");
  PKV_ASSIGN_OR_RETURN(mc.head_dim, read_positive(c, "head_dim", int64_t{256}));
  if (mc.head_dim > 1024 || mc.head_dim % 2 != 0)
    return c.error("head_dim", "must be even and at most 1024");
  PKV_ASSIGN_OR_RETURN(mc.max_position_embeddings, c.get_int_or("max_position_embeddings", 131072));
  if (mc.max_position_embeddings < 1 || mc.max_position_embeddings > kMaxPositionEmbeddings)
    return c.error("max_position_embeddings",
                   "must be in [1, " + std::to_string(kMaxPositionEmbeddings) + "]");
  // Gemma ties the LM head to the embedding unless told otherwise.
  PKV_ASSIGN_OR_RETURN(mc.tie_word_embeddings, c.get_bool_or("tie_word_embeddings", true));
  PKV_ASSIGN_OR_RETURN(auto eos, c.get_int_list_or_empty("eos_token_id"));
  for (int64_t e : eos) {
    if (e < 0 || e > INT32_MAX)
      return c.error("eos_token_id", "holds " + std::to_string(e) + ", not a token id");
    mc.eos_token_ids.push_back(static_cast<int32_t>(e));
  }
  PKV_RETURN_IF_ERROR(merge_generation_config_eos(ckpt->dir(), &mc.eos_token_ids));
  int64_t v;
  PKV_ASSIGN_OR_RETURN(v, c.get_int_or("bos_token_id", -1));
  if (v < -1 || v > INT32_MAX)
    return c.error("bos_token_id", "holds " + std::to_string(v) + ", not a token id");
  mc.bos_token_id = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(mc.cache, read_cache_config(c));

  double eps;
  PKV_ASSIGN_OR_RETURN(eps, c.get_double_or("rms_norm_eps", 1e-6));
  if (!(eps > 0.0 && eps <= 1.0) || !(static_cast<float>(eps) > 0.0f))
    return c.error("rms_norm_eps", "must be in (0, 1] (and not 0 as a float)");
  m->eps_ = static_cast<float>(eps);
  int32_t inter;
  PKV_ASSIGN_OR_RETURN(inter, read_positive(c, "intermediate_size", std::nullopt));
  std::string act;
  PKV_ASSIGN_OR_RETURN(act, c.get_string_or("hidden_activation", "gelu_pytorch_tanh"));
  if (act != "gelu_pytorch_tanh" && act != "gelu_tanh")
    return c.error("hidden_activation",
                   "'" + act + "' is not supported (supported: gelu_pytorch_tanh)");
  bool attn_bias;
  PKV_ASSIGN_OR_RETURN(attn_bias, c.get_bool_or("attention_bias", false));
  for (const char* f : {"attn_logit_softcapping", "final_logit_softcapping"}) {
    double cap;
    PKV_ASSIGN_OR_RETURN(cap, c.get_double_or(f, 0.0));
    if (!(cap >= 0.0 && std::isfinite(static_cast<float>(cap))))
      return c.error(f, "must be a positive number or null");
    (std::string(f) == "final_logit_softcapping" ? m->final_softcap_ : m->attn_softcap_) =
        static_cast<float>(cap);
  }
  if (g4 && m->attn_softcap_ != 0.0f)
    return c.error("attn_logit_softcapping", "is not used by gemma4_text; remove it");
  if (c.has("use_bidirectional_attention")) {
    const auto& j = c.json()["use_bidirectional_attention"];
    bool bidi =
        (j.is_boolean() && j.get<bool>()) || (j.is_string() && j.get<std::string>() == "all");
    if (bidi)
      return c.error("use_bidirectional_attention",
                     "bidirectional attention is not supported (causal decoding only)");
  }
  if (!g4 && c.has("per_layer_config") && !c.json()["per_layer_config"].empty())
    return c.error("per_layer_config", "a non-empty per_layer_config is not supported");

  const int32_t L = mc.num_hidden_layers;
  if (ckpt->find(pre + "layers." + std::to_string(L - 1) + ".input_layernorm.weight") == nullptr)
    return c.error("num_hidden_layers", "is " + std::to_string(L) + " but the checkpoint in " +
                                            ckpt->dir() + " has no tensor " + pre + "layers." +
                                            std::to_string(L - 1) + ".input_layernorm.weight");

  // Layer types: explicit, else every sliding_window_pattern-th layer is full.
  PKV_ASSIGN_OR_RETURN(auto layer_types, c.get_string_list_or_empty("layer_types"));
  int64_t sw;
  PKV_ASSIGN_OR_RETURN(sw, c.get_int_or("sliding_window", g4 ? 512 : 4096));
  if (sw < 1 || sw > INT32_MAX) return c.error("sliding_window", "must be in [1, 2^31-1]");
  if (layer_types.empty()) {
    int64_t pattern;
    PKV_ASSIGN_OR_RETURN(pattern, c.get_int_or("sliding_window_pattern", 6));
    if (c.has("_sliding_window_pattern")) {
      PKV_ASSIGN_OR_RETURN(pattern, c.get_int("_sliding_window_pattern"));
    }
    if (pattern < 1) return c.error("sliding_window_pattern", "must be >= 1");
    for (int32_t i = 0; i < L; ++i)
      layer_types.push_back((i + 1) % pattern != 0 ? "sliding_attention" : "full_attention");
    if (g4) layer_types.back() = "full_attention";
  }
  if (static_cast<int32_t>(layer_types.size()) != L)
    return c.error("layer_types", "must have num_hidden_layers entries");
  for (int32_t i = 0; i < L; ++i)
    if (layer_types[i] != "full_attention" && layer_types[i] != "sliding_attention")
      return c.error("layer_types", "entry " + std::to_string(i) + " '" + layer_types[i] +
                                        "' is not full_attention or sliding_attention");

  // Attention scale.
  if (g4) {
    m->attn_scale_ = 1.0f;
  } else {
    double qpas;
    PKV_ASSIGN_OR_RETURN(qpas, c.get_double_or("query_pre_attn_scalar", 256.0));
    if (!(qpas > 0.0 && std::isfinite(qpas)))
      return c.error("query_pre_attn_scalar", "must be positive");
    m->attn_scale_ = static_cast<float>(std::pow(qpas, -0.5));
  }

  // gemma4 extras.
  int64_t num_shared = 0, num_experts = 0, top_k = 0, moe_inter = 0;
  bool k_eq_v = false, enable_moe = false, double_wide = false;
  if (g4) {
    int64_t ple;
    PKV_ASSIGN_OR_RETURN(ple, c.get_int_or("hidden_size_per_layer_input", 256));
    if (ple < 0 || ple > 65536) return c.error("hidden_size_per_layer_input", "out of range");
    m->ple_dim_ = static_cast<int32_t>(ple);
    if (ple > 0) {
      PKV_ASSIGN_OR_RETURN(m->ple_vocab_,
                           read_positive(c, "vocab_size_per_layer_input", int64_t{262144}));
    }
    PKV_ASSIGN_OR_RETURN(num_shared, c.get_int_or("num_kv_shared_layers", 0));
    if (num_shared < 0 || num_shared >= L)
      return c.error("num_kv_shared_layers", "must be in [0, num_hidden_layers)");
    PKV_ASSIGN_OR_RETURN(k_eq_v, c.get_bool_or("attention_k_eq_v", false));
    PKV_ASSIGN_OR_RETURN(double_wide, c.get_bool_or("use_double_wide_mlp", false));
    PKV_ASSIGN_OR_RETURN(enable_moe, c.get_bool_or("enable_moe_block", false));
    if (enable_moe) {
      PKV_ASSIGN_OR_RETURN(num_experts, c.get_int("num_experts"));
      PKV_RETURN_IF_ERROR(check_positive(c, "num_experts", num_experts));
      PKV_ASSIGN_OR_RETURN(top_k, c.get_int("top_k_experts"));
      PKV_RETURN_IF_ERROR(check_positive(c, "top_k_experts", top_k));
      if (top_k > num_experts) return c.error("top_k_experts", "exceeds num_experts");
      PKV_ASSIGN_OR_RETURN(moe_inter, c.get_int("moe_intermediate_size"));
      PKV_RETURN_IF_ERROR(check_positive(c, "moe_intermediate_size", moe_inter));
      m->top_k_ = static_cast<int32_t>(top_k);
    }
  }
  bool has_full = false, has_sliding = false;
  for (const auto& t : layer_types) (t == "full_attention" ? has_full : has_sliding) = true;
  // Each layer's K/V row shape; one per layer type (= per cache group).
  std::vector<KVShape> shapes(static_cast<size_t>(L), KVShape{mc.num_key_value_heads, mc.head_dim});
  if (g4) {
    PKV_ASSIGN_OR_RETURN(shapes, gemma4_layer_shapes(c, mc, layer_types, k_eq_v));
  }
  std::map<std::string, std::pair<int32_t, KVShape>> type_shape;  // type -> (first layer, shape)
  for (int32_t i = 0; i < L; ++i) {
    auto [it, fresh] = type_shape.try_emplace(layer_types[i], i, shapes[i]);
    if (!fresh && !(it->second.second == shapes[i]))
      return c.error("per_layer_config",
                     "layers " + std::to_string(it->second.first) + " and " + std::to_string(i) +
                         " (" + layer_types[i] + ") have different KV shapes (" +
                         shape_str(it->second.second) + " vs " + shape_str(shapes[i]) +
                         "); each cache group holds one shape");
  }

  m->num_heads_ = mc.num_attention_heads;
  const int64_t H = mc.hidden_size, V = mc.vocab_size;
  const int64_t NH = mc.num_attention_heads;
  PKV_ASSIGN_OR_RETURN(m->embed_, load_weight(*ckpt, be, pre + "embed_tokens.weight", {V, H}));
  m->embed_scale_ = embedding_scale(std::sqrt(static_cast<double>(H)),
                                    ckpt->find(pre + "embed_tokens.weight")->dtype);
  PKV_ASSIGN_OR_RETURN(m->final_norm_, load_weight(*ckpt, be, pre + "norm.weight", {H}));
  if (ckpt->find(head_name) == nullptr && mc.tie_word_embeddings) {
    m->lm_head_ = m->embed_.get();
  } else {
    PKV_ASSIGN_OR_RETURN(m->lm_head_owned_, load_weight(*ckpt, be, head_name, {V, H}));
    m->lm_head_ = m->lm_head_owned_.get();
  }
  // Scale-free RMSNorms use a weight of ones (the backend's norm takes a weight).
  int64_t widest = H;
  for (const KVShape& sh : shapes) widest = std::max<int64_t>(widest, sh.head_dim);
  m->ones_storage_.assign(static_cast<size_t>(widest), 1.0f);
  auto ones = [&](int64_t n) -> StatusOr<WeightPtr> {
    backend::HostTensorView ov;
    ov.rows = 1;
    ov.cols = n;
    ov.data = reinterpret_cast<const std::byte*>(m->ones_storage_.data());
    return be.upload(ov);
  };
  PKV_ASSIGN_OR_RETURN(m->ones_h_, ones(H));
  for (const KVShape& sh : shapes) {
    if (m->ones_hd_.count(sh.head_dim) != 0) continue;
    PKV_ASSIGN_OR_RETURN(m->ones_hd_[sh.head_dim], ones(sh.head_dim));
  }
  if (m->ple_dim_ > 0) {
    const int64_t LP = static_cast<int64_t>(L) * m->ple_dim_;
    PKV_ASSIGN_OR_RETURN(
        m->ple_embed_,
        load_weight(*ckpt, be, pre + "embed_tokens_per_layer.weight", {m->ple_vocab_, LP}));
    m->ple_embed_scale_ = embedding_scale(std::sqrt(static_cast<double>(m->ple_dim_)),
                                          ckpt->find(pre + "embed_tokens_per_layer.weight")->dtype);
    PKV_ASSIGN_OR_RETURN(
        m->ple_model_proj_,
        load_weight(*ckpt, be, pre + "per_layer_model_projection.weight", {LP, H}));
    PKV_ASSIGN_OR_RETURN(
        m->ple_proj_norm_,
        load_weight(*ckpt, be, pre + "per_layer_projection_norm.weight", {m->ple_dim_}));
  }

  // KV geometry: group 0 full (if any), then sliding (if any). The default
  // shape is the sliding layers' (else the full layers'); a group whose layers
  // differ declares its own.
  KVGeometry& g = m->geom_;
  const KVShape base = type_shape.at(has_sliding ? "sliding_attention" : "full_attention").second;
  g.num_layers = L;
  g.num_kv_heads = base.kv_heads;
  g.head_dim = base.head_dim;
  g.block_size = resolve_block_size(options, mc.cache);
  g.dtype = options.kv_dtype.value_or(KVDType::kF32);  // resolved by load_model
  int32_t full_group = -1, sliding_group = -1;
  if (has_full) {
    full_group = static_cast<int32_t>(g.groups.size());
    g.groups.push_back(CacheGroup{CacheGroupKind::kFullAttention, 0});
    const KVShape fs = type_shape.at("full_attention").second;
    if (!(fs == base)) {
      g.group_shapes.resize(g.groups.size());
      g.group_shapes.back().num_kv_heads = fs.kv_heads;
      g.group_shapes.back().head_dim = fs.head_dim;
    }
  }
  if (has_sliding) {
    sliding_group = static_cast<int32_t>(g.groups.size());
    g.groups.push_back(CacheGroup{CacheGroupKind::kSlidingWindow, static_cast<int32_t>(sw)});
  }
  g.layer_group.assign(L, -1);
  g.layer_kv_source.assign(L, -1);

  const bool global_hd_defaulted =
      g4 && !c.json().contains("global_head_dim") && !c.has("per_layer_config");
  const int32_t first_shared = L - static_cast<int32_t>(num_shared);
  m->layers_.resize(L);
  for (int32_t i = 0; i < L; ++i) {
    GemmaLayer& Y = m->layers_[i];
    const std::string& lt = layer_types[i];
    Y.sliding = lt == "sliding_attention";
    Y.window = Y.sliding ? static_cast<int32_t>(sw) : 0;
    g.layer_group[i] = Y.sliding ? sliding_group : full_group;
    if (num_shared > 0 && i >= first_shared) {
      for (int32_t j = first_shared - 1; j >= 0; --j)
        if (layer_types[j] == lt) {
          Y.kv_source = j;
          break;
        }
      if (Y.kv_source < 0)
        return c.error("num_kv_shared_layers", "KV-shared layer " + std::to_string(i) + " (" + lt +
                                                   ") has no earlier non-shared layer of its type");
      g.layer_kv_source[i] = Y.kv_source;
    }
    const bool shared = Y.kv_source >= 0;
    Y.k_eq_v = k_eq_v && !Y.sliding;
    Y.kv_heads = shapes[i].kv_heads;
    Y.head_dim = shapes[i].head_dim;
    Y.ones_hd = m->ones_hd_.at(Y.head_dim).get();
    const int64_t D = Y.head_dim, KVH = Y.kv_heads;
    const std::string p = pre + "layers." + std::to_string(i) + ".";
    PKV_ASSIGN_OR_RETURN(Y.input_norm, load_weight(*ckpt, be, p + "input_layernorm.weight", {H}));
    PKV_ASSIGN_OR_RETURN(Y.post_attn_norm,
                         load_weight(*ckpt, be, p + "post_attention_layernorm.weight", {H}));
    PKV_ASSIGN_OR_RETURN(Y.pre_ff_norm,
                         load_weight(*ckpt, be, p + "pre_feedforward_layernorm.weight", {H}));
    PKV_ASSIGN_OR_RETURN(Y.post_ff_norm,
                         load_weight(*ckpt, be, p + "post_feedforward_layernorm.weight", {H}));
    const std::string a = p + "self_attn.";
    {
      StatusOr<WeightPtr> q = load_weight(*ckpt, be, a + "q_proj.weight", {NH * D, H});
      // The most likely cause of a wrong full-layer shape: transformers' default.
      if (!q.ok() && global_hd_defaulted && !Y.sliding)
        return invalid_argument(q.status().message() +
                                " (full-attention layers take head_dim from global_head_dim, "
                                "which is 512 when config.json names neither it nor "
                                "per_layer_config, as in transformers)");
      PKV_ASSIGN_OR_RETURN(Y.q, std::move(q));
    }
    PKV_ASSIGN_OR_RETURN(Y.o, load_weight(*ckpt, be, a + "o_proj.weight", {H, NH * D}));
    PKV_ASSIGN_OR_RETURN(Y.q_norm, load_weight(*ckpt, be, a + "q_norm.weight", {D}));
    if (attn_bias) {
      PKV_ASSIGN_OR_RETURN(Y.q_bias, load_weight(*ckpt, be, a + "q_proj.bias", {NH * D}));
      PKV_ASSIGN_OR_RETURN(Y.o_bias, load_optional_weight(*ckpt, be, a + "o_proj.bias", {H}));
    }
    if (!shared) {
      PKV_ASSIGN_OR_RETURN(Y.k, load_weight(*ckpt, be, a + "k_proj.weight", {KVH * D, H}));
      PKV_ASSIGN_OR_RETURN(Y.k_norm, load_weight(*ckpt, be, a + "k_norm.weight", {D}));
      if (!Y.k_eq_v) {
        PKV_ASSIGN_OR_RETURN(Y.v, load_weight(*ckpt, be, a + "v_proj.weight", {KVH * D, H}));
      }
      if (attn_bias) {
        PKV_ASSIGN_OR_RETURN(Y.k_bias, load_weight(*ckpt, be, a + "k_proj.bias", {KVH * D}));
        if (!Y.k_eq_v) {
          PKV_ASSIGN_OR_RETURN(Y.v_bias, load_weight(*ckpt, be, a + "v_proj.bias", {KVH * D}));
        }
      }
    }
    // RoPE of this layer type; Gemma 3's legacy fields: rope_theta/rope_scaling
    // for full layers, rope_local_base_freq for sliding ones.
    std::string rope_type = "default";
    const bool per_type_map = c.has("rope_parameters") &&
                              c.json()["rope_parameters"].contains(lt) &&
                              c.json()["rope_parameters"][lt].is_object();
    if (per_type_map) {
      PKV_ASSIGN_OR_RETURN(ConfigReader rp, c.sub("rope_parameters"));
      PKV_ASSIGN_OR_RETURN(ConfigReader per, rp.sub(lt));
      PKV_ASSIGN_OR_RETURN(rope_type, per.get_string_or("rope_type", "default"));
      if (rope_type == "proportional") {
        double theta, factor, partial;
        PKV_ASSIGN_OR_RETURN(theta, per.get_double_or("rope_theta", 10000.0));
        PKV_ASSIGN_OR_RETURN(factor, per.get_double_or("factor", 1.0));
        PKV_ASSIGN_OR_RETURN(partial, per.get_double_or("partial_rotary_factor", 1.0));
        if (!(theta > 0.0 && std::isfinite(static_cast<float>(theta))))
          return per.error("rope_theta", "must be positive and finite");
        if (!(factor >= 1e-3 && factor <= 1e6))
          return per.error("factor", "must be in [1e-3, 1e6]");
        if (!(partial > 0.0 && partial <= 1.0))
          return per.error("partial_rotary_factor", "must be in (0, 1]");
        Y.proportional = true;
        Y.prope.theta = static_cast<float>(theta);
        Y.prope.factor = static_cast<float>(factor);
        Y.prope.angles = static_cast<int32_t>(std::floor(partial * static_cast<double>(D) / 2.0));
      }
    }
    if (!Y.proportional) {
      if (!per_type_map && !c.has("rope_parameters") && Y.sliding && !g4) {
        double local;
        PKV_ASSIGN_OR_RETURN(local, c.get_double_or("rope_local_base_freq", 10000.0));
        if (!(local > 0.0 && std::isfinite(static_cast<float>(local))))
          return c.error("rope_local_base_freq", "must be positive and finite");
        Y.rope.theta = static_cast<float>(local);
        Y.rope.rotary_dim = static_cast<int32_t>(D);
      } else {
        PKV_ASSIGN_OR_RETURN(Y.rope, parse_rope(c, static_cast<int32_t>(D), lt));
      }
    }
    // MLP (gemma4 KV-shared layers may be double width).
    const int64_t I = (double_wide && shared) ? 2 * int64_t{inter} : inter;
    const std::string f = p + "mlp.";
    PKV_ASSIGN_OR_RETURN(Y.mlp.gate, load_weight(*ckpt, be, f + "gate_proj.weight", {I, H}));
    PKV_ASSIGN_OR_RETURN(Y.mlp.up, load_weight(*ckpt, be, f + "up_proj.weight", {I, H}));
    PKV_ASSIGN_OR_RETURN(Y.mlp.down, load_weight(*ckpt, be, f + "down_proj.weight", {H, I}));
    if (g4) {
      if (m->ple_dim_ > 0) {
        const int64_t P = m->ple_dim_;
        PKV_ASSIGN_OR_RETURN(Y.ple_gate,
                             load_weight(*ckpt, be, p + "per_layer_input_gate.weight", {P, H}));
        PKV_ASSIGN_OR_RETURN(Y.ple_proj,
                             load_weight(*ckpt, be, p + "per_layer_projection.weight", {H, P}));
        PKV_ASSIGN_OR_RETURN(Y.ple_norm,
                             load_weight(*ckpt, be, p + "post_per_layer_input_norm.weight", {H}));
      }
      if (ckpt->find(p + "layer_scalar") != nullptr) {
        PKV_ASSIGN_OR_RETURN(auto s, host_vector(*ckpt, p + "layer_scalar", 1));
        Y.layer_scalar = s[0];
        Y.has_layer_scalar = true;
      }
      if (enable_moe) {
        const int64_t E = num_experts, MI = moe_inter;
        Y.moe = true;
        PKV_ASSIGN_OR_RETURN(Y.router_proj,
                             load_weight(*ckpt, be, p + "router.proj.weight", {E, H}));
        PKV_ASSIGN_OR_RETURN(Y.router_scale, host_vector(*ckpt, p + "router.scale", H));
        PKV_ASSIGN_OR_RETURN(Y.per_expert_scale,
                             host_vector(*ckpt, p + "router.per_expert_scale", E));
        PKV_ASSIGN_OR_RETURN(
            Y.post_ff_norm1,
            load_weight(*ckpt, be, p + "post_feedforward_layernorm_1.weight", {H}));
        PKV_ASSIGN_OR_RETURN(
            Y.post_ff_norm2,
            load_weight(*ckpt, be, p + "post_feedforward_layernorm_2.weight", {H}));
        PKV_ASSIGN_OR_RETURN(Y.pre_ff_norm2,
                             load_weight(*ckpt, be, p + "pre_feedforward_layernorm_2.weight", {H}));
        PKV_ASSIGN_OR_RETURN(const TensorInfo* gu,
                             ckpt->require(p + "experts.gate_up_proj", {E, 2 * MI, H}));
        PKV_ASSIGN_OR_RETURN(const TensorInfo* dn,
                             ckpt->require(p + "experts.down_proj", {E, H, MI}));
        Y.experts.resize(static_cast<size_t>(E));
        for (int64_t e = 0; e < E; ++e) {
          PKV_ASSIGN_OR_RETURN(Y.experts[e].gate, upload_rows(be, *gu, e * 2 * MI, MI, H));
          PKV_ASSIGN_OR_RETURN(Y.experts[e].up, upload_rows(be, *gu, e * 2 * MI + MI, MI, H));
          PKV_ASSIGN_OR_RETURN(Y.experts[e].down, upload_rows(be, *dn, e * H, H, MI));
        }
      }
    }
  }
  return std::unique_ptr<Model>(std::move(m));
}

void GemmaModel::attention(const GemmaLayer& Y, int32_t layer, const ForwardBatch& batch,
                           KVAccess& kv, const float* h, int64_t T, float* out) {
  backend::Backend& be = *be_;
  // This layer's shape (a full layer may differ from the sliding ones; a
  // KV-shared layer has its anchor's, the same type's).
  const int32_t hd = Y.head_dim, kvh = Y.kv_heads;
  const int64_t qd = static_cast<int64_t>(num_heads_) * hd;
  const int64_t kd = static_cast<int64_t>(kvh) * hd;
  ScratchBuffer q(kScratchQ, static_cast<size_t>(T * qd)),
      attn(kScratchAttn, static_cast<size_t>(T * qd));
  ScratchBuffer k(kScratchK, 0), v(kScratchV, 0);
  std::vector<float> bias;
  auto add_bias = [&](float* y, const backend::Weight* b, int64_t n) {
    if (b == nullptr) return;
    bias.resize(static_cast<size_t>(n));
    int32_t zero = 0;
    be.embedding(&zero, 1, *b, bias.data());
    for (int64_t t = 0; t < T; ++t) be.add(y + t * n, bias.data(), n);
  };
  auto rope = [&](float* x, int32_t heads) {
    if (Y.proportional) {
      proportional_rope(be, x, T, heads, hd, batch.positions.data(), Y.prope);
    } else {
      be.rope(x, T, heads, hd, batch.positions.data(), Y.rope);
    }
  };
  be.matmul(h, T, *Y.q, q.data());
  add_bias(q.data(), Y.q_bias.get(), qd);
  norm(q.data(), T * num_heads_, *Y.q_norm, q.data());
  rope(q.data(), num_heads_);
  const int32_t kv_layer = Y.kv_source >= 0 ? Y.kv_source : layer;
  if (Y.kv_source < 0) {
    k.resize(static_cast<size_t>(T * kd));
    v.resize(static_cast<size_t>(T * kd));
    be.matmul(h, T, *Y.k, k.data());
    add_bias(k.data(), Y.k_bias.get(), kd);
    if (Y.k_eq_v) {
      std::memcpy(v.data(), k.data(), static_cast<size_t>(T * kd) * sizeof(float));
    } else {
      be.matmul(h, T, *Y.v, v.data());
      add_bias(v.data(), Y.v_bias.get(), kd);
    }
    norm(k.data(), T * kvh, *Y.k_norm, k.data());
    rope(k.data(), kvh);
    // gemma4: a scale-free RMSNorm on v.
    if (gemma4_) be.rms_norm(v.data(), T * kvh, *Y.ones_hd, eps_, false, v.data());
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      const ForwardRow& row = batch.rows[r];
      for (int32_t i = 0; i < row.num_tokens; ++i) {
        const int64_t t = row.first_token + i;
        const int32_t pos = batch.positions[t];
        kv.store(layer, kv.k_slot(r, layer, pos), k.data() + t * kd, kd);
        kv.store(layer, kv.v_slot(r, layer, pos), v.data() + t * kd, kd);
      }
    }
  }
  const size_t R = batch.rows.size();
  std::vector<std::vector<const float*>> kt(R), vt(R);
  std::vector<backend::AttentionArgs> args(R);
  const int32_t bs = kv.block_size();
  for (size_t r = 0; r < R; ++r) {
    const ForwardRow& row = batch.rows[r];
    const int32_t last = row.context_len + row.num_tokens - 1;
    const int32_t ntiles = last / bs + 1;
    // Tiles wholly before the first query's window are never looked up (a paged
    // sliding group may hold the null block there).
    const int32_t first_tile = Y.window > 0 ? std::max(0, row.context_len - Y.window + 1) / bs : 0;
    kv.tiles_from(r, kv_layer, first_tile, ntiles, &kt[r], &vt[r]);
    backend::AttentionArgs& a = args[r];
    a.q = q.data() + row.first_token * qd;
    a.out = attn.data() + row.first_token * qd;
    a.num_tokens = row.num_tokens;
    a.num_heads = num_heads_;
    a.num_kv_heads = kvh;
    a.head_dim = hd;
    a.positions = batch.positions.data() + row.first_token;
    a.scale = attn_scale_;
    a.tile = bs;
    a.k_tiles = kt[r].data();
    a.v_tiles = vt[r].data();
    a.num_tiles = ntiles;
    a.sliding_window = Y.window;
    a.kv_dtype = kv.element_type(kv_layer);
  }
  if (attn_softcap_ > 0.0f) {
    for (const auto& a : args) softcapped_attention(a, attn_softcap_);
  } else {
    be.attention_batch(args.data(), R);
  }
  be.matmul(attn.data(), T, *Y.o, out);
  add_bias(out, Y.o_bias.get(), Y.o->rows());
}

// Gemma 4's MoE branch on the pre-MLP residual: the router sees
// rmsnorm(x) · scale · hidden^-0.5 (no learned norm weight), takes the softmax's
// top-k renormalized and times per_expert_scale; the experts see
// pre_feedforward_layernorm_2(x).
void GemmaModel::moe(const GemmaLayer& Y, const float* residual, int64_t T, float* out) {
  backend::Backend& be = *be_;
  const int64_t H = cfg_.hidden_size;
  const int32_t E = static_cast<int32_t>(Y.experts.size());
  const int32_t K = top_k_;
  std::vector<float> hr(static_cast<size_t>(T * H)), logits(static_cast<size_t>(T * E));
  be.rms_norm(residual, T, *ones_h_, eps_, false, hr.data());
  const float root = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t d = 0; d < H; ++d) hr[t * H + d] = hr[t * H + d] * Y.router_scale[d] * root;
  be.matmul(hr.data(), T, *Y.router_proj, logits.data());
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  std::vector<float> wts(static_cast<size_t>(T * K));
  be.topk_route(logits.data(), T, E, K, /*softmax_first=*/true, /*normalize=*/true, ids.data(),
                wts.data());
  for (size_t i = 0; i < ids.size(); ++i) wts[i] *= Y.per_expert_scale[ids[i]];
  norm(residual, T, *Y.pre_ff_norm2, hr.data());
  moe_experts(be, Y.experts, Activation::kGeluTanh, ids.data(), wts.data(), K, hr.data(), T, H,
              out);
}

Status GemmaModel::forward(const ForwardBatch& batch, ForwardOutput* out) {
  PKV_RETURN_IF_ERROR(validate_batch(batch, geom_, cfg_.vocab_size));
  if (ple_dim_ > 0) {
    for (int32_t id : batch.token_ids)
      if (id >= ple_vocab_)
        return invalid_argument("forward batch: token id " + std::to_string(id) +
                                " is outside vocab_size_per_layer_input " +
                                std::to_string(ple_vocab_));
  }
  backend::Backend& be = *be_;
  const int64_t T = batch.num_tokens();
  const int64_t H = cfg_.hidden_size;
  if (batch.path == KVPath::kFlat) {
    for (const ForwardRow& row : batch.rows) row.flat->reserve(row.context_len + row.num_tokens);
  }
  KVAccess kv(batch, geom_);
  const size_t TH = static_cast<size_t>(T * H);
  ScratchBuffer x(kScratchX, TH), h(kScratchH, TH), y(kScratchY, TH);
  be.embedding(batch.token_ids.data(), T, *embed_, x.data());
  for (size_t i = 0; i < TH; ++i) x.data()[i] *= embed_scale_;

  // Per-layer inputs [T][L][P] = (rmsnorm(proj(x) · H^-0.5) + embed_pl(ids) · sqrt(P)) · 2^-0.5.
  const int32_t L = cfg_.num_hidden_layers;
  const int64_t P = ple_dim_, LP = static_cast<int64_t>(L) * P;
  std::vector<float> ple, ple_proj, ple_gate, ple_in;
  if (P > 0) {
    ple.resize(static_cast<size_t>(T * LP));
    ple_proj.resize(ple.size());
    be.embedding(batch.token_ids.data(), T, *ple_embed_, ple.data());
    be.matmul(x.data(), T, *ple_model_proj_, ple_proj.data());
    const float proj_scale = static_cast<float>(std::pow(static_cast<double>(H), -0.5));
    for (float& f : ple_proj) f *= proj_scale;
    norm(ple_proj.data(), T * L, *ple_proj_norm_, ple_proj.data());
    const float mix = static_cast<float>(std::pow(2.0, -0.5));
    for (size_t i = 0; i < ple.size(); ++i)
      ple[i] = (ple_proj[i] + ple[i] * ple_embed_scale_) * mix;
    ple_gate.resize(static_cast<size_t>(T * P));
    ple_in.resize(static_cast<size_t>(T * P));
  }
  std::vector<float> moe_out;
  for (int32_t li = 0; li < L; ++li) {
    const GemmaLayer& Y = layers_[li];
    norm(x.data(), T, *Y.input_norm, h.data());
    attention(Y, li, batch, kv, h.data(), T, y.data());
    norm(y.data(), T, *Y.post_attn_norm, y.data());
    be.add(x.data(), y.data(), T * H);
    norm(x.data(), T, *Y.pre_ff_norm, h.data());
    gated_mlp(be, Y.mlp, Activation::kGeluTanh, h.data(), T, y.data());
    if (Y.moe) {
      norm(y.data(), T, *Y.post_ff_norm1, y.data());
      moe_out.resize(TH);
      moe(Y, x.data(), T, moe_out.data());
      norm(moe_out.data(), T, *Y.post_ff_norm2, moe_out.data());
      be.add(y.data(), moe_out.data(), T * H);
    }
    norm(y.data(), T, *Y.post_ff_norm, y.data());
    be.add(x.data(), y.data(), T * H);
    if (P > 0) {
      be.matmul(x.data(), T, *Y.ple_gate, ple_gate.data());
      for (int64_t t = 0; t < T; ++t)
        std::memcpy(ple_in.data() + t * P, ple.data() + t * LP + li * P, P * sizeof(float));
      be.gelu_tanh_mul(ple_gate.data(), ple_in.data(), T * P, ple_gate.data());
      be.matmul(ple_gate.data(), T, *Y.ple_proj, y.data());
      norm(y.data(), T, *Y.ple_norm, y.data());
      be.add(x.data(), y.data(), T * H);
    }
    if (Y.has_layer_scalar && Y.layer_scalar != 1.0f)
      for (size_t i = 0; i < TH; ++i) x.data()[i] *= Y.layer_scalar;
  }
  if (batch.path == KVPath::kFlat) {
    for (const ForwardRow& row : batch.rows) row.flat->set_length(row.context_len + row.num_tokens);
  }
  std::vector<int64_t> pick = requested_logits_tokens(batch, cfg_.vocab_size, out);
  const int64_t NP = static_cast<int64_t>(pick.size());
  if (NP == 0) return ok_status();
  std::vector<float> sel(static_cast<size_t>(NP * H));
  for (int64_t i = 0; i < NP; ++i)
    std::memcpy(sel.data() + i * H, x.data() + pick[i] * H, H * sizeof(float));
  norm(sel.data(), NP, *final_norm_, sel.data());
  be.matmul(sel.data(), NP, *lm_head_, out->logits.data());
  if (final_softcap_ > 0.0f) {
    const float cap = final_softcap_;
    for (float& f : out->logits) f = std::tanh(f / cap) * cap;
  }
  return check_logits(*out);
}

}  // namespace

StatusOr<std::unique_ptr<Model>> create_gemma(std::shared_ptr<const Checkpoint> ckpt,
                                              const LoadOptions& options, backend::Backend& be) {
  return GemmaModel::create(std::move(ckpt), options, be);
}

}  // namespace pagedkv::model
