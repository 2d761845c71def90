// Oracle tests: our forward pass against the logits Hugging Face transformers
// computed for the same tiny checkpoints (tests/data/hf-reference, README there).
// Rule: per row max|ours - ref| / max|ref| <= 1e-4 over full_logits; greedy ids
// equal wherever the reference's top-1/top-2 margin exceeds 1e-3. Checked on the
// flat path with the whole sequence in one chunk, and on a greedy decode that
// feeds one token at a time (the cached path must agree with the no-cache truth).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "model/flat_kv_cache.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "model/safetensors.h"

namespace pagedkv::model {
namespace {

struct Reference {
  std::vector<int32_t> input_ids, greedy_ids;
  std::vector<float> full_logits;
  int64_t rows = 0, vocab = 0;
};

Reference load_reference(const std::string& dir) {
  Reference r;
  auto f = SafetensorsFile::open(dir + "/reference.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  auto ids = [&](const char* name) {
    const TensorInfo* t = (*f)->find(name);
    EXPECT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, DType::kI64);
    std::vector<int32_t> out(static_cast<size_t>(t->numel()));
    for (size_t i = 0; i < out.size(); ++i) {
      int64_t v;
      std::memcpy(&v, t->data + 8 * i, 8);
      out[i] = static_cast<int32_t>(v);
    }
    return out;
  };
  r.input_ids = ids("input_ids");
  r.greedy_ids = ids("greedy_ids");
  const TensorInfo* fl = (*f)->find("full_logits");
  EXPECT_NE(fl, nullptr);
  r.rows = fl->shape[0];
  r.vocab = fl->shape[1];
  r.full_logits = *tensor_to_f32(*fl);
  return r;
}

double rel_err(std::span<const float> ours, const float* ref, int64_t n) {
  double maxdiff = 0, maxref = 0;
  for (int64_t i = 0; i < n; ++i) {
    maxdiff = std::max(maxdiff, std::fabs(static_cast<double>(ours[i]) - ref[i]));
    maxref = std::max(maxref, std::fabs(static_cast<double>(ref[i])));
  }
  return maxdiff / maxref;
}

int32_t argmax(std::span<const float> v) {
  return static_cast<int32_t>(std::max_element(v.begin(), v.end()) - v.begin());
}

double margin(const float* v, int64_t n) {
  float a = -INFINITY, b = -INFINITY;
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] > a) {
      b = a;
      a = v[i];
    } else if (v[i] > b) {
      b = v[i];
    }
  }
  return a - b;
}

// A row's KV view on the flat path, plus the recurrent state when the model is a
// hybrid (recurrent_state.h).
void attach(ForwardRow& row, const Model& model, FlatKVCache* flat, RecurrentState* state) {
  row.flat = flat;
  if (model.kv_geometry().has_recurrent_state()) row.state = state;
}

class OracleTest : public ::testing::TestWithParam<std::string> {};

TEST_P(OracleTest, FullLogitsMatchTransformers) {
  std::string dir = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + GetParam();
  auto model = load_model(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Reference ref = load_reference(dir);
  ASSERT_EQ(ref.vocab, (*model)->config().vocab_size);
  std::vector<int32_t> seq = ref.input_ids;
  seq.insert(seq.end(), ref.greedy_ids.begin(), ref.greedy_ids.end());
  ASSERT_GE(static_cast<int64_t>(seq.size()), ref.rows);

  FlatKVCache flat((*model)->kv_geometry());
  RecurrentState state((*model)->kv_geometry());
  ForwardBatch b;
  b.path = KVPath::kFlat;
  attach(b.add_row(std::span<const int32_t>(seq.data(), static_cast<size_t>(ref.rows)), 0,
                   LogitsRequest::kAll),
         **model, &flat, &state);
  ForwardOutput out;
  ASSERT_TRUE((*model)->forward(b, &out).ok());
  double worst = 0;
  for (int64_t r = 0; r < ref.rows; ++r) {
    double e = rel_err(out.row_logits(0, static_cast<int32_t>(r)),
                       ref.full_logits.data() + r * ref.vocab, ref.vocab);
    worst = std::max(worst, e);
    EXPECT_LE(e, 1e-4) << "row " << r;
  }
  RecordProperty("worst_rel_err", std::to_string(worst));
  std::printf("%s: worst per-row relative error %.3g\n", GetParam().c_str(), worst);
}

TEST_P(OracleTest, GreedyDecodeOneTokenAtATimeMatchesTransformers) {
  std::string dir = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/" + GetParam();
  auto model = load_model(dir);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  Reference ref = load_reference(dir);
  const int64_t T = static_cast<int64_t>(ref.input_ids.size());
  FlatKVCache flat((*model)->kv_geometry());
  RecurrentState state((*model)->kv_geometry());
  ForwardBatch b;
  b.path = KVPath::kFlat;
  attach(b.add_row(ref.input_ids, 0, LogitsRequest::kLast), **model, &flat, &state);
  ForwardOutput out;
  ASSERT_TRUE((*model)->forward(b, &out).ok());
  for (size_t j = 0; j < ref.greedy_ids.size(); ++j) {
    const float* rl = ref.full_logits.data() + (T - 1 + static_cast<int64_t>(j)) * ref.vocab;
    auto ours = out.last_logits(0);
    EXPECT_LE(rel_err(ours, rl, ref.vocab), 1e-4) << "decode step " << j;
    if (margin(rl, ref.vocab) > 1e-3) {
      EXPECT_EQ(argmax(ours), ref.greedy_ids[j]) << "decode step " << j;
    }
    // Feed the reference's token (not ours) so a legitimate near-tie flip cannot cascade.
    int32_t next = ref.greedy_ids[j];
    ForwardBatch d;
    d.path = KVPath::kFlat;
    attach(d.add_row(std::span<const int32_t>(&next, 1), static_cast<int32_t>(T + j),
                     LogitsRequest::kLast),
           **model, &flat, &state);
    ASSERT_TRUE((*model)->forward(d, &out).ok());
  }
}

INSTANTIATE_TEST_SUITE_P(Families, OracleTest,
                         ::testing::Values("qwen3-a", "qwen3_moe-a", "lfm2-a", "lfm2_moe-a"),
                         [](const auto& info) {
                           std::string n = info.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace
}  // namespace pagedkv::model
