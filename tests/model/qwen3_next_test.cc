// Gated DeltaNet hybrids (qwen3_next, qwen3_5_text, qwen3_5_moe_text; families/
// qwen3_next.cc, gated_deltanet.h): "caching never changes an answer" at the model
// level, on the Hugging Face fixtures (tests/data/hf-reference) — bit-identical
// logits and recurrent state for a 200-token prompt prefilled whole vs split at
// every block boundary (and off-boundary), resumed from a copied state checkpoint
// at every block boundary over shared paged blocks, rows batched (N = 2, 3, 8)
// vs alone, and paged vs flat. Also: MoE routing corner cases (router ties go to
// the lower expert id; experts that get no token are never run), the nested
// `qwen3_5` text_config layout, make-model presets, and bad input.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>

#include "engine/kv_cache_factory.h"
#include "engine/pool_kv_store.h"
#include "model/flat_kv_cache.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

using namespace testing_util;

std::string fixture(const std::string& name) {
  return std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + name;
}

std::vector<int32_t> random_tokens(size_t n, uint32_t seed, int32_t vocab) {
  std::mt19937 g(seed);
  std::vector<int32_t> v(n);
  std::generate(v.begin(), v.end(), [&] { return static_cast<int32_t>(g() % vocab); });
  return v;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Every layer's state, concatenated (for bitwise comparison).
std::vector<float> state_bits(const RecurrentState& s, int32_t layers) {
  std::vector<float> out;
  for (int32_t l = 0; l < layers; ++l) {
    const float* p = s.layer(l);
    if (p != nullptr) out.insert(out.end(), p, p + s.layer_floats(l));
  }
  return out;
}

// One request's KV view: flat, or paged over a hand-built block table into a
// shared pool (block ids handed out from the top of the pool downwards, so
// neighbouring positions never sit in neighbouring blocks).
struct Request {
  Request(const Model& m, bool paged_path) : flat(m.kv_geometry()), state(m.kv_geometry()) {
    paged = paged_path;
  }
  bool paged;
  FlatKVCache flat;
  RecurrentState state;
  std::vector<int32_t> table;
  int32_t length() const { return static_cast<int32_t>(state.length()); }
};

class HybridTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto m = load_model(fixture(GetParam()));
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    model_ = std::move(*m);
    auto c = engine::make_paged_cache(*model_);
    ASSERT_TRUE(c.ok()) << c.status().to_string();
    cache_ = std::move(*c);
    store_ = std::make_unique<engine::PoolKVBlockStore>(
        cache_->pool(), engine::pool_layer_slots(model_->kv_geometry()));
    next_block_ = store_->num_blocks() - 1;
    V_ = model_->config().vocab_size;
  }

  // Grows r's block table to cover `tokens` positions with fresh blocks.
  void cover(Request& r, int32_t tokens) {
    const int32_t bs = model_->kv_geometry().block_size;
    while (static_cast<int32_t>(r.table.size()) * bs < tokens) {
      ASSERT_GE(next_block_, 1) << "pool too small for the test";
      r.table.push_back(next_block_--);
    }
  }

  ForwardRow& add(ForwardBatch& b, Request& r, std::span<const int32_t> toks, LogitsRequest lr) {
    ForwardRow& row = b.add_row(toks, r.length(), lr);
    row.state = &r.state;
    if (r.paged) {
      cover(r, r.length() + static_cast<int32_t>(toks.size()));
      row.block_tables = {std::span<const int32_t>(r.table), std::span<const int32_t>()};
    } else {
      row.flat = &r.flat;
    }
    return row;
  }

  // Feeds `toks` to r in one step; returns all their logits rows.
  std::vector<float> step(Request& r, std::span<const int32_t> toks) {
    ForwardBatch b;
    b.path = r.paged ? KVPath::kPaged : KVPath::kFlat;
    b.kv_store = store_.get();
    add(b, r, toks, LogitsRequest::kAll);
    ForwardOutput out;
    Status s = model_->forward(b, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return out.logits;
  }

  // Prefill `prompt` split at `splits` (ascending), then `decode` greedy steps one
  // token at a time; returns every logits row.
  std::vector<float> run(Request& r, const std::vector<int32_t>& prompt,
                         const std::vector<int32_t>& splits, int decode) {
    std::vector<float> all;
    int32_t at = 0;
    std::vector<int32_t> ends = splits;
    ends.push_back(static_cast<int32_t>(prompt.size()));
    for (int32_t e : ends) {
      auto l = step(r, std::span<const int32_t>(prompt.data() + at, static_cast<size_t>(e - at)));
      all.insert(all.end(), l.begin(), l.end());
      at = e;
    }
    for (int i = 0; i < decode; ++i) {
      const float* last = all.data() + all.size() - V_;
      int32_t next = static_cast<int32_t>(std::max_element(last, last + V_) - last);
      auto l = step(r, std::span<const int32_t>(&next, 1));
      all.insert(all.end(), l.begin(), l.end());
    }
    return all;
  }

  int32_t layers() const { return model_->config().num_hidden_layers; }

  std::unique_ptr<Model> model_;
  std::unique_ptr<kv::PagedKVCache> cache_;
  std::unique_ptr<engine::PoolKVBlockStore> store_;
  int32_t next_block_ = 0;
  int32_t V_ = 0;
};

TEST_P(HybridTest, DeclaresRecurrentStateForGdnLayersOnly) {
  const KVGeometry& g = model_->kv_geometry();
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[0].kind, CacheGroupKind::kFullAttention);
  EXPECT_EQ(g.groups[1].kind, CacheGroupKind::kRecurrent);
  // The fixtures: layers 0-2 Gated DeltaNet, layer 3 full attention.
  EXPECT_EQ(g.layer_group, (std::vector<int32_t>{1, 1, 1, 0}));
  // conv window (4-1) x (2*2*16 + 4*16) + delta-rule state 4 x 16 x 16.
  EXPECT_EQ(g.layer_state_floats, (std::vector<int64_t>{3 * 128 + 1024, 1408, 1408, 0}));
  FlatKVCache flat(g);
  flat.reserve(100);
  // Only the attention layer holds per-token K/V on the flat path.
  EXPECT_EQ(flat.memory_bytes(), 2u * flat.capacity() * flat.token_bytes());
}

TEST_P(HybridTest, PrefillSplitAtEveryBlockBoundaryIsBitIdentical) {
  const auto prompt = random_tokens(200, 5, V_);
  Request whole(*model_, false);
  const auto want = run(whole, prompt, {}, 4);
  const auto want_state = state_bits(whole.state, layers());
  const int32_t bs = model_->kv_geometry().block_size;
  for (int32_t b = bs; b < 200; b += bs) {
    Request split(*model_, false);
    EXPECT_TRUE(same_bits(run(split, prompt, {b}, 4), want)) << "split at " << b;
    EXPECT_TRUE(same_bits(state_bits(split.state, layers()), want_state)) << "split at " << b;
  }
  // The recurrence has no chunk grid at all: any split, and many, change nothing.
  Request ragged(*model_, false);
  EXPECT_TRUE(same_bits(run(ragged, prompt, {1, 7, 16, 50, 51, 123, 199}, 4), want));
  Request one_by_one(*model_, false);
  std::vector<int32_t> every;
  for (int32_t i = 1; i < 200; ++i) every.push_back(i);
  EXPECT_TRUE(same_bits(run(one_by_one, prompt, every, 4), want));
}

TEST_P(HybridTest, ResumeFromStateCheckpointAtEveryBlockBoundaryIsBitIdentical) {
  const auto prompt = random_tokens(200, 6, V_);
  Request ref(*model_, true);
  const auto want = run(ref, prompt, {}, 4);
  const int32_t bs = model_->kv_geometry().block_size;
  for (int32_t b = bs; b < 200; b += bs) {
    next_block_ = store_->num_blocks() - 1;  // earlier iterations' requests are done
    // A first request prefills [0, b) and publishes a checkpoint there...
    Request first(*model_, true);
    auto head = run(first, std::vector<int32_t>(prompt.begin(), prompt.begin() + b), {}, 0);
    RecurrentState checkpoint = first.state;
    // ...then goes on with other tokens (its live state moves on; the copy does not).
    auto other = random_tokens(40, 100 + b, V_);
    step(first, other);
    // A second request shares the first b / bs blocks and resumes from the copy.
    Request second(*model_, true);
    second.state = checkpoint;
    second.table.assign(first.table.begin(), first.table.begin() + b / bs);
    auto tail = run(second, std::vector<int32_t>(prompt.begin() + b, prompt.end()), {}, 4);
    head.insert(head.end(), tail.begin(), tail.end());
    EXPECT_TRUE(same_bits(head, want)) << "checkpoint at " << b;
    EXPECT_TRUE(same_bits(state_bits(second.state, layers()), state_bits(ref.state, layers())));
  }
}

TEST_P(HybridTest, PagedEqualsFlat) {
  const auto prompt = random_tokens(200, 7, V_);
  Request flat(*model_, false), paged(*model_, true);
  EXPECT_TRUE(same_bits(run(flat, prompt, {}, 8), run(paged, prompt, {}, 8)));
  EXPECT_TRUE(same_bits(state_bits(flat.state, layers()), state_bits(paged.state, layers())));
  Request flat2(*model_, false), paged2(*model_, true);
  EXPECT_TRUE(same_bits(run(flat2, prompt, {64, 65}, 3), run(paged2, prompt, {64, 65}, 3)));
}

TEST_P(HybridTest, BatchedRowsEqualEachRowAlone) {
  // Rows of different lengths; some already hold a prefix (a decode row or a
  // later prefill chunk beside first chunks).
  const std::vector<std::pair<int32_t, int32_t>> shapes = {
      // {context, new tokens}
      {0, 200}, {16, 1}, {0, 17}, {33, 40}, {0, 1}, {100, 1}, {48, 64}, {0, 150}};
  for (size_t n : {2u, 3u, 8u}) {
    for (bool paged : {false, true}) {
      next_block_ = store_->num_blocks() - 1;
      std::vector<std::unique_ptr<Request>> alone, together;
      std::vector<std::vector<int32_t>> news;
      std::vector<std::vector<float>> want;
      for (size_t i = 0; i < n; ++i) {
        auto [ctx, len] = shapes[i];
        auto toks =
            random_tokens(static_cast<size_t>(ctx + len), static_cast<uint32_t>(31 * i + n), V_);
        std::vector<int32_t> head(toks.begin(), toks.begin() + ctx);
        news.emplace_back(toks.begin() + ctx, toks.end());
        alone.push_back(std::make_unique<Request>(*model_, paged));
        together.push_back(std::make_unique<Request>(*model_, paged));
        if (ctx > 0) {
          step(*alone[i], head);
          step(*together[i], head);
        }
        want.push_back(step(*alone[i], news[i]));
      }
      ForwardBatch b;
      b.path = paged ? KVPath::kPaged : KVPath::kFlat;
      b.kv_store = store_.get();
      for (size_t i = 0; i < n; ++i) add(b, *together[i], news[i], LogitsRequest::kAll);
      ForwardOutput out;
      ASSERT_TRUE(model_->forward(b, &out).ok());
      for (size_t i = 0; i < n; ++i) {
        std::vector<float> got(
            out.logits.begin() + static_cast<size_t>(out.row_begin[i]) * V_,
            out.logits.begin() + static_cast<size_t>(out.row_begin[i] + out.row_count[i]) * V_);
        EXPECT_TRUE(same_bits(got, want[i])) << "N " << n << " row " << i << " paged " << paged;
        EXPECT_TRUE(same_bits(state_bits(together[i]->state, layers()),
                              state_bits(alone[i]->state, layers())))
            << "N " << n << " row " << i;
      }
    }
  }
}

TEST_P(HybridTest, StateOfAnotherGeometryOrLengthIsRejected) {
  std::vector<int32_t> toks = {1, 2, 3};
  Request r(*model_, false);
  ForwardBatch b;
  b.path = KVPath::kFlat;
  add(b, r, toks, LogitsRequest::kLast);
  b.rows[0].state = nullptr;
  ForwardOutput out;
  Status s = model_->forward(b, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  KVGeometry other = model_->kv_geometry();
  other.layer_state_floats[0] += 1;
  RecurrentState wrong(other);
  b.rows[0].state = &wrong;
  s = model_->forward(b, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("not made for this model"), std::string::npos) << s.message();
  b.rows[0].state = &r.state;
  r.state.set_length(2);
  s = model_->forward(b, &out);
  EXPECT_NE(s.message().find("holds 2 tokens"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HybridTest,
                         ::testing::Values("qwen3_5_text-a", "qwen3_5_moe_text-a", "qwen3_next-a"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// All logits of `ids` in one flat-path step.
StatusOr<std::vector<float>> all_logits_of(const std::string& dir,
                                           const std::vector<int32_t>& ids) {
  PKV_ASSIGN_OR_RETURN(auto m, load_model(dir));
  FlatKVCache flat(m->kv_geometry());
  RecurrentState state(m->kv_geometry());
  ForwardBatch b;
  b.path = KVPath::kFlat;
  ForwardRow& row = b.add_row(ids, 0, LogitsRequest::kAll);
  row.flat = &flat;
  row.state = &state;
  ForwardOutput out;
  PKV_RETURN_IF_ERROR(m->forward(b, &out));
  return out.logits;
}

std::string copy_fixture(const std::string& name, const std::string& tag) {
  std::string d = temp_dir(tag);
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(fixture(name) + "/" + f, d + "/" + f);
  return d;
}

// Sets every value of the tensors whose names contain `part` to `value`.
void fill_tensors(const std::string& dir, const std::string& part, float value) {
  rewrite_tensors(dir, [&](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.name.find(part) == std::string::npos) continue;
      ASSERT_EQ(t.dtype, DType::kF32);
      for (size_t i = 0; i + 4 <= t.bytes.size(); i += 4) std::memcpy(&t.bytes[i], &value, 4);
    }
  });
}

class MoeCornerTest : public ::testing::TestWithParam<std::string> {};

// A zero router scores every expert alike: the ties go to the lower ids (top-2 =
// experts 0 and 1 for every token), and experts 2 and 3 get no token at all, so
// their weights — even NaN — never reach the output.
TEST_P(MoeCornerTest, RouterTiesPickLowerIdsAndIdleExpertsNeverRun) {
  const auto ids = random_tokens(40, 9, 512);
  std::string tied = copy_fixture(GetParam(), "tied");
  fill_tensors(tied, "mlp.gate.weight", 0.0f);
  auto base = all_logits_of(tied, ids);
  ASSERT_TRUE(base.ok()) << base.status().to_string();
  std::string nan_idle = copy_fixture(GetParam(), "nan");
  fill_tensors(nan_idle, "mlp.gate.weight", 0.0f);
  fill_tensors(nan_idle, "mlp.experts.2.", std::nanf(""));
  fill_tensors(nan_idle, "mlp.experts.3.", 1e30f);
  auto with_nan = all_logits_of(nan_idle, ids);
  ASSERT_TRUE(with_nan.ok()) << with_nan.status().to_string();
  EXPECT_TRUE(same_bits(*base, *with_nan));
  // The chosen experts do matter: poisoning expert 1 is caught as a NaN logit.
  std::string nan_used = copy_fixture(GetParam(), "nan_used");
  fill_tensors(nan_used, "mlp.gate.weight", 0.0f);
  fill_tensors(nan_used, "mlp.experts.1.", std::nanf(""));
  auto poisoned = all_logits_of(nan_used, ids);
  EXPECT_EQ(poisoned.status().code(), StatusCode::kInternal);
}

// The shared expert runs on every token and its sigmoid gate only scales its
// output (the gate's values are checked against transformers by the oracle
// test): with a zero down projection the gate's weights cannot matter.
TEST_P(MoeCornerTest, SharedExpertContributesAndItsGateOnlyScalesIt) {
  const auto ids = random_tokens(24, 10, 512);
  auto orig = all_logits_of(fixture(GetParam()), ids);
  ASSERT_TRUE(orig.ok());
  std::string off = copy_fixture(GetParam(), "shared_off");
  fill_tensors(off, "shared_expert.down_proj", 0.0f);
  auto zeroed = all_logits_of(off, ids);
  ASSERT_TRUE(zeroed.ok());
  EXPECT_FALSE(same_bits(*orig, *zeroed));  // the shared expert contributes
  fill_tensors(off, "shared_expert_gate", 3.0f);
  auto regated = all_logits_of(off, ids);
  ASSERT_TRUE(regated.ok());
  EXPECT_TRUE(same_bits(*zeroed, *regated));
  // ...while with the real down projection a different gate changes the answer.
  std::string gated = copy_fixture(GetParam(), "gated");
  fill_tensors(gated, "shared_expert_gate", 0.0f);
  auto half = all_logits_of(gated, ids);
  ASSERT_TRUE(half.ok());
  EXPECT_FALSE(same_bits(*orig, *half));
}

INSTANTIATE_TEST_SUITE_P(Fixtures, MoeCornerTest,
                         ::testing::Values("qwen3_5_moe_text-a", "qwen3_next-a"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

// A multimodal Qwen3.5 checkpoint nests the language model under text_config and
// names its tensors model.language_model.*: it loads as qwen3_5_text, same bits.
TEST(Qwen35NestedTest, NestedTextConfigLoadsAsTheLanguageModel) {
  const auto ids = random_tokens(30, 11, 512);
  auto flat_layout = all_logits_of(fixture("qwen3_5_text-a"), ids);
  ASSERT_TRUE(flat_layout.ok());
  std::string d = copy_fixture("qwen3_5_text-a", "nested");
  nlohmann::json text = read_json(d + "/config.json");
  nlohmann::json top = {{"model_type", "qwen3_5"},
                        {"architectures", {"Qwen3_5ForConditionalGeneration"}},
                        {"tie_word_embeddings", false}};
  text.erase("architectures");
  text.erase("model_type");
  top["text_config"] = text;
  write_text(d + "/config.json", top.dump(2));
  rewrite_tensors(d, [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts)
      if (t.name.rfind("model.", 0) == 0) t.name = "model.language_model." + t.name.substr(6);
  });
  auto nested = all_logits_of(d, ids);
  ASSERT_TRUE(nested.ok()) << nested.status().to_string();
  EXPECT_TRUE(same_bits(*flat_layout, *nested));
  auto m = load_model(d);
  ASSERT_TRUE(m.ok());
  EXPECT_EQ((*m)->config().model_type, "qwen3_5_text");
}

TEST(Qwen3NextLoadTest, MissingGdnTensorIsNamed) {
  std::string d = copy_fixture("qwen3_next-a", "missing");
  rewrite_tensors(d, [](std::vector<OwnedTensor>& ts) {
    std::erase_if(
        ts, [](const OwnedTensor& t) { return t.name == "model.layers.1.linear_attn.A_log"; });
  });
  auto m = load_model(d);
  ASSERT_FALSE(m.ok());
  EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("model.layers.1.linear_attn.A_log"), std::string::npos)
      << m.status().message();
}

TEST(Qwen3NextLoadTest, BadLinearHeadsAreRejected) {
  std::string d = copy_fixture("qwen3_next-a", "heads");
  nlohmann::json c = read_json(d + "/config.json");
  c["linear_num_key_heads"] = 3;
  write_text(d + "/config.json", c.dump());
  auto m = load_model(d);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("linear_num_key_heads"), std::string::npos);
  c["linear_num_key_heads"] = 2;
  c["layer_types"][1] = "mamba";
  write_text(d + "/config.json", c.dump());
  m = load_model(d);
  ASSERT_FALSE(m.ok());
  EXPECT_NE(m.status().message().find("'mamba'"), std::string::npos) << m.status().message();
}

class PresetTest : public ::testing::TestWithParam<std::string> {};

// make-model's tiny preset of each family loads, runs, and a one-token-at-a-time
// decode over both paths agrees bit for bit with one whole pass.
TEST_P(PresetTest, TinyPresetLoadsAndRuns) {
  for (int32_t layers : {0, 5}) {
    std::string d = make_tiny(GetParam(), 3, "preset", DType::kF32, layers);
    auto m = load_model(d);
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ((*m)->config().model_type, GetParam());
    EXPECT_TRUE((*m)->kv_geometry().has_recurrent_state());
    const auto ids = random_tokens(20, 12, (*m)->config().vocab_size);
    auto whole = all_logits_of(d, ids);
    ASSERT_TRUE(whole.ok()) << whole.status().to_string();
    for (float v : *whole) ASSERT_TRUE(std::isfinite(v));
    FlatKVCache flat((*m)->kv_geometry());
    RecurrentState state((*m)->kv_geometry());
    std::vector<float> stepped;
    for (size_t i = 0; i < ids.size(); ++i) {
      ForwardBatch b;
      b.path = KVPath::kFlat;
      ForwardRow& row = b.add_row(std::span<const int32_t>(&ids[i], 1), static_cast<int32_t>(i),
                                  LogitsRequest::kAll);
      row.flat = &flat;
      row.state = &state;
      ForwardOutput out;
      ASSERT_TRUE((*m)->forward(b, &out).ok());
      stepped.insert(stepped.end(), out.logits.begin(), out.logits.end());
    }
    EXPECT_TRUE(same_bits(*whole, stepped)) << GetParam() << " layers " << layers;
  }
}

INSTANTIATE_TEST_SUITE_P(Families, PresetTest,
                         ::testing::Values("qwen3_next", "qwen3_5_text", "qwen3_5_moe_text"));

}  // namespace
}  // namespace pagedkv::model
