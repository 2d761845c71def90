// Incremental detokenization (see stream_decoder.h).
#include "tokenizer/stream_decoder.h"

#include <span>

namespace pagedkv::tokenizer {

namespace {
constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
}

StreamDecoder::StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tok_(tokenizer), skip_special_(skip_special_tokens) {}

void StreamDecoder::reset() {
  ids_.clear();
  ctx_ = read_ = 0;
  prefix_.clear();
}

std::string StreamDecoder::decode_window(size_t begin, size_t end) const {
  return tok_.decode(std::span<const int32_t>(ids_.data() + begin, end - begin), skip_special_);
}

bool StreamDecoder::is_byte_token(int32_t id) const {
  auto t = tok_.id_to_token(id);
  return t && t->size() == 6 && t->compare(0, 3, "<0x") == 0 && (*t)[5] == '>';
}

std::string StreamDecoder::step(int32_t id) {
  ids_.push_back(id);
  if (is_byte_token(id)) return std::string();
  std::string text = decode_window(ctx_, ids_.size());
  if (text.size() <= prefix_.size() || text.ends_with(kReplacement)) return std::string();
  std::string out = text.substr(prefix_.size());
  // The just-emitted tokens become the next window's context, unless they
  // decode to nothing (then a first-token rule could reach the new text).
  std::string next_prefix = decode_window(read_, ids_.size());
  if (!next_prefix.empty()) {
    ctx_ = read_;
    prefix_ = std::move(next_prefix);
  } else {
    prefix_ = std::move(text);
  }
  read_ = ids_.size();
  return out;
}

std::string StreamDecoder::finish() {
  if (read_ == ids_.size()) {
    reset();
    return std::string();
  }
  std::string text = decode_window(ctx_, ids_.size());
  std::string out = text.size() > prefix_.size() ? text.substr(prefix_.size()) : std::string();
  reset();
  return out;
}

}  // namespace pagedkv::tokenizer
