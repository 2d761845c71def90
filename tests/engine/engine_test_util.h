// Helpers for the engine tests: tiny random models made in-test (make_model.h),
// and the serial flat reference run every engine result is compared against.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"
#include "model/flat_kv_cache.h"
#include "model/make_model.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "pagedkv/engine.h"
#include "temp_dir.h"

namespace pagedkv::engine::testing_util {

inline std::string temp_dir(const std::string& tag) {
  static std::atomic<int> counter{0};
  std::string d = ::testing::TempDir() + "/pkv_engine_" + tag + "_" + std::to_string(getpid()) +
                  "_" + std::to_string(counter++);
  std::filesystem::remove_all(d);
  std::filesystem::create_directories(d);
  ::pagedkv::test::remove_at_exit(d);  // tests/support/temp_dir.h
  return d;
}

// A tiny random checkpoint of `family` (any of model::make_model_families()), loaded
// (`preset`: another make-model preset, e.g. gemma4_text's tiny-global).
inline std::shared_ptr<model::Model> tiny_model(const std::string& family, uint64_t seed,
                                                const std::string& preset = "tiny") {
  model::MakeModelOptions o;
  o.family = family;
  o.preset = preset;
  o.seed = seed;
  o.out_dir = temp_dir(family);
  Status s = model::make_random_model(o);
  EXPECT_TRUE(s.ok()) << s.to_string();
  auto m = model::load_model(o.out_dir);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  std::filesystem::remove_all(o.out_dir);
  if (!m.ok()) return nullptr;
  return std::shared_ptr<model::Model>(std::move(*m));
}

// A greedy request (ignore_eos) for max_tokens tokens that returns its logits.
inline GenerateRequest greedy_with_logits(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerateRequest r;
  r.prompt = std::move(prompt);
  r.sampling.max_tokens = max_tokens;
  r.ignore_eos = true;
  r.return_logits = true;
  return r;
}

// `n` token ids drawn uniformly from [0, vocab) by a seeded generator.
inline std::vector<int32_t> random_token_ids(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 g(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

struct RefRun {
  std::vector<int32_t> tokens;
  std::vector<std::vector<float>> logits;
  FinishReason reason = FinishReason::kNone;
};

// The request run alone through the flat path, whole prompt in one forward,
// then one token per step: the ground truth for every engine result.
inline RefRun flat_run(model::Model& m, const GenerateRequest& req) {
  RefRun r;
  model::FlatKVCache cache(m.kv_geometry());
  model::RecurrentState state(m.kv_geometry());  // hybrids: the request's recurrent state
  std::vector<int32_t> stop = req.sampling.stop_token_ids;
  if (!req.ignore_eos)
    stop.insert(stop.end(), m.config().eos_token_ids.begin(), m.config().eos_token_ids.end());
  std::vector<int32_t> seq = req.prompt;
  std::vector<int32_t> feed = req.prompt;
  int32_t ctx = 0;
  if (req.sampling.max_tokens == 0) {
    r.reason = FinishReason::kLength;
    return r;
  }
  for (;;) {
    model::ForwardBatch b;
    b.path = model::KVPath::kFlat;
    model::ForwardRow& row = b.add_row(feed, ctx, model::LogitsRequest::kLast);
    row.flat = &cache;
    if (m.kv_geometry().has_recurrent_state()) row.state = &state;
    model::ForwardOutput out;
    Status s = m.forward(b, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) return r;
    ctx += static_cast<int32_t>(feed.size());
    auto lg = out.last_logits(0);
    const int32_t tok = sample_token(lg, req.sampling, static_cast<int64_t>(seq.size()));
    seq.push_back(tok);
    r.tokens.push_back(tok);
    r.logits.emplace_back(lg.begin(), lg.end());
    if (std::find(stop.begin(), stop.end(), tok) != stop.end()) {
      r.reason = FinishReason::kStop;
      return r;
    }
    for (const auto& ss : req.stop_sequences) {
      if (!ss.empty() && ss.size() <= r.tokens.size() &&
          std::equal(ss.begin(), ss.end(), r.tokens.end() - static_cast<ptrdiff_t>(ss.size()))) {
        r.reason = FinishReason::kStop;
        return r;
      }
    }
    if (static_cast<int32_t>(r.tokens.size()) >= req.sampling.max_tokens ||
        static_cast<int64_t>(seq.size()) >= m.config().max_position_embeddings) {
      r.reason = FinishReason::kLength;
      return r;
    }
    feed = {tok};
  }
}

inline bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The RecordedBitsOfThisNumerics tests (CPU: engine_cold_test.cc, CUDA:
// cuda_engine_test.cc) pin a digest of a case's logits per numerics identity.
struct RecordedDigest {
  const char* numerics;
  const char* case_name;
  uint64_t digest;
};

// FNV-1a 64 over the bytes of the prompt rows, then of every decode row.
inline uint64_t logits_digest(const std::vector<float>& prompt_rows,
                              const std::vector<std::vector<float>>& decode_rows) {
  uint64_t h = 1469598103934665603ull;
  auto mix = [&](const std::vector<float>& v) {
    const auto* b = reinterpret_cast<const unsigned char*>(v.data());
    for (size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ b[i]) * 1099511628211ull;
  };
  mix(prompt_rows);
  for (const auto& row : decode_rows) mix(row);
  return h;
}

// Expects `digest` to be the one `recorded` holds for (numerics, case_name), the
// failure naming `version` (the constant to bump); returns "" then. When none is
// recorded, returns the line that says what to record (the caller skips).
inline std::string check_recorded_digest(const std::vector<RecordedDigest>& recorded,
                                         const std::string& numerics, const std::string& case_name,
                                         uint64_t digest, const char* version) {
  char hex[19];
  std::snprintf(hex, sizeof hex, "0x%016llx", static_cast<unsigned long long>(digest));
  for (const RecordedDigest& r : recorded) {
    if (numerics != r.numerics || case_name != r.case_name) continue;
    EXPECT_EQ(digest, r.digest) << "the bits of case " << case_name << " changed under \""
                                << numerics << "\" (now " << hex << "): bump " << version
                                << " and record the new digests";
    return "";
  }
  return "no digest recorded for {\"" + numerics + "\", \"" + case_name + "\"}: this run's is " +
         hex + "\n";
}

// Expects `got` (an engine result that completed) to equal the flat reference:
// tokens, finish reason and the logits of every sampled position, bit for bit.
inline void expect_matches_flat(const RequestResult& got, const RefRun& ref,
                                const std::string& what) {
  ASSERT_EQ(got.tokens, ref.tokens) << what;
  EXPECT_EQ(got.finish_reason, ref.reason) << what;
  ASSERT_EQ(got.logits.size(), ref.logits.size()) << what;
  for (size_t i = 0; i < ref.logits.size(); ++i)
    ASSERT_TRUE(same_bits(got.logits[i], ref.logits[i])) << what << ": logits of token " << i;
}

}  // namespace pagedkv::engine::testing_util
