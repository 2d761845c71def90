// make_random_model (see make_model.h).
#include "model/make_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "util/file_system.h"

namespace pagedkv::model {
namespace {

struct Preset {
  int64_t hidden, layers, heads, kv_heads, head_dim, inter, vocab, max_pos;
  int64_t experts, top_k, moe_inter;
  double rope_theta;
  bool tie;
};

bool find_preset(const std::string& name, Preset* p) {
  if (name == "tiny") {
    *p = {64, 2, 4, 2, 16, 128, 512, 4096, 4, 2, 32, 10000.0, false};
  } else if (name == "small") {
    *p = {256, 4, 8, 4, 32, 512, 4096, 8192, 8, 2, 128, 1000000.0, false};
  } else if (name == "qwen3-0.6b-shape") {
    *p = {1024, 28, 16, 8, 128, 3072, 151936, 40960, 8, 2, 768, 1000000.0, true};
  } else {
    return false;
  }
  return true;
}

// splitmix64: a counter-based stream, so tensor i's values depend only on (seed, i).
uint64_t splitmix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

struct Spec {
  std::string name;
  std::vector<int64_t> shape;
  float center;  // 1 for norm weights, else 0
  float scale;   // half-width of the uniform distribution
};

Status write_weights(FileSystem& fs, const MakeModelOptions& o, const std::vector<Spec>& specs,
                     const std::string& h, size_t esize, const std::string& tmp) {
  PKV_ASSIGN_OR_RETURN(auto wf, fs.create_exclusive(tmp, 0644));
  std::vector<uint8_t> buf(8);
  uint64_t hl = h.size();
  for (int i = 0; i < 8; ++i) buf[i] = static_cast<uint8_t>(hl >> (8 * i));
  buf.insert(buf.end(), h.begin(), h.end());
  PKV_RETURN_IF_ERROR(wf->append(buf));
  uint64_t name_hash_base = splitmix(o.seed);
  for (const Spec& s : specs) {
    uint64_t key = name_hash_base;
    for (char ch : s.name) key = splitmix(key ^ static_cast<uint8_t>(ch));
    uint64_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    constexpr uint64_t kChunk = 1 << 20;
    for (uint64_t start = 0; start < n; start += kChunk) {
      uint64_t cnt = std::min(kChunk, n - start);
      buf.resize(cnt * esize);
      for (uint64_t i = 0; i < cnt; ++i) {
        uint64_t r = splitmix(key + start + i);
        float u = static_cast<float>(static_cast<double>(r >> 40) / 16777216.0) * 2.0f - 1.0f;
        float v = s.center + s.scale * u;
        if (o.dtype == DType::kF32) {
          std::memcpy(buf.data() + i * 4, &v, 4);
        } else {
          uint16_t b = f32_to_bf16(v);
          std::memcpy(buf.data() + i * 2, &b, 2);
        }
      }
      PKV_RETURN_IF_ERROR(wf->append(buf));
    }
  }
  PKV_RETURN_IF_ERROR(wf->sync(SyncMode::kFsync));
  return wf->close();
}

// --- lfm2 / lfm2_moe: the preset's sizes in LFM2's config shape and tensor
// names; conv layers at even indices, attention at odd ones; lfm2_moe has one
// dense layer, then MoE layers with an expert_bias.
void lfm2_checkpoint(const Preset& p, bool moe, nlohmann::ordered_json* c,
                     std::vector<Spec>* specs) {
  nlohmann::ordered_json q = *c;  // the shared fields (sizes, ids, dtype, provenance)
  nlohmann::ordered_json& o = *c;
  o = nlohmann::ordered_json::object();
  o["architectures"] = {moe ? "Lfm2MoeForCausalLM" : "Lfm2ForCausalLM"};
  for (const char* k :
       {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
        "num_attention_heads", "num_key_value_heads", "max_position_embeddings", "rope_parameters",
        "tie_word_embeddings", "eos_token_id", "bos_token_id", "dtype"})
    o[k] = q[k];
  o["norm_eps"] = 1e-5;
  o["conv_L_cache"] = 3;
  o["conv_bias"] = false;
  o["block_auto_adjust_ff_dim"] = false;
  std::vector<std::string> types;
  for (int64_t l = 0; l < p.layers; ++l) types.push_back(l % 2 == 1 ? "full_attention" : "conv");
  o["layer_types"] = types;
  if (moe) {
    o["num_dense_layers"] = 1;
    o["num_experts"] = p.experts;
    o["num_experts_per_tok"] = p.top_k;
    o["moe_intermediate_size"] = p.moe_inter;
    o["use_expert_bias"] = true;
    o["norm_topk_prob"] = true;
    o["routed_scaling_factor"] = 1.0;
  }
  o["pagedkv_make_model"] = q["pagedkv_make_model"];

  specs->clear();
  auto lin = [&](const std::string& n, std::vector<int64_t> shape, int64_t in) {
    float stdv = std::min(0.08f, 1.0f / std::sqrt(static_cast<float>(in)));
    specs->push_back({n, std::move(shape), 0.0f, stdv * std::sqrt(3.0f)});
  };
  auto norm = [&](const std::string& n, int64_t d) { specs->push_back({n, {d}, 1.0f, 0.1f}); };
  const int64_t H = p.hidden, QD = p.heads * p.head_dim, KD = p.kv_heads * p.head_dim;
  specs->push_back({"model.embed_tokens.weight", {p.vocab, H}, 0.0f, 0.08f * std::sqrt(3.0f)});
  if (!p.tie) lin("lm_head.weight", {p.vocab, H}, H);
  norm("model.embedding_norm.weight", H);
  auto mlp = [&](const std::string& x, int64_t inter) {
    lin(x + "w1.weight", {inter, H}, H);
    lin(x + "w3.weight", {inter, H}, H);
    lin(x + "w2.weight", {H, inter}, inter);
  };
  for (int64_t l = 0; l < p.layers; ++l) {
    std::string pre = "model.layers." + std::to_string(l) + ".";
    norm(pre + "operator_norm.weight", H);
    norm(pre + "ffn_norm.weight", H);
    if (types[static_cast<size_t>(l)] == "conv") {
      lin(pre + "conv.in_proj.weight", {3 * H, H}, H);
      lin(pre + "conv.out_proj.weight", {H, H}, H);
      specs->push_back({pre + "conv.conv.weight", {H, 1, 3}, 0.0f, 0.5f});
    } else {
      lin(pre + "self_attn.q_proj.weight", {QD, H}, H);
      lin(pre + "self_attn.k_proj.weight", {KD, H}, H);
      lin(pre + "self_attn.v_proj.weight", {KD, H}, H);
      lin(pre + "self_attn.out_proj.weight", {H, QD}, QD);
      norm(pre + "self_attn.q_layernorm.weight", p.head_dim);
      norm(pre + "self_attn.k_layernorm.weight", p.head_dim);
    }
    std::string f = pre + "feed_forward.";
    if (!moe || l < 1) {
      mlp(f, p.inter);
      continue;
    }
    lin(f + "gate.weight", {p.experts, H}, H);
    specs->push_back({f + "expert_bias", {p.experts}, 0.0f, 0.05f});
    for (int64_t e = 0; e < p.experts; ++e)
      mlp(f + "experts." + std::to_string(e) + ".", p.moe_inter);
  }
}

// --- Gated DeltaNet hybrids (qwen3_next, qwen3_5_text, qwen3_5_moe_text) ---
// Every 4th layer (and the last when there are fewer than 4) is full attention,
// the rest Gated DeltaNet with num_kv_heads key heads and num_heads value heads of
// head_dim. Norms of the residual stream and q/k are (1 + w): centred on 0.

bool is_gdn_family(const std::string& f) {
  return f == "qwen3_next" || f == "qwen3_5_text" || f == "qwen3_5_moe_text";
}

bool gdn_full_layer(int64_t i, int64_t layers) {
  return (i + 1) % 4 == 0 || (layers < 4 && i == layers - 1);
}

void gdn_config(const std::string& family, const Preset& p, nlohmann::ordered_json& c) {
  const char* arch = family == "qwen3_next"     ? "Qwen3NextForCausalLM"
                     : family == "qwen3_5_text" ? "Qwen3_5ForCausalLM"
                                                : "Qwen3_5MoeForCausalLM";
  c["architectures"] = {arch};
  nlohmann::ordered_json types = nlohmann::ordered_json::array();
  for (int64_t i = 0; i < p.layers; ++i)
    types.push_back(gdn_full_layer(i, p.layers) ? "full_attention" : "linear_attention");
  c["layer_types"] = types;
  c["linear_conv_kernel_dim"] = 4;
  c["linear_key_head_dim"] = p.head_dim;
  c["linear_value_head_dim"] = p.head_dim;
  c["linear_num_key_heads"] = p.kv_heads;
  c["linear_num_value_heads"] = p.heads;
  c["rope_parameters"] = {
      {"rope_theta", p.rope_theta}, {"rope_type", "default"}, {"partial_rotary_factor", 0.25}};
  if (family == "qwen3_5_text") return;
  c["num_experts"] = p.experts;
  c["num_experts_per_tok"] = p.top_k;
  c["moe_intermediate_size"] = p.moe_inter;
  c["shared_expert_intermediate_size"] = p.moe_inter;
  if (family == "qwen3_next") {
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::ordered_json::array();
    c["norm_topk_prob"] = true;
  }
}

void gdn_specs(const std::string& family, const Preset& p, std::vector<Spec>* specs) {
  auto lin = [&](const std::string& n, int64_t out, int64_t in) {
    float stdv = std::min(0.08f, 1.0f / std::sqrt(static_cast<float>(in)));
    specs->push_back({n, {out, in}, 0.0f, stdv * std::sqrt(3.0f)});
  };
  auto vec = [&](const std::string& n, int64_t d, float center, float scale) {
    specs->push_back({n, {d}, center, scale});
  };
  auto mlp = [&](const std::string& pre, int64_t inter) {
    lin(pre + "gate_proj.weight", inter, p.hidden);
    lin(pre + "up_proj.weight", inter, p.hidden);
    lin(pre + "down_proj.weight", p.hidden, inter);
  };
  const int64_t H = p.hidden, D = p.head_dim, KD = p.kv_heads * D, VD = p.heads * D;
  vec("model.norm.weight", H, 0.0f, 0.1f);
  for (int64_t l = 0; l < p.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    vec(pre + "input_layernorm.weight", H, 0.0f, 0.1f);
    vec(pre + "post_attention_layernorm.weight", H, 0.0f, 0.1f);
    if (gdn_full_layer(l, p.layers)) {
      const std::string a = pre + "self_attn.";
      lin(a + "q_proj.weight", 2 * p.heads * D, H);
      lin(a + "k_proj.weight", p.kv_heads * D, H);
      lin(a + "v_proj.weight", p.kv_heads * D, H);
      lin(a + "o_proj.weight", H, p.heads * D);
      vec(a + "q_norm.weight", D, 0.0f, 0.1f);
      vec(a + "k_norm.weight", D, 0.0f, 0.1f);
    } else {
      const std::string a = pre + "linear_attn.";
      if (family == "qwen3_next") {
        lin(a + "in_proj_qkvz.weight", 2 * KD + 2 * VD, H);
        lin(a + "in_proj_ba.weight", 2 * p.heads, H);
      } else {
        lin(a + "in_proj_qkv.weight", 2 * KD + VD, H);
        lin(a + "in_proj_z.weight", VD, H);
        lin(a + "in_proj_b.weight", p.heads, H);
        lin(a + "in_proj_a.weight", p.heads, H);
      }
      specs->push_back({a + "conv1d.weight", {2 * KD + VD, 1, 4}, 0.0f, 0.5f});
      vec(a + "A_log", p.heads, 0.0f, 1.0f);
      vec(a + "dt_bias", p.heads, 1.0f, 0.1f);
      vec(a + "norm.weight", D, 1.0f, 0.1f);
      lin(a + "out_proj.weight", H, VD);
    }
    if (family == "qwen3_5_text") {
      mlp(pre + "mlp.", p.inter);
      continue;
    }
    lin(pre + "mlp.gate.weight", p.experts, H);
    for (int64_t e = 0; e < p.experts; ++e)
      mlp(pre + "mlp.experts." + std::to_string(e) + ".", p.moe_inter);
    mlp(pre + "mlp.shared_expert.", p.moe_inter);
    lin(pre + "mlp.shared_expert_gate.weight", 1, H);
  }
}
// The config.json fields every family's preset writes first, in this order.
void shared_config_fields(const MakeModelOptions& o, const Preset& p, const char* architecture,
                          nlohmann::ordered_json* c) {
  (*c)["architectures"] = {architecture};
  (*c)["model_type"] = o.family;
  (*c)["vocab_size"] = p.vocab;
  (*c)["hidden_size"] = p.hidden;
  (*c)["intermediate_size"] = p.inter;
  (*c)["num_hidden_layers"] = p.layers;
  (*c)["num_attention_heads"] = p.heads;
  (*c)["num_key_value_heads"] = p.kv_heads;
  (*c)["head_dim"] = p.head_dim;
}

// eos / bos token ids and the weights' dtype, in that order (gemma and the
// qwen3-style families; nemotron_h keeps the fields of its own template).
void token_and_dtype_fields(const MakeModelOptions& o, nlohmann::ordered_json* c) {
  if (o.eos_token_id >= 0) {
    (*c)["eos_token_id"] = o.eos_token_id;
  } else {
    (*c)["eos_token_id"] = nullptr;
  }
  (*c)["bos_token_id"] = nullptr;
  (*c)["dtype"] = o.dtype == DType::kF32 ? "float32" : "bfloat16";
}

// --- gemma3_text / gemma4_text presets ---
// The preset's sizes with Gemma's layer layout: 6 layers unless --layers (every
// third full attention, the rest sliding, window 32 tiny / 128 otherwise), tied
// embeddings, gelu_pytorch_tanh. gemma4_text adds per-layer inputs (16 / 32 per
// layer), the last third of the layers KV-shared, proportional partial RoPE on
// full layers, global_head_dim = head_dim; preset tiny-moe adds the MoE block and
// attention_k_eq_v; preset tiny-global gives the full layers their own KV shape
// (global_head_dim 2 x head_dim, attention_k_eq_v with num_global_key_value_heads
// = num_attention_heads), the shape of the published Gemma 4 checkpoints. Norm
// weights are centred on 0 for gemma3 (applied as 1 + w) and on 1 for gemma4.
bool is_gemma_family(const std::string& f) { return f == "gemma3_text" || f == "gemma4_text"; }

void gemma_spec(const MakeModelOptions& o, Preset p, bool moe, nlohmann::ordered_json* cfg,
                std::vector<Spec>* specs) {
  const bool g4 = o.family == "gemma4_text";
  const bool global = g4 && o.preset == "tiny-global";
  if (o.num_layers <= 0) p.layers = 6;
  const int64_t window =
      o.preset == "tiny" || o.preset == "tiny-moe" || o.preset == "tiny-global" ? 32 : 128;
  // Full-attention layers' KV shape (tiny-global: its own).
  const int64_t global_hd = global ? 2 * p.head_dim : p.head_dim;
  const int64_t global_kvh = global ? p.heads : p.kv_heads;
  const bool k_eq_v = moe || global;
  const int64_t ple = g4 ? (p.hidden <= 64 ? 16 : 32) : 0;
  const int64_t shared = g4 ? p.layers / 3 : 0;
  std::vector<std::string> types;
  for (int64_t i = 0; i < p.layers; ++i)
    types.push_back((i + 1) % 3 != 0 ? "sliding_attention" : "full_attention");
  if (g4) types.back() = "full_attention";
  nlohmann::ordered_json& c = *cfg;
  c = nlohmann::ordered_json::object();
  shared_config_fields(o, p, g4 ? "Gemma4ForCausalLM" : "Gemma3ForCausalLM", &c);
  c["hidden_activation"] = "gelu_pytorch_tanh";
  c["max_position_embeddings"] = p.max_pos;
  c["rms_norm_eps"] = 1e-6;
  c["layer_types"] = types;
  c["sliding_window"] = window;
  c["query_pre_attn_scalar"] = p.head_dim;
  c["final_logit_softcapping"] = nullptr;
  if (!g4) c["attn_logit_softcapping"] = nullptr;
  nlohmann::ordered_json full = {{"rope_theta", 1000000.0}, {"rope_type", "default"}};
  if (g4)
    full = {
        {"partial_rotary_factor", 0.25}, {"rope_theta", 1000000.0}, {"rope_type", "proportional"}};
  c["rope_parameters"] = {
      {"full_attention", full},
      {"sliding_attention", {{"rope_theta", 10000.0}, {"rope_type", "default"}}}};
  c["tie_word_embeddings"] = true;
  c["attention_bias"] = false;
  token_and_dtype_fields(o, &c);
  if (g4) {
    c["hidden_size_per_layer_input"] = ple;
    c["vocab_size_per_layer_input"] = p.vocab;
    c["num_kv_shared_layers"] = shared;
    c["attention_k_eq_v"] = k_eq_v;
    c["num_global_key_value_heads"] = k_eq_v ? nlohmann::ordered_json(global_kvh) : nullptr;
    c["global_head_dim"] = global_hd;
    c["use_double_wide_mlp"] = false;
    c["enable_moe_block"] = moe;
    c["num_experts"] = moe ? nlohmann::ordered_json(p.experts) : nullptr;
    c["top_k_experts"] = moe ? nlohmann::ordered_json(p.top_k) : nullptr;
    c["moe_intermediate_size"] = moe ? nlohmann::ordered_json(p.moe_inter) : nullptr;
  }
  c["pagedkv_make_model"] = {{"preset", o.preset}, {"seed", o.seed}};

  std::vector<Spec>& s = *specs;
  s.clear();
  auto lin = [&](const std::string& n, int64_t out, int64_t in) {
    float stdv = std::min(0.08f, 1.0f / std::sqrt(static_cast<float>(in)));
    s.push_back({n, {out, in}, 0.0f, stdv * std::sqrt(3.0f)});
  };
  const float nc = g4 ? 1.0f : 0.0f;
  auto norm = [&](const std::string& n, int64_t d) { s.push_back({n, {d}, nc, 0.1f}); };
  s.push_back({"model.embed_tokens.weight", {p.vocab, p.hidden}, 0.0f, 0.08f * std::sqrt(3.0f)});
  norm("model.norm.weight", p.hidden);
  if (g4) {
    s.push_back({"model.embed_tokens_per_layer.weight",
                 {p.vocab, p.layers * ple},
                 0.0f,
                 0.08f * std::sqrt(3.0f)});
    lin("model.per_layer_model_projection.weight", p.layers * ple, p.hidden);
    norm("model.per_layer_projection_norm.weight", ple);
  }
  for (int64_t l = 0; l < p.layers; ++l) {
    const std::string pre = "model.layers." + std::to_string(l) + ".";
    const bool is_shared = l >= p.layers - shared;
    const bool full = types[l] == "full_attention";
    const bool kv_eq = k_eq_v && full;
    const int64_t hd = g4 && full ? global_hd : p.head_dim;
    const int64_t kvh = kv_eq ? global_kvh : p.kv_heads;
    for (const char* n : {"input_layernorm", "post_attention_layernorm",
                          "pre_feedforward_layernorm", "post_feedforward_layernorm"})
      norm(pre + n + ".weight", p.hidden);
    lin(pre + "self_attn.q_proj.weight", p.heads * hd, p.hidden);
    lin(pre + "self_attn.o_proj.weight", p.hidden, p.heads * hd);
    norm(pre + "self_attn.q_norm.weight", hd);
    if (!is_shared) {
      lin(pre + "self_attn.k_proj.weight", kvh * hd, p.hidden);
      if (!kv_eq) lin(pre + "self_attn.v_proj.weight", kvh * hd, p.hidden);
      norm(pre + "self_attn.k_norm.weight", hd);
    }
    lin(pre + "mlp.gate_proj.weight", p.inter, p.hidden);
    lin(pre + "mlp.up_proj.weight", p.inter, p.hidden);
    lin(pre + "mlp.down_proj.weight", p.hidden, p.inter);
    if (!g4) continue;
    lin(pre + "per_layer_input_gate.weight", ple, p.hidden);
    lin(pre + "per_layer_projection.weight", p.hidden, ple);
    norm(pre + "post_per_layer_input_norm.weight", p.hidden);
    s.push_back({pre + "layer_scalar", {1}, 1.0f, 0.1f});
    if (moe) {
      lin(pre + "router.proj.weight", p.experts, p.hidden);
      s.push_back({pre + "router.scale", {p.hidden}, 1.0f, 0.1f});
      s.push_back({pre + "router.per_expert_scale", {p.experts}, 1.0f, 0.1f});
      for (const char* n : {"post_feedforward_layernorm_1", "post_feedforward_layernorm_2",
                            "pre_feedforward_layernorm_2"})
        norm(pre + n + ".weight", p.hidden);
      const float sc = std::min(0.08f, 1.0f / std::sqrt(static_cast<float>(p.hidden)));
      s.push_back({pre + "experts.gate_up_proj",
                   {p.experts, 2 * p.moe_inter, p.hidden},
                   0.0f,
                   sc * std::sqrt(3.0f)});
      const float sd = std::min(0.08f, 1.0f / std::sqrt(static_cast<float>(p.moe_inter)));
      s.push_back({pre + "experts.down_proj",
                   {p.experts, p.hidden, p.moe_inter},
                   0.0f,
                   sd * std::sqrt(3.0f)});
    }
  }
}
// --- end gemma presets ---

// --- nemotron_h layout (replaces the qwen3 config and tensors) ---
// 2x the preset's layers (or num_layers) cycling transformers' default pattern
// Mamba-2, MoE, attention, MLP; Mamba-2 with expand 2 (heads of 16), state 16,
// 2 groups; MoE with 2 expert groups of which 1 is eligible, a shared expert.
void nemotron_h_layout(const MakeModelOptions& o, const Preset& p, nlohmann::ordered_json* cfg,
                       std::vector<Spec>* specs) {
  const int64_t layers = o.num_layers > 0 ? o.num_layers : 2 * p.layers;
  const int64_t mheads = 2 * p.hidden / 16, mhd = 16, state = 16, groups = 2, kconv = 4;
  const int64_t inner = mheads * mhd, conv_dim = inner + 2 * groups * state;
  static const char* kPattern[] = {"linear_attention", "moe", "full_attention", "mlp"};
  nlohmann::ordered_json& c = *cfg;
  nlohmann::ordered_json keep_eos = c["eos_token_id"], keep_dtype = c["dtype"];
  c = nlohmann::ordered_json::object();
  c["architectures"] = {"NemotronHForCausalLM"};
  c["model_type"] = "nemotron_h";
  c["vocab_size"] = p.vocab;
  c["hidden_size"] = p.hidden;
  c["layers_block_type"] = nlohmann::ordered_json::array();
  for (int64_t l = 0; l < layers; ++l) c["layers_block_type"].push_back(kPattern[l % 4]);
  // Attention, relu² MLP, Mamba-2 and MoE fields, as transformers names them.
  const nlohmann::ordered_json fields = {{"num_attention_heads", p.heads},
                                         {"num_key_value_heads", p.kv_heads},
                                         {"head_dim", p.head_dim},
                                         {"intermediate_size", p.inter},
                                         {"mlp_hidden_act", "relu2"},
                                         {"mamba_num_heads", mheads},
                                         {"mamba_head_dim", mhd},
                                         {"ssm_state_size", state},
                                         {"n_groups", groups},
                                         {"conv_kernel", kconv},
                                         {"use_conv_bias", true},
                                         {"time_step_min", 0.001},
                                         {"n_routed_experts", p.experts},
                                         {"num_experts_per_tok", p.top_k},
                                         {"moe_intermediate_size", p.moe_inter},
                                         {"moe_shared_expert_intermediate_size", p.moe_inter},
                                         {"n_group", 2},
                                         {"topk_group", 1},
                                         {"norm_topk_prob", true},
                                         {"routed_scaling_factor", 1.0}};
  for (const auto& [k, v] : fields.items()) c[k] = v;
  c["layer_norm_epsilon"] = 1e-5;
  c["max_position_embeddings"] = p.max_pos;
  c["tie_word_embeddings"] = p.tie;
  c["eos_token_id"] = keep_eos;
  c["bos_token_id"] = nullptr;
  c["dtype"] = keep_dtype;
  c["pagedkv_make_model"] = {{"preset", o.preset}, {"seed", o.seed}};

  auto lin = [&](const std::string& n, int64_t out, int64_t in) {
    float stdv = std::min(0.08f, 1.0f / std::sqrt(static_cast<float>(in)));
    specs->push_back({n, {out, in}, 0.0f, stdv * std::sqrt(3.0f)});
  };
  auto vec = [&](const std::string& n, int64_t d, float center, float scale) {
    specs->push_back({n, {d}, center, scale});
  };
  specs->clear();
  specs->push_back(
      {"backbone.embeddings.weight", {p.vocab, p.hidden}, 0.0f, 0.08f * std::sqrt(3.0f)});
  if (!p.tie) lin("lm_head.weight", p.vocab, p.hidden);
  vec("backbone.norm_f.weight", p.hidden, 1.0f, 0.1f);
  for (int64_t l = 0; l < layers; ++l) {
    const std::string pre = "backbone.layers." + std::to_string(l) + ".";
    const std::string x = pre + "mixer.";
    vec(pre + "norm.weight", p.hidden, 1.0f, 0.1f);
    const std::string kind = kPattern[l % 4];
    if (kind == "linear_attention") {
      lin(x + "in_proj.weight", inner + conv_dim + mheads, p.hidden);
      specs->push_back({x + "conv1d.weight", {conv_dim, 1, kconv}, 0.0f, 0.5f});
      vec(x + "conv1d.bias", conv_dim, 0.0f, 0.1f);
      vec(x + "A_log", mheads, 0.5f, 0.5f);  // A = -exp(A_log) in [-e, -1]
      vec(x + "D", mheads, 1.0f, 0.1f);
      vec(x + "dt_bias", mheads, -2.0f, 1.0f);  // softplus: dt around 0.05..0.3
      vec(x + "norm.weight", inner, 1.0f, 0.1f);
      lin(x + "out_proj.weight", p.hidden, inner);
    } else if (kind == "full_attention") {
      lin(x + "q_proj.weight", p.heads * p.head_dim, p.hidden);
      lin(x + "k_proj.weight", p.kv_heads * p.head_dim, p.hidden);
      lin(x + "v_proj.weight", p.kv_heads * p.head_dim, p.hidden);
      lin(x + "o_proj.weight", p.hidden, p.heads * p.head_dim);
    } else if (kind == "mlp") {
      lin(x + "up_proj.weight", p.inter, p.hidden);
      lin(x + "down_proj.weight", p.hidden, p.inter);
    } else {
      lin(x + "gate.weight", p.experts, p.hidden);
      vec(x + "gate.e_score_correction_bias", p.experts, 0.0f, 0.01f);
      for (int64_t e = 0; e < p.experts; ++e) {
        const std::string ex = x + "experts." + std::to_string(e) + ".";
        lin(ex + "up_proj.weight", p.moe_inter, p.hidden);
        lin(ex + "down_proj.weight", p.hidden, p.moe_inter);
      }
      lin(x + "shared_experts.up_proj.weight", p.moe_inter, p.hidden);
      lin(x + "shared_experts.down_proj.weight", p.hidden, p.moe_inter);
    }
  }
}

}  // namespace

std::vector<std::string> make_model_families() {
  return {"qwen3",       "qwen3_moe",   "qwen3_next", "qwen3_5_text", "qwen3_5_moe_text",
          "gemma3_text", "gemma4_text", "lfm2",       "lfm2_moe",     "nemotron_h"};
}

std::vector<std::string> make_model_presets() { return {"tiny", "small", "qwen3-0.6b-shape"}; }

Status make_random_model(const MakeModelOptions& o) {
  Preset p;
  const std::vector<std::string> families = make_model_families();
  if (std::find(families.begin(), families.end(), o.family) == families.end()) {
    std::string list;
    for (const auto& f : families) list += (list.empty() ? "" : ", ") + f;
    return invalid_argument("unknown family '" + o.family + "' (" + list + ")");
  }
  // gemma4_text's tiny-moe / tiny-global: the tiny sizes plus the MoE block /
  // full layers with their own KV shape (gemma presets).
  const bool gemma_moe = o.family == "gemma4_text" && o.preset == "tiny-moe";
  const bool gemma_global = o.family == "gemma4_text" && o.preset == "tiny-global";
  if (!find_preset(gemma_moe || gemma_global ? "tiny" : o.preset, &p))
    return invalid_argument(
        "unknown preset '" + o.preset +
        "' (tiny, small, qwen3-0.6b-shape; gemma4_text also tiny-moe, tiny-global)");
  const bool lfm2 = o.family == "lfm2" || o.family == "lfm2_moe";
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16)
    return invalid_argument("dtype must be f32 or bf16");
  if (o.out_dir.empty()) return invalid_argument("--out is required");
  if (o.num_layers > 0) p.layers = o.num_layers;
  if (o.vocab_size > 0) p.vocab = o.vocab_size;
  if (o.num_experts > 0) p.experts = o.num_experts;
  if (o.experts_per_tok > 0) p.top_k = o.experts_per_tok;
  if (p.top_k > p.experts)
    return invalid_argument("experts per token (" + std::to_string(p.top_k) +
                            ") exceeds the number of experts (" + std::to_string(p.experts) + ")");
  const bool moe = o.family == "qwen3_moe";

  nlohmann::ordered_json c;
  shared_config_fields(o, p, moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM", &c);
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = p.max_pos;
  c["rms_norm_eps"] = 1e-6;
  c["rope_parameters"] = {{"rope_theta", p.rope_theta}, {"rope_type", "default"}};
  c["tie_word_embeddings"] = p.tie;
  c["attention_bias"] = false;
  token_and_dtype_fields(o, &c);
  if (moe) {
    c["num_experts"] = p.experts;
    c["num_experts_per_tok"] = p.top_k;
    c["moe_intermediate_size"] = p.moe_inter;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::ordered_json::array();
    c["norm_topk_prob"] = true;
  }
  if (is_gdn_family(o.family)) gdn_config(o.family, p, c);
  c["pagedkv_make_model"] = {{"preset", o.preset}, {"seed", o.seed}};

  std::vector<Spec> specs;
  auto lin = [&](const std::string& n, int64_t out, int64_t in) {
    float stdv = std::min(0.08f, 1.0f / std::sqrt(static_cast<float>(in)));
    specs.push_back({n, {out, in}, 0.0f, stdv * std::sqrt(3.0f)});
  };
  auto norm = [&](const std::string& n, int64_t d) { specs.push_back({n, {d}, 1.0f, 0.1f}); };
  specs.push_back(
      {"model.embed_tokens.weight", {p.vocab, p.hidden}, 0.0f, 0.08f * std::sqrt(3.0f)});
  if (!p.tie) lin("lm_head.weight", p.vocab, p.hidden);
  if (is_gdn_family(o.family)) gdn_specs(o.family, p, &specs);
  if (!is_gdn_family(o.family)) norm("model.norm.weight", p.hidden);
  for (int64_t l = 0; l < p.layers && !is_gdn_family(o.family); ++l) {
    std::string pre = "model.layers." + std::to_string(l) + ".";
    norm(pre + "input_layernorm.weight", p.hidden);
    norm(pre + "post_attention_layernorm.weight", p.hidden);
    lin(pre + "self_attn.q_proj.weight", p.heads * p.head_dim, p.hidden);
    lin(pre + "self_attn.k_proj.weight", p.kv_heads * p.head_dim, p.hidden);
    lin(pre + "self_attn.v_proj.weight", p.kv_heads * p.head_dim, p.hidden);
    lin(pre + "self_attn.o_proj.weight", p.hidden, p.heads * p.head_dim);
    norm(pre + "self_attn.q_norm.weight", p.head_dim);
    norm(pre + "self_attn.k_norm.weight", p.head_dim);
    if (moe) {
      lin(pre + "mlp.gate.weight", p.experts, p.hidden);
      for (int64_t e = 0; e < p.experts; ++e) {
        std::string x = pre + "mlp.experts." + std::to_string(e) + ".";
        lin(x + "gate_proj.weight", p.moe_inter, p.hidden);
        lin(x + "up_proj.weight", p.moe_inter, p.hidden);
        lin(x + "down_proj.weight", p.hidden, p.moe_inter);
      }
    } else {
      lin(pre + "mlp.gate_proj.weight", p.inter, p.hidden);
      lin(pre + "mlp.up_proj.weight", p.inter, p.hidden);
      lin(pre + "mlp.down_proj.weight", p.hidden, p.inter);
    }
  }
  if (lfm2) lfm2_checkpoint(p, o.family == "lfm2_moe", &c, &specs);
  if (is_gemma_family(o.family)) gemma_spec(o, p, gemma_moe, &c, &specs);
  if (o.family == "nemotron_h") nemotron_h_layout(o, p, &c, &specs);
  // Sorted like encode_safetensors; the seed stream of a tensor is keyed by its name.
  std::sort(specs.begin(), specs.end(),
            [](const Spec& a, const Spec& b) { return a.name < b.name; });

  auto& fs = o.fs != nullptr ? *o.fs : FileSystem::posix();
  PKV_RETURN_IF_ERROR(fs.create_dirs(o.out_dir, 0755));
  std::string cfg = c.dump(2) + "\n";

  const size_t esize = dtype_size(o.dtype);
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  header["__metadata__"] = {{"format", "pt"}};
  uint64_t off = 0;
  for (const Spec& s : specs) {
    uint64_t n = 1;
    for (int64_t d : s.shape) n *= static_cast<uint64_t>(d);
    header[s.name] = {{"dtype", dtype_name(o.dtype)},
                      {"shape", s.shape},
                      {"data_offsets", {off, off + n * esize}}};
    off += n * esize;
  }
  std::string h = header.dump();
  while (h.size() % 8 != 0) h.push_back(' ');
  std::string final_path = join_path(o.out_dir, "model.safetensors");
  std::string tmp = final_path + ".tmp";
  (void)fs.remove(tmp);
  // The weights go to a temp file first; config.json is written only once they
  // are complete, and the rename comes last. Any failure removes what this call
  // wrote (no model.safetensors.tmp, no config.json without its weights).
  Status st = write_weights(fs, o, specs, h, esize, tmp);
  if (st.ok()) {
    st = write_file_durably(
        fs, join_path(o.out_dir, "config.json"),
        std::span<const uint8_t>(reinterpret_cast<const uint8_t*>(cfg.data()), cfg.size()), 0644);
    if (st.ok()) {
      st = fs.rename(tmp, final_path);
      if (!st.ok()) (void)fs.remove(join_path(o.out_dir, "config.json"));
    }
  }
  if (!st.ok()) {
    (void)fs.remove(tmp);
    return st;
  }
  return fs.sync_dir(o.out_dir);
}

}  // namespace pagedkv::model
