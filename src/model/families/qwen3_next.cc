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

class QwenHybridModel : public Model {
 public:
  const ModelConfig& config() const override { return cfg_; }
  const KVGeometry& kv_geometry() const override { return geom_; }
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;

  static StatusOr<std::unique_ptr<Model>> create(std::shared_ptr<const Checkpoint> ckpt,
                                                 const LoadOptions& options, backend::Backend& be);

 private:
  std::shared_ptr<const Checkpoint> ckpt_;
  backend::Backend* be_ = nullptr;
  ModelConfig cfg_;
  KVGeometry geom_;
  float eps_ = 1e-6f;
  WeightPtr embed_, final_norm_, lm_head_owned_;
  const backend::Weight* lm_head_ = nullptr;
  std::vector<HybridLayer> layers_;
};

constexpr int64_t kMaxPositions = int64_t{1} << 26;  // as qwen3 (docs/limits.md)

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

StatusOr<std::unique_ptr<Model>> QwenHybridModel::create(std::shared_ptr<const Checkpoint> ckpt,
                                                         const LoadOptions& options,
                                                         backend::Backend& be) {
  if (be.name() != "cpu")
    return invalid_argument("Gated DeltaNet families run on the CPU backend only (not " +
                            be.name() + ")");
  std::unique_ptr<QwenHybridModel> m(new QwenHybridModel());
  const ConfigReader& c = ckpt->config();
  ModelConfig& mc = m->cfg_;
  mc.source_path = ckpt->dir();
  PKV_ASSIGN_OR_RETURN(mc.model_type, c.get_string("model_type"));
  const bool next = mc.model_type == "qwen3_next";
  const bool moe_family =
      next || mc.model_type == "qwen3_5_moe_text" || mc.model_type == "qwen3_5_moe";
  constexpr int64_t kBig = int64_t{1} << 30;
  int64_t vocab, hidden, layers, heads;
  PKV_RETURN_IF_ERROR(read_ints(c, {{"vocab_size", -1, 1, kBig, &vocab},
                                    {"hidden_size", -1, 1, kBig, &hidden},
                                    {"num_hidden_layers", -1, 1, kBig, &layers},
                                    {"num_attention_heads", -1, 1, kBig, &heads}}));
  int64_t kv_heads, head_dim, conv_k, dk, dv, nk, nv, interval;
  PKV_RETURN_IF_ERROR(read_ints(
      c, {{"num_key_value_heads", heads, 1, heads, &kv_heads},
          {"head_dim", hidden / heads, 2, 1024, &head_dim},
          {"max_position_embeddings", 32768, 1, kMaxPositions, &mc.max_position_embeddings},
          {"linear_conv_kernel_dim", 4, 1, 64, &conv_k},
          {"linear_key_head_dim", 128, 1, 1024, &dk},
          {"linear_value_head_dim", 128, 1, 1024, &dv},
          {"linear_num_key_heads", 16, 1, 4096, &nk},
          {"linear_num_value_heads", 32, 1, 4096, &nv},
          {"full_attention_interval", 4, 1, kBig, &interval}}));
  if (heads % kv_heads != 0)
    return c.error("num_key_value_heads", "must divide num_attention_heads");
  if (nv % nk != 0) return c.error("linear_num_key_heads", "must divide linear_num_value_heads");
  mc.vocab_size = static_cast<int32_t>(vocab);
  mc.hidden_size = static_cast<int32_t>(hidden);
  mc.num_hidden_layers = static_cast<int32_t>(layers);
  mc.num_attention_heads = static_cast<int32_t>(heads);
  mc.num_key_value_heads = static_cast<int32_t>(kv_heads);
  mc.head_dim = static_cast<int32_t>(head_dim);
  PKV_ASSIGN_OR_RETURN(mc.tie_word_embeddings, c.get_bool_or("tie_word_embeddings", false));
  PKV_RETURN_IF_ERROR(read_token_ids(c, ckpt->dir(), &mc));
  PKV_ASSIGN_OR_RETURN(mc.cache, read_cache_config(c));
  PKV_ASSIGN_OR_RETURN(double eps, c.get_double_or("rms_norm_eps", 1e-6));
  if (!(eps > 0.0 && eps <= 1.0) || !(static_cast<float>(eps) > 0.0f))
    return c.error("rms_norm_eps", "must be in (0, 1] (and not 0 as a float)");
  m->eps_ = static_cast<float>(eps);
  PKV_ASSIGN_OR_RETURN(bool attn_bias, c.get_bool_or("attention_bias", false));

  std::string last_norm = "model.layers." + std::to_string(layers - 1) + ".input_layernorm.weight";
  if (ckpt->find(last_norm) == nullptr)
    return c.error("num_hidden_layers", "is " + std::to_string(layers) + " but the checkpoint in " +
                                            ckpt->dir() + " has no tensor " + last_norm);

  // Layer kinds: layer_types, else every full_attention_interval-th layer is full.
  PKV_ASSIGN_OR_RETURN(auto layer_types, c.get_string_list_or_empty("layer_types"));
  if (layer_types.empty()) {
    for (int64_t i = 0; i < layers; ++i)
      layer_types.push_back((i + 1) % interval == 0 ? "full_attention" : "linear_attention");
  }
  if (static_cast<int64_t>(layer_types.size()) != layers)
    return c.error("layer_types", "must have num_hidden_layers entries");

  // Feed-forward: qwen3_next (MoE on every decoder_sparse_step-th layer not in
  // mlp_only_layers), qwen3_5_moe (MoE everywhere, top-k always renormalized),
  // qwen3_5 (dense everywhere).
  int64_t inter = 0, experts = 0, top_k = 0, moe_inter = 0, shared_inter = 0, step = 1;
  bool norm_topk = true;
  std::vector<int64_t> mlp_only;
  if (moe_family) {
    PKV_RETURN_IF_ERROR(
        read_ints(c, {{"num_experts", -1, 1, 1 << 16, &experts},
                      {"num_experts_per_tok", -1, 1, 1 << 16, &top_k},
                      {"moe_intermediate_size", -1, 1, kBig, &moe_inter},
                      {"shared_expert_intermediate_size", 0, 0, kBig, &shared_inter},
                      {"decoder_sparse_step", 1, 1, kBig, &step}}));
    if (top_k > experts) return c.error("num_experts_per_tok", "exceeds the number of experts");
    if (next) {
      PKV_ASSIGN_OR_RETURN(norm_topk, c.get_bool_or("norm_topk_prob", true));
      PKV_ASSIGN_OR_RETURN(mlp_only, c.get_int_list_or_empty("mlp_only_layers"));
    }
  }
  auto layer_is_moe = [&](int64_t i) {
    if (!moe_family) return false;
    for (int64_t x : mlp_only)
      if (x == i) return false;
    return (i + 1) % step == 0;
  };
  for (int64_t i = 0; i < layers; ++i) {
    if (!layer_is_moe(i)) {
      PKV_RETURN_IF_ERROR(read_ints(c, {{"intermediate_size", -1, 1, kBig, &inter}}));
      break;
    }
  }

  m->ckpt_ = ckpt;
  m->be_ = &be;
  const int64_t H = hidden, V = vocab, D = head_dim, NH = heads, KVH = kv_heads;
  PKV_ASSIGN_OR_RETURN(m->embed_, load_weight(*ckpt, be, "model.embed_tokens.weight", {V, H}));
  PKV_ASSIGN_OR_RETURN(m->final_norm_, load_weight(*ckpt, be, "model.norm.weight", {H}));
  if (mc.tie_word_embeddings && ckpt->find("lm_head.weight") == nullptr) {
    m->lm_head_ = m->embed_.get();
  } else {
    PKV_ASSIGN_OR_RETURN(m->lm_head_owned_, load_weight(*ckpt, be, "lm_head.weight", {V, H}));
    m->lm_head_ = m->lm_head_owned_.get();
  }

  KVGeometry& g = m->geom_;
  g.num_layers = mc.num_hidden_layers;
  g.num_kv_heads = mc.num_key_value_heads;
  g.head_dim = mc.head_dim;
  g.block_size = resolve_block_size(options, mc.cache);
  g.dtype = options.kv_dtype;
  g.groups = {CacheGroup{CacheGroupKind::kFullAttention, 0},
              CacheGroup{CacheGroupKind::kRecurrent, 0}};
  g.layer_kv_source.assign(mc.num_hidden_layers, -1);

  m->layers_.resize(static_cast<size_t>(layers));
  for (int32_t i = 0; i < mc.num_hidden_layers; ++i) {
    HybridLayer& L = m->layers_[i];
    const std::string p = "model.layers." + std::to_string(i) + ".";
    PKV_ASSIGN_OR_RETURN(L.input_norm, load_weight(*ckpt, be, p + "input_layernorm.weight", {H}));
    PKV_ASSIGN_OR_RETURN(L.post_norm,
                         load_weight(*ckpt, be, p + "post_attention_layernorm.weight", {H}));
    const std::string& lt = layer_types[i];
    if (lt == "linear_attention") {
      L.linear = true;
      GatedDeltaNetSpec& s = L.gdn_spec;
      s.layer = i;
      s.num_k_heads = static_cast<int32_t>(nk);
      s.num_v_heads = static_cast<int32_t>(nv);
      s.head_k_dim = static_cast<int32_t>(dk);
      s.head_v_dim = static_cast<int32_t>(dv);
      s.conv_kernel = static_cast<int32_t>(conv_k);
      s.rms_eps = m->eps_;
      s.layout = next ? GatedDeltaNetLayout::kFusedPerKeyHead : GatedDeltaNetLayout::kSeparate;
      PKV_ASSIGN_OR_RETURN(L.gdn, load_gated_deltanet(*ckpt, be, p + "linear_attn.", s, H));
      g.layer_group.push_back(1);
      g.layer_state_floats.push_back(s.state_floats());
    } else if (lt == "full_attention") {
      const std::string a = p + "self_attn.";
      PKV_ASSIGN_OR_RETURN(L.attn.q, load_weight(*ckpt, be, a + "q_proj.weight", {2 * NH * D, H}));
      PKV_ASSIGN_OR_RETURN(L.attn.k, load_weight(*ckpt, be, a + "k_proj.weight", {KVH * D, H}));
      PKV_ASSIGN_OR_RETURN(L.attn.v, load_weight(*ckpt, be, a + "v_proj.weight", {KVH * D, H}));
      PKV_ASSIGN_OR_RETURN(L.attn.o, load_weight(*ckpt, be, a + "o_proj.weight", {H, NH * D}));
      PKV_ASSIGN_OR_RETURN(L.attn.q_norm, load_weight(*ckpt, be, a + "q_norm.weight", {D}));
      PKV_ASSIGN_OR_RETURN(L.attn.k_norm, load_weight(*ckpt, be, a + "k_norm.weight", {D}));
      if (attn_bias) {
        PKV_ASSIGN_OR_RETURN(L.attn.q_bias,
                             load_weight(*ckpt, be, a + "q_proj.bias", {2 * NH * D}));
        PKV_ASSIGN_OR_RETURN(L.attn.k_bias, load_weight(*ckpt, be, a + "k_proj.bias", {KVH * D}));
        PKV_ASSIGN_OR_RETURN(L.attn.v_bias, load_weight(*ckpt, be, a + "v_proj.bias", {KVH * D}));
        PKV_ASSIGN_OR_RETURN(L.attn.o_bias,
                             load_optional_weight(*ckpt, be, a + "o_proj.bias", {H}));
      }
      AttentionSpec& s = L.spec;
      s.layer = s.kv_layer = i;
      s.num_heads = mc.num_attention_heads;
      s.num_kv_heads = mc.num_key_value_heads;
      s.head_dim = mc.head_dim;
      s.rms_eps = m->eps_;
      s.qk_norm_one_plus = true;
      s.output_gate = true;
      s.scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
      PKV_ASSIGN_OR_RETURN(s.rope, parse_rope(c, mc.head_dim, lt));
      g.layer_group.push_back(0);
      g.layer_state_floats.push_back(0);
    } else {
      return c.error("layer_types", "entry " + std::to_string(i) + " '" + lt +
                                        "' is not linear_attention or full_attention");
    }

    const std::string f = p + "mlp.";
    L.is_moe = layer_is_moe(i);
    if (!L.is_moe) {
      PKV_ASSIGN_OR_RETURN(L.mlp.gate, load_weight(*ckpt, be, f + "gate_proj.weight", {inter, H}));
      PKV_ASSIGN_OR_RETURN(L.mlp.up, load_weight(*ckpt, be, f + "up_proj.weight", {inter, H}));
      PKV_ASSIGN_OR_RETURN(L.mlp.down, load_weight(*ckpt, be, f + "down_proj.weight", {H, inter}));
      continue;
    }
    PKV_ASSIGN_OR_RETURN(L.moe.router, load_weight(*ckpt, be, f + "gate.weight", {experts, H}));
    L.moe.top_k = static_cast<int32_t>(top_k);
    L.moe.norm_topk_prob = norm_topk;
    L.moe.experts.resize(static_cast<size_t>(experts));
    for (int64_t e = 0; e < experts; ++e) {
      const std::string x = f + "experts." + std::to_string(e) + ".";
      MlpWeights& ew = L.moe.experts[static_cast<size_t>(e)];
      PKV_ASSIGN_OR_RETURN(ew.gate, load_weight(*ckpt, be, x + "gate_proj.weight", {moe_inter, H}));
      PKV_ASSIGN_OR_RETURN(ew.up, load_weight(*ckpt, be, x + "up_proj.weight", {moe_inter, H}));
      PKV_ASSIGN_OR_RETURN(ew.down, load_weight(*ckpt, be, x + "down_proj.weight", {H, moe_inter}));
    }
    L.has_shared = shared_inter > 0;
    if (L.has_shared) {
      const std::string x = f + "shared_expert.";
      MlpWeights& sw = L.shared.mlp;
      PKV_ASSIGN_OR_RETURN(sw.gate,
                           load_weight(*ckpt, be, x + "gate_proj.weight", {shared_inter, H}));
      PKV_ASSIGN_OR_RETURN(sw.up, load_weight(*ckpt, be, x + "up_proj.weight", {shared_inter, H}));
      PKV_ASSIGN_OR_RETURN(sw.down,
                           load_weight(*ckpt, be, x + "down_proj.weight", {H, shared_inter}));
      PKV_ASSIGN_OR_RETURN(L.shared.gate,
                           load_weight(*ckpt, be, f + "shared_expert_gate.weight", {1, H}));
    }
  }
  return std::unique_ptr<Model>(std::move(m));
}

Status QwenHybridModel::forward(const ForwardBatch& batch, ForwardOutput* out) {
  PKV_RETURN_IF_ERROR(validate_batch(batch, geom_, cfg_.vocab_size));
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    for (int32_t l = 0; l < geom_.num_layers; ++l) {
      if (batch.rows[r].state->layer_floats(l) != static_cast<size_t>(geom_.layer_state_floats[l]))
        return invalid_argument("forward batch row " + std::to_string(r) +
                                ": recurrent state of layer " + std::to_string(l) +
                                " was not made for this model's geometry");
    }
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
  for (const HybridLayer& L : layers_) {
    be.rms_norm(x.data(), T, *L.input_norm, eps_, true, h.data());
    if (L.linear) {
      gated_deltanet_block(be, L.gdn_spec, L.gdn, batch, h.data(), T, y.data());
    } else {
      attention_block(be, L.spec, L.attn, batch, kv, h.data(), T, y.data());
    }
    be.add(x.data(), y.data(), T * H);
    be.rms_norm(x.data(), T, *L.post_norm, eps_, true, h.data());
    if (L.is_moe) {
      moe_block(be, L.moe, h.data(), T, H, y.data());
      if (L.has_shared)
        add_shared_expert(be, L.shared, Activation::kSilu, h.data(), T, H, y.data());
    } else {
      gated_mlp(be, L.mlp, Activation::kSilu, h.data(), T, y.data());
    }
    be.add(x.data(), y.data(), T * H);
  }
  for (const ForwardRow& row : batch.rows) {
    if (batch.path == KVPath::kFlat) row.flat->set_length(row.context_len + row.num_tokens);
    row.state->set_length(row.context_len + row.num_tokens);
  }
  return compute_logits(be, batch, x.data(), H, *final_norm_, eps_, true, *lm_head_,
                        cfg_.vocab_size, out);
}

}  // namespace

StatusOr<std::unique_ptr<Model>> create_qwen3_next(std::shared_ptr<const Checkpoint> ckpt,
                                                   const LoadOptions& options,
                                                   backend::Backend& be) {
  return QwenHybridModel::create(std::move(ckpt), options, be);
}

}  // namespace pagedkv::model
