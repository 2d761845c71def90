// Decoder implementations (see decoder.h).
#include "tokenizer/decoder.h"

#include "tokenizer/pattern.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {

namespace {

class ByteLevelDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::string bytes;
    for (const auto& t : *tokens) {
      size_t start = bytes.size();
      bool all = true;
      size_t i = 0;
      while (i < t.size()) {
        size_t len;
        char32_t c = utf8_decode(t, i, &len);
        int b = byte_level_byte(c);
        if (b < 0) {
          all = false;
          break;
        }
        bytes.push_back(static_cast<char>(b));
        i += len;
      }
      if (!all) {
        // A character outside the byte map: the token's own bytes are used.
        bytes.resize(start);
        bytes += t;
      }
    }
    tokens->assign(1, utf8_lossy(bytes));
  }
};

class ReplaceDecoder : public Decoder {
 public:
  ReplaceDecoder(Pattern p, std::string content) : p_(std::move(p)), content_(std::move(content)) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) t = p_.replace_all(t, content_);
  }

 private:
  Pattern p_;
  std::string content_;
};

// Rust's u8::from_str_radix(s, 16) on two characters (accepts a leading '+').
int parse_hex_byte(char a, char b) {
  auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
  };
  if (a == '+') return hex(b);
  int h = hex(a), l = hex(b);
  return h < 0 || l < 0 ? -1 : h * 16 + l;
}

class ByteFallbackDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::vector<std::string> out;
    out.reserve(tokens->size());
    std::string pending;
    auto flush = [&] {
      if (pending.empty()) return;
      if (is_valid_utf8(pending)) {
        out.push_back(pending);
      } else {
        for (size_t k = 0; k < pending.size(); ++k) out.emplace_back("\xEF\xBF\xBD");
      }
      pending.clear();
    };
    for (auto& t : *tokens) {
      int byte = -1;
      if (t.size() == 6 && t.compare(0, 3, "<0x") == 0 && t[5] == '>')
        byte = parse_hex_byte(t[3], t[4]);
      if (byte >= 0) {
        pending.push_back(static_cast<char>(byte));
      } else {
        flush();
        out.push_back(std::move(t));
      }
    }
    flush();
    tokens->swap(out);
  }
};

class FuseDecoder : public Decoder {
 public:
  void decode_chain(std::vector<std::string>* tokens) const override {
    std::string all;
    for (const auto& t : *tokens) all += t;
    tokens->assign(1, std::move(all));
  }
};

class StripDecoder : public Decoder {
 public:
  StripDecoder(char32_t content, size_t start, size_t stop)
      : content_(content), start_(start), stop_(stop) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (auto& t : *tokens) {
      std::vector<std::pair<size_t, char32_t>> chars;  // (byte offset, char)
      size_t i = 0;
      while (i < t.size()) {
        size_t len;
        chars.emplace_back(i, utf8_decode(t, i, &len));
        i += len;
      }
      size_t start_cut = 0;
      for (size_t k = 0; k < start_ && k < chars.size(); ++k) {
        if (chars[k].second != content_) break;
        start_cut = k + 1;
      }
      size_t stop_cut = chars.size();
      for (size_t k = 0; k < stop_ && k < chars.size(); ++k) {
        size_t idx = chars.size() - k - 1;
        if (chars[idx].second != content_) break;
        stop_cut = idx;
      }
      if (stop_cut <= start_cut) {
        t.clear();
        continue;
      }
      size_t b = start_cut < chars.size() ? chars[start_cut].first : t.size();
      size_t e = stop_cut < chars.size() ? chars[stop_cut].first : t.size();
      t = t.substr(b, e - b);
    }
  }

 private:
  char32_t content_;
  size_t start_, stop_;
};

class MetaspaceDecoder : public Decoder {
 public:
  MetaspaceDecoder(std::string rep, bool prepend) : rep_(std::move(rep)), prepend_(prepend) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (size_t i = 0; i < tokens->size(); ++i) {
      std::string& t = (*tokens)[i];
      std::string out;
      out.reserve(t.size());
      size_t pos = 0;
      while (pos < t.size()) {
        if (t.compare(pos, rep_.size(), rep_) == 0) {
          if (!(i == 0 && prepend_)) out.push_back(' ');
          pos += rep_.size();
        } else {
          out.push_back(t[pos++]);
        }
      }
      t.swap(out);
    }
  }

 private:
  std::string rep_;
  bool prepend_;
};

class SequenceDecoder : public Decoder {
 public:
  explicit SequenceDecoder(std::vector<std::unique_ptr<Decoder>> v) : v_(std::move(v)) {}
  void decode_chain(std::vector<std::string>* tokens) const override {
    for (const auto& d : v_) d->decode_chain(tokens);
  }

 private:
  std::vector<std::unique_ptr<Decoder>> v_;
};

}  // namespace

StatusOr<std::unique_ptr<Decoder>> make_decoder(const Json& j, const std::string& path, int depth) {
  if (j.is_null()) return std::unique_ptr<Decoder>();
  PKV_ASSIGN_OR_RETURN(std::string type, json_type(j, path));
  const std::string where = path + " (" + type + ")";
  if (type == "ByteLevel") {
    PKV_RETURN_IF_ERROR(
        json_only_keys(j, {"type", "add_prefix_space", "trim_offsets", "use_regex"}, where));
    return std::unique_ptr<Decoder>(new ByteLevelDecoder());
  }
  if (type == "Replace") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "pattern", "content"}, where));
    PKV_ASSIGN_OR_RETURN(PatternSpec spec, json_pattern(j, "pattern", where));
    PKV_ASSIGN_OR_RETURN(Pattern p, Pattern::create(spec, where + ".pattern"));
    PKV_ASSIGN_OR_RETURN(std::string content, json_string(j, "content", where));
    return std::unique_ptr<Decoder>(new ReplaceDecoder(std::move(p), std::move(content)));
  }
  if (type == "ByteFallback") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type"}, where));
    return std::unique_ptr<Decoder>(new ByteFallbackDecoder());
  }
  if (type == "Fuse") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type"}, where));
    return std::unique_ptr<Decoder>(new FuseDecoder());
  }
  if (type == "Strip") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "content", "start", "stop"}, where));
    PKV_ASSIGN_OR_RETURN(std::string content, json_string(j, "content", where));
    size_t len = 0;
    if (content.empty() || utf8_len(static_cast<unsigned char>(content[0])) != content.size()) {
      return json_error(where + ".content", "must be exactly one character");
    }
    char32_t c = utf8_decode(content, 0, &len);
    PKV_ASSIGN_OR_RETURN(int64_t start, json_int_or(j, "start", 0, where));
    PKV_ASSIGN_OR_RETURN(int64_t stop, json_int_or(j, "stop", 0, where));
    if (start < 0 || stop < 0) return json_error(where, "start/stop must be non-negative");
    return std::unique_ptr<Decoder>(
        new StripDecoder(c, static_cast<size_t>(start), static_cast<size_t>(stop)));
  }
  if (type == "Metaspace") {
    PKV_RETURN_IF_ERROR(json_only_keys(
        j, {"type", "replacement", "prepend_scheme", "split", "add_prefix_space", "str_rep"},
        where));
    PKV_ASSIGN_OR_RETURN(std::string rep, json_string_or(j, "replacement", "\xE2\x96\x81", where));
    bool prepend = true;
    if (j.contains("prepend_scheme") && !j["prepend_scheme"].is_null()) {
      PKV_ASSIGN_OR_RETURN(std::string s, json_string(j, "prepend_scheme", where));
      if (s != "always" && s != "first" && s != "never") {
        return json_error(where + ".prepend_scheme", "unsupported value '" + s + "'");
      }
      prepend = s != "never";
    } else {
      PKV_ASSIGN_OR_RETURN(prepend, json_bool_or(j, "add_prefix_space", true, where));
    }
    if (rep.empty()) return json_error(where + ".replacement", "must not be empty");
    return std::unique_ptr<Decoder>(new MetaspaceDecoder(rep, prepend));
  }
  if (type == "Sequence") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "decoders"}, where));
    auto it = j.find("decoders");
    if (it == j.end() || !it->is_array()) return json_error(where, "missing array 'decoders'");
    std::vector<std::unique_ptr<Decoder>> v;
    PKV_RETURN_IF_ERROR(check_sequence_depth(depth + 1, where));
    for (size_t i = 0; i < it->size(); ++i) {
      PKV_ASSIGN_OR_RETURN(
          auto d, make_decoder((*it)[i], path + ".decoders[" + std::to_string(i) + "]", depth + 1));
      if (d) v.push_back(std::move(d));
    }
    return std::unique_ptr<Decoder>(new SequenceDecoder(std::move(v)));
  }
  return json_error(path, "unsupported decoder type '" + type + "'");
}

}  // namespace pagedkv::tokenizer
