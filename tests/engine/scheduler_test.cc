// Scheduler tests: the engine's scheduling policy over plain block counts — no
// model, no threads, no PagedKVCache. FakeKV is a few dozen lines of
// refcounted blocks with a prefix table (keyed by the token prefix a full
// block ends), and Sim plays the model: it feeds each planned row, publishes
// the blocks that became full, appends a sampled token when a row reached its
// last position and ends requests at max_tokens. Covered: FCFS admission, the
// token and sequence budgets, chunked prefill, decode rows first, the
// watermark, the head never leapfrogged, preemption of the newest request and
// its resume with re-hit blocks reported, reclaiming idle blocks before
// preempting or giving up, requests that can never fit (clear errors),
// same-step prefix sharing, and a randomized run that checks the budgets and
// the block accounting every step.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <vector>

namespace pagedkv::engine {
namespace {

constexpr int64_t kB = 4;  // tokens per block in these tests

int64_t blocks(int64_t tokens) { return (tokens + kB - 1) / kB; }

// Blocks with refcounts and keys; a request's table is a list of block ids.
class FakeKV final : public SchedulerKV {
 public:
  explicit FakeKV(int64_t num_blocks)
      : ref_(static_cast<size_t>(num_blocks), 0),
        freed_at_(static_cast<size_t>(num_blocks), 0),
        key_(static_cast<size_t>(num_blocks)) {}

  int64_t free_blocks() const override {
    int64_t n = 0;
    for (int r : ref_) n += r == 0;
    return n - idle_owner_blocks;
  }
  StatusOr<int64_t> admission_cost(const SchedRequest& r, int64_t first_slice) override {
    ++cost_queries;
    if (cost_error.count(r.id)) return cost_error.at(r.id);
    const std::vector<int32_t> hit = hits(r);
    int64_t idle = 0;
    for (int32_t b : hit) idle += ref_[static_cast<size_t>(b)] == 0;
    return blocks(reserve_to(r, static_cast<int64_t>(hit.size()) * kB, first_slice)) -
           static_cast<int64_t>(hit.size()) + idle;
  }
  StatusOr<int64_t> cached_prefix_blocks(const SchedRequest& r) override {
    return static_cast<int64_t>(hits(r).size());
  }
  Admission admit(SchedRequest& r, int64_t first_slice) override {
    if (refuse_admit) return {AdmitOutcome::kNoRoom, 0, ok_status()};
    std::vector<int32_t>& t = table_[r.id];
    EXPECT_TRUE(t.empty()) << "request " << r.id << " admitted twice";
    t = hits(r);
    for (int32_t b : t) ++ref_[static_cast<size_t>(b)];
    r.computed = static_cast<int64_t>(t.size()) * kB;
    if (!grow(r, reserve_to(r, r.computed, first_slice))) {
      release(r);
      return {AdmitOutcome::kNoRoom, 0, ok_status()};
    }
    return {AdmitOutcome::kAdmitted, r.computed, ok_status()};
  }
  bool grow(SchedRequest& r, int64_t tokens) override {
    std::vector<int32_t>& t = table_[r.id];
    const int64_t need = blocks(tokens) - static_cast<int64_t>(t.size());
    if (need > free_blocks()) return false;
    for (int64_t i = 0; i < need; ++i) t.push_back(take_free());
    return true;
  }
  void release(SchedRequest& r) override {
    // Tail first into the LRU order, as the real allocator frees a table.
    const std::vector<int32_t>& t = table_[r.id];
    for (auto it = t.rbegin(); it != t.rend(); ++it) {
      if (--ref_[static_cast<size_t>(*it)] == 0) freed_at_[static_cast<size_t>(*it)] = ++clock_;
    }
    table_.erase(r.id);
    r.computed = 0;
    ++releases;
  }
  bool reclaim(const SchedRequest&) override {
    ++reclaim_calls;
    if (idle_owner_blocks == 0) return false;
    idle_owner_blocks = 0;
    return true;
  }

  // After the model wrote r's K/V up to r.computed: key every full block.
  void publish(const SchedRequest& r) {
    const std::vector<int32_t>& t = table_[r.id];
    for (int64_t i = 0; i < r.computed / kB; ++i) {
      const int32_t b = t[static_cast<size_t>(i)];
      if (!key_[static_cast<size_t>(b)].empty()) continue;
      std::vector<int32_t> k(r.tokens.begin(), r.tokens.begin() + (i + 1) * kB);
      if (table_by_key_.count(k)) continue;  // the same content is keyed elsewhere
      key_[static_cast<size_t>(b)] = k;
      table_by_key_[k] = b;
    }
  }
  int64_t held(uint64_t id) const {
    auto it = table_.find(id);
    return it == table_.end() ? 0 : static_cast<int64_t>(it->second.size());
  }
  // Every block's refcount equals the tables holding it.
  void expect_consistent() const {
    std::vector<int> holders(ref_.size(), 0);
    for (const auto& [id, t] : table_)
      for (int32_t b : t) ++holders[static_cast<size_t>(b)];
    EXPECT_EQ(holders, ref_);
  }

  int64_t idle_owner_blocks = 0;  // blocks an idle owner holds; reclaim() frees them
  bool refuse_admit = false;
  // Admission reserves only the first slice (as a sliding-window group does);
  // later slices grow.
  bool slice_reserve = false;
  std::map<uint64_t, Status> cost_error;
  int reclaim_calls = 0;
  int cost_queries = 0;
  int releases = 0;

 private:
  int64_t reserve_to(const SchedRequest& r, int64_t computed, int64_t first_slice) const {
    return slice_reserve ? std::min(r.num_tokens(), computed + first_slice) : r.num_tokens();
  }
  std::vector<int32_t> hits(const SchedRequest& r) const {
    std::vector<int32_t> out;
    const int64_t limit = (r.num_tokens() - 1) / kB;
    for (int64_t i = 0; i < limit; ++i) {
      std::vector<int32_t> k(r.tokens.begin(), r.tokens.begin() + (i + 1) * kB);
      auto it = table_by_key_.find(k);
      if (it == table_by_key_.end()) break;
      out.push_back(it->second);
    }
    return out;
  }
  int32_t take_free() {
    // Unkeyed free blocks first, then evict the least recently freed keyed one.
    int32_t keyed = -1;
    for (size_t b = 0; b < ref_.size(); ++b) {
      if (ref_[b] != 0) continue;
      if (key_[b].empty()) {
        ++ref_[b];
        return static_cast<int32_t>(b);
      }
      if (keyed < 0 || freed_at_[b] < freed_at_[static_cast<size_t>(keyed)])
        keyed = static_cast<int32_t>(b);
    }
    EXPECT_GE(keyed, 0);
    table_by_key_.erase(key_[static_cast<size_t>(keyed)]);
    key_[static_cast<size_t>(keyed)].clear();
    ++ref_[static_cast<size_t>(keyed)];
    return keyed;
  }

  std::vector<int> ref_;
  std::vector<int64_t> freed_at_;
  int64_t clock_ = 0;
  std::vector<std::vector<int32_t>> key_;
  std::map<std::vector<int32_t>, int32_t> table_by_key_;
  std::map<uint64_t, std::vector<int32_t>> table_;
};

// Plays the model and the engine's bookkeeping around a Scheduler.
struct Sim {
  Sim(const SchedulerConfig& c, int64_t num_blocks) : sched(c), kv(num_blocks) {}

  SchedRequest* submit(std::vector<int32_t> prompt, int64_t max_tokens) {
    auto r = std::make_unique<SchedRequest>();
    r->id = next_id++;
    r->prompt_len = static_cast<int64_t>(prompt.size());
    r->tokens = std::move(prompt);
    max_tokens_[r->id] = max_tokens;
    SchedRequest* p = r.get();
    reqs.push_back(std::move(r));
    sched.add(p);
    return p;
  }

  // One step: plan, then feed every row, sample, finish.
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule(kv);
    for (const auto& f : out.failed) failed.push_back(f.req->id);
    for (const auto& a : out.admitted) {
      if (a.resumed)
        resumed_cached[a.req->id] += a.cached_tokens;
      else
        first_cached[a.req->id] = a.cached_tokens;
    }
    int64_t tokens = 0;
    for (const auto& row : out.rows) {
      SchedRequest* r = row.req;
      tokens += row.num_tokens;
      EXPECT_GE(row.num_tokens, 1);
      EXPECT_LE(row.num_tokens, r->pending());
      // The scheduler made room: the table covers what this row writes.
      EXPECT_GE(kv.held(r->id) * kB, r->computed + row.num_tokens) << "request " << r->id;
      r->computed += row.num_tokens;
      kv.publish(*r);
      if (r->computed < r->num_tokens()) continue;
      r->tokens.push_back(static_cast<int32_t>(1000 + r->completion()));
      if (r->completion() >= max_tokens_[r->id]) {
        EXPECT_TRUE(sched.remove(r));
        kv.release(*r);
        finished.push_back(r->id);
      }
    }
    EXPECT_LE(tokens, sched.config().max_num_batched_tokens);
    EXPECT_LE(static_cast<int64_t>(sched.running().size()), sched.config().max_num_seqs);
    kv.expect_consistent();
    return out;
  }

  std::vector<uint64_t> row_ids(const SchedulerOutput& out) const {
    std::vector<uint64_t> ids;
    for (const auto& row : out.rows) ids.push_back(row.req->id);
    return ids;
  }
  std::vector<int64_t> row_sizes(const SchedulerOutput& out) const {
    std::vector<int64_t> n;
    for (const auto& row : out.rows) n.push_back(row.num_tokens);
    return n;
  }
  SchedRequest* get(uint64_t id) { return reqs[id - 1].get(); }

  Scheduler sched;
  FakeKV kv;
  uint64_t next_id = 1;
  std::vector<std::unique_ptr<SchedRequest>> reqs;
  std::map<uint64_t, int64_t> max_tokens_;
  std::vector<uint64_t> finished, failed;
  std::map<uint64_t, int64_t> first_cached, resumed_cached;
};

SchedulerConfig config(int64_t budget, int64_t seqs, int64_t usable, int64_t watermark = 0) {
  SchedulerConfig c;
  c.max_num_batched_tokens = budget;
  c.max_num_seqs = seqs;
  c.block_size = kB;
  c.usable_blocks = usable;
  c.watermark_blocks = watermark;
  return c;
}

std::vector<int32_t> prompt(int n, int32_t base) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (int i = 0; i < n; ++i) v[static_cast<size_t>(i)] = base + i;
  return v;
}

TEST(SchedulerTest, AdmitsFcfsAndFeedsWholePromptsWithinTheBudget) {
  Sim sim(config(100, 8, 64), 64);
  sim.submit(prompt(5, 0), 3);
  sim.submit(prompt(7, 100), 3);
  sim.submit(prompt(3, 200), 3);
  SchedulerOutput out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(sim.row_sizes(out), (std::vector<int64_t>{5, 7, 3}));
  ASSERT_EQ(out.admitted.size(), 3u);
  EXPECT_FALSE(out.admitted[0].resumed);
  // Then one decode row each, oldest first.
  out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(sim.row_sizes(out), (std::vector<int64_t>{1, 1, 1}));
  sim.step();
  EXPECT_EQ(sim.finished, (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_FALSE(sim.sched.has_work());
}

TEST(SchedulerTest, ChunksAPrefillByTheTokenBudget) {
  Sim sim(config(8, 8, 64), 64);
  sim.submit(prompt(20, 0), 2);
  EXPECT_EQ(sim.row_sizes(sim.step()), (std::vector<int64_t>{8}));
  EXPECT_EQ(sim.row_sizes(sim.step()), (std::vector<int64_t>{8}));
  SchedulerOutput last = sim.step();
  EXPECT_EQ(sim.row_sizes(last), (std::vector<int64_t>{4}));
  EXPECT_EQ(sim.get(1)->completion(), 1);  // the last slice sampled
  EXPECT_EQ(sim.row_sizes(sim.step()), (std::vector<int64_t>{1}));
  EXPECT_EQ(sim.finished, (std::vector<uint64_t>{1}));
}

TEST(SchedulerTest, APrefillSliceEndsExactlyAtItsSliceStop) {
  // A hybrid's checkpoint boundary: the slice that crosses it ends there (the
  // state is copied between the two forwards); the budget is not the reason.
  Sim sim(config(100, 8, 64), 64);
  SchedRequest* r = sim.submit(prompt(11, 0), 2);
  r->slice_stop = 8;
  EXPECT_EQ(sim.row_sizes(sim.step()), (std::vector<int64_t>{8}));
  EXPECT_EQ(r->computed, 8);
  EXPECT_EQ(sim.row_sizes(sim.step()), (std::vector<int64_t>{3}));  // past the stop: whole
  EXPECT_EQ(r->completion(), 1);
  // Under a smaller budget the stop still ends its slice; a slice starting at
  // or after the stop is not cut.
  Sim small(config(5, 8, 64), 64);
  SchedRequest* q = small.submit(prompt(13, 0), 1);
  q->slice_stop = 8;
  EXPECT_EQ(small.row_sizes(small.step()), (std::vector<int64_t>{5}));
  EXPECT_EQ(small.row_sizes(small.step()), (std::vector<int64_t>{3}));
  EXPECT_EQ(small.row_sizes(small.step()), (std::vector<int64_t>{5}));
  EXPECT_EQ(small.finished, (std::vector<uint64_t>{1}));
  // A running request's later slice (not the admission slice) stops there too.
  Sim two(config(4, 8, 64), 64);
  SchedRequest* a = two.submit(prompt(9, 0), 1);
  a->slice_stop = 6;
  EXPECT_EQ(two.row_sizes(two.step()), (std::vector<int64_t>{4}));
  EXPECT_EQ(two.row_sizes(two.step()), (std::vector<int64_t>{2}));
  EXPECT_EQ(two.row_sizes(two.step()), (std::vector<int64_t>{3}));
}

// Where admission reserves only the first slice, each later slice grows its
// request first; short of blocks it preempts the newest running request, whose
// decode row planned earlier in the step is dropped (its token budget too).
TEST(SchedulerTest, ALaterPrefillSliceGrowsAndMayPreemptAPlannedDecodeRow) {
  Sim sim(config(12, 4, 5), 5);
  sim.kv.slice_reserve = true;
  SchedRequest* a = sim.submit(prompt(18, 0), 2);
  a->slice_stop = 8;  // leaves room in step 1 for b
  SchedRequest* b = sim.submit(prompt(3, 500), 5);
  SchedulerOutput out = sim.step();
  EXPECT_EQ(sim.row_sizes(out), (std::vector<int64_t>{8, 3}));
  EXPECT_EQ(sim.kv.held(a->id), 3);  // the first slice's budget (12 tokens), not 18
  EXPECT_EQ(sim.kv.held(b->id), 1);
  // Step 2: b decodes, then a's last 10 tokens need 2 more blocks; 1 is free.
  out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1}));
  EXPECT_EQ(sim.row_sizes(out), (std::vector<int64_t>{10}));
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], b);
  EXPECT_EQ(sim.kv.held(a->id), 5);
  EXPECT_EQ(sim.kv.held(b->id), 0);
  // Both finish in the end.
  for (int i = 0; i < 50 && sim.finished.size() < 2; ++i) sim.step();
  EXPECT_EQ(sim.finished.size(), 2u);
  EXPECT_TRUE(sim.failed.empty());
}

TEST(SchedulerTest, DecodeRowsComeFirstThenPrefillThenAdmission) {
  Sim sim(config(6, 8, 64), 64);
  sim.submit(prompt(3, 0), 10);  // decodes from step 2
  sim.step();
  sim.submit(prompt(9, 100), 10);  // prefills in slices
  SchedulerOutput out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(sim.row_sizes(out), (std::vector<int64_t>{1, 5}));
  sim.submit(prompt(2, 200), 10);
  out = sim.step();
  // Decode of 1, the rest of 2's prompt (4), then 3 gets what is left (1).
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2, 3}));
  EXPECT_EQ(sim.row_sizes(out), (std::vector<int64_t>{1, 4, 1}));
}

TEST(SchedulerTest, ASpentBudgetLeavesTheRestForTheNextStep) {
  Sim sim(config(2, 8, 64), 64);
  for (int i = 0; i < 3; ++i) sim.submit(prompt(1, 10 * i), 5);
  SchedulerOutput out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2}));
  out = sim.step();
  // Two decode rows fill the budget: 3 is not admitted yet.
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(sim.sched.waiting().size(), 1u);
}

TEST(SchedulerTest, MaxNumSeqsCapsTheRunningRequests) {
  Sim sim(config(100, 2, 64), 64);
  for (int i = 0; i < 3; ++i) sim.submit(prompt(2, 10 * i), 2);
  SchedulerOutput out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(sim.sched.running().size(), 2u);
  sim.step();  // 1 and 2 finish
  EXPECT_EQ(sim.finished.size(), 2u);
  out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{3}));
}

TEST(SchedulerTest, TheHeadIsNeverLeapfrogged) {
  Sim sim(config(100, 8, 10), 10);
  sim.submit(prompt(16, 0), 20);  // 4 blocks, then grows while decoding
  sim.step();
  sim.submit(prompt(28, 100), 2);  // 7 blocks: does not fit beside request 1
  sim.submit(prompt(2, 200), 2);   // 1 block: would fit, but waits behind the head
  SchedulerOutput out = sim.step();
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1}));
  EXPECT_TRUE(out.admitted.empty());
  EXPECT_EQ(sim.sched.waiting().front()->id, 2u);
  EXPECT_EQ(sim.sched.waiting().size(), 2u);
}

TEST(SchedulerTest, TheWatermarkIsKeptOnlyWhileSomethingRuns) {
  // 4 blocks; the watermark keeps 1 free while a request runs.
  Sim sim(config(100, 8, 4, /*watermark=*/1), 4);
  sim.submit(prompt(16, 0), 1);  // 4 blocks: admitted into an idle pool, ends at once
  SchedulerOutput out = sim.step();
  EXPECT_EQ(out.admitted.size(), 1u);
  EXPECT_EQ(sim.finished.size(), 1u);
  sim.submit(prompt(4, 100), 3);  // 1 block
  sim.submit(prompt(4, 200), 3);  // 1 block
  out = sim.step();
  // Request 2 is admitted into the idle pool (3 left), then request 3 needs 1
  // of the 3 beside the watermark: both run.
  EXPECT_EQ(out.admitted.size(), 2u);
  Sim tight(config(100, 8, 2, /*watermark=*/1), 2);
  tight.submit(prompt(4, 0), 5);
  tight.submit(prompt(4, 100), 5);
  out = tight.step();
  ASSERT_EQ(out.admitted.size(), 1u);  // 1 free block is the watermark
  EXPECT_EQ(tight.sched.waiting().size(), 1u);
}

TEST(SchedulerTest, PreemptsTheNewestAndResumesWithReHitBlocksReported) {
  // 6 blocks. Two requests of 8 tokens (2 blocks each) decode until the pool
  // runs out; the newest is preempted, and its published blocks are re-hit at
  // its resume.
  Sim sim(config(100, 8, 6), 6);
  SchedRequest* a = sim.submit(prompt(8, 0), 8);
  SchedRequest* b = sim.submit(prompt(8, 100), 8);
  sim.step();                        // both prefill (2 blocks each) and sample
  SchedulerOutput out = sim.step();  // 9 tokens each: 3 blocks each, pool full
  EXPECT_TRUE(out.preempted.empty());
  // At 13 tokens request 1 needs a 4th block and none is free: the newest goes.
  for (int i = 0; i < 4 && out.preempted.empty(); ++i) out = sim.step();
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], b);
  EXPECT_TRUE(b->preempted);
  EXPECT_EQ(b->computed, 0);
  EXPECT_EQ(sim.kv.held(b->id), 0);
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1}));
  EXPECT_EQ(sim.sched.waiting().front(), b);
  const int64_t b_tokens = b->num_tokens();
  // Run until b is back.
  while (sim.resumed_cached.count(b->id) == 0) {
    ASSERT_TRUE(sim.sched.has_work());
    sim.step();
  }
  EXPECT_FALSE(b->preempted);
  // It had published 3 full blocks (12 tokens); request 1's growth evicted the
  // tail one (freed first), and the resume re-hits the other two, reported as
  // resumed tokens, not as first-admission hits.
  EXPECT_EQ(b_tokens, 13);
  EXPECT_EQ(sim.resumed_cached[b->id], 8);
  EXPECT_EQ(sim.first_cached[b->id], 0);
  while (sim.sched.has_work()) sim.step();
  EXPECT_EQ(sim.finished, (std::vector<uint64_t>{a->id, b->id}));
  EXPECT_EQ(a->completion(), 8);
  EXPECT_EQ(b->completion(), 8);
}

TEST(SchedulerTest, PreemptedRequestsQueueOldestFirstAtTheHead) {
  // Three decoding requests and no spare block: the oldest's growth preempts
  // 3, then 2; they wait at the head in id order, ahead of a newer submission.
  Sim sim(config(100, 8, 3), 3);
  for (int i = 0; i < 3; ++i) sim.submit(prompt(3, 10 * i), 10);
  sim.step();  // 3 tokens + 1 sampled each
  sim.submit(prompt(1, 500), 1);
  SchedulerOutput out = sim.step();  // 4 tokens still fit one block each
  EXPECT_TRUE(out.preempted.empty());
  out = sim.step();  // 1 needs a 2nd block: 3 goes, then 2 (now the newest) itself
  ASSERT_EQ(out.preempted.size(), 2u);
  EXPECT_EQ(out.preempted[0]->id, 3u);
  EXPECT_EQ(out.preempted[1]->id, 2u);
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1}));
  ASSERT_GE(sim.sched.waiting().size(), 3u);
  EXPECT_EQ(sim.sched.waiting()[0]->id, 2u);
  EXPECT_EQ(sim.sched.waiting()[1]->id, 3u);
  EXPECT_EQ(sim.sched.waiting()[2]->id, 4u);
}

TEST(SchedulerTest, ReclaimsIdleBlocksBeforePreempting) {
  Sim sim(config(100, 8, 4), 4);
  sim.submit(prompt(4, 0), 3);
  sim.submit(prompt(4, 100), 3);
  sim.step();
  sim.kv.idle_owner_blocks = 2;  // an idle owner holds the two free blocks
  EXPECT_EQ(sim.kv.free_blocks(), 0);
  SchedulerOutput out = sim.step();  // both need a 2nd block
  EXPECT_TRUE(out.preempted.empty());
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(sim.kv.idle_owner_blocks, 0);
}

TEST(SchedulerTest, ReclaimsIdleBlocksBeforeGivingUpOnAdmission) {
  Sim sim(config(100, 8, 4), 4);
  sim.kv.idle_owner_blocks = 3;
  sim.submit(prompt(8, 0), 1);  // 2 blocks; only 1 free until the owner goes
  SchedulerOutput out = sim.step();
  EXPECT_EQ(out.admitted.size(), 1u);
  EXPECT_GE(sim.kv.reclaim_calls, 1);
}

TEST(SchedulerTest, NoRoomLeavesTheRequestWaitingWithoutSideEffects) {
  Sim sim(config(100, 8, 4), 4);
  sim.submit(prompt(12, 0), 5);  // 3 blocks, a 4th at its first decode
  sim.step();
  sim.submit(prompt(4, 100), 1);
  SchedulerOutput out = sim.step();
  EXPECT_TRUE(out.admitted.empty());
  EXPECT_TRUE(out.failed.empty());
  EXPECT_EQ(sim.kv.held(2), 0);
  EXPECT_EQ(sim.sched.waiting().size(), 1u);
  // admit() itself may refuse (a pool growth the memory cap denies).
  Sim refused(config(100, 8, 4), 4);
  refused.kv.refuse_admit = true;
  refused.submit(prompt(4, 0), 1);
  out = refused.step();
  EXPECT_TRUE(out.rows.empty());
  EXPECT_EQ(refused.sched.waiting().size(), 1u);
}

TEST(SchedulerTest, APromptLargerThanThePoolFailsWithAClearError) {
  Sim sim(config(100, 8, 4), 4);
  sim.submit(prompt(17, 0), 1);  // 5 blocks > 4
  sim.submit(prompt(4, 100), 1);
  SchedulerOutput out = sim.step();
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0].req->id, 1u);
  EXPECT_EQ(out.failed[0].error.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(out.failed[0].error.message().find("context of 17 tokens"), std::string::npos)
      << out.failed[0].error.to_string();
  EXPECT_NE(out.failed[0].error.message().find("(4)"), std::string::npos);
  // The failure does not block the queue.
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{2}));
}

TEST(SchedulerTest, ARequestThatOutgrowsThePoolAloneFailsWithAClearError) {
  Sim sim(config(100, 8, 2), 2);
  SchedRequest* r = sim.submit(prompt(7, 0), 10);
  sim.step();                        // 7 + 1 sampled
  sim.step();                        // 8 tokens still fit 2 blocks
  SchedulerOutput out = sim.step();  // the 9th token needs a 3rd block
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0].req, r);
  EXPECT_EQ(out.failed[0].error.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(out.failed[0].error.message().find("context of 9 tokens"), std::string::npos)
      << out.failed[0].error.to_string();
  EXPECT_NE(out.failed[0].error.message().find("2 blocks of 4 tokens"), std::string::npos);
  EXPECT_TRUE(out.rows.empty());
  EXPECT_FALSE(sim.sched.has_work());
  EXPECT_EQ(sim.kv.held(r->id), 0);
}

TEST(SchedulerTest, AnAdmissionProbeErrorFailsThatRequestOnly) {
  Sim sim(config(100, 8, 8), 8);
  sim.kv.cost_error[1] = invalid_argument("probe: bad tokens");
  sim.submit(prompt(4, 0), 1);
  sim.submit(prompt(4, 100), 1);
  SchedulerOutput out = sim.step();
  ASSERT_EQ(out.failed.size(), 1u);
  EXPECT_EQ(out.failed[0].error.message(), "probe: bad tokens");
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{2}));
}

TEST(SchedulerTest, SameStepSharingWaitsForTheLeaderToPublish) {
  SchedulerConfig c = config(12, 8, 64);
  c.same_step_sharing = true;
  Sim sim(c, 64);
  std::vector<int32_t> system = prompt(16, 0);  // 4 shared blocks
  std::vector<int32_t> p1 = system, p2 = system;
  p1.push_back(900);
  p2.push_back(901);
  sim.submit(p1, 1);
  sim.submit(p2, 1);
  // Step 1: the leader takes the whole budget (12 tokens); step 2: it has
  // computed and published 3 of the 4 shared blocks, so the follower waits.
  sim.step();
  SchedulerOutput out = sim.step();
  EXPECT_TRUE(out.waited_for_leader);
  EXPECT_EQ(sim.row_ids(out), (std::vector<uint64_t>{1}));
  while (sim.first_cached.count(2) == 0) {
    ASSERT_TRUE(sim.sched.has_work());
    sim.step();
  }
  EXPECT_EQ(sim.first_cached[2], 16);  // hit every shared block instead of computing it
  // Without the knob the follower is admitted at step 2 with the 3 blocks
  // published so far, and computes the 4th again.
  Sim off(config(12, 8, 64), 64);
  off.submit(p1, 1);
  off.submit(p2, 1);
  off.step();
  out = off.step();
  EXPECT_FALSE(out.waited_for_leader);
  EXPECT_EQ(off.first_cached[2], 12);
}

TEST(SchedulerTest, RemoveTakesARequestOutOfEitherQueue) {
  Sim sim(config(100, 1, 64), 64);
  SchedRequest* a = sim.submit(prompt(3, 0), 5);
  SchedRequest* b = sim.submit(prompt(3, 10), 5);
  sim.step();
  EXPECT_TRUE(sim.sched.remove(b));  // waiting
  EXPECT_TRUE(sim.sched.remove(a));  // running
  EXPECT_FALSE(sim.sched.remove(a));
  EXPECT_FALSE(sim.sched.has_work());
}

TEST(SchedulerTest, RandomWorkloadsKeepBudgetsAndBlocksAndFinishEverything) {
  // What the runs went through, so the test knows it exercised each path.
  int preemptions = 0, resumes = 0, failures = 0, waits = 0, hits = 0, chunked = 0;
  for (uint64_t seed = 1; seed <= 40; ++seed) {
    std::mt19937_64 rng(seed);
    auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    const int64_t pool = pick(3, 16);
    SchedulerConfig c = config(pick(1, 24), pick(1, 6), pool, pick(0, 1));
    c.same_step_sharing = pick(0, 1) == 1;
    Sim sim(c, pool);
    std::vector<int32_t> shared = prompt(pick(4, 16), 7000);
    const int n = pick(5, 30);
    int submitted = 0;
    for (int stepno = 0; stepno < 5000 && (submitted < n || sim.sched.has_work()); ++stepno) {
      // Bursts of up to 4 requests, half of them behind a common prefix.
      for (int burst = pick(0, 2) == 0 ? pick(1, 4) : 0; burst > 0 && submitted < n; --burst) {
        std::vector<int32_t> p = pick(0, 1) ? shared : std::vector<int32_t>{};
        for (int i = pick(1, 10); i > 0; --i) p.push_back(pick(0, 50));
        sim.submit(p, pick(1, 12));
        ++submitted;
      }
      const SchedulerOutput out = sim.step();
      preemptions += static_cast<int>(out.preempted.size());
      failures += static_cast<int>(out.failed.size());
      waits += out.waited_for_leader;
      for (const auto& a : out.admitted) {
        resumes += a.resumed;
        hits += !a.resumed && a.cached_tokens > 0;
      }
      for (const auto& row : out.rows) chunked += row.num_tokens < row.req->pending();
      // A step with work plans at least one row unless everything waits on
      // memory that only finishing requests give back.
      if (out.rows.empty() && sim.sched.running().empty() && !sim.sched.waiting().empty())
        FAIL() << "seed " << seed << ": the queue is stuck with nothing running";
      for (const SchedRequest* r : sim.sched.waiting()) EXPECT_EQ(sim.kv.held(r->id), 0);
    }
    EXPECT_FALSE(sim.sched.has_work()) << "seed " << seed;
    EXPECT_EQ(sim.finished.size() + sim.failed.size(), static_cast<size_t>(n)) << "seed " << seed;
    for (const auto& r : sim.reqs) {
      const bool ok =
          std::find(sim.finished.begin(), sim.finished.end(), r->id) != sim.finished.end();
      if (ok) {
        EXPECT_EQ(r->completion(), sim.max_tokens_[r->id]) << "seed " << seed;
      } else {
        // Only requests that can never fit the pool fail.
        EXPECT_GT(blocks(r->num_tokens()), pool) << "seed " << seed << " id " << r->id;
      }
    }
    EXPECT_EQ(sim.kv.free_blocks(), pool) << "seed " << seed;
  }
  EXPECT_GT(preemptions, 0);
  EXPECT_GT(resumes, 0);
  EXPECT_GT(failures, 0);
  EXPECT_GT(waits, 0);
  EXPECT_GT(hits, 0);
  EXPECT_GT(chunked, 0);
  std::printf("preemptions=%d resumes=%d failures=%d waits=%d hits=%d chunked=%d\n", preemptions,
              resumes, failures, waits, hits, chunked);
}

}  // namespace
}  // namespace pagedkv::engine
