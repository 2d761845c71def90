// BPE model (see bpe_model.h).
#include "tokenizer/bpe_model.h"

#include <algorithm>
#include <cstdio>

#include "tokenizer/unicode_text.h"

namespace pagedkv::tokenizer {

namespace {

inline uint64_t pair_key(int32_t a, int32_t b) {
  return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32 | static_cast<uint32_t>(b)) + 1;
}

inline uint64_t mix(uint64_t k) {
  k ^= k >> 33;
  k *= 0xff51afd7ed558ccdULL;
  k ^= k >> 33;
  return k;
}

}  // namespace

struct BpeModel::Scratch {
  struct Symbol {
    int32_t id;
    int32_t prev;
    int32_t next;
    bool alive;
  };
  struct Merge {
    int32_t rank;
    int32_t pos;
    int32_t new_id;
    bool operator>(const Merge& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Symbol> symbols;
  std::vector<Merge> heap;
  std::string tmp;
};

const BpeModel::MergeEntry* BpeModel::find_merge(int32_t a, int32_t b) const {
  uint64_t key = pair_key(a, b);
  uint64_t i = mix(key) & merge_mask_;
  while (true) {
    const MergeEntry& e = merges_[i];
    if (e.key == key) return &e;
    if (e.key == 0) return nullptr;
    i = (i + 1) & merge_mask_;
  }
}

void BpeModel::insert_merge(int32_t a, int32_t b, int32_t rank, int32_t new_id) {
  uint64_t key = pair_key(a, b);
  uint64_t i = mix(key) & merge_mask_;
  while (true) {
    MergeEntry& e = merges_[i];
    if (e.key == key || e.key == 0) {
      // A repeated pair keeps its last rank, as Hugging Face's HashMap collect does.
      if (e.key == 0) ++merge_count_;
      e = MergeEntry{key, rank, new_id};
      return;
    }
    i = (i + 1) & merge_mask_;
  }
}

StatusOr<std::unique_ptr<BpeModel>> BpeModel::load(const Json& j, const std::string& path) {
  PKV_ASSIGN_OR_RETURN(std::string type, json_type(j, path));
  if (type != "BPE") return json_error(path, "unsupported model type '" + type + "' (only BPE)");
  const std::string where = path + " (BPE)";
  PKV_RETURN_IF_ERROR(json_only_keys(
      j,
      {"type", "dropout", "unk_token", "continuing_subword_prefix", "end_of_word_suffix",
       "fuse_unk", "byte_fallback", "ignore_merges", "vocab", "merges"},
      where));
  if (auto d = j.find("dropout"); d != j.end() && !d->is_null()) {
    if (!d->is_number() || d->get<double>() != 0.0) {
      return json_error(where + ".dropout",
                        "BPE dropout is not supported (encoding would be random)");
    }
  }
  std::unique_ptr<BpeModel> m(new BpeModel());
  PKV_ASSIGN_OR_RETURN(m->continuing_subword_prefix_,
                       json_string_or(j, "continuing_subword_prefix", "", where));
  PKV_ASSIGN_OR_RETURN(m->end_of_word_suffix_, json_string_or(j, "end_of_word_suffix", "", where));
  m->plain_symbols_ = m->continuing_subword_prefix_.empty() && m->end_of_word_suffix_.empty();
  PKV_ASSIGN_OR_RETURN(m->fuse_unk_, json_bool_or(j, "fuse_unk", false, where));
  PKV_ASSIGN_OR_RETURN(m->byte_fallback_, json_bool_or(j, "byte_fallback", false, where));
  PKV_ASSIGN_OR_RETURN(m->ignore_merges_, json_bool_or(j, "ignore_merges", false, where));

  auto vit = j.find("vocab");
  if (vit == j.end() || !vit->is_object()) return json_error(where, "missing object 'vocab'");
  m->vocab_.reserve(vit->size());
  int64_t max_id = -1;
  for (auto it = vit->begin(); it != vit->end(); ++it) {
    if (!it->is_number_integer() || it->get<int64_t>() < 0 || it->get<int64_t>() > INT32_MAX / 2) {
      return json_error(where + ".vocab[\"" + it.key() + "\"]",
                        "id must be a non-negative integer");
    }
    int64_t id = it->get<int64_t>();
    m->vocab_.emplace(it.key(), static_cast<int32_t>(id));
    max_id = std::max(max_id, id);
  }
  // Ids index dense tables (here and in the Tokenizer): they must stay close to
  // the vocabulary's size, or a tiny file could claim gigabytes (docs/limits.md).
  const int64_t id_limit = static_cast<int64_t>(m->vocab_.size()) + kMaxVocabIdGap;
  if (max_id >= id_limit) {
    return json_error(where + ".vocab",
                      "id " + std::to_string(max_id) + " is too large for a " +
                          std::to_string(m->vocab_.size()) +
                          "-entry vocabulary (ids must be below the entry count + " +
                          std::to_string(kMaxVocabIdGap) + ")");
  }
  m->id_to_token_.assign(static_cast<size_t>(max_id + 1), nullptr);
  m->bmp_char_id_.assign(0x10000, -1);
  for (const auto& [tok, id] : m->vocab_) {
    m->id_to_token_[id] = &tok;
    if (!tok.empty() && utf8_len(static_cast<unsigned char>(tok[0])) == tok.size()) {
      size_t len;
      char32_t c = utf8_decode(tok, 0, &len);
      if (len == tok.size()) {
        if (c < 0x10000) {
          m->bmp_char_id_[c] = id;
        } else {
          m->astral_char_id_[c] = id;
        }
      }
    }
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto it = m->vocab_.find(std::string_view(name));
    m->byte_ids_[b] = it == m->vocab_.end() ? -1 : it->second;
  }
  PKV_ASSIGN_OR_RETURN(std::string unk, json_string_or(j, "unk_token", "", where));
  if (!unk.empty()) {
    auto it = m->vocab_.find(unk);
    if (it == m->vocab_.end()) {
      return json_error(where + ".unk_token", "unk_token '" + unk + "' is not in the vocab");
    }
    m->unk_id_ = it->second;
  }

  auto mit = j.find("merges");
  if (mit == j.end() || !mit->is_array()) return json_error(where, "missing array 'merges'");
  size_t cap = 16;
  while (cap < mit->size() + mit->size() / 2 + 16) cap <<= 1;  // load factor <= 2/3
  m->merges_.assign(cap, MergeEntry{0, 0, 0});
  m->merge_mask_ = cap - 1;
  const size_t prefix_len = m->continuing_subword_prefix_.size();
  std::string merged;
  for (size_t r = 0; r < mit->size(); ++r) {
    const Json& e = (*mit)[r];
    auto mpath = [&] { return where + ".merges[" + std::to_string(r) + "]"; };
    std::string_view a, b;
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos) {
        return json_error(mpath(), "merge \"" + s + "\" must be two tokens separated by one space");
      }
      a = std::string_view(s).substr(0, sp);
      b = std::string_view(s).substr(sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get_ref<const std::string&>();
      b = e[1].get_ref<const std::string&>();
    } else {
      return json_error(mpath(), "merge must be \"a b\" or [\"a\", \"b\"]");
    }
    auto ia = m->vocab_.find(a);
    if (ia == m->vocab_.end()) {
      return json_error(mpath(), "merge token '" + std::string(a) + "' is not in the vocab");
    }
    auto ib = m->vocab_.find(b);
    if (ib == m->vocab_.end()) {
      return json_error(mpath(), "merge token '" + std::string(b) + "' is not in the vocab");
    }
    if (b.size() < prefix_len) {
      return json_error(mpath(), "merge token '" + std::string(b) +
                                     "' is shorter than continuing_subword_prefix");
    }
    merged.assign(a);
    merged.append(b.substr(prefix_len));
    auto im = m->vocab_.find(merged);
    if (im == m->vocab_.end()) {
      return json_error(mpath(), "merged token '" + merged + "' is not in the vocab");
    }
    m->insert_merge(ia->second, ib->second, static_cast<int32_t>(r), im->second);
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || id >= id_limit()) return nullptr;
  return id_to_token_[id];
}

int32_t BpeModel::symbol_id(std::string_view piece, bool is_first, bool is_last,
                            std::string* tmp) const {
  if (plain_symbols_) {
    size_t len;
    char32_t c = utf8_decode(piece, 0, &len);
    if (c < 0x10000) return bmp_char_id_[c];
    auto it = astral_char_id_.find(c);
    return it == astral_char_id_.end() ? -1 : it->second;
  }
  tmp->clear();
  if (!is_first) *tmp += continuing_subword_prefix_;
  tmp->append(piece);
  if (is_last) *tmp += end_of_word_suffix_;
  auto it = vocab_.find(*tmp);
  return it == vocab_.end() ? -1 : it->second;
}

void BpeModel::merge_word(std::string_view word, Scratch* s, std::vector<int32_t>* out) const {
  if (ignore_merges_) {
    auto it = vocab_.find(word);
    if (it != vocab_.end()) {
      out->push_back(it->second);
      return;
    }
  }
  auto& sym = s->symbols;
  sym.clear();
  auto add = [&](int32_t id) {
    int32_t n = static_cast<int32_t>(sym.size());
    sym.push_back({id, n - 1, n + 1, true});
  };
  // Pending unknown (id) while fusing; -1 when none.
  int32_t pending_unk = -1;
  size_t i = 0;
  while (i < word.size()) {
    size_t len = utf8_len(static_cast<unsigned char>(word[i]));
    if (i + len > word.size()) len = word.size() - i;
    std::string_view piece = word.substr(i, len);
    int32_t id = symbol_id(piece, i == 0, i + len == word.size(), &s->tmp);
    i += len;
    if (id >= 0) {
      if (pending_unk >= 0) {
        add(pending_unk);
        pending_unk = -1;
      }
      add(id);
      continue;
    }
    if (byte_fallback_) {
      // The bytes of the symbol as it would be looked up (with prefix/suffix).
      std::string_view bytes = plain_symbols_ ? piece : std::string_view(s->tmp);
      bool all = true;
      for (unsigned char b : bytes) all = all && byte_ids_[b] >= 0;
      if (all) {
        // Hugging Face adds byte tokens without flushing a pending unk first.
        for (unsigned char b : bytes) add(byte_ids_[b]);
        continue;
      }
    }
    if (unk_id_ >= 0) {
      if (pending_unk >= 0 && !fuse_unk_) add(pending_unk);
      pending_unk = unk_id_;
    }
    // No unk token: the character is dropped, as Hugging Face does.
  }
  if (pending_unk >= 0) add(pending_unk);
  if (sym.empty()) return;
  sym.back().next = -1;

  auto& heap = s->heap;
  heap.clear();
  auto cmp = [](const Scratch::Merge& a, const Scratch::Merge& b) { return a > b; };
  for (size_t k = 0; k + 1 < sym.size(); ++k) {
    if (const MergeEntry* e = find_merge(sym[k].id, sym[k + 1].id)) {
      heap.push_back({e->rank, static_cast<int32_t>(k), e->new_id});
    }
  }
  std::make_heap(heap.begin(), heap.end(), cmp);
  while (!heap.empty()) {
    std::pop_heap(heap.begin(), heap.end(), cmp);
    Scratch::Merge top = heap.back();
    heap.pop_back();
    auto& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    int32_t next_pos = cur.next;
    auto& right = sym[next_pos];
    const MergeEntry* e = find_merge(cur.id, right.id);
    if (e == nullptr || e->new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.next = right.next;
    right.alive = false;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      if (const MergeEntry* pe = find_merge(sym[cur.prev].id, cur.id)) {
        heap.push_back({pe->rank, cur.prev, pe->new_id});
        std::push_heap(heap.begin(), heap.end(), cmp);
      }
    }
    if (cur.next >= 0) {
      if (const MergeEntry* ne = find_merge(cur.id, sym[cur.next].id)) {
        heap.push_back({ne->rank, top.pos, ne->new_id});
        std::push_heap(heap.begin(), heap.end(), cmp);
      }
    }
  }
  for (int32_t k = 0; k >= 0; k = sym[k].next) out->push_back(sym[k].id);
}

void BpeModel::tokenize_words(const std::vector<std::string_view>& words,
                              std::vector<int32_t>* out) const {
  Scratch scratch;
  std::unique_lock<std::mutex> lock(cache_mu_, std::defer_lock);
  if (cache_enabled_) (void)lock.try_lock();
  const bool use_cache = lock.owns_lock();
  for (std::string_view w : words) {
    if (w.empty()) continue;
    const bool cacheable = use_cache && w.size() <= kCacheMaxWordBytes;
    if (cacheable) {
      auto it = cache_.find(w);
      if (it != cache_.end()) {
        out->insert(out->end(), it->second.begin(), it->second.end());
        continue;
      }
    }
    size_t before = out->size();
    merge_word(w, &scratch, out);
    if (cacheable) {
      if (cache_.size() >= kCacheMaxEntries) cache_.clear();
      cache_.emplace(std::string(w), std::vector<int32_t>(out->begin() + before, out->end()));
    }
  }
}

}  // namespace pagedkv::tokenizer
