// Pre-tokenizer implementations (see pre_tokenizer.h).
#include "tokenizer/pre_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>

#include "tokenizer/pattern.h"
#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {

void split_ranges_into(size_t len, const std::vector<std::pair<size_t, size_t>>& matches,
                       SplitBehavior behavior, bool invert,
                       std::vector<std::pair<size_t, size_t>>* kept) {
  kept->clear();
  if (len == 0) return;
  if (behavior == SplitBehavior::kIsolated) {
    // Every match and every gap is its own piece: no bookkeeping needed.
    size_t prev = 0;
    for (auto [s, e] : matches) {
      if (prev != s) kept->emplace_back(prev, s);
      if (e > s) kept->emplace_back(s, e);
      prev = e;
    }
    if (prev != len) kept->emplace_back(prev, len);
    return;
  }
  // Pattern::find_matches: the whole text as alternating (range, is_match).
  struct Seg {
    size_t s, e;
    bool m;
  };
  thread_local std::vector<Seg> segs, out;
  segs.clear();
  out.clear();
  size_t prev = 0;
  for (auto [s, e] : matches) {
    if (prev != s) segs.push_back({prev, s, false});
    segs.push_back({s, e, true});
    prev = e;
  }
  if (prev != len) segs.push_back({prev, len, false});
  if (invert) {
    for (auto& g : segs) g.m = !g.m;
  }
  // (range, remove) after applying the behavior.
  switch (behavior) {
    case SplitBehavior::kRemoved:
      out = segs;
      break;
    case SplitBehavior::kIsolated:
      for (auto g : segs) out.push_back({g.s, g.e, false});
      break;
    case SplitBehavior::kContiguous: {
      bool prev_match = false;
      for (auto g : segs) {
        if (g.m == prev_match && !out.empty()) {
          out.back().e = g.e;
        } else {
          out.push_back({g.s, g.e, false});
        }
        prev_match = g.m;
      }
      break;
    }
    case SplitBehavior::kMergedWithPrevious: {
      bool prev_match = false;
      for (auto g : segs) {
        if (g.m && !prev_match && !out.empty()) {
          out.back().e = g.e;
        } else {
          out.push_back({g.s, g.e, false});
        }
        prev_match = g.m;
      }
      break;
    }
    case SplitBehavior::kMergedWithNext: {
      bool prev_match = false;
      for (size_t i = segs.size(); i-- > 0;) {
        auto g = segs[i];
        if (g.m && !prev_match && !out.empty()) {
          out.back().s = g.s;
        } else {
          out.push_back({g.s, g.e, false});
        }
        prev_match = g.m;
      }
      std::reverse(out.begin(), out.end());
      break;
    }
  }
  for (auto g : out) {
    if (!g.m && g.e > g.s) kept->emplace_back(g.s, g.e);
  }
}

std::vector<std::pair<size_t, size_t>> split_ranges(
    size_t len, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
    bool invert) {
  std::vector<std::pair<size_t, size_t>> kept;
  split_ranges_into(len, matches, behavior, invert, &kept);
  return kept;
}

namespace {

struct ByteTables {
  std::array<char32_t, 256> to_char;
  std::array<std::string, 256> to_utf8;
  struct Packed {
    char bytes[2];
    uint8_t len;
  };
  std::array<Packed, 256> packed;  // every byte-level char is 1 or 2 UTF-8 bytes
  ByteTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      utf8_append(&to_utf8[b], to_char[b]);
      packed[b].len = static_cast<uint8_t>(to_utf8[b].size());
      packed[b].bytes[0] = to_utf8[b][0];
      packed[b].bytes[1] = to_utf8[b].size() > 1 ? to_utf8[b][1] : '\0';
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

// Replaces each piece by the kept sub-ranges that `find` + `split_ranges`
// give; the text stays in place.
template <typename Find>
void split_pieces(PieceList* pieces, SplitBehavior behavior, bool invert, const Find& find) {
  thread_local std::vector<std::pair<size_t, size_t>> matches, kept;
  std::vector<PieceList::Span> out;
  out.reserve(pieces->spans.size() * 2);
  for (const auto& p : pieces->spans) {
    std::string_view t = pieces->text(p);
    matches.clear();
    find(t, &matches);
    split_ranges_into(t.size(), matches, behavior, invert, &kept);
    for (auto [s, e] : kept) {
      out.push_back(PieceList::Span{p.begin + static_cast<uint32_t>(s),
                                    p.begin + static_cast<uint32_t>(e), p.at_start && s == 0});
    }
  }
  pieces->spans.swap(out);
}

// Matches of a per-character predicate: every matching character is one match.
void char_matches(std::string_view text, bool (*pred)(char32_t),
                  std::vector<std::pair<size_t, size_t>>* m) {
  size_t i = 0;
  while (i < text.size()) {
    size_t len;
    char32_t c = utf8_decode(text, i, &len);
    if (pred(c)) m->emplace_back(i, i + len);
    i += len;
  }
}

bool is_numeric_char(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0;
}

const char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::unique_ptr<Regex> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(PieceList* pieces) const override {
    if (add_prefix_space_) {
      PieceList out;
      out.buf.reserve(pieces->buf.size() + pieces->spans.size());
      for (const auto& p : pieces->spans) {
        std::string_view t = pieces->text(p);
        if (t.empty() || t[0] != ' ') {
          uint32_t b = static_cast<uint32_t>(out.buf.size());
          out.buf.push_back(' ');
          out.buf.append(t);
          out.spans.push_back(
              PieceList::Span{b, static_cast<uint32_t>(out.buf.size()), p.at_start});
        } else {
          out.add(t, p.at_start);
        }
      }
      *pieces = std::move(out);
    }
    if (re_) {
      split_pieces(pieces, SplitBehavior::kIsolated, false,
                   [&](std::string_view t, std::vector<std::pair<size_t, size_t>>* m) {
                     re_->find_all(t, m);
                   });
    }
    // Map every byte to its byte-level character, piece by piece.
    PieceList out;
    out.buf.reserve(pieces->buf.size() * 2);
    out.spans.reserve(pieces->spans.size());
    for (const auto& p : pieces->spans) {
      uint32_t b = static_cast<uint32_t>(out.buf.size());
      byte_level_encode_append(pieces->text(p), &out.buf);
      out.spans.push_back(PieceList::Span{b, static_cast<uint32_t>(out.buf.size()), p.at_start});
    }
    *pieces = std::move(out);
  }

 private:
  bool add_prefix_space_;
  std::unique_ptr<Regex> re_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(Pattern p, SplitBehavior b, bool invert) : p_(std::move(p)), b_(b), invert_(invert) {}
  void pre_tokenize(PieceList* pieces) const override {
    split_pieces(
        pieces, b_, invert_,
        [&](std::string_view t, std::vector<std::pair<size_t, size_t>>* m) { p_.find_all(t, m); });
  }

 private:
  Pattern p_;
  SplitBehavior b_;
  bool invert_;
};

enum class PrependScheme { kAlways, kFirst, kNever };

class MetaspacePre : public PreTokenizer {
 public:
  MetaspacePre(std::string rep, PrependScheme scheme, bool split)
      : rep_(std::move(rep)), scheme_(scheme), split_(split) {}
  void pre_tokenize(PieceList* pieces) const override {
    PieceList out;
    out.buf.reserve(pieces->buf.size() * 2);
    std::string t;
    std::vector<std::pair<size_t, size_t>> m, kept;
    for (const auto& p : pieces->spans) {
      t.clear();
      for (char c : pieces->text(p)) {
        if (c == ' ') {
          t += rep_;
        } else {
          t.push_back(c);
        }
      }
      bool starts = t.compare(0, rep_.size(), rep_) == 0;
      if ((scheme_ == PrependScheme::kAlways && !starts) ||
          (scheme_ == PrependScheme::kFirst && !starts && p.at_start)) {
        t.insert(0, rep_);
      }
      if (!split_) {
        if (!t.empty()) out.add(t, p.at_start);
        continue;
      }
      m.clear();
      size_t pos = 0;
      while ((pos = t.find(rep_, pos)) != std::string::npos) {
        m.emplace_back(pos, pos + rep_.size());
        pos += rep_.size();
      }
      split_ranges_into(t.size(), m, SplitBehavior::kMergedWithNext, false, &kept);
      for (auto [s, e] : kept) out.add(std::string_view(t).substr(s, e - s), p.at_start && s == 0);
    }
    *pieces = std::move(out);
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class CharSplitPre : public PreTokenizer {
 public:
  CharSplitPre(bool (*pred)(char32_t), SplitBehavior b) : pred_(pred), b_(b) {}
  void pre_tokenize(PieceList* pieces) const override {
    split_pieces(pieces, b_, false,
                 [&](std::string_view t, std::vector<std::pair<size_t, size_t>>* m) {
                   char_matches(t, pred_, m);
                 });
  }

 private:
  bool (*pred_)(char32_t);
  SplitBehavior b_;
};

class RegexSplitPre : public PreTokenizer {
 public:
  RegexSplitPre(std::unique_ptr<Regex> re, SplitBehavior b, bool invert)
      : re_(std::move(re)), b_(b), invert_(invert) {}
  void pre_tokenize(PieceList* pieces) const override {
    split_pieces(pieces, b_, invert_,
                 [&](std::string_view t, std::vector<std::pair<size_t, size_t>>* m) {
                   re_->find_all(t, m);
                 });
  }

 private:
  std::unique_ptr<Regex> re_;
  SplitBehavior b_;
  bool invert_;
};

class SequencePre : public PreTokenizer {
 public:
  explicit SequencePre(std::vector<std::unique_ptr<PreTokenizer>> v) : v_(std::move(v)) {}
  void pre_tokenize(PieceList* pieces) const override {
    for (const auto& p : v_) p->pre_tokenize(pieces);
  }

 private:
  std::vector<std::unique_ptr<PreTokenizer>> v_;
};

}  // namespace

char32_t byte_level_char(uint8_t b) { return byte_tables().to_char[b]; }

int byte_level_byte(char32_t c) {
  static const std::array<int, 512> inv = [] {
    std::array<int, 512> a;
    a.fill(-1);
    for (int b = 0; b < 256; ++b) a[byte_tables().to_char[b]] = b;
    return a;
  }();
  return c < 512 ? inv[c] : -1;
}

void byte_level_encode_append(std::string_view text, std::string* out) {
  const auto& t = byte_tables();
  size_t pos = out->size();
  out->resize(pos + text.size() * 2);
  char* dst = out->data() + pos;
  for (unsigned char b : text) {
    const auto& e = t.packed[b];
    dst[0] = e.bytes[0];
    dst[1] = e.bytes[1];
    dst += e.len;
  }
  out->resize(static_cast<size_t>(dst - out->data()));
}

std::string byte_level_encode(std::string_view text) {
  std::string out;
  byte_level_encode_append(text, &out);
  return out;
}

StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const Json& j, const std::string& path,
                                                           int depth) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  PKV_ASSIGN_OR_RETURN(std::string type, json_type(j, path));
  const std::string where = path + " (" + type + ")";
  if (type == "ByteLevel") {
    PKV_RETURN_IF_ERROR(
        json_only_keys(j, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, where));
    PKV_ASSIGN_OR_RETURN(bool aps, json_bool_or(j, "add_prefix_space", true, where));
    PKV_ASSIGN_OR_RETURN(bool use_regex, json_bool_or(j, "use_regex", true, where));
    std::unique_ptr<Regex> re;
    if (use_regex) {
      auto r = Regex::compile(kGpt2Pattern);
      if (!r.ok()) return json_error(where, r.status().message());
      re = std::move(*r);
    }
    return std::unique_ptr<PreTokenizer>(new ByteLevelPre(aps, std::move(re)));
  }
  if (type == "Split") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "pattern", "behavior", "invert"}, where));
    PKV_ASSIGN_OR_RETURN(PatternSpec spec, json_pattern(j, "pattern", where));
    PKV_ASSIGN_OR_RETURN(Pattern p, Pattern::create(spec, where + ".pattern"));
    PKV_ASSIGN_OR_RETURN(std::string b, json_string(j, "behavior", where));
    SplitBehavior beh;
    if (b == "Removed") {
      beh = SplitBehavior::kRemoved;
    } else if (b == "Isolated") {
      beh = SplitBehavior::kIsolated;
    } else if (b == "MergedWithPrevious") {
      beh = SplitBehavior::kMergedWithPrevious;
    } else if (b == "MergedWithNext") {
      beh = SplitBehavior::kMergedWithNext;
    } else if (b == "Contiguous") {
      beh = SplitBehavior::kContiguous;
    } else {
      return json_error(where + ".behavior", "unsupported split behavior '" + b + "'");
    }
    PKV_ASSIGN_OR_RETURN(bool invert, json_bool_or(j, "invert", false, where));
    return std::unique_ptr<PreTokenizer>(new SplitPre(std::move(p), beh, invert));
  }
  if (type == "Metaspace") {
    PKV_RETURN_IF_ERROR(json_only_keys(
        j, {"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"},
        where));
    PKV_ASSIGN_OR_RETURN(std::string rep, json_string_or(j, "replacement", "\xE2\x96\x81", where));
    if (rep.empty() || utf8_len(static_cast<unsigned char>(rep[0])) != rep.size()) {
      return json_error(where + ".replacement", "must be exactly one character");
    }
    PrependScheme scheme = PrependScheme::kAlways;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      PKV_ASSIGN_OR_RETURN(std::string s, json_string(j, "prepend_scheme", where));
      if (s == "always") {
        scheme = PrependScheme::kAlways;
      } else if (s == "first") {
        scheme = PrependScheme::kFirst;
      } else if (s == "never") {
        scheme = PrependScheme::kNever;
      } else {
        return json_error(where + ".prepend_scheme", "unsupported value '" + s + "'");
      }
    } else {
      PKV_ASSIGN_OR_RETURN(bool aps, json_bool_or(j, "add_prefix_space", true, where));
      scheme = aps ? PrependScheme::kAlways : PrependScheme::kNever;
    }
    PKV_ASSIGN_OR_RETURN(bool split, json_bool_or(j, "split", true, where));
    return std::unique_ptr<PreTokenizer>(new MetaspacePre(rep, scheme, split));
  }
  if (type == "Digits") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "individual_digits"}, where));
    PKV_ASSIGN_OR_RETURN(bool ind, json_bool_or(j, "individual_digits", false, where));
    return std::unique_ptr<PreTokenizer>(new CharSplitPre(
        is_numeric_char, ind ? SplitBehavior::kIsolated : SplitBehavior::kContiguous));
  }
  if (type == "WhitespaceSplit") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type"}, where));
    return std::unique_ptr<PreTokenizer>(new CharSplitPre(is_white_space, SplitBehavior::kRemoved));
  }
  if (type == "Whitespace") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type"}, where));
    auto re = Regex::compile("\\w+|[^\\w\\s]+");
    if (!re.ok()) return json_error(where, re.status().message());
    return std::unique_ptr<PreTokenizer>(
        new RegexSplitPre(std::move(*re), SplitBehavior::kRemoved, true));
  }
  if (type == "Sequence") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "pretokenizers"}, where));
    auto it = j.find("pretokenizers");
    if (it == j.end() || !it->is_array()) return json_error(where, "missing array 'pretokenizers'");
    std::vector<std::unique_ptr<PreTokenizer>> v;
    PKV_RETURN_IF_ERROR(check_sequence_depth(depth + 1, where));
    for (size_t i = 0; i < it->size(); ++i) {
      PKV_ASSIGN_OR_RETURN(
          auto p, make_pre_tokenizer((*it)[i], path + ".pretokenizers[" + std::to_string(i) + "]",
                                     depth + 1));
      if (p) v.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(v)));
  }
  return json_error(path, "unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace pagedkv::tokenizer
