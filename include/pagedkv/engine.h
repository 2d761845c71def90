// The pagedkv engine: the embeddable API users drive. Submit requests (prompt
// token ids, or chat messages rendered by a pluggable formatter), stream their
// tokens, cancel them, read stats. Many requests run at once, continuously
// batched: every step runs ONE model forward over every scheduled row (prefill
// chunks and decode rows packed together, each with its own block table), and
// requests whose prompts share a prefix share refcounted KV blocks
// (docs/engine.md explains the scheduler, owners and preemption).
//
// Exactness: every request's logits and tokens are bit-identical to running it
// alone through the flat (non-paged) path, whatever was batched with it, however
// its prompt was chunked, and after preemption and recompute (DESIGN.md, "caching
// never changes an answer"). Sampling draws token n (absolute position n in the
// sequence prompt + completion) with sample_token(logits, params, n).
//
// Threads. Engine::start() runs the step loop on its own thread; submit(),
// cancel(), release_owner(), stats() and every RequestHandle method are
// thread-safe and may be called from any thread. Without start(), the caller
// drives the engine with step() (deterministic tests); never both. The step
// thread owns the model, the KV cache and all scheduler state, so none of those
// take locks; callers talk to it through a mutex-protected inbox and each
// request's handle (its own mutex + condition variable).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "pagedkv/sampling.h"
#include "pagedkv/status.h"

namespace pagedkv::model {
class Model;
}

namespace pagedkv::engine {

namespace internal {
class HandleAccess;  // the engine's side of a RequestHandle (src/engine/handle_access.h)
}

// Renders chat messages (a JSON array of {"role", "content"} objects, as the
// OpenAI API sends them) into prompt token ids. Engine::open installs the
// model's own (src/engine/chat_formatter.h: chat template + tokenizer) when the
// checkpoint has tokenizer.json and tokenizer_config.json; without a formatter,
// requests must carry token ids.
using PromptFormatter =
    std::function<StatusOr<std::vector<int32_t>>(std::string_view messages_json)>;

enum class FinishReason : uint8_t {
  kNone = 0,   // still running
  kStop,       // a stop token / stop sequence / the model's EOS
  kLength,     // max_tokens reached
  kCancelled,  // cancel() before it finished
  kError,      // see RequestResult::error
};
std::string_view finish_reason_name(FinishReason r);  // "stop", "length", ...

struct GenerateRequest {
  // The prompt. Exactly one of `prompt` (token ids) and `messages_json` (rendered
  // by EngineOptions::formatter at submit) must be non-empty.
  std::vector<int32_t> prompt;
  std::string messages_json;

  // Sampling (temperature, top-k/p, min-p, seed), max_tokens and stop token ids.
  SamplingParams sampling;
  // Token sequences that end the request when the completion ends with one
  // (the matched tokens are kept in the output).
  std::vector<std::vector<int32_t>> stop_sequences;
  // When false, the model's EOS ids (config.json eos_token_id) also stop.
  bool ignore_eos = false;

  // Separates content-addressed KV reuse between security domains (block 0's
  // extra key, in the hot prefix table and in the cold tier alike); empty = the
  // shared default domain (the same meaning in every API). At most 256 bytes.
  std::string cache_salt;
  // prompt_cache_key: the owner (conversation) this request continues. A request
  // with an owner keeps the owner's KV live after it ends
  // (finalize_turn_keep_live), and the owner's next request re-uses it without a
  // lookup. Empty = no owner.
  std::string owner;

  // Keep a copy of the logits row of every sampled position in the result
  // (tests, logprobs). Costs vocab_size floats per token.
  bool return_logits = false;
  // Keep the logits of every prompt position the engine computes (`pagedkv
  // logits`, prompt logprobs): RequestResult::prompt_logits holds the rows of
  // positions [prompt_logits_first, prompt length) — positions served from the
  // prefix cache have none. With sampling.max_tokens == 0 the request only
  // prefills (no token is sampled) and finishes with kLength.
  bool return_prompt_logits = false;
  // Called on the step thread for every generated token, before it is queued
  // on the handle. Must be quick and must not call back into the engine.
  std::function<void(int32_t token)> on_token;
};

struct Usage {
  int64_t prompt_tokens = 0;
  // Prompt tokens whose KV was reused at first admission: the total, and its two
  // sources (hot: the in-memory prefix table or a live owner; cold: restored
  // from the disk tier). cached_prompt_tokens == hot + cold.
  int64_t cached_prompt_tokens = 0;
  int64_t cached_prompt_tokens_hot = 0;
  int64_t cached_prompt_tokens_cold = 0;
  int64_t completion_tokens = 0;
  // Prompt tokens re-hit from the cache when the request was re-admitted after
  // preemption(s) (not counted in cached_prompt_tokens).
  int64_t resumed_cached_tokens = 0;
};

struct Timings {
  double queue_ms = 0;   // submit → first admitted
  double ttft_ms = 0;    // submit → first token
  double decode_ms = 0;  // first token → finished
  double total_ms = 0;   // submit → finished
};

struct RequestResult {
  FinishReason finish_reason = FinishReason::kNone;
  Status error;                            // OK unless finish_reason == kError
  std::vector<int32_t> tokens;             // the completion (a stop token / sequence included)
  std::vector<std::vector<float>> logits;  // per sampled token, when return_logits
  // return_prompt_logits: [prompt length - prompt_logits_first][vocab_size], row i
  // for prompt position prompt_logits_first + i.
  std::vector<float> prompt_logits;
  int64_t prompt_logits_first = 0;
  std::vector<double> token_ms;  // per token: ms since submit when it was produced
  Usage usage;
  Timings timings;
  int32_t preemptions = 0;  // times this request was preempted and recomputed
};

// One submitted request. Thread-safe; shared between the caller and the engine.
class RequestHandle {
 public:
  uint64_t id() const { return id_; }

  // Blocks until the next token is available (returns it) or the request has
  // finished and every token was taken (returns nullopt).
  std::optional<int32_t> next_token();
  // Non-blocking: the next queued token, or nullopt when none is queued now.
  std::optional<int32_t> try_next_token();
  // Blocks until the request finishes; the result stays valid as long as the handle.
  const RequestResult& wait();
  // Waits up to `timeout`; true when finished.
  bool wait_for(std::chrono::milliseconds timeout);
  bool done() const;
  // Asks the engine to cancel; takes effect (and releases the request's blocks)
  // at the next step. No effect once finished.
  void cancel();
  bool cancel_requested() const { return cancel_.load(std::memory_order_acquire); }
  // Prompt tokens whose KV was reused at the request's first admission (hot +
  // cold, Usage::cached_prompt_tokens), known before its first token: nullopt
  // until the request is admitted (or when it finished without admission).
  std::optional<int64_t> admitted_cached_tokens() const {
    const int64_t v = admitted_cached_.load(std::memory_order_acquire);
    if (v < 0) return std::nullopt;
    return v;
  }

 private:
  // The engine side (step thread), reached through internal::HandleAccess only.
  friend class internal::HandleAccess;
  RequestHandle(uint64_t id, std::function<void()> wake) : id_(id), wake_(std::move(wake)) {}
  void push_token(int32_t token);
  void finish(RequestResult result);

  const uint64_t id_;
  std::function<void()> wake_;
  std::atomic<bool> cancel_{false};
  std::atomic<int64_t> admitted_cached_{-1};
  mutable std::mutex mu_;
  std::condition_variable cv_;        // finished_: wait(), wait_for(), next_token()
  std::condition_variable token_cv_;  // a queued token: next_token() only
  std::deque<int32_t> queue_;
  bool finished_ = false;
  RequestResult result_;
};
using RequestHandlePtr = std::shared_ptr<RequestHandle>;

struct EngineOptions {
  // Tokens per step, decode rows first, then prefill slices (config
  // max_num_batched_tokens, env PAGEDKV_MAX_NUM_BATCHED_TOKENS).
  std::optional<int64_t> max_num_batched_tokens;  // default 2048
  // Requests running at once (config max_num_seqs, env PAGEDKV_MAX_NUM_SEQS).
  std::optional<int64_t> max_num_seqs;  // default 64
  // Free blocks admission keeps in reserve for running decodes, as a fraction
  // of the max pool (config kv_free_watermark, env PAGEDKV_KV_FREE_WATERMARK).
  std::optional<double> kv_free_watermark;  // default 0.01 (at least 1 block)
  // An idle owner's live KV is released after this many seconds
  // (config owner_idle_timeout_s, env PAGEDKV_OWNER_IDLE_TIMEOUT_S).
  std::optional<double> owner_idle_timeout_s;  // default 600
  // Same-step prefix sharing: a waiting request whose prompt shares uncomputed
  // full blocks with a running request's prompt waits until that request has
  // published them, so a burst with a common uncached prefix computes it once
  // (env PAGEDKV_SAME_STEP_PREFIX_SHARING wins).
  std::optional<bool> same_step_prefix_sharing;  // default true

  // Pool sizing in MiB (the reference's config fields; env
  // PAGEDKV_PAGED_CACHE_MEMORY_MB / PAGEDKV_PAGED_CACHE_INITIAL_MB win).
  std::optional<uint64_t> paged_cache_memory_mb;
  std::optional<uint64_t> paged_cache_initial_memory_mb;
  // Exact pool size in blocks (counting the null block), overriding the MiB
  // knobs: for tests and benchmarks that need a given pressure.
  std::optional<int32_t> pool_max_blocks;
  std::optional<int32_t> pool_initial_blocks;

  // The KV path: false selects the flat per-request path (no pool, no prefix
  // sharing, bit-identical answers). nullopt/true: env
  // PAGEDKV_USE_BLOCK_PAGED_CACHE > config.json use_block_paged_cache > paged.
  std::optional<bool> use_block_paged_cache;

  // The cold tier (docs/cold-tier.md), paged path only. persist_paged_cache is
  // the caller's flag: nullopt = env PAGEDKV_PERSIST_PAGED_CACHE > config.json
  // persist_paged_cache > off. A family off COLD_RESTORE_FAMILIES never persists.
  std::optional<bool> persist_paged_cache;
  // Env PAGEDKV_COLD_CACHE_DIR / PAGEDKV_COLD_CACHE_QUOTA_MB win over these,
  // these over config.json cold_cache_dir / cold_cache_quota_mb.
  std::optional<std::string> cold_cache_dir;
  std::optional<uint64_t> cold_cache_quota_mb;
  // Where the per-turn JSONL trace goes (traces/ under it); default env
  // PAGEDKV_METRICS_DIR or the cache directory's metrics dir.
  std::optional<std::string> metrics_dir;
  // The checkpoint directory the cold tier fingerprints (config.json + weights);
  // default: the model's own (ModelConfig::source_path). Engine::open sets it.
  std::optional<std::string> model_dir;

  // Renders GenerateRequest::messages_json (see PromptFormatter).
  PromptFormatter formatter;
};

// What the loaded model is (Engine::model_info): enough for a caller to build
// valid requests (token ids below vocab_size) without the model's headers.
struct ModelInfo {
  std::string model_type;  // config.json model_type ("qwen3", ...)
  std::string path;        // the checkpoint directory ("" when built in memory)
  int32_t vocab_size = 0;  // valid token ids are [0, vocab_size)
  int32_t hidden_size = 0;
  int32_t num_layers = 0;
  int64_t max_position_embeddings = 0;  // the longest sequence the model was made for
  std::vector<int32_t> eos_token_ids;   // stop a request unless ignore_eos
  int32_t bos_token_id = -1;            // -1: none
  int32_t block_size = 0;               // KV block size in tokens (the prefix-reuse unit)
};

struct PoolStats {
  int32_t num_blocks = 0;     // current pool (counting the null block)
  int32_t max_blocks = 0;     // the pool may grow to this
  int32_t used_blocks = 0;    // ref ≥ 1
  int32_t free_blocks = 0;    // in the free queue (cached + unhashed)
  int32_t cached_blocks = 0;  // free but keyed (evictable, still hittable)
  int32_t block_size = 0;
  // Prefix-table counters of admitted requests (first admission and resumes).
  uint64_t lookups = 0;
  uint64_t lookup_blocks = 0;  // full prompt blocks those lookups examined
  uint64_t hit_blocks = 0;     // ... served from memory
  uint64_t hit_tokens = 0;
  uint64_t evictions = 0;    // cached blocks reused for new content
  uint64_t grow_events = 0;  // pool growths
};

// The disk tier as the engine uses it (all zero / false when it is off).
struct ColdTierStats {
  bool enabled = false;
  // The tier was asked for but could not be opened (its directory unusable):
  // the engine runs uncached (the answer is the same), counts it here and
  // keeps the reason.
  uint64_t open_errors = 0;
  std::string open_error;
  std::string root;
  uint64_t quota_bytes = 0;
  uint64_t hits = 0;             // objects read, verified and restored
  uint64_t misses = 0;           // lookups that found no object
  uint64_t restored_blocks = 0;  // blocks installed from disk at admission
  uint64_t restored_tokens = 0;  // ... in tokens
  uint64_t corruptions = 0;      // objects that failed verification (pruned)
  uint64_t queue_drops = 0;      // captures the writer queue refused
  uint64_t enqueued = 0;         // objects handed to the writer
  uint64_t bytes_written = 0;    // bytes the writer wrote
  uint64_t write_errors = 0;
  uint64_t evictions = 0;         // objects removed by the quota
  uint64_t restore_declines = 0;  // restores declined (geometry, pool)
  uint64_t reads = 0;             // objects read
  uint64_t bytes_restored = 0;    // payload bytes copied into the pool
  uint64_t capture_turns = 0;     // turns whose full blocks were walked
  uint64_t captured_blocks = 0;   // blocks the step thread's capture walks got past
  // Capture continuation: blocks past the step thread's budget, pinned and
  // written after the turn ended by the continuation thread.
  uint64_t continued_turns = 0;
  uint64_t continued_blocks = 0;  // ... handed to the writer
  int64_t pinned_blocks = 0;      // blocks pinned for continuations now
};

struct EngineStats {
  uint64_t steps = 0;
  uint64_t forward_tokens = 0;  // tokens fed to the model
  // The steps split by kind: a prompt step has at least one prompt row (decode rows
  // may ride along), a decode step only decode rows (one token each). With the
  // Model::forward time of each kind below (no sampling), pagedkv bench reports
  // prefill and pure decode tokens/s.
  uint64_t prompt_steps = 0;
  uint64_t prompt_step_prompt_tokens = 0;  // the prompt rows' tokens of those steps
  uint64_t decode_steps = 0;
  uint64_t decode_step_tokens = 0;
  uint64_t submitted = 0;
  uint64_t finished = 0;
  uint64_t cancelled = 0;
  uint64_t errors = 0;
  uint64_t rejected = 0;  // submit() errors
  uint64_t preemptions = 0;
  uint64_t owners_expired = 0;
  // Steps the head of the queue waited for a running request to publish the
  // prefix blocks it shares (same-step prefix sharing).
  uint64_t prefix_share_waits = 0;
  uint64_t prompt_tokens = 0;         // of admitted requests (first admission)
  uint64_t cached_prompt_tokens = 0;  // ... served from cache (hot + cold)
  uint64_t cached_prompt_tokens_hot = 0;
  uint64_t cached_prompt_tokens_cold = 0;
  uint64_t resumed_cached_tokens = 0;  // re-hit at re-admission after preemption
  uint64_t completion_tokens = 0;
  // Hybrid (recurrent-state) models, issue #15: admissions that resumed from a
  // state checkpoint, from an owner's live state, and prompt tokens whose K/V
  // were cached but recomputed for lack of a checkpoint at their boundary;
  // the checkpoint store's puts and evictions (global + per-owner cap).
  uint64_t state_checkpoint_hits = 0;
  uint64_t state_live_continuations = 0;
  uint64_t state_replayed_tokens = 0;
  uint64_t state_checkpoints_stored = 0;
  uint64_t state_checkpoints_evicted = 0;
  uint64_t state_checkpoint_bytes = 0;  // held now
  int32_t running = 0;
  int32_t waiting = 0;
  int32_t live_owners = 0;
  PoolStats pool;
  ColdTierStats cold;
  bool paged = true;             // false: the flat per-request KV path
  double forward_ms = 0;         // wall time inside Model::forward
  double prompt_forward_ms = 0;  // ... of the prompt steps
  double decode_forward_ms = 0;  // ... of the decode steps
  // Wall time inside step() for steps that ran rows (forward_ms is part of it), and
  // of it the host sampling of the rows a model did not draw itself.
  double step_ms = 0;
  double sample_ms = 0;
};

// What one step() did.
struct StepReport {
  int32_t rows = 0;
  int32_t decode_rows = 0;
  int32_t prefill_rows = 0;
  int32_t tokens = 0;
  int32_t preempted = 0;
  int32_t finished = 0;
  bool idle() const { return rows == 0; }
};

class Engine {
 public:
  // Loads the checkpoint in `model_dir` (CPU backend) and builds the engine.
  static StatusOr<std::unique_ptr<Engine>> open(const std::string& model_dir,
                                                const EngineOptions& options = {});
  // Wraps a loaded model (shared: tests also run it on the flat path).
  static StatusOr<std::unique_ptr<Engine>> create(std::shared_ptr<model::Model> model,
                                                  const EngineOptions& options = {});
  ~Engine();  // stops the loop; unfinished requests end cancelled
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  // Validates and queues a request (FCFS). Errors at once — InvalidArgument for a
  // bad request (empty prompt, token outside the vocabulary, bad sampling
  // params or salt), ResourceExhausted for a prompt that can never fit the
  // largest pool — and then no handle is made.
  StatusOr<RequestHandlePtr> submit(GenerateRequest request);
  // Cancels by id; false when no such unfinished request.
  bool cancel(uint64_t id);
  // Drops an owner's live KV (its blocks stay cached until evicted). Applied at
  // the next step; an owner whose request is running is released when it ends.
  void release_owner(const std::string& owner);

  // Runs the step loop on its own thread until stop() / destruction.
  void start();
  // Stops the loop (joins); queued and running requests stay queued.
  void stop();
  bool running() const;

  // One scheduling step on the caller's thread (only when not start()ed).
  StepReport step();
  // step() until nothing is waiting or running; returns the number of steps.
  int64_t run_until_idle(int64_t max_steps = INT64_MAX);

  EngineStats stats() const;
  // The admission width: min(max_num_seqs, usable blocks of the max pool) — each
  // running row needs at least one block of its own.
  int32_t max_concurrent_sequences() const;
  int32_t max_num_batched_tokens() const;

  // Checks the KV state (step thread / sync mode only): the allocator's
  // verify_integrity(), and every block's refcount equal to the number of block
  // tables (running requests and live owners) that hold it.
  Status check_invariants() const;
  // Blocks held by running requests or live owners (sync mode only).
  int32_t held_blocks() const;
  // True when requests run on the paged KV path (false: flat).
  bool paged() const;
  // Waits until the cold tier's capture continuations ended and its writer has
  // written everything queued (no-op when the tier is off). Any thread; in sync
  // mode it also unpins the continuations' blocks at once.
  void flush_cold_tier();

  // The loaded model, described without its internal headers.
  ModelInfo model_info() const;
  // The model itself (engine-internal type: src/model/model.h).
  const model::Model& model() const;

  class Impl;

 private:
  explicit Engine(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace pagedkv::engine
