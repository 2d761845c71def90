// Text-level stop strings over the default model's tokenizer: the output ends
// before the first stop string (never containing it), text that might start a
// stop string is held back while streaming and released at the end, and the
// streamed pieces concatenate to the full decode.
#include "server/text_assembler.h"

#include <gtest/gtest.h>

#include "tokenizer/tokenizer.h"

namespace pagedkv::server {
namespace {

const tokenizer::Tokenizer& tok() {
  static auto t = [] {
    auto r = tokenizer::Tokenizer::load(std::string(PAGEDKV_TEST_DATA_DIR) +
                                        "/../../models/default/tokenizer.json");
    EXPECT_TRUE(r.ok()) << r.status().to_string();
    return std::move(*r);
  }();
  return *t;
}

// Streams `text`'s tokens through an assembler; returns the concatenated pieces.
std::string stream(const std::string& text, std::vector<std::string> stops, bool* stopped,
                   std::string* matched = nullptr) {
  TextAssembler a(tok(), std::move(stops));
  std::string out;
  for (int32_t id : tok().encode(text)) {
    out += a.push(id);
    if (a.stopped()) break;
  }
  out += a.finish();
  *stopped = a.stopped();
  if (matched && a.stopped()) *matched = a.matched_stop();
  EXPECT_EQ(out, a.text());
  return out;
}

TEST(TextAssemblerTest, NoStopsIsThePlainDecode) {
  bool stopped = false;
  const std::string text = "The json module, naïvely: {\"a\": 1}\n\nNext.";
  EXPECT_EQ(stream(text, {}, &stopped), tok().decode(tok().encode(text), true));
  EXPECT_FALSE(stopped);
}

TEST(TextAssemblerTest, CutsBeforeTheFirstStopString) {
  bool stopped = false;
  std::string matched;
  EXPECT_EQ(stream("Hello world. Goodbye world.", {"Goodbye", "world."}, &stopped, &matched),
            "Hello ");
  EXPECT_TRUE(stopped);
  EXPECT_EQ(matched, "world.");
  EXPECT_EQ(stream("alpha\n\nbeta", {"\n\n"}, &stopped), "alpha");
  EXPECT_TRUE(stopped);
  // A stop string spanning several tokens, mid-token.
  EXPECT_EQ(stream("dictionary comprehension", {"ary comp"}, &stopped), "diction");
  EXPECT_TRUE(stopped);
}

TEST(TextAssemblerTest, HeldBackPrefixIsReleasedWhenNoMatch) {
  TextAssembler a(tok(), {"STOPNOW"});
  std::string out;
  for (int32_t id : tok().encode("a STOP")) out += a.push(id);
  // "STOP" could be the start of "STOPNOW": not emitted yet.
  EXPECT_EQ(out.find("STOP"), std::string::npos) << out;
  out += a.finish();
  EXPECT_EQ(out, "a STOP");
  EXPECT_FALSE(a.stopped());
}

TEST(TextAssemblerTest, TokensAfterTheStopAreIgnored) {
  TextAssembler a(tok(), {"b"});
  std::string out;
  for (int32_t id : tok().encode("a b c d")) out += a.push(id);
  out += a.finish();
  EXPECT_EQ(out, "a ");
  EXPECT_TRUE(a.stopped());
}

}  // namespace
}  // namespace pagedkv::server
