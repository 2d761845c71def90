// Scheduler: the engine's continuous-batching policy, pure and single-threaded.
//
// It decides, once per step, which requests run and how many tokens each feeds
// the model — decode rows first (oldest first), then prefill slices of running
// requests, then FCFS admission from the waiting queue — under the step's token
// budget (max_num_batched_tokens), the number of running requests
// (max_num_seqs) and the KV blocks there are. When a decode row cannot get its
// next block it reclaims idle blocks, then preempts the NEWEST running request
// (which may be itself) and puts it back at the head of the queue; a preempted
// request is re-admitted later and recomputes what it lost. A later prefill
// slice grows its request the same way (a no-op where admission reserved the
// whole prompt; a sliding-window cache group reserves slice by slice).
//
// It knows no model, no threads, no tensors and no allocator: KV is what
// SchedulerKV answers in BLOCKS ("how many would admitting this take", "how many
// are free", "grow this one to n tokens", "release this one"). The engine
// implements SchedulerKV over the PagedKVCache, its adapters, the owner
// registry and the cold tier (engine.cc); tests implement it with a few
// counters (tests/engine/scheduler_test.cc). A KV coordinator with several cache
// groups (full, sliding window, recurrent state) answers the same questions.
//
// The scheduler keeps the queues (running: sorted by id; waiting: FCFS with
// preempted requests at the head) of SchedRequest pointers it does not own.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <optional>
#include <vector>

#include "kv/block_hasher.h"
#include "pagedkv/status.h"

namespace pagedkv::engine {

// What the scheduler knows of one request. The engine's request type derives
// from it (its KV state lives in the engine); the scheduler reads the tokens
// and sets `computed` (through SchedulerKV) and `preempted`.
struct SchedRequest {
  uint64_t id = 0;              // submission order: FCFS, and the newest is preempted first
  std::vector<int32_t> tokens;  // prompt + completion
  int64_t prompt_len = 0;
  int64_t computed = 0;  // positions whose K/V are written (0 while waiting)
  bool preempted = false;
  // The prefix-sharing domain (cache_salt); requests of different domains
  // never share blocks.
  std::optional<kv::SaltDomain> salt;
  // A prefill slice that starts before this position ends exactly there (0 =
  // none): a hybrid model copies its recurrent state at that block boundary
  // (a state checkpoint, issue #15), which only exists between two forwards.
  int64_t slice_stop = 0;

  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  int64_t pending() const { return num_tokens() - computed; }
  int64_t completion() const { return num_tokens() - prompt_len; }
  // The next input is exactly one sampled token.
  bool is_decode() const { return completion() > 0 && pending() == 1; }
  // Tokens of the next slice under `budget`: all pending ones, but never past
  // slice_stop when the slice starts before it.
  int64_t next_slice(int64_t budget) const {
    const int64_t n = std::min(pending(), budget);
    return computed < slice_stop ? std::min(n, slice_stop - computed) : n;
  }
};

// The scheduler's view of the KV cache, in blocks. Queries are side-effect
// free; grow/admit/release/reclaim change the KV state and are called only
// when the scheduler has decided to.
class SchedulerKV {
 public:
  virtual ~SchedulerKV() = default;

  // Blocks a new allocation can take now: free (unused or cached-evictable)
  // plus what the pool may still grow by.
  virtual int64_t free_blocks() const = 0;
  // Blocks admitting `r` would take out of free_blocks() (its blocks beyond
  // the prefix hit, plus hit blocks that are idle in the free queue, minus
  // blocks a rollback of its owner's live KV gives back). `first_slice`: the
  // most tokens its first prefill slice computes after the hit (a cache group
  // that frees blocks as the prefill moves on — a sliding window — need not
  // reserve past it). No side effects.
  virtual StatusOr<int64_t> admission_cost(const SchedRequest& r, int64_t first_slice) = 0;
  // Full blocks of `r`'s tokens the prefix table would serve now. No side effects.
  virtual StatusOr<int64_t> cached_prefix_blocks(const SchedRequest& r) = 0;

  enum class AdmitOutcome { kAdmitted, kNoRoom, kFailed };
  struct Admission {
    AdmitOutcome outcome = AdmitOutcome::kFailed;
    int64_t cached_tokens = 0;  // kAdmitted: tokens served from the cache (hot + cold)
    Status error;               // kFailed: why
  };
  // Binds `r` (its prefix hit, any restore, blocks for all its tokens — a
  // sliding-window group only up to the first slice of at most `first_slice`
  // tokens) and sets r.computed to the tokens it no longer needs to compute.
  // kNoRoom leaves nothing bound.
  virtual Admission admit(SchedRequest& r, int64_t first_slice) = 0;
  // Makes the running `r` hold blocks for `tokens` positions (called before
  // every decode row and every later prefill slice); false (nothing changed)
  // when there are not enough.
  virtual bool grow(SchedRequest& r, int64_t tokens) = 0;
  // Releases every block `r` holds (its published blocks stay cached, so a
  // resume re-hits them) and sets r.computed to 0.
  virtual void release(SchedRequest& r) = 0;
  // Frees blocks held by something idle (a kept-live owner that `r` would not
  // continue); true when anything was freed and the question is worth asking
  // again. When nothing is left to free it may relieve other pressure (cancel
  // background holders) and returns false.
  virtual bool reclaim(const SchedRequest& r) = 0;
};

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;  // tokens per step (decode rows + prefill)
  int64_t max_num_seqs = 64;              // running requests at once
  int64_t block_size = 16;                // tokens per KV block
  int64_t usable_blocks = INT64_MAX;      // the largest pool, null block excluded
  int64_t watermark_blocks = 0;           // admission keeps these free while any request runs
  // Same-step prefix sharing: the head of the queue waits while a running
  // request is still computing full prompt blocks the head shares with it.
  bool same_step_sharing = false;
};

// One step's decisions.
struct SchedulerOutput {
  struct Row {
    SchedRequest* req;
    int64_t num_tokens;  // fed from tokens[computed, computed + num_tokens)
  };
  // In batch order: decode rows, prefill slices of running requests, admitted
  // requests' first slices.
  std::vector<Row> rows;
  struct Admitted {
    SchedRequest* req;
    int64_t cached_tokens;  // served from the cache at this admission
    bool resumed;           // re-admitted after a preemption
  };
  std::vector<Admitted> admitted;
  std::vector<SchedRequest*> preempted;  // moved from running to the waiting queue
  struct Failed {
    SchedRequest* req;  // out of both queues, its KV released; the engine ends it
    Status error;
  };
  std::vector<Failed> failed;
  bool waited_for_leader = false;  // the head waited for a running request's blocks
};

class Scheduler {
 public:
  explicit Scheduler(const SchedulerConfig& config) : config_(config) {}

  const SchedulerConfig& config() const { return config_; }

  // A new request joins the waiting queue's tail.
  void add(SchedRequest* r) { waiting_.push_back(r); }
  // Takes `r` out of whichever queue holds it (a cancel, a finish); false when none.
  bool remove(SchedRequest* r);

  // One step's plan. Changes KV only through `kv`.
  SchedulerOutput schedule(SchedulerKV& kv);

  const std::vector<SchedRequest*>& running() const { return running_; }
  const std::deque<SchedRequest*>& waiting() const { return waiting_; }
  bool has_work() const { return !running_.empty() || !waiting_.empty(); }

  int64_t blocks_for(int64_t tokens) const {
    return (tokens + config_.block_size - 1) / config_.block_size;
  }

 private:
  // Makes the running `s` hold blocks for `tokens`: reclaim, then preempt the
  // newest running request, until it fits. False when `s` itself left the
  // running queue (preempted, or failed as the only one running).
  bool ensure_blocks(SchedRequest* s, int64_t tokens, SchedulerKV& kv, SchedulerOutput* out);
  // Moves `v` from running to the head of the waiting queue, releasing its KV;
  // a row already planned for it this step is dropped from `out`.
  void preempt(SchedRequest* v, SchedulerKV& kv, SchedulerOutput* out);
  void insert_running(SchedRequest* r);
  bool wait_for_leader(const SchedRequest& head, SchedulerKV& kv) const;

  SchedulerConfig config_;
  std::vector<SchedRequest*> running_;  // sorted by id (oldest first)
  std::deque<SchedRequest*> waiting_;
};

}  // namespace pagedkv::engine
