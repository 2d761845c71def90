// Malformed or unsupported tokenizer.json files: every one is an
// InvalidArgument whose message names the component and the JSON path, never
// a crash and never a tokenizer that silently encodes differently.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include <nlohmann/json.hpp>

#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace pagedkv::tokenizer {
namespace {

using Json = nlohmann::json;

Json base() {
  return Json::parse(R"({
    "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
    "post_processor": null,
    "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
    "model": {"type": "BPE", "dropout": null, "unk_token": null, "continuing_subword_prefix": null,
              "end_of_word_suffix": null, "fuse_unk": false, "byte_fallback": false, "ignore_merges": false,
              "vocab": {"a": 0, "b": 1, "ab": 2}, "merges": [["a", "b"]]}
  })");
}

// Loads `j` and expects an InvalidArgument mentioning every string in `needles`.
void expect_error(const Json& j, const std::vector<const char*>& needles) {
  auto t = Tokenizer::from_json(j.dump());
  ASSERT_FALSE(t.ok()) << "loaded although malformed: " << j.dump();
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  for (const char* n : needles) {
    EXPECT_NE(t.status().message().find(n), std::string::npos)
        << "message '" << t.status().message() << "' does not mention '" << n << "'";
  }
}

TEST(Malformed, BaseLoadsAndEncodes) {
  auto t = Tokenizer::from_json(base().dump());
  ASSERT_TRUE(t.ok()) << t.status().to_string();
  EXPECT_EQ((*t)->encode("abba"), (std::vector<int32_t>{2, 1, 0}));
}

TEST(Malformed, NotJson) {
  auto t = Tokenizer::from_json("{\"model\": ");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not valid JSON"), std::string::npos);
}

TEST(Malformed, MissingModel) {
  Json j = base();
  j.erase("model");
  expect_error(j, {"model", "missing"});
}

TEST(Malformed, UnknownModelType) {
  Json j = base();
  j["model"]["type"] = "Unigram";
  expect_error(j, {"model", "Unigram"});
}

TEST(Malformed, BpeDropoutRejected) {
  Json j = base();
  j["model"]["dropout"] = 0.1;
  expect_error(j, {"model", "dropout"});
}

TEST(Malformed, BadMerges) {
  Json j = base();
  j["model"]["merges"] = Json::array({"a b c"});
  expect_error(j, {"model (BPE).merges[0]", "two tokens"});
  j["model"]["merges"] = Json::array({Json::array({"a", "zz"})});
  expect_error(j, {"merges[0]", "'zz' is not in the vocab"});
  j["model"]["merges"] = Json::array({Json::array({"b", "a"})});  // "ba" not in vocab
  expect_error(j, {"merges[0]", "'ba'"});
  j["model"]["merges"] = Json::array({42});
  expect_error(j, {"merges[0]"});
  j["model"]["merges"] = "a b";
  expect_error(j, {"merges"});
}

TEST(Malformed, BadVocab) {
  Json j = base();
  j["model"]["vocab"]["c"] = -3;
  expect_error(j, {"vocab", "\"c\""});
  j = base();
  j["model"]["unk_token"] = "<unk>";
  expect_error(j, {"unk_token", "<unk>"});
}

// base() with one top-level field replaced by `json`: loading it must fail
// with an InvalidArgument mentioning every needle.
struct FieldCase {
  const char* field;
  const char* json;
  std::vector<const char*> needles;
};

void expect_field_errors(const std::vector<FieldCase>& cases) {
  for (const FieldCase& c : cases) {
    SCOPED_TRACE(std::string(c.field) + " = " + c.json);
    Json j = base();
    j[c.field] = Json::parse(c.json);
    expect_error(j, c.needles);
  }
}

TEST(Malformed, UnknownNormalizer) {
  expect_field_errors({
      {"normalizer", R"({"type": "BertNormalizer"})", {"normalizer", "BertNormalizer"}},
      {"normalizer",
       R"({"type": "Sequence", "normalizers": [{"type": "NFC"}, {"type": "Precompiled"}]})",
       {"normalizer.normalizers[1]", "Precompiled"}},
  });
}

TEST(Malformed, UnknownPreTokenizerAndOptions) {
  expect_field_errors({
      {"pre_tokenizer", R"({"type": "Punctuation"})", {"pre_tokenizer", "Punctuation"}},
      {"pre_tokenizer",
       R"({"type": "Split", "pattern": {"String": " "}, "behavior": "Sideways", "invert": false})",
       {"pre_tokenizer (Split).behavior", "Sideways"}},
      {"pre_tokenizer",
       R"({"type": "Split", "pattern": {"Regex": "(unclosed"}, "behavior": "Isolated", "invert": false})",
       {"pre_tokenizer (Split).pattern", "(unclosed"}},
      {"pre_tokenizer",
       R"({"type": "Metaspace", "replacement": "_", "prepend_scheme": "sometimes"})",
       {"prepend_scheme", "sometimes"}},
      // An option we do not implement is refused rather than ignored.
      {"pre_tokenizer",
       R"({"type": "ByteLevel", "add_prefix_space": false, "frobnicate": true})",
       {"pre_tokenizer (ByteLevel)", "frobnicate"}},
      {"pre_tokenizer",
       R"({"type": "Sequence", "pretokenizers": [{"type": "Digits"}, {"type": "BertPreTokenizer"}]})",
       {"pre_tokenizer.pretokenizers[1]", "BertPreTokenizer"}},
  });
}

TEST(Malformed, UnknownDecoderAndPostProcessor) {
  expect_field_errors({
      {"decoder", R"({"type": "WordPiece"})", {"decoder", "WordPiece"}},
      {"decoder",
       R"({"type": "Sequence", "decoders": [{"type": "Fuse"}, {"type": "CTC"}]})",
       {"decoder.decoders[1]", "CTC"}},
      {"post_processor", R"({"type": "Mystery"})", {"post_processor", "Mystery"}},
      {"post_processor",
       R"({"type": "TemplateProcessing", "single": [{"SpecialToken": {"id": "<x>", "type_id": 0}}], "pair": [], "special_tokens": {}})",
       {"post_processor (TemplateProcessing).single[0]", "<x>"}},
  });
}

TEST(Malformed, MissingTypeAndUnknownTopLevelKeys) {
  expect_field_errors({
      {"normalizer", R"({"lowercase": true})", {"normalizer", "type"}},
      {"surprise", "1", {"surprise"}},
      {"truncation", R"({"max_length": 5})", {"truncation"}},
      {"added_tokens",
       R"([{"id": 5, "content": "x", "weird": true}])",
       {"added_tokens[0]", "weird"}},
  });
}

TEST(Malformed, ConfigFileErrors) {
  auto bad = Tokenizer::from_json(base().dump(), std::string_view(R"({"eos_token": "<nope>"})"));
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("eos_token"), std::string::npos);
  auto bad2 = Tokenizer::from_json(base().dump(), std::string_view(R"({"bos_token": 7})"));
  ASSERT_FALSE(bad2.ok());
  auto ok = Tokenizer::from_json(
      base().dump(), std::string_view(R"({"bos_token": {"content": "a"}, "eos_token": "ab"})"));
  ASSERT_TRUE(ok.ok()) << ok.status().to_string();
  EXPECT_EQ((*ok)->bos_id(), std::optional<int32_t>(0));
  EXPECT_EQ((*ok)->eos_id(), std::optional<int32_t>(2));
}

TEST(Malformed, MissingFileIsNotFound) {
  auto t = Tokenizer::load("/nonexistent/tokenizer.json");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kNotFound);
}

TEST(Malformed, DirectoryIsNamedNotParsedAsEmptyJson) {
  const std::string dir = ::testing::TempDir();
  auto t = Tokenizer::load(dir);
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("is a directory"), std::string::npos) << t.status().message();
  auto c = Tokenizer::load(std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/components.json", dir);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find(dir + " is a directory"), std::string::npos)
      << c.status().message();
}

// Issue #16 item 3: a 68-byte file must not allocate gigabytes: ids are bounded
// by the vocabulary's size.
TEST(Malformed, VocabIdFarBeyondTheVocabularyIsRefused) {
  auto t = Tokenizer::from_json(R"({"model":{"type":"BPE","vocab":{"a":1073741823},"merges":[]}})");
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(t.status().message().find("model (BPE).vocab"), std::string::npos)
      << t.status().message();
  EXPECT_NE(t.status().message().find("1073741823"), std::string::npos) << t.status().message();
  // A small hole in the id space is still fine.
  Json j = base();
  j["model"]["vocab"]["c"] = 1000;
  EXPECT_TRUE(Tokenizer::from_json(j.dump()).ok());
}

// Issue #16 item 4: nested Sequence components are bounded in depth (a 10,000
// deep file is refused at once instead of taking gigabytes).
TEST(Malformed, DeeplyNestedSequencesAreRefused) {
  // Built as text: `depth` Sequence wrappers around `leaf` in the field `field`.
  auto nested = [](const std::string& field, const std::string& list_key, const Json& leaf,
                   int depth) {
    std::string open, close;
    for (int i = 0; i < depth; ++i) {
      open += R"({"type":"Sequence",")" + list_key + "\":[";
      close += "]}";
    }
    Json j = base();
    j.erase(field);
    std::string text = j.dump();
    text.pop_back();  // the closing brace
    return text + ",\"" + field + "\":" + open + leaf.dump() + close + "}";
  };
  auto refused = [](const std::string& text, const std::string& field) {
    auto t = Tokenizer::from_json(text);
    ASSERT_FALSE(t.ok()) << field;
    EXPECT_EQ(t.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(t.status().message().find(field), std::string::npos) << t.status().message();
    EXPECT_NE(t.status().message().find("Sequence nesting deeper than the limit of 16"),
              std::string::npos)
        << t.status().message();
  };
  for (int depth : {20, 10000}) {
    refused(nested("normalizer", "normalizers", Json{{"type", "NFC"}}, depth), "normalizer");
    refused(nested("pre_tokenizer", "pretokenizers", base()["pre_tokenizer"], depth),
            "pre_tokenizer");
    refused(nested("decoder", "decoders", base()["decoder"], depth), "decoder");
  }
  // Real tokenizers nest two or three levels: still loads.
  EXPECT_TRUE(
      Tokenizer::from_json(nested("normalizer", "normalizers", Json{{"type", "NFC"}}, 3)).ok());
}

// Issue #16 item 7: a FIFO in place of tokenizer.json or tokenizer_config.json
// is refused at once, never opened for a blocking read.
TEST(Malformed, FifoInPlaceOfATokenizerFileIsRefused) {
  const std::string dir = ::testing::TempDir() + "/pkv_fifo_tok_" + std::to_string(::getpid());
  std::filesystem::create_directories(dir);
  const std::string fifo = dir + "/tokenizer.json";
  std::filesystem::remove(fifo);
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto t = Tokenizer::load(fifo);
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("not a regular file"), std::string::npos)
      << t.status().message();
  const std::string good = std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/components.json";
  auto c = Tokenizer::load(good, fifo);
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("not a regular file"), std::string::npos)
      << c.status().message();
  // A FIFO named tokenizer_config.json beside tokenizer.json is refused too.
  std::filesystem::copy_file(good, dir + "/real.json",
                             std::filesystem::copy_options::overwrite_existing);
  const std::string cfg_fifo = dir + "/tokenizer_config.json";
  std::filesystem::remove(cfg_fifo);
  ASSERT_EQ(mkfifo(cfg_fifo.c_str(), 0600), 0);
  auto b = Tokenizer::load(dir + "/real.json");
  ASSERT_FALSE(b.ok());
  EXPECT_NE(b.status().message().find("tokenizer_config.json"), std::string::npos)
      << b.status().message();
  auto ct = ChatTemplate::from_tokenizer_config(cfg_fifo);
  ASSERT_FALSE(ct.ok());
  EXPECT_NE(ct.status().message().find("not a regular file"), std::string::npos)
      << ct.status().message();
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace pagedkv::tokenizer
