// EngineSession: the server's ONE adapter over the public engine API
// (include/pagedkv/engine.h) — every Engine call the server makes is in
// engine_session.cc, so engine API changes touch one file. It opens the engine
// (Engine::open, step loop on its own thread), loads the checkpoint's tokenizer
// and chat formatter (the same ChatFormatter Engine::open installs) so the
// server knows a prompt's length before it submits, submits requests and hands
// back a Generation (one request's token stream), and snapshots stats.
//
// Threads: submit()/stats()/Generation methods are called from HTTP worker
// threads; the engine's step thread owns all KV and scheduling state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "pagedkv/engine.h"
#include "pagedkv/status.h"

namespace pagedkv::engine {
class ChatFormatter;
}  // namespace pagedkv::engine
namespace pagedkv::tokenizer {
class Tokenizer;
}

namespace pagedkv::server {

struct EngineSessionOptions {
  std::optional<int64_t> max_num_seqs;
  std::optional<int64_t> max_num_batched_tokens;
  std::optional<uint64_t> paged_cache_mb;
  std::optional<int32_t> pool_max_blocks;
  // The cold tier (EngineOptions::persist_paged_cache / cold_cache_dir); unset:
  // the engine's own defaults (env PAGEDKV_PERSIST_PAGED_CACHE, config.json).
  std::optional<bool> persist_paged_cache;
  std::optional<std::string> cold_cache_dir;
  // A model already loaded from the same directory (`pagedkv serve --device cuda`
  // loads it on the GPU); null: the engine loads it on the CPU (Engine::open).
  std::shared_ptr<model::Model> model;
};

// What the server asks the engine to run.
struct GenerationSpec {
  std::vector<int32_t> prompt;
  double temperature = 0;
  int32_t top_k = 0;
  double top_p = 1;
  double min_p = 0;
  uint64_t seed = 0;
  int32_t max_tokens = 16;
  std::string cache_salt;  // the engine salt (already tenant-derived)
  std::string owner;       // the engine owner (already tenant-scoped)
};

// How a request ended: the engine's own reason (kNone while it runs).
using EngineFinish = engine::FinishReason;

struct GenerationResult {
  EngineFinish finish = EngineFinish::kNone;
  Status error;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;       // hot + cold
  int64_t cached_tokens_cold = 0;  // ... of which restored from the cold tier
  int64_t completion_tokens = 0;   // tokens the engine produced
  double ttft_ms = 0;
  double total_ms = 0;
  std::vector<double> token_ms;  // per token, ms since submit
  int32_t preemptions = 0;
};

// One submitted request's stream. Thread-safe.
class Generation {
 public:
  ~Generation();
  struct Event {
    enum Kind { kToken, kIdle, kDone } kind = kIdle;
    int32_t token = -1;
  };
  // The next token (kToken), nothing within `timeout` (kIdle), or the end (kDone,
  // every token taken).
  Event next(std::chrono::milliseconds timeout);
  // Asks the engine to stop this request (its blocks are released at the next step).
  void cancel();
  bool done() const;
  // Prompt tokens served from the cache (hot + cold) once the engine admitted
  // the request; nullopt before that.
  std::optional<int64_t> admitted_cached_tokens() const;
  // Valid once next() returned kDone (or done()).
  GenerationResult result() const;
  uint64_t id() const;

 private:
  friend class EngineSession;
  struct Wake {
    std::mutex mu;
    std::condition_variable cv;
    bool flag = false;
  };
  Generation(std::shared_ptr<engine::RequestHandle> handle, std::shared_ptr<Wake> wake);
  std::shared_ptr<engine::RequestHandle> handle_;
  std::shared_ptr<Wake> wake_;
};

// The engine's counters and pool/cold-tier gauges, exactly as Engine::stats()
// reports them (include/pagedkv/engine.h): the server reads them as they are.
using EngineSnapshot = engine::EngineStats;

class EngineSession {
 public:
  // Opens the model in `model_dir` and starts the engine's step loop.
  static StatusOr<std::unique_ptr<EngineSession>> open(const std::string& model_dir,
                                                       const EngineSessionOptions& options);
  ~EngineSession();  // stops the engine

  const tokenizer::Tokenizer& tokenizer() const;
  // Renders chat messages (a JSON array of {"role","content"}) into prompt ids.
  StatusOr<std::vector<int32_t>> format_chat(const std::string& messages_json) const;
  std::string model_type() const;
  int32_t vocab_size() const;
  int64_t max_context() const;  // max_position_embeddings (0 = unknown)
  int32_t admission_width() const;

  // Validates and queues. InvalidArgument / ResourceExhausted from the engine.
  StatusOr<std::shared_ptr<Generation>> submit(const GenerationSpec& spec);
  EngineSnapshot stats() const;
  // Waits until the cold tier's writer has written everything queued (no-op
  // when the tier is off): `pagedkv serve` calls it on SIGTERM before exit 0.
  void flush_cold_tier();

  // Stops the step loop (joins); unfinished requests stay queued. Then the
  // engine may be inspected in sync mode (tests).
  void stop();
  // Sync mode (after stop()): runs remaining steps, then the engine's KV
  // invariants and the blocks still held by requests or owners.
  Status settle_and_check(int32_t* held_blocks);

 private:
  EngineSession() = default;
  std::unique_ptr<engine::Engine> engine_;
  std::shared_ptr<const engine::ChatFormatter> formatter_;
};

}  // namespace pagedkv::server
