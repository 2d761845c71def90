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

}  // namespace

std::vector<std::string> make_model_presets() { return {"tiny", "small", "qwen3-0.6b-shape"}; }

Status make_random_model(const MakeModelOptions& o) {
  Preset p;
  if (!find_preset(o.preset, &p))
    return invalid_argument("unknown preset '" + o.preset + "' (tiny, small, qwen3-0.6b-shape)");
  const bool lfm2 = o.family == "lfm2" || o.family == "lfm2_moe";
  if (o.family != "qwen3" && o.family != "qwen3_moe" && !lfm2)
    return invalid_argument("unknown family '" + o.family + "' (qwen3, qwen3_moe, lfm2, lfm2_moe)");
  if (o.dtype != DType::kF32 && o.dtype != DType::kBF16)
    return invalid_argument("dtype must be f32 or bf16");
  if (o.out_dir.empty()) return invalid_argument("--out is required");
  if (o.num_layers > 0) p.layers = o.num_layers;
  if (o.vocab_size > 0) p.vocab = o.vocab_size;
  const bool moe = o.family == "qwen3_moe";

  nlohmann::ordered_json c;
  c["architectures"] = {moe ? "Qwen3MoeForCausalLM" : "Qwen3ForCausalLM"};
  c["model_type"] = o.family;
  c["vocab_size"] = p.vocab;
  c["hidden_size"] = p.hidden;
  c["intermediate_size"] = p.inter;
  c["num_hidden_layers"] = p.layers;
  c["num_attention_heads"] = p.heads;
  c["num_key_value_heads"] = p.kv_heads;
  c["head_dim"] = p.head_dim;
  c["hidden_act"] = "silu";
  c["max_position_embeddings"] = p.max_pos;
  c["rms_norm_eps"] = 1e-6;
  c["rope_parameters"] = {{"rope_theta", p.rope_theta}, {"rope_type", "default"}};
  c["tie_word_embeddings"] = p.tie;
  c["attention_bias"] = false;
  if (o.eos_token_id >= 0) {
    c["eos_token_id"] = o.eos_token_id;
  } else {
    c["eos_token_id"] = nullptr;
  }
  c["bos_token_id"] = nullptr;
  c["dtype"] = o.dtype == DType::kF32 ? "float32" : "bfloat16";
  if (moe) {
    c["num_experts"] = p.experts;
    c["num_experts_per_tok"] = p.top_k;
    c["moe_intermediate_size"] = p.moe_inter;
    c["decoder_sparse_step"] = 1;
    c["mlp_only_layers"] = nlohmann::ordered_json::array();
    c["norm_topk_prob"] = true;
  }
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
  norm("model.norm.weight", p.hidden);
  for (int64_t l = 0; l < p.layers; ++l) {
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
