// Pre-tokenizer implementations (see pre_tokenizer.h).
#include "tokenizer/pre_tokenizer.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <functional>

#include "tokenizer/pattern.h"
#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {

std::vector<std::pair<size_t, size_t>> split_ranges(
    size_t len, const std::vector<std::pair<size_t, size_t>>& matches, SplitBehavior behavior,
    bool invert) {
  // Pattern::find_matches: the whole text as alternating (range, is_match).
  struct Seg {
    size_t s, e;
    bool m;
  };
  std::vector<Seg> segs;
  segs.reserve(matches.size() * 2 + 1);
  if (len == 0) {
    segs.push_back({0, 0, false});
  } else {
    size_t prev = 0;
    for (auto [s, e] : matches) {
      if (prev != s) segs.push_back({prev, s, false});
      segs.push_back({s, e, true});
      prev = e;
    }
    if (prev != len) segs.push_back({prev, len, false});
  }
  if (invert) {
    for (auto& g : segs) g.m = !g.m;
  }
  // (range, remove) after applying the behavior.
  std::vector<Seg> out;
  out.reserve(segs.size());
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
  std::vector<std::pair<size_t, size_t>> kept;
  kept.reserve(out.size());
  for (auto g : out) {
    if (!g.m && g.e > g.s) kept.emplace_back(g.s, g.e);
  }
  return kept;
}

namespace {

struct ByteTables {
  std::array<char32_t, 256> to_char;
  std::array<std::string, 256> to_utf8;
  ByteTables() {
    int n = 0;
    for (int b = 0; b < 256; ++b) {
      bool printable =
          (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
      to_char[b] = printable ? static_cast<char32_t>(b) : static_cast<char32_t>(256 + n++);
      utf8_append(&to_utf8[b], to_char[b]);
    }
  }
};

const ByteTables& byte_tables() {
  static const ByteTables t;
  return t;
}

// Replaces each piece by the kept sub-ranges of `split(piece text)`.
void split_pieces(
    std::vector<Piece>* pieces,
    const std::function<std::vector<std::pair<size_t, size_t>>(const std::string&)>& split) {
  std::vector<Piece> out;
  out.reserve(pieces->size());
  for (auto& p : *pieces) {
    auto ranges = split(p.text);
    for (auto [s, e] : ranges) {
      out.push_back(Piece{p.text.substr(s, e - s), p.at_start && s == 0});
    }
  }
  pieces->swap(out);
}

// Matches of a per-character predicate: every matching character is one match.
std::vector<std::pair<size_t, size_t>> char_matches(const std::string& text,
                                                    bool (*pred)(char32_t)) {
  std::vector<std::pair<size_t, size_t>> m;
  size_t i = 0;
  while (i < text.size()) {
    size_t len;
    char32_t c = utf8_decode(text, i, &len);
    if (pred(c)) m.emplace_back(i, i + len);
    i += len;
  }
  return m;
}

bool is_numeric_char(char32_t c) {
  if (c < 0x80) return c >= '0' && c <= '9';
  return (U_GET_GC_MASK(static_cast<UChar32>(c)) & U_GC_N_MASK) != 0;
}

const char kGpt2Pattern[] =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

class ByteLevelPre : public PreTokenizer {
 public:
  ByteLevelPre(bool add_prefix_space, std::unique_ptr<Pattern> re)
      : add_prefix_space_(add_prefix_space), re_(std::move(re)) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    if (add_prefix_space_ || re_) {
      split_pieces(pieces, [&](const std::string& t) {
        std::vector<std::pair<size_t, size_t>> r;
        // The prefix space was already inserted below, before splitting.
        if (!re_) {
          r.emplace_back(0, t.size());
          return r;
        }
        std::vector<std::pair<size_t, size_t>> m;
        re_->find_all(t, &m);
        return split_ranges(t.size(), m, SplitBehavior::kIsolated, false);
      });
    }
    for (auto& p : *pieces) p.text = byte_level_encode(p.text);
  }
  void add_prefix(std::vector<Piece>* pieces) const {
    for (auto& p : *pieces) {
      if (add_prefix_space_ && (p.text.empty() || p.text[0] != ' ')) p.text.insert(0, " ");
    }
  }

 private:
  friend class ByteLevelWrapper;
  bool add_prefix_space_;
  std::unique_ptr<Pattern> re_;
};

// ByteLevel prepends the space per piece before splitting it.
class ByteLevelWrapper : public PreTokenizer {
 public:
  explicit ByteLevelWrapper(std::unique_ptr<ByteLevelPre> inner) : inner_(std::move(inner)) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    inner_->add_prefix(pieces);
    inner_->pre_tokenize(pieces);
  }

 private:
  std::unique_ptr<ByteLevelPre> inner_;
};

class SplitPre : public PreTokenizer {
 public:
  SplitPre(Pattern p, SplitBehavior b, bool invert) : p_(std::move(p)), b_(b), invert_(invert) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_pieces(pieces, [&](const std::string& t) {
      std::vector<std::pair<size_t, size_t>> m;
      p_.find_all(t, &m);
      return split_ranges(t.size(), m, b_, invert_);
    });
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
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    std::vector<Piece> out;
    for (auto& p : *pieces) {
      std::string t;
      t.reserve(p.text.size() + rep_.size());
      for (char c : p.text) {
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
        if (!t.empty()) out.push_back(Piece{std::move(t), p.at_start});
        continue;
      }
      std::vector<std::pair<size_t, size_t>> m;
      size_t pos = 0;
      while ((pos = t.find(rep_, pos)) != std::string::npos) {
        m.emplace_back(pos, pos + rep_.size());
        pos += rep_.size();
      }
      for (auto [s, e] : split_ranges(t.size(), m, SplitBehavior::kMergedWithNext, false)) {
        out.push_back(Piece{t.substr(s, e - s), p.at_start && s == 0});
      }
    }
    pieces->swap(out);
  }

 private:
  std::string rep_;
  PrependScheme scheme_;
  bool split_;
};

class CharSplitPre : public PreTokenizer {
 public:
  CharSplitPre(bool (*pred)(char32_t), SplitBehavior b) : pred_(pred), b_(b) {}
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_pieces(pieces, [&](const std::string& t) {
      return split_ranges(t.size(), char_matches(t, pred_), b_, false);
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
  void pre_tokenize(std::vector<Piece>* pieces) const override {
    split_pieces(pieces, [&](const std::string& t) {
      std::vector<std::pair<size_t, size_t>> m;
      re_->find_all(t, &m);
      return split_ranges(t.size(), m, b_, invert_);
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
  void pre_tokenize(std::vector<Piece>* pieces) const override {
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

std::string byte_level_encode(std::string_view text) {
  const auto& t = byte_tables();
  std::string out;
  out.reserve(text.size() * 2);
  for (unsigned char b : text) out += t.to_utf8[b];
  return out;
}

StatusOr<std::unique_ptr<PreTokenizer>> make_pre_tokenizer(const Json& j, const std::string& path) {
  if (j.is_null()) return std::unique_ptr<PreTokenizer>();
  PKV_ASSIGN_OR_RETURN(std::string type, json_type(j, path));
  const std::string where = path + " (" + type + ")";
  if (type == "ByteLevel") {
    PKV_RETURN_IF_ERROR(
        json_only_keys(j, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, where));
    PKV_ASSIGN_OR_RETURN(bool aps, json_bool_or(j, "add_prefix_space", true, where));
    PKV_ASSIGN_OR_RETURN(bool use_regex, json_bool_or(j, "use_regex", true, where));
    std::unique_ptr<Pattern> re;
    if (use_regex) {
      PKV_ASSIGN_OR_RETURN(Pattern p, Pattern::create(PatternSpec{true, kGpt2Pattern}, where));
      re = std::make_unique<Pattern>(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(
        new ByteLevelWrapper(std::make_unique<ByteLevelPre>(aps, std::move(re))));
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
    for (size_t i = 0; i < it->size(); ++i) {
      PKV_ASSIGN_OR_RETURN(
          auto p, make_pre_tokenizer((*it)[i], path + ".pretokenizers[" + std::to_string(i) + "]"));
      if (p) v.push_back(std::move(p));
    }
    return std::unique_ptr<PreTokenizer>(new SequencePre(std::move(v)));
  }
  return json_error(path, "unsupported pre_tokenizer type '" + type + "'");
}

}  // namespace pagedkv::tokenizer
