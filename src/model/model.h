// The abstract Model every family implements, the KV geometry it declares to the
// engine, and load_model(): a Hugging Face checkpoint directory → a ready Model.
//
// A Model is stateless between forward() calls apart from its weights: every
// request's state lives in the KV views (block tables + KVBlockStore, or a
// FlatKVCache) that the engine passes in each ForwardBatch. One Model object is
// driven by one thread (the engine's step loop); its kernels may fan out to the
// backend's worker threads internally without changing any result.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kv/kv_storage.h"
#include "model/forward_batch.h"
#include "pagedkv/status.h"

namespace pagedkv::backend {
class Backend;
}

namespace pagedkv::model {

// What kind of KV a cache group holds.
enum class CacheGroupKind : uint8_t {
  kFullAttention = 0,  // every position kept
  kSlidingWindow = 1,  // only the last `sliding_window` positions attended
  kRecurrent = 2,      // fixed-size state per request (no per-token KV)
};

struct CacheGroup {
  CacheGroupKind kind = CacheGroupKind::kFullAttention;
  int32_t sliding_window = 0;  // kSlidingWindow only
};

// A cache group's own K/V row shape where it differs from the geometry's
// default (gemma4_text full-attention layers: global_head_dim,
// num_global_key_value_heads); 0 / unset fields = KVGeometry::num_kv_heads,
// head_dim, dtype. Every layer of a group has its group's shape, and so has
// each block of the group's pool.
struct GroupKVShape {
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  std::optional<KVDType> dtype;
};

// The shape of the KV the model needs. Attention layers store per token
// num_kv_heads * head_dim elements of K and of V — the geometry's default shape,
// which a cache group may override (CacheGroup); use the group_* / layer_*
// accessors, which resolve the override.
struct KVGeometry {
  int32_t num_layers = 0;  // all decoder layers
  int32_t num_kv_heads = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;  // paged block size; the flat path uses it as its tile
  KVDType dtype = KVDType::kF32;
  std::vector<CacheGroup> groups;  // cache groups (qwen3: one full-attention group)
  // Per group (index = group) its own row shape, or empty: every group has the
  // default shape. Read through group_kv_heads / group_head_dim / group_dtype.
  std::vector<GroupKVShape> group_shapes;
  std::vector<int32_t> layer_group;  // per layer: its group, or -1 (no KV)
  // Per layer: the layer whose KV it reads instead of its own (KV-shared layers),
  // or -1. All -1 for qwen3.
  std::vector<int32_t> layer_kv_source;
  // Per layer: floats of recurrent state (recurrent_state.h) the layer keeps per
  // request, 0 for a layer without. Empty for pure-attention models.
  std::vector<int64_t> layer_state_floats;

  bool has_recurrent_state() const {
    for (int64_t n : layer_state_floats)
      if (n > 0) return true;
    return false;
  }

  // The default shape's K and V of one token in one layer (the whole story when
  // no group overrides it: uniform_kv_shape()).
  size_t bytes_per_token_per_layer() const {
    return 2u * static_cast<size_t>(num_kv_heads) * head_dim * kv_dtype_size(dtype);
  }

  // --- per cache group / per layer shapes (a group's override, else the default) ---
  int32_t group_kv_heads(size_t g) const {
    return g < group_shapes.size() && group_shapes[g].num_kv_heads > 0
               ? group_shapes[g].num_kv_heads
               : num_kv_heads;
  }
  int32_t group_head_dim(size_t g) const {
    return g < group_shapes.size() && group_shapes[g].head_dim > 0 ? group_shapes[g].head_dim
                                                                   : head_dim;
  }
  KVDType group_dtype(size_t g) const {
    return g < group_shapes.size() ? group_shapes[g].dtype.value_or(dtype) : dtype;
  }
  // One token's K (or V) in one layer of group g, in bytes.
  size_t group_token_bytes(size_t g) const {
    return static_cast<size_t>(group_kv_heads(g)) * group_head_dim(g) *
           kv_dtype_size(group_dtype(g));
  }
  // The group of `layer` (0 when layer_group is empty), or -1.
  int32_t group_of(int32_t layer) const {
    return layer_group.empty() ? 0 : layer_group[static_cast<size_t>(layer)];
  }
  // Layer-level views (a layer without a group has the default shape).
  KVDType layer_dtype(int32_t layer) const {
    const int32_t g = group_of(layer);
    return g >= 0 && static_cast<size_t>(g) < groups.size() ? group_dtype(g) : dtype;
  }
  size_t layer_token_bytes(int32_t layer) const {
    const int32_t g = group_of(layer);
    return g >= 0 && static_cast<size_t>(g) < groups.size()
               ? group_token_bytes(g)
               : static_cast<size_t>(num_kv_heads) * head_dim * kv_dtype_size(dtype);
  }
  // True when no group overrides the default shape (one K/V row shape for all).
  bool uniform_kv_shape() const {
    for (size_t g = 0; g < groups.size(); ++g)
      if (group_kv_heads(g) != num_kv_heads || group_head_dim(g) != head_dim ||
          group_dtype(g) != dtype)
        return false;
    return true;
  }
};

// The paged-cache fields a checkpoint's config.json may carry (names as the
// reference spells them); unset fields leave the decision to env/defaults.
struct CacheConfig {
  std::optional<bool> use_block_paged_cache;
  std::optional<uint64_t> paged_cache_memory_mb;
  std::optional<uint64_t> paged_cache_initial_memory_mb;
  std::optional<int64_t> paged_block_size;
};

// use_block_paged_cache: env PAGEDKV_USE_BLOCK_PAGED_CACHE > config > true.
bool resolve_use_block_paged_cache(const CacheConfig& c);

// Fields every family has (parsed from config.json).
struct ModelConfig {
  std::string model_type;
  std::string source_path;  // the checkpoint directory
  int32_t vocab_size = 0;
  int32_t hidden_size = 0;
  int32_t num_hidden_layers = 0;
  int32_t num_attention_heads = 0;
  int32_t num_key_value_heads = 0;
  int32_t head_dim = 0;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  std::vector<int32_t> eos_token_ids;  // from config.json / generation_config.json
  int32_t bos_token_id = -1;
  CacheConfig cache;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const KVGeometry& kv_geometry() const = 0;

  // Runs one step (forward_batch.h): writes the K/V of every token of every row
  // into the row's KV view and fills `out` with the requested logits. Errors
  // (a malformed batch: spans out of range, a block table too short, a token id
  // outside the vocabulary) are InvalidArgument and leave `out` unspecified.
  virtual Status forward(const ForwardBatch& batch, ForwardOutput* out) = 0;

  // Where the paged KV pool's bytes must live for forward() to reach them:
  // nullptr = host memory (every CPU model). A device model (src/model/cuda/)
  // returns its device storage, and the engine builds the pool on it
  // (engine/kv_cache_factory.h).
  virtual std::shared_ptr<kv::KVStorage> kv_storage() const { return nullptr; }

  // True when forward() honours ForwardRow::greedy_only: it picks those rows'
  // greedy tokens itself (on its device) into ForwardOutput::tokens, and the
  // logits rows need not come back to the host. false for every CPU model.
  virtual bool samples_greedy() const { return false; }

  // > 0 when forward() honours ForwardRow::draw: it computes the best entries of
  // those rows (at most this many) on its device and finishes the draw through
  // RowDraw::draw. 0 for every CPU model.
  virtual int32_t draw_entries_cap() const { return 0; }

  // Names the arithmetic behind the K/V this model writes when it is more than its
  // weights say: its backend's numerics (Backend::numerics: the kernels' version,
  // the C library, a compiler and GPU architecture) and, for a device model, its
  // attention kernel (each has its own fixed order, so the K/V of later layers
  // differ between kernels). The cold tier's fingerprint includes it, so objects
  // written under one are never read under another. The CPU families return their
  // backend's (the same on every ISA and thread count: docs/backend.md).
  virtual std::string kv_numerics() const { return {}; }
};

struct LoadOptions {
  // The KV element type. nullopt: env PAGEDKV_KV_DTYPE, else the device's default
  // (f32 for load_model on the CPU, bf16 for model::cuda::load_cuda_model). A value
  // set here is the caller's explicit choice and wins over the env var.
  std::optional<KVDType> kv_dtype;
  // Paged block size (= the attention tile of both paths). 0: env
  // PAGEDKV_PAGED_BLOCK_SIZE > config.json paged_block_size > 16.
  int32_t block_size = 0;
  // The backend to run on; nullptr = the process-wide CPU backend.
  backend::Backend* backend = nullptr;
};

// Loads `dir` (config.json + model.safetensors or model.safetensors.index.json).
// Bad input (unknown model_type, missing/ill-typed field, a tensor missing or
// shaped wrong for the config) is InvalidArgument naming the field/tensor and file.
StatusOr<std::unique_ptr<Model>> load_model(const std::string& dir,
                                            const LoadOptions& options = {});

// The KV element type a load with `options` uses: options.kv_dtype when set, else
// env PAGEDKV_KV_DTYPE (InvalidArgument naming it for an unknown name), else
// `device_default`.
StatusOr<KVDType> resolve_kv_dtype(const LoadOptions& options, KVDType device_default);

}  // namespace pagedkv::model
