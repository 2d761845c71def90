// Sampler: turns one logits row into one token, greedy or seeded.
//
// Determinism (DESIGN.md): a seeded draw uses a counter-based random number —
// a hash of (request seed, absolute token position) — never a generator whose
// state is shared with other requests or advanced by them. So a request samples
// the same tokens alone or batched, resumed after preemption, or replayed.
//
// Pipeline for temperature > 0 (the order Hugging Face's generate uses):
// logits / temperature → top-k (keep the k largest) → softmax → top-p (keep the
// smallest prefix, by descending probability, whose mass reaches top_p) → min-p
// (drop tokens with p < min_p · p_max) → renormalize → inverse-CDF draw in
// descending-probability order. Ties in a logit order by token id. All sums run in
// double in that fixed order. temperature <= 0 is greedy argmax (ties → lowest id).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "pagedkv/sampling.h"
#include "pagedkv/status.h"

namespace pagedkv::engine {

// SamplingParams is public: include/pagedkv/sampling.h.

// Greedy argmax, lowest id on ties. NaN logits are never chosen (unless all are NaN).
int32_t argmax(std::span<const float> logits);

// The uniform number in [0, 1) for (seed, position): a pure function.
double uniform_for(uint64_t seed, int64_t position);

// Samples the token for absolute position `position` of a request.
int32_t sample_token(std::span<const float> logits, const SamplingParams& params, int64_t position);

// The reference pipeline, slow: a comparator sort of every non-NaN entry, and
// the scalar greedy loop. sample_token's fast paths (sampler.cc) give exactly
// its tokens for every setting; tests/engine/sampler_test.cc and
// bench/engine/bench_sampler compare them.
int32_t argmax_reference(std::span<const float> logits);
int32_t sample_token_reference(std::span<const float> logits, const SamplingParams& params,
                               int64_t position);

}  // namespace pagedkv::engine
