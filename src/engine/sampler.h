// Sampler: turns one logits row into one token, greedy or seeded (or finishes a
// seeded draw from the row's best entries, the same token: sample_token_from_best).
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

#include "model/row_draw.h"
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

// The same draw finished from a row's best entries (the reduced form a device
// model computes, model::RowDraw): `best` holds the row's best non-NaN entries in
// the sampler's order (logit descending, ties by ascending id), `complete` when
// they are all of the row's non-NaN entries, `vocab` the row's length. Returns
// sample_token's token on the full row, or -1 when that draw needs entries
// beyond `best` (a candidate list longer than `best`). Exact: the candidate
// list it hands draw_ordered is sample_token's, entry for entry.
int32_t sample_token_from_best(std::span<const model::DrawEntry> best, bool complete, size_t vocab,
                               const SamplingParams& params, int64_t position);

// How many best entries sample_token_from_best can need for `params`, at most
// `cap`: top_k when 0 < top_k <= cap (always enough), else cap (enough when the
// row has at most cap candidates above the sampler's probability cut).
int32_t draw_entries_needed(const SamplingParams& params, int32_t cap);

// A seeded draw without top-k (temperature, top-p, min-p): the draws sample_token
// finishes by selection where it can, and a device model may too
// (model::RowDraw::selection).
bool selection_draw_serves(const SamplingParams& params);

// sample_token's draw by selection alone (a test hook; sampler.cc): the token of a
// draw with top_k 0 (temperature, top-p, min-p) found without sorting the
// candidates, or -1 where its margins cannot certify it is the sorted draw's (then
// sample_token sorts) or the setting is not such a draw (greedy, top-k).
// margin_scale (≥ 1) widens the margins it asks for; allow_simd false computes the
// weights without AVX2.
int32_t draw_by_selection_for_test(std::span<const float> logits, const SamplingParams& params,
                                   int64_t position, double margin_scale = 1.0,
                                   bool allow_simd = true);

// The selection draw's second pass (a test hook; sampler.cc, WeightSums) over a
// row and its weights: the four partial sums of every weight and (with_min_p) of
// those ≥ min_weight, whether a candidate's weight lies within band of min_weight,
// the two histograms by the keys' leading 12 bits, each entry's bucket (0xffff: a
// zero weight). allow_simd false takes the scalar loop; both give the same bits.
struct SelectionSumsForTest {
  double part[4] = {0, 0, 0, 0}, min_p_part[4] = {0, 0, 0, 0};
  bool close = false;
  std::vector<double> hist;
  std::vector<uint16_t> bucket;
};
SelectionSumsForTest selection_sums_for_test(std::span<const float> logits,
                                             std::span<const double> weights, bool with_min_p,
                                             double min_weight, double band, bool allow_simd);

// The reference pipeline, slow: a comparator sort of every non-NaN entry, and
// the scalar greedy loop. sample_token's fast paths (sampler.cc) give exactly
// its tokens for every setting; tests/engine/sampler_test.cc and
// bench/engine/bench_sampler compare them.
int32_t argmax_reference(std::span<const float> logits);
int32_t sample_token_reference(std::span<const float> logits, const SamplingParams& params,
                               int64_t position);

}  // namespace pagedkv::engine
