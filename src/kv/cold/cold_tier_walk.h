// ColdTierWalk: the two walks that connect a request's paged KV to the cold store.
//
// capture_chain (after a turn): walks the request's full blocks in order. A block
// already persisted (or pending in the writer queue) costs one in-memory index
// probe and no budget. Every other block is copied out of the pool, encoded and
// handed to the writer with enqueue_before(deadline) — waiting for a queue slot
// rather than treating a full queue as the end — within a budget of
// max_blocks written (PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN, 128) and max_walk
// (PAGEDKV_COLD_CAPTURE_BUDGET_MS, 250). It stops at the first block it fails to
// capture: restore stops at the first absent key, so a chain's reach is its first
// hole and skipping ahead would buy nothing. One trace line per turn reports
// blocks, stop reason and elapsed time.
//
// restore_extend (on a lookup, after the in-memory prefix hit): continues the
// chain from disk. It probes the index for the consecutive keys after the hit
// (stopping at the first absent one), then installs them through
// PagedKVCacheAdapter::install_restored_blocks: each object is read, verified
// (both checksums), checked against the expected key, parent key, fingerprint,
// geometry and token ids BEFORE its bytes are copied into the reserved block, and
// the run is published into the prefix table all-or-nothing. A block that fails
// verification is pruned by the store (one corruption) and the walk retries with
// the run cut just before it, so wrong KV is never handed to inference.
//
// Keys: cold keys (cold_key.h) chain from block 0 over the request's tokens with
// the request's extra keys (salt domain, adapter, media — taken from the adapter,
// so a salted request can never read or write default-domain objects) mixed into
// block 0, bound to the model fingerprint — a different model, dtype or block size
// never matches.
//
// Runs on the engine's step-loop thread (it reads the pool); the store's writer
// thread does the disk writes.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "kv/block_hasher.h"
#include "kv/cold/cold_key.h"
#include "kv/cold/cold_store.h"
#include "kv/cold/cold_tier.h"
#include "kv/layer_kv_pool.h"
#include "kv/paged_kv_cache_adapter.h"

namespace pagedkv::cold {

// What, beyond the pool geometry, identifies the model (ModelFingerprint fields).
struct ColdModelIdentity {
  std::string model_type;
  uint32_t sliding_window = 0;
  double rope_theta = 0.0;
  std::string rope_scaling;
  std::string weight_identity;
  // Where the K/V were computed when not on the CPU ("cuda"): a GPU's bits are not
  // the CPU's, so its objects get their own fingerprint (cache_layout names it).
  // Empty for the CPU.
  std::string device;
  // What else decides the K/V's bits (Model::kv_numerics: the backend's kernels'
  // numerics version and libraries, a device model's attention kernel); appended
  // to cache_layout in parentheses when not empty.
  std::string numerics;
};

ModelFingerprint fingerprint_for(const ColdModelIdentity& id, const kv::KVGeometry& geometry);

// The blocks a capture walk left when its step-thread budget ran out, with all a
// continuation needs to encode them away from the adapter: the pool generation
// they are read from (kept alive by this shared_ptr even if the pool grows), each
// block's id, key, parent key, index and tokens. The CALLER keeps every block
// pinned (ref >= 1, so it is neither evicted nor rewritten; a full published
// block's bytes never change) until continue_capture returns.
struct CaptureContinuation {
  std::shared_ptr<const kv::PoolGeneration> generation;
  std::vector<kv::BlockId> blocks;
  std::vector<ColdKey> keys;
  std::vector<ColdKey> parents;
  std::vector<uint64_t> indices;
  std::vector<int32_t> tokens;  // block_size per block, back to back
  bool empty() const { return blocks.empty(); }
};

struct CaptureResult {
  int32_t full_blocks = 0;        // full blocks of the request
  int32_t walked = 0;             // blocks the walk got past (persisted or captured)
  int32_t already_persisted = 0;  // ... of which were an index hit
  int32_t enqueued = 0;           // ... of which were written this turn
  std::string stop;  // complete | blocks | deadline | queue | encode | no_pool | continued
  double elapsed_ms = 0.0;
  // "cold_capture_walk blocks=<walked>/<full> persisted=... enqueued=... stop=... elapsed_ms=..."
  std::string trace_line() const;
};

struct RestoreResult {
  int32_t hot_blocks = 0;  // blocks the in-memory prefix already held
  int32_t candidates = 0;  // consecutive keys present in the index after them
  int32_t restored = 0;    // blocks installed and published from disk
  std::string stop;        // absent | limit | corrupt | declined | none
};

class ColdTierWalk {
 public:
  ColdTierWalk(ColdStore* store, ModelFingerprint fingerprint,
               ColdCaptureBudget budget = resolve_capture_budget());

  const ModelFingerprint& fingerprint() const { return fingerprint_; }

  // See the file comment. Block 0's extra keys are the adapter's
  // (PagedKVCacheAdapter::extra_keys(), set by reset_for_new_request): there is no
  // separate argument that could disagree with the hot prefix table.
  //
  // With `rest` (and `rest_limit` > 0), a walk that stops on its block or time
  // budget (or a full queue) does not end there: it hands up to `rest_limit` of
  // the remaining unpersisted blocks to *rest (stop = "continued"), for
  // continue_capture on another thread. The step thread's share stays bounded by
  // the budget, and every full block can become restorable after one turn.
  CaptureResult capture_chain(kv::PagedKVCacheAdapter& adapter, CaptureContinuation* rest = nullptr,
                              int32_t rest_limit = 0);
  // Encodes and enqueues a continuation's blocks (any thread; waits for writer
  // queue slots). Stops early when *cancel becomes true. Returns blocks enqueued.
  int32_t continue_capture(const CaptureContinuation& rest, const std::atomic<bool>* cancel);
  // Call right after adapter.find_cached_prefix(prompt). Returns what was restored;
  // the adapter's num_tokens() grows by restored × block_size.
  RestoreResult restore_extend(kv::PagedKVCacheAdapter& adapter, std::span<const int32_t> prompt);

 private:
  ColdStore* store_;
  ModelFingerprint fingerprint_;
  Digest256 fingerprint_digest_;
  ColdGeometry geometry_;
  ColdCaptureBudget budget_;

  ColdObjectHeader header_for(const ColdKey& key, const ColdKey& parent, uint64_t index,
                              std::span<const int32_t> tokens) const;
};

}  // namespace pagedkv::cold
