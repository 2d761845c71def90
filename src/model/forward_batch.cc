// ForwardBatch helpers (see forward_batch.h).
#include "model/forward_batch.h"

namespace pagedkv::model {

ForwardRow& ForwardBatch::add_row(std::span<const int32_t> tokens, int32_t context_len,
                                  LogitsRequest logits) {
  ForwardRow row;
  row.first_token = static_cast<int32_t>(token_ids.size());
  row.num_tokens = static_cast<int32_t>(tokens.size());
  row.context_len = context_len;
  row.logits = logits;
  for (size_t i = 0; i < tokens.size(); ++i) {
    token_ids.push_back(tokens[i]);
    positions.push_back(context_len + static_cast<int32_t>(i));
  }
  rows.push_back(std::move(row));
  return rows.back();
}

}  // namespace pagedkv::model
