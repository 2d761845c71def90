// Tokenizer: Hugging Face `tokenizer.json` (+ `tokenizer_config.json`) loaded
// into an exact, fast C++ encoder/decoder. Byte-level BPE (Qwen, GPT-2 style)
// and SentencePiece-style BPE (Gemma, Llama style) are both BPE models behind
// different normalizers, pre-tokenizers and decoders; see docs/tokenizer.md for
// what is supported. Anything else in the file (an unknown component type or
// option) is an InvalidArgument at load naming it and its JSON path — the
// tokenizer never silently produces different ids.
//
// Thread safety: a loaded Tokenizer is immutable except for an internal word
// cache that is guarded; encode/decode may be called from several threads.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "pagedkv/status.h"
#include "tokenizer/added_vocabulary.h"

namespace pagedkv::tokenizer {

class Normalizer;
class PreTokenizer;
class BpeModel;
class Decoder;
class PostProcessor;

// Input budgets (docs/limits.md): larger files are ResourceExhausted naming the
// file and the limit, before anything is read.
inline constexpr uint64_t kMaxTokenizerJsonBytes = 256ull << 20;
inline constexpr uint64_t kMaxTokenizerConfigBytes = 64ull << 20;

class Tokenizer {
 public:
  // Loads tokenizer.json. `config_path` names tokenizer_config.json; when not
  // given, a tokenizer_config.json beside tokenizer.json is used if present
  // (otherwise bos/eos are unset). Errors name the file and the JSON path.
  static StatusOr<std::unique_ptr<Tokenizer>> load(
      const std::string& tokenizer_json_path,
      const std::optional<std::string>& config_path = std::nullopt);
  // The same from in-memory JSON text (tests, embedded tokenizers).
  static StatusOr<std::unique_ptr<Tokenizer>> from_json(
      std::string_view tokenizer_json, std::optional<std::string_view> config_json = std::nullopt);
  ~Tokenizer();

  // Encodes `text` (invalid UTF-8 is first repaired with U+FFFD, as Rust's
  // from_utf8_lossy would). add_special_tokens applies the post-processor
  // (e.g. Gemma's <bos>), as Hugging Face's encode(..., add_special_tokens).
  std::vector<int32_t> encode(std::string_view text, bool add_special_tokens = false) const;
  // Decodes ids; ids outside the vocabulary are skipped (as Hugging Face does).
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = false) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  std::optional<std::string> id_to_token(int32_t id) const;
  // One past the largest id (vocab and added tokens).
  int32_t vocab_size() const { return vocab_size_; }

  // From tokenizer_config.json (string or {"content": ...}); nullopt if unset.
  std::optional<int32_t> bos_id() const { return bos_id_; }
  std::optional<int32_t> eos_id() const { return eos_id_; }
  std::optional<int32_t> pad_id() const { return pad_id_; }
  const std::string& bos_token() const { return bos_token_; }
  const std::string& eos_token() const { return eos_token_; }

  // Added tokens marked "special" (skipped by decode(skip_special_tokens)).
  bool is_special(int32_t id) const;
  const std::vector<int32_t>& special_ids() const { return special_ids_; }
  const std::vector<AddedToken>& added_tokens() const { return added_; }

  // The BPE word cache is on by default; benchmarks turn it off to measure
  // the uncached path. Ids never depend on it.
  void set_word_cache_enabled(bool on);

 private:
  Tokenizer();
  Status init(std::string_view tokenizer_json, std::optional<std::string_view> config_json);
  Status init_config(std::string_view config_json);
  void encode_text(std::string_view text, bool at_start, std::vector<int32_t>* out) const;

  std::unique_ptr<Normalizer> normalizer_;
  std::unique_ptr<PreTokenizer> pre_tokenizer_;
  std::unique_ptr<BpeModel> model_;
  std::unique_ptr<Decoder> decoder_;
  std::unique_ptr<PostProcessor> post_processor_;
  std::vector<AddedToken> added_;
  std::vector<int32_t> added_index_by_id_;  // id -> index into added_, or -1
  std::unordered_map<std::string, int32_t> added_by_content_;
  AddedTokenMatcher raw_matcher_;
  AddedTokenMatcher normalized_matcher_;
  std::vector<int32_t> special_ids_;
  std::vector<bool> special_flag_;
  int32_t vocab_size_ = 0;
  std::optional<int32_t> bos_id_, eos_id_, pad_id_;
  std::string bos_token_, eos_token_;
};

}  // namespace pagedkv::tokenizer
