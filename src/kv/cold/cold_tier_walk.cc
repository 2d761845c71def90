// ColdTierWalk: capture_chain and restore_extend (see the header).
#include "kv/cold/cold_tier_walk.h"

#include <algorithm>
#include <cstring>
#include <sstream>

#include "util/logging.h"

namespace pagedkv::cold {
namespace {

ColdDType cold_dtype(kv::KVDType d) {
  switch (d) {
    case kv::KVDType::kF32:
      return ColdDType::kF32;
    case kv::KVDType::kBF16:
      return ColdDType::kBF16;
    case kv::KVDType::kF16:
      return ColdDType::kF16;
  }
  return ColdDType::kF32;
}

}  // namespace

ModelFingerprint fingerprint_for(const ColdModelIdentity& id, const kv::KVGeometry& g) {
  ModelFingerprint fp;
  fp.model_type = id.model_type;
  fp.num_layers = static_cast<uint32_t>(g.num_layers);
  fp.num_kv_heads = static_cast<uint32_t>(g.num_kv_heads);
  fp.head_dim = static_cast<uint32_t>(g.head_dim);
  fp.v_head_dim = static_cast<uint32_t>(g.head_dim);
  fp.sliding_window = id.sliding_window;
  fp.rope_theta = id.rope_theta;
  fp.rope_scaling = id.rope_scaling;
  fp.weight_identity = id.weight_identity;
  fp.dtype = cold_dtype(g.dtype);
  fp.block_size = static_cast<uint32_t>(g.block_size);
  fp.cache_layout = "LayerKVPool/v1 per-layer K then V, [block_size][num_kv_heads][head_dim]";
  if (!id.device.empty()) fp.cache_layout += ", computed on " + id.device;
  if (!id.numerics.empty()) fp.cache_layout += " (" + id.numerics + ")";
  return fp;
}

std::string CaptureResult::trace_line() const {
  std::ostringstream o;
  o << "cold_capture_walk blocks=" << walked << "/" << full_blocks
    << " persisted=" << already_persisted << " enqueued=" << enqueued << " stop=" << stop
    << " elapsed_ms=" << elapsed_ms;
  return o.str();
}

ColdTierWalk::ColdTierWalk(ColdStore* store, ModelFingerprint fingerprint, ColdCaptureBudget budget)
    : store_(store),
      fingerprint_(std::move(fingerprint)),
      fingerprint_digest_(fingerprint_.digest()),
      geometry_(ColdGeometry::from(fingerprint_)),
      budget_(budget) {}

ColdObjectHeader ColdTierWalk::header_for(const ColdKey& key, const ColdKey& parent, uint64_t index,
                                          std::span<const int32_t> tokens) const {
  ColdObjectHeader meta;
  meta.group = ColdGroup::kFullAttention;
  meta.fingerprint = fingerprint_digest_;
  meta.key = key;
  meta.parent_key = parent;
  meta.block_index = index;
  meta.geometry = geometry_;
  meta.tokens.assign(tokens.begin(), tokens.end());
  return meta;
}

namespace {

// One block's object bytes, its K/V copied out of `gen` (per layer: K then V).
template <typename Gen>
StatusOr<std::vector<uint8_t>> encode_block(const ColdObjectHeader& meta, Gen& gen,
                                            kv::BlockId block, uint32_t num_layers,
                                            size_t per_layer) {
  // Through read_block, so a device pool's bytes come to the host too.
  Status read = ok_status();
  auto bytes = encode_object(meta, [&](std::span<uint8_t> out) {
    for (uint32_t l = 0; l < num_layers && read.ok(); ++l) {
      read =
          gen.read_block(static_cast<int32_t>(l), block, false, out.data() + (2 * l) * per_layer);
      if (read.ok())
        read = gen.read_block(static_cast<int32_t>(l), block, true,
                              out.data() + (2 * l + 1) * per_layer);
    }
  });
  if (!read.ok()) return read;
  return bytes;
}

}  // namespace

CaptureResult ColdTierWalk::capture_chain(kv::PagedKVCacheAdapter& adapter,
                                          CaptureContinuation* rest, int32_t rest_limit) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto deadline = t0 + budget_.max_walk;
  CaptureResult r;
  r.full_blocks = adapter.num_full_blocks();
  kv::LayerKVPool* pool = adapter.cache().pool();
  const auto finish = [&](const char* stop) {
    r.stop = stop;
    r.elapsed_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    if (r.stop == "deadline") {
      PKV_LOG(kWarn) << "[trace] paged " << r.trace_line()
                     << " (the disk could not absorb the capture budget)";
    } else {
      PKV_LOG(kDebug) << "[trace] paged " << r.trace_line();
    }
    return r;
  };
  if (pool == nullptr) return finish("no_pool");
  const std::span<const ExtraKey> cold_extras = adapter.extra_keys();
  const uint32_t b = fingerprint_.block_size;
  const auto tokens = adapter.tokens();
  const auto table = adapter.block_table();
  const size_t per_layer = pool->block_bytes_per_layer();
  ColdKey parent = root_parent_key();
  const char* stopped = nullptr;  // the budget ran out at block i
  for (int32_t i = 0; i < r.full_blocks; ++i) {
    const auto toks = tokens.subspan(static_cast<size_t>(i) * b, b);
    const ColdKey key = derive_cold_key(ColdGroup::kFullAttention, fingerprint_digest_, parent,
                                        static_cast<uint64_t>(i), toks,
                                        i == 0 ? cold_extras : std::span<const ExtraKey>());
    if (store_->contains_or_pending(key)) {  // an index probe, no budget
      if (stopped == nullptr) {
        ++r.already_persisted;
        ++r.walked;
      }
      parent = key;
      continue;
    }
    if (stopped == nullptr) {
      if (static_cast<uint64_t>(r.enqueued) >= budget_.max_blocks) {
        stopped = "blocks";
      } else if (std::chrono::steady_clock::now() >= deadline) {
        stopped = "deadline";
      }
    }
    if (stopped == nullptr) {
      const kv::BlockId block = table[static_cast<size_t>(i)];
      auto bytes = encode_block(header_for(key, parent, static_cast<uint64_t>(i), toks), *pool,
                                block, fingerprint_.num_layers, per_layer);
      if (!bytes.ok()) return finish("encode");
      auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(bytes).value());
      if (store_->enqueue_before(key, std::move(shared), deadline)) {
        ++r.enqueued;
        ++r.walked;
        parent = key;
        continue;
      }
      stopped = "queue";
    }
    // Past the step thread's budget: the rest goes to the continuation.
    if (rest == nullptr || static_cast<int32_t>(rest->blocks.size()) >= rest_limit) break;
    if (rest->generation == nullptr) rest->generation = pool->generation();
    rest->blocks.push_back(table[static_cast<size_t>(i)]);
    rest->keys.push_back(key);
    rest->parents.push_back(parent);
    rest->indices.push_back(static_cast<uint64_t>(i));
    rest->tokens.insert(rest->tokens.end(), toks.begin(), toks.end());
    parent = key;
  }
  if (stopped == nullptr) return finish("complete");
  if (rest != nullptr && !rest->empty()) return finish("continued");
  return finish(stopped);
}

int32_t ColdTierWalk::continue_capture(const CaptureContinuation& rest,
                                       const std::atomic<bool>* cancel) {
  if (rest.empty() || rest.generation == nullptr) return 0;
  const kv::PoolGeneration& gen = *rest.generation;
  const uint32_t b = fingerprint_.block_size;
  const size_t per_layer = gen.geometry().block_bytes_per_layer();
  int32_t enqueued = 0;
  for (size_t i = 0; i < rest.blocks.size(); ++i) {
    if (cancel != nullptr && cancel->load(std::memory_order_acquire)) break;
    if (store_->contains_or_pending(rest.keys[i])) continue;
    const std::span<const int32_t> toks(rest.tokens.data() + i * b, b);
    auto bytes = encode_block(header_for(rest.keys[i], rest.parents[i], rest.indices[i], toks), gen,
                              rest.blocks[i], fingerprint_.num_layers, per_layer);
    if (!bytes.ok()) break;
    auto shared = std::make_shared<const std::vector<uint8_t>>(std::move(bytes).value());
    // Waits for a writer slot: this thread may wait on the disk, the step thread
    // never does. A disk that frees no slot in 2 s ends the continuation (one drop).
    if (!store_->enqueue_before(rest.keys[i], std::move(shared),
                                std::chrono::steady_clock::now() + std::chrono::seconds(2)))
      break;
    ++enqueued;
  }
  return enqueued;
}

RestoreResult ColdTierWalk::restore_extend(kv::PagedKVCacheAdapter& adapter,
                                           std::span<const int32_t> prompt) {
  RestoreResult r;
  const int64_t b = fingerprint_.block_size;
  kv::LayerKVPool* pool = adapter.cache().pool();
  if (pool == nullptr || adapter.cache().block_size() != b || adapter.num_tokens() % b != 0 ||
      prompt.empty()) {
    r.stop = "none";
    return r;
  }
  r.hot_blocks = static_cast<int32_t>(adapter.num_tokens() / b);
  const int64_t limit = (static_cast<int64_t>(prompt.size()) - 1) / b;
  const std::span<const ExtraKey> cold_extras = adapter.extra_keys();
  // Keys for blocks [0, limit): the chain starts at block 0.
  std::vector<ColdKey> keys;
  keys.reserve(static_cast<size_t>(limit));
  ColdKey parent = root_parent_key();
  r.stop = "limit";
  for (int64_t i = 0; i < limit; ++i) {
    parent = derive_cold_key(ColdGroup::kFullAttention, fingerprint_digest_, parent,
                             static_cast<uint64_t>(i),
                             prompt.subspan(static_cast<size_t>(i * b), static_cast<size_t>(b)),
                             i == 0 ? cold_extras : std::span<const ExtraKey>());
    keys.push_back(parent);
    if (i >= r.hot_blocks) {
      if (!store_->contains(parent)) {
        r.stop = "absent";
        break;
      }
      ++r.candidates;
    }
  }
  int32_t n = r.candidates;
  const size_t per_layer = pool->block_bytes_per_layer();
  int32_t counted_upto = r.hot_blocks;  // blocks [hot, counted_upto) already counted as hits
  while (n > 0) {
    int32_t failed = -1;
    auto fill = [&](int32_t index, kv::BlockId block) -> Status {
      ColdExpectation e;
      e.key = keys[static_cast<size_t>(index)];
      e.fingerprint = fingerprint_digest_;
      e.group = ColdGroup::kFullAttention;
      e.geometry = &geometry_;
      e.tokens = prompt.subspan(static_cast<size_t>(index * b), static_cast<size_t>(b));
      const ColdKey parent_key =
          index == 0 ? root_parent_key() : keys[static_cast<size_t>(index) - 1];
      e.parent_key = &parent_key;
      PKV_ASSIGN_OR_RETURN(ColdReadResult got, store_->read(e, index >= counted_upto));
      counted_upto = std::max(counted_upto, index + 1);
      const uint8_t* src = got.object.payload.data();
      for (uint32_t l = 0; l < fingerprint_.num_layers; ++l) {  // host or device pool
        PKV_RETURN_IF_ERROR(
            pool->write_block(static_cast<int32_t>(l), block, false, src + (2 * l) * per_layer));
        PKV_RETURN_IF_ERROR(
            pool->write_block(static_cast<int32_t>(l), block, true, src + (2 * l + 1) * per_layer));
      }
      return ok_status();
    };
    auto installed = adapter.install_restored_blocks(prompt, n, fill, &failed);
    if (installed.ok()) {
      r.restored = *installed;
      return r;
    }
    if (failed < 0) {  // could not reserve blocks (pool full), or a precondition
      store_->count_restore_decline();
      r.stop = "declined";
      return r;
    }
    // Block `failed` was absent (another process evicted it) or failed
    // verification (pruned, counted): retry with the run that precedes it.
    r.stop = installed.status().code() == StatusCode::kCorruption ? "corrupt" : "absent";
    n = failed - r.hot_blocks;
  }
  return r;
}

}  // namespace pagedkv::cold
