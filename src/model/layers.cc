// Shared layers (see layers.h).
#include "model/layers.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "backend/half.h"
#include "model/generation_config.h"
#include "model/recurrent_state.h"
#include "util/check.h"
#include "util/knobs.h"

namespace pagedkv::model {
namespace {

backend::WeightDType to_backend(DType d) {
  switch (d) {
    case DType::kBF16:
      return backend::WeightDType::kBF16;
    case DType::kF16:
      return backend::WeightDType::kF16;
    default:
      return backend::WeightDType::kF32;
  }
}

void add_bias(backend::Backend& be, float* y, int64_t T, const backend::Weight* bias, int64_t n,
              std::vector<float>& tmp) {
  if (bias == nullptr) return;
  // Widen the bias once (an embedding lookup of row 0 of a [1][n] table).
  tmp.resize(static_cast<size_t>(n));
  int32_t zero = 0;
  be.embedding(&zero, 1, *bias, tmp.data());
  for (int64_t t = 0; t < T; ++t) be.add(y + t * n, tmp.data(), n);
}

}  // namespace

float* ScratchBuffer::acquire(int slot, size_t n) {
  thread_local std::vector<float> buffers[kScratchSlots];
  std::vector<float>& b = buffers[slot];
  if (b.size() < n) b.resize(n);
  return b.data();
}

StatusOr<WeightPtr> load_weight(const Checkpoint& ckpt, backend::Backend& be,
                                const std::string& name, const std::vector<int64_t>& shape) {
  PKV_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.require(name, shape));
  backend::HostTensorView v;
  v.dtype = to_backend(t->dtype);
  v.rows = shape.size() == 2 ? shape[0] : 1;
  v.cols = shape.size() == 2 ? shape[1] : shape[0];
  v.data = t->data;
  return be.upload(v);
}

StatusOr<WeightPtr> load_optional_weight(const Checkpoint& ckpt, backend::Backend& be,
                                         const std::string& name,
                                         const std::vector<int64_t>& shape) {
  if (ckpt.find(name) == nullptr) return WeightPtr();
  return load_weight(ckpt, be, name, shape);
}

Status load_weights(const Checkpoint& ckpt, backend::Backend& be, const std::string& prefix,
                    std::initializer_list<WeightSlot> slots) {
  for (const WeightSlot& s : slots) {
    PKV_ASSIGN_OR_RETURN(*s.dst, load_weight(ckpt, be, prefix + s.name, s.shape));
  }
  return ok_status();
}

StatusOr<backend::RopeParams> parse_rope(const ConfigReader& cfg, int32_t head_dim,
                                         const std::string& layer_type) {
  backend::RopeParams p;
  double theta = 10000.0;
  std::string type = "default";
  double factor = 1.0;
  double partial = 1.0;
  PKV_ASSIGN_OR_RETURN(partial, cfg.get_double_or("partial_rotary_factor", 1.0));
  auto read_params = [&](const ConfigReader& r) -> Status {
    PKV_ASSIGN_OR_RETURN(theta, r.get_double_or("rope_theta", theta));
    PKV_ASSIGN_OR_RETURN(type, r.get_string_or("rope_type", r.has("type") ? "" : "default"));
    if (type.empty()) {
      PKV_ASSIGN_OR_RETURN(type, r.get_string("type"));
    }
    PKV_ASSIGN_OR_RETURN(factor, r.get_double_or("factor", 1.0));
    PKV_ASSIGN_OR_RETURN(partial, r.get_double_or("partial_rotary_factor", partial));
    return ok_status();
  };
  if (cfg.has("rope_parameters")) {
    PKV_ASSIGN_OR_RETURN(ConfigReader rp, cfg.sub("rope_parameters"));
    if (rp.has(layer_type) && rp.json()[layer_type].is_object()) {
      PKV_ASSIGN_OR_RETURN(ConfigReader per, rp.sub(layer_type));
      PKV_RETURN_IF_ERROR(read_params(per));
    } else {
      PKV_RETURN_IF_ERROR(read_params(rp));
    }
  } else {
    PKV_ASSIGN_OR_RETURN(theta, cfg.get_double_or("rope_theta", 10000.0));
    if (cfg.has("rope_scaling")) {
      PKV_ASSIGN_OR_RETURN(ConfigReader rs, cfg.sub("rope_scaling"));
      double keep_theta = theta;
      PKV_RETURN_IF_ERROR(read_params(rs));
      theta = keep_theta;
    }
  }
  if (!(theta > 0.0) || !std::isfinite(static_cast<float>(theta)))
    return cfg.error("rope_theta", "must be positive and finite as a float");
  if (type == "linear") {
    // Positions are divided by the factor: 1e-300 would make every angle inf/NaN.
    if (!(factor >= 1e-3 && factor <= 1e6))
      return cfg.error("rope_parameters.factor",
                       "must be in [1e-3, 1e6], got " + std::to_string(factor));
    p.position_scale = static_cast<float>(factor);
  } else if (type != "default") {
    return cfg.error("rope_parameters.rope_type",
                     "'" + type + "' is not supported (supported: default, linear)");
  }
  if (!(partial > 0.0 && partial <= 1.0))
    return cfg.error("partial_rotary_factor", "must be in (0, 1]");
  p.theta = static_cast<float>(theta);
  int32_t rot = static_cast<int32_t>(static_cast<double>(head_dim) * partial);
  rot -= rot % 2;
  if (rot <= 0) return cfg.error("partial_rotary_factor", "leaves no rotary dimensions");
  p.rotary_dim = rot;
  return p;
}

StatusOr<CacheConfig> read_cache_config(const ConfigReader& c) {
  CacheConfig out;
  if (c.has("use_block_paged_cache")) {
    PKV_ASSIGN_OR_RETURN(bool v, c.get_bool_or("use_block_paged_cache", true));
    out.use_block_paged_cache = v;
  }
  for (const char* f : {"paged_cache_memory_mb", "paged_cache_initial_memory_mb"}) {
    if (!c.has(f)) continue;
    PKV_ASSIGN_OR_RETURN(int64_t v, c.get_int(f));
    if (v < 0) return c.error(f, "must be >= 0");
    (std::string(f) == "paged_cache_memory_mb" ? out.paged_cache_memory_mb
                                               : out.paged_cache_initial_memory_mb) =
        static_cast<uint64_t>(v);
  }
  if (c.has("paged_block_size")) {
    PKV_ASSIGN_OR_RETURN(int64_t v, c.get_int("paged_block_size"));
    if (v < 1 || v > 256) return c.error("paged_block_size", "must be in [1, 256]");
    out.paged_block_size = v;
  }
  return out;
}

int32_t resolve_block_size(const LoadOptions& options, const CacheConfig& cache) {
  if (options.block_size > 0) return options.block_size;
  std::optional<uint64_t> cfg;
  if (cache.paged_block_size) cfg = static_cast<uint64_t>(*cache.paged_block_size);
  uint64_t v = resolve_knob<uint64_t>("PAGEDKV_PAGED_BLOCK_SIZE", cfg, 16);
  if (v < 1 || v > 256) v = 16;
  return static_cast<int32_t>(v);
}

bool resolve_use_block_paged_cache(const CacheConfig& c) {
  return resolve_knob<bool>("PAGEDKV_USE_BLOCK_PAGED_CACHE", c.use_block_paged_cache, true);
}

namespace {

// Fast scan: 16 independent lanes (vectorized); a NaN is the only value unequal
// to itself.
bool any_nan(const float* l, size_t n) {
  constexpr size_t kLanes = 16;
  int nan = 0;
  size_t j = 0;
  for (; j + kLanes <= n; j += kLanes)
    for (size_t b = 0; b < kLanes; ++b) nan |= l[j + b] != l[j + b];
  for (; j < n; ++j) nan |= l[j] != l[j];
  return nan != 0;
}

}  // namespace

Status check_logits(const ForwardOutput& out) {
  // Fast scan first; only logits with a NaN take the loop that names it.
  if (!any_nan(out.logits.data(), out.logits.size())) return ok_status();
  const size_t v = static_cast<size_t>(out.vocab_size);
  for (size_t i = 0; i < out.logits.size(); ++i) {
    if (!std::isnan(out.logits[i])) continue;
    size_t logits_row = v == 0 ? 0 : i / v;
    size_t row = 0;
    while (row + 1 < out.row_begin.size() &&
           static_cast<size_t>(out.row_begin[row + 1]) <= logits_row)
      ++row;
    return internal_error("the model produced a NaN logit (batch row " + std::to_string(row) +
                          ", token id " + std::to_string(v == 0 ? 0 : i % v) +
                          "): the checkpoint or its config.json is degenerate");
  }
  return ok_status();
}

// check_logits with the fast scan split over logits rows on the backend's
// threads (issue 11: 32 rows × a 152k vocabulary is ~20 MB to scan per step).
// Each row's flag is its own scan; the flags are then read in row order and any
// NaN goes to check_logits, which names the first one — so the Status is the
// one check_logits alone returns, at any thread count.
namespace {
Status check_logits_rows(backend::Backend& be, const ForwardOutput& out) {
  const size_t v = static_cast<size_t>(out.vocab_size);
  const size_t rows = v == 0 ? 0 : out.logits.size() / v;
  if (rows < 2 || rows * v != out.logits.size()) return check_logits(out);
  std::vector<uint8_t> nan(rows, 0);
  be.parallel_for(static_cast<int64_t>(rows), backend::grain_for_work(static_cast<int64_t>(v)),
                  [&](int64_t begin, int64_t end) {
                    for (int64_t r = begin; r < end; ++r)
                      nan[static_cast<size_t>(r)] =
                          any_nan(out.logits.data() + static_cast<size_t>(r) * v, v) ? 1 : 0;
                  });
  for (uint8_t f : nan)
    if (f != 0) return check_logits(out);
  return ok_status();
}
}  // namespace

Status run_decoder(backend::Backend& be, const DecoderFrame& f, const ForwardBatch& batch,
                   const DecoderStack& stack, ForwardOutput* out) {
  PKV_RETURN_IF_ERROR(validate_batch(batch, *f.geometry, f.vocab_size));
  const int64_t T = batch.num_tokens();
  reserve_flat_rows(batch);
  KVAccess kv(batch, *f.geometry);
  const size_t TH = static_cast<size_t>(T * f.hidden);
  ScratchBuffer x(kScratchX, TH), h(kScratchH, TH), y(kScratchY, TH);
  be.embedding(batch.token_ids.data(), T, *f.io->embed, x.data());
  stack(kv, x.data(), h.data(), y.data(), T);
  return finish_forward(be, batch, x.data(), f.hidden, *f.io, f.final_eps, f.vocab_size, out);
}

StatusOr<EmbeddingWeights> load_embedding_weights(const Checkpoint& ckpt, backend::Backend& be,
                                                  int64_t vocab, int64_t hidden, bool tied,
                                                  const std::string& final_norm_name,
                                                  const std::string& embed_name) {
  EmbeddingWeights w;
  PKV_ASSIGN_OR_RETURN(w.embed, load_weight(ckpt, be, embed_name, {vocab, hidden}));
  PKV_ASSIGN_OR_RETURN(w.final_norm, load_weight(ckpt, be, final_norm_name, {hidden}));
  if (tied && ckpt.find("lm_head.weight") == nullptr) {
    w.lm_head = w.embed.get();
    return w;
  }
  PKV_ASSIGN_OR_RETURN(w.lm_head_owned, load_weight(ckpt, be, "lm_head.weight", {vocab, hidden}));
  w.lm_head = w.lm_head_owned.get();
  return w;
}

Status validate_batch(const ForwardBatch& batch, const KVGeometry& geom, int32_t vocab_size) {
  if (batch.positions.size() != batch.token_ids.size())
    return invalid_argument("forward batch: positions and token_ids differ in length");
  int32_t next = 0;
  for (size_t r = 0; r < batch.rows.size(); ++r) {
    const ForwardRow& row = batch.rows[r];
    // The error's prefix, made only for an error (the check runs every step).
    auto where = [r] { return "forward batch row " + std::to_string(r) + ": "; };
    if (row.num_tokens < 1) return invalid_argument(where() + "num_tokens must be >= 1");
    if (row.first_token != next)
      return invalid_argument(where() + "spans must be back to back (first_token " +
                              std::to_string(row.first_token) + ", expected " +
                              std::to_string(next) + ")");
    if (row.context_len < 0) return invalid_argument(where() + "negative context_len");
    next = row.first_token + row.num_tokens;
    if (next > batch.num_tokens()) return invalid_argument(where() + "span runs past the tokens");
    for (int32_t i = 0; i < row.num_tokens; ++i) {
      int32_t id = batch.token_ids[row.first_token + i];
      if (id < 0 || id >= vocab_size)
        return invalid_argument(where() + "token id " + std::to_string(id) +
                                " is outside the vocabulary of " + std::to_string(vocab_size));
      if (batch.positions[row.first_token + i] != row.context_len + i)
        return invalid_argument(where() + "position of token " + std::to_string(i) +
                                " must be context_len + " + std::to_string(i));
    }
    int64_t total = static_cast<int64_t>(row.context_len) + row.num_tokens;
    if (geom.has_recurrent_state()) {
      if (row.state == nullptr)
        return invalid_argument(where() + "the model keeps recurrent state but the row has none");
      if (row.state->length() != row.context_len)
        return invalid_argument(where() + "recurrent state holds " +
                                std::to_string(row.state->length()) +
                                " tokens but context_len is " + std::to_string(row.context_len));
    }
    if (batch.path == KVPath::kPaged) {
      if (batch.kv_store == nullptr)
        return invalid_argument("forward batch: paged without kv_store");
      // A kRecurrent group keeps no per-token KV: it needs no block table.
      size_t paged_groups = 0;
      for (size_t g = 0; g < geom.groups.size(); ++g)
        if (geom.groups[g].kind != CacheGroupKind::kRecurrent) paged_groups = g + 1;
      if (row.block_tables.size() < paged_groups)
        return invalid_argument(where() + "needs one block table per cache group");
      if (batch.kv_store->block_size() != geom.block_size || batch.kv_store->dtype() != geom.dtype)
        return invalid_argument("forward batch: kv_store block size/dtype differ from the model's");
      for (int32_t l = 0; l < geom.num_layers && r == 0; ++l)
        if (geom.group_of(l) >= 0 && batch.kv_store->layer_dtype(l) != geom.layer_dtype(l))
          return invalid_argument("forward batch: kv_store's dtype of layer " + std::to_string(l) +
                                  " differs from its cache group's");
      for (size_t g = 0; g < geom.groups.size(); ++g) {
        // A recurrent group keeps no per-token KV: its block table is unused.
        if (geom.groups[g].kind == CacheGroupKind::kRecurrent) continue;
        if (static_cast<int64_t>(row.block_tables[g].size()) * geom.block_size < total)
          return invalid_argument(where() + "block table of group " + std::to_string(g) +
                                  " covers fewer than " + std::to_string(total) + " tokens");
        const int64_t used = (total + geom.block_size - 1) / geom.block_size;
        // A sliding group's blocks wholly before the window of the span's first
        // query may be the null block 0 (freed; never read).
        int64_t first_live = 0;
        if (geom.groups[g].kind == CacheGroupKind::kSlidingWindow &&
            geom.groups[g].sliding_window > 0)
          first_live = std::max<int64_t>(0, row.context_len - geom.groups[g].sliding_window + 1) /
                       geom.block_size;
        for (int64_t i = 0; i < used; ++i) {
          int32_t id = row.block_tables[g][static_cast<size_t>(i)];
          if (i < first_live && id == 0) continue;
          if (id <= 0 || id >= batch.kv_store->num_blocks())
            return invalid_argument(where() + "block table entry " + std::to_string(i) + " = " +
                                    std::to_string(id) + " is not a block of the pool (1.." +
                                    std::to_string(batch.kv_store->num_blocks() - 1) + ")");
        }
      }
    } else {
      if (row.flat == nullptr) return invalid_argument(where() + "flat path without a FlatKVCache");
      if (row.flat->length() < row.context_len)
        return invalid_argument(where() + "flat cache holds " + std::to_string(row.flat->length()) +
                                " tokens but context_len is " + std::to_string(row.context_len));
    }
  }
  if (next != batch.num_tokens()) return invalid_argument("forward batch: tokens outside any row");
  return ok_status();
}

KVAccess::KVAccess(const ForwardBatch& batch, const KVGeometry& geom) : batch_(batch), geom_(geom) {
  token_bytes_.resize(static_cast<size_t>(geom.num_layers));
  for (int32_t l = 0; l < geom.num_layers; ++l)
    token_bytes_[static_cast<size_t>(l)] = geom.layer_token_bytes(l);
}

std::byte* KVAccess::k_base(size_t row, int32_t layer, int32_t tile) {
  const ForwardRow& r = batch_.rows[row];
  if (batch_.path == KVPath::kPaged) {
    int32_t g = geom_.layer_group.empty() ? 0 : geom_.layer_group[layer];
    return batch_.kv_store->k_block(layer, r.block_tables[g][tile]);
  }
  return r.flat->k(layer) + static_cast<size_t>(tile) * geom_.block_size * token_bytes_[layer];
}

std::byte* KVAccess::v_base(size_t row, int32_t layer, int32_t tile) {
  const ForwardRow& r = batch_.rows[row];
  if (batch_.path == KVPath::kPaged) {
    int32_t g = geom_.layer_group.empty() ? 0 : geom_.layer_group[layer];
    return batch_.kv_store->v_block(layer, r.block_tables[g][tile]);
  }
  return r.flat->v(layer) + static_cast<size_t>(tile) * geom_.block_size * token_bytes_[layer];
}

std::byte* KVAccess::k_slot(size_t row, int32_t layer, int32_t pos) {
  int32_t b = geom_.block_size;
  return k_base(row, layer, pos / b) + (pos % b) * token_bytes_[layer];
}

std::byte* KVAccess::v_slot(size_t row, int32_t layer, int32_t pos) {
  int32_t b = geom_.block_size;
  return v_base(row, layer, pos / b) + (pos % b) * token_bytes_[layer];
}

namespace {

void store_as(KVDType dtype, std::byte* dst, const float* src, int64_t n) {
  switch (dtype) {
    case KVDType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
      return;
    case KVDType::kBF16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_bf16(src[i]);
      return;
    }
    case KVDType::kF16: {
      uint16_t* d = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) d[i] = f32_to_f16(src[i]);
      return;
    }
  }
}

backend::WeightDType backend_kv_type(KVDType dtype) {
  switch (dtype) {
    case KVDType::kBF16:
      return backend::WeightDType::kBF16;
    case KVDType::kF16:
      return backend::WeightDType::kF16;
    default:
      return backend::WeightDType::kF32;
  }
}

}  // namespace

void KVAccess::store(int32_t layer, std::byte* dst, const float* src, int64_t n) const {
  store_as(geom_.layer_dtype(layer), dst, src, n);
}

backend::WeightDType KVAccess::element_type(int32_t layer) const {
  return backend_kv_type(geom_.layer_dtype(layer));
}

void KVAccess::tiles(size_t row, int32_t layer, int32_t num_tiles, std::vector<const float*>* k,
                     std::vector<const float*>* v) {
  k->resize(static_cast<size_t>(num_tiles));
  v->resize(static_cast<size_t>(num_tiles));
  for (int32_t t = 0; t < num_tiles; ++t) {
    (*k)[t] = reinterpret_cast<const float*>(k_base(row, layer, t));
    (*v)[t] = reinterpret_cast<const float*>(v_base(row, layer, t));
  }
}

StatusOr<AttentionWeights> load_attention_weights(const Checkpoint& ckpt, backend::Backend& be,
                                                  const std::string& a, int64_t NH, int64_t KVH,
                                                  int64_t D, int64_t H, bool bias,
                                                  const AttentionNames& names) {
  AttentionWeights w;
  PKV_ASSIGN_OR_RETURN(w.q, load_weight(ckpt, be, a + "q_proj.weight", {NH * D, H}));
  PKV_ASSIGN_OR_RETURN(w.k, load_weight(ckpt, be, a + "k_proj.weight", {KVH * D, H}));
  PKV_ASSIGN_OR_RETURN(w.v, load_weight(ckpt, be, a + "v_proj.weight", {KVH * D, H}));
  PKV_ASSIGN_OR_RETURN(w.o, load_weight(ckpt, be, a + names.o + ".weight", {H, NH * D}));
  if (!names.q_norm.empty()) {
    PKV_ASSIGN_OR_RETURN(w.q_norm, load_weight(ckpt, be, a + names.q_norm + ".weight", {D}));
    PKV_ASSIGN_OR_RETURN(w.k_norm, load_weight(ckpt, be, a + names.k_norm + ".weight", {D}));
  }
  if (bias) {
    PKV_ASSIGN_OR_RETURN(w.q_bias, load_weight(ckpt, be, a + "q_proj.bias", {NH * D}));
    PKV_ASSIGN_OR_RETURN(w.k_bias, load_weight(ckpt, be, a + "k_proj.bias", {KVH * D}));
    PKV_ASSIGN_OR_RETURN(w.v_bias, load_weight(ckpt, be, a + "v_proj.bias", {KVH * D}));
    PKV_ASSIGN_OR_RETURN(w.o_bias, load_optional_weight(ckpt, be, a + names.o + ".bias", {H}));
  }
  return w;
}

void KVAccess::tiles_from(size_t row, int32_t layer, int32_t first_tile, int32_t num_tiles,
                          std::vector<const float*>* k, std::vector<const float*>* v) {
  k->assign(static_cast<size_t>(num_tiles), nullptr);
  v->assign(static_cast<size_t>(num_tiles), nullptr);
  for (int32_t t = std::max(0, first_tile); t < num_tiles; ++t) {
    (*k)[t] = reinterpret_cast<const float*>(k_base(row, layer, t));
    (*v)[t] = reinterpret_cast<const float*>(v_base(row, layer, t));
  }
}

std::vector<int64_t> requested_logits_tokens(const ForwardBatch& batch, int32_t vocab_size,
                                             ForwardOutput* out) {
  std::vector<int64_t> pick;
  out->row_begin.clear();
  out->row_count.clear();
  for (const ForwardRow& row : batch.rows) {
    out->row_begin.push_back(static_cast<int32_t>(pick.size()));
    int32_t n = row.logits == LogitsRequest::kAll    ? row.num_tokens
                : row.logits == LogitsRequest::kLast ? 1
                                                     : 0;
    for (int32_t i = row.num_tokens - n; i < row.num_tokens; ++i)
      pick.push_back(row.first_token + i);
    out->row_count.push_back(n);
  }
  out->vocab_size = vocab_size;
  // Sized, not cleared: the LM head's matmul writes every element, and a caller
  // that reuses its ForwardOutput (the engine) pays no fill of n × vocab floats.
  out->logits.resize(pick.size() * static_cast<size_t>(vocab_size));
  return pick;
}

void attention_block(backend::Backend& be, const AttentionSpec& s, const AttentionWeights& w,
                     const ForwardBatch& batch, KVAccess& kv, const float* h, int64_t T,
                     float* out) {
  const int64_t qd = static_cast<int64_t>(s.num_heads) * s.head_dim;
  const int64_t kd = static_cast<int64_t>(s.num_kv_heads) * s.head_dim;
  ScratchBuffer q(kScratchQ, static_cast<size_t>(T * qd)),
      attn(kScratchAttn, static_cast<size_t>(T * qd));
  ScratchBuffer k(kScratchK, 0), v(kScratchV, 0);
  std::vector<float> tmp;
  // Gated attention: q_proj's rows are [query | gate] per head; split them apart.
  thread_local std::vector<float> gate;
  if (s.output_gate) {
    std::vector<float> qg(static_cast<size_t>(T * 2 * qd));
    be.matmul(h, T, *w.q, qg.data());
    add_bias(be, qg.data(), T, w.q_bias.get(), 2 * qd, tmp);
    gate.resize(static_cast<size_t>(T * qd));
    for (int64_t th = 0; th < T * s.num_heads; ++th) {
      const float* src = qg.data() + th * 2 * s.head_dim;
      std::memcpy(q.data() + th * s.head_dim, src, s.head_dim * sizeof(float));
      std::memcpy(gate.data() + th * s.head_dim, src + s.head_dim, s.head_dim * sizeof(float));
    }
  } else {
    be.matmul(h, T, *w.q, q.data());
    add_bias(be, q.data(), T, w.q_bias.get(), qd, tmp);
  }
  if (w.q_norm)
    be.rms_norm(q.data(), T * s.num_heads, *w.q_norm, s.rms_eps, s.qk_norm_one_plus, q.data());
  if (s.use_rope) be.rope(q.data(), T, s.num_heads, s.head_dim, batch.positions.data(), s.rope);
  const bool writes_kv = s.kv_layer == s.layer;
  if (writes_kv) {
    k.resize(static_cast<size_t>(T * kd));
    v.resize(static_cast<size_t>(T * kd));
    be.matmul(h, T, *w.k, k.data());
    add_bias(be, k.data(), T, w.k_bias.get(), kd, tmp);
    be.matmul(h, T, *w.v, v.data());
    add_bias(be, v.data(), T, w.v_bias.get(), kd, tmp);
    if (w.k_norm)
      be.rms_norm(k.data(), T * s.num_kv_heads, *w.k_norm, s.rms_eps, s.qk_norm_one_plus, k.data());
    if (s.use_rope)
      be.rope(k.data(), T, s.num_kv_heads, s.head_dim, batch.positions.data(), s.rope);
    // Write this step's K/V into every row's KV view (in its element type), before
    // any row attends.
    for (size_t r = 0; r < batch.rows.size(); ++r) {
      const ForwardRow& row = batch.rows[r];
      for (int32_t i = 0; i < row.num_tokens; ++i) {
        int64_t t = row.first_token + i;
        int32_t pos = batch.positions[t];
        kv.store(s.layer, kv.k_slot(r, s.layer, pos), k.data() + t * kd, kd);
        kv.store(s.layer, kv.v_slot(r, s.layer, pos), v.data() + t * kd, kd);
      }
    }
  }
  // Every row's attention in one backend call: the CPU backend runs all (row,
  // token, head) tasks as one parallel region; each task's bits are what the row
  // alone would get.
  const size_t R = batch.rows.size();
  std::vector<std::vector<const float*>> kt(R), vt(R);
  std::vector<backend::AttentionArgs> args(R);
  for (size_t r = 0; r < R; ++r) {
    const ForwardRow& row = batch.rows[r];
    int32_t last = row.context_len + row.num_tokens - 1;
    int32_t ntiles = last / kv.block_size() + 1;
    kv.tiles(r, s.kv_layer, ntiles, &kt[r], &vt[r]);
    backend::AttentionArgs& a = args[r];
    a.q = q.data() + row.first_token * qd;
    a.out = attn.data() + row.first_token * qd;
    a.num_tokens = row.num_tokens;
    a.num_heads = s.num_heads;
    a.num_kv_heads = s.num_kv_heads;
    a.head_dim = s.head_dim;
    a.positions = batch.positions.data() + row.first_token;
    a.scale = s.scale;
    a.tile = kv.block_size();
    a.k_tiles = kt[r].data();
    a.v_tiles = vt[r].data();
    a.num_tiles = ntiles;
    a.sliding_window = s.sliding_window;
    a.kv_dtype = kv.element_type(s.kv_layer);
  }
  be.attention_batch(args.data(), R);
  if (s.output_gate) {
    float* a = attn.data();
    for (int64_t i = 0; i < T * qd; ++i) a[i] *= 1.0f / (1.0f + std::exp(-gate[i]));
  }
  be.matmul(attn.data(), T, *w.o, out);
  add_bias(be, out, T, w.o_bias.get(), w.o->rows(), tmp);
}

void gated_mlp(backend::Backend& be, const MlpWeights& w, Activation act, const float* h, int64_t T,
               float* out) {
  if (w.gate == nullptr) return plain_mlp(be, w, act, h, T, out);
  int64_t inter = w.gate->rows();
  ScratchBuffer g(kScratchQ, static_cast<size_t>(T * inter)),
      u(kScratchK, static_cast<size_t>(T * inter));
  be.matmul(h, T, *w.gate, g.data());
  be.matmul(h, T, *w.up, u.data());
  if (act == Activation::kSilu) {
    be.silu_mul(g.data(), u.data(), T * inter, g.data());
  } else {
    be.gelu_tanh_mul(g.data(), u.data(), T * inter, g.data());
  }
  be.matmul(g.data(), T, *w.down, out);
}

void plain_mlp(backend::Backend& be, const MlpWeights& w, Activation act, const float* h, int64_t T,
               float* out) {
  const int64_t n = T * w.up->rows();
  ScratchBuffer u(kScratchK, static_cast<size_t>(n));
  be.matmul(h, T, *w.up, u.data());
  float* x = u.data();
  switch (act) {
    case Activation::kRelu2:
      for (int64_t i = 0; i < n; ++i) {
        float r = x[i] > 0.0f ? x[i] : 0.0f;
        x[i] = r * r;
      }
      break;
    case Activation::kSilu:
    case Activation::kGeluTanh: {
      // act(x) = act(x) · 1 through the backend's fused gate ops.
      ScratchBuffer ones(kScratchQ, static_cast<size_t>(n));
      std::fill(ones.data(), ones.data() + n, 1.0f);
      if (act == Activation::kSilu) {
        be.silu_mul(x, ones.data(), n, x);
      } else {
        be.gelu_tanh_mul(x, ones.data(), n, x);
      }
      break;
    }
  }
  be.matmul(x, T, *w.down, out);
}

// --- group-limited expert selection (nemotron_h n_group / topk_group) ---
// DeepSeek-V3 style: E experts in G equal groups; a group scores the sum of its
// two best selection scores (its one score when a group holds one expert); the
// topk_group best groups (ties → lower group id) stay eligible.
static void group_limit(const float* sel, int32_t E, int32_t G, int32_t topk_group,
                        char* eligible) {
  const int32_t per = E / G;
  std::vector<float> gscore(static_cast<size_t>(G));
  for (int32_t g = 0; g < G; ++g) {
    float a = -INFINITY, b = -INFINITY;
    for (int32_t e = g * per; e < (g + 1) * per; ++e) {
      if (sel[e] > a) {
        b = a;
        a = sel[e];
      } else if (sel[e] > b) {
        b = sel[e];
      }
    }
    gscore[g] = per >= 2 ? a + b : a;
  }
  std::vector<char> chosen(static_cast<size_t>(G), 0);
  for (int32_t r = 0; r < topk_group; ++r) {
    int32_t best = -1;
    for (int32_t g = 0; g < G; ++g)
      if (!chosen[g] && (best < 0 || gscore[g] > gscore[best])) best = g;
    chosen[best] = 1;
  }
  for (int32_t e = 0; e < E; ++e) eligible[e] = chosen[e / per];
}

void route_experts(backend::Backend& be, const MoeWeights& w, const float* logits, int64_t T,
                   int32_t* ids, float* weights) {
  const int32_t E = static_cast<int32_t>(w.experts.size());
  const int32_t K = w.top_k;
  const int32_t G = std::max(w.n_group, 1);
  PKV_CHECK_MSG(E % G == 0 && w.topk_group >= 1 && w.topk_group <= G && w.topk_group * (E / G) >= K,
                "group-limited routing needs n_group | experts and topk_group groups >= top_k");
  PKV_CHECK(w.selection_bias.empty() || static_cast<int32_t>(w.selection_bias.size()) == E);
  if (w.score == RouterScore::kSoftmax && w.selection_bias.empty() && w.norm_eps == 0.0f &&
      w.routed_scale == 1.0f && G == 1) {
    // qwen3_moe's router, unchanged.
    be.topk_route(logits, T, E, K, /*softmax_first=*/true, w.norm_topk_prob, ids, weights);
    return;
  }
  std::vector<float> score(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
  std::vector<char> eligible(static_cast<size_t>(E), 1);
  for (int64_t t = 0; t < T; ++t) {
    const float* l = logits + t * E;
    if (w.score == RouterScore::kSigmoid) {
      for (int32_t e = 0; e < E; ++e) score[e] = 1.0f / (1.0f + std::exp(-l[e]));
    } else {
      std::memcpy(score.data(), l, static_cast<size_t>(E) * sizeof(float));
      be.softmax(score.data(), 1, E);
    }
    for (int32_t e = 0; e < E; ++e)
      sel[e] = w.selection_bias.empty() ? score[e] : score[e] + w.selection_bias[e];
    if (G > 1) group_limit(sel.data(), E, G, w.topk_group, eligible.data());
    int32_t* id = ids + t * K;
    float* wt = weights + t * K;
    // Selection: k passes, each taking the highest remaining selection score;
    // strict > keeps the lower id on ties. A NaN score is never chosen over a number.
    for (int32_t r = 0; r < K; ++r) {
      int32_t best = -1;
      for (int32_t e = 0; e < E; ++e) {
        bool taken = false;
        for (int32_t q = 0; q < r; ++q) taken |= id[q] == e;
        if (taken || !eligible[e]) continue;
        if (best < 0 || sel[e] > sel[best] || (std::isnan(sel[best]) && !std::isnan(sel[e])))
          best = e;
      }
      id[r] = best;
      wt[r] = score[best];
    }
    if (w.norm_topk_prob) {
      float sum = 0.0f;
      for (int32_t r = 0; r < K; ++r) sum += wt[r];
      const float denom = sum + w.norm_eps;
      for (int32_t r = 0; r < K; ++r) wt[r] /= denom;
    }
    if (w.routed_scale != 1.0f)
      for (int32_t r = 0; r < K; ++r) wt[r] *= w.routed_scale;
  }
}

void residual_ffn(backend::Backend& be, const backend::Weight& norm, float eps, bool is_moe,
                  const MlpWeights& mlp, const MoeWeights& moe, float* x, float* h, float* y,
                  int64_t T, int64_t hidden) {
  be.rms_norm(x, T, norm, eps, false, h);
  if (is_moe) {
    moe_block(be, moe, h, T, hidden, y);
  } else {
    gated_mlp(be, mlp, Activation::kSilu, h, T, y);
  }
  be.add(x, y, T * hidden);
}

Status read_special_token_ids(const ConfigReader& c, const std::string& dir, ModelConfig* mc) {
  PKV_ASSIGN_OR_RETURN(auto eos, c.get_int_list_or_empty("eos_token_id"));
  for (int64_t e : eos) {
    if (e < 0 || e > INT32_MAX)
      return c.error("eos_token_id", "holds " + std::to_string(e) + ", not a token id");
    mc->eos_token_ids.push_back(static_cast<int32_t>(e));
  }
  PKV_RETURN_IF_ERROR(merge_generation_config_eos(dir, &mc->eos_token_ids));
  PKV_ASSIGN_OR_RETURN(int64_t v, c.get_int_or("bos_token_id", -1));
  if (v < -1 || v > INT32_MAX)
    return c.error("bos_token_id", "holds " + std::to_string(v) + ", not a token id");
  mc->bos_token_id = static_cast<int32_t>(v);
  return ok_status();
}

StatusOr<float> read_norm_eps(const ConfigReader& c, const std::string& field, double dflt) {
  PKV_ASSIGN_OR_RETURN(double eps, c.get_double_or(field, dflt));
  if (!(eps > 0.0 && eps <= 1.0) || !(static_cast<float>(eps) > 0.0f))
    return c.error(field, "must be in (0, 1] (and not 0 as a float), got " + std::to_string(eps));
  return static_cast<float>(eps);
}

void reserve_flat_rows(const ForwardBatch& batch) {
  if (batch.path != KVPath::kFlat) return;
  for (const ForwardRow& row : batch.rows) row.flat->reserve(row.context_len + row.num_tokens);
}

Status finish_forward(backend::Backend& be, const ForwardBatch& batch, const float* x, int64_t H,
                      const EmbeddingWeights& ends, float eps, int32_t vocab, ForwardOutput* out) {
  for (const ForwardRow& row : batch.rows) {
    if (batch.path == KVPath::kFlat) row.flat->set_length(row.context_len + row.num_tokens);
    if (row.state != nullptr) row.state->set_length(row.context_len + row.num_tokens);
  }
  return compute_logits(be, batch, x, H, *ends.final_norm, eps, false, *ends.lm_head, vocab, out);
}

StatusOr<std::vector<float>> load_host_vector(const Checkpoint& ckpt, const std::string& name,
                                              int64_t n) {
  PKV_ASSIGN_OR_RETURN(const TensorInfo* t, ckpt.require(name, {n}));
  return tensor_to_f32(*t);
}

void moe_block(backend::Backend& be, const MoeWeights& w, const float* h, int64_t T, int64_t hidden,
               float* out) {
  const int32_t E = static_cast<int32_t>(w.experts.size());
  const int32_t K = w.top_k;
  std::vector<float> logits(static_cast<size_t>(T * E));
  be.matmul(h, T, *w.router, logits.data());
  std::vector<int32_t> ids(static_cast<size_t>(T * K));
  std::vector<float> wts(static_cast<size_t>(T * K));
  route_experts(be, w, logits.data(), T, ids.data(), wts.data());
  moe_experts(be, w.experts, w.act, ids.data(), wts.data(), K, h, T, hidden, out);
}

// The experts run in parallel over Backend::parallel_for: each task computes
// whole experts (gated_mlp on the tokens routed to it; the backend ops inside a
// task run on that thread alone) and writes only its own slots of `results`.
// Every expert sees exactly the rows it saw when they ran one after another, the
// backend's matmul gives the same bits for any row count and thread count, and the
// per-token sum over ranks below keeps rank order — so neither the grouping nor
// the thread count changes a bit. Tasks are balanced by a fixed greedy
// (largest-first) assignment of experts to at most kMoeBuckets buckets, a function
// of the routing only.
namespace {
constexpr int64_t kMoeBuckets = 64;
// An expert's cost in "rows": its routed tokens plus a fixed part for streaming
// its weights once.
constexpr int64_t kMoeFixedRows = 4;

void run_expert(backend::Backend& be, const MlpWeights& expert, Activation act,
                const int64_t* slots, int64_t M, const float* wts, int32_t K, const float* h,
                int64_t hidden, float* results) {
  thread_local std::vector<float> xin, yout;
  xin.resize(static_cast<size_t>(M * hidden));
  yout.resize(static_cast<size_t>(M * hidden));
  for (int64_t i = 0; i < M; ++i)
    std::memcpy(xin.data() + i * hidden, h + (slots[i] / K) * hidden, hidden * sizeof(float));
  gated_mlp(be, expert, act, xin.data(), M, yout.data());
  for (int64_t i = 0; i < M; ++i) {
    const float wt = wts[slots[i]];
    float* dst = results + slots[i] * hidden;
    const float* src = yout.data() + i * hidden;
    for (int64_t d = 0; d < hidden; ++d) dst[d] = src[d] * wt;
  }
}
}  // namespace

void moe_experts(backend::Backend& be, const std::vector<MlpWeights>& experts, Activation act,
                 const int32_t* ids, const float* wts, int32_t K, const float* h, int64_t T,
                 int64_t hidden, float* out) {
  const int32_t E = static_cast<int32_t>(experts.size());
  // results[t][rank][hidden]; a slot routed to no valid expert stays zero.
  std::vector<float> results(static_cast<size_t>(T * K * hidden), 0.0f);
  // Slots (t * K + rank) grouped by expert, ascending within each expert.
  std::vector<int64_t> begin(static_cast<size_t>(E) + 1, 0), slots;
  for (int64_t s = 0; s < T * K; ++s)
    if (ids[s] >= 0 && ids[s] < E) ++begin[static_cast<size_t>(ids[s]) + 1];
  for (int32_t e = 0; e < E; ++e) begin[e + 1] += begin[e];
  slots.resize(static_cast<size_t>(begin[E]));
  {
    std::vector<int64_t> fill(begin.begin(), begin.end() - 1);
    for (int64_t s = 0; s < T * K; ++s)
      if (ids[s] >= 0 && ids[s] < E) slots[static_cast<size_t>(fill[ids[s]]++)] = s;
  }
  std::vector<int32_t> active;
  for (int32_t e = 0; e < E; ++e)
    if (begin[e + 1] > begin[e]) active.push_back(e);
  // Largest first (ties: lower id) into the least-loaded bucket (ties: lower index).
  std::stable_sort(active.begin(), active.end(), [&](int32_t a, int32_t b) {
    return begin[a + 1] - begin[a] > begin[b + 1] - begin[b];
  });
  const int64_t nb = std::min<int64_t>(static_cast<int64_t>(active.size()), kMoeBuckets);
  std::vector<std::vector<int32_t>> buckets(static_cast<size_t>(nb));
  std::vector<int64_t> load(static_cast<size_t>(nb), 0);
  for (int32_t e : active) {
    const size_t b = static_cast<size_t>(std::min_element(load.begin(), load.end()) - load.begin());
    buckets[b].push_back(e);
    load[b] += begin[e + 1] - begin[e] + kMoeFixedRows;
  }
  // Below ~a million multiply-adds in all, a parallel region costs more than it
  // saves: run the experts on the caller (each matmul may still use the pool).
  int64_t macs = 0;
  for (int32_t e : active) macs += (begin[e + 1] - begin[e]) * 3 * hidden * experts[e].up->rows();
  const int64_t grain = macs >= (int64_t{1} << 20) ? 1 : std::max<int64_t>(nb, 1);
  be.parallel_for(nb, grain, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b)
      for (int32_t e : buckets[static_cast<size_t>(b)])
        run_expert(be, experts[e], act, slots.data() + begin[e], begin[e + 1] - begin[e], wts, K, h,
                   hidden, results.data());
  });
  // out[t] = results[t][0] + results[t][1] + ... in rank order (one add per rank,
  // as Backend::add would).
  be.parallel_for(T, backend::grain_for_work(K * hidden), [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      float* o = out + t * hidden;
      const float* r0 = results.data() + (t * K) * hidden;
      std::memcpy(o, r0, hidden * sizeof(float));
      for (int32_t r = 1; r < K; ++r) {
        const float* src = r0 + r * hidden;
        for (int64_t d = 0; d < hidden; ++d) o[d] += src[d];
      }
    }
  });
}

void add_shared_expert(backend::Backend& be, const SharedExpertWeights& w, Activation act,
                       const float* h, int64_t T, int64_t hidden, float* out) {
  std::vector<float> y(static_cast<size_t>(T * hidden)), g(static_cast<size_t>(T));
  gated_mlp(be, w.mlp, act, h, T, y.data());
  be.matmul(h, T, *w.gate, g.data());
  for (int64_t t = 0; t < T; ++t) {
    const float s = 1.0f / (1.0f + std::exp(-g[t]));
    float* o = out + t * hidden;
    const float* yt = y.data() + t * hidden;
    for (int64_t d = 0; d < hidden; ++d) o[d] += s * yt[d];
  }
}

Status compute_logits(backend::Backend& be, const ForwardBatch& batch, const float* x,
                      int64_t hidden, const backend::Weight& final_norm, float eps, bool one_plus,
                      const backend::Weight& lm_head, int32_t vocab_size, ForwardOutput* out) {
  const std::vector<int64_t> pick = requested_logits_tokens(batch, vocab_size, out);
  const int64_t P = static_cast<int64_t>(pick.size());
  if (P == 0) return ok_status();
  std::vector<float> sel(static_cast<size_t>(P * hidden));
  for (int64_t i = 0; i < P; ++i)
    std::memcpy(sel.data() + i * hidden, x + pick[i] * hidden, hidden * sizeof(float));
  be.rms_norm(sel.data(), P, final_norm, eps, one_plus, sel.data());
  be.matmul(sel.data(), P, lm_head, out->logits.data());
  return check_logits_rows(be, *out);
}

}  // namespace pagedkv::model
