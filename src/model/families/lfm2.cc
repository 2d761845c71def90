// LFM2 (Liquid AI) and LFM2-MoE: a hybrid of gated short-convolution layers
// (short_conv.h) and grouped-query attention layers with per-head RMSNorm on q
// and k ("q_layernorm"/"k_layernorm") and RoPE. Every layer is pre-norm:
//   x += op(operator_norm(x));  x += ffn(ffn_norm(x))
// where op is the short conv or attention (layer_types "conv" | "full_attention",
// or the older full_attn_idxs), and ffn a SwiGLU MLP (w1 gate, w3 up, w2 down) —
// in lfm2_moe only for the first num_dense_layers layers, a sparse MoE after them
// (sigmoid router; expert_bias shifts the choice, not the weights; weights
// renormalized by norm_topk_prob with a 1e-6 epsilon, times routed_scaling_factor).
// The final norm is called `embedding_norm`. Tensor names are Hugging Face's.
//
// Cache: attention layers keep K/V in the full-attention group (0); conv layers
// keep (conv_L_cache - 1) · hidden floats of RecurrentState and no K/V
// (layer_group -1; group 1 is the kRecurrent group that declares it).
#include <cmath>
#include <cstring>
#include <optional>

#include "model/families/family_model.h"
#include "model/generation_config.h"
#include "model/layers.h"
#include "model/recurrent_state.h"
#include "model/registry.h"
#include "model/short_conv.h"

namespace pagedkv::model {
namespace {

// One decoder layer: an operator (attention or short conv) and a feed-forward
// (dense MLP or MoE), each behind its RMSNorm.
struct Lfm2Layer {
  WeightPtr operator_norm, ffn_norm;
  bool is_attention = false;  // else the short conv
  AttentionWeights attn;
  AttentionSpec spec;
  ShortConvWeights conv;
  bool is_moe = false;  // else the dense MLP
  MoeWeights moe;
  MlpWeights mlp;
};

class Lfm2Model : public FamilyModel {
 public:
  using FamilyModel::FamilyModel;
  // Reads config.json and loads the weights.
  Status load(const LoadOptions& options);

  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;

 private:
  Status read_config(const ConfigReader& c);
  Status load_ffn(int32_t i, const std::string& prefix, Lfm2Layer* L);

  float eps_ = 1e-5f;
  bool moe_family_ = false;
  int32_t conv_kernel_ = 3;
  bool conv_bias_ = false;
  std::vector<bool> attention_layer_;
  int64_t ff_dim_ = 0;
  // lfm2_moe
  int64_t num_dense_layers_ = 0, num_experts_ = 0, top_k_ = 0, moe_inter_ = 0;
  bool use_expert_bias_ = true, norm_topk_ = true;
  float routed_scale_ = 1.0f;
  EmbeddingWeights io_;
  std::vector<Lfm2Layer> layers_;
};

// Reads an integer field that must lie in [lo, hi].
Status read_bounded(const ConfigReader& c, const char* field, std::optional<int64_t> dflt,
                    int64_t lo, int64_t hi, int64_t* out) {
  if (dflt) {
    PKV_ASSIGN_OR_RETURN(*out, c.get_int_or(field, *dflt));
  } else {
    PKV_ASSIGN_OR_RETURN(*out, c.get_int(field));
  }
  if (*out < lo || *out > hi)
    return c.error(field, "must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                              "], got " + std::to_string(*out));
  return ok_status();
}

// LFM2's MLP width: block_ff_dim (the original name) or intermediate_size, shrunk
// to 2/3, scaled by block_ffn_dim_multiplier and rounded up to block_multiple_of
// when block_auto_adjust_ff_dim (default true).
StatusOr<int64_t> lfm2_ff_dim(const ConfigReader& c) {
  constexpr int64_t kMax = int64_t{1} << 30;
  int64_t ff;
  const char* name = c.has("block_ff_dim") ? "block_ff_dim" : "intermediate_size";
  PKV_RETURN_IF_ERROR(read_bounded(c, name, std::nullopt, 1, kMax, &ff));
  PKV_ASSIGN_OR_RETURN(bool adjust, c.get_bool_or("block_auto_adjust_ff_dim", true));
  if (!adjust) return ff;
  int64_t multiple;
  PKV_RETURN_IF_ERROR(read_bounded(c, "block_multiple_of", 256, 1, kMax, &multiple));
  PKV_ASSIGN_OR_RETURN(double mult, c.get_double_or("block_ffn_dim_multiplier", 1.0));
  if (!(mult > 0.0 && mult <= 64.0))
    return c.error("block_ffn_dim_multiplier", "must be in (0, 64]");
  ff = 2 * ff / 3;
  ff = static_cast<int64_t>(mult * static_cast<double>(ff));
  ff = multiple * ((ff + multiple - 1) / multiple);
  if (ff < 1 || ff > kMax) return c.error(name, "gives an adjusted MLP width out of range");
  return ff;
}

Status Lfm2Model::read_config(const ConfigReader& c) {
  ModelConfig& mc = cfg_;
  PKV_ASSIGN_OR_RETURN(mc.model_type, c.get_string("model_type"));
  moe_family_ = mc.model_type == "lfm2_moe";
  constexpr int64_t kMax = int64_t{1} << 30;
  int64_t v;
  struct Field {
    const char* name;
    int32_t* dst;
  };
  for (Field f : {Field{"vocab_size", &mc.vocab_size}, Field{"hidden_size", &mc.hidden_size},
                  Field{"num_hidden_layers", &mc.num_hidden_layers},
                  Field{"num_attention_heads", &mc.num_attention_heads}}) {
    PKV_RETURN_IF_ERROR(read_bounded(c, f.name, std::nullopt, 1, kMax, &v));
    *f.dst = static_cast<int32_t>(v);
  }
  PKV_RETURN_IF_ERROR(read_bounded(c, "num_key_value_heads", mc.num_attention_heads, 1, kMax, &v));
  mc.num_key_value_heads = static_cast<int32_t>(v);
  if (mc.num_attention_heads % mc.num_key_value_heads != 0)
    return c.error("num_key_value_heads", "must divide num_attention_heads");
  PKV_RETURN_IF_ERROR(
      read_bounded(c, "head_dim", mc.hidden_size / mc.num_attention_heads, 1, 1024, &v));
  mc.head_dim = static_cast<int32_t>(v);
  PKV_RETURN_IF_ERROR(read_bounded(c, "max_position_embeddings", 128000, 1, kMaxPositionEmbeddings,
                                   &mc.max_position_embeddings));
  // The original configs say tie_embedding; both default to tied.
  PKV_ASSIGN_OR_RETURN(bool tie, c.get_bool_or("tie_embedding", true));
  PKV_ASSIGN_OR_RETURN(mc.tie_word_embeddings, c.get_bool_or("tie_word_embeddings", tie));
  PKV_ASSIGN_OR_RETURN(auto eos, c.get_int_list_or_empty("eos_token_id"));
  for (int64_t e : eos) {
    if (e < 0 || e > INT32_MAX) return c.error("eos_token_id", "holds a negative or huge id");
    mc.eos_token_ids.push_back(static_cast<int32_t>(e));
  }
  PKV_RETURN_IF_ERROR(merge_generation_config_eos(mc.source_path, &mc.eos_token_ids));
  PKV_RETURN_IF_ERROR(read_bounded(c, "bos_token_id", -1, -1, INT32_MAX, &v));
  mc.bos_token_id = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(mc.cache, read_cache_config(c));
  PKV_ASSIGN_OR_RETURN(double eps, c.get_double_or("norm_eps", 1e-5));
  if (!(eps > 0.0 && eps <= 1.0) || !(static_cast<float>(eps) > 0.0f))
    return c.error("norm_eps", "must be in (0, 1] (and not 0 as a float)");
  eps_ = static_cast<float>(eps);
  PKV_RETURN_IF_ERROR(read_bounded(c, "conv_L_cache", 3, 1, 64, &v));
  conv_kernel_ = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(conv_bias_, c.get_bool_or("conv_bias", false));

  // Which layers attend: layer_types, else full_attn_idxs, else all of them.
  const int32_t n = mc.num_hidden_layers;
  PKV_ASSIGN_OR_RETURN(auto types, c.get_string_list_or_empty("layer_types"));
  attention_layer_.assign(static_cast<size_t>(n), types.empty());
  if (!types.empty()) {
    if (static_cast<int32_t>(types.size()) != n)
      return c.error("layer_types", "must have num_hidden_layers entries");
    for (int32_t i = 0; i < n; ++i) {
      if (types[i] != "conv" && types[i] != "full_attention")
        return c.error("layer_types", "entry " + std::to_string(i) + " '" + types[i] +
                                          "' is not conv or full_attention");
      attention_layer_[i] = types[i] == "full_attention";
    }
  } else if (c.has("full_attn_idxs")) {
    PKV_ASSIGN_OR_RETURN(auto idxs, c.get_int_list_or_empty("full_attn_idxs"));
    attention_layer_.assign(static_cast<size_t>(n), false);
    for (int64_t i : idxs) {
      if (i < 0 || i >= n) return c.error("full_attn_idxs", "holds a layer index out of range");
      attention_layer_[static_cast<size_t>(i)] = true;
    }
  }

  if (!moe_family_) {
    PKV_ASSIGN_OR_RETURN(ff_dim_, lfm2_ff_dim(c));
    return ok_status();
  }
  // lfm2_moe: the dense layers' width is intermediate_size as written.
  PKV_RETURN_IF_ERROR(read_bounded(c, "intermediate_size", std::nullopt, 1, kMax, &ff_dim_));
  PKV_RETURN_IF_ERROR(read_bounded(c, "num_dense_layers", 2, 0, n, &num_dense_layers_));
  PKV_RETURN_IF_ERROR(read_bounded(c, "num_experts", 32, 1, 4096, &num_experts_));
  PKV_RETURN_IF_ERROR(read_bounded(c, "num_experts_per_tok", 4, 1, num_experts_, &top_k_));
  PKV_RETURN_IF_ERROR(read_bounded(c, "moe_intermediate_size", 1792, 1, kMax, &moe_inter_));
  PKV_ASSIGN_OR_RETURN(use_expert_bias_, c.get_bool_or("use_expert_bias", true));
  PKV_ASSIGN_OR_RETURN(norm_topk_, c.get_bool_or("norm_topk_prob", true));
  PKV_ASSIGN_OR_RETURN(double scale, c.get_double_or("routed_scaling_factor", 1.0));
  if (!(scale > 0.0 && scale <= 1e6))
    return c.error("routed_scaling_factor", "must be in (0, 1e6]");
  routed_scale_ = static_cast<float>(scale);
  return ok_status();
}

Status Lfm2Model::load_ffn(int32_t i, const std::string& p, Lfm2Layer* L) {
  const Checkpoint& ck = *ckpt_;
  backend::Backend& be = *be_;
  const int64_t H = cfg_.hidden_size;
  auto load_mlp = [&](const std::string& x, int64_t inter, MlpWeights* m) -> Status {
    PKV_ASSIGN_OR_RETURN(m->gate, load_weight(ck, be, x + "w1.weight", {inter, H}));
    PKV_ASSIGN_OR_RETURN(m->up, load_weight(ck, be, x + "w3.weight", {inter, H}));
    PKV_ASSIGN_OR_RETURN(m->down, load_weight(ck, be, x + "w2.weight", {H, inter}));
    return ok_status();
  };
  L->is_moe = moe_family_ && i >= num_dense_layers_;
  if (!L->is_moe) return load_mlp(p, ff_dim_, &L->mlp);
  MoeWeights& m = L->moe;
  PKV_ASSIGN_OR_RETURN(m.router, load_weight(ck, be, p + "gate.weight", {num_experts_, H}));
  m.top_k = static_cast<int32_t>(top_k_);
  m.norm_topk_prob = norm_topk_;
  m.score = RouterScore::kSigmoid;
  m.norm_eps = 1e-6f;
  m.routed_scale = routed_scale_;
  if (use_expert_bias_) {
    PKV_ASSIGN_OR_RETURN(m.selection_bias, load_host_vector(ck, p + "expert_bias", num_experts_));
  }
  m.experts.resize(static_cast<size_t>(num_experts_));
  for (int64_t e = 0; e < num_experts_; ++e)
    PKV_RETURN_IF_ERROR(
        load_mlp(p + "experts." + std::to_string(e) + ".", moe_inter_, &m.experts[e]));
  return ok_status();
}

Status Lfm2Model::load(const LoadOptions& options) {
  const ConfigReader& c = ckpt_->config();
  backend::Backend& be = *be_;
  PKV_RETURN_IF_ERROR(read_config(c));
  const ModelConfig& mc = cfg_;
  const int32_t n = mc.num_hidden_layers;
  // Per-layer tables are sized from config.json: check it against the checkpoint first.
  const std::string last = "model.layers." + std::to_string(n - 1) + ".operator_norm.weight";
  if (ckpt_->find(last) == nullptr)
    return c.error("num_hidden_layers", "is " + std::to_string(n) + " but the checkpoint in " +
                                            ckpt_->dir() + " has no tensor " + last);
  const int64_t H = mc.hidden_size, V = mc.vocab_size, D = mc.head_dim;
  const int64_t NH = mc.num_attention_heads, KVH = mc.num_key_value_heads;
  backend::RopeParams rope;
  PKV_ASSIGN_OR_RETURN(rope, parse_rope(c, mc.head_dim, "full_attention"));
  if (!c.has("rope_parameters") && !c.has("rope_theta")) {
    // LFM2's own default (and the original configs' `theta`).
    PKV_ASSIGN_OR_RETURN(double theta, c.get_double_or("theta", 1e6));
    if (!(theta > 0.0) || !std::isfinite(static_cast<float>(theta)))
      return c.error("theta", "must be positive and finite as a float");
    rope.theta = static_cast<float>(theta);
  }

  PKV_ASSIGN_OR_RETURN(io_, load_embedding_weights(*ckpt_, be, V, H, mc.tie_word_embeddings,
                                                   "model.embedding_norm.weight"));

  // Two cache groups: full attention (the attention layers' K/V) and the
  // recurrent group of the conv layers' state (filled in per layer below).
  KVGeometry& g = geom_;
  g.groups = {CacheGroup{CacheGroupKind::kFullAttention, 0},
              CacheGroup{CacheGroupKind::kRecurrent, 0}};
  g.layer_group.assign(n, -1);
  g.layer_kv_source.assign(n, -1);
  g.layer_state_floats.assign(n, 0);
  g.num_layers = n;
  g.num_kv_heads = mc.num_key_value_heads;
  g.head_dim = mc.head_dim;
  g.block_size = resolve_block_size(options, mc.cache);
  g.dtype = options.kv_dtype.value_or(KVDType::kF32);  // resolved by load_model

  layers_.resize(n);
  for (int32_t i = 0; i < n; ++i) {
    Lfm2Layer& L = layers_[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    PKV_ASSIGN_OR_RETURN(L.operator_norm, load_weight(*ckpt_, be, p + "operator_norm.weight", {H}));
    PKV_ASSIGN_OR_RETURN(L.ffn_norm, load_weight(*ckpt_, be, p + "ffn_norm.weight", {H}));
    L.is_attention = attention_layer_[i];
    if (L.is_attention) {
      PKV_ASSIGN_OR_RETURN(L.attn, load_attention_weights(
                                       *ckpt_, be, p + "self_attn.", NH, KVH, D, H, /*bias=*/false,
                                       AttentionNames{"out_proj", "q_layernorm", "k_layernorm"}));
      L.spec.layer = i;
      L.spec.kv_layer = i;
      L.spec.num_heads = mc.num_attention_heads;
      L.spec.num_kv_heads = mc.num_key_value_heads;
      L.spec.head_dim = mc.head_dim;
      L.spec.rms_eps = eps_;
      L.spec.scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
      L.spec.rope = rope;
      g.layer_group[i] = 0;
    } else {
      PKV_ASSIGN_OR_RETURN(
          L.conv, load_short_conv(*ckpt_, be, p + "conv.", i, H, conv_kernel_, conv_bias_));
      g.layer_state_floats[i] = short_conv_state_floats(H, conv_kernel_);
    }
    PKV_RETURN_IF_ERROR(load_ffn(i, p + "feed_forward.", &L));
  }
  return ok_status();
}

Status Lfm2Model::forward(const ForwardBatch& batch, ForwardOutput* out) {
  backend::Backend& be = *be_;
  const int64_t H = cfg_.hidden_size;
  DecoderFrame f{&geom_, cfg_.vocab_size, H, &io_, eps_};
  auto stack = [&](KVAccess& kv, float* x, float* h, float* y, int64_t T) {
    for (const Lfm2Layer& L : layers_) {
      be.rms_norm(x, T, *L.operator_norm, eps_, false, h);
      if (L.is_attention) {
        attention_block(be, L.spec, L.attn, batch, kv, h, T, y);
      } else {
        short_conv_block(be, L.conv, batch, h, T, y);
      }
      be.add(x, y, T * H);
      residual_ffn(be, *L.ffn_norm, eps_, L.is_moe, L.mlp, L.moe, x, h, y, T, H);
    }
  };
  return run_decoder(be, f, batch, stack, out);
}

}  // namespace

StatusOr<std::unique_ptr<Model>> create_lfm2(std::shared_ptr<const Checkpoint> ckpt,
                                             const LoadOptions& options, backend::Backend& be) {
  auto m = std::make_unique<Lfm2Model>(std::move(ckpt), be);
  PKV_RETURN_IF_ERROR(m->load(options));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace pagedkv::model
