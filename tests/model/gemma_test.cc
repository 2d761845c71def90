// Gemma families (gemma3_text, gemma4_text) beyond the oracle: every cached path
// gives the bits of one whole flat run — chunked prefill of any size, a batch of
// rows against each row alone, and the paged path driven with hand-built block
// tables for the two cache groups (full + sliding), where sliding blocks wholly
// outside the window are the null block 0, their storage poisoned with NaN and
// recycled for later blocks. Prompts run to 500 tokens (many windows of 24/32).
// The same on make-model's gemma4_text tiny-global preset, whose full-attention
// layers have their own KV shape (global_head_dim, num_global_key_value_heads:
// per-group pool shapes). Also: make-model's gemma presets, softcapping, a
// nested text_config, per_layer_config, and the config shapes we reject.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "model/flat_kv_cache.h"
#include "model/make_model.h"
#include "model/model.h"
#include "pagedkv/engine.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

namespace fs = std::filesystem;
using testing_util::read_json;
using testing_util::temp_dir;
using testing_util::write_text;

// A checkpoint directory: a fixture of tests/data/hf-reference, or
// "preset:<family>/<preset>" made once per process by make-model (seed 3).
std::string fixture(const std::string& name) {
  if (name.rfind("preset:", 0) == 0) {
    static std::map<std::string, std::string> made;
    auto it = made.find(name);
    if (it != made.end()) return it->second;
    const size_t slash = name.find('/');
    MakeModelOptions o;
    o.family = name.substr(7, slash - 7);
    o.preset = name.substr(slash + 1);
    o.seed = 3;
    o.out_dir = temp_dir("gemma_preset");
    Status s = make_random_model(o);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return made[name] = o.out_dir;
  }
  return std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + name;
}

const char kTinyGlobal[] = "preset:gemma4_text/tiny-global";

std::unique_ptr<Model> load(const std::string& dir, KVDType dt = KVDType::kF32) {
  LoadOptions o;
  o.kv_dtype = dt;
  auto m = load_model(dir, o);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  return m.ok() ? std::move(*m) : nullptr;
}

std::vector<int32_t> random_tokens(size_t n, int32_t vocab, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int32_t> d(0, vocab - 1);
  std::vector<int32_t> v(n);
  for (auto& t : v) t = d(rng);
  return v;
}

// Logits of every position, the sequence fed in chunks of the given sizes
// (cycled), one forward per chunk. `add_chunk(b, pos, n)` sets the batch's path
// and adds the chunk seq[pos, pos + n) as its one row.
std::vector<float> chunked_logits(
    Model& m, const std::vector<int32_t>& seq, const std::vector<int32_t>& chunks,
    const std::function<void(ForwardBatch&, int32_t pos, size_t n)>& add_chunk) {
  std::vector<float> all;
  size_t pos = 0, ci = 0;
  while (pos < seq.size()) {
    size_t n =
        std::min<size_t>(static_cast<size_t>(chunks[ci++ % chunks.size()]), seq.size() - pos);
    ForwardBatch b;
    add_chunk(b, static_cast<int32_t>(pos), n);
    ForwardOutput out;
    Status s = m.forward(b, &out);
    EXPECT_TRUE(s.ok()) << s.to_string();
    if (!s.ok()) return {};
    all.insert(all.end(), out.logits.begin(), out.logits.end());
    pos += n;
  }
  return all;
}

// chunked_logits on the flat path.
std::vector<float> flat_logits(Model& m, const std::vector<int32_t>& seq,
                               const std::vector<int32_t>& chunks) {
  FlatKVCache flat(m.kv_geometry());
  return chunked_logits(m, seq, chunks, [&](ForwardBatch& b, int32_t pos, size_t n) {
    b.path = KVPath::kFlat;
    b.add_row(std::span<const int32_t>(seq.data() + pos, n), pos, LogitsRequest::kAll).flat = &flat;
  });
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// Paged storage for the tests: per layer one array of blocks, each of its
// layer's group shape (KVGeometry::layer_token_bytes). Block 0 (the null block)
// is NaN and looking it up is a test failure; a freed block is poisoned with NaN
// before it is handed out again.
class TestStore : public KVBlockStore {
 public:
  TestStore(const KVGeometry& g, int32_t num_blocks) : g_(g), num_blocks_(num_blocks) {
    k_.resize(g.num_layers);
    v_.resize(g.num_layers);
    for (int32_t l = 0; l < g.num_layers; ++l) {
      block_bytes_.push_back(static_cast<size_t>(g.block_size) * g.layer_token_bytes(l));
      k_[l].resize(block_bytes_[l] * num_blocks);
      v_[l].resize(block_bytes_[l] * num_blocks);
    }
    for (int32_t b = 0; b < num_blocks; ++b) poison(b);
  }
  int32_t block_size() const override { return g_.block_size; }
  KVDType dtype() const override { return g_.dtype; }
  int32_t num_blocks() const override { return num_blocks_; }
  std::byte* k_block(int32_t layer, int32_t block) override {
    check(layer, block);
    return k_[layer].data() + block_bytes_[layer] * block;
  }
  std::byte* v_block(int32_t layer, int32_t block) override {
    check(layer, block);
    return v_[layer].data() + block_bytes_[layer] * block;
  }
  // All-ones bytes: NaN in f32, bf16 and f16 alike.
  void poison(int32_t block) {
    for (int32_t l = 0; l < g_.num_layers; ++l) {
      std::memset(k_[l].data() + block_bytes_[l] * block, 0xff, block_bytes_[l]);
      std::memset(v_[l].data() + block_bytes_[l] * block, 0xff, block_bytes_[l]);
    }
  }
  int null_lookups = 0;

 private:
  void check(int32_t layer, int32_t block) {
    if (block == 0) ++null_lookups;
    EXPECT_NE(block, 0) << "the null block was looked up (layer " << layer << ")";
    EXPECT_TRUE(g_.layer_kv_source.empty() || g_.layer_kv_source[layer] < 0)
        << "layer " << layer << " is KV-shared and owns no storage";
  }
  KVGeometry g_;
  int32_t num_blocks_;
  std::vector<size_t> block_bytes_;  // per layer
  std::vector<std::vector<std::byte>> k_, v_;
};

// One request's block tables, allocated like the coordinator does: the full
// group keeps every block; the sliding group frees (and nulls) the blocks wholly
// outside the window of the next span's first query, and reuses freed ids.
struct PagedRequest {
  const KVGeometry* g = nullptr;
  TestStore* store = nullptr;
  std::vector<int32_t>* free_ids = nullptr;  // shared pool of ids
  std::vector<std::vector<int32_t>> tables;  // per group
  int32_t nulls = 0;

  void prepare(int32_t context_len, int32_t total) {
    const int32_t B = g->block_size;
    tables.resize(g->groups.size());
    for (size_t gi = 0; gi < g->groups.size(); ++gi) {
      auto& t = tables[gi];
      if (g->groups[gi].kind == CacheGroupKind::kSlidingWindow) {
        int32_t first_live = std::max(0, context_len - g->groups[gi].sliding_window + 1) / B;
        for (int32_t i = 0; i < first_live && i < static_cast<int32_t>(t.size()); ++i) {
          if (t[i] == 0) continue;
          store->poison(t[i]);
          free_ids->push_back(t[i]);
          t[i] = 0;
          ++nulls;
        }
      }
      while (static_cast<int32_t>(t.size()) * B < total) {
        ASSERT_FALSE(free_ids->empty()) << "test pool exhausted";
        t.push_back(free_ids->back());
        free_ids->pop_back();
      }
    }
  }
  void attach(ForwardRow& row) {
    row.block_tables.clear();
    for (const auto& t : tables) row.block_tables.emplace_back(t);
  }
};

std::vector<int32_t> id_pool(int32_t num_blocks) {
  std::vector<int32_t> ids;
  for (int32_t b = num_blocks - 1; b >= 1; --b) ids.push_back(b);
  return ids;
}

std::vector<float> paged_logits(Model& m, const std::vector<int32_t>& seq,
                                const std::vector<int32_t>& chunks, int32_t* nulls = nullptr) {
  const KVGeometry& g = m.kv_geometry();
  const int32_t nb = static_cast<int32_t>(seq.size()) / g.block_size + 2;
  const int32_t num_blocks = 1 + nb * static_cast<int32_t>(g.groups.size());
  TestStore store(g, num_blocks);
  std::vector<int32_t> ids = id_pool(num_blocks);
  PagedRequest req{&g, &store, &ids, {}, 0};
  std::vector<float> all =
      chunked_logits(m, seq, chunks, [&](ForwardBatch& b, int32_t pos, size_t n) {
        req.prepare(pos, pos + static_cast<int32_t>(n));
        b.path = KVPath::kPaged;
        b.kv_store = &store;
        req.attach(
            b.add_row(std::span<const int32_t>(seq.data() + pos, n), pos, LogitsRequest::kAll));
      });
  EXPECT_EQ(store.null_lookups, 0);
  if (nulls != nullptr) *nulls = req.nulls;
  return all;
}

struct Case {
  std::string fixture;
  KVDType dtype;
};

class GemmaPathsTest : public ::testing::TestWithParam<Case> {};

TEST_P(GemmaPathsTest, ChunkedPrefillEqualsWholeOnTheFlatPath) {
  auto m = load(fixture(GetParam().fixture), GetParam().dtype);
  ASSERT_NE(m, nullptr);
  auto seq = random_tokens(500, m->config().vocab_size, 7);
  auto whole = flat_logits(*m, seq, {500});
  ASSERT_EQ(whole.size(), 500u * m->config().vocab_size);
  for (const std::vector<int32_t>& chunks :
       std::vector<std::vector<int32_t>>{{1}, {7}, {16}, {23, 24, 25}, {100, 1, 63}}) {
    EXPECT_TRUE(same_bits(whole, flat_logits(*m, seq, chunks))) << "chunks " << chunks[0];
  }
}

TEST_P(GemmaPathsTest, PagedWithNullSlidingBlocksEqualsFlat) {
  auto m = load(fixture(GetParam().fixture), GetParam().dtype);
  ASSERT_NE(m, nullptr);
  const KVGeometry& g = m->kv_geometry();
  ASSERT_EQ(g.groups.size(), 2u);
  auto seq = random_tokens(500, m->config().vocab_size, 11);
  auto whole = flat_logits(*m, seq, {500});
  for (const std::vector<int32_t>& chunks :
       std::vector<std::vector<int32_t>>{{500}, {1}, {16}, {5, 40, 17}, {200, 1, 1, 33}}) {
    int32_t nulls = 0;
    EXPECT_TRUE(same_bits(whole, paged_logits(*m, seq, chunks, &nulls))) << "chunks " << chunks[0];
    // Many windows: the sliding group freed blocks along the way (except whole).
    if (chunks.size() > 1 || chunks[0] < 500) {
      EXPECT_GT(nulls, 10) << "chunks " << chunks[0];
    }
  }
}

TEST_P(GemmaPathsTest, BatchedRowsEqualEachRowAlone) {
  auto m = load(fixture(GetParam().fixture), GetParam().dtype);
  ASSERT_NE(m, nullptr);
  const int32_t V = m->config().vocab_size;
  // Three requests at different stages: a fresh prefill, a decode deep in the
  // context, a mid-prompt chunk. Their earlier tokens go in alone first.
  struct Req {
    std::vector<int32_t> seq;
    int32_t ctx, n;
  };
  std::vector<Req> reqs = {{random_tokens(300, V, 1), 0, 300},
                           {random_tokens(411, V, 2), 410, 1},
                           {random_tokens(170, V, 3), 120, 50}};
  for (KVPath path : {KVPath::kFlat, KVPath::kPaged}) {
    const KVGeometry& g = m->kv_geometry();
    const int32_t num_blocks = 1 + 3 * 2 * (420 / g.block_size + 2);
    TestStore store(g, num_blocks);
    std::vector<int32_t> ids = id_pool(num_blocks);
    std::vector<FlatKVCache> flats;
    std::vector<PagedRequest> pr;
    for (size_t i = 0; i < reqs.size(); ++i) {
      flats.emplace_back(g);
      pr.push_back({&g, &store, &ids, {}, 0});
    }
    auto prefix = [&](size_t i) {
      if (reqs[i].ctx == 0) return;
      ForwardBatch b;
      b.path = path;
      b.kv_store = &store;
      auto& row = b.add_row(std::span<const int32_t>(reqs[i].seq.data(), reqs[i].ctx), 0,
                            LogitsRequest::kNone);
      row.flat = &flats[i];
      pr[i].prepare(0, reqs[i].ctx);
      pr[i].attach(row);
      ForwardOutput out;
      ASSERT_TRUE(m->forward(b, &out).ok());
    };
    auto span_row = [&](ForwardBatch& b, size_t i) {
      auto& row = b.add_row(std::span<const int32_t>(reqs[i].seq.data() + reqs[i].ctx, reqs[i].n),
                            reqs[i].ctx, LogitsRequest::kAll);
      row.flat = &flats[i];
      pr[i].prepare(reqs[i].ctx, reqs[i].ctx + reqs[i].n);
      pr[i].attach(row);
    };
    std::vector<std::vector<float>> alone(reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      prefix(i);
      ForwardBatch b;
      b.path = path;
      b.kv_store = &store;
      span_row(b, i);
      ForwardOutput out;
      ASSERT_TRUE(m->forward(b, &out).ok());
      alone[i] = out.logits;
      // Roll back so the batched run rewrites the same span.
      if (path == KVPath::kFlat) flats[i].set_length(reqs[i].ctx);
    }
    ForwardBatch b;
    b.path = path;
    b.kv_store = &store;
    for (size_t i = 0; i < reqs.size(); ++i) span_row(b, i);
    ForwardOutput out;
    ASSERT_TRUE(m->forward(b, &out).ok());
    for (size_t i = 0; i < reqs.size(); ++i) {
      std::vector<float> mine(
          out.logits.begin() + static_cast<int64_t>(out.row_begin[i]) * V,
          out.logits.begin() + static_cast<int64_t>(out.row_begin[i] + out.row_count[i]) * V);
      EXPECT_TRUE(same_bits(alone[i], mine))
          << "row " << i << (path == KVPath::kFlat ? " flat" : " paged");
    }
    EXPECT_EQ(store.null_lookups, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, GemmaPathsTest,
    ::testing::Values(Case{"gemma3_text-a", KVDType::kF32}, Case{"gemma4_text-a", KVDType::kF32},
                      Case{"gemma3_text-a", KVDType::kBF16}, Case{"gemma4_text-a", KVDType::kBF16},
                      Case{kTinyGlobal, KVDType::kF32}, Case{kTinyGlobal, KVDType::kBF16}),
    [](const auto& info) {
      std::string n = info.param.fixture;
      if (n == kTinyGlobal) n = "gemma4_text_tiny_global";
      std::replace(n.begin(), n.end(), '-', '_');
      return n + (info.param.dtype == KVDType::kF32 ? "_f32" : "_bf16");
    });

TEST(GemmaGeometryTest, DeclaresFullAndSlidingGroupsAndKvSharedLayers) {
  auto m3 = load(fixture("gemma3_text-a"));
  ASSERT_NE(m3, nullptr);
  const KVGeometry& g3 = m3->kv_geometry();
  ASSERT_EQ(g3.groups.size(), 2u);
  EXPECT_EQ(g3.groups[0].kind, CacheGroupKind::kFullAttention);
  EXPECT_EQ(g3.groups[1].kind, CacheGroupKind::kSlidingWindow);
  EXPECT_EQ(g3.groups[1].sliding_window, 24);
  EXPECT_EQ(g3.layer_group, (std::vector<int32_t>{1, 1, 0, 1}));
  EXPECT_EQ(g3.layer_kv_source, (std::vector<int32_t>{-1, -1, -1, -1}));
  auto m4 = load(fixture("gemma4_text-a"));
  ASSERT_NE(m4, nullptr);
  const KVGeometry& g4 = m4->kv_geometry();
  // s s f s | s f: the last two read layers 3 (sliding) and 2 (full).
  EXPECT_EQ(g4.layer_group, (std::vector<int32_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(g4.layer_kv_source, (std::vector<int32_t>{-1, -1, -1, -1, 3, 2}));
  FlatKVCache flat(g4);
  flat.reserve(16);
  EXPECT_EQ(flat.memory_bytes(), 4u * 2u * 16u * g4.num_kv_heads * g4.head_dim * sizeof(float));
}

// tiny-global: full layers 4 KV heads x head_dim 32 (attention_k_eq_v), sliding
// layers 2 x 16. The full group declares its own shape; the flat cache and the
// KV access size each layer by its group.
TEST(GemmaGeometryTest, FullLayersWithTheirOwnKvShapeGetTheirOwnGroupShape) {
  auto m = load(fixture(kTinyGlobal));
  ASSERT_NE(m, nullptr);
  const KVGeometry& g = m->kv_geometry();
  ASSERT_EQ(g.groups.size(), 2u);
  ASSERT_EQ(g.groups[0].kind, CacheGroupKind::kFullAttention);
  EXPECT_EQ(g.num_kv_heads, 2);  // the default: the sliding layers'
  EXPECT_EQ(g.head_dim, 16);
  EXPECT_EQ(g.group_kv_heads(0), 4);
  EXPECT_EQ(g.group_head_dim(0), 32);
  EXPECT_EQ(g.group_kv_heads(1), 2);
  EXPECT_EQ(g.group_head_dim(1), 16);
  EXPECT_FALSE(g.uniform_kv_shape());
  // s s f s | s f, the last two KV-shared (layers 3 and 2).
  EXPECT_EQ(g.layer_group, (std::vector<int32_t>{1, 1, 0, 1, 1, 0}));
  EXPECT_EQ(g.layer_kv_source, (std::vector<int32_t>{-1, -1, -1, -1, 3, 2}));
  EXPECT_EQ(g.layer_token_bytes(2), 4u * 32u * sizeof(float));
  EXPECT_EQ(g.layer_token_bytes(0), 2u * 16u * sizeof(float));
  FlatKVCache flat(g);
  flat.reserve(16);
  // Owning layers: sliding 0, 1, 3 and full 2.
  EXPECT_EQ(flat.memory_bytes(), 2u * 16u * (3u * 2u * 16u + 4u * 32u) * sizeof(float));
  EXPECT_EQ(flat.token_bytes(2), 4u * 32u * sizeof(float));
  // A store whose pool of a group has another dtype than the model's is refused.
  struct OtherDType : TestStore {
    using TestStore::TestStore;
    KVDType layer_dtype(int32_t layer) const override {
      return layer == 2 ? KVDType::kBF16 : dtype();
    }
  } store(g, 8);
  ForwardBatch b;
  b.path = KVPath::kPaged;
  b.kv_store = &store;
  int32_t tok = 1;
  std::vector<int32_t> t0 = {1}, t1 = {2};
  b.add_row(std::span<const int32_t>(&tok, 1), 0, LogitsRequest::kLast).block_tables = {t0, t1};
  ForwardOutput out;
  Status s = m->forward(b, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("layer 2"), std::string::npos) << s.message();
}

TEST(GemmaPagedTest, NullBlockInsideTheWindowIsRejected) {
  auto m = load(fixture("gemma3_text-a"));
  ASSERT_NE(m, nullptr);
  const KVGeometry& g = m->kv_geometry();
  TestStore store(g, 16);
  auto seq = random_tokens(40, m->config().vocab_size, 5);
  // Context 40, window 24: the span's first query (40) sees 17..40, so block 0
  // (0..15) may be null but block 1 (16..31) may not.
  std::vector<int32_t> full = {1, 2, 3, 4}, ok_sliding = {0, 6, 7, 8}, bad = {0, 0, 7, 8};
  FlatKVCache dummy(g);
  for (auto* sliding : {&ok_sliding, &bad}) {
    // Fill positions 0..39 first (tables without nulls), then query at 40.
    ForwardBatch pre;
    pre.path = KVPath::kPaged;
    pre.kv_store = &store;
    std::vector<int32_t> s0 = {5, 6, 7};
    pre.add_row(std::span<const int32_t>(seq.data(), 40), 0, LogitsRequest::kNone).block_tables = {
        full, s0};
    ForwardOutput out;
    ASSERT_TRUE(m->forward(pre, &out).ok());
    ForwardBatch b;
    b.path = KVPath::kPaged;
    b.kv_store = &store;
    int32_t tok = 3;
    b.add_row(std::span<const int32_t>(&tok, 1), 40, LogitsRequest::kLast).block_tables = {
        full, *sliding};
    (*sliding)[1] = sliding == &ok_sliding ? 6 : 0;
    Status s = m->forward(b, &out);
    if (sliding == &ok_sliding) {
      EXPECT_TRUE(s.ok()) << s.to_string();
    } else {
      EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
      EXPECT_NE(s.message().find("block table entry 1 = 0"), std::string::npos) << s.message();
    }
  }
  EXPECT_EQ(store.null_lookups, 0);
}

// --- config variants -------------------------------------------------------

std::string copy_with_config(const std::string& src, const std::string& tag,
                             const std::function<void(nlohmann::json&)>& edit) {
  std::string d = temp_dir(tag);
  for (const auto& e : fs::directory_iterator(src))
    fs::copy_file(e.path(), d + "/" + e.path().filename().string());
  nlohmann::json c = read_json(d + "/config.json");
  edit(c);
  write_text(d + "/config.json", c.dump(2));
  return d;
}

TEST(GemmaConfigTest, FinalLogitSoftcappingIsCapTimesTanh) {
  auto base = load(fixture("gemma3_text-a"));
  auto capped = load(copy_with_config(fixture("gemma3_text-a"), "fcap", [](nlohmann::json& c) {
    c["final_logit_softcapping"] = 3.0;
  }));
  ASSERT_TRUE(base && capped);
  auto seq = random_tokens(60, 512, 9);
  auto a = flat_logits(*base, seq, {60});
  auto b = flat_logits(*capped, seq, {60});
  ASSERT_EQ(a.size(), b.size());
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, std::fabs(3.0 * std::tanh(a[i] / 3.0) - b[i]));
    ASSERT_LE(std::fabs(b[i]), 3.0f);
  }
  EXPECT_LE(worst, 1e-5);
}

TEST(GemmaConfigTest, AttentionSoftcappingPathsAgreeAndMatchNoCapWhenCapIsHuge) {
  auto base = load(fixture("gemma3_text-a"));
  auto huge = load(copy_with_config(fixture("gemma3_text-a"), "acap_huge",
                                    [](nlohmann::json& c) { c["attn_logit_softcapping"] = 1e6; }));
  auto small = load(copy_with_config(fixture("gemma3_text-a"), "acap",
                                     [](nlohmann::json& c) { c["attn_logit_softcapping"] = 0.5; }));
  ASSERT_TRUE(base && huge && small);
  auto seq = random_tokens(200, 512, 13);
  auto a = flat_logits(*base, seq, {200});
  auto h = flat_logits(*huge, seq, {200});
  double maxdiff = 0, maxref = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(a[i]) - h[i]));
    maxref = std::max(maxref, std::fabs(static_cast<double>(a[i])));
  }
  EXPECT_LE(maxdiff / maxref, 1e-5);
  auto s_whole = flat_logits(*small, seq, {200});
  EXPECT_FALSE(same_bits(a, s_whole));  // the cap changes the answer
  EXPECT_TRUE(same_bits(s_whole, flat_logits(*small, seq, {9, 31})));
  EXPECT_TRUE(same_bits(s_whole, paged_logits(*small, seq, {16, 1, 50})));
}

TEST(GemmaConfigTest, NestedTextConfigAndWrapperTensorNamesLoad) {
  // The multimodal wrapper's layout: model_type gemma3 with the decoder's fields
  // under text_config, tensors under model.language_model. (transformers 5) or
  // language_model.model. + language_model.lm_head (4.x).
  auto flat = load(fixture("gemma3_text-a"));
  ASSERT_NE(flat, nullptr);
  auto seq = random_tokens(50, 512, 17);
  const auto want = flat_logits(*flat, seq, {50});
  for (bool v4 : {false, true}) {
    std::string d = copy_with_config(fixture("gemma3_text-a"), "nested", [](nlohmann::json& c) {
      nlohmann::json text = c;
      c = nlohmann::json::object();
      c["model_type"] = "gemma3";
      c["architectures"] = {"Gemma3ForConditionalGeneration"};
      c["text_config"] = text;
    });
    testing_util::rewrite_tensors(d, [v4](std::vector<testing_util::OwnedTensor>& ts) {
      for (auto& t : ts) {
        if (t.name.rfind("model.", 0) == 0) {
          t.name = (v4 ? "language_model.model." : "model.language_model.") + t.name.substr(6);
        } else if (v4) {
          t.name = "language_model." + t.name;  // lm_head.weight
        }
      }
    });
    auto nested = load(d);
    ASSERT_NE(nested, nullptr) << (v4 ? "4.x names" : "5.x names");
    EXPECT_TRUE(same_bits(want, flat_logits(*nested, seq, {50}))) << (v4 ? "4.x" : "5.x");
  }
}

TEST(GemmaConfigTest, LegacyGemma3ConfigShapeReadsTheSameModel) {
  // transformers 4.x's Gemma 3 config.json: no layer_types (sliding_window_pattern
  // instead), rope_theta for full layers and rope_local_base_freq for sliding ones.
  std::string d = copy_with_config(fixture("gemma3_text-a"), "legacy", [](nlohmann::json& c) {
    c.erase("layer_types");
    c.erase("_sliding_window_pattern");
    c.erase("rope_parameters");
    c["sliding_window_pattern"] = 3;
    c["rope_theta"] = 1000000.0;
    c["rope_local_base_freq"] = 10000.0;
    c["rope_scaling"] = nullptr;
  });
  auto legacy = load(d);
  auto modern = load(fixture("gemma3_text-a"));
  ASSERT_TRUE(legacy && modern);
  EXPECT_EQ(legacy->kv_geometry().layer_group, modern->kv_geometry().layer_group);
  auto seq = random_tokens(120, 512, 19);
  EXPECT_TRUE(same_bits(flat_logits(*modern, seq, {120}), flat_logits(*legacy, seq, {120})));
}

TEST(GemmaConfigTest, UnsupportedShapesAreRejectedByName) {
  struct Bad {
    const char* fixture;
    const char* field;
    std::function<void(nlohmann::json&)> edit;
  };
  std::vector<Bad> bad = {
      // The fixture's per_layer_config {} says full layers keep head_dim 16.
      {"gemma4_text-a", "global_head_dim", [](nlohmann::json& c) { c["global_head_dim"] = 32; }},
      {"gemma3_text-a", "use_bidirectional_attention",
       [](nlohmann::json& c) { c["use_bidirectional_attention"] = true; }},
      {"gemma4_text-a", "per_layer_config",
       [](nlohmann::json& c) {
         c["per_layer_config"] = {{"x", 1}};
       }},
      {"gemma3_text-a", "hidden_activation",
       [](nlohmann::json& c) { c["hidden_activation"] = "relu"; }},
      {"gemma4_text-a", "num_kv_shared_layers",
       [](nlohmann::json& c) { c["num_kv_shared_layers"] = 5; }},
      {"gemma3_text-a", "layer_types",
       [](nlohmann::json& c) { c["layer_types"][1] = "chunked_attention"; }},
  };
  for (const auto& b : bad) {
    auto m = load_model(copy_with_config(fixture(b.fixture), "bad", b.edit));
    ASSERT_FALSE(m.ok()) << b.field;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << b.field;
    EXPECT_NE(m.status().message().find(b.field), std::string::npos) << m.status().message();
  }
}

// The three ways a config.json names the full layers' KV shape read the same
// model: transformers' classic global_head_dim + num_global_key_value_heads
// (what make-model writes), the per_layer_config that newer transformers
// versions write instead, and the multimodal wrapper's nested text_config.
TEST(GemmaConfigTest, FullLayerShapeFromGlobalFieldsPerLayerConfigOrNestedTextConfig) {
  const std::string src = fixture(kTinyGlobal);
  auto classic = load(src);
  ASSERT_NE(classic, nullptr);
  auto seq = random_tokens(90, 512, 23);
  const auto want = flat_logits(*classic, seq, {90});
  auto per_layer = load(copy_with_config(src, "plc", [](nlohmann::json& c) {
    c.erase("global_head_dim");
    c.erase("num_global_key_value_heads");
    c["per_layer_config"] = {{"2", {{"head_dim", 32}, {"num_key_value_heads", 4}}},
                             {"5", {{"head_dim", 32}, {"num_key_value_heads", 4}}}};
  }));
  ASSERT_NE(per_layer, nullptr);
  EXPECT_EQ(per_layer->kv_geometry().group_head_dim(0), 32);
  EXPECT_TRUE(same_bits(want, flat_logits(*per_layer, seq, {90})));
  std::string d = copy_with_config(src, "nested4", [](nlohmann::json& c) {
    nlohmann::json text = c;
    c = nlohmann::json::object();
    c["model_type"] = "gemma4";
    c["architectures"] = {"Gemma4ForConditionalGeneration"};
    c["text_config"] = text;
    c["vision_config"] = nullptr;
  });
  testing_util::rewrite_tensors(d, [](std::vector<testing_util::OwnedTensor>& ts) {
    for (auto& t : ts)
      if (t.name.rfind("model.", 0) == 0) t.name = "model.language_model." + t.name.substr(6);
  });
  auto nested = load(d);
  ASSERT_NE(nested, nullptr);
  EXPECT_EQ(nested->kv_geometry().group_kv_heads(0), 4);
  EXPECT_TRUE(same_bits(want, flat_logits(*nested, seq, {90})));
  EXPECT_TRUE(same_bits(want, paged_logits(*nested, seq, {17, 40})));
}

// Bad combinations of the full-layer shape fields: InvalidArgument naming the field.
TEST(GemmaConfigTest, BadFullLayerShapesAreRejectedByName) {
  struct Bad {
    const char* field;  // must appear in the message
    std::function<void(nlohmann::json&)> edit;
  };
  const std::vector<Bad> bad = {
      // transformers' default global_head_dim is 512: tensors of 32 do not fit.
      {"global_head_dim", [](nlohmann::json& c) { c.erase("global_head_dim"); }},
      {"global_head_dim", [](nlohmann::json& c) { c["global_head_dim"] = 33; }},
      {"num_global_key_value_heads",
       [](nlohmann::json& c) { c["num_global_key_value_heads"] = 3; }},
      // per_layer_config beside a global_head_dim that says otherwise.
      {"global_head_dim",
       [](nlohmann::json& c) {
         c["per_layer_config"] = {{"2", {{"head_dim", 16}, {"num_key_value_heads", 4}}},
                                  {"5", {{"head_dim", 16}, {"num_key_value_heads", 4}}}};
       }},
      // Two full layers of different shapes cannot share one cache group.
      {"per_layer_config",
       [](nlohmann::json& c) {
         c.erase("global_head_dim");
         c.erase("num_global_key_value_heads");
         c["per_layer_config"] = {{"2", {{"head_dim", 32}, {"num_key_value_heads", 4}}},
                                  {"5", {{"head_dim", 64}, {"num_key_value_heads", 4}}}};
       }},
      {"per_layer_config.2",
       [](nlohmann::json& c) {
         c.erase("global_head_dim");
         c["per_layer_config"] = {{"2", {{"sliding_window", 8}}}};
       }},
      {"per_layer_config",
       [](nlohmann::json& c) {
         c.erase("global_head_dim");
         c["per_layer_config"] = {{"9", {{"head_dim", 32}}}};
       }},
  };
  for (const auto& b : bad) {
    auto m = load_model(copy_with_config(fixture(kTinyGlobal), "badshape", b.edit));
    ASSERT_FALSE(m.ok()) << b.field;
    EXPECT_EQ(m.status().code(), StatusCode::kInvalidArgument) << b.field;
    EXPECT_NE(m.status().message().find(b.field), std::string::npos) << m.status().message();
  }
}

// --- through the engine (flat path; the engine pages one group so far) ----------

std::vector<std::vector<int32_t>> engine_greedy(const std::string& dir,
                                                const std::vector<std::vector<int32_t>>& prompts,
                                                int64_t budget, bool together, bool paged = false) {
  std::vector<std::vector<int32_t>> out;
  auto run = [&](const std::vector<std::vector<int32_t>>& batch) {
    auto m = load_model(dir);
    EXPECT_TRUE(m.ok()) << m.status().to_string();
    engine::EngineOptions eo;
    eo.use_block_paged_cache = paged;
    eo.max_num_batched_tokens = budget;
    auto e = engine::Engine::create(std::shared_ptr<Model>(std::move(*m)), eo);
    EXPECT_TRUE(e.ok()) << e.status().to_string();
    std::vector<std::shared_ptr<engine::RequestHandle>> hs;
    for (const auto& p : batch) {
      engine::GenerateRequest rq;
      rq.prompt = p;
      rq.sampling.max_tokens = 24;
      auto h = (*e)->submit(rq);
      EXPECT_TRUE(h.ok()) << h.status().to_string();
      hs.push_back(*h);
    }
    (*e)->run_until_idle();
    for (auto& h : hs) out.push_back(h->wait().tokens);
  };
  if (together) {
    run(prompts);
  } else {
    for (const auto& p : prompts) run({p});
  }
  return out;
}

// The paged engine (cache groups through the KVCacheCoordinator, issue #14; its
// own tests are tests/engine/gemma_engine_test.cc) gives the flat engine's tokens.
TEST(GemmaEngineTest, FlatEngineBatchedAndChunkedEqualsAloneAndPagedEqualsFlat) {
  const std::string dir = fixture("gemma4_text-a");
  std::vector<std::vector<int32_t>> prompts = {
      random_tokens(90, 512, 31), random_tokens(7, 512, 32), random_tokens(260, 512, 33)};
  auto alone = engine_greedy(dir, prompts, 4096, false);
  auto together = engine_greedy(dir, prompts, 19, true);  // chunked prefill, mixed steps
  ASSERT_EQ(alone.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(alone[i].size(), 24u);
    EXPECT_EQ(alone[i], together[i]) << "request " << i;
  }
  auto paged = engine_greedy(dir, prompts, 19, true, /*paged=*/true);
  ASSERT_EQ(paged.size(), 3u);
  for (size_t i = 0; i < 3; ++i) EXPECT_EQ(alone[i], paged[i]) << "request " << i;
}

// --- make-model presets -----------------------------------------------------

class GemmaPresetTest : public ::testing::TestWithParam<std::pair<std::string, std::string>> {};

TEST_P(GemmaPresetTest, LoadsAndEveryPathAgrees) {
  MakeModelOptions o;
  o.family = GetParam().first;
  o.preset = GetParam().second;
  o.seed = 3;
  o.out_dir = temp_dir("preset");
  Status s = make_random_model(o);
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto m = load(o.out_dir);
  ASSERT_NE(m, nullptr);
  const KVGeometry& g = m->kv_geometry();
  ASSERT_EQ(g.groups.size(), 2u);
  EXPECT_EQ(g.groups[1].sliding_window, 32);
  auto seq = random_tokens(300, m->config().vocab_size, 21);
  auto whole = flat_logits(*m, seq, {300});
  for (float f : whole) ASSERT_TRUE(std::isfinite(f));
  EXPECT_TRUE(same_bits(whole, flat_logits(*m, seq, {13, 3})));
  EXPECT_TRUE(same_bits(whole, paged_logits(*m, seq, {1, 40, 16})));
}

INSTANTIATE_TEST_SUITE_P(Presets, GemmaPresetTest,
                         ::testing::Values(std::make_pair("gemma3_text", "tiny"),
                                           std::make_pair("gemma4_text", "tiny"),
                                           std::make_pair("gemma4_text", "tiny-moe"),
                                           std::make_pair("gemma4_text", "tiny-global")),
                         [](const auto& info) {
                           std::string n = info.param.first + "_" + info.param.second;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace pagedkv::model
