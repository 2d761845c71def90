// A benchmark's Engine and what it sends it: an engine created on a model,
// prompts of random token ids, and greedy requests that generate exactly
// `max_tokens` tokens (eos ignored), so every run of a benchmark does the same
// work. Failures exit the program (exit_on_error.h): a benchmark has no caller
// to hand them to.
#pragma once

#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "model/model.h"
#include "pagedkv/engine.h"

namespace pagedkv::bench {

// Engine::create(m, o), or exit.
std::unique_ptr<engine::Engine> create_engine(const std::shared_ptr<model::Model>& m,
                                              const engine::EngineOptions& o);

// `n` token ids drawn uniformly from [0, vocab) by `g` (the same ids for the
// same generator state, whatever else the benchmark draws before or after).
std::vector<int32_t> random_tokens(std::mt19937& g, size_t n, int32_t vocab);

// Submits `prompt` to generate exactly `max_tokens` tokens (ignore_eos; with
// the logits of each when `return_logits`), or exits.
engine::RequestHandlePtr submit_fixed(engine::Engine& e, const std::vector<int32_t>& prompt,
                                      int32_t max_tokens, bool return_logits = false);

// Waits for `h`; exits when the request ended in an error.
const engine::RequestResult& wait_ok(const engine::RequestHandlePtr& h);

}  // namespace pagedkv::bench
