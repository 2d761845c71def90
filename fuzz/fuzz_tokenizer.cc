// Fuzz target: tokenizer.json loading and encoding/decoding. The input is
// tokenizer.json, then (after a NUL byte) tokenizer_config.json — empty for none —
// then text. Tokenizer::from_json loads it (every component type and option);
// when it loads, the text is encoded with and without special tokens, the ids
// are decoded with and without skipping special tokens, and ids derived from the
// text's bytes (in and just past the vocabulary) are decoded and looked up as a
// detokenizer's untrusted ids would be.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_util.h"
#include "tokenizer/tokenizer.h"

using pagedkv::fuzz::property_failed;
using pagedkv::fuzz::QuietStreams;
namespace tok = pagedkv::tokenizer;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  QuietStreams quiet;
  auto parts = pagedkv::fuzz::split_parts(data, size, 3);
  std::optional<std::string_view> config;
  if (!parts[1].empty()) config = parts[1];
  auto t = tok::Tokenizer::from_json(parts[0], config);
  pagedkv::fuzz::note(t.ok() ? "loaded" : t.status().message());
  if (!t.ok()) {
    if (t.status().message().empty()) property_failed("an error without a message");
    return 0;
  }
  const tok::Tokenizer& k = **t;
  const std::string_view text = parts[2];
  const std::vector<int32_t> ids = k.encode(text, false);
  const int32_t vocab = k.vocab_size();
  for (int32_t id : ids)
    if (id < 0 || id >= vocab)
      property_failed("encode produced id " + std::to_string(id) + " outside the vocabulary of " +
                      std::to_string(vocab));
  pagedkv::fuzz::note("encoded " + std::to_string(ids.size()) + " ids");
  if (k.encode(text, false) != ids) property_failed("encode is not deterministic");
  (void)k.encode(text, true);
  (void)k.decode(ids, false);
  (void)k.decode(ids, true);
  std::vector<int32_t> raw;
  for (size_t i = 0; i + 1 < text.size() && raw.size() < 64; i += 2) {
    const uint32_t v = static_cast<uint8_t>(text[i]) | (static_cast<uint8_t>(text[i + 1]) << 8);
    raw.push_back(static_cast<int32_t>(vocab > 0 ? v % (static_cast<uint32_t>(vocab) + 2) : v));
  }
  (void)k.decode(raw, false);
  (void)k.decode(raw, true);
  for (int32_t id : raw) {
    if (auto s = k.id_to_token(id)) (void)k.token_to_id(*s);
    (void)k.is_special(id);
  }
  return 0;
}
