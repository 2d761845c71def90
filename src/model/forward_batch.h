// The forward batch: the engine's contract with a model (DESIGN.md, "The forward
// batch"). One engine step hands the model ONE flattened batch and gets back the
// logits it asked for. Prefill chunks and decode rows share the same batch.
//
//   token_ids   t0 t1 t2 t3 t4 | t5 | t6 t7          (every scheduled row back to back)
//   positions   0  1  2  3  4  | 37 | 16 17          (each token's absolute position)
//   rows        {0,5,ctx 0}      {5,1,ctx 37} {6,2,ctx 16}
//
// A row is one request's span of query tokens in this step: `first_token` and
// `num_tokens` index into token_ids/positions; `context_len` tokens of that request
// are already in its KV cache (written by earlier steps or shared from the prefix
// cache). The model writes the K/V of every token of the span into the row's KV view
// (so after forward() the request's KV holds context_len + num_tokens tokens; the
// engine then calls PagedKVCacheAdapter::record_tokens), and attends every query
// token at position p to keys 0..p of its own row only.
//
// KV views. Paged: per row one block table per cache group (the model's
// KVGeometry declares the groups and which layer uses which); token position p
// lives in block block_tables[g][p / block_size] at row p % block_size; the
// physical bytes are reached through the batch's KVBlockStore (implemented over
// kv::LayerKVPool on CPU, over device memory by a CUDA backend, which copies block
// tables and positions to the device once per step). Flat: a per-request
// FlatKVCache (flat_kv_cache.h) with one contiguous buffer per layer. The two paths
// differ only in addressing: attention visits keys in tiles of block_size in
// position order either way, so their logits are bit-identical
// (DESIGN.md, "caching never changes an answer").
//
// Results never depend on what else is in the batch: a row's logits are the same
// bits whether it runs alone or with 63 others, whole or in chunks of any size.
//
// Ownership: the batch only borrows (spans/pointers); everything it points at must
// outlive the forward() call. The engine's step thread owns all of it; forward()
// is not reentrant for one Model object.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kv/kv_dtype.h"
#include "model/row_draw.h"

namespace pagedkv::model {

class FlatKVCache;
class RecurrentState;

// Element type of stored K/V: the KV cache's own enum (f32 | bf16 | f16).
using KVDType = kv::KVDType;
using kv::kv_dtype_size;

// Which logits a row wants back.
enum class LogitsRequest : uint8_t {
  kNone = 0,  // a prefill chunk that is not the last: KV only
  kLast = 1,  // only the span's last position (sampling)
  kAll = 2,   // every position of the span (`pagedkv logits`, prompt logprobs)
};

// Which KV addressing this batch uses. All rows of one batch use the same path.
enum class KVPath : uint8_t { kPaged = 0, kFlat = 1 };

// Physical paged KV storage as the model sees it. `layer` is the model's global
// layer index (the store maps it to its cache group's pool). Each block holds
// [block_size][num_kv_heads][head_dim] elements of K (resp. V) of the layer's
// dtype, contiguous, in the shape of the layer's cache group
// (KVGeometry::layer_token_bytes). Pointers stay valid for the duration of one
// forward() call (a pool may move its storage when it grows between steps).
class KVBlockStore {
 public:
  virtual ~KVBlockStore() = default;
  virtual int32_t block_size() const = 0;
  virtual KVDType dtype() const = 0;
  // The element type of `layer`'s blocks (its group's pool); dtype() unless a
  // store holds groups of different dtypes.
  virtual KVDType layer_dtype(int32_t /*layer*/) const { return dtype(); }
  // Valid block ids are [1, num_blocks()) (0 is the null block).
  virtual int32_t num_blocks() const = 0;
  virtual std::byte* k_block(int32_t layer, int32_t block) = 0;
  virtual std::byte* v_block(int32_t layer, int32_t block) = 0;
};

// One request's slice of the batch.
struct ForwardRow {
  int32_t first_token = 0;  // index of the span's first token in ForwardBatch::token_ids
  int32_t num_tokens = 0;   // query tokens in this step (>= 1)
  int32_t context_len = 0;  // tokens already in this request's KV before the span
  LogitsRequest logits = LogitsRequest::kLast;

  // Paged path: block_tables[g] is cache group g's block table (physical block ids)
  // covering at least context_len + num_tokens tokens. Size = number of groups the
  // model's KVGeometry declares (1 for qwen3/qwen3_moe).
  std::vector<std::span<const int32_t>> block_tables;

  // Flat path: this request's contiguous cache (grown by the model as needed).
  FlatKVCache* flat = nullptr;

  // Hybrid families (short conv, Gated DeltaNet, Mamba-2), both paths: this
  // request's recurrent state (recurrent_state.h), holding exactly context_len
  // consumed tokens; the model advances it. nullptr for pure-attention models.
  RecurrentState* state = nullptr;

  // A kLast row whose caller needs only the greedy token of that logits row
  // (engine::argmax's rule: the largest, ties → the lowest id, NaN skipped). A
  // model that samples on its device (Model::samples_greedy()) returns the token
  // in ForwardOutput::tokens and need not fill the row's logits; other models
  // ignore the flag and the caller samples from the logits as always.
  bool greedy_only = false;

  // A kLast row whose caller needs only a seeded draw from that logits row (no
  // logits): a model with Model::draw_entries_cap() > 0 may compute the row's best
  // draw->entries() entries on its device and call draw->draw() on the host; a
  // token >= 0 goes to ForwardOutput::tokens and the logits row need not be
  // filled; -1 (the draw needs more entries) and the model fills the row as usual.
  // Other models ignore it and the caller samples from the logits as always.
  const RowDraw* draw = nullptr;
};

struct ForwardBatch {
  KVPath path = KVPath::kPaged;
  std::vector<int32_t> token_ids;  // all rows' spans back to back
  std::vector<int32_t> positions;  // absolute position of each token (same length)
  std::vector<ForwardRow> rows;
  KVBlockStore* kv_store = nullptr;  // required when path == kPaged

  // Appends a row whose tokens are `tokens` at positions context_len, context_len+1, ...
  // and returns it so the caller can attach its KV view.
  ForwardRow& add_row(std::span<const int32_t> tokens, int32_t context_len, LogitsRequest logits);
  int32_t num_tokens() const { return static_cast<int32_t>(token_ids.size()); }
};

// What forward() returns: logits rows, in row order, for exactly the positions the
// rows asked for (kLast: 1, kAll: num_tokens, kNone: 0).
struct ForwardOutput {
  int32_t vocab_size = 0;
  std::vector<float> logits;       // [total logits rows][vocab_size]
  std::vector<int32_t> row_begin;  // per batch row: its first logits row
  std::vector<int32_t> row_count;  // per batch row: how many logits rows
  // Per batch row: the greedy token a device-sampling model picked for a
  // greedy_only row, or the token of a row's RowDraw, or -1 (then the caller
  // samples from the logits). Empty from models that do not sample
  // (Model::samples_greedy() false, Model::draw_entries_cap() 0).
  std::vector<int32_t> tokens;

  // Logits row `i` of batch row `row` (i counts within the row's requested rows).
  std::span<const float> row_logits(size_t row, int32_t i = 0) const {
    size_t r = static_cast<size_t>(row_begin[row] + i);
    return {logits.data() + r * static_cast<size_t>(vocab_size), static_cast<size_t>(vocab_size)};
  }
  // For kLast rows: the single logits row.
  std::span<const float> last_logits(size_t row) const {
    return row_logits(row, row_count[row] - 1);
  }
};

}  // namespace pagedkv::model
