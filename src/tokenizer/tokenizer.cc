// Tokenizer: loading tokenizer.json and the encode/decode pipelines (see
// tokenizer.h). Encode follows Hugging Face's order: cut out raw added tokens;
// normalize each remaining stretch; cut out normalized added tokens;
// pre-tokenize; BPE each pre-token; post-process when asked.
#include "tokenizer/tokenizer.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <unordered_map>

#include "tokenizer/bpe_model.h"
#include "tokenizer/decoder.h"
#include "tokenizer/json_fields.h"
#include "tokenizer/normalizer.h"
#include "tokenizer/post_processor.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/unicode_text.h"
#include "util/file_system.h"
#include "util/logging.h"

namespace pagedkv::tokenizer {

namespace {

StatusOr<std::string> read_file(const std::string& path, uint64_t max_bytes) {
  // A directory gets its own message; FIFOs and devices are refused without
  // blocking, and a file over the budget without reading it (docs/limits.md).
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec))
    return invalid_argument(path + " is a directory, not a file");
  PKV_ASSIGN_OR_RETURN(auto bytes, read_regular_file(path, max_bytes));
  return std::string(bytes.begin(), bytes.end());
}

StatusOr<Json> parse_json(std::string_view text, const std::string& what) {
  try {
    return Json::parse(text.begin(), text.end());
  } catch (const Json::exception& e) {
    return invalid_argument(what + ": not valid JSON: " + e.what());
  }
}

// tokenizer_config.json's special-token fields: a string, {"content": ...}, or null.
StatusOr<std::optional<std::string>> config_token(const Json& cfg, const char* key) {
  auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) {
    return std::optional<std::string>((*it)["content"].get<std::string>());
  }
  return invalid_argument(std::string("tokenizer_config.json: ") + key +
                          ": expected a string or {\"content\": ...}");
}

}  // namespace

Tokenizer::Tokenizer() = default;
Tokenizer::~Tokenizer() = default;

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::load(
    const std::string& tokenizer_json_path, const std::optional<std::string>& config_path) {
  PKV_ASSIGN_OR_RETURN(std::string text, read_file(tokenizer_json_path, kMaxTokenizerJsonBytes));
  std::optional<std::string> cfg_text;
  if (config_path) {
    PKV_ASSIGN_OR_RETURN(cfg_text, read_file(*config_path, kMaxTokenizerConfigBytes));
  } else {
    size_t slash = tokenizer_json_path.find_last_of('/');
    std::string dir = slash == std::string::npos ? "." : tokenizer_json_path.substr(0, slash);
    auto c = read_file(dir + "/tokenizer_config.json", kMaxTokenizerConfigBytes);
    if (c.ok()) {
      cfg_text = std::move(*c);
    } else if (c.status().code() != StatusCode::kNotFound) {
      return c.status();  // present but a FIFO, a directory, too large, unreadable
    }
  }
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  Status s = t->init(text, cfg_text ? std::optional<std::string_view>(*cfg_text) : std::nullopt);
  if (!s.ok()) return s.with_context(tokenizer_json_path);
  return t;
}

StatusOr<std::unique_ptr<Tokenizer>> Tokenizer::from_json(
    std::string_view tokenizer_json, std::optional<std::string_view> config_json) {
  std::unique_ptr<Tokenizer> t(new Tokenizer());
  PKV_RETURN_IF_ERROR(t->init(tokenizer_json, config_json));
  return t;
}

Status Tokenizer::init(std::string_view tokenizer_json,
                       std::optional<std::string_view> config_json) {
  PKV_ASSIGN_OR_RETURN(Json j, parse_json(tokenizer_json, "tokenizer.json"));
  if (!j.is_object()) return json_error("(root)", "expected an object");
  PKV_RETURN_IF_ERROR(
      json_only_keys(j,
                     {"version", "truncation", "padding", "added_tokens", "normalizer",
                      "pre_tokenizer", "post_processor", "decoder", "model"},
                     "(root)"));
  auto model = j.find("model");
  if (model == j.end() || model->is_null())
    return json_error("model", "missing (a tokenizer needs a model)");
  PKV_ASSIGN_OR_RETURN(model_, BpeModel::load(*model, "model"));
  const Json null_json;
  auto get = [&](const char* k) -> const Json& {
    auto it = j.find(k);
    return it == j.end() ? null_json : *it;
  };
  PKV_ASSIGN_OR_RETURN(normalizer_, make_normalizer(get("normalizer"), "normalizer"));
  PKV_ASSIGN_OR_RETURN(pre_tokenizer_, make_pre_tokenizer(get("pre_tokenizer"), "pre_tokenizer"));
  PKV_ASSIGN_OR_RETURN(decoder_, make_decoder(get("decoder"), "decoder"));
  PKV_ASSIGN_OR_RETURN(post_processor_,
                       PostProcessor::create(get("post_processor"), "post_processor"));
  if (!get("truncation").is_null()) return json_error("truncation", "truncation is not supported");
  if (!get("padding").is_null()) return json_error("padding", "padding is not supported");

  vocab_size_ = model_->id_limit();
  const Json& added = get("added_tokens");
  if (!added.is_null() && !added.is_array()) return json_error("added_tokens", "expected an array");
  if (added.is_array()) {
    // Ids follow Hugging Face's AddedVocabulary::add_tokens, which ignores the
    // file's "id": a token already in the vocabulary (or added before) keeps
    // that id; a new one gets the next id after the vocabulary and the added
    // tokens so far. A file whose ids disagree gets a warning.
    std::unordered_map<std::string, int32_t> by_content;
    int32_t max_added = -1;
    const int32_t model_size = model_->vocab_count();
    for (size_t i = 0; i < added.size(); ++i) {
      const Json& a = added[i];
      const std::string path = "added_tokens[" + std::to_string(i) + "]";
      if (!a.is_object()) return json_error(path, "expected an object");
      PKV_RETURN_IF_ERROR(json_only_keys(
          a, {"id", "content", "single_word", "lstrip", "rstrip", "normalized", "special"}, path));
      AddedToken t;
      PKV_ASSIGN_OR_RETURN(int64_t file_id, json_int_or(a, "id", -1, path));
      PKV_ASSIGN_OR_RETURN(t.content, json_string(a, "content", path));
      PKV_ASSIGN_OR_RETURN(t.single_word, json_bool_or(a, "single_word", false, path));
      PKV_ASSIGN_OR_RETURN(t.lstrip, json_bool_or(a, "lstrip", false, path));
      PKV_ASSIGN_OR_RETURN(t.rstrip, json_bool_or(a, "rstrip", false, path));
      PKV_ASSIGN_OR_RETURN(t.special, json_bool_or(a, "special", false, path));
      PKV_ASSIGN_OR_RETURN(t.normalized, json_bool_or(a, "normalized", !t.special, path));
      if (t.content.empty()) continue;
      bool duplicate = false;
      for (const auto& prev : added_) {
        duplicate = duplicate || (prev.content == t.content && prev.single_word == t.single_word &&
                                  prev.lstrip == t.lstrip && prev.rstrip == t.rstrip &&
                                  prev.normalized == t.normalized && prev.special == t.special);
      }
      if (duplicate) continue;
      if (auto it = by_content.find(t.content); it != by_content.end()) {
        t.id = it->second;
      } else if (auto v = model_->token_to_id(t.content)) {
        t.id = *v;
      } else if (max_added < 0) {
        t.id = model_size;
      } else {
        t.id = (max_added >= model_size || model_size == 0) ? max_added + 1 : model_size;
      }
      if (t.id != file_id) {
        PKV_LOG(kWarn) << "tokenizer.json: " << path << ": token '" << t.content << "' has id "
                       << file_id << " in the file but id " << t.id
                       << " by Hugging Face's rules; using " << t.id;
      }
      by_content.emplace(t.content, t.id);
      max_added = std::max(max_added, t.id);
      added_.push_back(std::move(t));
    }
  }
  int32_t max_added = -1;
  for (const auto& t : added_) max_added = std::max(max_added, t.id);
  vocab_size_ = std::max(vocab_size_, max_added + 1);
  added_index_by_id_.assign(vocab_size_, -1);
  special_flag_.assign(vocab_size_, false);
  std::vector<const AddedToken*> raw, norm;
  std::vector<std::string> raw_c, norm_c;
  for (auto& t : added_) {
    t.surface = t.normalized && normalizer_ ? normalizer_->normalize(t.content) : t.content;
  }
  for (size_t i = 0; i < added_.size(); ++i) {
    const AddedToken& t = added_[i];
    added_index_by_id_[t.id] = static_cast<int32_t>(i);
    added_by_content_[t.content] = t.id;
    if (t.special && !special_flag_[t.id]) {
      special_flag_[t.id] = true;
      special_ids_.push_back(t.id);
    }
    if (t.normalized) {
      norm.push_back(&t);
      norm_c.push_back(t.surface);
    } else {
      raw.push_back(&t);
      raw_c.push_back(t.content);
    }
  }
  raw_matcher_.build(raw, raw_c);
  normalized_matcher_.build(norm, norm_c);
  if (config_json) PKV_RETURN_IF_ERROR(init_config(*config_json));
  return ok_status();
}

Status Tokenizer::init_config(std::string_view config_json) {
  PKV_ASSIGN_OR_RETURN(Json cfg, parse_json(config_json, "tokenizer_config.json"));
  if (!cfg.is_object()) return invalid_argument("tokenizer_config.json: expected an object");
  auto resolve = [&](const char* key, std::optional<int32_t>* id, std::string* name) -> Status {
    PKV_ASSIGN_OR_RETURN(std::optional<std::string> tok, config_token(cfg, key));
    if (!tok) return ok_status();
    auto found = token_to_id(*tok);
    if (!found) {
      return invalid_argument(std::string("tokenizer_config.json: ") + key + " '" + *tok +
                              "' is not in the vocabulary");
    }
    *id = *found;
    if (name != nullptr) *name = *tok;
    return ok_status();
  };
  PKV_RETURN_IF_ERROR(resolve("bos_token", &bos_id_, &bos_token_));
  PKV_RETURN_IF_ERROR(resolve("eos_token", &eos_id_, &eos_token_));
  PKV_RETURN_IF_ERROR(resolve("pad_token", &pad_id_, nullptr));
  return ok_status();
}

void Tokenizer::encode_text(std::string_view text, bool at_start, std::vector<int32_t>* out) const {
  std::string normalized_storage;
  std::string_view normalized = text;
  if (normalizer_) {
    normalized_storage = normalizer_->normalize(text);
    normalized = normalized_storage;
  }
  std::vector<Segment> segs;
  normalized_matcher_.split(normalized, &segs);
  PieceList pieces;
  std::vector<std::string_view> words;
  auto flush = [&] {
    if (pieces.spans.empty()) return;
    if (pre_tokenizer_) pre_tokenizer_->pre_tokenize(&pieces);
    words.clear();
    words.reserve(pieces.spans.size());
    for (const auto& sp : pieces.spans) words.push_back(pieces.text(sp));
    model_->tokenize_words(words, out);
    pieces.clear();
  };
  for (const Segment& s : segs) {
    if (s.id >= 0) {
      flush();
      out->push_back(s.id);
    } else if (s.end > s.begin) {
      pieces.add(normalized.substr(s.begin, s.end - s.begin), at_start && s.begin == 0);
    }
  }
  flush();
}

std::vector<int32_t> Tokenizer::encode(std::string_view input, bool add_special_tokens) const {
  std::string repaired;
  if (!is_valid_utf8(input)) {
    repaired = utf8_lossy(input);
    input = repaired;
  }
  std::vector<int32_t> out;
  out.reserve(input.size() / 3 + 4);
  std::vector<Segment> segs;
  raw_matcher_.split(input, &segs);
  for (const Segment& s : segs) {
    if (s.id >= 0) {
      out.push_back(s.id);
    } else if (s.end > s.begin) {
      encode_text(input.substr(s.begin, s.end - s.begin), s.begin == 0, &out);
    }
  }
  if (add_special_tokens && post_processor_) post_processor_->process(&out);
  return out;
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::vector<std::string> tokens;
  tokens.reserve(ids.size());
  for (int32_t id : ids) {
    if (id < 0 || id >= vocab_size_) continue;
    if (skip_special_tokens && special_flag_[id]) continue;
    int32_t a = added_index_by_id_[id];
    if (a >= 0) {
      tokens.push_back(added_[a].surface);
    } else if (const std::string* t = model_->id_to_token(id)) {
      tokens.push_back(*t);
    }
  }
  if (!decoder_) {
    std::string out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      if (i > 0) out += ' ';
      out += tokens[i];
    }
    return out;
  }
  decoder_->decode_chain(&tokens);
  std::string out;
  for (const auto& t : tokens) out += t;
  return out;
}

std::optional<int32_t> Tokenizer::token_to_id(std::string_view token) const {
  auto it = added_by_content_.find(std::string(token));
  if (it != added_by_content_.end()) return it->second;
  return model_->token_to_id(token);
}

std::optional<std::string> Tokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= vocab_size_) return std::nullopt;
  if (added_index_by_id_[id] >= 0) return added_[added_index_by_id_[id]].surface;
  if (const std::string* t = model_->id_to_token(id)) return *t;
  return std::nullopt;
}

void Tokenizer::set_word_cache_enabled(bool on) { model_->set_cache_enabled(on); }

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && id < vocab_size_ && special_flag_[id];
}

}  // namespace pagedkv::tokenizer
