// NemotronH (Mamba-2 + attention + relu² MLP + MoE) beyond the oracle: caching
// never changes an answer. Bit-identical logits and recurrent state for a prompt
// consumed whole vs split at every block boundary (and at odd points), resumed
// from a state checkpoint copy, batched (N = 2, 3, 8 rows of different lengths)
// vs serial, paged (hand-built shuffled block tables over a LayerKVPool) vs flat.
// Also: group-limited sigmoid routing (ties, group choice), MoE experts no token
// chose, the make-model preset, config spellings and errors. Each runs on the
// transformers fixture (tests/data/hf-reference/nemotron_h-a) and on the tiny
// make-model preset (which routes with n_group 2 / topk_group 1).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "engine/pool_kv_store.h"
#include "hybrid_test_util.h"
#include "kv/layer_kv_pool.h"
#include "model/flat_kv_cache.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

using testing_util::expect_moe_rows_exact;
using testing_util::make_tiny;
using testing_util::read_json;
using testing_util::same_state;
using testing_util::temp_dir;
using testing_util::upload_f32;
using testing_util::write_text;

std::string fixture_dir() {
  return std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/nemotron_h-a";
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab) {
  std::vector<int32_t> out(n);
  std::mt19937 rng(seed);
  std::generate(out.begin(), out.end(), [&] { return static_cast<int32_t>(rng() % vocab); });
  return out;
}

// One request: its flat cache, recurrent state and (paged path) block table.
struct Req {
  Req(const KVGeometry& g)
      : flat(std::make_unique<FlatKVCache>(g)), state(std::make_unique<RecurrentState>(g)) {}
  std::unique_ptr<FlatKVCache> flat;
  std::unique_ptr<RecurrentState> state;
  std::vector<int32_t> table;
  int32_t len = 0;
};

struct Span {
  Req* req;
  std::vector<int32_t> tokens;
};

// Runs every span as one row of ONE batch (kAll logits); returns each row's
// logits [num_tokens][vocab] and advances the requests.
std::vector<std::vector<float>> step(Model& m, const std::vector<Span>& spans,
                                     KVPath path = KVPath::kFlat, KVBlockStore* store = nullptr) {
  ForwardBatch b;
  b.path = path;
  b.kv_store = store;
  const size_t groups = m.kv_geometry().groups.size();
  for (const Span& s : spans) {
    ForwardRow& row = b.add_row(s.tokens, s.req->len, LogitsRequest::kAll);
    row.flat = s.req->flat.get();
    row.state = s.req->state.get();
    if (path == KVPath::kPaged) {
      row.block_tables.assign(groups, std::span<const int32_t>());
      row.block_tables[0] = s.req->table;
    }
  }
  ForwardOutput out;
  Status st = m.forward(b, &out);
  EXPECT_TRUE(st.ok()) << st.to_string();
  std::vector<std::vector<float>> res(spans.size());
  if (!st.ok()) return res;
  const int32_t V = out.vocab_size;
  for (size_t r = 0; r < spans.size(); ++r) {
    res[r].assign(
        out.logits.begin() + static_cast<size_t>(out.row_begin[r]) * V,
        out.logits.begin() + static_cast<size_t>(out.row_begin[r] + out.row_count[r]) * V);
    spans[r].req->len += static_cast<int32_t>(spans[r].tokens.size());
  }
  return res;
}

std::vector<float> run_alone(Model& m, Req& req, const std::vector<int32_t>& tokens) {
  return step(m, {Span{&req, tokens}})[0];
}

bool same_bits(const std::vector<float>& a, const float* b, size_t n) {
  return a.size() == n && std::memcmp(a.data(), b, n * sizeof(float)) == 0;
}

std::vector<int32_t> slice(const std::vector<int32_t>& v, size_t a, size_t b) {
  return std::vector<int32_t>(v.begin() + a, v.begin() + b);
}

class NemotronH : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    dir_ = GetParam() == "fixture" ? fixture_dir() : make_tiny("nemotron_h", 11, "nh");
    auto m = load_model(dir_);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
  }
  const KVGeometry& geom() const { return model_->kv_geometry(); }
  int32_t vocab() const { return model_->config().vocab_size; }
  std::string dir_;
  std::unique_ptr<Model> model_;
};

TEST_P(NemotronH, GeometryDeclaresAttentionKVAndMambaStateOnly) {
  const KVGeometry& g = geom();
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[0].kind, CacheGroupKind::kFullAttention);
  EXPECT_EQ(g.groups[1].kind, CacheGroupKind::kRecurrent);
  ASSERT_TRUE(g.has_recurrent_state());
  int attention = 0, mamba = 0;
  for (int32_t l = 0; l < g.num_layers; ++l) {
    attention += g.layer_group[l] == 0;
    mamba += g.layer_state_floats[l] > 0;
    EXPECT_FALSE(g.layer_group[l] == 0 && g.layer_state_floats[l] > 0) << l;
  }
  EXPECT_GE(attention, 1);
  EXPECT_GE(mamba, 1);
  if (GetParam() == "fixture") {
    // conv (4-1) x (64 + 2*2*8) + SSM 8 heads x 8 x 8.
    EXPECT_EQ(g.layer_state_floats[0], 3 * 96 + 8 * 8 * 8);
    EXPECT_EQ(g.layer_group, (std::vector<int32_t>{-1, -1, 0, -1, -1, -1}));
  }
  // The flat path allocates K/V for the attention layers only.
  FlatKVCache flat(g);
  flat.reserve(16);
  EXPECT_EQ(flat.memory_bytes(),
            static_cast<size_t>(attention) * 16 * g.bytes_per_token_per_layer());
}

TEST_P(NemotronH, PrefillSplitAtEveryBlockBoundaryIsBitIdentical) {
  const int32_t n = 200, bs = geom().block_size;
  std::vector<int32_t> prompt = random_tokens(n, 7, vocab());
  Req whole(geom());
  std::vector<float> ref = run_alone(*model_, whole, prompt);
  ASSERT_EQ(ref.size(), static_cast<size_t>(n) * vocab());
  std::vector<int32_t> splits;
  for (int32_t b = bs; b < n; b += bs) splits.push_back(b);
  for (int32_t b : {1, 3, 7, 33, 199}) splits.push_back(b);  // not block-aligned: still exact
  for (int32_t b : splits) {
    SCOPED_TRACE("split at " + std::to_string(b));
    Req r(geom());
    std::vector<float> a = run_alone(*model_, r, slice(prompt, 0, b));
    std::vector<float> c = run_alone(*model_, r, slice(prompt, b, n));
    EXPECT_TRUE(same_bits(a, ref.data(), static_cast<size_t>(b) * vocab()));
    EXPECT_TRUE(same_bits(c, ref.data() + static_cast<size_t>(b) * vocab(),
                          static_cast<size_t>(n - b) * vocab()));
    EXPECT_TRUE(same_state(*r.state, *whole.state, geom().num_layers));
  }
  // Many chunks of one block each, then one token at a time: the same bits again.
  Req r(geom());
  for (int32_t b = 0; b < 96; b += bs) {
    auto l = run_alone(*model_, r, slice(prompt, b, b + bs));
    ASSERT_TRUE(same_bits(l, ref.data() + static_cast<size_t>(b) * vocab(),
                          static_cast<size_t>(bs) * vocab()));
  }
  for (int32_t p = 96; p < n; ++p) {
    auto l = run_alone(*model_, r, slice(prompt, p, p + 1));
    ASSERT_TRUE(same_bits(l, ref.data() + static_cast<size_t>(p) * vocab(), vocab())) << p;
  }
  EXPECT_TRUE(same_state(*r.state, *whole.state, geom().num_layers));
}

TEST_P(NemotronH, ResumeFromCheckpointCopyIsBitIdentical) {
  const int32_t n = 200, bs = geom().block_size;
  std::vector<int32_t> prompt = random_tokens(n, 8, vocab());
  std::vector<int32_t> other = random_tokens(40, 9, vocab());
  Req whole(geom());
  std::vector<float> ref = run_alone(*model_, whole, prompt);
  for (int32_t b = bs; b < n; b += bs) {
    SCOPED_TRACE("checkpoint at " + std::to_string(b));
    Req r(geom());
    run_alone(*model_, r, slice(prompt, 0, b));
    // The checkpoint: a copy of the state (and of the attention K/V, which the
    // prefix cache would share) at the block boundary.
    Req resumed(geom());
    *resumed.state = *r.state;
    *resumed.flat = *r.flat;
    resumed.len = r.len;
    // The original request goes on with other tokens (the copy must not alias it).
    run_alone(*model_, r, other);
    std::vector<float> tail = run_alone(*model_, resumed, slice(prompt, b, n));
    EXPECT_TRUE(same_bits(tail, ref.data() + static_cast<size_t>(b) * vocab(),
                          static_cast<size_t>(n - b) * vocab()));
    EXPECT_TRUE(same_state(*resumed.state, *whole.state, geom().num_layers));
  }
}

TEST_P(NemotronH, BatchedRowsOfDifferentLengthsMatchSerial) {
  for (int N : {2, 3, 8}) {
    SCOPED_TRACE("N = " + std::to_string(N));
    std::vector<std::vector<int32_t>> prompts, extra;
    for (int i = 0; i < N; ++i) {
      prompts.push_back(random_tokens(static_cast<size_t>(5 + 23 * i), 100 + i, vocab()));
      extra.push_back(random_tokens(static_cast<size_t>(4 + i), 200 + i, vocab()));
    }
    // Serial: each request alone — prefill, then its extra tokens one at a time.
    std::vector<std::unique_ptr<Req>> serial, batched;
    std::vector<std::vector<float>> s_logits(N), b_logits(N);
    for (int i = 0; i < N; ++i) {
      serial.push_back(std::make_unique<Req>(geom()));
      s_logits[i] = run_alone(*model_, *serial[i], prompts[i]);
      for (int32_t t : extra[i]) {
        auto l = run_alone(*model_, *serial[i], {t});
        s_logits[i].insert(s_logits[i].end(), l.begin(), l.end());
      }
      batched.push_back(std::make_unique<Req>(geom()));
    }
    // Batched: all prefills in one batch; then decode steps of every row still
    // going, with row 0 restarting as a fresh prefill chunk mixed in.
    std::vector<Span> spans;
    for (int i = 0; i < N; ++i) spans.push_back({batched[i].get(), prompts[i]});
    auto out = step(*model_, spans);
    for (int i = 0; i < N; ++i) b_logits[i] = out[i];
    for (size_t k = 0;; ++k) {
      spans.clear();
      std::vector<int> who;
      for (int i = 0; i < N; ++i)
        if (k < extra[i].size()) {
          spans.push_back({batched[i].get(), {extra[i][k]}});
          who.push_back(i);
        }
      if (spans.empty()) break;
      out = step(*model_, spans);
      for (size_t j = 0; j < who.size(); ++j)
        b_logits[who[j]].insert(b_logits[who[j]].end(), out[j].begin(), out[j].end());
    }
    for (int i = 0; i < N; ++i) {
      EXPECT_TRUE(same_bits(b_logits[i], s_logits[i].data(), s_logits[i].size())) << "row " << i;
      EXPECT_TRUE(same_state(*batched[i]->state, *serial[i]->state, geom().num_layers)) << i;
    }
  }
}

TEST_P(NemotronH, PagedWithShuffledBlockTablesMatchesFlat) {
  const int32_t n = 200, bs = geom().block_size;
  std::vector<int32_t> prompt = random_tokens(n, 12, vocab());
  std::vector<int32_t> prompt2 = random_tokens(77, 13, vocab());
  kv::KVGeometry pg;
  pg.num_layers = geom().num_layers;
  pg.num_kv_heads = geom().num_kv_heads;
  pg.head_dim = geom().head_dim;
  pg.block_size = bs;
  pg.dtype = geom().dtype;
  const int32_t per_req = (n + 8 + bs - 1) / bs;
  auto pool = kv::LayerKVPool::create(pg, 2 * per_req + 1, kv::host_kv_storage());
  ASSERT_TRUE(pool.ok()) << pool.status().to_string();
  engine::PoolKVBlockStore store(pool->get());
  // Hand-built block tables: the pool's blocks 1.. shuffled between two requests.
  std::vector<int32_t> ids;
  for (int32_t i = 1; i <= 2 * per_req; ++i) ids.push_back(i);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(5));
  Req pa(geom()), pb(geom()), fa(geom()), fb(geom());
  pa.table.assign(ids.begin(), ids.begin() + per_req);
  pb.table.assign(ids.begin() + per_req, ids.end());
  // Flat: each request alone, whole prompt then decode.
  std::vector<float> ra = run_alone(*model_, fa, prompt);
  std::vector<float> rb = run_alone(*model_, fb, prompt2);
  // Paged: both requests batched, in chunks that cross block boundaries.
  std::vector<float> la, lb;
  auto append = [](std::vector<float>& d, const std::vector<float>& s) {
    d.insert(d.end(), s.begin(), s.end());
  };
  auto o = step(*model_, {{&pa, slice(prompt, 0, 37)}, {&pb, slice(prompt2, 0, 16)}},
                KVPath::kPaged, &store);
  append(la, o[0]);
  append(lb, o[1]);
  o = step(*model_, {{&pa, slice(prompt, 37, 120)}, {&pb, slice(prompt2, 16, 77)}}, KVPath::kPaged,
           &store);
  append(la, o[0]);
  append(lb, o[1]);
  o = step(*model_, {{&pa, slice(prompt, 120, 200)}}, KVPath::kPaged, &store);
  append(la, o[0]);
  EXPECT_TRUE(same_bits(la, ra.data(), ra.size()));
  EXPECT_TRUE(same_bits(lb, rb.data(), rb.size()));
  EXPECT_TRUE(same_state(*pa.state, *fa.state, geom().num_layers));
  EXPECT_TRUE(same_state(*pb.state, *fb.state, geom().num_layers));
  // Decode steps, batched on the paged path vs alone on the flat one.
  std::vector<int32_t> next = random_tokens(6, 14, vocab());
  for (int32_t t : next) {
    auto p = step(*model_, {{&pa, {t}}, {&pb, {t}}}, KVPath::kPaged, &store);
    auto fa1 = run_alone(*model_, fa, {t});
    auto fb1 = run_alone(*model_, fb, {t});
    EXPECT_TRUE(same_bits(p[0], fa1.data(), fa1.size()));
    EXPECT_TRUE(same_bits(p[1], fb1.data(), fb1.size()));
  }
}

TEST_P(NemotronH, StateLengthMustMatchContext) {
  Req r(geom());
  run_alone(*model_, r, {1, 2, 3});
  EXPECT_EQ(r.state->length(), 3);
  ForwardBatch b;
  b.path = KVPath::kFlat;
  std::vector<int32_t> t = {4};
  ForwardRow& row = b.add_row(t, 2, LogitsRequest::kLast);  // context 2, state holds 3
  row.flat = r.flat.get();
  row.state = r.state.get();
  ForwardOutput out;
  Status s = model_->forward(b, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("recurrent state holds 3 tokens"), std::string::npos) << s.message();
  // A state made for another geometry (fewer floats in a Mamba-2 layer).
  KVGeometry other = geom();
  for (auto& n : other.layer_state_floats)
    if (n > 0) n -= 1;
  RecurrentState wrong(other);
  wrong.set_length(3);
  b.rows[0].state = &wrong;
  b.rows[0].context_len = 3;
  b.positions[0] = 3;
  s = model_->forward(b, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not sized for this model"), std::string::npos) << s.message();
  b.rows[0].state = nullptr;
  b.rows[0].context_len = 3;
  b.positions[0] = 3;
  s = model_->forward(b, &out);
  EXPECT_NE(s.message().find("has none"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(model, NemotronH, ::testing::Values("fixture", "tiny_preset"),
                         [](const auto& info) { return info.param; });

// ---- MoE routing corner cases (layers: route_experts, moe_block) ----

MoeWeights sigmoid_router(int32_t E, int32_t top_k, std::vector<float> bias) {
  MoeWeights w;
  w.experts.resize(static_cast<size_t>(E));
  w.top_k = top_k;
  w.score = RouterScore::kSigmoid;
  w.selection_bias = std::move(bias);
  w.norm_topk_prob = true;
  w.norm_eps = 1e-20f;
  return w;
}

TEST(NemotronHRouting, TiesPickLowerIdsAndWeightsAreTheUnbiasedScores) {
  backend::Backend& be = backend::cpu_backend();
  std::vector<float> logits(4, 0.0f);  // every sigmoid score 0.5
  int32_t ids[2];
  float wts[2];
  MoeWeights w = sigmoid_router(4, 2, {0.0f, 0.0f, 0.0f, 0.0f});
  route_experts(be, w, logits.data(), 1, ids, wts);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  EXPECT_EQ(wts[0], 0.5f);
  EXPECT_EQ(wts[1], 0.5f);
  // A tie between experts 1 and 3 (biased above the rest): the lower id first.
  w.selection_bias = {0.0f, 0.25f, 0.0f, 0.25f};
  w.routed_scale = 2.5f;
  route_experts(be, w, logits.data(), 1, ids, wts);
  EXPECT_EQ(ids[0], 1);
  EXPECT_EQ(ids[1], 3);
  EXPECT_EQ(wts[0], 1.25f);  // 0.5 / (0.5 + 0.5) * 2.5: the bias never weights
}

TEST(NemotronHRouting, GroupLimitedSelectionChoosesByTheGroupsTopTwoSum) {
  backend::Backend& be = backend::cpu_backend();
  std::vector<float> logits(4, 0.0f);
  int32_t ids[2];
  float wts[2];
  // Selection scores 0.6 0.6 | 0.1 0.9: expert 3 is the best single expert, but
  // group 0 sums 1.2 > group 1's 1.0.
  MoeWeights w = sigmoid_router(4, 2, {0.1f, 0.1f, -0.4f, 0.4f});
  route_experts(be, w, logits.data(), 1, ids, wts);  // no groups: 3, then 0
  EXPECT_EQ(ids[0], 3);
  EXPECT_EQ(ids[1], 0);
  w.n_group = 2;
  w.topk_group = 1;
  route_experts(be, w, logits.data(), 1, ids, wts);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  // Two groups tied on their sums: the lower group wins.
  w.selection_bias = {0.1f, 0.0f, 0.0f, 0.1f};
  route_experts(be, w, logits.data(), 1, ids, wts);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 1);
  // Both groups eligible: plain top-2 again.
  w.topk_group = 2;
  route_experts(be, w, logits.data(), 1, ids, wts);
  EXPECT_EQ(ids[0], 0);
  EXPECT_EQ(ids[1], 3);
}

TEST(NemotronHRouting, ExpertsWithoutTokensAreSkippedAndRowsStayExact) {
  backend::Backend& be = backend::cpu_backend();
  const int64_t H = 8, I = 4, E = 4, T = 5;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  auto rnd = [&](size_t n) {
    std::vector<float> v(n);
    for (auto& x : v) x = u(rng);
    return v;
  };
  std::vector<std::vector<float>> host;  // keeps uploaded bytes alive
  // Router rows: expert 1 and 2 get a large bias, so 0 and 3 never get a token.
  MoeWeights w = sigmoid_router(E, 2, {-5.0f, 5.0f, 5.0f, -5.0f});
  w.act = Activation::kRelu2;
  host.push_back(rnd(E * H));
  w.router = upload_f32(host.back(), E, H);
  for (auto& e : w.experts) {
    host.push_back(rnd(I * H));
    e.up = upload_f32(host.back(), I, H);
    host.push_back(rnd(H * I));
    e.down = upload_f32(host.back(), H, I);
  }
  std::vector<float> h = rnd(T * H);
  // Each token alone gives the same bits (M-invariance, empty experts skipped).
  // And it is w1·e1(h) + w2·e2(h) in rank order, computed by hand.
  expect_moe_rows_exact(
      be, w, h, T, H, [&](int64_t t, const std::vector<float>& logit, const float* row) {
        std::vector<float> e1(H), e2(H);
        int32_t ids[2];
        float wts[2];
        route_experts(be, w, logit.data(), 1, ids, wts);
        ASSERT_TRUE((ids[0] == 1 && ids[1] == 2) || (ids[0] == 2 && ids[1] == 1));
        plain_mlp(be, w.experts[ids[0]], Activation::kRelu2, h.data() + t * H, 1, e1.data());
        plain_mlp(be, w.experts[ids[1]], Activation::kRelu2, h.data() + t * H, 1, e2.data());
        for (int64_t d = 0; d < H; ++d) {
          float want = e1[d] * wts[0];
          want += e2[d] * wts[1];
          EXPECT_EQ(want, row[d]) << t << "," << d;
        }
      });
}

// ---- config spellings and errors ----

std::string copy_fixture(const std::string& tag) {
  std::string d = temp_dir(tag);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(fixture_dir() + "/" + f, d + "/" + f);
  return d;
}

std::vector<float> all_logits(Model& m, const std::vector<int32_t>& ids) {
  Req r(m.kv_geometry());
  return run_alone(m, r, ids);
}

TEST(NemotronHConfig, LegacySpellingsLoadTheSameModel) {
  std::vector<int32_t> ids = random_tokens(40, 21, 512);
  auto ref = load_model(fixture_dir());
  ASSERT_TRUE(ref.ok());
  std::vector<float> want = all_logits(**ref, ids);
  for (int variant = 0; variant < 2; ++variant) {
    std::string d = copy_fixture("legacy" + std::to_string(variant));
    auto c = read_json(d + "/config.json");
    if (variant == 0) {
      c.erase("layers_block_type");
      c["hybrid_override_pattern"] = "M-*EM-";
    } else {
      c["layers_block_type"] = {"mamba", "mlp", "attention", "moe", "mamba", "mlp"};
      c["mamba_n_groups"] = c["n_groups"];
      c.erase("n_groups");
      c["mamba_d_conv"] = c["conv_kernel"];
      c.erase("conv_kernel");
    }
    write_text(d + "/config.json", c.dump());
    auto m = load_model(d);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    std::vector<float> got = all_logits(**m, ids);
    EXPECT_TRUE(same_bits(got, want.data(), want.size())) << variant;
  }
}

TEST(NemotronHConfig, BadConfigsAreRejectedByName) {
  struct Case {
    std::function<void(nlohmann::json&)> edit;
    std::string field;
  };
  std::vector<Case> cases = {
      {[](nlohmann::json& c) { c["layers_block_type"][1] = "sliding_attention"; },
       "layers_block_type"},
      {[](nlohmann::json& c) { c["n_groups"] = 3; }, "n_groups"},
      {[](nlohmann::json& c) { c["mlp_hidden_act"] = "gelu"; }, "mlp_hidden_act"},
      {[](nlohmann::json& c) { c["n_group"] = 3; }, "n_group"},
      {[](nlohmann::json& c) {
         c["n_group"] = 4;
         c["topk_group"] = 1;
       },
       "topk_group"},
      {[](nlohmann::json& c) { c["moe_latent_size"] = 16; }, "moe_latent_size"},
      {[](nlohmann::json& c) { c["ssm_state_size"] = 16; }, "in_proj.weight"},
      {[](nlohmann::json& c) { c["layers_block_type"].push_back("mlp"); }, "layers_block_type"},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    std::string d = copy_fixture("bad" + std::to_string(i));
    auto c = read_json(d + "/config.json");
    cases[i].edit(c);
    write_text(d + "/config.json", c.dump());
    auto m = load_model(d);
    ASSERT_FALSE(m.ok()) << i;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << i;
    EXPECT_NE(m.status().message().find(cases[i].field), std::string::npos)
        << i << ": " << m.status().message();
  }
}

}  // namespace
}  // namespace pagedkv::model
