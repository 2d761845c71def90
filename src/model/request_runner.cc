// RequestRunner (see request_runner.h).
#include "model/request_runner.h"

#include <unistd.h>

#include "kv/kv_storage.h"
#include "model/pool_kv_store.h"

namespace pagedkv::model {

uint64_t physical_memory_bytes() {
  const long pages = ::sysconf(_SC_PHYS_PAGES);
  const long page = ::sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  return static_cast<uint64_t>(pages) * static_cast<uint64_t>(page);
}

StatusOr<std::unique_ptr<kv::PagedKVCache>> make_paged_cache(const Model& model,
                                                             kv::PoolBudgetConfig config) {
  const CacheConfig& cc = model.config().cache;
  if (!config.paged_cache_memory_mb) config.paged_cache_memory_mb = cc.paged_cache_memory_mb;
  if (!config.paged_cache_initial_memory_mb)
    config.paged_cache_initial_memory_mb = cc.paged_cache_initial_memory_mb;
  PKV_ASSIGN_OR_RETURN(kv::PoolBudget budget,
                       kv::PoolBudget::resolve(pool_geometry(model.kv_geometry()),
                                               model.config().max_position_embeddings, config));
  // The pool's initial bytes are allocated now: more than the machine's memory
  // (a huge max_position_embeddings sizing the default one-context pool) is an
  // error naming the knob, not a bad_alloc abort after gigabytes.
  const uint64_t ram = physical_memory_bytes();
  if (ram != 0 && budget.initial_bytes > ram) {
    return resource_exhausted("the paged KV pool needs " +
                              std::to_string(budget.initial_bytes >> 20) + " MiB up front (" +
                              budget.describe() + "), more than this machine's " +
                              std::to_string(ram >> 20) +
                              " MiB of memory; cap it with paged_cache_memory_mb (config.json) or "
                              "PAGEDKV_PAGED_CACHE_MEMORY_MB");
  }
  return kv::PagedKVCache::create(budget, kv::host_kv_storage());
}

RequestRunner::RequestRunner(Model& model, KVPath path, kv::PagedKVCache* cache)
    : model_(model), path_(path), cache_(cache) {
  if (path_ == KVPath::kPaged) {
    adapter_ = std::make_unique<kv::PagedKVCacheAdapter>(cache_);
  } else {
    flat_ = std::make_unique<FlatKVCache>(model.kv_geometry());
  }
}

int64_t RequestRunner::num_tokens() const {
  return path_ == KVPath::kPaged ? adapter_->num_tokens() : flat_->length();
}

StatusOr<int64_t> RequestRunner::begin(std::span<const int32_t> prompt) {
  if (prompt.empty()) return invalid_argument("empty prompt");
  prompt_.assign(prompt.begin(), prompt.end());
  if (path_ == KVPath::kFlat) {
    flat_->clear();
    cached_ = 0;
    return cached_;
  }
  if (!adapter_->kept_live()) adapter_->reset_for_new_request();
  PKV_ASSIGN_OR_RETURN(cached_, adapter_->find_cached_prefix(prompt));
  return cached_;
}

Status RequestRunner::step(std::span<const int32_t> tokens, LogitsRequest what,
                           std::vector<float>* logits, bool append) {
  const int64_t ctx = num_tokens();
  ForwardBatch b;
  b.path = path_;
  ForwardRow& row = b.add_row(tokens, static_cast<int32_t>(ctx), what);
  std::unique_ptr<PoolKVBlockStore> store;
  if (path_ == KVPath::kPaged) {
    PKV_RETURN_IF_ERROR(
        adapter_->allocate_suffix_blocks(ctx + static_cast<int64_t>(tokens.size())));
    row.block_tables = {adapter_->block_table()};
    store = std::make_unique<PoolKVBlockStore>(cache_->pool());
    b.kv_store = store.get();
  } else {
    row.flat = flat_.get();
  }
  ForwardOutput out;
  PKV_RETURN_IF_ERROR(model_.forward(b, &out));
  if (path_ == KVPath::kPaged) PKV_RETURN_IF_ERROR(adapter_->record_tokens(tokens));
  if (logits != nullptr) {
    if (!append) logits->clear();
    logits->insert(logits->end(), out.logits.begin(), out.logits.end());
  }
  return ok_status();
}

Status RequestRunner::prefill(int32_t chunk, LogitsRequest what, std::vector<float>* logits) {
  if (logits != nullptr) logits->clear();
  const int64_t total = static_cast<int64_t>(prompt_.size());
  int64_t done = num_tokens();
  if (done >= total) return failed_precondition("prefill: nothing left to compute");
  if (path_ == KVPath::kPaged) PKV_RETURN_IF_ERROR(adapter_->allocate_suffix_blocks(total));
  while (done < total) {
    int64_t n = chunk > 0 ? std::min<int64_t>(chunk, total - done) : total - done;
    bool last = done + n == total;
    LogitsRequest req = what == LogitsRequest::kAll ? LogitsRequest::kAll
                        : last                      ? what
                                                    : LogitsRequest::kNone;
    PKV_RETURN_IF_ERROR(
        step(std::span<const int32_t>(prompt_.data() + done, static_cast<size_t>(n)), req, logits,
             /*append=*/true));
    done += n;
  }
  return ok_status();
}

Status RequestRunner::decode(int32_t token, std::vector<float>* logits) {
  return step(std::span<const int32_t>(&token, 1), LogitsRequest::kLast, logits, false);
}

void RequestRunner::end(bool keep_live) {
  if (path_ == KVPath::kFlat) {
    if (!keep_live) flat_->clear();
    return;
  }
  if (keep_live) {
    adapter_->finalize_turn_keep_live();
  } else {
    adapter_->release_request();
  }
}

}  // namespace pagedkv::model
