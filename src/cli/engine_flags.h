// The engine knobs that commands running many requests offer as flags (serve,
// bench), declared once so that every command spells, documents and
// range-checks them the same way: the scheduler's sizes (--max-num-seqs,
// --max-num-batched-tokens), the pool's size (--paged-cache-mb, spelled
// --pool-mb by bench; --pool-max-blocks) and the cold tier (--persist-cache,
// --no-persist-cache, --cold-cache-dir). A flag not given stays unset, so the
// engine's own resolution (env, config.json, default) applies.
#pragma once

#include <string>

#include "cli/args.h"
#include "pagedkv/status.h"
#include "server/engine_session.h"

namespace pagedkv::cli {

// --max-num-seqs N and --max-num-batched-tokens N.
void add_scheduler_flags(ArgParser& p);
// The pool's maximum size in MiB under `name` ("paged-cache-mb" or "pool-mb").
void add_pool_memory_flag(ArgParser& p, const std::string& name);
// --pool-max-blocks N (an exact pool size, for tests and benchmarks).
void add_pool_blocks_flag(ArgParser& p);
// --persist-cache, --no-persist-cache and --cold-cache-dir DIR.
void add_cold_tier_flags(ArgParser& p);

// Reads every engine flag `p` declares into the server's engine options (serve
// passes them on as they are; bench copies the scheduler and pool sizes into its
// EngineOptions); a flag not given stays unset. InvalidArgument naming the flag
// for a value out of its range, contradicting switches or an empty directory.
StatusOr<server::EngineSessionOptions> read_engine_flags(const ArgParser& p);

}  // namespace pagedkv::cli
