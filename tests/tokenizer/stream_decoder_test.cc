// StreamDecoder: for every fixture text of both real tokenizers, feeding the
// ids one at a time yields pieces that are each valid UTF-8 and whose
// concatenation equals the full decode; also with skip_special_tokens, with
// random id sequences (broken UTF-8, byte-fallback runs), and after reset().
#include "tokenizer/stream_decoder.h"

#include <gtest/gtest.h>

#include <random>

#include "real_tokenizer_files.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {
namespace {

using testing::load_fixture;
using testing::real_tokenizer;

// Streams `ids` and checks the invariants; returns the concatenation.
std::string stream_all(const Tokenizer& tok, const std::vector<int32_t>& ids, bool skip,
                       const std::string& what) {
  StreamDecoder sd(tok, skip);
  std::string all;
  for (size_t i = 0; i < ids.size(); ++i) {
    std::string piece = sd.step(ids[i]);
    EXPECT_TRUE(is_valid_utf8(piece)) << what << " step " << i;
    all += piece;
    // What has been emitted is always a prefix of the final decode.
    std::string sofar = tok.decode(std::span<const int32_t>(ids.data(), i + 1), skip);
    EXPECT_TRUE(sofar.starts_with(all) || tok.decode(ids, skip).starts_with(all))
        << what << " step " << i;
  }
  all += sd.finish();
  return all;
}

void check_stream(const std::string& name, const std::string& file) {
  const Tokenizer* tok = real_tokenizer(name);
  ASSERT_NE(tok, nullptr);
  for (const auto& c : load_fixture(file)) {
    for (bool skip : {false, true}) {
      std::string full = tok->decode(c.ids, skip);
      EXPECT_EQ(stream_all(*tok, c.ids, skip, c.text), full) << c.text;
    }
  }
}

TEST(StreamDecoder, Qwen3FixturesStreamToFullDecode) { check_stream("qwen3", "tok-qwen3-a.jsonl"); }
TEST(StreamDecoder, Gemma3FixturesStreamToFullDecode) {
  check_stream("gemma3", "tok-gemma3-a.jsonl");
}

TEST(StreamDecoder, NeverSplitsAMultiByteCharacter) {
  const Tokenizer* tok = real_tokenizer("qwen3");
  ASSERT_NE(tok, nullptr);
  // One byte-level token per byte of U+1F600: nothing may come out until the
  // character is complete.
  std::vector<int32_t> ids;
  for (char b : std::string("\xF0\x9F\x98\x80")) {
    auto id = tok->token_to_id(byte_level_encode(std::string(1, b)));
    ASSERT_TRUE(id.has_value());
    ids.push_back(*id);
  }
  StreamDecoder sd(*tok);
  for (size_t i = 0; i + 1 < ids.size(); ++i) EXPECT_EQ(sd.step(ids[i]), "");
  EXPECT_EQ(sd.step(ids.back()), "😀");
}

TEST(StreamDecoder, HoldsByteFallbackRuns) {
  const Tokenizer* tok = real_tokenizer("gemma3");
  ASSERT_NE(tok, nullptr);
  auto a = tok->token_to_id("<0x41>");  // 'A': valid alone, but part of a run
  auto e3 = tok->token_to_id("<0xE3>");
  auto x = tok->token_to_id("x");
  ASSERT_TRUE(a && e3 && x);
  std::vector<int32_t> ids = {*a, *e3, *x};  // run [41 E3] is invalid: "��x"
  StreamDecoder sd(*tok);
  std::string all;
  for (int32_t id : ids) all += sd.step(id);
  all += sd.finish();
  EXPECT_EQ(all, tok->decode(ids));
  EXPECT_EQ(all, "\xEF\xBF\xBD\xEF\xBF\xBDx");
}

TEST(StreamDecoder, RandomIdsMatchFullDecode) {
  for (const char* name : {"qwen3", "gemma3"}) {
    const Tokenizer* tok = real_tokenizer(name);
    ASSERT_NE(tok, nullptr);
    std::mt19937 rng(1234);
    // Mix random vocab ids with byte tokens so partial characters and byte
    // runs occur often.
    std::vector<int32_t> byteish;
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "<0x%02X>", b);
      if (auto id = tok->token_to_id(buf)) byteish.push_back(*id);
    }
    for (const auto& c : load_fixture(std::string("tok-") + name + "-a.jsonl")) {
      for (int32_t id : c.ids) byteish.push_back(id);
    }
    for (int trial = 0; trial < 100; ++trial) {
      std::vector<int32_t> ids;
      int n = 1 + static_cast<int>(rng() % 40);
      for (int k = 0; k < n; ++k) {
        ids.push_back(rng() % 2 ? static_cast<int32_t>(rng() % tok->vocab_size())
                                : byteish[rng() % byteish.size()]);
      }
      StreamDecoder sd(*tok);
      std::string all;
      for (int32_t id : ids) {
        std::string p = sd.step(id);
        EXPECT_TRUE(is_valid_utf8(p));
        all += p;
      }
      all += sd.finish();
      EXPECT_EQ(all, tok->decode(ids)) << name << " trial " << trial;
    }
  }
}

TEST(StreamDecoder, ResetStartsANewStream) {
  const Tokenizer* tok = real_tokenizer("gemma3");
  ASSERT_NE(tok, nullptr);
  StreamDecoder sd(*tok);
  std::string first;
  for (int32_t id : tok->encode("one two")) first += sd.step(id);
  first += sd.finish();
  EXPECT_EQ(first, "one two");
  std::string second;
  for (int32_t id : tok->encode("three")) second += sd.step(id);
  second += sd.finish();
  EXPECT_EQ(second, "three");
}

}  // namespace
}  // namespace pagedkv::tokenizer
