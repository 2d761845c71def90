// Added-token matching (see added_vocabulary.h).
#include "tokenizer/added_vocabulary.h"

#include <algorithm>

#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {

namespace {

// Last code point of text[0, end) (end > 0).
char32_t last_char(std::string_view text, size_t end, size_t* start) {
  size_t s = end - 1;
  while (s > 0 && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
  size_t len;
  *start = s;
  return utf8_decode(text, s, &len);
}

}  // namespace

void AddedTokenMatcher::build(const std::vector<const AddedToken*>& tokens,
                              const std::vector<std::string>& contents) {
  nodes_.assign(1, Node{});
  edges_.clear();
  tokens_ = tokens;
  for (auto& f : first_byte_) f = false;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const std::string& c = contents[t];
    if (c.empty()) continue;
    first_byte_[static_cast<unsigned char>(c[0])] = true;
    int32_t node = 0;
    for (unsigned char b : c) {
      uint64_t key = static_cast<uint64_t>(node) << 8 | b;
      auto it = edges_.find(key);
      if (it == edges_.end()) {
        int32_t child = static_cast<int32_t>(nodes_.size());
        nodes_.push_back(Node{});
        edges_.emplace(key, child);
        node = child;
      } else {
        node = it->second;
      }
    }
    // Two tokens with the same content: the first listed wins, like the
    // automaton's first pattern.
    if (nodes_[node].token < 0) nodes_[node].token = static_cast<int32_t>(t);
  }
}

int AddedTokenMatcher::longest_at(std::string_view text, size_t pos, size_t* len) const {
  int best = -1;
  int32_t node = 0;
  for (size_t i = pos; i < text.size(); ++i) {
    auto it = edges_.find(static_cast<uint64_t>(node) << 8 | static_cast<unsigned char>(text[i]));
    if (it == edges_.end()) break;
    node = it->second;
    if (nodes_[node].token >= 0) {
      best = nodes_[node].token;
      *len = i + 1 - pos;
    }
  }
  return best;
}

void AddedTokenMatcher::split(std::string_view text, std::vector<Segment>* out) const {
  size_t start_offset = 0;
  size_t pos = 0;
  const size_t n = text.size();
  while (pos < n && !tokens_.empty()) {
    if (!first_byte_[static_cast<unsigned char>(text[pos])]) {
      ++pos;
      continue;
    }
    size_t len = 0;
    int t = longest_at(text, pos, &len);
    if (t < 0) {
      ++pos;
      continue;
    }
    const AddedToken& tok = *tokens_[t];
    size_t start = pos, stop = pos + len;
    pos = stop;  // the automaton resumes after a match, even a discarded one
    if (tok.single_word) {
      bool start_space = true, stop_space = true;
      if (start > 0) {
        size_t s;
        start_space = !is_word_char(last_char(text, start, &s));
      }
      if (stop < n) {
        size_t l;
        stop_space = !is_word_char(utf8_decode(text, stop, &l));
      }
      if (!start_space || !stop_space) continue;
    }
    if (tok.lstrip) {
      size_t newstart = start;
      while (newstart > 0) {
        size_t s;
        if (!is_white_space(last_char(text, newstart, &s))) break;
        newstart = s;
      }
      start = std::max(newstart, start_offset);
    }
    if (tok.rstrip) {
      while (stop < n) {
        size_t l;
        if (!is_white_space(utf8_decode(text, stop, &l))) break;
        stop += l;
      }
      // The scan still resumes at the match's own end, as Hugging Face's does.
    }
    if (start_offset < start) out->push_back(Segment{-1, start_offset, start});
    out->push_back(Segment{tok.id, start, stop});
    start_offset = stop;
  }
  if (start_offset != n || n == 0) out->push_back(Segment{-1, start_offset, n});
}

}  // namespace pagedkv::tokenizer
