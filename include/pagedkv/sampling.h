// SamplingParams: how a request turns logits into tokens — temperature, top-k,
// top-p, min-p, the seed, max_tokens and stop token ids. Part of the public API
// (GenerateRequest::sampling, include/pagedkv/engine.h); the sampler that applies
// it is engine-internal (src/engine/sampler.h documents the pipeline and its
// determinism: a seeded draw depends only on (seed, absolute token position)).
#pragma once

#include <cstdint>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv::engine {

struct SamplingParams {
  double temperature = 0.0;  // <= 0: greedy
  int32_t top_k = 0;         // 0: off
  double top_p = 1.0;        // 1: off
  double min_p = 0.0;        // 0: off
  uint64_t seed = 0;
  int32_t max_tokens = 16;
  std::vector<int32_t> stop_token_ids;

  // InvalidArgument naming the bad field (NaN/negative temperature, top_p outside
  // (0, 1], min_p outside [0, 1], negative top_k or max_tokens).
  Status validate() const;
  bool is_stop(int32_t token) const;
};

}  // namespace pagedkv::engine
