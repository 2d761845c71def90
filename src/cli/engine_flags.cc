// The engine flags shared by serve and bench (see engine_flags.h).
#include "cli/engine_flags.h"

#include <type_traits>

namespace pagedkv::cli {

void add_scheduler_flags(ArgParser& p) {
  p.add_option("max-num-seqs", "N",
               "engine: requests running at once (default 64; env PAGEDKV_MAX_NUM_SEQS wins)");
  p.add_option("max-num-batched-tokens", "N",
               "engine: token budget per step (default 2048; env PAGEDKV_MAX_NUM_BATCHED_TOKENS "
               "wins)");
}

void add_pool_memory_flag(ArgParser& p, const std::string& name) {
  p.add_option(name, "MB",
               "engine: max KV pool in MiB (default: config.json paged_cache_memory_mb, else "
               "one full context; env PAGEDKV_PAGED_CACHE_MEMORY_MB wins)");
}

void add_pool_blocks_flag(ArgParser& p) {
  p.add_option("pool-max-blocks", "N", "engine: exact KV pool size in blocks (tests, benchmarks)");
}

void add_cold_tier_flags(ArgParser& p) {
  p.add_flag("persist-cache",
             "engine: turn the cold tier on (KV blocks persisted to disk and restored on a "
             "later prefix hit; EngineOptions::persist_paged_cache, env "
             "PAGEDKV_PERSIST_PAGED_CACHE)");
  p.add_flag("no-persist-cache", "engine: turn the cold tier off (overrides env and config)");
  p.add_option("cold-cache-dir", "DIR",
               "engine: the cold tier's directory (EngineOptions::cold_cache_dir, env "
               "PAGEDKV_COLD_CACHE_DIR)");
}

StatusOr<server::EngineSessionOptions> read_engine_flags(const ArgParser& p) {
  server::EngineSessionOptions v;
  // An integer flag within [lo, hi], when given.
  auto ranged = [&](const std::string& name, int64_t lo, int64_t hi, auto* out) -> Status {
    if (!p.get_optional(name)) return ok_status();
    PKV_ASSIGN_OR_RETURN(const int64_t x, p.get_int_in(name, lo, hi));
    *out = static_cast<typename std::remove_pointer_t<decltype(out)>::value_type>(x);
    return ok_status();
  };
  PKV_RETURN_IF_ERROR(ranged("max-num-seqs", 1, 1 << 20, &v.max_num_seqs));
  PKV_RETURN_IF_ERROR(ranged("max-num-batched-tokens", 1, 1 << 24, &v.max_num_batched_tokens));
  for (const char* name : {"paged-cache-mb", "pool-mb"})
    PKV_RETURN_IF_ERROR(ranged(name, 1, 1 << 24, &v.paged_cache_mb));
  PKV_RETURN_IF_ERROR(ranged("pool-max-blocks", 2, INT32_MAX, &v.pool_max_blocks));
  if (p.has("persist-cache") && p.has("no-persist-cache"))
    return invalid_argument(
        "--persist-cache and --no-persist-cache contradict each other; give one");
  if (p.has("persist-cache")) v.persist_paged_cache = true;
  if (p.has("no-persist-cache")) v.persist_paged_cache = false;
  if (auto d = p.get_optional("cold-cache-dir")) {
    if (d->empty()) return invalid_argument("--cold-cache-dir must not be empty");
    v.cold_cache_dir = *d;
  }
  return v;
}

}  // namespace pagedkv::cli
