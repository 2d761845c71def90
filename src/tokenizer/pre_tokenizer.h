// Pre-tokenizers from tokenizer.json's "pre_tokenizer": ByteLevel (GPT-2 regex
// split, add_prefix_space, byte-to-unicode mapping), Split (literal or regex
// pattern; behaviors Removed, Isolated, MergedWithPrevious, MergedWithNext,
// Contiguous; invert), Metaspace (replacement, prepend_scheme, split), Digits,
// Whitespace, WhitespaceSplit and Sequence. Each turns a list of pieces into a
// finer list, exactly as Hugging Face's PreTokenizedString::split does
// (empty pieces are dropped).
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "tokenizer/json_fields.h"

namespace pagedkv::tokenizer {

// The pieces of a pre-tokenized string: byte ranges of one buffer, so that a
// split only rewrites ranges and copies no text; a pre-tokenizer that changes
// text (ByteLevel, Metaspace) writes a new buffer.
struct PieceList {
  struct Span {
    uint32_t begin, end;
    // True when the piece begins at offset 0 of the original input (what
    // Metaspace's prepend_scheme "first" asks).
    bool at_start;
  };
  std::string buf;
  std::vector<Span> spans;

  std::string_view text(const Span& s) const {
    return std::string_view(buf).substr(s.begin, s.end - s.begin);
  }
  void add(std::string_view piece, bool at_start) {
    uint32_t b = static_cast<uint32_t>(buf.size());
    buf.append(piece);
    spans.push_back(Span{b, static_cast<uint32_t>(buf.size()), at_start});
  }
  void clear() {
    buf.clear();
    spans.clear();
  }
};

class PreTokenizer {
 public:
  virtual ~PreTokenizer() = default;
  virtual void pre_tokenize(PieceList* pieces) const = 0;
};

enum class SplitBehavior { kRemoved, kIsolated, kMergedWithPrevious, kMergedWithNext, kContiguous };

// Hugging Face's NormalizedString::split: `matches` are the pattern's matches
// (sorted, non-overlapping) in a text of `len` bytes; returns the kept ranges.
std::vector<std::pair<size_t, size_t>> split_ranges(
    size_t len, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
    bool invert);

// The GPT-2 byte-to-unicode table: byte b is represented by code point
// byte_level_char(b); byte_level_byte(c) inverts it (-1 for other code points).
char32_t byte_level_char(uint8_t b);
int byte_level_byte(char32_t c);
// Maps each byte of `text` to its UTF-8 encoded byte-level character.
std::string byte_level_encode(std::string_view text);
void byte_level_encode_append(std::string_view text, std::string* out);

// Null JSON → nullptr.
StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const Json& j, const std::string& path,
                                                           int depth = 0);

}  // namespace pagedkv::tokenizer
