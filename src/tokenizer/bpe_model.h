// The BPE model of tokenizer.json ("model": {"type": "BPE", ...}): vocab,
// merges (either "a b" strings or ["a", "b"] pairs), byte_fallback,
// ignore_merges, unk_token with fuse_unk, continuing_subword_prefix and
// end_of_word_suffix. Dropout is rejected (it makes encoding random).
//
// Encoding one pre-token follows Hugging Face's Word::merge_all exactly: the
// symbols form a linked list and a binary heap keyed by (merge rank, position)
// applies the lowest-ranked merge first, leftmost on ties; stale heap entries
// are skipped. Merge ranks live in an open-addressing hash table keyed by the
// pair of symbol ids. A bounded cache remembers the ids of recent short
// pre-tokens (most words repeat), guarded by a try-lock so concurrent callers
// never wait: a caller that does not get the lock just encodes without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "tokenizer/json_fields.h"

namespace pagedkv::tokenizer {

struct StringHash {
  using is_transparent = void;
  size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
};
using VocabMap = std::unordered_map<std::string, int32_t, StringHash, std::equal_to<>>;

// The most a vocabulary's largest id may exceed its entry count (holes in the
// id space); docs/limits.md.
inline constexpr int64_t kMaxVocabIdGap = 1 << 20;

class BpeModel {
 public:
  static StatusOr<std::unique_ptr<BpeModel>> load(const Json& model, const std::string& path);

  // Appends the ids of each word (a pre-token) to `out`.
  void tokenize_words(const std::vector<std::string_view>& words, std::vector<int32_t>* out) const;

  std::optional<int32_t> token_to_id(std::string_view token) const;
  // nullptr when `id` is not in the vocab.
  const std::string* id_to_token(int32_t id) const;
  // One past the largest id in the vocab.
  int32_t id_limit() const { return static_cast<int32_t>(id_to_token_.size()); }
  size_t merge_count() const { return merge_count_; }
  // Turns the word cache on or off (benchmarks measure both; results never
  // differ).
  void set_cache_enabled(bool on) { cache_enabled_ = on; }
  // Number of vocab entries (Hugging Face's get_vocab_size for the model).
  int32_t vocab_count() const { return static_cast<int32_t>(vocab_.size()); }

 private:
  struct MergeEntry {
    uint64_t key;
    int32_t rank;
    int32_t new_id;
  };
  struct Scratch;

  BpeModel() = default;
  void merge_word(std::string_view word, Scratch* s, std::vector<int32_t>* out) const;
  const MergeEntry* find_merge(int32_t a, int32_t b) const;
  void insert_merge(int32_t a, int32_t b, int32_t rank, int32_t new_id);
  int32_t symbol_id(std::string_view piece, bool is_first, bool is_last, std::string* tmp) const;

  VocabMap vocab_;
  std::vector<const std::string*> id_to_token_;  // keys of vocab_ (stable), or null
  std::vector<MergeEntry> merges_;  // open addressing, power-of-two size; key 0 = empty
  uint64_t merge_mask_ = 0;
  size_t merge_count_ = 0;
  // Ids of single-code-point tokens (the initial symbols), for code points
  // below 0x10000 a flat table, above it a map; -1 when absent.
  std::vector<int32_t> bmp_char_id_;
  std::unordered_map<char32_t, int32_t> astral_char_id_;
  bool plain_symbols_ = true;  // no continuing_subword_prefix / end_of_word_suffix
  std::string continuing_subword_prefix_;
  std::string end_of_word_suffix_;
  bool byte_fallback_ = false;
  int32_t byte_ids_[256];
  bool ignore_merges_ = false;
  int32_t unk_id_ = -1;
  bool fuse_unk_ = false;

  static constexpr size_t kCacheMaxEntries = 1 << 16;
  static constexpr size_t kCacheMaxWordBytes = 64;
  std::atomic<bool> cache_enabled_{true};
  mutable std::mutex cache_mu_;
  mutable std::unordered_map<std::string, std::vector<int32_t>, StringHash, std::equal_to<>> cache_;
};

}  // namespace pagedkv::tokenizer
