// Normalizer implementations (see normalizer.h).
#include "tokenizer/normalizer.h"

#include <vector>

#include "tokenizer/pattern.h"
#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {

namespace {

class UnicodeNormalizer : public Normalizer {
 public:
  explicit UnicodeNormalizer(NormalForm form) : form_(form) {}
  std::string normalize(std::string_view text) const override {
    // Input is valid UTF-8 (Tokenizer::encode repairs it first), so ICU
    // cannot fail here except by an internal error; keep the text then.
    auto out = icu_normalize(text, form_);
    return out.ok() ? std::move(*out) : std::string(text);
  }

 private:
  NormalForm form_;
};

class ReplaceNormalizer : public Normalizer {
 public:
  ReplaceNormalizer(Pattern p, std::string content)
      : p_(std::move(p)), content_(std::move(content)) {}
  std::string normalize(std::string_view text) const override {
    return p_.replace_all(text, content_);
  }

 private:
  Pattern p_;
  std::string content_;
};

class PrependNormalizer : public Normalizer {
 public:
  explicit PrependNormalizer(std::string s) : s_(std::move(s)) {}
  std::string normalize(std::string_view text) const override {
    if (text.empty()) return std::string();
    return s_ + std::string(text);
  }

 private:
  std::string s_;
};

class LowercaseNormalizer : public Normalizer {
 public:
  std::string normalize(std::string_view text) const override { return unicode_lowercase(text); }
};

class StripNormalizer : public Normalizer {
 public:
  StripNormalizer(bool left, bool right) : left_(left), right_(right) {}
  std::string normalize(std::string_view text) const override {
    size_t b = 0, e = text.size();
    if (left_) {
      while (b < e) {
        size_t len;
        char32_t c = utf8_decode(text, b, &len);
        if (!is_white_space(c)) break;
        b += len;
      }
    }
    if (right_) {
      while (e > b) {
        size_t s = e - 1;
        while (s > b && (static_cast<unsigned char>(text[s]) & 0xC0) == 0x80) --s;
        size_t len;
        char32_t c = utf8_decode(text, s, &len);
        if (!is_white_space(c)) break;
        e = s;
      }
    }
    return std::string(text.substr(b, e - b));
  }

 private:
  bool left_, right_;
};

class SequenceNormalizer : public Normalizer {
 public:
  explicit SequenceNormalizer(std::vector<std::unique_ptr<Normalizer>> v) : v_(std::move(v)) {}
  std::string normalize(std::string_view text) const override {
    std::string s(text);
    for (const auto& n : v_) s = n->normalize(s);
    return s;
  }

 private:
  std::vector<std::unique_ptr<Normalizer>> v_;
};

}  // namespace

StatusOr<std::unique_ptr<Normalizer>> make_normalizer(const Json& j, const std::string& path,
                                                      int depth) {
  if (j.is_null()) return std::unique_ptr<Normalizer>();
  PKV_ASSIGN_OR_RETURN(std::string type, json_type(j, path));
  const std::string where = path + " (" + type + ")";
  if (type == "NFC" || type == "NFD" || type == "NFKC" || type == "NFKD") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type"}, where));
    NormalForm f = type == "NFC"    ? NormalForm::kNFC
                   : type == "NFD"  ? NormalForm::kNFD
                   : type == "NFKC" ? NormalForm::kNFKC
                                    : NormalForm::kNFKD;
    return std::unique_ptr<Normalizer>(new UnicodeNormalizer(f));
  }
  if (type == "Replace") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "pattern", "content"}, where));
    PKV_ASSIGN_OR_RETURN(PatternSpec spec, json_pattern(j, "pattern", where));
    PKV_ASSIGN_OR_RETURN(Pattern p, Pattern::create(spec, where + ".pattern"));
    PKV_ASSIGN_OR_RETURN(std::string content, json_string(j, "content", where));
    return std::unique_ptr<Normalizer>(new ReplaceNormalizer(std::move(p), std::move(content)));
  }
  if (type == "Prepend") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "prepend"}, where));
    PKV_ASSIGN_OR_RETURN(std::string s, json_string(j, "prepend", where));
    return std::unique_ptr<Normalizer>(new PrependNormalizer(std::move(s)));
  }
  if (type == "Lowercase") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type"}, where));
    return std::unique_ptr<Normalizer>(new LowercaseNormalizer());
  }
  if (type == "Strip") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "strip_left", "strip_right"}, where));
    PKV_ASSIGN_OR_RETURN(bool l, json_bool_or(j, "strip_left", true, where));
    PKV_ASSIGN_OR_RETURN(bool r, json_bool_or(j, "strip_right", true, where));
    return std::unique_ptr<Normalizer>(new StripNormalizer(l, r));
  }
  if (type == "Sequence") {
    PKV_RETURN_IF_ERROR(json_only_keys(j, {"type", "normalizers"}, where));
    auto it = j.find("normalizers");
    if (it == j.end() || !it->is_array()) return json_error(where, "missing array 'normalizers'");
    std::vector<std::unique_ptr<Normalizer>> v;
    PKV_RETURN_IF_ERROR(check_sequence_depth(depth + 1, where));
    for (size_t i = 0; i < it->size(); ++i) {
      PKV_ASSIGN_OR_RETURN(
          auto n,
          make_normalizer((*it)[i], path + ".normalizers[" + std::to_string(i) + "]", depth + 1));
      if (n) v.push_back(std::move(n));
    }
    return std::unique_ptr<Normalizer>(new SequenceNormalizer(std::move(v)));
  }
  return json_error(path, "unsupported normalizer type '" + type + "'");
}

}  // namespace pagedkv::tokenizer
