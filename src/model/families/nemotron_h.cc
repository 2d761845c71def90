// NemotronH: a hybrid stack of pre-norm residual blocks, each ONE mixer chosen by
// config.json's layers_block_type — "linear_attention" (a Mamba-2 mixer,
// mamba2.h), "full_attention" (grouped-query attention without positional
// rotation), "mlp" (non-gated relu² MLP) or "moe" (relu² experts behind a sigmoid
// router with a score-correction bias, n_group / topk_group group-limited
// selection, norm_topk_prob, routed_scaling_factor, plus a shared expert). Older
// configs spell the layers "mamba" / "attention" or as hybrid_override_pattern
// ("M", "*", "-", "E"); mamba_* field aliases are accepted too. Tensor names are
// Hugging Face's (backbone.layers.N.mixer.*).
//
// Cache: only the attention layers keep per-token K/V (cache group 0, full
// attention); Mamba-2 layers keep request-local state (recurrent_state.h) and
// belong to no K/V group (layer_group -1; the declared kRecurrent group holds no
// blocks). MLP and MoE layers keep nothing. CPU backend only (mamba2.h).
#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/layers.h"
#include "model/mamba2.h"
#include "model/recurrent_state.h"
#include "model/registry.h"

namespace pagedkv::model {
namespace {

enum class BlockKind { kMamba, kAttention, kMlp, kMoe };

// A "moe" block: routed relu² experts (MoeWeights with a sigmoid router, the
// score-correction bias as selection bias, group-limited selection) plus a
// shared relu² expert added to their sum.
struct NemotronMoe {
  MoeWeights routed;
  MlpWeights shared;
};

struct Block {
  BlockKind kind = BlockKind::kMlp;
  WeightPtr norm;
  Mamba2Spec mamba_spec;
  Mamba2Weights mamba;
  AttentionSpec attn_spec;
  AttentionWeights attn;
  MlpWeights mlp;
  NemotronMoe moe;
};

// The stack's weights and shapes, filled by create().
struct NemotronHStack {
  ModelConfig cfg;
  KVGeometry geom;
  float eps = 1e-5f;
  EmbeddingWeights ends;
  std::vector<Block> blocks;
};

class NemotronHModel final : public Model {
 public:
  NemotronHModel(std::shared_ptr<const Checkpoint> ckpt, backend::Backend* be, NemotronHStack stack)
      : ckpt_(std::move(ckpt)), be_(be), s_(std::move(stack)) {}
  const ModelConfig& config() const override { return s_.cfg; }
  const KVGeometry& kv_geometry() const override { return s_.geom; }
  Status forward(const ForwardBatch& batch, ForwardOutput* out) override;

 private:
  Status check_state_sizes(const ForwardBatch& batch) const;
  std::shared_ptr<const Checkpoint> ckpt_;  // owns the mapped bytes the weights view
  backend::Backend* be_;
  NemotronHStack s_;
};

constexpr int64_t kMaxField = int64_t{1} << 30;

// layers_block_type entry (current or legacy spelling) → kind.
bool parse_kind(const std::string& s, BlockKind* k) {
  if (s == "linear_attention" || s == "mamba") {
    *k = BlockKind::kMamba;
  } else if (s == "full_attention" || s == "attention") {
    *k = BlockKind::kAttention;
  } else if (s == "mlp") {
    *k = BlockKind::kMlp;
  } else if (s == "moe") {
    *k = BlockKind::kMoe;
  } else {
    return false;
  }
  return true;
}

StatusOr<std::vector<BlockKind>> read_block_kinds(const ConfigReader& c) {
  std::vector<BlockKind> kinds;
  PKV_ASSIGN_OR_RETURN(auto list, c.get_string_list_or_empty("layers_block_type"));
  if (!list.empty()) {
    for (size_t i = 0; i < list.size(); ++i) {
      BlockKind k;
      if (!parse_kind(list[i], &k))
        return c.error("layers_block_type",
                       "entry " + std::to_string(i) + " '" + list[i] +
                           "' is not linear_attention, full_attention, mlp or moe");
      kinds.push_back(k);
    }
    return kinds;
  }
  PKV_ASSIGN_OR_RETURN(std::string pattern, c.get_string_or("hybrid_override_pattern", ""));
  for (size_t i = 0; i < pattern.size(); ++i) {
    const char ch = pattern[i];
    if (ch == 'M') {
      kinds.push_back(BlockKind::kMamba);
    } else if (ch == '*') {
      kinds.push_back(BlockKind::kAttention);
    } else if (ch == '-') {
      kinds.push_back(BlockKind::kMlp);
    } else if (ch == 'E') {
      kinds.push_back(BlockKind::kMoe);
    } else {
      return c.error("hybrid_override_pattern", "has '" + std::string(1, ch) + "' at " +
                                                    std::to_string(i) + " (expected M, *, - or E)");
    }
  }
  if (kinds.empty())
    return c.error("layers_block_type", "is missing (nor is hybrid_override_pattern given)");
  return kinds;
}

// An integer field (or its legacy alias) in [1, 2^30].
StatusOr<int64_t> positive_field(const ConfigReader& c, const std::string& field,
                                 std::optional<int64_t> dflt = std::nullopt,
                                 const std::string& alias = "") {
  int64_t v;
  if (!alias.empty() && !c.has(field) && c.has(alias)) {
    PKV_ASSIGN_OR_RETURN(v, c.get_int(alias));
  } else if (dflt) {
    PKV_ASSIGN_OR_RETURN(v, c.get_int_or(field, *dflt));
  } else {
    PKV_ASSIGN_OR_RETURN(v, c.get_int(field));
  }
  if (v <= 0 || v > kMaxField) return c.error(field, "must be a positive integer");
  return v;
}

// time_step_limit's upper end: a number, or transformers' {"__float__": "Infinity"}.
StatusOr<double> time_step_upper(const ConfigReader& c) {
  const char* f = c.has("time_step_limit") ? "time_step_limit" : "mamba_dt_limit";
  if (!c.has(f)) return static_cast<double>(INFINITY);
  const nlohmann::json& j = c.json()[f];
  if (!j.is_array() || j.size() != 2) return c.error(f, "must be a list of two numbers");
  const nlohmann::json& hi = j[1];
  if (hi.is_number()) return hi.get<double>();
  if (hi.is_object() && hi.contains("__float__") && hi["__float__"].is_string()) {
    const std::string s = hi["__float__"].get<std::string>();
    if (s == "Infinity" || s == "inf") return static_cast<double>(INFINITY);
  }
  return c.error(f, "entry 1 is not a number");
}

StatusOr<MlpWeights> load_relu2_mlp(const Checkpoint& ckpt, backend::Backend& be,
                                    const std::string& p, int64_t hidden, int64_t inter) {
  MlpWeights w;
  PKV_ASSIGN_OR_RETURN(w.up, load_weight(ckpt, be, p + "up_proj.weight", {inter, hidden}));
  PKV_ASSIGN_OR_RETURN(w.down, load_weight(ckpt, be, p + "down_proj.weight", {hidden, inter}));
  return w;
}

StatusOr<std::unique_ptr<Model>> create_model(std::shared_ptr<const Checkpoint> ckpt,
                                              const LoadOptions& options, backend::Backend& be) {
  if (be.name() != "cpu")
    return invalid_argument(
        "nemotron_h runs on the CPU backend only (its Mamba-2 scan is host "
        "code); the " +
        be.name() + " backend was asked for");
  NemotronHStack st;
  NemotronHStack* m = &st;  // filled below
  const ConfigReader& c = ckpt->config();
  ModelConfig& mc = m->cfg;
  mc.source_path = ckpt->dir();
  PKV_ASSIGN_OR_RETURN(mc.model_type, c.get_string("model_type"));
  PKV_ASSIGN_OR_RETURN(std::vector<BlockKind> kinds, read_block_kinds(c));
  const int64_t L = static_cast<int64_t>(kinds.size());
  if (L > 100000) return c.error("layers_block_type", "has more than 100000 layers");
  mc.num_hidden_layers = static_cast<int32_t>(L);
  int64_t v;
  PKV_ASSIGN_OR_RETURN(v, positive_field(c, "vocab_size"));
  mc.vocab_size = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(v, positive_field(c, "hidden_size"));
  mc.hidden_size = static_cast<int32_t>(v);
  const int64_t H = mc.hidden_size, V = mc.vocab_size;
  const bool any_attention = std::count(kinds.begin(), kinds.end(), BlockKind::kAttention) > 0;
  const bool any_mamba = std::count(kinds.begin(), kinds.end(), BlockKind::kMamba) > 0;
  const bool any_mlp = std::count(kinds.begin(), kinds.end(), BlockKind::kMlp) > 0;
  const bool any_moe = std::count(kinds.begin(), kinds.end(), BlockKind::kMoe) > 0;

  // Attention (also sizes the K/V geometry, so read even without attention layers).
  PKV_ASSIGN_OR_RETURN(v, positive_field(c, "num_attention_heads", 1));
  mc.num_attention_heads = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(v, positive_field(c, "num_key_value_heads", mc.num_attention_heads));
  mc.num_key_value_heads = static_cast<int32_t>(v);
  if (mc.num_attention_heads % mc.num_key_value_heads != 0)
    return c.error("num_key_value_heads", "must divide num_attention_heads");
  PKV_ASSIGN_OR_RETURN(
      v, positive_field(c, "head_dim", std::max<int64_t>(1, H / mc.num_attention_heads)));
  if (v > 1024) return c.error("head_dim", "must be at most 1024");
  mc.head_dim = static_cast<int32_t>(v);
  PKV_ASSIGN_OR_RETURN(mc.max_position_embeddings, c.get_int_or("max_position_embeddings", 4096));
  if (mc.max_position_embeddings < 1 || mc.max_position_embeddings > (int64_t{1} << 26))
    return c.error("max_position_embeddings", "must be in [1, 2^26]");
  PKV_ASSIGN_OR_RETURN(mc.tie_word_embeddings, c.get_bool_or("tie_word_embeddings", false));
  PKV_RETURN_IF_ERROR(read_special_token_ids(c, ckpt->dir(), &mc));
  PKV_ASSIGN_OR_RETURN(mc.cache, read_cache_config(c));
  PKV_ASSIGN_OR_RETURN(m->eps, read_norm_eps(c, "layer_norm_epsilon", 1e-5));

  // Mamba-2.
  Mamba2Spec ms;
  bool use_conv_bias = true, use_bias = false;
  if (any_mamba) {
    PKV_ASSIGN_OR_RETURN(v, positive_field(c, "mamba_num_heads"));
    ms.num_heads = static_cast<int32_t>(v);
    PKV_ASSIGN_OR_RETURN(v, positive_field(c, "mamba_head_dim"));
    ms.head_dim = static_cast<int32_t>(v);
    PKV_ASSIGN_OR_RETURN(v, positive_field(c, "ssm_state_size"));
    ms.state_size = static_cast<int32_t>(v);
    PKV_ASSIGN_OR_RETURN(v, positive_field(c, "n_groups", 8, "mamba_n_groups"));
    ms.n_groups = static_cast<int32_t>(v);
    if (ms.num_heads % ms.n_groups != 0) return c.error("n_groups", "must divide mamba_num_heads");
    PKV_ASSIGN_OR_RETURN(v, positive_field(c, "conv_kernel", 4, "mamba_d_conv"));
    if (v > 64) return c.error("conv_kernel", "must be at most 64");
    ms.conv_kernel = static_cast<int32_t>(v);
    if (ms.inner() * ms.state_size > (int64_t{1} << 28))
      return c.error("ssm_state_size", "makes a state of more than 2^28 floats per layer");
    PKV_ASSIGN_OR_RETURN(std::string act, c.get_string_or("mamba_hidden_act", "silu"));
    if (act != "silu" && act != "swish")
      return c.error("mamba_hidden_act", "'" + act + "' is not supported (silu)");
    const char* cb =
        c.has("use_conv_bias") || !c.has("mamba_conv_bias") ? "use_conv_bias" : "mamba_conv_bias";
    PKV_ASSIGN_OR_RETURN(use_conv_bias, c.get_bool_or(cb, true));
    PKV_ASSIGN_OR_RETURN(use_bias, c.get_bool_or("use_bias", false));
    const char* dm =
        c.has("time_step_min") || !c.has("mamba_dt_min") ? "time_step_min" : "mamba_dt_min";
    double dt_min;
    PKV_ASSIGN_OR_RETURN(dt_min, c.get_double_or(dm, 0.001));
    if (!(dt_min >= 0.0 && dt_min < 1e6)) return c.error(dm, "must be in [0, 1e6)");
    PKV_ASSIGN_OR_RETURN(double dt_max, time_step_upper(c));
    if (!(dt_max > dt_min)) return c.error("time_step_limit", "must end above time_step_min");
    ms.dt_min = static_cast<float>(dt_min);
    ms.dt_max = static_cast<float>(dt_max);
    ms.norm_eps = m->eps;
  }

  // MLP / MoE.
  int64_t inter = 0;
  if (any_mlp || any_moe) {
    PKV_ASSIGN_OR_RETURN(std::string act, c.get_string_or("mlp_hidden_act", "relu2"));
    if (act != "relu2") return c.error("mlp_hidden_act", "'" + act + "' is not supported (relu2)");
    PKV_ASSIGN_OR_RETURN(bool mlp_bias, c.get_bool_or("mlp_bias", false));
    if (mlp_bias) return c.error("mlp_bias", "true is not supported");
  }
  if (any_mlp) {
    PKV_ASSIGN_OR_RETURN(inter, positive_field(c, "intermediate_size"));
  }
  int64_t experts = 0, moe_inter = 0, shared_inter = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk = true;
  double scaling = 1.0;
  if (any_moe) {
    if (c.has("moe_latent_size"))
      return c.error("moe_latent_size", "is not supported (must be null)");
    PKV_ASSIGN_OR_RETURN(experts, positive_field(c, "n_routed_experts"));
    PKV_ASSIGN_OR_RETURN(top_k, positive_field(c, "num_experts_per_tok"));
    if (top_k > experts) return c.error("num_experts_per_tok", "exceeds n_routed_experts");
    PKV_ASSIGN_OR_RETURN(moe_inter, positive_field(c, "moe_intermediate_size"));
    PKV_ASSIGN_OR_RETURN(shared_inter, positive_field(c, "moe_shared_expert_intermediate_size"));
    PKV_ASSIGN_OR_RETURN(n_group, positive_field(c, "n_group", 1));
    PKV_ASSIGN_OR_RETURN(topk_group, positive_field(c, "topk_group", 1));
    if (experts % n_group != 0) return c.error("n_group", "must divide n_routed_experts");
    if (topk_group > n_group) return c.error("topk_group", "exceeds n_group");
    if (topk_group * (experts / n_group) < top_k)
      return c.error("topk_group", "leaves fewer than num_experts_per_tok experts to choose from");
    PKV_ASSIGN_OR_RETURN(norm_topk, c.get_bool_or("norm_topk_prob", true));
    PKV_ASSIGN_OR_RETURN(scaling, c.get_double_or("routed_scaling_factor", 1.0));
    if (!(scaling > 0.0 && scaling < 1e6))
      return c.error("routed_scaling_factor", "must be in (0, 1e6)");
  }

  // Tensor prefix: transformers writes backbone.*; accept model.* too.
  const std::string root = ckpt->find("backbone.embeddings.weight") == nullptr &&
                                   ckpt->find("model.embeddings.weight") != nullptr
                               ? "model."
                               : "backbone.";
  if (ckpt->find(root + "layers." + std::to_string(L - 1) + ".norm.weight") == nullptr)
    return c.error("layers_block_type", "lists " + std::to_string(L) +
                                            " layers but the checkpoint in " + ckpt->dir() +
                                            " has no tensor " + root + "layers." +
                                            std::to_string(L - 1) + ".norm.weight");

  PKV_ASSIGN_OR_RETURN(m->ends,
                       load_embedding_weights(*ckpt, be, V, H, mc.tie_word_embeddings,
                                              root + "norm_f.weight", root + "embeddings.weight"));

  KVGeometry& g = m->geom;
  g.num_layers = mc.num_hidden_layers;
  g.num_kv_heads = mc.num_key_value_heads;
  g.head_dim = mc.head_dim;
  g.block_size = resolve_block_size(options, mc.cache);
  g.dtype = options.kv_dtype.value_or(KVDType::kF32);  // resolved by load_model
  g.groups = {CacheGroup{CacheGroupKind::kFullAttention, 0}};
  if (any_mamba) g.groups.push_back(CacheGroup{CacheGroupKind::kRecurrent, 0});
  g.layer_group.assign(static_cast<size_t>(L), -1);
  g.layer_kv_source.assign(static_cast<size_t>(L), -1);
  g.layer_state_floats.assign(static_cast<size_t>(L), 0);
  (void)any_attention;

  const int64_t NH = mc.num_attention_heads, KVH = mc.num_key_value_heads, D = mc.head_dim;
  m->blocks.resize(static_cast<size_t>(L));
  for (int32_t i = 0; i < L; ++i) {
    Block& B = m->blocks[i];
    B.kind = kinds[i];
    const std::string p = root + "layers." + std::to_string(i) + ".";
    const std::string x = p + "mixer.";
    PKV_ASSIGN_OR_RETURN(B.norm, load_weight(*ckpt, be, p + "norm.weight", {H}));
    switch (B.kind) {
      case BlockKind::kMamba: {
        B.mamba_spec = ms;
        B.mamba_spec.layer = i;
        PKV_ASSIGN_OR_RETURN(B.mamba,
                             load_mamba2(*ckpt, be, x, B.mamba_spec, H, use_conv_bias, use_bias));
        g.layer_state_floats[i] = mamba2_state_floats(B.mamba_spec);
        break;
      }
      case BlockKind::kAttention: {
        // transformers' NemotronHAttention has no biases, no q/k norm and no RoPE.
        PKV_ASSIGN_OR_RETURN(B.attn.q, load_weight(*ckpt, be, x + "q_proj.weight", {NH * D, H}));
        PKV_ASSIGN_OR_RETURN(B.attn.k, load_weight(*ckpt, be, x + "k_proj.weight", {KVH * D, H}));
        PKV_ASSIGN_OR_RETURN(B.attn.v, load_weight(*ckpt, be, x + "v_proj.weight", {KVH * D, H}));
        PKV_ASSIGN_OR_RETURN(B.attn.o, load_weight(*ckpt, be, x + "o_proj.weight", {H, NH * D}));
        AttentionSpec& s = B.attn_spec;
        s.layer = i;
        s.kv_layer = i;
        s.num_heads = mc.num_attention_heads;
        s.num_kv_heads = mc.num_key_value_heads;
        s.head_dim = mc.head_dim;
        s.rms_eps = m->eps;
        s.scale = 1.0f / std::sqrt(static_cast<float>(mc.head_dim));
        s.use_rope = false;
        g.layer_group[i] = 0;
        break;
      }
      case BlockKind::kMlp: {
        PKV_ASSIGN_OR_RETURN(B.mlp, load_relu2_mlp(*ckpt, be, x, H, inter));
        break;
      }
      case BlockKind::kMoe: {
        MoeWeights& e = B.moe.routed;
        PKV_ASSIGN_OR_RETURN(e.router, load_weight(*ckpt, be, x + "gate.weight", {experts, H}));
        PKV_ASSIGN_OR_RETURN(e.selection_bias,
                             load_host_vector(*ckpt, x + "gate.e_score_correction_bias", experts));
        e.experts.resize(static_cast<size_t>(experts));
        for (int64_t k = 0; k < experts; ++k) {
          PKV_ASSIGN_OR_RETURN(
              e.experts[k],
              load_relu2_mlp(*ckpt, be, x + "experts." + std::to_string(k) + ".", H, moe_inter));
        }
        PKV_ASSIGN_OR_RETURN(B.moe.shared,
                             load_relu2_mlp(*ckpt, be, x + "shared_experts.", H, shared_inter));
        e.act = Activation::kRelu2;  // non-gated experts (gate null)
        e.score = RouterScore::kSigmoid;
        e.top_k = static_cast<int32_t>(top_k);
        e.n_group = static_cast<int32_t>(n_group);
        e.topk_group = static_cast<int32_t>(topk_group);
        e.norm_topk_prob = norm_topk;
        e.norm_eps = 1e-20f;  // transformers: sum + 1e-20
        e.routed_scale = static_cast<float>(scaling);
        break;
      }
    }
  }
  return std::unique_ptr<Model>(new NemotronHModel(std::move(ckpt), &be, std::move(st)));
}

// out = Σ_rank w·expert(h) (moe_block, rank order) + shared(h).
void nemotron_moe(backend::Backend& be, const NemotronMoe& w, const float* h, int64_t T,
                  int64_t hidden, float* out) {
  moe_block(be, w.routed, h, T, hidden, out);
  std::vector<float> shared(static_cast<size_t>(T * hidden));
  plain_mlp(be, w.shared, Activation::kRelu2, h, T, shared.data());
  be.add(out, shared.data(), T * hidden);
}

// A row's RecurrentState must have been made for this model's geometry (the scan
// writes exactly layer_state_floats floats per Mamba-2 layer).
Status NemotronHModel::check_state_sizes(const ForwardBatch& batch) const {
  size_t want = 0;
  for (int64_t n : s_.geom.layer_state_floats) want += static_cast<size_t>(n) * sizeof(float);
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    const RecurrentState& st = *batch.rows[r].state;
    bool ok = st.memory_bytes() == want;
    for (int32_t l = 0; ok && l < s_.geom.num_layers; ++l)
      ok = st.layer_floats(l) == static_cast<size_t>(s_.geom.layer_state_floats[l]);
    if (!ok)
      return invalid_argument("forward batch row " + std::to_string(r) +
                              ": recurrent state is not sized for this model (" +
                              std::to_string(st.memory_bytes()) + " bytes, expected " +
                              std::to_string(want) + ")");
  }
  return ok_status();
}

Status NemotronHModel::forward(const ForwardBatch& batch, ForwardOutput* out) {
  PKV_RETURN_IF_ERROR(validate_batch(batch, s_.geom, s_.cfg.vocab_size));
  PKV_RETURN_IF_ERROR(check_state_sizes(batch));
  backend::Backend& be = *be_;
  const int64_t T = batch.num_tokens(), H = s_.cfg.hidden_size;
  reserve_flat_rows(batch);
  KVAccess kv(batch, s_.geom);
  ScratchBuffer x(kScratchX, static_cast<size_t>(T * H)), h(kScratchH, static_cast<size_t>(T * H)),
      y(kScratchY, static_cast<size_t>(T * H));
  be.embedding(batch.token_ids.data(), T, *s_.ends.embed, x.data());
  // Pre-norm residual blocks, one mixer each.
  for (const Block& B : s_.blocks) {
    be.rms_norm(x.data(), T, *B.norm, s_.eps, false, h.data());
    if (B.kind == BlockKind::kMamba) {
      mamba2_block(be, B.mamba_spec, B.mamba, batch, h.data(), T, y.data());
    } else if (B.kind == BlockKind::kAttention) {
      attention_block(be, B.attn_spec, B.attn, batch, kv, h.data(), T, y.data());
    } else if (B.kind == BlockKind::kMlp) {
      plain_mlp(be, B.mlp, Activation::kRelu2, h.data(), T, y.data());
    } else {
      nemotron_moe(be, B.moe, h.data(), T, H, y.data());
    }
    be.add(x.data(), y.data(), T * H);
  }
  return finish_forward(be, batch, x.data(), H, s_.ends, s_.eps, s_.cfg.vocab_size, out);
}

}  // namespace

StatusOr<std::unique_ptr<Model>> create_nemotron_h(std::shared_ptr<const Checkpoint> ckpt,
                                                   const LoadOptions& options,
                                                   backend::Backend& be) {
  return create_model(std::move(ckpt), options, be);
}

}  // namespace pagedkv::model
