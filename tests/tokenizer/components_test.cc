// Component tests on small hand-built tokenizer.json variants
// (tests/data/tokenizer/components.json, written by gen_component_cases.js):
// every normalizer, pre-tokenizer (each Split behavior, inverted or not;
// Metaspace schemes), BPE option (byte_fallback, unk/fuse_unk, ignore_merges,
// both merge encodings, subword prefix/suffix), added-token flag (lstrip,
// rstrip, single_word, normalized, longest match), decoder and post-processor.
// Expected ids and text come from Hugging Face `tokenizers` 0.23.2. Plus
// hand-derived unit checks of the helpers those components are built from.
#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/regex.h"
#include "tokenizer/stream_decoder.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {
namespace {

using Json = nlohmann::json;

const Json& components() {
  static const Json j = [] {
    std::ifstream in(std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/components.json");
    EXPECT_TRUE(in.good());
    return Json::parse(in);
  }();
  return j;
}

TEST(Components, EveryVariantMatchesHuggingFace) {
  const Json& data = components();
  std::map<std::string, std::unique_ptr<Tokenizer>> toks;
  for (auto it = data["variants"].begin(); it != data["variants"].end(); ++it) {
    auto t = Tokenizer::from_json(it.value().dump());
    ASSERT_TRUE(t.ok()) << it.key() << ": " << t.status().to_string();
    toks[it.key()] = std::move(*t);
  }
  int checked = 0;
  for (const Json& c : data["cases"]) {
    const std::string variant = c["variant"];
    const std::string text = c["text"];
    const Tokenizer& t = *toks.at(variant);
    const std::string what = variant + " on " + Json(text).dump();
    auto ids = c["ids"].get<std::vector<int32_t>>();
    EXPECT_EQ(t.encode(text), ids) << what;
    EXPECT_EQ(t.encode(text, true), c["ids_special"].get<std::vector<int32_t>>()) << what;
    EXPECT_EQ(t.decode(ids), c["decoded"].get<std::string>()) << what;
    EXPECT_EQ(t.decode(ids, true), c["decoded_skip"].get<std::string>()) << what;
    // Streaming gives the same text for every variant's decoder.
    for (bool skip : {false, true}) {
      StreamDecoder sd(t, skip);
      std::string all;
      for (int32_t id : ids) all += sd.step(id);
      all += sd.finish();
      EXPECT_EQ(all, t.decode(ids, skip)) << what << " (stream, skip=" << skip << ")";
    }
    ++checked;
  }
  EXPECT_GT(checked, 1000);
}

using Ranges = std::vector<std::pair<size_t, size_t>>;

// "a-b--c" split on '-' (matches at [1,2) [3,4) [4,5)), by hand from
// Hugging Face's SplitDelimiterBehavior definitions.
TEST(SplitRanges, EveryBehavior) {
  const Ranges m = {{1, 2}, {3, 4}, {4, 5}};
  EXPECT_EQ(split_ranges(6, m, SplitBehavior::kRemoved, false), (Ranges{{0, 1}, {2, 3}, {5, 6}}));
  EXPECT_EQ(split_ranges(6, m, SplitBehavior::kIsolated, false),
            (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 4}, {4, 5}, {5, 6}}));
  EXPECT_EQ(split_ranges(6, m, SplitBehavior::kMergedWithPrevious, false),
            (Ranges{{0, 2}, {2, 4}, {4, 5}, {5, 6}}));
  EXPECT_EQ(split_ranges(6, m, SplitBehavior::kMergedWithNext, false),
            (Ranges{{0, 1}, {1, 3}, {3, 4}, {4, 6}}));
  EXPECT_EQ(split_ranges(6, m, SplitBehavior::kContiguous, false),
            (Ranges{{0, 1}, {1, 2}, {2, 3}, {3, 5}, {5, 6}}));
  // Inverted: the letters are the delimiters.
  EXPECT_EQ(split_ranges(6, m, SplitBehavior::kRemoved, true), (Ranges{{1, 2}, {3, 4}, {4, 5}}));
  EXPECT_TRUE(split_ranges(0, {}, SplitBehavior::kIsolated, false).empty());
}

TEST(ByteLevel, TableIsTheGpt2Mapping) {
  EXPECT_EQ(byte_level_char(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_level_char('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_level_char('A'), U'A');
  for (int b = 0; b < 256; ++b)
    EXPECT_EQ(byte_level_byte(byte_level_char(static_cast<uint8_t>(b))), b);
  EXPECT_EQ(byte_level_byte(U'\u4E00'), -1);
}

TEST(Regex, OnigurumaClassesAreTranslated) {
  auto p = onig_to_pcre2("\\s+(?!\\S)|[^\\s\\p{L}]|\\\\s|\\w");
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(*p,
            "\\p{White_Space}+(?!\\P{White_Space})|[^\\p{White_Space}\\p{L}]|\\\\s|"
            "[\\p{Alphabetic}\\p{M}\\p{Nd}\\p{Pc}\\p{Join_Control}]");
  // U+180E is not White_Space (Oniguruma's \s) although PCRE2's own \s matches it.
  auto re = Regex::compile("\\s");
  ASSERT_TRUE(re.ok());
  Ranges m;
  (*re)->find_all("a\xE1\xA0\x8E b", &m);
  EXPECT_EQ(m, (Ranges{{4, 5}}));
  EXPECT_FALSE(onig_to_pcre2("[\\W]").ok());
  EXPECT_FALSE(Regex::compile("(unclosed").ok());
}

TEST(Regex, EmptyMatchesAdvance) {
  auto re = Regex::compile("x*");
  ASSERT_TRUE(re.ok());
  Ranges m;
  (*re)->find_all("axxb", &m);
  // Like Rust's find_iter: "" at 0, "xx" at 1, "" at 4 (not right after "xx").
  EXPECT_EQ(m, (Ranges{{0, 0}, {1, 3}, {4, 4}}));
}

}  // namespace
}  // namespace pagedkv::tokenizer
