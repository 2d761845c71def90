// LFM2 / LFM2-MoE beyond the oracle (oracle_test.cc): the hybrid's recurrent
// short-conv state must never change an answer. Bit-identical checks on the
// Hugging Face fixtures and on make-model's tiny presets: a 200-token prompt
// split at every block boundary (and at odd points) vs whole, N = 2, 3, 8 rows of
// different lengths batched (mixed prefill and decode) vs each alone, the paged
// path (hand-built block tables over a test KVBlockStore) vs flat, and resuming
// from a copied state + KV checkpoint at a block boundary vs uninterrupted. Also
// the MoE router's corner cases (ties, selection-only bias, experts without
// tokens) and the config shapes published checkpoints ship.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <deque>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "hybrid_test_util.h"
#include "model/flat_kv_cache.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

using testing_util::make_tiny;
using testing_util::read_json;
using testing_util::same_state;
using testing_util::temp_dir;
using testing_util::write_text;

std::string fixture(const std::string& name) {
  return std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + name;
}

// Paged K/V storage for tests: per layer, num_blocks blocks of
// [block_size][kv_heads][head_dim] f32, zero-initialized.
class TestBlockStore final : public KVBlockStore {
 public:
  TestBlockStore(const KVGeometry& g, int32_t num_blocks) : g_(g), num_blocks_(num_blocks) {
    block_bytes_ = static_cast<size_t>(g.block_size) * g.num_kv_heads * g.head_dim * sizeof(float);
    k_.assign(g.num_layers, std::vector<std::byte>(block_bytes_ * num_blocks));
    v_ = k_;
  }
  int32_t block_size() const override { return g_.block_size; }
  KVDType dtype() const override { return g_.dtype; }
  int32_t num_blocks() const override { return num_blocks_; }
  std::byte* k_block(int32_t layer, int32_t block) override {
    return k_[layer].data() + block * block_bytes_;
  }
  std::byte* v_block(int32_t layer, int32_t block) override {
    return v_[layer].data() + block * block_bytes_;
  }
  // A fresh block id (1..), in a scrambled order so tables are not contiguous.
  int32_t take() {
    int32_t id = 1 + static_cast<int32_t>((next_++ * 37) % (num_blocks_ - 1));
    return id;
  }

 private:
  KVGeometry g_;
  int32_t num_blocks_;
  size_t block_bytes_ = 0;
  int64_t next_ = 0;
  std::vector<std::vector<std::byte>> k_, v_;
};

// One request's KV view (flat or paged) and recurrent state. Copying a Session
// is a checkpoint: the state and flat K/V are copied; a paged copy shares the
// blocks written so far (as a prefix-cache hit would) and takes fresh ones after.
struct Session {
  Session(const Model& m, KVPath path, TestBlockStore* store)
      : path(path), store(store), flat(m.kv_geometry()), state(m.kv_geometry()) {}
  KVPath path;
  TestBlockStore* store;
  FlatKVCache flat;
  RecurrentState state;
  std::vector<int32_t> table;

  int32_t length() const { return static_cast<int32_t>(state.length()); }
  // A checkpoint taken now (at a block boundary on the paged path).
  Session fork() const {
    Session s = *this;
    const int32_t bs = store != nullptr ? store->block_size() : 1;
    if (path == KVPath::kPaged) s.table.resize(static_cast<size_t>(length() / bs));
    return s;
  }
  void attach(ForwardRow& row, int32_t upto) {
    row.state = &state;
    if (path == KVPath::kFlat) {
      row.flat = &flat;
      return;
    }
    while (static_cast<int64_t>(table.size()) * store->block_size() < upto)
      table.push_back(store->take());
    row.block_tables = {std::span<const int32_t>(table), std::span<const int32_t>()};
  }
};

struct Piece {
  Session* s;
  std::vector<int32_t> tokens;
  LogitsRequest want = LogitsRequest::kAll;
};

// One forward over `pieces` (one row each); returns each row's logits rows.
std::vector<std::vector<float>> step(Model& m, std::vector<Piece> pieces) {
  ForwardBatch b;
  b.path = pieces[0].s->path;
  b.kv_store = pieces[0].s->store;
  for (Piece& p : pieces) {
    const int32_t ctx = p.s->length();
    p.s->attach(b.add_row(p.tokens, ctx, p.want), ctx + static_cast<int32_t>(p.tokens.size()));
  }
  ForwardOutput out;
  Status st = m.forward(b, &out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<std::vector<float>> rows(pieces.size());
  if (!st.ok()) return rows;
  for (size_t r = 0; r < pieces.size(); ++r) {
    auto first = out.logits.begin() + static_cast<int64_t>(out.row_begin[r]) * out.vocab_size;
    rows[r].assign(first, first + static_cast<int64_t>(out.row_count[r]) * out.vocab_size);
  }
  return rows;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(n);
  std::generate(v.begin(), v.end(), [&] { return static_cast<int32_t>(g() % vocab); });
  return v;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t a, size_t b) {
  return {v.begin() + static_cast<int64_t>(a), v.begin() + static_cast<int64_t>(b)};
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The models: the transformers fixtures and make-model's tiny presets (4 layers:
// conv, attention, conv, attention; lfm2_moe: one dense layer, then MoE).
std::string model_dir(const std::string& param) {
  if (param.rfind("tiny:", 0) == 0) {
    std::string fam = param.substr(5);
    return make_tiny(fam, 11, "lfm2_" + fam, DType::kF32, 4);
  }
  if (param.rfind("bf16:", 0) == 0) {  // bf16 weights (the short-conv kernel widened on load)
    std::string fam = param.substr(5);
    return make_tiny(fam, 12, "lfm2_bf16_" + fam, DType::kBF16, 4);
  }
  return fixture(param);
}

class Lfm2Exactness : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    const std::string dir = model_dir(GetParam());
    StatusOr<std::unique_ptr<Model>> loaded = load_model(dir);
    ASSERT_TRUE(loaded.ok()) << dir << ": " << loaded.status().to_string();
    model_ = std::move(*loaded);
    const KVGeometry& g = model_->kv_geometry();
    ASSERT_TRUE(g.has_recurrent_state());
    ASSERT_EQ(g.block_size, 16);
    store_ = std::make_unique<TestBlockStore>(g, 512);
    prompt_ = random_tokens(200, 7, model_->config().vocab_size);
  }
  Session session(KVPath path) { return Session(*model_, path, store_.get()); }
  int32_t layers() const { return model_->config().num_hidden_layers; }

  std::unique_ptr<Model> model_;
  std::vector<int32_t> prompt_;
  std::unique_ptr<TestBlockStore> store_;
};

TEST_P(Lfm2Exactness, ChunkedPrefillAtEveryBlockBoundaryEqualsWholePrompt) {
  for (KVPath path : {KVPath::kFlat, KVPath::kPaged}) {
    Session whole = session(path);
    const std::vector<float> want = step(*model_, {{&whole, prompt_}})[0];
    ASSERT_EQ(want.size(), 200u * model_->config().vocab_size);
    std::vector<int32_t> splits;
    for (int32_t s = 16; s < 200; s += 16) splits.push_back(s);
    for (int32_t s : {1, 7, 17, 199}) splits.push_back(s);  // not boundaries: exact too
    for (int32_t s : splits) {
      Session chunked = session(path);
      std::vector<float> got = step(*model_, {{&chunked, slice(prompt_, 0, s)}})[0];
      std::vector<float> rest = step(*model_, {{&chunked, slice(prompt_, s, 200)}})[0];
      got.insert(got.end(), rest.begin(), rest.end());
      EXPECT_TRUE(same_bits(got, want)) << "split at " << s << " path " << int(path);
      EXPECT_TRUE(same_state(chunked.state, whole.state, layers())) << "split at " << s;
    }
    // Every block a chunk of its own (the engine's chunked prefill).
    Session blocks = session(path);
    std::vector<float> got;
    for (size_t a = 0; a < 200; a += 16) {
      auto r = step(*model_, {{&blocks, slice(prompt_, a, std::min<size_t>(a + 16, 200))}})[0];
      got.insert(got.end(), r.begin(), r.end());
    }
    EXPECT_TRUE(same_bits(got, want)) << "16-token chunks, path " << int(path);
    EXPECT_TRUE(same_state(blocks.state, whole.state, layers()));
  }
}

TEST_P(Lfm2Exactness, PagedEqualsFlat) {
  Session flat = session(KVPath::kFlat), paged = session(KVPath::kPaged);
  EXPECT_TRUE(
      same_bits(step(*model_, {{&flat, prompt_}})[0], step(*model_, {{&paged, prompt_}})[0]));
  auto next = random_tokens(20, 3, model_->config().vocab_size);
  for (int32_t t : next) {
    EXPECT_TRUE(same_bits(step(*model_, {{&flat, {t}}})[0], step(*model_, {{&paged, {t}}})[0]));
  }
  EXPECT_TRUE(same_state(flat.state, paged.state, layers()));
}

TEST_P(Lfm2Exactness, BatchedRowsEqualEachRowAlone) {
  const int32_t vocab = model_->config().vocab_size;
  const std::vector<size_t> lengths = {5, 17, 33, 1, 64, 100, 16, 48};
  constexpr int kDecode = 4;
  for (KVPath path : {KVPath::kFlat, KVPath::kPaged}) {
    for (size_t N : {2u, 3u, 8u}) {
      std::vector<std::vector<int32_t>> prompts, decodes;
      for (size_t r = 0; r < N; ++r) {
        prompts.push_back(random_tokens(lengths[r], 100 + r, vocab));
        decodes.push_back(random_tokens(kDecode, 200 + r, vocab));
      }
      // Serial: each row alone, prefill then kDecode single-token steps.
      std::vector<std::vector<std::vector<float>>> alone(N);
      for (size_t r = 0; r < N; ++r) {
        Session s = session(path);
        alone[r].push_back(step(*model_, {{&s, prompts[r], LogitsRequest::kLast}})[0]);
        for (int32_t t : decodes[r]) alone[r].push_back(step(*model_, {{&s, {t}}})[0]);
      }
      // Batched and staggered: row r prefills at step r, so most steps mix one
      // row's prefill with the others' decodes.
      std::vector<Session> rows;
      for (size_t r = 0; r < N; ++r) rows.push_back(session(path));
      std::vector<size_t> done(N, 0);  // logits rows produced per row
      for (size_t st = 0; st < N + kDecode; ++st) {
        std::vector<Piece> pieces;
        std::vector<size_t> who;
        for (size_t r = 0; r < N && r <= st; ++r) {
          if (done[r] > static_cast<size_t>(kDecode)) continue;
          if (done[r] == 0) {
            pieces.push_back({&rows[r], prompts[r], LogitsRequest::kLast});
          } else {
            pieces.push_back({&rows[r], {decodes[r][done[r] - 1]}, LogitsRequest::kLast});
          }
          who.push_back(r);
        }
        if (pieces.empty()) continue;
        auto got = step(*model_, pieces);
        for (size_t i = 0; i < who.size(); ++i) {
          size_t r = who[i];
          EXPECT_TRUE(same_bits(got[i], alone[r][done[r]]))
              << "N=" << N << " row " << r << " step " << done[r] << " path " << int(path);
          ++done[r];
        }
      }
      for (size_t r = 0; r < N; ++r) EXPECT_EQ(done[r], kDecode + 1u);
    }
  }
}

TEST_P(Lfm2Exactness, ResumingFromACheckpointEqualsUninterrupted) {
  const auto tail = random_tokens(8, 9, model_->config().vocab_size);
  for (KVPath path : {KVPath::kFlat, KVPath::kPaged}) {
    Session ref = session(path);
    std::vector<float> want = step(*model_, {{&ref, prompt_}})[0];
    for (int32_t t : tail) {
      auto r = step(*model_, {{&ref, {t}}})[0];
      want.insert(want.end(), r.begin(), r.end());
    }
    for (int32_t s : {16, 64, 128, 192}) {
      Session run = session(path);
      std::vector<float> got = step(*model_, {{&run, slice(prompt_, 0, s)}})[0];
      Session checkpoint = run.fork();
      // The original goes on (and diverges) first: the copy must not care.
      step(*model_, {{&run, random_tokens(40, 77, model_->config().vocab_size)}});
      auto rest = step(*model_, {{&checkpoint, slice(prompt_, s, 200)}})[0];
      got.insert(got.end(), rest.begin(), rest.end());
      for (int32_t t : tail) {
        auto r = step(*model_, {{&checkpoint, {t}}})[0];
        got.insert(got.end(), r.begin(), r.end());
      }
      EXPECT_TRUE(same_bits(got, want)) << "checkpoint at " << s << " path " << int(path);
      EXPECT_TRUE(same_state(checkpoint.state, ref.state, layers()));
    }
  }
}

TEST_P(Lfm2Exactness, RowWithoutStateOrWithStaleStateIsRejected) {
  Session s = session(KVPath::kFlat);
  step(*model_, {{&s, slice(prompt_, 0, 10)}});
  ForwardBatch b;
  b.path = KVPath::kFlat;
  std::vector<int32_t> t = {1};
  ForwardRow& row = b.add_row(t, 9, LogitsRequest::kLast);  // the state holds 10
  row.flat = &s.flat;
  row.state = &s.state;
  ForwardOutput out;
  Status st = model_->forward(b, &out);
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(st.message().find("recurrent state holds 10"), std::string::npos) << st.message();
  b.rows[0].state = nullptr;
  st = model_->forward(b, &out);
  EXPECT_NE(st.message().find("has none"), std::string::npos) << st.message();
}

INSTANTIATE_TEST_SUITE_P(Models, Lfm2Exactness,
                         ::testing::Values("lfm2-a", "lfm2_moe-a", "tiny:lfm2", "tiny:lfm2_moe",
                                           "bf16:lfm2_moe"),
                         [](const auto& info) {
                           std::string n = info.param;
                           for (char& ch : n)
                             if (ch == '-' || ch == ':') ch = '_';
                           return n;
                         });

// --- The geometry the family declares.

TEST(Lfm2Geometry, ConvLayersKeepStateAndNoKV) {
  auto m = load_model(fixture("lfm2-a"));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const KVGeometry& g = (*m)->kv_geometry();
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[0].kind, CacheGroupKind::kFullAttention);
  EXPECT_EQ(g.groups[1].kind, CacheGroupKind::kRecurrent);
  EXPECT_EQ(g.layer_group, (std::vector<int32_t>{-1, 0, -1, 0}));
  // conv_L_cache 3 → the last 2 values of 64 channels.
  EXPECT_EQ(g.layer_state_floats, (std::vector<int64_t>{128, 0, 128, 0}));
  FlatKVCache flat(g);
  flat.reserve(16);
  EXPECT_EQ(flat.memory_bytes(), 2u * 2 * 16 * g.num_kv_heads * g.head_dim * sizeof(float));
}

// --- Config shapes of published checkpoints.

std::string copy_fixture(const std::string& name, const std::string& tag) {
  std::string d = temp_dir(tag);
  for (const auto& e : std::filesystem::directory_iterator(fixture(name)))
    std::filesystem::copy_file(e.path(), d + "/" + e.path().filename().string());
  return d;
}

std::vector<float> all_logits(Model& m, const std::vector<int32_t>& ids) {
  Session s(m, KVPath::kFlat, nullptr);
  return step(m, {{&s, ids}})[0];
}

TEST(Lfm2Config, FullAttnIdxsAutoAdjustedFfDimAndThetaShapesLoadTheSameModel) {
  auto base = load_model(fixture("lfm2-a"));
  ASSERT_TRUE(base.ok());
  std::vector<int32_t> ids = {3, 1, 4, 1, 5, 9, 2, 6};
  const auto want = all_logits(**base, ids);
  std::string d = copy_fixture("lfm2-a", "lfm2cfg");
  auto cfg = read_json(d + "/config.json");
  // The original LFM2 config shape: full_attn_idxs only, block_ff_dim adjusted
  // to 2/3 and rounded up to block_multiple_of, theta instead of rope_parameters.
  cfg.erase("layer_types");
  cfg.erase("intermediate_size");
  cfg.erase("rope_parameters");
  cfg["block_ff_dim"] = 192;  // int(2 * 192 / 3) = 128
  cfg["block_auto_adjust_ff_dim"] = true;
  cfg["block_multiple_of"] = 64;
  cfg["block_ffn_dim_multiplier"] = nullptr;
  cfg["theta"] = 1000000.0;
  write_text(d + "/config.json", cfg.dump());
  auto m = load_model(d);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_TRUE(same_bits(all_logits(**m, ids), want));
  // A different theta must change the answer (the field is read).
  cfg["theta"] = 10000.0;
  write_text(d + "/config.json", cfg.dump());
  auto other = load_model(d);
  ASSERT_TRUE(other.ok());
  EXPECT_FALSE(same_bits(all_logits(**other, ids), want));
}

TEST(Lfm2Config, BadShapesNameTheField) {
  std::string d = copy_fixture("lfm2_moe-a", "lfm2bad");
  const auto good = read_json(d + "/config.json");
  auto expect_error = [&](const nlohmann::json& cfg, const std::string& needle) {
    write_text(d + "/config.json", cfg.dump());
    auto m = load_model(d);
    ASSERT_FALSE(m.ok()) << needle;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(m.status().message().find(needle), std::string::npos) << m.status().message();
  };
  auto c = good;
  c["layer_types"][1] = "mamba";
  expect_error(c, "layer_types");
  c = good;
  c["full_attn_idxs"] = {7};
  c.erase("layer_types");
  expect_error(c, "full_attn_idxs");
  c = good;
  c["num_experts_per_tok"] = 5;
  expect_error(c, "num_experts_per_tok");
  c = good;
  c["conv_L_cache"] = 4;  // the conv weight is [64, 1, 3]
  expect_error(c, "conv.conv.weight");
  c = good;
  c["num_dense_layers"] = 0;  // layer 0 would need experts the checkpoint lacks
  expect_error(c, "model.layers.0.feed_forward.gate.weight");
  c = good;
  c["use_expert_bias"] = false;  // loads, and the bias no longer steers the choice
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_model(d).ok());
}

TEST(Lfm2Config, MakeModelPresetsLoadAndRun) {
  for (std::string fam : {"lfm2", "lfm2_moe"}) {
    for (std::string preset : {"tiny", "small"}) {
      MakeModelOptions o;
      o.family = fam;
      o.preset = preset;
      o.seed = 5;
      o.out_dir = temp_dir("mm_" + fam + preset);
      ASSERT_TRUE(make_random_model(o).ok());
      auto m = load_model(o.out_dir);
      ASSERT_TRUE(m.ok()) << fam << " " << preset << ": " << m.status().to_string();
      EXPECT_EQ((*m)->config().model_type, fam);
      auto logits = all_logits(**m, {1, 2, 3});
      ASSERT_EQ(logits.size(), 3u * (*m)->config().vocab_size);
      for (float v : logits) ASSERT_TRUE(std::isfinite(v));
    }
  }
}

// --- The MoE router (layers.h route_experts / moe_block).

MoeWeights router_only(int32_t experts, int32_t k) {
  MoeWeights w;
  w.experts.resize(static_cast<size_t>(experts));
  w.top_k = k;
  return w;
}

TEST(MoeRouting, TiesGoToTheLowerExpertId) {
  backend::Backend& be = backend::cpu_backend();
  std::vector<float> logits = {0.5f, 0.5f, 0.5f, 0.5f, /* t1 */ 0.f, 1.f, 0.f, 1.f};
  std::vector<int32_t> ids(4);
  std::vector<float> wts(4);
  for (RouterScore score : {RouterScore::kSoftmax, RouterScore::kSigmoid}) {
    MoeWeights w = router_only(4, 2);
    w.score = score;
    w.norm_topk_prob = true;
    w.norm_eps = score == RouterScore::kSigmoid ? 1e-6f : 0.0f;
    route_experts(be, w, logits.data(), 2, ids.data(), wts.data());
    EXPECT_EQ(ids, (std::vector<int32_t>{0, 1, 1, 3})) << int(score);
    EXPECT_EQ(wts[0], wts[1]);
  }
}

TEST(MoeRouting, SelectionBiasChoosesButDoesNotWeigh) {
  backend::Backend& be = backend::cpu_backend();
  MoeWeights w = router_only(4, 2);
  w.score = RouterScore::kSigmoid;
  w.selection_bias = {0.0f, 0.0f, 1.0f, 1.0f};
  std::vector<float> logits = {2.0f, 1.0f, -1.0f, -2.0f};
  std::vector<int32_t> ids(2);
  std::vector<float> wts(2);
  route_experts(be, w, logits.data(), 1, ids.data(), wts.data());
  // Biased scores: s(-1)+1 = 1.27 > s(-2)+1 = 1.12 > s(2) = 0.88.
  EXPECT_EQ(ids, (std::vector<int32_t>{2, 3}));
  const float s2 = 1.0f / (1.0f + std::exp(1.0f)), s3 = 1.0f / (1.0f + std::exp(2.0f));
  EXPECT_FLOAT_EQ(wts[0], s2);
  EXPECT_FLOAT_EQ(wts[1], s3);
  // Renormalized with the epsilon, then scaled.
  w.norm_topk_prob = true;
  w.norm_eps = 1e-6f;
  w.routed_scale = 2.5f;
  route_experts(be, w, logits.data(), 1, ids.data(), wts.data());
  EXPECT_FLOAT_EQ(wts[0], 2.5f * s2 / (s2 + s3 + 1e-6f));
  EXPECT_FLOAT_EQ(wts[0] + wts[1], 2.5f * (s2 + s3) / (s2 + s3 + 1e-6f));
}

TEST(MoeRouting, DefaultsAreTheSoftmaxRouterOfTheBackend) {
  backend::Backend& be = backend::cpu_backend();
  auto logits_i = random_tokens(5 * 8, 4, 1000);
  std::vector<float> logits(logits_i.begin(), logits_i.end());
  for (float& x : logits) x = x / 300.0f - 1.5f;
  MoeWeights w = router_only(8, 3);
  w.norm_topk_prob = true;
  std::vector<int32_t> ids(15), want_ids(15);
  std::vector<float> wts(15), want_wts(15);
  route_experts(be, w, logits.data(), 5, ids.data(), wts.data());
  be.topk_route(logits.data(), 5, 8, 3, true, true, want_ids.data(), want_wts.data());
  EXPECT_EQ(ids, want_ids);
  EXPECT_TRUE(same_bits(wts, want_wts));
}

WeightPtr random_weight(int64_t rows, int64_t cols, uint32_t seed) {
  static std::deque<std::vector<float>> keep;  // a CPU weight may view the host bytes
  std::vector<float>& v = keep.emplace_back(static_cast<size_t>(rows * cols));
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-0.5f, 0.5f);
  for (float& x : v) x = d(g);
  return testing_util::upload_f32(v, rows, cols);
}

TEST(MoeRouting, ExpertsWithoutTokensAreSkippedAndRowsStayExact) {
  backend::Backend& be = backend::cpu_backend();
  constexpr int64_t kH = 8, kI = 4, kT = 6;
  constexpr int32_t kE = 4;
  MoeWeights w;
  w.router = random_weight(kE, kH, 1);
  w.top_k = 2;
  w.score = RouterScore::kSigmoid;
  w.norm_topk_prob = true;
  w.norm_eps = 1e-6f;
  w.selection_bias = {0.0f, -100.0f, 0.0f, -100.0f};  // experts 1 and 3 never chosen
  for (int32_t e = 0; e < kE; ++e)
    w.experts.push_back({random_weight(kI, kH, 10 + e), random_weight(kI, kH, 20 + e),
                         random_weight(kH, kI, 30 + e)});
  auto hi = random_tokens(kT * kH, 2, 1000);
  std::vector<float> h(hi.begin(), hi.end());
  for (float& x : h) x = x / 500.0f - 1.0f;
  // One token alone: two of four experts get no tokens at all. And each row is
  // the weighted sum of experts 0 and 2.
  testing_util::expect_moe_rows_exact(
      be, w, h, kT, kH, [&](int64_t t, const std::vector<float>& logit, const float* row) {
        std::vector<float> y0(kH), y2(kH);
        gated_mlp(be, w.experts[0], Activation::kSilu, h.data() + t * kH, 1, y0.data());
        gated_mlp(be, w.experts[2], Activation::kSilu, h.data() + t * kH, 1, y2.data());
        const float s0 = 1.0f / (1.0f + std::exp(-logit[0]));
        const float s2 = 1.0f / (1.0f + std::exp(-logit[2]));
        for (int64_t i = 0; i < kH; ++i) {
          float want = (s0 * y0[i] + s2 * y2[i]) / (s0 + s2 + 1e-6f);
          EXPECT_NEAR(row[i], want, 1e-5f) << t << " " << i;
        }
      });
}

}  // namespace
}  // namespace pagedkv::model
