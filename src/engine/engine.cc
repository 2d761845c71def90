// The engine's threaded shell (include/pagedkv/engine.h; docs/engine.md
// describes the policy): request intake and validation, the inbox the step
// thread drains, the step loop, request handles, stats snapshots, and the
// composition of model + KV cache + cold tier. The scheduling policy itself is
// the pure Scheduler (scheduler.h), which sees KV only as block counts through
// SchedulerKV; this file implements SchedulerKV over the PagedKVCache, the
// request adapters, the OwnerRegistry (owner_registry.h) and the cold tier —
// or over per-request flat caches on the flat path.
//
// One step, on the step thread:
//   1. drain the inbox (new requests join the waiting queue's tail, FCFS), apply
//      owner releases, finish cancelled requests (their blocks go back now), and
//      expire owners idle past the timeout;
//   2. the Scheduler plans the step: decode rows, prefill slices, admissions,
//      preemptions (Scheduler::schedule; its comment and docs/engine.md);
//   3. the plan's bookkeeping: preemption counts, first-admission usage (or the
//      re-hit blocks of a resume), requests that can never fit end with an error;
//   4. ONE forward over every scheduled row; record the K/V; sample where a row
//      reached its last position; finish requests that stopped.
//
// A request's sequence is prompt + completion. It is "prefilling" while more
// than its last token lacks K/V (a new prompt, or a preempted request's prompt
// and completion being recomputed); its last slice's logits sample the next
// token. Recomputed K/V are the same bits (the kernels are chunk-invariant), and
// the sampler draws token n from (seed, n), so a preempted request resumes
// exactly where it was.
#include <algorithm>
#include <cmath>
#include <thread>
#include <unordered_map>

#include "backend/backend.h"
#include "engine/chat_formatter.h"
#include "engine/cold_tier_runtime.h"
#include "engine/coordinator_kv.h"
#include "engine/handle_access.h"
#include "engine/kv_cache_factory.h"
#include "engine/owner_registry.h"
#include "engine/pool_kv_store.h"
#include "engine/sampler.h"
#include "engine/scheduler.h"
#include "engine/state_checkpoint_store.h"
#include "kv/block_hasher.h"
#include "kv/kv_storage.h"
#include "kv/paged_kv_cache.h"
#include "kv/paged_kv_cache_adapter.h"
#include "kv/pool_budget.h"
#include "model/flat_kv_cache.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "pagedkv/engine.h"
#include "util/check.h"
#include "util/knobs.h"
#include "util/logging.h"

namespace pagedkv::engine {
namespace {

using Clock = std::chrono::steady_clock;

constexpr const char* kEnvMaxBatchedTokens = "PAGEDKV_MAX_NUM_BATCHED_TOKENS";
constexpr const char* kEnvMaxNumSeqs = "PAGEDKV_MAX_NUM_SEQS";
constexpr const char* kEnvFreeWatermark = "PAGEDKV_KV_FREE_WATERMARK";
constexpr const char* kEnvOwnerIdleTimeout = "PAGEDKV_OWNER_IDLE_TIMEOUT_S";
// The step's reused logits buffer is kept up to this many floats (64 MiB) or one
// row per sequence of a full batch, whichever is larger.
constexpr size_t kKeepLogitsFloats = size_t{16} << 20;
constexpr const char* kEnvCaptureContinue = "PAGEDKV_COLD_CAPTURE_CONTINUE";
constexpr const char* kEnvSameStepSharing = "PAGEDKV_SAME_STEP_PREFIX_SHARING";
constexpr const char* kEnvStateCheckpointMb = "PAGEDKV_STATE_CHECKPOINT_MAX_MB";
constexpr const char* kEnvStateCheckpointPerOwner = "PAGEDKV_STATE_CHECKPOINT_MAX_PER_OWNER";

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// The state callers share with the step thread: new requests, owner releases
// and the wake-up signal. Held by shared_ptr so a handle that outlives the
// engine can still "wake" it harmlessly.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  bool wake = false;
  bool stop = false;
  std::vector<std::string> owner_releases;
  void notify() {
    {
      std::lock_guard<std::mutex> lk(mu);
      wake = true;
    }
    cv.notify_all();
  }
};

}  // namespace

using Owner = OwnerRegistry::Owner;

// One request inside the engine (step thread only, except while in the inbox).
// Its scheduling view (id, tokens, prompt_len, computed, preempted, salt) is
// the SchedRequest base the Scheduler reads.
struct Seq : SchedRequest {
  RequestHandlePtr handle;
  GenerateRequest req;
  std::vector<int32_t> stop_ids;  // stop_token_ids + EOS unless ignore_eos
  std::unique_ptr<kv::PagedKVCacheAdapter> own_adapter;
  kv::PagedKVCacheAdapter* adapter = nullptr;  // own_adapter, or the owner's
  std::unique_ptr<model::FlatKVCache> flat;    // the flat KV path's per-request cache
  // A hybrid model's recurrent state: own_state, or the bound owner's live one.
  // Its length() always equals `computed` while the request is bound.
  std::unique_ptr<model::RecurrentState> own_state;
  model::RecurrentState* state = nullptr;
  bool bound = false;              // holds KV (admitted and running)
  int64_t restored_tokens = 0;     // restored from the cold tier (first admission)
  int64_t admit_cold_tokens = 0;   // ... at the latest admission
  int64_t prompt_logits_next = 0;  // next prompt position whose logits to keep
  Owner* owner = nullptr;          // bound owner while admitted
  bool admitted_once = false;
  RequestResult result;
  Clock::time_point submit_time;
  Clock::time_point first_token_time;

  // A return_prompt_logits request with max_tokens == 0: prefill, sample nothing.
  bool prefill_only() const { return req.sampling.max_tokens == 0; }
};

static Seq* as_seq(SchedRequest* r) { return static_cast<Seq*>(r); }
static const Seq* as_seq(const SchedRequest* r) { return static_cast<const Seq*>(r); }

class Engine::Impl {
 public:
  Impl(std::shared_ptr<model::Model> model, const EngineOptions& options)
      : model_(std::move(model)), options_(options), inbox_(std::make_shared<Inbox>()) {}
  ~Impl();

  Status init();
  StatusOr<RequestHandlePtr> submit(GenerateRequest request);
  bool cancel(uint64_t id);
  void release_owner(const std::string& owner);
  void start();
  void stop();
  bool running() const { return thread_.joinable(); }
  StepReport step();
  int64_t run_until_idle(int64_t max_steps);
  EngineStats stats() const;
  int32_t max_concurrent_sequences() const;
  int32_t max_num_batched_tokens() const { return static_cast<int32_t>(max_batched_); }
  Status check_invariants() const;
  int32_t held_blocks() const;
  const model::Model& model() const { return *model_; }
  bool paged() const { return paged_; }
  void flush_cold_tier() {
    if (cold_) cold_->flush();
  }
  // Sync mode: after a flush, give the pinned blocks back now.
  void release_pins_now() {
    release_finished_pins();
    update_stats_snapshot();
  }

 private:
  class PagedKV;
  class FlatKV;

  void loop();
  bool has_work() const { return scheduler_ != nullptr && scheduler_->has_work(); }
  void make_scheduler();
  void drain_inbox(StepReport* rep);
  void process_cancellations(StepReport* rep);
  void apply_plan(const SchedulerOutput& plan, StepReport* rep);
  void unbind(Seq* s, bool keep_live);
  void finish(Seq* s, FinishReason reason, Status error = ok_status());
  // Ends a request that holds no KV and is in no scheduler queue, and frees it.
  void finish_unqueued(Seq* s, FinishReason reason, Status error);
  void complete(Seq* s, FinishReason reason, Status error);
  void update_stats_snapshot();
  int64_t blocks_for(int64_t tokens) const {
    const int64_t b = kv_block_size();
    return (tokens + b - 1) / b;
  }
  void note_admission(Seq* s, int64_t cached, bool resumed);
  // --- Cache groups (issue #14; coordinator_kv.h): a model with a sliding-window
  // group pages through the KVCacheCoordinator; coord_ is null on every other path.
  Status init_coordinator(double watermark);
  int64_t kv_block_size() const { return coord_ ? coord_->block_size() : cache_->block_size(); }
  int64_t kv_usable_blocks() const {
    return coord_ ? coord_->usable_blocks() : cache_->max_blocks() - 1;
  }
  CoordinatorKV* coord_ = nullptr;  // owned by kv_
  // --- end cache groups
  void capture_turn(Seq* s);

  std::shared_ptr<model::Model> model_;
  EngineOptions options_;
  int64_t max_batched_ = 2048;
  int64_t max_seqs_ = 64;
  int64_t watermark_blocks_ = 1;
  double owner_idle_timeout_s_ = 600;
  int64_t max_context_ = 0;
  int32_t vocab_size_ = 0;
  bool device_greedy_ = false;  // model_->samples_greedy(): ForwardRow::greedy_only
  int32_t draw_cap_ = 0;        // model_->draw_entries_cap(): ForwardRow::draw

  bool paged_ = true;
  // The model keeps recurrent state (a hybrid, issue #15): every row carries
  // its request's RecurrentState; a prefix hit resumes only at a block boundary
  // that has a state checkpoint (checkpoints_, paged path) or from an owner's
  // live state.
  bool hybrid_ = false;
  std::unique_ptr<StateCheckpointStore> checkpoints_;
  void bind_state(Seq* s);
  void publish_checkpoint(Seq* s);
  std::unique_ptr<kv::PagedKVCache> cache_;  // paged path only
  std::vector<int32_t> pool_slots_;          // model layer -> pool layer (pool_layer_slots)
  std::unique_ptr<ColdTierRuntime> cold_;    // the disk tier, when on
  // Blocks pinned (one reference each) for capture continuations, by job id;
  // released on the step thread when the continuation reports done.
  std::unordered_map<uint64_t, std::vector<kv::BlockId>> capture_pins_;
  int64_t pinned_blocks_ = 0;
  bool capture_continue_ = true;   // PAGEDKV_COLD_CAPTURE_CONTINUE
  bool same_step_sharing_ = true;  // PAGEDKV_SAME_STEP_PREFIX_SHARING
  void release_finished_pins();
  void relieve_pressure() {
    if (cold_ != nullptr && !capture_pins_.empty()) cold_->cancel_continuations();
  }

  std::shared_ptr<Inbox> inbox_;
  std::vector<std::unique_ptr<Seq>> incoming_;                       // guarded by inbox_->mu
  std::unordered_map<uint64_t, std::weak_ptr<RequestHandle>> live_;  // guarded by inbox_->mu
  std::atomic<uint64_t> next_id_{1};
  std::thread thread_;

  // Step-thread state. Declared after cache_ so they go before it.
  std::unique_ptr<OwnerRegistry> owners_;
  std::unique_ptr<SchedulerKV> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  std::unordered_map<uint64_t, std::unique_ptr<Seq>> seqs_;  // every waiting or running request
  EngineStats counters_;
  // The forward's output, reused step after step (issue 11): a decode step of n
  // rows fills n × vocab logits, and a fresh vector per step paid the allocation
  // and page faults of all of them (19 MB at 32 rows of Qwen3's vocabulary).
  // Its buffer is dropped after a step that needed more than kKeepLogitsFloats.
  model::ForwardOutput step_out_;
  // Per step: the token each scheduled row samples, and its position (-1: none).
  std::vector<int32_t> step_tokens_;
  std::vector<int64_t> step_token_pos_;
  // Per step: the seeded draws a device model may finish from a row's best
  // entries (ForwardRow::draw; sample_token_from_best gives sample_token's token)
  // or, without top-k, by selection over the row (its settings: selection()).
  struct SeededDraw final : model::RowDraw {
    const SamplingParams* params = nullptr;
    int64_t position = 0;
    size_t vocab = 0;
    int32_t cap = 0;
    int32_t entries() const override { return draw_entries_needed(*params, cap); }
    int32_t draw(std::span<const model::DrawEntry> best, bool complete) const override {
      return sample_token_from_best(best, complete, vocab, *params, position);
    }
    bool selection(model::SelectionSettings* out) const override {
      if (!selection_draw_serves(*params)) return false;
      out->inv_t = 1.0 / params->temperature;  // sample_token's
      out->u = uniform_for(params->seed, position);
      out->top_p = params->top_p;
      out->min_p = params->min_p;
      return true;
    }
  };
  std::vector<SeededDraw> step_draws_;

  mutable std::mutex stats_mu_;
  EngineStats snapshot_;   // guarded by stats_mu_
  uint64_t rejected_ = 0;  // guarded by stats_mu_
};

// SchedulerKV over the paged cache: the request's adapter (private, or its
// owner's live one), the owner registry and the cold tier.
class Engine::Impl::PagedKV final : public SchedulerKV {
 public:
  explicit PagedKV(Impl& e) : e_(e) {}

  int64_t free_blocks() const override {
    const kv::PagedKVCache& c = *e_.cache_;
    return static_cast<int64_t>(c.allocator().num_free_blocks()) +
           (c.max_blocks() - c.num_blocks());
  }

  // Side-effect-free probe: how many tokens would hit, and what the hit would
  // take out of (or give back to) the free queue. A request that does not fit
  // takes no reference, counts no hit and leaves the LRU queue as it was.
  StatusOr<int64_t> admission_cost(const SchedRequest& r, int64_t /*first_slice*/) override {
    const Seq& s = *as_seq(&r);
    kv::PagedKVCacheAdapter::PrefixProbe p;
    if (const Owner* o = continued_owner(s); o != nullptr) {
      PKV_ASSIGN_OR_RETURN(const ResumePoint rp, resume_point(s, *o->adapter, o->state.get()));
      PKV_ASSIGN_OR_RETURN(p, o->adapter->probe_cached_prefix(s.tokens, rp.cap));
    } else {
      kv::PagedKVCacheAdapter a(e_.cache_.get());
      a.reset_for_new_request(s.salt);
      PKV_ASSIGN_OR_RETURN(const ResumePoint rp, resume_point(s, a, nullptr));
      PKV_ASSIGN_OR_RETURN(p, a.probe_cached_prefix(s.tokens, rp.cap));
    }
    return e_.blocks_for(s.num_tokens()) - p.table_blocks - p.freed_blocks + p.idle_hit_blocks;
  }

  StatusOr<int64_t> cached_prefix_blocks(const SchedRequest& r) override {
    PKV_ASSIGN_OR_RETURN(const kv::PagedKVCacheAdapter::PrefixProbe p, probe(*as_seq(&r)));
    return static_cast<int64_t>(p.hit_blocks);
  }

  Admission admit(SchedRequest& r, int64_t /*first_slice*/) override {
    Seq* s = as_seq(&r);
    // Bind: its owner's live adapter (continuing the conversation) or a private one.
    if (!s->req.owner.empty()) {
      if (Owner* o = e_.owners_->bind(s->req.owner, s->salt, Clock::now()); o != nullptr) {
        s->owner = o;
        s->adapter = o->adapter.get();
      }
    }
    if (s->adapter == nullptr) {
      s->own_adapter = std::make_unique<kv::PagedKVCacheAdapter>(e_.cache_.get());
      s->own_adapter->reset_for_new_request(s->salt);
      s->adapter = s->own_adapter.get();
    }
    s->bound = true;
    Admission a;
    e_.bind_state(s);
    ResumePoint rp;
    if (e_.hybrid_) {
      auto r = resume_point(*s, *s->adapter, s->owner != nullptr ? s->owner->state.get() : nullptr);
      if (!r.ok()) {
        e_.unbind(s, /*keep_live=*/false);
        a.error = r.status();
        return a;
      }
      rp = std::move(*r);
    }
    auto cached = s->adapter->find_cached_prefix(s->tokens, rp.cap);
    if (cached.ok() && e_.hybrid_ && *cached != rp.cap) {
      // The probe and the hit disagree (cannot happen: same step, same
      // table); recompute from zero rather than resume at a stateless length.
      s->adapter->reset_for_new_request(s->salt);
      cached = s->adapter->find_cached_prefix(s->tokens, 0);
      rp = ResumePoint{};
    }
    if (!cached.ok()) {
      e_.unbind(s, /*keep_live=*/false);
      a.error = cached.status();
      return a;
    }
    const int64_t hot = *cached;
    if (e_.hybrid_) {
      // The state at `hot` tokens: the owner's live one as it is, a
      // checkpoint's copy, or zero.
      if (rp.checkpoint.has_value()) {
        *s->state = *e_.checkpoints_->find(*rp.checkpoint);
        ++e_.counters_.state_checkpoint_hits;
      } else if (!rp.live) {
        s->state->clear();
      } else {
        ++e_.counters_.state_live_continuations;
      }
      PKV_CHECK(s->state->length() == hot);
      e_.counters_.state_replayed_tokens += static_cast<uint64_t>(rp.chain_tokens - hot);
    }
    int64_t cold_tokens = 0;
    if (e_.cold_ != nullptr) {
      // Extend the hot hit through the cold chain (restore before prefill).
      const cold::RestoreResult rr = e_.cold_->restore(*s->adapter, s->tokens);
      cold_tokens = static_cast<int64_t>(rr.restored) * e_.cold_->block_size();
      e_.counters_.cold.restored_blocks += static_cast<uint64_t>(rr.restored);
      e_.counters_.cold.restored_tokens += static_cast<uint64_t>(cold_tokens);
    }
    const int64_t total = s->num_tokens();
    if (Status st = s->adapter->allocate_suffix_blocks(total); !st.ok()) {
      // The probe said it fits; only a refused pool growth (memory cap) gets here.
      e_.unbind(s, /*keep_live=*/true);
      a.outcome = AdmitOutcome::kNoRoom;
      return a;
    }
    s->computed = s->adapter->num_tokens();
    // Prefix-table counters of admitted requests only.
    const int64_t b = e_.cache_->block_size();
    PoolStats& pool = e_.counters_.pool;
    ++pool.lookups;
    pool.lookup_blocks += static_cast<uint64_t>(std::max<int64_t>(0, (total - 1) / b));
    pool.hit_blocks += static_cast<uint64_t>(s->adapter->last_hit_tokens() / b);
    pool.hit_tokens += static_cast<uint64_t>(s->adapter->last_hit_tokens());
    s->admit_cold_tokens = cold_tokens;
    a.outcome = AdmitOutcome::kAdmitted;
    a.cached_tokens = hot + cold_tokens;
    return a;
  }

  bool grow(SchedRequest& r, int64_t tokens) override {
    return as_seq(&r)->adapter->allocate_suffix_blocks(tokens).ok();
  }

  void release(SchedRequest& r) override { e_.unbind(as_seq(&r), /*keep_live=*/false); }

  bool reclaim(const SchedRequest& r) override {
    const Seq& s = *as_seq(&r);
    if (e_.owners_->expire_lru(s.bound ? s.owner : continued_owner(s))) {
      ++e_.counters_.owners_expired;
      return true;
    }
    e_.relieve_pressure();
    return false;
  }

 private:
  // Where a hybrid request resumes: `cap` tokens (the prefix hit is capped
  // there), from the owner's live state (`live`), from the checkpoint keyed
  // `checkpoint`, or from zero. `chain_tokens` is what the K/V chain alone
  // would serve. Attention-only models: no cap. No side effects.
  struct ResumePoint {
    int64_t cap = INT64_MAX;
    bool live = false;
    std::optional<kv::BlockKey> checkpoint;
    int64_t chain_tokens = 0;
  };
  StatusOr<ResumePoint> resume_point(const Seq& s, const kv::PagedKVCacheAdapter& a,
                                     const model::RecurrentState* live_state) const {
    ResumePoint rp;
    if (!e_.hybrid_) return rp;
    PKV_ASSIGN_OR_RETURN(const kv::PagedKVCacheAdapter::PrefixProbe p,
                         a.probe_cached_prefix(s.tokens));
    rp.chain_tokens = p.cached_tokens;
    // A kept-live owner whose history the prompt extends continues from its
    // live state (which has consumed exactly that history).
    const std::span<const int32_t> hist = a.tokens();
    const int64_t h = static_cast<int64_t>(hist.size());
    if (a.kept_live() && live_state != nullptr && h > 0 && live_state->length() == h &&
        h < s.num_tokens() && std::equal(hist.begin(), hist.end(), s.tokens.begin())) {
      rp.cap = h;
      rp.live = true;
      rp.chain_tokens = std::max(rp.chain_tokens, h);
      return rp;
    }
    // Else the deepest block boundary with both the K/V chain and a checkpoint.
    rp.cap = 0;
    const int64_t b = e_.cache_->block_size();
    for (int64_t k = static_cast<int64_t>(p.keys.size()); k >= 1; --k) {
      if (k * b > p.cached_tokens) continue;
      const kv::BlockKey& key = p.keys[static_cast<size_t>(k - 1)];
      if (e_.checkpoints_ != nullptr && e_.checkpoints_->contains(key)) {
        rp.cap = k * b;
        rp.checkpoint = key;
        break;
      }
    }
    return rp;
  }

  // The live owner a waiting request would continue, or nullptr.
  const Owner* continued_owner(const Seq& s) const {
    return s.req.owner.empty() ? nullptr : e_.owners_->continuable(s.req.owner, s.salt);
  }
  StatusOr<kv::PagedKVCacheAdapter::PrefixProbe> probe(const Seq& s) const {
    kv::PagedKVCacheAdapter p(e_.cache_.get());
    p.reset_for_new_request(s.salt);
    return p.probe_cached_prefix(s.tokens);
  }

  Impl& e_;
};

// SchedulerKV on the flat path: a request's KV is its own contiguous cache,
// so there is always room and nothing to share, reclaim or preempt.
class Engine::Impl::FlatKV final : public SchedulerKV {
 public:
  explicit FlatKV(Impl& e) : e_(e) {}
  int64_t free_blocks() const override { return INT64_MAX / 2; }
  StatusOr<int64_t> admission_cost(const SchedRequest&, int64_t) override { return int64_t{0}; }
  StatusOr<int64_t> cached_prefix_blocks(const SchedRequest&) override { return int64_t{0}; }
  Admission admit(SchedRequest& r, int64_t /*first_slice*/) override {
    Seq* s = as_seq(&r);
    if (s->flat == nullptr)
      s->flat = std::make_unique<model::FlatKVCache>(e_.model_->kv_geometry());
    s->flat->clear();
    s->computed = 0;
    s->bound = true;
    e_.bind_state(s);
    if (s->state != nullptr) s->state->clear();
    s->admit_cold_tokens = 0;
    return {AdmitOutcome::kAdmitted, 0, ok_status()};
  }
  bool grow(SchedRequest&, int64_t) override { return true; }
  void release(SchedRequest& r) override { e_.unbind(as_seq(&r), /*keep_live=*/false); }
  bool reclaim(const SchedRequest&) override { return false; }

 private:
  Impl& e_;
};

Engine::Impl::~Impl() {
  stop();
  // Unfinished requests end cancelled so no caller waits forever.
  {
    std::vector<std::unique_ptr<Seq>> pending;
    {
      std::lock_guard<std::mutex> lk(inbox_->mu);
      pending.swap(incoming_);
    }
    for (auto& s : pending) complete(s.get(), FinishReason::kCancelled, ok_status());
  }
  if (scheduler_ != nullptr) {
    while (!scheduler_->waiting().empty()) {
      Seq* s = as_seq(scheduler_->waiting().front());
      scheduler_->remove(s);
      finish_unqueued(s, FinishReason::kCancelled, ok_status());
    }
    while (!scheduler_->running().empty())
      finish(as_seq(scheduler_->running().back()), FinishReason::kCancelled);
  }
  if (owners_ != nullptr) owners_->clear();  // adapters release their blocks before the cache goes
}

Status Engine::Impl::init() {
  if (model_ == nullptr) return invalid_argument("engine: no model");
  max_batched_ = resolve_knob<int64_t>(kEnvMaxBatchedTokens, options_.max_num_batched_tokens, 2048);
  max_seqs_ = resolve_knob<int64_t>(kEnvMaxNumSeqs, options_.max_num_seqs, 64);
  const double wm = resolve_knob<double>(kEnvFreeWatermark, options_.kv_free_watermark, 0.01);
  owner_idle_timeout_s_ =
      resolve_knob<double>(kEnvOwnerIdleTimeout, options_.owner_idle_timeout_s, 600.0);
  if (max_batched_ < 1)
    return invalid_argument("max_num_batched_tokens must be >= 1, got " +
                            std::to_string(max_batched_));
  if (max_seqs_ < 1)
    return invalid_argument("max_num_seqs must be >= 1, got " + std::to_string(max_seqs_));
  if (!(wm >= 0 && wm < 1))
    return invalid_argument("kv_free_watermark must be in [0, 1), got " + std::to_string(wm));
  if (!(owner_idle_timeout_s_ >= 0)) return invalid_argument("owner_idle_timeout_s must be >= 0");

  const model::ModelConfig& mc = model_->config();
  vocab_size_ = mc.vocab_size;
  device_greedy_ = model_->samples_greedy();
  draw_cap_ = model_->draw_entries_cap();
  max_context_ = mc.max_position_embeddings;
  const model::KVGeometry& mg = model_->kv_geometry();
  // The KV path: a caller's false forces flat; otherwise env > config.json > paged.
  paged_ = options_.use_block_paged_cache.value_or(true) &&
           model::resolve_use_block_paged_cache(mc.cache);
  counters_.paged = paged_;
  hybrid_ = mg.has_recurrent_state();
  if (!paged_) {
    if (options_.persist_paged_cache.value_or(false))
      return invalid_argument(
          "persist_paged_cache needs the paged KV path, and use_block_paged_cache: false (or "
          "PAGEDKV_USE_BLOCK_PAGED_CACHE=0) selected the flat one");
    PKV_LOG(kInfo) << "engine: flat KV path (use_block_paged_cache off) max_num_batched_tokens="
                   << max_batched_ << " max_num_seqs=" << max_seqs_;
    make_scheduler();
    update_stats_snapshot();
    return ok_status();
  }
  if (CoordinatorKV::applies(mg)) return init_coordinator(wm);  // cache groups (issue #14)
  if (mg.groups.empty() || mg.groups[0].kind != model::CacheGroupKind::kFullAttention)
    return invalid_argument("engine: model '" + mc.model_type +
                            "' does not declare a full-attention cache group first; the engine "
                            "pages exactly one full-attention group");
  for (size_t g = 1; g < mg.groups.size(); ++g) {
    if (mg.groups[g].kind != model::CacheGroupKind::kRecurrent)
      return invalid_argument("engine: model '" + mc.model_type + "' declares cache group " +
                              std::to_string(g) +
                              " that is neither its full-attention group nor recurrent state; "
                              "the engine pages one full-attention group (plus recurrent state)");
  }
  for (size_t l = 0; l < mg.layer_group.size(); ++l) {
    const int32_t g = mg.layer_group[l];
    if (g > 0 && mg.groups[static_cast<size_t>(g)].kind != model::CacheGroupKind::kRecurrent)
      return invalid_argument("engine: layer " + std::to_string(l) + " of model '" + mc.model_type +
                              "' pages KV outside group 0");
  }
  if (hybrid_) {
    StateCheckpointStore::Limits lim;
    const double mb = resolve_knob<double>(kEnvStateCheckpointMb, std::nullopt,
                                           static_cast<double>(lim.max_bytes >> 20));
    const int64_t per_owner =
        resolve_knob<int64_t>(kEnvStateCheckpointPerOwner, std::nullopt, lim.max_per_owner);
    if (!(mb >= 0 && mb < 1e9) || per_owner < 1 || per_owner > INT32_MAX)
      return invalid_argument(std::string(kEnvStateCheckpointMb) + " must be >= 0 and " +
                              kEnvStateCheckpointPerOwner + " >= 1, got " + std::to_string(mb) +
                              " and " + std::to_string(per_owner));
    lim.max_bytes = static_cast<size_t>(mb * 1048576.0);
    lim.max_per_owner = static_cast<int32_t>(per_owner);
    // 0 MiB turns checkpoints off: hybrids then recompute every prompt from zero.
    if (mb > 0) checkpoints_ = std::make_unique<StateCheckpointStore>(lim);
  }
  if (options_.pool_max_blocks) {
    kv::PoolBudget budget;
    budget.geometry = pool_geometry(mg);
    PKV_RETURN_IF_ERROR(budget.geometry.validate());
    budget.bytes_per_block = budget.geometry.bytes_per_block();
    budget.max_blocks = *options_.pool_max_blocks;
    budget.initial_blocks = options_.pool_initial_blocks.value_or(budget.max_blocks);
    if (budget.max_blocks < 2 || budget.initial_blocks < 2 ||
        budget.initial_blocks > budget.max_blocks)
      return invalid_argument(
          "pool_max_blocks/pool_initial_blocks must satisfy 2 <= initial <= max");
    budget.dynamic = budget.initial_blocks < budget.max_blocks;
    budget.initial_bytes = budget.bytes_per_block * static_cast<uint64_t>(budget.initial_blocks);
    budget.max_bytes = budget.bytes_per_block * static_cast<uint64_t>(budget.max_blocks);
    budget.effective_window_tokens =
        static_cast<int64_t>(budget.max_blocks - 1) * budget.geometry.block_size;
    PKV_ASSIGN_OR_RETURN(cache_, kv::PagedKVCache::create(budget, kv_storage_for(*model_)));
  } else {
    // The same sizing `pagedkv generate` uses: env > these options > config.json > default.
    kv::PoolBudgetConfig pc;
    pc.paged_cache_memory_mb = options_.paged_cache_memory_mb;
    pc.paged_cache_initial_memory_mb = options_.paged_cache_initial_memory_mb;
    PKV_ASSIGN_OR_RETURN(cache_, make_paged_cache(*model_, pc));
  }
  pool_slots_ = pool_layer_slots(mg);  // only layers with K/V have pool storage
  capture_continue_ = resolve_knob<bool>(kEnvCaptureContinue, std::nullopt, true);
  same_step_sharing_ =
      resolve_knob<bool>(kEnvSameStepSharing, options_.same_step_prefix_sharing, true);
  ColdTierOptions co;
  co.persist = options_.persist_paged_cache;
  co.dir = options_.cold_cache_dir;
  co.quota_mb = options_.cold_cache_quota_mb;
  co.metrics_dir = options_.metrics_dir;
  const std::string model_dir = options_.model_dir.value_or(mc.source_path);
  // Persistence is declined (with the reason in EngineStats::cold when asked for)
  // for a model with more cache groups — the cold tier stores one full-attention
  // group's blocks and no recurrent state. A pool in device memory persists too:
  // the walks copy blocks through KVBuffer::read_to_host / write_from_host.
  std::string decline;
  if (mg.groups.size() != 1 || hybrid_) {
    decline = "model '" + mc.model_type + "' keeps " + std::to_string(mg.groups.size()) +
              " cache groups" + (hybrid_ ? " (recurrent state)" : "") +
              "; the cold tier persists a single full-attention group only, so persistence is "
              "declined for this family";
  }
  if (!decline.empty()) {
    const Status declined = failed_precondition("cold tier: " + decline);
    if (ColdTierRuntime::persist_requested(model_dir, co)) {
      PKV_LOG(kWarn) << declined.to_string();
      counters_.cold.open_errors = 1;
      counters_.cold.open_error = declined.to_string();
    }
  } else if (!model_dir.empty() || co.persist.value_or(false)) {
    Status cold_open_error;
    PKV_ASSIGN_OR_RETURN(
        cold_, ColdTierRuntime::open_if_enabled(*model_, model_dir, co, &cold_open_error));
    if (!cold_open_error.ok()) {
      counters_.cold.open_errors = 1;
      counters_.cold.open_error = cold_open_error.to_string();
    }
  }
  watermark_blocks_ = std::max<int64_t>(
      1, static_cast<int64_t>(std::floor(wm * static_cast<double>(cache_->max_blocks() - 1))));
  if (wm == 0) watermark_blocks_ = 0;
  PKV_LOG(kInfo) << "engine: max_num_batched_tokens=" << max_batched_
                 << " max_num_seqs=" << max_seqs_ << " watermark_blocks=" << watermark_blocks_
                 << " owner_idle_timeout_s=" << owner_idle_timeout_s_
                 << " max_concurrent_sequences=" << max_concurrent_sequences();
  make_scheduler();
  update_stats_snapshot();
  return ok_status();
}

// Cache groups (issue #14): the coordinator path's init (coordinator_kv.h). No
// cold tier: persistence is declined with a message in EngineStats::cold.
Status Engine::Impl::init_coordinator(double wm) {
  CoordinatorKV::Options o;
  o.max_live_rows = static_cast<int32_t>(std::min<int64_t>(max_seqs_, INT32_MAX));
  o.pool_max_blocks = options_.pool_max_blocks;
  o.pool_initial_blocks = options_.pool_initial_blocks;
  o.memory.paged_cache_memory_mb = options_.paged_cache_memory_mb;
  o.memory.paged_cache_initial_memory_mb = options_.paged_cache_initial_memory_mb;
  if (o.pool_max_blocks && (*o.pool_max_blocks < 2 || o.pool_initial_blocks.value_or(2) < 2 ||
                            o.pool_initial_blocks.value_or(2) > *o.pool_max_blocks))
    return invalid_argument("pool_max_blocks/pool_initial_blocks must satisfy 2 <= initial <= max");
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<CoordinatorKV> ck, CoordinatorKV::create(*model_, o));
  coord_ = ck.get();
  kv_ = std::move(ck);
  // The caller's flag, else the env knob (config.json's field is not read here:
  // the tier stays off either way).
  const bool persist = options_.persist_paged_cache.value_or(
      resolve_knob<bool>("PAGEDKV_PERSIST_PAGED_CACHE", std::nullopt, false));
  if (persist) {
    counters_.cold.open_errors = 1;
    counters_.cold.open_error =
        "persist_paged_cache declined: '" + model_->config().model_type +
        "' has a sliding-window cache group, and the cold tier restores only single-group models "
        "(the sliding-window sidecar is a later issue); running without the disk tier";
    PKV_LOG(kWarn) << "engine: " << counters_.cold.open_error;
  }
  same_step_sharing_ =
      resolve_knob<bool>(kEnvSameStepSharing, options_.same_step_prefix_sharing, true);
  watermark_blocks_ =
      wm == 0 ? 0
              : std::max<int64_t>(1, static_cast<int64_t>(std::floor(
                                         wm * static_cast<double>(coord_->usable_blocks()))));
  PKV_LOG(kInfo) << "engine: cache groups through the KVCacheCoordinator ("
                 << coord_->coordinator().num_groups()
                 << " groups) max_num_batched_tokens=" << max_batched_
                 << " max_num_seqs=" << max_seqs_ << " watermark_blocks=" << watermark_blocks_
                 << " max_concurrent_sequences=" << max_concurrent_sequences();
  make_scheduler();
  update_stats_snapshot();
  return ok_status();
}

void Engine::Impl::make_scheduler() {
  SchedulerConfig c;
  c.max_num_batched_tokens = max_batched_;
  c.max_num_seqs = std::min<int64_t>(max_seqs_, max_concurrent_sequences());
  owners_ = coord_ != nullptr ? std::make_unique<OwnerRegistry>(&coord_->coordinator())
                              : std::make_unique<OwnerRegistry>(cache_.get());
  if (coord_ != nullptr) {  // cache groups (issue #14): kv_ is the CoordinatorKV
    coord_->set_owners(owners_.get(), [](const SchedRequest& r) -> const std::string& {
      return as_seq(&r)->req.owner;
    });
    c.block_size = coord_->block_size();
    c.usable_blocks = coord_->usable_blocks();
    c.watermark_blocks = watermark_blocks_;
    c.same_step_sharing = same_step_sharing_;
  } else if (paged_) {
    c.block_size = cache_->block_size();
    c.usable_blocks = cache_->max_blocks() - 1;
    c.watermark_blocks = watermark_blocks_;
    c.same_step_sharing = same_step_sharing_;
    kv_ = std::make_unique<PagedKV>(*this);
  } else {
    c.block_size = std::max<int64_t>(1, model_->kv_geometry().block_size);
    kv_ = std::make_unique<FlatKV>(*this);
  }
  scheduler_ = std::make_unique<Scheduler>(c);
}

int32_t Engine::Impl::max_concurrent_sequences() const {
  if (!paged_) return static_cast<int32_t>(max_seqs_);
  if (coord_ != nullptr) return coord_->max_concurrent_sequences();  // cache groups
  const int64_t usable = static_cast<int64_t>(cache_->max_blocks()) - 1 - watermark_blocks_;
  return static_cast<int32_t>(std::max<int64_t>(1, std::min<int64_t>(max_seqs_, usable)));
}

// ---------------------------------------------------------------------------
// Caller-side API (any thread).

StatusOr<RequestHandlePtr> Engine::Impl::submit(GenerateRequest req) {
  auto reject = [&](Status s) -> StatusOr<RequestHandlePtr> {
    std::lock_guard<std::mutex> lk(stats_mu_);
    ++snapshot_.rejected;
    ++rejected_;
    return s;
  };
  if (!req.messages_json.empty()) {
    if (!req.prompt.empty())
      return reject(
          invalid_argument("request: give either prompt token ids or messages_json, not both"));
    if (!options_.formatter)
      return reject(
          invalid_argument("request: messages_json given but no chat formatter is configured "
                           "(EngineOptions::formatter); send prompt token ids"));
    auto rendered = options_.formatter(req.messages_json);
    if (!rendered.ok()) return reject(rendered.status().with_context("request: messages_json"));
    req.prompt = std::move(*rendered);
  }
  if (req.prompt.empty()) return reject(invalid_argument("request: the prompt is empty"));
  for (size_t i = 0; i < req.prompt.size(); ++i) {
    if (req.prompt[i] < 0 || req.prompt[i] >= vocab_size_)
      return reject(invalid_argument(
          "request: prompt token " + std::to_string(i) + " (id " + std::to_string(req.prompt[i]) +
          ") is outside the vocabulary of " + std::to_string(vocab_size_)));
  }
  if (Status s = req.sampling.validate(); !s.ok())
    return reject(s.with_context("request: sampling"));
  const int64_t plen = static_cast<int64_t>(req.prompt.size());
  if (max_context_ > 0 && plen > max_context_)
    return reject(invalid_argument("request: the prompt has " + std::to_string(plen) +
                                   " tokens, more than the model's max_position_embeddings (" +
                                   std::to_string(max_context_) + ")"));
  const int64_t usable = paged_ ? kv_usable_blocks() : INT64_MAX;
  if (paged_ && blocks_for(plen) > usable)
    return reject(resource_exhausted(
        "request: the prompt of " + std::to_string(plen) + " tokens needs " +
        std::to_string(blocks_for(plen)) + " KV blocks of " + std::to_string(kv_block_size()) +
        " tokens, but the largest pool holds " + std::to_string(usable) + " usable blocks (" +
        std::to_string(usable * kv_block_size()) +
        " tokens); raise paged_cache_memory_mb or shorten the prompt"));
  auto seq = std::make_unique<Seq>();
  if (!req.cache_salt.empty()) {
    auto salt = kv::salt_domain(req.cache_salt);
    if (!salt.ok()) return reject(salt.status().with_context("request: cache_salt"));
    seq->salt = *salt;
  }
  seq->id = next_id_.fetch_add(1);
  std::weak_ptr<Inbox> weak = inbox_;
  seq->handle = internal::HandleAccess::make(seq->id, [weak] {
    if (auto in = weak.lock()) in->notify();
  });
  seq->stop_ids = req.sampling.stop_token_ids;
  if (!req.ignore_eos) {
    for (int32_t e : model_->config().eos_token_ids) seq->stop_ids.push_back(e);
  }
  seq->prompt_len = plen;
  seq->tokens = req.prompt;
  seq->req = std::move(req);
  seq->req.prompt.clear();
  seq->req.prompt.shrink_to_fit();
  seq->submit_time = Clock::now();
  RequestHandlePtr handle = seq->handle;
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    live_[seq->id] = handle;
    incoming_.push_back(std::move(seq));
    inbox_->wake = true;
  }
  inbox_->cv.notify_all();
  return handle;
}

bool Engine::Impl::cancel(uint64_t id) {
  RequestHandlePtr h;
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    auto it = live_.find(id);
    if (it == live_.end()) return false;
    h = it->second.lock();
  }
  if (h == nullptr || h->done()) return false;
  h->cancel();
  return true;
}

void Engine::Impl::release_owner(const std::string& owner) {
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    inbox_->owner_releases.push_back(owner);
    inbox_->wake = true;
  }
  inbox_->cv.notify_all();
}

void Engine::Impl::start() {
  if (thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    inbox_->stop = false;
  }
  thread_ = std::thread([this] { loop(); });
}

void Engine::Impl::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    inbox_->stop = true;
  }
  inbox_->cv.notify_all();
  thread_.join();
}

void Engine::Impl::loop() {
  for (;;) {
    {
      std::unique_lock<std::mutex> lk(inbox_->mu);
      if (inbox_->stop) return;
      if (!has_work() && incoming_.empty() && inbox_->owner_releases.empty() && !inbox_->wake) {
        // Idle: wake for new work, or now and then to expire idle owners.
        const auto idle = std::chrono::milliseconds(
            owners_->empty()
                ? 1000
                : std::clamp<int64_t>(static_cast<int64_t>(owner_idle_timeout_s_ * 250), 1, 1000));
        inbox_->cv.wait_for(lk, idle, [&] {
          return inbox_->stop || inbox_->wake || !incoming_.empty() ||
                 !inbox_->owner_releases.empty();
        });
        if (inbox_->stop) return;
      }
      inbox_->wake = false;
    }
    step();
  }
}

// ---------------------------------------------------------------------------
// The step (step thread).

void Engine::Impl::drain_inbox(StepReport* rep) {
  std::vector<std::unique_ptr<Seq>> in;
  std::vector<std::string> releases;
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    in.swap(incoming_);
    releases.swap(inbox_->owner_releases);
  }
  for (const std::string& key : releases) owners_->request_release(key);
  for (auto& s : in) {
    ++counters_.submitted;
    if (s->req.sampling.max_tokens == 0 && !s->req.return_prompt_logits) {
      complete(s.get(), FinishReason::kLength, ok_status());
      ++rep->finished;
      continue;
    }
    Seq* p = s.get();
    seqs_.emplace(p->id, std::move(s));
    scheduler_->add(p);
  }
}

void Engine::Impl::process_cancellations(StepReport* rep) {
  const std::vector<SchedRequest*> running = scheduler_->running();
  for (SchedRequest* r : running) {
    if (as_seq(r)->handle->cancel_requested()) {
      finish(as_seq(r), FinishReason::kCancelled);
      ++rep->finished;
    }
  }
  const std::deque<SchedRequest*> waiting = scheduler_->waiting();
  for (SchedRequest* r : waiting) {
    if (as_seq(r)->handle->cancel_requested()) {
      scheduler_->remove(r);
      finish_unqueued(as_seq(r), FinishReason::kCancelled, ok_status());
      ++rep->finished;
    }
  }
}

void Engine::Impl::unbind(Seq* s, bool keep_live) {
  // A hybrid's state goes with its K/V: kept for a live owner's next turn,
  // else dropped (a preempted request recomputes it).
  if (s->state != nullptr && !(keep_live && s->owner != nullptr)) s->state->clear();
  s->state = nullptr;
  if (coord_ != nullptr) {  // cache groups (issue #14): tables go back, or stay live (owner)
    coord_->end_turn(*s, keep_live);
    s->bound = false;
    return;
  }
  if (s->flat != nullptr) {
    s->flat->clear();  // the flat path keeps nothing between requests
    s->bound = false;
    s->computed = 0;
    return;
  }
  if (s->owner != nullptr) {
    owners_->unbind(s->owner, keep_live, Clock::now());
    s->owner = nullptr;
  } else if (s->own_adapter != nullptr) {
    s->own_adapter->release_request();
    s->own_adapter.reset();
  }
  s->adapter = nullptr;
  s->bound = false;
  s->computed = 0;
}

void Engine::Impl::note_admission(Seq* s, int64_t cached, bool resumed) {
  if (resumed) {
    // A resume after preemption: the re-hit blocks are reported separately.
    s->result.usage.resumed_cached_tokens += cached;
    counters_.resumed_cached_tokens += static_cast<uint64_t>(cached);
    return;
  }
  PKV_CHECK(!s->admitted_once);  // only a preempted request is admitted again
  s->admitted_once = true;
  Usage& u = s->result.usage;
  u.prompt_tokens = s->prompt_len;
  u.cached_prompt_tokens = std::min(cached, s->prompt_len);
  u.cached_prompt_tokens_cold = std::min(s->admit_cold_tokens, u.cached_prompt_tokens);
  u.cached_prompt_tokens_hot = u.cached_prompt_tokens - u.cached_prompt_tokens_cold;
  s->restored_tokens = u.cached_prompt_tokens_cold;
  if (s->handle) internal::HandleAccess::note_admitted(*s->handle, u.cached_prompt_tokens);
  s->result.timings.queue_ms = ms_between(s->submit_time, Clock::now());
  s->prompt_logits_next = s->computed;
  s->result.prompt_logits_first = s->computed;
  counters_.prompt_tokens += static_cast<uint64_t>(s->prompt_len);
  counters_.cached_prompt_tokens += static_cast<uint64_t>(u.cached_prompt_tokens);
  counters_.cached_prompt_tokens_hot += static_cast<uint64_t>(u.cached_prompt_tokens_hot);
  counters_.cached_prompt_tokens_cold += static_cast<uint64_t>(u.cached_prompt_tokens_cold);
}

void Engine::Impl::apply_plan(const SchedulerOutput& plan, StepReport* rep) {
  for (SchedRequest* r : plan.preempted) {
    ++as_seq(r)->result.preemptions;
    ++counters_.preemptions;
    ++rep->preempted;
  }
  if (plan.waited_for_leader) ++counters_.prefix_share_waits;
  for (const SchedulerOutput::Admitted& a : plan.admitted)
    note_admission(as_seq(a.req), a.cached_tokens, a.resumed);
  for (const SchedulerOutput::Failed& f : plan.failed) {
    finish_unqueued(as_seq(f.req), FinishReason::kError, f.error);
    ++rep->finished;
  }
}

void Engine::Impl::bind_state(Seq* s) {
  if (!hybrid_) return;
  const model::KVGeometry& g = model_->kv_geometry();
  if (s->owner != nullptr) {
    if (s->owner->state == nullptr) s->owner->state = std::make_unique<model::RecurrentState>(g);
    s->state = s->owner->state.get();
  } else {
    if (s->own_state == nullptr) s->own_state = std::make_unique<model::RecurrentState>(g);
    s->state = s->own_state.get();
  }
  // The checkpoint target: the largest full block strictly before the prompt
  // end. The slice that crosses it ends there so the state can be copied.
  const int64_t b = paged_ ? cache_->block_size() : 0;
  s->slice_stop = checkpoints_ != nullptr && b > 0 ? (s->prompt_len - 1) / b * b : 0;
}

void Engine::Impl::publish_checkpoint(Seq* s) {
  // After a forward that ended at a block boundary inside the prompt: the
  // state there, keyed by the block before it (prefix, salt and all).
  const int64_t b = cache_->block_size();
  const int64_t n = s->computed;
  if (s->state == nullptr || n == 0 || n % b != 0 || n >= s->prompt_len) return;
  PKV_CHECK(s->state->length() == n);
  const std::span<const kv::BlockKey> keys = s->adapter->block_keys();
  if (static_cast<int64_t>(keys.size()) < n / b) return;
  const uint64_t owner =
      s->req.owner.empty() ? s->id : std::hash<std::string>{}(s->req.owner) | (1ull << 63);
  checkpoints_->put(keys[static_cast<size_t>(n / b - 1)], owner, *s->state);
}

void Engine::Impl::capture_turn(Seq* s) {
  // Persist the turn's full blocks (prompt and completion) before they are
  // released: within the capture budget on this thread
  // (ColdTierWalk::capture_chain), and the rest by the continuation thread after
  // the turn ends — its blocks pinned here (one reference each, so they are
  // neither evicted nor rewritten) until it reports done. Pool pressure (a
  // request that does not fit, a decode that needs a block) cancels running
  // continuations, and their pins are released at the next step.
  const int64_t cap = capture_continue_ ? (cache_->max_blocks() - 1) - pinned_blocks_ : int64_t{0};
  cold::CaptureContinuation rest;
  const cold::CaptureResult c = cold_->capture_and_end_turn(
      *s->adapter, s->restored_tokens, &rest, static_cast<int32_t>(std::max<int64_t>(0, cap)));
  ++counters_.cold.capture_turns;
  counters_.cold.captured_blocks += static_cast<uint64_t>(c.walked);
  if (rest.empty()) return;
  std::vector<kv::BlockId> pins = rest.blocks;
  for (kv::BlockId b : pins) cache_->allocator().acquire(b);
  pinned_blocks_ += static_cast<int64_t>(pins.size());
  counters_.cold.continued_turns += 1;
  const uint64_t job = cold_->continue_capture(std::move(rest));
  capture_pins_.emplace(job, std::move(pins));
}

void Engine::Impl::release_finished_pins() {
  if (cold_ == nullptr || capture_pins_.empty()) return;
  for (uint64_t job : cold_->take_finished()) {
    auto it = capture_pins_.find(job);
    if (it == capture_pins_.end()) continue;
    cache_->allocator().release_blocks(it->second);
    pinned_blocks_ -= static_cast<int64_t>(it->second.size());
    capture_pins_.erase(it);
  }
}

void Engine::Impl::finish(Seq* s, FinishReason reason, Status error) {
  PKV_CHECK(scheduler_->remove(s));
  if (cold_ != nullptr && s->adapter != nullptr && reason != FinishReason::kError) capture_turn(s);
  unbind(s, /*keep_live=*/reason != FinishReason::kError);
  finish_unqueued(s, reason, std::move(error));
}

void Engine::Impl::finish_unqueued(Seq* s, FinishReason reason, Status error) {
  complete(s, reason, std::move(error));
  seqs_.erase(s->id);  // frees s
}

void Engine::Impl::complete(Seq* s, FinishReason reason, Status error) {
  if (s->bound) unbind(s, reason != FinishReason::kError);
  const auto now = Clock::now();
  RequestResult& r = s->result;
  r.finish_reason = reason;
  if (reason == FinishReason::kError) {
    r.error = error.ok() ? (r.error.ok() ? internal_error("request failed") : r.error) : error;
  } else {
    r.error = ok_status();
  }
  r.tokens.assign(s->tokens.begin() + s->prompt_len, s->tokens.end());
  r.usage.prompt_tokens = s->prompt_len;
  r.usage.completion_tokens = s->completion();
  if (!s->admitted_once) r.timings.queue_ms = ms_between(s->submit_time, now);
  r.timings.total_ms = ms_between(s->submit_time, now);
  if (s->completion() > 0) r.timings.decode_ms = ms_between(s->first_token_time, now);
  ++counters_.finished;
  if (reason == FinishReason::kCancelled) ++counters_.cancelled;
  if (reason == FinishReason::kError) ++counters_.errors;
  {
    std::lock_guard<std::mutex> lk(inbox_->mu);
    live_.erase(s->id);
  }
  internal::HandleAccess::finish(*s->handle, std::move(r));
}

StepReport Engine::Impl::step() {
  StepReport rep;
  const auto step_start = Clock::now();  // counted for steps that run rows
  auto count_step = [&] { counters_.step_ms += ms_between(step_start, Clock::now()); };
  release_finished_pins();
  drain_inbox(&rep);
  process_cancellations(&rep);
  counters_.owners_expired +=
      static_cast<uint64_t>(owners_->expire_idle(Clock::now(), owner_idle_timeout_s_));

  const SchedulerOutput plan = scheduler_->schedule(*kv_);
  apply_plan(plan, &rep);
  const std::vector<SchedulerOutput::Row>& sched = plan.rows;
  if (sched.empty()) {
    update_stats_snapshot();
    return rep;
  }

  // One forward over every scheduled row.
  model::ForwardBatch batch;
  batch.path = paged_ ? model::KVPath::kPaged : model::KVPath::kFlat;
  std::optional<PoolKVBlockStore> store;  // per step: the pool may have grown
  if (coord_ != nullptr) {
    batch.kv_store = coord_->store();  // cache groups (issue #14)
  } else if (paged_) {
    store.emplace(cache_->pool(), pool_slots_);
    batch.kv_store = &*store;
  }
  batch.rows.reserve(sched.size());
  int32_t prompt_tokens = 0;                                           // of the prompt rows
  step_draws_.assign(draw_cap_ > 0 ? sched.size() : 0, SeededDraw{});  // rows point into it
  for (const SchedulerOutput::Row& sc : sched) {
    Seq* s = as_seq(sc.req);
    const bool last = s->computed + sc.num_tokens == static_cast<int64_t>(s->tokens.size());
    // Prompt logits: every position of a slice that still covers the prompt.
    const bool all = s->req.return_prompt_logits && s->computed < s->prompt_len;
    model::ForwardRow& row =
        batch.add_row(std::span<const int32_t>(s->tokens.data() + s->computed,
                                               static_cast<size_t>(sc.num_tokens)),
                      static_cast<int32_t>(s->computed),
                      all ? model::LogitsRequest::kAll
                          : (last ? model::LogitsRequest::kLast : model::LogitsRequest::kNone));
    if (coord_ != nullptr) {
      coord_->add_block_tables(*s, &row);  // cache groups: one table per group
    } else if (paged_) {
      row.block_tables.push_back(s->adapter->block_table());
    } else {
      row.flat = s->flat.get();
    }
    row.state = s->state;
    // Greedy rows that want no logits: a device model may pick the token itself
    // (engine::argmax's rule) and keep the logits row on its device.
    row.greedy_only = device_greedy_ && last && !all && !s->prefill_only() &&
                      s->req.sampling.temperature <= 0 && !s->req.return_logits;
    // Seeded rows that want no logits: a device model may finish the draw from
    // the row's best entries (the same token: sample_token_from_best).
    if (draw_cap_ > 0 && last && !all && !s->prefill_only() && s->req.sampling.temperature > 0 &&
        !s->req.return_logits) {
      SeededDraw& d = step_draws_[batch.rows.size() - 1];
      d.params = &s->req.sampling;
      d.position = static_cast<int64_t>(s->tokens.size());
      d.vocab = static_cast<size_t>(vocab_size_);
      d.cap = draw_cap_;
      row.draw = &d;
    }
    if (s->is_decode()) {
      ++rep.decode_rows;
    } else {
      ++rep.prefill_rows;
      prompt_tokens += sc.num_tokens;
    }
  }
  rep.rows = static_cast<int32_t>(batch.rows.size());
  rep.tokens = batch.num_tokens();
  model::ForwardOutput& out = step_out_;
  out.tokens.clear();
  const auto t0 = Clock::now();
  Status st = model_->forward(batch, &out);
  const double forward_ms = ms_between(t0, Clock::now());
  counters_.forward_ms += forward_ms;
  ++counters_.steps;
  counters_.forward_tokens += static_cast<uint64_t>(rep.tokens);
  if (rep.prefill_rows > 0) {
    ++counters_.prompt_steps;
    counters_.prompt_step_prompt_tokens += static_cast<uint64_t>(prompt_tokens);
    counters_.prompt_forward_ms += forward_ms;
  } else {
    ++counters_.decode_steps;
    counters_.decode_step_tokens += static_cast<uint64_t>(rep.tokens);
    counters_.decode_forward_ms += forward_ms;
  }
  if (!st.ok()) {
    PKV_LOG(kError) << "engine: forward failed: " << st.to_string();
    for (const SchedulerOutput::Row& sc : sched)
      finish(as_seq(sc.req), FinishReason::kError, st.with_context("forward"));
    rep.finished += static_cast<int32_t>(sched.size());
    count_step();
    update_stats_snapshot();
    return rep;
  }

  // Sample first, every row at once: a row samples when this step reaches its
  // last position. A token the model picked (on, or from the best entries of, the
  // device) is taken as it is; the other rows draw with sample_token, a pure function
  // of (logits row, params, position) with per-thread scratch, so they run on the CPU
  // backend's threads (issue 11: 32 rows × a 152k vocabulary) and each token is the
  // one a serial loop draws — and a step whose tokens all came from the device (the
  // CUDA decode graph) opens no thread-pool region at all. The loop below commits
  // them in row order as before.
  std::vector<int32_t>& drawn = step_tokens_;
  std::vector<int64_t>& drawn_pos = step_token_pos_;
  drawn.assign(sched.size(), -1);
  drawn_pos.assign(sched.size(), -1);
  const auto sample_start = Clock::now();
  bool host_draws = false;
  for (size_t r = 0; r < sched.size(); ++r) {
    const Seq* s = as_seq(sched[r].req);
    if (s->computed + sched[r].num_tokens != static_cast<int64_t>(s->tokens.size()) ||
        s->prefill_only())
      continue;
    drawn_pos[r] = static_cast<int64_t>(s->tokens.size());
    if ((batch.rows[r].greedy_only || batch.rows[r].draw != nullptr) && r < out.tokens.size() &&
        out.tokens[r] >= 0)
      drawn[r] = out.tokens[r];
    else
      host_draws = true;
  }
  if (host_draws)
    backend::cpu_backend().parallel_for(
        static_cast<int64_t>(sched.size()), backend::grain_for_work(vocab_size_),
        [&](int64_t begin, int64_t end) {
          for (int64_t r = begin; r < end; ++r) {
            const size_t i = static_cast<size_t>(r);
            if (drawn_pos[i] < 0 || drawn[i] >= 0) continue;  // no draw, or the model's
            drawn[i] =
                sample_token(out.last_logits(i), as_seq(sched[i].req)->req.sampling, drawn_pos[i]);
          }
        });
  counters_.sample_ms += ms_between(sample_start, Clock::now());

  // Record K/V, stream, finish.
  const auto now = Clock::now();
  for (size_t r = 0; r < sched.size(); ++r) {
    Seq* s = as_seq(sched[r].req);
    const std::span<const int32_t> fed(s->tokens.data() + s->computed,
                                       static_cast<size_t>(sched[r].num_tokens));
    if (coord_ != nullptr) {
      Status rs = coord_->record_tokens(*s, fed);  // cache groups: every group advances
      PKV_CHECK_MSG(rs.ok(), rs.to_string().c_str());
    } else if (paged_) {
      Status rs = s->adapter->record_tokens(fed);
      PKV_CHECK_MSG(rs.ok(), rs.to_string().c_str());
    }
    const int64_t first = s->computed;
    s->computed += sched[r].num_tokens;
    if (checkpoints_ != nullptr && paged_) publish_checkpoint(s);
    if (batch.rows[r].logits == model::LogitsRequest::kAll) {
      // Keep each prompt position's row once (a recompute after preemption
      // produces the same bits; the rows already kept are skipped).
      for (int32_t i = 0; i < sched[r].num_tokens; ++i) {
        const int64_t pos = first + i;
        if (pos != s->prompt_logits_next || pos >= s->prompt_len) continue;
        const std::span<const float> row = out.row_logits(r, i);
        s->result.prompt_logits.insert(s->result.prompt_logits.end(), row.begin(), row.end());
        ++s->prompt_logits_next;
      }
    }
    if (s->computed != static_cast<int64_t>(s->tokens.size())) continue;
    if (s->prefill_only()) {
      if (s->prompt_logits_next != s->prompt_len) {
        finish(s, FinishReason::kError,
               internal_error("request: prompt logits from position " +
                              std::to_string(s->prompt_logits_next) +
                              " were served from the cache after a preemption"));
      } else {
        finish(s, FinishReason::kLength);
      }
      ++rep.finished;
      continue;
    }
    const std::span<const float> logits = out.last_logits(r);
    const int64_t pos = static_cast<int64_t>(s->tokens.size());
    const int32_t tok = drawn_pos[r] == pos ? drawn[r] : sample_token(logits, s->req.sampling, pos);
    s->tokens.push_back(tok);
    if (s->req.return_logits) s->result.logits.emplace_back(logits.begin(), logits.end());
    if (s->completion() == 1) {
      s->first_token_time = now;
      s->result.timings.ttft_ms = ms_between(s->submit_time, now);
    }
    s->result.token_ms.push_back(ms_between(s->submit_time, now));
    ++counters_.completion_tokens;
    if (s->req.on_token) s->req.on_token(tok);
    internal::HandleAccess::push_token(*s->handle, tok);

    FinishReason fr = FinishReason::kNone;
    if (std::find(s->stop_ids.begin(), s->stop_ids.end(), tok) != s->stop_ids.end()) {
      fr = FinishReason::kStop;
    } else {
      for (const auto& seq : s->req.stop_sequences) {
        const size_t n = seq.size();
        if (n > 0 && static_cast<int64_t>(n) <= s->completion() &&
            std::equal(seq.begin(), seq.end(), s->tokens.end() - static_cast<ptrdiff_t>(n))) {
          fr = FinishReason::kStop;
          break;
        }
      }
    }
    if (fr == FinishReason::kNone &&
        (s->completion() >= s->req.sampling.max_tokens ||
         (max_context_ > 0 && static_cast<int64_t>(s->tokens.size()) >= max_context_)))
      fr = FinishReason::kLength;
    if (fr != FinishReason::kNone) {
      finish(s, fr);
      ++rep.finished;
    }
  }
  // A step with many logits rows (prompt logits of a long prompt) does not pin
  // its buffer for the engine's lifetime.
  const size_t keep = std::max<size_t>(
      kKeepLogitsFloats, static_cast<size_t>(max_seqs_) * static_cast<size_t>(vocab_size_));
  if (out.logits.capacity() > keep) std::vector<float>().swap(out.logits);
  count_step();
  update_stats_snapshot();
  return rep;
}

int64_t Engine::Impl::run_until_idle(int64_t max_steps) {
  int64_t n = 0;
  for (; n < max_steps; ++n) {
    bool inbox_empty;
    {
      std::lock_guard<std::mutex> lk(inbox_->mu);
      inbox_empty = incoming_.empty() && inbox_->owner_releases.empty();
    }
    if (!has_work() && inbox_empty) break;
    step();
  }
  return n;
}

void Engine::Impl::update_stats_snapshot() {
  EngineStats s = counters_;
  s.running = static_cast<int32_t>(scheduler_->running().size());
  s.waiting = static_cast<int32_t>(scheduler_->waiting().size());
  s.live_owners = static_cast<int32_t>(owners_->size());
  if (coord_ != nullptr) {
    coord_->fill_pool_stats(&s.pool);  // cache groups: summed over the groups
    s.owners_expired += coord_->owners_expired();
  } else if (paged_) {
    const kv::BlockAllocator& a = cache_->allocator();
    s.pool.num_blocks = cache_->num_blocks();
    s.pool.max_blocks = cache_->max_blocks();
    s.pool.used_blocks = a.num_used_blocks();
    s.pool.free_blocks = a.num_free_blocks();
    s.pool.cached_blocks = a.num_free_cached_blocks();
    s.pool.block_size = cache_->block_size();
    s.pool.evictions = a.stats().evictions;
    s.pool.grow_events = cache_->stats().grow_events;
  } else {
    s.pool.block_size = model_->kv_geometry().block_size;
  }
  if (cold_ != nullptr) {
    const cold::ColdCacheStats c = cold_->stats();
    s.cold.enabled = true;
    s.cold.root = c.root;
    s.cold.quota_bytes = c.quota_bytes;
    s.cold.hits = c.hits;
    s.cold.misses = c.misses;
    s.cold.corruptions = c.corruptions;
    s.cold.queue_drops = c.queue_drops;
    s.cold.enqueued = c.enqueued;
    s.cold.bytes_written = c.bytes_written;
    s.cold.write_errors = c.write_errors;
    s.cold.evictions = c.evictions;
    s.cold.restore_declines = c.restore_declines;
    s.cold.reads = c.reads;
    s.cold.continued_blocks = cold_->continued_blocks();
    s.cold.pinned_blocks = pinned_blocks_;
    s.cold.bytes_restored = c.bytes_restored;
  }
  if (checkpoints_ != nullptr) {
    const StateCheckpointStore::Stats& c = checkpoints_->stats();
    s.state_checkpoints_stored = static_cast<uint64_t>(c.stored);
    s.state_checkpoints_evicted = static_cast<uint64_t>(c.evicted_global + c.evicted_owner);
    s.state_checkpoint_bytes = c.bytes;
  }
  std::lock_guard<std::mutex> lk(stats_mu_);
  s.rejected = rejected_;
  snapshot_ = s;
}

EngineStats Engine::Impl::stats() const {
  std::lock_guard<std::mutex> lk(stats_mu_);
  return snapshot_;
}

Status Engine::Impl::check_invariants() const {
  if (!paged_) {
    for (const SchedRequest* r : scheduler_->running()) {
      const Seq* s = as_seq(r);
      if (s->flat == nullptr || s->flat->length() != s->computed)
        return internal_error("request " + std::to_string(s->id) +
                              ": its flat cache does not hold its computed tokens");
    }
    return ok_status();
  }
  if (coord_ != nullptr)
    return coord_->check_invariants(scheduler_->running(), scheduler_->waiting());
  const kv::BlockAllocator& a = cache_->allocator();
  PKV_RETURN_IF_ERROR(a.verify_integrity());
  std::vector<int32_t> holders(static_cast<size_t>(a.num_blocks()), 0);
  auto count = [&](const kv::PagedKVCacheAdapter& ad) {
    for (kv::BlockId b : ad.block_table()) ++holders[static_cast<size_t>(b)];
  };
  for (const SchedRequest* r : scheduler_->running()) {
    const Seq* s = as_seq(r);
    if (s->adapter == nullptr) return internal_error("running request without an adapter");
    if (s->adapter->num_tokens() != s->computed)
      return internal_error("request " + std::to_string(s->id) + ": computed " +
                            std::to_string(s->computed) + " != adapter tokens " +
                            std::to_string(s->adapter->num_tokens()));
    if (s->owner == nullptr) count(*s->adapter);
  }
  for (const SchedRequest* r : scheduler_->waiting()) {
    if (as_seq(r)->adapter != nullptr)
      return internal_error("waiting request still holds an adapter");
  }
  owners_->for_each([&](const Owner& o) { count(*o.adapter); });
  for (const auto& [job, pins] : capture_pins_)
    for (kv::BlockId b : pins) ++holders[static_cast<size_t>(b)];
  for (int32_t b = 1; b < a.num_blocks(); ++b) {
    if (a.refcount(b) != holders[static_cast<size_t>(b)])
      return internal_error(
          "block " + std::to_string(b) + " has refcount " + std::to_string(a.refcount(b)) +
          " but " + std::to_string(holders[static_cast<size_t>(b)]) + " block tables hold it");
  }
  return ok_status();
}

int32_t Engine::Impl::held_blocks() const {
  if (coord_ != nullptr) return coord_->held_blocks();
  return paged_ ? cache_->allocator().num_used_blocks() : 0;
}

// ---------------------------------------------------------------------------
// Engine: forwards to Impl.

Engine::Engine(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Engine::~Engine() = default;

StatusOr<std::unique_ptr<Engine>> Engine::open(const std::string& model_dir,
                                               const EngineOptions& options) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<model::Model> m, model::load_model(model_dir));
  EngineOptions opts = options;
  if (!opts.model_dir) opts.model_dir = model_dir;
  if (!opts.formatter) {
    // The model's own chat template + tokenizer render messages_json when present.
    auto f = make_chat_formatter_for_dir(model_dir);
    if (f.ok()) {
      opts.formatter = std::move(*f);
    } else if (f.status().code() != StatusCode::kNotFound) {
      PKV_LOG(kWarn) << "engine: no chat formatter for " << model_dir << ": "
                     << f.status().to_string() << " (requests must carry token ids)";
    }
  }
  return create(std::shared_ptr<model::Model>(std::move(m)), opts);
}

StatusOr<std::unique_ptr<Engine>> Engine::create(std::shared_ptr<model::Model> model,
                                                 const EngineOptions& options) {
  auto impl = std::make_unique<Impl>(std::move(model), options);
  PKV_RETURN_IF_ERROR(impl->init());
  return std::unique_ptr<Engine>(new Engine(std::move(impl)));
}

StatusOr<RequestHandlePtr> Engine::submit(GenerateRequest request) {
  return impl_->submit(std::move(request));
}
bool Engine::cancel(uint64_t id) { return impl_->cancel(id); }
void Engine::release_owner(const std::string& owner) { impl_->release_owner(owner); }
void Engine::start() { impl_->start(); }
void Engine::stop() { impl_->stop(); }
bool Engine::running() const { return impl_->running(); }
StepReport Engine::step() {
  PKV_CHECK_MSG(!impl_->running(), "Engine::step() while the step loop runs on its own thread");
  return impl_->step();
}
int64_t Engine::run_until_idle(int64_t max_steps) {
  PKV_CHECK_MSG(!impl_->running(), "Engine::run_until_idle() while the step loop runs");
  return impl_->run_until_idle(max_steps);
}
EngineStats Engine::stats() const { return impl_->stats(); }
int32_t Engine::max_concurrent_sequences() const { return impl_->max_concurrent_sequences(); }
int32_t Engine::max_num_batched_tokens() const { return impl_->max_num_batched_tokens(); }
Status Engine::check_invariants() const { return impl_->check_invariants(); }
int32_t Engine::held_blocks() const { return impl_->held_blocks(); }
const model::Model& Engine::model() const { return impl_->model(); }
bool Engine::paged() const { return impl_->paged(); }
void Engine::flush_cold_tier() {
  impl_->flush_cold_tier();
  if (!impl_->running()) impl_->release_pins_now();
}

}  // namespace pagedkv::engine
