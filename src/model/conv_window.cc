// ConvWindow helpers (see conv_window.h).
#include "model/conv_window.h"

#include <cstring>

namespace pagedkv::model {

void advance_conv_state(const ConvWindow& w, int64_t n, float* state) {
  if (w.keep <= 0) return;
  std::vector<float> last(static_cast<size_t>(w.keep * w.width));
  for (int64_t j = 0; j < w.keep; ++j)
    std::memcpy(last.data() + j * w.width, w.row(n + j),
                static_cast<size_t>(w.width) * sizeof(float));
  std::memcpy(state, last.data(), last.size() * sizeof(float));
}

std::vector<int32_t> token_rows(const ForwardBatch& batch, int64_t T) {
  std::vector<int32_t> row_of(static_cast<size_t>(T), -1);
  for (size_t r = 0; r < batch.rows.size(); ++r)
    for (int32_t i = 0; i < batch.rows[r].num_tokens; ++i)
      row_of[static_cast<size_t>(batch.rows[r].first_token + i)] = static_cast<int32_t>(r);
  return row_of;
}

}  // namespace pagedkv::model
