// Engine API tests on a tiny qwen3 model: request validation, owners (a 5-turn
// conversation hits its previous turns every time; idle and LRU expiry), a
// request larger than the largest pool, a storm of 500 submissions then
// cancellations, preemption of the newest request, and the threaded step loop
// with streaming and cross-thread cancel. Results are compared with the serial
// flat run bit for bit.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>
#include <span>
#include <thread>

#include "engine_test_util.h"

namespace pagedkv::engine {
namespace {

using testing_util::expect_matches_flat;
using testing_util::flat_run;
using testing_util::tiny_model;

std::shared_ptr<model::Model> shared_model() {
  static std::shared_ptr<model::Model> m = tiny_model("qwen3", 21);
  return m;
}

std::vector<int32_t> random_tokens(std::mt19937_64& rng, int n, int32_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  return v;
}

std::unique_ptr<Engine> make_engine(const EngineOptions& o = {}) {
  auto e = Engine::create(shared_model(), o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  return e.ok() ? std::move(*e) : nullptr;
}

TEST(EngineTest, RejectsBadRequestsAtOnce) {
  auto engine = make_engine();
  ASSERT_NE(engine, nullptr);
  GenerateRequest r;
  auto h = engine->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(h.status().message().find("prompt is empty"), std::string::npos);

  r.prompt = {1, 2, 100000};
  h = engine->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("outside the vocabulary"), std::string::npos);

  r.prompt = {1, 2, 3};
  r.sampling.top_p = 0;
  h = engine->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("top_p"), std::string::npos);

  r.sampling.top_p = 1;
  r.cache_salt = std::string(300, 'x');
  h = engine->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("cache_salt"), std::string::npos);

  GenerateRequest chat;
  chat.messages_json = R"([{"role":"user","content":"hi"}])";
  h = engine->submit(chat);
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("no chat formatter"), std::string::npos);
  EXPECT_EQ(engine->stats().rejected, 5u);
}

TEST(EngineTest, MessagesGoThroughThePluggableFormatter) {
  EngineOptions o;
  o.formatter = [](std::string_view json) -> StatusOr<std::vector<int32_t>> {
    std::vector<int32_t> ids;
    for (char c : json) ids.push_back(static_cast<unsigned char>(c));
    return ids;
  };
  auto engine = make_engine(o);
  GenerateRequest r;
  r.messages_json = R"([{"role":"user","content":"hi"}])";
  r.sampling.max_tokens = 3;
  r.return_logits = true;
  auto h = engine->submit(r);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  engine->run_until_idle();
  const RequestResult& got = (*h)->wait();
  GenerateRequest flat = r;
  flat.prompt.clear();
  for (char c : r.messages_json) flat.prompt.push_back(static_cast<unsigned char>(c));
  expect_matches_flat(got, flat_run(*shared_model(), flat), "formatted");
  EXPECT_EQ(got.usage.prompt_tokens, static_cast<int64_t>(r.messages_json.size()));
}

TEST(EngineTest, OwnerConversationHitsEveryPreviousTurn) {
  auto engine = make_engine();
  std::mt19937_64 rng(7);
  const int32_t vocab = shared_model()->config().vocab_size;
  std::vector<int32_t> conversation = random_tokens(rng, 37, vocab);  // system + user 1
  int64_t prev_history = 0;  // tokens whose KV the owner keeps live
  for (int turn = 0; turn < 5; ++turn) {
    GenerateRequest r;
    r.prompt = conversation;
    r.owner = "conversation-1";
    r.sampling.max_tokens = 5 + turn;
    r.sampling.temperature = 0.7;
    r.sampling.seed = 100 + turn;
    r.return_logits = true;
    auto h = engine->submit(r);
    ASSERT_TRUE(h.ok());
    engine->run_until_idle();
    const RequestResult& got = (*h)->wait();
    expect_matches_flat(got, flat_run(*shared_model(), r), "turn " + std::to_string(turn));
    // The live history (every previous prompt and completion token except the
    // last sampled one, which was never fed) is reused whole, partial block too.
    EXPECT_EQ(got.usage.cached_prompt_tokens, prev_history) << "turn " << turn;
    if (turn > 0) {
      EXPECT_GT(got.usage.cached_prompt_tokens, 0);
    }
    EXPECT_EQ(engine->stats().live_owners, 1);
    ASSERT_TRUE(engine->check_invariants().ok());
    prev_history = static_cast<int64_t>(conversation.size() + got.tokens.size()) - 1;
    // Next turn: the assistant's reply, then a tool/user frame.
    conversation.insert(conversation.end(), got.tokens.begin(), got.tokens.end());
    auto frame = random_tokens(rng, 9 + 7 * turn, vocab);
    conversation.insert(conversation.end(), frame.begin(), frame.end());
  }
  // The owner holds its blocks between turns; releasing it frees them.
  EXPECT_GT(engine->held_blocks(), 0);
  engine->release_owner("conversation-1");
  engine->step();
  EXPECT_EQ(engine->stats().live_owners, 0);
  EXPECT_EQ(engine->held_blocks(), 0);
  ASSERT_TRUE(engine->check_invariants().ok());

  // Without the live owner, the prefix table still serves the full blocks.
  GenerateRequest again;
  again.prompt = conversation;
  again.sampling.max_tokens = 2;
  auto h = engine->submit(again);
  ASSERT_TRUE(h.ok());
  engine->run_until_idle();
  const int64_t cached = (*h)->wait().usage.cached_prompt_tokens;
  EXPECT_EQ(cached, prev_history / 16 * 16);
}

TEST(EngineTest, IdleOwnersExpireAfterTheTimeout) {
  EngineOptions o;
  o.owner_idle_timeout_s = 0.05;
  auto engine = make_engine(o);
  GenerateRequest r;
  r.prompt = std::vector<int32_t>(40, 3);
  r.owner = "a";
  r.sampling.max_tokens = 4;
  ASSERT_TRUE(engine->submit(r).ok());
  engine->run_until_idle();
  EXPECT_EQ(engine->stats().live_owners, 1);
  EXPECT_GT(engine->held_blocks(), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(120));
  engine->step();
  EXPECT_EQ(engine->stats().live_owners, 0);
  EXPECT_EQ(engine->stats().owners_expired, 1u);
  EXPECT_EQ(engine->held_blocks(), 0);
}

TEST(EngineTest, OwnersExpireLruUnderMemoryPressure) {
  EngineOptions o;
  o.pool_max_blocks = 13;  // 12 usable blocks of 16 tokens
  auto engine = make_engine(o);
  std::mt19937_64 rng(3);
  const int32_t vocab = shared_model()->config().vocab_size;
  for (const char* owner : {"old", "new"}) {
    GenerateRequest r;
    r.prompt = random_tokens(rng, 60, vocab);  // 4 blocks each, live after the turn
    r.owner = owner;
    r.sampling.max_tokens = 2;
    ASSERT_TRUE(engine->submit(r).ok());
    engine->run_until_idle();
  }
  EXPECT_EQ(engine->stats().live_owners, 2);
  // 6 blocks: fits only when one owner goes; the least recently used goes first.
  GenerateRequest big;
  big.prompt = random_tokens(rng, 90, vocab);
  big.sampling.max_tokens = 2;
  big.return_logits = true;
  auto h = engine->submit(big);
  ASSERT_TRUE(h.ok());
  engine->run_until_idle();
  expect_matches_flat((*h)->wait(), flat_run(*shared_model(), big), "big");
  EXPECT_EQ(engine->stats().owners_expired, 1u);
  EXPECT_EQ(engine->stats().live_owners, 1);
  ASSERT_TRUE(engine->check_invariants().ok());
  // "new" survived: its next turn continues live.
  GenerateRequest next;
  next.owner = "new";
  next.prompt = std::vector<int32_t>(70, 5);
  next.sampling.max_tokens = 1;
  auto h2 = engine->submit(next);
  ASSERT_TRUE(h2.ok());
  engine->run_until_idle();
  EXPECT_EQ((*h2)->wait().finish_reason, FinishReason::kLength);
}

TEST(EngineTest, RequestLargerThanTheLargestPoolIsRejected) {
  EngineOptions o;
  o.pool_max_blocks = 10;  // 9 usable blocks = 144 tokens
  o.pool_initial_blocks = 4;
  auto engine = make_engine(o);
  GenerateRequest r;
  r.prompt = std::vector<int32_t>(145, 1);
  auto h = engine->submit(r);
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(h.status().message().find("largest pool holds 9 usable blocks"), std::string::npos)
      << h.status().message();

  // 144 tokens fit (the pool grows to its max); a completion that would need a
  // 10th block ends with a clear error instead of hanging.
  r.prompt = std::vector<int32_t>(144, 1);
  r.sampling.max_tokens = 1;
  auto ok = engine->submit(r);
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  r.sampling.max_tokens = 4;
  auto too_long = engine->submit(r);
  ASSERT_TRUE(too_long.ok());
  EXPECT_LT(engine->run_until_idle(1000), 1000);
  EXPECT_EQ((*ok)->wait().finish_reason, FinishReason::kLength);
  const RequestResult& bad = (*too_long)->wait();
  EXPECT_EQ(bad.finish_reason, FinishReason::kError);
  EXPECT_EQ(bad.error.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(bad.error.message().find("more KV blocks than the pool holds"), std::string::npos);
  EXPECT_EQ(engine->held_blocks(), 0);
  ASSERT_TRUE(engine->check_invariants().ok());
}

TEST(EngineTest, StormOf500SubmissionsThenCancellationsLeavesThePoolClean) {
  EngineOptions o;
  o.pool_max_blocks = 64;
  o.max_num_batched_tokens = 256;
  auto engine = make_engine(o);
  std::mt19937_64 rng(5);
  const int32_t vocab = shared_model()->config().vocab_size;
  std::vector<RequestHandlePtr> handles;
  for (int i = 0; i < 500; ++i) {
    GenerateRequest r;
    r.prompt = random_tokens(rng, 5 + static_cast<int>(rng() % 60), vocab);
    if (i % 3 == 0) r.prompt.insert(r.prompt.begin(), 32, 7);  // some sharing
    r.sampling.max_tokens = 50;
    r.owner = i % 10 == 0 ? "owner-" + std::to_string(i % 30) : "";
    auto h = engine->submit(r);
    ASSERT_TRUE(h.ok());
    handles.push_back(*h);
    if (i % 50 == 0) engine->step();
  }
  for (int i = 0; i < 5; ++i) engine->step();  // some mid-prefill, some mid-decode
  EXPECT_GT(engine->stats().running, 0);
  for (size_t i = 0; i < handles.size(); ++i) {
    if (i % 2 == 0) {
      handles[i]->cancel();
    } else {
      EXPECT_TRUE(engine->cancel(handles[i]->id()) || handles[i]->done());
    }
  }
  engine->step();  // cancellations take effect at the next step
  EXPECT_EQ(engine->stats().running, 0);
  EXPECT_EQ(engine->stats().waiting, 0);
  for (auto& h : handles) {
    ASSERT_TRUE(h->done());
    EXPECT_NE(h->wait().finish_reason, FinishReason::kError);
  }
  ASSERT_TRUE(engine->check_invariants().ok());
  // Only live owners hold blocks; releasing them leaves every block free or cached.
  for (int i = 0; i < 30; ++i) engine->release_owner("owner-" + std::to_string(i));
  engine->step();
  EXPECT_EQ(engine->held_blocks(), 0);
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.pool.free_blocks, st.pool.num_blocks - 1);
  EXPECT_GE(st.cancelled, 400u);
  ASSERT_TRUE(engine->check_invariants().ok());
}

TEST(EngineTest, PreemptsTheNewestAndResumesExactly) {
  EngineOptions o;
  o.pool_max_blocks = 9;  // 8 usable blocks
  o.kv_free_watermark = 0;
  auto engine = make_engine(o);
  std::mt19937_64 rng(9);
  const int32_t vocab = shared_model()->config().vocab_size;
  std::vector<GenerateRequest> reqs(3);
  std::vector<RequestHandlePtr> hs;
  for (auto& r : reqs) {
    r.prompt = random_tokens(rng, 30, vocab);  // 2 blocks each
    r.sampling.max_tokens = 30;                // grows to 4 blocks each: 12 > 8
    r.sampling.temperature = 1.0;
    r.sampling.seed = rng();
    r.ignore_eos = true;
    r.return_logits = true;
    hs.push_back(*engine->submit(r));
  }
  engine->run_until_idle();
  for (size_t i = 0; i < reqs.size(); ++i)
    expect_matches_flat(hs[i]->wait(), flat_run(*shared_model(), reqs[i]),
                        "req " + std::to_string(i));
  EXPECT_GE(engine->stats().preemptions, 1u);
  EXPECT_EQ(hs[0]->wait().preemptions, 0) << "the oldest request is never the victim";
  EXPECT_GE(hs[2]->wait().preemptions, 1) << "the newest request is the victim";
  EXPECT_EQ(engine->held_blocks(), 0);
  ASSERT_TRUE(engine->check_invariants().ok());
}

// A waiting request that does not fit changes nothing (no reference, no hit
// counted, the free queue untouched: it is only probed), and after a preemption
// the resumed request's re-hit blocks are reported (usage and stats).
TEST(EngineTest, AdmissionWithoutSideEffectsAndResumeReportsReHits) {
  EngineOptions o;
  o.pool_max_blocks = 9;  // 8 usable blocks
  o.kv_free_watermark = 0;
  auto engine = make_engine(o);
  std::mt19937_64 rng(17);
  const int32_t vocab = shared_model()->config().vocab_size;
  GenerateRequest a, b;
  a.prompt = random_tokens(rng, 40, vocab);  // 3 blocks, grows to 80 tokens = 5
  a.sampling.max_tokens = 40;
  b.prompt = random_tokens(rng, 33, vocab);  // 3 blocks, grows to 73 tokens = 5
  b.sampling.max_tokens = 40;
  for (GenerateRequest* r : {&a, &b}) {
    r->ignore_eos = true;
    r->return_logits = true;
  }
  auto ha = *engine->submit(a);
  auto hb = *engine->submit(b);
  uint64_t waited_steps = 0;
  EngineStats last = engine->stats();
  while (!ha->done() || !hb->done()) {
    engine->step();
    ASSERT_TRUE(engine->check_invariants().ok());
    const EngineStats st = engine->stats();
    if (st.waiting > 0 && last.waiting > 0 && st.running == last.running) {
      // b waited this step without fitting: nothing it would hit was taken.
      ++waited_steps;
      EXPECT_EQ(st.pool.lookups, last.pool.lookups);
      EXPECT_EQ(st.pool.hit_blocks, last.pool.hit_blocks);
      EXPECT_EQ(st.pool.cached_blocks,
                last.pool.cached_blocks - (st.pool.evictions - last.pool.evictions));
    }
    last = st;
  }
  EXPECT_GT(waited_steps, 0u);
  const RequestResult& rb = hb->wait();
  EXPECT_EQ(ha->wait().preemptions, 0);
  EXPECT_GE(rb.preemptions, 1);
  // b's prompt was not cached at first admission; its three full blocks (two of
  // the prompt, one filled by decoding) were re-hit when it resumed.
  EXPECT_EQ(rb.usage.cached_prompt_tokens, 0);
  EXPECT_EQ(rb.usage.resumed_cached_tokens, 48);
  const EngineStats st = engine->stats();
  EXPECT_EQ(st.resumed_cached_tokens, 48u);
  // Hit counters count admitted requests only: a, b, and b's resume.
  EXPECT_EQ(st.pool.lookups, 3u);
  EXPECT_EQ(st.pool.hit_tokens, 48u);
  expect_matches_flat(ha->wait(), flat_run(*shared_model(), a), "a");
  expect_matches_flat(rb, flat_run(*shared_model(), b), "b");
  EXPECT_EQ(engine->held_blocks(), 0);
}

// Same-step prefix sharing: requests that arrive together with a common,
// uncached prefix compute it once — the others wait for the first to publish
// its blocks and hit them — with the same answers; off, each computes it.
TEST(EngineTest, ABurstWithACommonUncachedPrefixComputesItOnce) {
  std::mt19937_64 rng(23);
  const int32_t vocab = shared_model()->config().vocab_size;
  const auto system = random_tokens(rng, 64, vocab);  // 4 full blocks
  std::vector<GenerateRequest> reqs(8);
  for (auto& r : reqs) {
    r.prompt = system;
    const auto user = random_tokens(rng, 10, vocab);
    r.prompt.insert(r.prompt.end(), user.begin(), user.end());
    r.sampling.max_tokens = 3;
    r.ignore_eos = true;
    r.return_logits = true;
  }
  uint64_t forward[2] = {0, 0};
  for (const bool share : {true, false}) {
    EngineOptions o;
    o.same_step_prefix_sharing = share;
    auto engine = make_engine(o);
    std::vector<RequestHandlePtr> hs;
    for (const auto& r : reqs) hs.push_back(*engine->submit(r));
    engine->run_until_idle();
    for (size_t i = 0; i < reqs.size(); ++i)
      expect_matches_flat(hs[i]->wait(), flat_run(*shared_model(), reqs[i]),
                          "req " + std::to_string(i) + (share ? " shared" : " unshared"));
    const EngineStats st = engine->stats();
    forward[share ? 0 : 1] = st.forward_tokens;
    // Prompt tokens: the system prompt once (shared) or 8 times; decode: 2 per request.
    const uint64_t expect = share ? 64 + 8 * 10 + 8 * 2 : 8 * 74 + 8 * 2;
    EXPECT_EQ(st.forward_tokens, expect) << (share ? "shared" : "unshared");
    // The steps split by kind (pagedkv bench's prefill and decode tok/s): every prompt
    // token in a prompt step, the decode steps' tokens one a row, the times adding up.
    EXPECT_EQ(st.prompt_steps + st.decode_steps, st.steps);
    EXPECT_EQ(st.prompt_step_prompt_tokens, expect - 8 * 2);
    EXPECT_GT(st.decode_steps, 0u);
    EXPECT_LE(st.decode_step_tokens, 8u * 2);
    EXPECT_GE(st.decode_step_tokens, st.decode_steps);
    EXPECT_NEAR(st.prompt_forward_ms + st.decode_forward_ms, st.forward_ms,
                1e-9 * st.forward_ms + 1e-12);
    EXPECT_EQ(st.cached_prompt_tokens, share ? 7u * 64 : 0u);
    EXPECT_EQ(st.prefix_share_waits > 0, share);
    EXPECT_EQ(engine->held_blocks(), 0);
  }
  EXPECT_LT(forward[0], forward[1]);
}

TEST(EngineTest, ThreadedLoopStreamsAndCancelsAcrossThreads) {
  auto engine = make_engine();
  engine->start();
  std::mt19937_64 rng(13);
  const int32_t vocab = shared_model()->config().vocab_size;
  std::vector<GenerateRequest> reqs(8);
  for (auto& r : reqs) {
    r.prompt = random_tokens(rng, 20 + static_cast<int>(rng() % 30), vocab);
    r.sampling.max_tokens = 12;
    r.sampling.temperature = 0.8;
    r.sampling.seed = rng();
    r.ignore_eos = true;
    r.return_logits = true;
  }
  std::vector<RequestHandlePtr> hs(reqs.size());
  std::vector<std::vector<int32_t>> streamed(reqs.size());
  std::vector<std::thread> clients;
  for (size_t c = 0; c < 2; ++c) {
    clients.emplace_back([&, c] {
      for (size_t i = c; i < reqs.size(); i += 2) {
        auto h = engine->submit(reqs[i]);
        ASSERT_TRUE(h.ok());
        hs[i] = *h;
      }
      for (size_t i = c; i < reqs.size(); i += 2) {
        while (auto t = hs[i]->next_token()) streamed[i].push_back(*t);
      }
    });
  }
  for (auto& t : clients) t.join();
  // A long request cancelled from this thread while the loop runs.
  GenerateRequest longr;
  longr.prompt = random_tokens(rng, 10, vocab);
  longr.sampling.max_tokens = 3000;
  longr.ignore_eos = true;
  auto lh = engine->submit(longr);
  ASSERT_TRUE(lh.ok());
  ASSERT_TRUE((*lh)->next_token().has_value());
  (*lh)->cancel();
  ASSERT_TRUE((*lh)->wait_for(std::chrono::seconds(30)));
  EXPECT_EQ((*lh)->wait().finish_reason, FinishReason::kCancelled);
  engine->stop();
  for (size_t i = 0; i < reqs.size(); ++i) {
    const RequestResult& got = hs[i]->wait();
    EXPECT_EQ(streamed[i], got.tokens);
    expect_matches_flat(got, flat_run(*shared_model(), reqs[i]), "req " + std::to_string(i));
    EXPECT_GE(got.timings.ttft_ms, got.timings.queue_ms);
    EXPECT_EQ(got.token_ms.size(), got.tokens.size());
  }
  EXPECT_EQ(engine->held_blocks(), 0);
  ASSERT_TRUE(engine->check_invariants().ok());
}

TEST(EngineTest, StopSequencesAndZeroMaxTokens) {
  auto engine = make_engine();
  GenerateRequest r;
  r.prompt = {5, 6, 7, 8, 9};
  r.sampling.max_tokens = 8;
  r.ignore_eos = true;
  const auto ref = flat_run(*shared_model(), r);
  ASSERT_GE(ref.tokens.size(), 4u);
  r.stop_sequences = {{ref.tokens[2], ref.tokens[3]}};
  r.return_logits = true;
  auto h = engine->submit(r);
  GenerateRequest zero = r;
  zero.sampling.max_tokens = 0;
  auto hz = engine->submit(zero);
  engine->run_until_idle();
  const RequestResult& got = (*h)->wait();
  EXPECT_EQ(got.finish_reason, FinishReason::kStop);
  EXPECT_LE(got.tokens.size(), 4u);
  expect_matches_flat(got, flat_run(*shared_model(), r), "stop sequence");
  EXPECT_EQ((*hz)->wait().finish_reason, FinishReason::kLength);
  EXPECT_TRUE((*hz)->wait().tokens.empty());
}

TEST(EngineTest, CancelMidPrefillAndMidDecodeReleasesBlocksAtTheNextStep) {
  EngineOptions o;
  o.max_num_batched_tokens = 16;  // a 200-token prompt takes 13 steps to prefill
  auto engine = make_engine(o);
  GenerateRequest r;
  r.prompt = std::vector<int32_t>(200, 4);
  r.sampling.max_tokens = 100;
  r.ignore_eos = true;
  auto prefilling = engine->submit(r);
  ASSERT_TRUE(prefilling.ok());
  engine->step();
  engine->step();
  EXPECT_EQ(engine->held_blocks(), 13);  // the whole prompt is reserved at admission
  (*prefilling)->cancel();
  EXPECT_EQ(engine->held_blocks(), 13);  // nothing happens until the next step
  engine->step();
  EXPECT_EQ(engine->held_blocks(), 0);
  EXPECT_EQ((*prefilling)->wait().finish_reason, FinishReason::kCancelled);
  EXPECT_TRUE((*prefilling)->wait().tokens.empty());

  r.prompt = std::vector<int32_t>(20, 6);
  auto decoding = engine->submit(r);
  for (int i = 0; i < 30; ++i) engine->step();
  EXPECT_EQ(engine->stats().running, 1);
  EXPECT_GT(engine->held_blocks(), 2);
  EXPECT_TRUE(engine->cancel((*decoding)->id()));
  engine->step();
  EXPECT_EQ(engine->held_blocks(), 0);
  const RequestResult& res = (*decoding)->wait();
  EXPECT_EQ(res.finish_reason, FinishReason::kCancelled);
  EXPECT_EQ(res.tokens.size(), 29u);                // one token per step after the first
  EXPECT_FALSE(engine->cancel((*decoding)->id()));  // already finished
  ASSERT_TRUE(engine->check_invariants().ok());
}

TEST(EngineTest, ReportsAdmissionWidth) {
  EngineOptions o;
  o.pool_max_blocks = 20;
  o.max_num_seqs = 64;
  auto engine = make_engine(o);
  EXPECT_EQ(engine->max_concurrent_sequences(), 18);  // 19 usable - 1 watermark
  o.max_num_seqs = 4;
  auto e2 = make_engine(o);
  EXPECT_EQ(e2->max_concurrent_sequences(), 4);
  EXPECT_EQ(e2->max_num_batched_tokens(), 2048);
}

// Submits every request to a fresh engine on model m, runs it until idle and
// returns the results in submission order (empty if the engine cannot start).
std::vector<RequestResult> run_all(std::shared_ptr<model::Model> m, const EngineOptions& o,
                                   const std::vector<GenerateRequest>& reqs) {
  auto e = Engine::create(std::move(m), o);
  EXPECT_TRUE(e.ok()) << e.status().to_string();
  std::vector<RequestResult> out;
  if (!e.ok()) return out;
  std::vector<RequestHandlePtr> hs;
  for (const GenerateRequest& r : reqs) {
    auto h = (*e)->submit(r);
    EXPECT_TRUE(h.ok()) << h.status().to_string();
    if (h.ok()) hs.push_back(*h);
  }
  (*e)->run_until_idle();
  for (auto& h : hs) out.push_back(h->wait());
  return out;
}

// Fills row r's logits with NaN: the fake models below mark the rows whose token
// they chose, so that a test sees the engine never reads them.
void poison_logits_row(model::ForwardOutput* out, size_t r) {
  float* row = out->logits.data() + static_cast<size_t>(out->row_begin[r]) * out->vocab_size;
  std::fill(row, row + out->vocab_size, std::numeric_limits<float>::quiet_NaN());
}

// A model that picks greedy tokens itself (Model::samples_greedy, the CUDA
// model's seam): for greedy_only rows it returns argmax + 1 (mod vocab) — a token
// the host sampler would not pick — and poisons those logits rows with NaN, so
// the test sees which rows the engine flagged and that it never read their logits.
class SelfSamplingModel final : public model::Model {
 public:
  explicit SelfSamplingModel(std::shared_ptr<model::Model> inner) : inner_(std::move(inner)) {}
  const model::ModelConfig& config() const override { return inner_->config(); }
  const model::KVGeometry& kv_geometry() const override { return inner_->kv_geometry(); }
  bool samples_greedy() const override { return true; }
  Status forward(const model::ForwardBatch& b, model::ForwardOutput* out) override {
    PKV_RETURN_IF_ERROR(inner_->forward(b, out));
    const int32_t V = out->vocab_size;
    out->tokens.assign(b.rows.size(), -1);
    for (size_t r = 0; r < b.rows.size(); ++r) {
      if (!b.rows[r].greedy_only) continue;
      EXPECT_EQ(b.rows[r].logits, model::LogitsRequest::kLast);
      out->tokens[r] = (argmax(out->last_logits(r)) + 1) % V;
      poison_logits_row(out, r);
      ++greedy_rows;
    }
    return ok_status();
  }
  int64_t greedy_rows = 0;

 private:
  std::shared_ptr<model::Model> inner_;
};

// ForwardRow::greedy_only: set exactly for the last row of a greedy request that
// wants no logits; the engine then takes the model's token. Requests that return
// logits or sample with a seed keep the host sampler (their tokens equal the
// plain model's), in the same steps.
TEST(EngineTest, GreedyOnlyRowsTakeTheModelsToken) {
  auto fake = std::make_shared<SelfSamplingModel>(shared_model());
  const int32_t V = fake->config().vocab_size;
  std::mt19937_64 rng(5);
  const std::vector<int32_t> prompt = random_tokens(rng, 40, V);
  GenerateRequest device;  // greedy, no logits: the model's token
  device.prompt = prompt;
  device.sampling.max_tokens = 7;
  device.ignore_eos = true;
  GenerateRequest with_logits = device;  // greedy with logits: the host's argmax
  with_logits.return_logits = true;
  GenerateRequest seeded = device;  // seeded: the host's sampler
  seeded.sampling.temperature = 0.9;
  seeded.sampling.seed = 77;
  EngineOptions o;
  o.max_num_batched_tokens = 16;  // chunked prefill: non-last chunks are not flagged
  const std::vector<GenerateRequest> reqs = {device, with_logits, seeded};
  const std::vector<RequestResult> got = run_all(fake, o, reqs);
  const std::vector<RequestResult> plain = run_all(shared_model(), o, reqs);
  ASSERT_EQ(got.size(), 3u);
  ASSERT_EQ(plain.size(), 3u);
  EXPECT_EQ(fake->greedy_rows, 7);  // only the device request's 7 tokens
  EXPECT_EQ(got[1].tokens, plain[1].tokens);
  EXPECT_EQ(got[1].logits.size(), 7u);
  for (const auto& row : got[1].logits)
    for (float v : row) ASSERT_FALSE(std::isnan(v));
  EXPECT_EQ(got[2].tokens, plain[2].tokens);
  ASSERT_EQ(got[0].tokens.size(), 7u);
  // The first token follows the prompt's logits (the with-logits request's first row).
  EXPECT_EQ(got[0].tokens[0], (argmax(plain[1].logits[0]) + 1) % V);
  EXPECT_NE(got[0].tokens, plain[0].tokens);
}

// A model that finishes seeded draws itself (Model::draw_entries_cap, the CUDA
// model's seam for seeded sampling): for each ForwardRow::draw row it hands the
// row's best entries (sorted the sampler's way, as the device does) to
// RowDraw::draw; a token is returned and the logits row poisoned with NaN (the
// engine must not read it), a -1 leaves the row for the host sampler.
class SelfDrawingModel final : public model::Model {
 public:
  explicit SelfDrawingModel(std::shared_ptr<model::Model> inner) : inner_(std::move(inner)) {}
  const model::ModelConfig& config() const override { return inner_->config(); }
  const model::KVGeometry& kv_geometry() const override { return inner_->kv_geometry(); }
  int32_t draw_entries_cap() const override { return 16; }
  Status forward(const model::ForwardBatch& b, model::ForwardOutput* out) override {
    PKV_RETURN_IF_ERROR(inner_->forward(b, out));
    const int32_t V = out->vocab_size;
    out->tokens.assign(b.rows.size(), -1);
    for (size_t r = 0; r < b.rows.size(); ++r) {
      if (b.rows[r].draw == nullptr) continue;
      EXPECT_EQ(b.rows[r].logits, model::LogitsRequest::kLast);
      const std::span<const float> l = out->last_logits(r);
      std::vector<model::DrawEntry> best;
      for (int32_t i = 0; i < V; ++i)
        if (!std::isnan(l[i])) best.push_back({l[i] == 0.0f ? 0.0f : l[i], i});
      std::sort(best.begin(), best.end(), [](const auto& x, const auto& y) {
        return x.logit > y.logit || (x.logit == y.logit && x.id < y.id);
      });
      const size_t valid = best.size();
      const int32_t want = b.rows[r].draw->entries();
      EXPECT_GE(want, 1);
      EXPECT_LE(want, draw_entries_cap());
      if (best.size() > static_cast<size_t>(want)) best.resize(static_cast<size_t>(want));
      const int32_t tok = b.rows[r].draw->draw(best, best.size() == valid);
      if (tok < 0) {
        ++fallbacks;
        continue;
      }
      out->tokens[r] = tok;
      poison_logits_row(out, r);
      ++drawn;
    }
    return ok_status();
  }
  int64_t drawn = 0, fallbacks = 0;

 private:
  std::shared_ptr<model::Model> inner_;
};

// ForwardRow::draw: set exactly for the last row of a seeded request that wants
// no logits; the model's token (from the best entries) equals the host sampler's
// on the whole row, and a draw that needs more entries falls back to the row.
// Greedy and with-logits requests are untouched, in the same steps.
TEST(EngineTest, SeededDrawsFinishedFromTheBestEntriesEqualTheHostSampler) {
  auto fake = std::make_shared<SelfDrawingModel>(shared_model());
  const int32_t V = fake->config().vocab_size;
  std::mt19937_64 rng(9);
  std::vector<GenerateRequest> reqs;
  const std::vector<std::pair<double, int32_t>> settings = {
      {0.8, 5}, {1.0, 0}, {0.05, 0}, {1.3, 16}, {0.7, 1}};
  for (size_t i = 0; i < settings.size(); ++i) {
    GenerateRequest r;
    r.prompt = random_tokens(rng, 20 + 7 * i, V);
    r.sampling.max_tokens = 9;
    r.sampling.temperature = settings[i].first;
    r.sampling.top_k = settings[i].second;
    r.sampling.top_p = i == 3 ? 0.8 : 1.0;
    r.sampling.min_p = i == 1 ? 0.05 : 0.0;
    r.sampling.seed = 100 + i;
    r.ignore_eos = true;
    reqs.push_back(r);
  }
  GenerateRequest with_logits = reqs[0];  // seeded with logits: the host sampler
  with_logits.return_logits = true;
  reqs.push_back(with_logits);
  GenerateRequest greedy = reqs[0];
  greedy.sampling.temperature = 0;
  reqs.push_back(greedy);
  EngineOptions o;
  o.max_num_batched_tokens = 16;  // chunked prefill: non-last chunks are not flagged
  const std::vector<RequestResult> got = run_all(fake, o, reqs);
  const std::vector<RequestResult> plain = run_all(shared_model(), o, reqs);
  ASSERT_EQ(got.size(), reqs.size());
  ASSERT_EQ(plain.size(), reqs.size());
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_NE(got[i].finish_reason, FinishReason::kError) << got[i].error.to_string();
    EXPECT_EQ(got[i].tokens, plain[i].tokens) << "request " << i;
  }
  EXPECT_EQ(fake->drawn + fake->fallbacks, 5 * 9);  // exactly the 5 seeded no-logits requests
  EXPECT_GE(fake->drawn, 3 * 9);                    // top_k 5, 16 and 1 always finish
  EXPECT_GE(fake->fallbacks, 1);                    // T 1.0 without top-k needs the row
}

}  // namespace
}  // namespace pagedkv::engine
