// Added tokens of tokenizer.json ("added_tokens"): special and normal tokens
// that are cut out of the text before normalization/pre-tokenization, with
// their lstrip / rstrip / single_word / normalized flags.
//
// Matching reproduces Hugging Face's AddedVocabulary: leftmost-longest,
// non-overlapping matches (what its Aho-Corasick automaton with
// MatchKind::LeftmostLongest yields), here found with a byte trie; a match that
// violates single_word is dropped (the scan resumes after it); lstrip/rstrip
// widen a match over adjacent Unicode whitespace. Tokens with normalized=false
// are matched on the raw text, those with normalized=true on the normalized
// text (their content normalized the same way).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace pagedkv::tokenizer {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool single_word = false;
  bool lstrip = false;
  bool rstrip = false;
  bool normalized = false;
  bool special = false;
  // What decode and id_to_token give: the content, passed through the
  // normalizer when `normalized` (as Hugging Face stores it).
  std::string surface;
};

// One stretch of a split: either a token (id >= 0) or text [begin, end).
struct Segment {
  int32_t id;
  size_t begin, end;
};

class AddedTokenMatcher {
 public:
  // `contents[i]` is the text matched for `tokens[i]`.
  void build(const std::vector<const AddedToken*>& tokens,
             const std::vector<std::string>& contents);
  bool empty() const { return tokens_.empty(); }
  // Splits `text` into token and text segments (text segments may be empty
  // only when `text` is).
  void split(std::string_view text, std::vector<Segment>* out) const;

 private:
  // Longest token starting at `pos`; returns its index in tokens_ or -1, sets *len.
  int longest_at(std::string_view text, size_t pos, size_t* len) const;

  struct Node {
    int32_t token = -1;  // index into tokens_
  };
  std::vector<Node> nodes_;
  std::unordered_map<uint64_t, int32_t> edges_;  // (node << 8 | byte) -> child
  bool first_byte_[256] = {};
  std::vector<const AddedToken*> tokens_;
};

}  // namespace pagedkv::tokenizer
