// Qwen3-Next and Qwen3.5 (dense `qwen3_5_text`, MoE `qwen3_5_moe_text`, and their
// multimodal `qwen3_5` / `qwen3_5_moe` checkpoints read through the nested
// text_config): hybrid decoders whose layers are either Gated DeltaNet linear
// attention (gated_deltanet.h, "linear_attention") or gated full attention
// ("full_attention": q/k RMSNorm, partial rotary, output gated by sigmoid), each
// followed by a gated SiLU MLP or a top-k mixture of experts with a sigmoid-gated
// shared expert. Every RMSNorm of the residual stream and q/k norms scale by
// (1 + weight); the GDN output norm scales by weight. Tensor names are Hugging
// Face's.
//
// Cache model: full-attention layers use cache group 0 (kFullAttention, paged or
// flat K/V); GDN layers are group 1 (kRecurrent) and keep conv + delta-rule state
// in the row's RecurrentState (KVGeometry::layer_state_floats), no per-token K/V.
#include <cmath>
#include <cstring>

#include "model/families/family_model.h"
#include "model/gated_deltanet.h"
#include "model/generation_config.h"
#include "model/layers.h"
#include "model/recurrent_state.h"
#include "model/registry.h"

namespace pagedkv::model {
namespace {

struct HybridLayer {
  WeightPtr input_norm, post_norm;
  bool linear = false;  // Gated DeltaNet (else full attention)
  AttentionWeights attn;
  AttentionSpec spec;
  GatedDeltaNetSpec gdn_spec;
  GatedDeltaNetWeights gdn;
  bool is_moe = false;
  MlpWeights mlp;
  MoeWeights moe;
  bool has_shared = false;
  SharedExpertWeights shared;
};

// The config.json fields beyond ModelConfig.
struct HybridConfig {
  bool fused_gdn = false;  // qwen3_next's in_proj_qkvz / in_proj_ba layout
  bool attn_bias = false;
  int64_t conv_k = 4, dk = 128, dv = 128, nk = 16, nv = 32;
  std::vector<std::string> layer_types;
  bool moe = false;
  int64_t inter = 0, experts = 0, top_k = 0, moe_inter = 0, shared_inter = 0, step = 1;
  bool norm_topk = true;
  std::vector<int64_t> mlp_only;
  bool layer_is_moe(int64_t i) const {
    if (!moe) return false;
    for (int64_t x : mlp_only)
      if (x == i) return false;
    return experts > 0 && (i + 1) % step == 0;
  }
};

// One integer field of config.json: absent → dflt (required when dflt < 0); the
// value must lie in [lo, hi].
struct IntField {
  const char* name;
  int64_t dflt;
  int64_t lo, hi;
  int64_t* dst;
};

Status read_ints(const ConfigReader& c, std::initializer_list<IntField> fields) {
  for (const IntField& f : fields) {
    int64_t v;
    if (f.dflt < 0) {
      PKV_ASSIGN_OR_RETURN(v, c.get_int(f.name));
    } else {
      PKV_ASSIGN_OR_RETURN(v, c.get_int_or(f.name, f.dflt));
    }
    if (v < f.lo || v > f.hi)
      return c.error(f.name, "must be in [" + std::to_string(f.lo) + ", " + std::to_string(f.hi) +
                                 "], got " + std::to_string(v));
    *f.dst = v;
  }
  return ok_status();
}

Status read_token_ids(const ConfigReader& c, const std::string& dir, ModelConfig* mc) {
  PKV_ASSIGN_OR_RETURN(std::vector<int64_t> eos, c.get_int_list_or_empty("eos_token_id"));
  PKV_ASSIGN_OR_RETURN(int64_t bos, c.get_int_or("bos_token_id", -1));
  if (bos < -1 || bos > INT32_MAX) return c.error("bos_token_id", "is not a token id");
  mc->bos_token_id = static_cast<int32_t>(bos);
  for (int64_t e : eos) {
    if (e < 0 || e > INT32_MAX) return c.error("eos_token_id", "holds " + std::to_string(e));
    mc->eos_token_ids.push_back(static_cast<int32_t>(e));
  }
  return merge_generation_config_eos(dir, &mc->eos_token_ids);
}

class QwenHybridModel final : public FamilyModel {
 public:
  using FamilyModel::FamilyModel;
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;

  // config.json → cfg_, hc_, eps_ (nothing allocated yet).
  Status read_config();
  // The weights and the KV geometry.
  Status load(const LoadOptions& options);

 private:
  Status load_mixer(int32_t i, HybridLayer& L);
  Status load_feed_forward(int32_t i, HybridLayer& L);
  // validate_batch, plus every row's RecurrentState made for this geometry.
  Status check_batch(const ForwardBatch& batch) const;
  // y = the layer's token mixer (Gated DeltaNet or gated attention) of h.
  void mix_tokens(const HybridLayer& L, const ForwardBatch& batch, KVAccess& kv, const float* h,
                  int64_t T, float* y) const;
  // y = the layer's MLP, or its experts + gated shared expert, of h.
  void feed_forward(const HybridLayer& L, const float* h, int64_t T, float* y) const;

  HybridConfig hc_;
  float eps_ = 1e-6f;
  std::vector<HybridLayer> layers_;
  WeightPtr embed_, final_norm_, lm_head_owned_;
  const backend::Weight* lm_head_ = nullptr;  // embed_ when the embeddings are tied
};

Status QwenHybridModel::read_config() {
  const ConfigReader& c = ckpt_->config();
  ModelConfig& mc = cfg_;
  mc.source_path = ckpt_->dir();
  PKV_ASSIGN_OR_RETURN(mc.model_type, c.get_string("model_type"));
  const bool next = mc.model_type == "qwen3_next";
  hc_.fused_gdn = next;
  hc_.moe = next || mc.model_type == "qwen3_5_moe_text" || mc.model_type == "qwen3_5_moe";
  int64_t vocab, hidden, layers, heads, kv_heads, head_dim, interval;
  PKV_RETURN_IF_ERROR(read_ints(c, {{"vocab_size", -1, 1, kMaxConfigSize, &vocab},
                                    {"hidden_size", -1, 1, kMaxConfigSize, &hidden},
                                    {"num_hidden_layers", -1, 1, kMaxConfigSize, &layers},
                                    {"num_attention_heads", -1, 1, kMaxConfigSize, &heads}}));
  PKV_RETURN_IF_ERROR(read_ints(c, {{"num_key_value_heads", heads, 1, heads, &kv_heads},
                                    {"head_dim", hidden / heads, 2, 1024, &head_dim},
                                    {"max_position_embeddings", 32768, 1, kMaxPositionEmbeddings,
                                     &mc.max_position_embeddings},
                                    {"linear_conv_kernel_dim", 4, 1, 64, &hc_.conv_k},
                                    {"linear_key_head_dim", 128, 1, 1024, &hc_.dk},
                                    {"linear_value_head_dim", 128, 1, 1024, &hc_.dv},
                                    {"linear_num_key_heads", 16, 1, 4096, &hc_.nk},
                                    {"linear_num_value_heads", 32, 1, 4096, &hc_.nv},
                                    {"full_attention_interval", 4, 1, kMaxConfigSize, &interval}}));
  if (heads % kv_heads != 0)
    return c.error("num_key_value_heads", "must divide num_attention_heads");
  if (hc_.nv % hc_.nk != 0)
    return c.error("linear_num_key_heads", "must divide linear_num_value_heads");
  mc.vocab_size = static_cast<int32_t>(vocab);
  mc.hidden_size = static_cast<int32_t>(hidden);
  mc.num_hidden_layers = static_cast<int32_t>(layers);
  mc.num_attention_heads = static_cast<int32_t>(heads);
  mc.num_key_value_heads = static_cast<int32_t>(kv_heads);
  mc.head_dim = static_cast<int32_t>(head_dim);
  PKV_ASSIGN_OR_RETURN(mc.tie_word_embeddings, c.get_bool_or("tie_word_embeddings", false));
  PKV_RETURN_IF_ERROR(read_token_ids(c, ckpt_->dir(), &mc));
  PKV_ASSIGN_OR_RETURN(mc.cache, read_cache_config(c));
  PKV_ASSIGN_OR_RETURN(double eps, c.get_double_or("rms_norm_eps", 1e-6));
  if (!(eps > 0.0 && eps <= 1.0) || !(static_cast<float>(eps) > 0.0f))
    return c.error("rms_norm_eps", "must be in (0, 1] (and not 0 as a float)");
  eps_ = static_cast<float>(eps);
  PKV_ASSIGN_OR_RETURN(hc_.attn_bias, c.get_bool_or("attention_bias", false));

  // Layer kinds: layer_types, else every full_attention_interval-th layer is full.
  PKV_ASSIGN_OR_RETURN(hc_.layer_types, c.get_string_list_or_empty("layer_types"));
  for (int64_t i = 0; hc_.layer_types.empty() && i < layers; ++i)
    hc_.layer_types.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
  if (static_cast<int64_t>(hc_.layer_types.size()) != layers)
    return c.error("layer_types", "must have num_hidden_layers entries");

  // Feed-forward: qwen3_next (MoE on every decoder_sparse_step-th layer not in
  // mlp_only_layers), qwen3_5_moe (MoE everywhere, top-k always renormalized),
  // qwen3_5 (dense everywhere).
  if (hc_.moe) {
    PKV_RETURN_IF_ERROR(read_ints(
        c, {{"num_experts", -1, 0, 1 << 16, &hc_.experts},
            {"num_experts_per_tok", -1, 1, 1 << 16, &hc_.top_k},
            {"moe_intermediate_size", -1, 1, kMaxConfigSize, &hc_.moe_inter},
            // transformers' default; 0 = no shared expert
            {"shared_expert_intermediate_size", 512, 0, kMaxConfigSize, &hc_.shared_inter},
            {"decoder_sparse_step", 1, 1, kMaxConfigSize, &hc_.step}}));
    if (hc_.experts > 0 && hc_.top_k > hc_.experts)
      return c.error("num_experts_per_tok", "exceeds the number of experts");
    if (next) {
      PKV_ASSIGN_OR_RETURN(hc_.norm_topk, c.get_bool_or("norm_topk_prob", true));
      PKV_ASSIGN_OR_RETURN(hc_.mlp_only, c.get_int_list_or_empty("mlp_only_layers"));
    }
  }
  for (int64_t i = 0; i < layers; ++i) {
    if (hc_.layer_is_moe(i)) continue;
    return read_ints(c, {{"intermediate_size", -1, 1, kMaxConfigSize, &hc_.inter}});
  }
  return ok_status();
}

Status QwenHybridModel::load(const LoadOptions& options) {
  const Checkpoint& ck = *ckpt_;
  const ConfigReader& c = ck.config();
  const int64_t H = cfg_.hidden_size, V = cfg_.vocab_size;
  // Shapes from config.json drive allocations: check the layer count first.
  std::string last = "model.layers." + std::to_string(cfg_.num_hidden_layers - 1) + ".";
  if (ck.find(last + "input_layernorm.weight") == nullptr)
    return c.error("num_hidden_layers", "is " + std::to_string(cfg_.num_hidden_layers) +
                                            " but the checkpoint in " + ck.dir() +
                                            " has no tensor " + last + "input_layernorm.weight");
  PKV_RETURN_IF_ERROR(
      load_weights(ck, *be_, "model.",
                   {{&embed_, "embed_tokens.weight", {V, H}}, {&final_norm_, "norm.weight", {H}}}));
  lm_head_ = embed_.get();
  if (!cfg_.tie_word_embeddings || ck.find("lm_head.weight") != nullptr) {
    PKV_RETURN_IF_ERROR(load_weights(ck, *be_, "", {{&lm_head_owned_, "lm_head.weight", {V, H}}}));
    lm_head_ = lm_head_owned_.get();
  }
  geom_.num_layers = cfg_.num_hidden_layers;
  geom_.num_kv_heads = cfg_.num_key_value_heads;
  geom_.head_dim = cfg_.head_dim;
  geom_.block_size = resolve_block_size(options, cfg_.cache);
  geom_.dtype = options.kv_dtype.value_or(KVDType::kF32);  // resolved by load_model
  geom_.groups = {CacheGroup{CacheGroupKind::kFullAttention, 0},
                  CacheGroup{CacheGroupKind::kRecurrent, 0}};
  geom_.layer_kv_source.assign(static_cast<size_t>(cfg_.num_hidden_layers), -1);
  layers_.resize(static_cast<size_t>(cfg_.num_hidden_layers));
  for (int32_t i = 0; i < cfg_.num_hidden_layers; ++i) {
    HybridLayer& L = layers_[static_cast<size_t>(i)];
    PKV_RETURN_IF_ERROR(load_weights(ck, *be_, "model.layers." + std::to_string(i) + ".",
                                     {{&L.input_norm, "input_layernorm.weight", {H}},
                                      {&L.post_norm, "post_attention_layernorm.weight", {H}}}));
    PKV_RETURN_IF_ERROR(load_mixer(i, L));
    PKV_RETURN_IF_ERROR(load_feed_forward(i, L));
  }
  return ok_status();
}

Status QwenHybridModel::load_mixer(int32_t i, HybridLayer& L) {
  const Checkpoint& ck = *ckpt_;
  const std::string p = "model.layers." + std::to_string(i) + ".";
  const std::string& type = hc_.layer_types[static_cast<size_t>(i)];
  if (type == "linear_attention") {
    L.linear = true;
    GatedDeltaNetSpec& s = L.gdn_spec;
    s.layer = i;
    s.num_k_heads = static_cast<int32_t>(hc_.nk);
    s.num_v_heads = static_cast<int32_t>(hc_.nv);
    s.head_k_dim = static_cast<int32_t>(hc_.dk);
    s.head_v_dim = static_cast<int32_t>(hc_.dv);
    s.conv_kernel = static_cast<int32_t>(hc_.conv_k);
    s.rms_eps = eps_;
    s.layout =
        hc_.fused_gdn ? GatedDeltaNetLayout::kFusedPerKeyHead : GatedDeltaNetLayout::kSeparate;
    PKV_ASSIGN_OR_RETURN(L.gdn,
                         load_gated_deltanet(ck, *be_, p + "linear_attn.", s, cfg_.hidden_size));
    geom_.layer_group.push_back(1);
    geom_.layer_state_floats.push_back(s.state_floats());
    return ok_status();
  }
  if (type != "full_attention")
    return ck.config().error("layer_types", "entry " + std::to_string(i) + " '" + type +
                                                "' is not linear_attention or full_attention");
  // Gated attention: q_proj yields [query | gate] per head.
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim;
  const int64_t QG = 2 * cfg_.num_attention_heads * D, KV = cfg_.num_key_value_heads * D;
  AttentionWeights& w = L.attn;
  PKV_RETURN_IF_ERROR(load_weights(ck, *be_, p + "self_attn.",
                                   {{&w.q, "q_proj.weight", {QG, H}},
                                    {&w.k, "k_proj.weight", {KV, H}},
                                    {&w.v, "v_proj.weight", {KV, H}},
                                    {&w.o, "o_proj.weight", {H, QG / 2}},
                                    {&w.q_norm, "q_norm.weight", {D}},
                                    {&w.k_norm, "k_norm.weight", {D}}}));
  if (hc_.attn_bias) {
    PKV_RETURN_IF_ERROR(load_weights(ck, *be_, p + "self_attn.",
                                     {{&w.q_bias, "q_proj.bias", {QG}},
                                      {&w.k_bias, "k_proj.bias", {KV}},
                                      {&w.v_bias, "v_proj.bias", {KV}}}));
    PKV_ASSIGN_OR_RETURN(w.o_bias,
                         load_optional_weight(ck, *be_, p + "self_attn.o_proj.bias", {H}));
  }
  AttentionSpec& s = L.spec;
  s.layer = s.kv_layer = i;
  s.num_heads = cfg_.num_attention_heads;
  s.num_kv_heads = cfg_.num_key_value_heads;
  s.head_dim = cfg_.head_dim;
  s.rms_eps = eps_;
  s.qk_norm_one_plus = true;
  s.output_gate = true;
  s.scale = 1.0f / std::sqrt(static_cast<float>(D));
  PKV_ASSIGN_OR_RETURN(s.rope, parse_rope(ck.config(), cfg_.head_dim, type));
  geom_.layer_group.push_back(0);
  geom_.layer_state_floats.push_back(0);
  return ok_status();
}

Status QwenHybridModel::load_feed_forward(int32_t i, HybridLayer& L) {
  const Checkpoint& ck = *ckpt_;
  const int64_t H = cfg_.hidden_size;
  const std::string f = "model.layers." + std::to_string(i) + ".mlp.";
  auto mlp = [&](const std::string& prefix, int64_t inter, MlpWeights& w) {
    return load_weights(ck, *be_, prefix,
                        {{&w.gate, "gate_proj.weight", {inter, H}},
                         {&w.up, "up_proj.weight", {inter, H}},
                         {&w.down, "down_proj.weight", {H, inter}}});
  };
  L.is_moe = hc_.layer_is_moe(i);
  if (!L.is_moe) return mlp(f, hc_.inter, L.mlp);
  PKV_RETURN_IF_ERROR(
      load_weights(ck, *be_, f, {{&L.moe.router, "gate.weight", {hc_.experts, H}}}));
  L.moe.top_k = static_cast<int32_t>(hc_.top_k);
  L.moe.norm_topk_prob = hc_.norm_topk;
  L.moe.experts.resize(static_cast<size_t>(hc_.experts));
  for (int64_t e = 0; e < hc_.experts; ++e) {
    PKV_RETURN_IF_ERROR(mlp(f + "experts." + std::to_string(e) + ".", hc_.moe_inter,
                            L.moe.experts[static_cast<size_t>(e)]));
  }
  L.has_shared = hc_.shared_inter > 0;
  if (!L.has_shared) return ok_status();
  PKV_RETURN_IF_ERROR(mlp(f + "shared_expert.", hc_.shared_inter, L.shared.mlp));
  return load_weights(ck, *be_, f, {{&L.shared.gate, "shared_expert_gate.weight", {1, H}}});
}

Status QwenHybridModel::check_batch(const ForwardBatch& batch) const {
  PKV_RETURN_IF_ERROR(validate_batch(batch, geom_, cfg_.vocab_size));
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    for (int32_t l = 0; l < geom_.num_layers; ++l) {
      if (batch.rows[r].state->layer_floats(l) != static_cast<size_t>(geom_.layer_state_floats[l]))
        return invalid_argument("forward batch row " + std::to_string(r) +
                                ": recurrent state of layer " + std::to_string(l) +
                                " was not made for this model's geometry");
    }
  }
  return ok_status();
}

void QwenHybridModel::mix_tokens(const HybridLayer& L, const ForwardBatch& batch, KVAccess& kv,
                                 const float* h, int64_t T, float* y) const {
  if (L.linear) {
    gated_deltanet_block(*be_, L.gdn_spec, L.gdn, batch, h, T, y);
  } else {
    attention_block(*be_, L.spec, L.attn, batch, kv, h, T, y);
  }
}

void QwenHybridModel::feed_forward(const HybridLayer& L, const float* h, int64_t T,
                                   float* y) const {
  const int64_t H = cfg_.hidden_size;
  if (!L.is_moe) return gated_mlp(*be_, L.mlp, Activation::kSilu, h, T, y);
  moe_block(*be_, L.moe, h, T, H, y);
  if (L.has_shared) add_shared_expert(*be_, L.shared, Activation::kSilu, h, T, H, y);
}

Status QwenHybridModel::forward(const ForwardBatch& batch, ForwardOutput* out) {
  PKV_RETURN_IF_ERROR(check_batch(batch));
  for (const ForwardRow& row : batch.rows) {
    if (row.flat != nullptr) row.flat->reserve(row.context_len + row.num_tokens);
  }
  const int64_t n = batch.num_tokens() * cfg_.hidden_size;
  ScratchBuffer x(kScratchX, static_cast<size_t>(n)), h(kScratchH, x.size()),
      y(kScratchY, x.size());
  KVAccess kv(batch, geom_);
  be_->embedding(batch.token_ids.data(), batch.num_tokens(), *embed_, x.data());
  // Pre-norm residual blocks; every norm of the stream scales by (1 + weight).
  for (const HybridLayer& L : layers_) {
    be_->rms_norm(x.data(), batch.num_tokens(), *L.input_norm, eps_, true, h.data());
    mix_tokens(L, batch, kv, h.data(), batch.num_tokens(), y.data());
    be_->add(x.data(), y.data(), n);
    be_->rms_norm(x.data(), batch.num_tokens(), *L.post_norm, eps_, true, h.data());
    feed_forward(L, h.data(), batch.num_tokens(), y.data());
    be_->add(x.data(), y.data(), n);
  }
  for (const ForwardRow& row : batch.rows) {
    if (batch.path == KVPath::kFlat) row.flat->set_length(row.context_len + row.num_tokens);
    row.state->set_length(row.context_len + row.num_tokens);
  }
  return compute_logits(*be_, batch, x.data(), cfg_.hidden_size, *final_norm_, eps_, true,
                        *lm_head_, cfg_.vocab_size, out);
}

}  // namespace

StatusOr<std::unique_ptr<Model>> create_qwen3_next(std::shared_ptr<const Checkpoint> ckpt,
                                                   const LoadOptions& options,
                                                   backend::Backend& be) {
  // The scan works on host pointers (gated_deltanet.h).
  if (be.name() != "cpu")
    return invalid_argument("Gated DeltaNet families run on the CPU backend only (not " +
                            be.name() + ")");
  auto m = std::make_unique<QwenHybridModel>(std::move(ckpt), be);
  PKV_RETURN_IF_ERROR(m->read_config());
  PKV_RETURN_IF_ERROR(m->load(options));
  return std::unique_ptr<Model>(std::move(m));
}

}  // namespace pagedkv::model
