// The best entries of logits rows on the device, in the host sampler's order: the
// reduced form of a seeded draw (docs/backend.md, "Device-side seeded sampling").
// A row's min(want, non-NaN count) best non-NaN entries come back sorted by
// (logit descending, -0 as +0, ties by ascending id) — exactly the prefix of the
// order engine::sample_token sorts — so the host finishes its draw on a few
// hundred bytes (engine::sample_token_from_best) instead of the whole row.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// The most entries one row may ask for.
inline constexpr int32_t kMaxTopEntries = 1024;

struct TopEntry {
  float logit;  // -0 comes back as +0 (the sampler's keys make them one value)
  int32_t id;
};

// For i < n: row jobs[3i] of logits [.][vocab], want = jobs[3i + 1] (1 ≤ want ≤
// kMaxTopEntries), written to out[jobs[3i + 2] …]; counts[2i] = the entries
// written (min(want, non-NaN count)), counts[2i + 1] = the row's non-NaN count.
// jobs, out and counts are device memory. The entries are exact: a radix select
// of the want-th key, a collect pass (ties at that key by ascending id), a
// bitonic sort of the total order key; no floating-point arithmetic.
Status top_entries(const float* logits, int64_t vocab, const int32_t* jobs, int32_t n,
                   TopEntry* out, int32_t* counts, cudaStream_t stream = 0);

}  // namespace pagedkv::backend::cuda
