// Qwen3 (dense) and Qwen3-MoE: pre-norm decoder layers with grouped-query
// attention, per-head RMSNorm on q and k before RoPE, and either a gated SiLU MLP
// or a sparse mixture of experts (qwen3_moe: every decoder_sparse_step-th layer not
// listed in mlp_only_layers; softmax router, top num_experts_per_tok, optionally
// renormalized by norm_topk_prob). Tensor names are Hugging Face's.
#include <cmath>

#include "model/families/family_model.h"
#include "model/layers.h"
#include "model/registry.h"

namespace pagedkv::model {
namespace {

struct LayerWeights {
  WeightPtr input_norm, post_norm;
  AttentionWeights attn;
  AttentionSpec spec;
  bool is_moe = false;
  MlpWeights mlp;
  MoeWeights moe;
};

class Qwen3Model : public FamilyModel {
 public:
  using FamilyModel::FamilyModel;
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;

  static StatusOr<std::unique_ptr<Model>> create(std::shared_ptr<const Checkpoint> ckpt,
                                                 const LoadOptions& options, backend::Backend& be);

 private:
  float eps_ = 1e-6f;
  EmbeddingWeights io_;
  std::vector<LayerWeights> layers_;
};

StatusOr<std::unique_ptr<Model>> Qwen3Model::create(std::shared_ptr<const Checkpoint> ckpt,
                                                    const LoadOptions& options,
                                                    backend::Backend& be) {
  std::unique_ptr<Qwen3Model> m(new Qwen3Model(ckpt, be));
  const ConfigReader& c = ckpt->config();
  ModelConfig& mc = m->cfg_;
  PKV_ASSIGN_OR_RETURN(mc.model_type, c.get_string("model_type"));
  const bool moe_family = mc.model_type == "qwen3_moe";
  int64_t v;
  PKV_ASSIGN_OR_RETURN(v, c.get_int("vocab_size"));
  PKV_RETURN_IF_ERROR(check_positive(c, "vocab_size", v));
  mc.vocab_size = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(v, c.get_int("hidden_size"));
  PKV_RETURN_IF_ERROR(check_positive(c, "hidden_size", v));
  mc.hidden_size = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(v, c.get_int("num_hidden_layers"));
  PKV_RETURN_IF_ERROR(check_positive(c, "num_hidden_layers", v));
  mc.num_hidden_layers = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(v, c.get_int("num_attention_heads"));
  PKV_RETURN_IF_ERROR(check_positive(c, "num_attention_heads", v));
  mc.num_attention_heads = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(v, c.get_int_or("num_key_value_heads", mc.num_attention_heads));
  PKV_RETURN_IF_ERROR(check_positive(c, "num_key_value_heads", v));
  mc.num_key_value_heads = static_cast<int32_t>(v);
  if (mc.num_attention_heads % mc.num_key_value_heads != 0)
    return c.error("num_key_value_heads", "must divide num_attention_heads");
  PKV_ASSIGN_OR_RETURN(v, c.get_int_or("head_dim", mc.hidden_size / mc.num_attention_heads));
  PKV_RETURN_IF_ERROR(check_positive(c, "head_dim", v));
  if (v > 1024) return c.error("head_dim", "must be at most 1024");
  mc.head_dim = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(mc.max_position_embeddings, c.get_int_or("max_position_embeddings", 32768));
  PKV_ASSIGN_OR_RETURN(mc.tie_word_embeddings, c.get_bool_or("tie_word_embeddings", false));
  PKV_RETURN_IF_ERROR(read_special_token_ids(c, ckpt->dir(), &mc));
  PKV_ASSIGN_OR_RETURN(mc.cache, read_cache_config(c));
  PKV_ASSIGN_OR_RETURN(m->eps_, read_norm_eps(c, "rms_norm_eps", 1e-6));
  int64_t inter;
  PKV_ASSIGN_OR_RETURN(inter, c.get_int("intermediate_size"));
  PKV_RETURN_IF_ERROR(check_positive(c, "intermediate_size", inter));
  bool attn_bias;
  PKV_ASSIGN_OR_RETURN(attn_bias, c.get_bool_or("attention_bias", false));

  // Shapes from config.json drive allocations (per-layer tables, the default KV
  // pool): check them against the checkpoint before allocating anything.
  if (ckpt->find("model.layers." + std::to_string(mc.num_hidden_layers - 1) +
                 ".input_layernorm.weight") == nullptr) {
    return c.error("num_hidden_layers",
                   "is " + std::to_string(mc.num_hidden_layers) + " but the checkpoint in " +
                       ckpt->dir() + " has no tensor model.layers." +
                       std::to_string(mc.num_hidden_layers - 1) + ".input_layernorm.weight");
  }
  if (mc.max_position_embeddings < 1 || mc.max_position_embeddings > kMaxPositionEmbeddings) {
    return c.error("max_position_embeddings",
                   "must be in [1, " + std::to_string(kMaxPositionEmbeddings) + "], got " +
                       std::to_string(mc.max_position_embeddings));
  }

  // Layer types: explicit layer_types, else Qwen3's rule (sliding from
  // max_window_layers on when use_sliding_window).
  PKV_ASSIGN_OR_RETURN(auto layer_types, c.get_string_list_or_empty("layer_types"));
  bool use_sw;
  PKV_ASSIGN_OR_RETURN(use_sw, c.get_bool_or("use_sliding_window", false));
  int64_t sw, max_window_layers;
  PKV_ASSIGN_OR_RETURN(sw, c.get_int_or("sliding_window", 0));
  if (sw < 0 || sw > INT32_MAX) return c.error("sliding_window", "must be in [0, 2^31-1]");
  PKV_ASSIGN_OR_RETURN(max_window_layers, c.get_int_or("max_window_layers", mc.num_hidden_layers));
  if (layer_types.empty()) {
    for (int32_t i = 0; i < mc.num_hidden_layers; ++i)
      layer_types.push_back(use_sw && sw > 0 && i >= max_window_layers ? "sliding_attention"
                                                                       : "full_attention");
  }
  if (static_cast<int32_t>(layer_types.size()) != mc.num_hidden_layers)
    return c.error("layer_types", "must have num_hidden_layers entries");

  // MoE fields.
  int64_t num_experts = 0, top_k = 0, moe_inter = 0, sparse_step = 1;
  bool norm_topk = false;
  std::vector<int64_t> mlp_only;
  if (moe_family) {
    if (c.has("num_experts")) {
      PKV_ASSIGN_OR_RETURN(num_experts, c.get_int("num_experts"));
    } else {
      PKV_ASSIGN_OR_RETURN(num_experts, c.get_int("num_local_experts"));
    }
    PKV_RETURN_IF_ERROR(check_positive(c, "num_experts", num_experts));
    PKV_ASSIGN_OR_RETURN(top_k, c.get_int("num_experts_per_tok"));
    PKV_RETURN_IF_ERROR(check_positive(c, "num_experts_per_tok", top_k));
    if (top_k > num_experts) return c.error("num_experts_per_tok", "exceeds the number of experts");
    PKV_ASSIGN_OR_RETURN(moe_inter, c.get_int("moe_intermediate_size"));
    PKV_RETURN_IF_ERROR(check_positive(c, "moe_intermediate_size", moe_inter));
    PKV_ASSIGN_OR_RETURN(sparse_step, c.get_int_or("decoder_sparse_step", 1));
    PKV_ASSIGN_OR_RETURN(norm_topk, c.get_bool_or("norm_topk_prob", false));
    PKV_ASSIGN_OR_RETURN(mlp_only, c.get_int_list_or_empty("mlp_only_layers"));
  }

  const int64_t H = mc.hidden_size, V = mc.vocab_size, D = mc.head_dim;
  const int64_t NH = mc.num_attention_heads, KVH = mc.num_key_value_heads;
  PKV_ASSIGN_OR_RETURN(
      m->io_, load_embedding_weights(*ckpt, be, V, H, mc.tie_word_embeddings, "model.norm.weight"));

  m->geom_.num_layers = mc.num_hidden_layers;
  m->geom_.num_kv_heads = mc.num_key_value_heads;
  m->geom_.head_dim = mc.head_dim;
  m->geom_.block_size = resolve_block_size(options, mc.cache);
  m->geom_.dtype = options.kv_dtype.value_or(KVDType::kF32);  // resolved by load_model
  m->geom_.groups = {CacheGroup{CacheGroupKind::kFullAttention, 0}};
  m->geom_.layer_group.assign(mc.num_hidden_layers, 0);
  m->geom_.layer_kv_source.assign(mc.num_hidden_layers, -1);

  m->layers_.resize(mc.num_hidden_layers);
  for (int32_t i = 0; i < mc.num_hidden_layers; ++i) {
    LayerWeights& L = m->layers_[i];
    std::string p = "model.layers." + std::to_string(i) + ".";
    PKV_ASSIGN_OR_RETURN(L.input_norm, load_weight(*ckpt, be, p + "input_layernorm.weight", {H}));
    PKV_ASSIGN_OR_RETURN(L.post_norm,
                         load_weight(*ckpt, be, p + "post_attention_layernorm.weight", {H}));
    PKV_ASSIGN_OR_RETURN(
        L.attn, load_attention_weights(*ckpt, be, p + "self_attn.", NH, KVH, D, H, attn_bias));
    const std::string& lt = layer_types[i];
    if (lt != "full_attention" && lt != "sliding_attention")
      return c.error("layer_types", "entry " + std::to_string(i) + " '" + lt +
                                        "' is not full_attention or sliding_attention");
    L.spec.layer = i;
    L.spec.kv_layer = i;
    L.spec.num_heads = mc.num_attention_heads;
    L.spec.num_kv_heads = mc.num_key_value_heads;
    L.spec.head_dim = mc.head_dim;
    L.spec.rms_eps = m->eps_;
    L.spec.scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
    L.spec.sliding_window = lt == "sliding_attention" ? static_cast<int32_t>(sw) : 0;
    PKV_ASSIGN_OR_RETURN(L.spec.rope, parse_rope(c, mc.head_dim, lt));

    bool in_mlp_only = false;
    for (int64_t x : mlp_only) in_mlp_only |= x == i;
    L.is_moe = moe_family && !in_mlp_only && num_experts > 0 && sparse_step > 0 &&
               (i + 1) % sparse_step == 0;
    std::string f = p + "mlp.";
    if (L.is_moe) {
      PKV_ASSIGN_OR_RETURN(L.moe.router,
                           load_weight(*ckpt, be, f + "gate.weight", {num_experts, H}));
      L.moe.top_k = static_cast<int32_t>(top_k);
      L.moe.norm_topk_prob = norm_topk;
      L.moe.experts.resize(static_cast<size_t>(num_experts));
      for (int64_t e = 0; e < num_experts; ++e) {
        std::string x = f + "experts." + std::to_string(e) + ".";
        auto& ew = L.moe.experts[e];
        PKV_ASSIGN_OR_RETURN(ew.gate,
                             load_weight(*ckpt, be, x + "gate_proj.weight", {moe_inter, H}));
        PKV_ASSIGN_OR_RETURN(ew.up, load_weight(*ckpt, be, x + "up_proj.weight", {moe_inter, H}));
        PKV_ASSIGN_OR_RETURN(ew.down,
                             load_weight(*ckpt, be, x + "down_proj.weight", {H, moe_inter}));
      }
    } else {
      PKV_ASSIGN_OR_RETURN(L.mlp.gate, load_weight(*ckpt, be, f + "gate_proj.weight", {inter, H}));
      PKV_ASSIGN_OR_RETURN(L.mlp.up, load_weight(*ckpt, be, f + "up_proj.weight", {inter, H}));
      PKV_ASSIGN_OR_RETURN(L.mlp.down, load_weight(*ckpt, be, f + "down_proj.weight", {H, inter}));
    }
  }
  return std::unique_ptr<Model>(std::move(m));
}

Status Qwen3Model::forward(const ForwardBatch& batch, ForwardOutput* out) {
  backend::Backend& be = *be_;
  const int64_t H = cfg_.hidden_size;
  DecoderFrame f{&geom_, cfg_.vocab_size, H, &io_, eps_};
  return run_decoder(
      be, f, batch,
      [&](KVAccess& kv, float* x, float* h, float* y, int64_t T) {
        for (const LayerWeights& L : layers_) {
          be.rms_norm(x, T, *L.input_norm, eps_, false, h);
          attention_block(be, L.spec, L.attn, batch, kv, h, T, y);
          be.add(x, y, T * H);
          residual_ffn(be, *L.post_norm, eps_, L.is_moe, L.mlp, L.moe, x, h, y, T, H);
        }
      },
      out);
}

}  // namespace

StatusOr<std::unique_ptr<Model>> create_qwen3(std::shared_ptr<const Checkpoint> ckpt,
                                              const LoadOptions& options, backend::Backend& be) {
  return Qwen3Model::create(std::move(ckpt), options, be);
}

}  // namespace pagedkv::model
