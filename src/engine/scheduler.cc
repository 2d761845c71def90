// Scheduler: one step's decisions over block counts (scheduler.h; the policy
// is described in docs/engine.md, "One step").
#include "engine/scheduler.h"

#include <algorithm>
#include <string>

#include "util/check.h"

namespace pagedkv::engine {

bool Scheduler::remove(SchedRequest* r) {
  if (auto it = std::find(running_.begin(), running_.end(), r); it != running_.end()) {
    running_.erase(it);
    return true;
  }
  if (auto it = std::find(waiting_.begin(), waiting_.end(), r); it != waiting_.end()) {
    waiting_.erase(it);
    return true;
  }
  return false;
}

void Scheduler::insert_running(SchedRequest* r) {
  auto it = std::upper_bound(running_.begin(), running_.end(), r->id,
                             [](uint64_t id, const SchedRequest* p) { return id < p->id; });
  running_.insert(it, r);
}

void Scheduler::preempt(SchedRequest* v, SchedulerKV& kv, SchedulerOutput* out) {
  auto pos = std::find(running_.begin(), running_.end(), v);
  PKV_CHECK(pos != running_.end());
  running_.erase(pos);
  // A decode row planned earlier this step (a later prefill slice preempts it).
  std::erase_if(out->rows, [v](const SchedulerOutput::Row& row) { return row.req == v; });
  // Every block goes back, keys kept: published prompt and completion blocks
  // stay hittable until evicted, and the resume re-hits them.
  kv.release(*v);
  v->preempted = true;
  out->preempted.push_back(v);
  // Back to the head of the queue, behind older preempted requests.
  auto it = waiting_.begin();
  while (it != waiting_.end() && (*it)->preempted && (*it)->id < v->id) ++it;
  waiting_.insert(it, v);
}

bool Scheduler::ensure_blocks(SchedRequest* s, int64_t tokens, SchedulerKV& kv,
                              SchedulerOutput* out) {
  for (;;) {
    if (kv.grow(*s, tokens)) return true;
    if (kv.reclaim(*s)) continue;
    SchedRequest* victim = running_.back();
    if (victim != s) {
      preempt(victim, kv, out);
      continue;
    }
    if (running_.size() > 1) {
      preempt(s, kv, out);
      return false;
    }
    // Alone and still short: no preemption can make room.
    running_.pop_back();
    kv.release(*s);
    out->failed.push_back(
        {s, resource_exhausted("request: its context of " + std::to_string(tokens) +
                               " tokens needs more KV blocks than the pool holds (" +
                               std::to_string(config_.usable_blocks) + " blocks of " +
                               std::to_string(config_.block_size) + " tokens)")});
    return false;
  }
}

// Same-step prefix sharing: a request whose prompt shares at least one more full
// block with a running request that has NOT computed those blocks yet than the
// prefix table holds now waits (at the head of the queue) until that leader
// has computed and published them, then hits them instead of computing them
// again. N requests that arrive together with a common uncached prefix (a burst
// of chats with one system prompt) compute it once. The leader is running, so
// it makes progress every step; the wait ends when it publishes, finishes or is
// preempted.
bool Scheduler::wait_for_leader(const SchedRequest& s, SchedulerKV& kv) const {
  if (!config_.same_step_sharing || running_.empty()) return false;
  const int64_t b = config_.block_size;
  const int64_t limit = (s.num_tokens() - 1) / b;  // hittable blocks
  if (limit == 0) return false;
  int64_t shared_uncomputed = 0;
  for (const SchedRequest* r : running_) {
    if (r->salt != s.salt || r->computed >= r->prompt_len) continue;
    const size_t n = std::min(s.tokens.size(), static_cast<size_t>(r->prompt_len));
    size_t lcp = 0;
    while (lcp < n && s.tokens[lcp] == r->tokens[lcp]) ++lcp;
    const int64_t blocks = std::min<int64_t>(static_cast<int64_t>(lcp) / b, limit);
    if (blocks * b > r->computed) shared_uncomputed = std::max(shared_uncomputed, blocks);
  }
  if (shared_uncomputed == 0) return false;
  const StatusOr<int64_t> hit = kv.cached_prefix_blocks(s);
  return hit.ok() && *hit < shared_uncomputed;
}

SchedulerOutput Scheduler::schedule(SchedulerKV& kv) {
  SchedulerOutput out;
  int64_t budget = config_.max_num_batched_tokens;

  // 1. Decode rows, oldest first; a row short of a block reclaims or preempts.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SchedRequest* s = running_[i];
    if (!s->is_decode()) {
      ++i;
      continue;
    }
    if (!ensure_blocks(s, s->computed + 1, kv, &out)) continue;  // index i now holds the next
    out.rows.push_back({s, 1});
    --budget;
    ++i;
  }
  // 2. Prefill slices of running requests, oldest first. Each grows its
  // request's blocks to the slice's end first (a no-op unless a group reserves
  // slice by slice); short of blocks it reclaims or preempts like a decode row,
  // and a preempted decode row planned above gives its token back.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    SchedRequest* s = running_[i];
    if (s->is_decode()) {
      ++i;
      continue;
    }
    const int64_t n = s->next_slice(budget);
    const bool kept = ensure_blocks(s, s->computed + n, kv, &out);
    budget = config_.max_num_batched_tokens;
    for (const SchedulerOutput::Row& row : out.rows) budget -= row.num_tokens;
    if (!kept) continue;  // index i now holds the next
    out.rows.push_back({s, n});
    budget -= n;
    ++i;
  }
  // 3. Admission, FCFS: the head is never leapfrogged.
  while (budget > 0 && !waiting_.empty() &&
         static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    SchedRequest* s = waiting_.front();
    if (wait_for_leader(*s, kv)) {
      out.waited_for_leader = true;
      break;
    }
    SchedulerKV::Admission a;
    if (blocks_for(s->num_tokens()) > config_.usable_blocks) {
      // (a preempted request whose completion outgrew the pool)
      a.error = resource_exhausted("request: its context of " + std::to_string(s->num_tokens()) +
                                   " tokens needs more KV blocks than the pool holds (" +
                                   std::to_string(config_.usable_blocks) + ")");
    } else {
      // It must fit beside the watermark kept for running decodes; idle blocks
      // are reclaimed (LRU) until it does or nothing is left to reclaim.
      const int64_t reserve = running_.empty() ? 0 : config_.watermark_blocks;
      bool fits = false;
      for (;;) {
        const StatusOr<int64_t> cost = kv.admission_cost(*s, budget);
        if (!cost.ok()) {
          a.error = cost.status();
          break;
        }
        fits = *cost <= kv.free_blocks() - reserve;
        if (fits || !kv.reclaim(*s)) break;
      }
      if (a.error.ok() && !fits) break;  // no room: wait for running requests to end
      if (fits) {
        a = kv.admit(*s, budget);
        if (a.outcome == SchedulerKV::AdmitOutcome::kNoRoom) break;
      }
    }
    waiting_.pop_front();
    if (a.outcome != SchedulerKV::AdmitOutcome::kAdmitted) {
      out.failed.push_back(
          {s, a.error.ok() ? internal_error("request: admission failed") : std::move(a.error)});
      continue;
    }
    out.admitted.push_back({s, a.cached_tokens, s->preempted});
    s->preempted = false;
    const int64_t n = s->next_slice(budget);
    out.rows.push_back({s, n});
    budget -= n;
    insert_running(s);
  }
  return out;
}

}  // namespace pagedkv::engine
