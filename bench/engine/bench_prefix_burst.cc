// Same-step prefix sharing (issue #10): a burst of N chat requests that arrive
// together with one long, uncached system prompt. With sharing the first request
// computes the system prompt and the others wait for its blocks and hit them;
// without (PAGEDKV_SAME_STEP_PREFIX_SHARING=0, EngineOptions) every request
// computes it. Reports, for each mode in the same run: tokens fed to the model,
// prompt tokens computed, TTFT p50/p95 and the wall time of the burst, and the
// ratios shared / unshared. Every request's tokens are checked equal across modes.
// (With a token budget per step no larger than one prompt, chunked prefill
// already serializes the burst and later requests hit the first one's blocks;
// the sharing matters when a step's budget holds several prompts, as with
// vLLM-style budgets of 8K-16K tokens.)
// Usage: bench_prefix_burst [--requests 32] [--system-tokens 2048] [--preset tiny]
//                           [--budget 8192]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_engine.h"
#include "bench_flags.h"
#include "bench_model.h"
#include "model/model.h"
#include "pagedkv/engine.h"

using namespace pagedkv;
using Clock = std::chrono::steady_clock;

namespace {

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx), hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

struct Run {
  double wall_ms = 0, ttft_p50 = 0, ttft_p95 = 0;
  uint64_t forward_tokens = 0, prompt_computed = 0;
  std::vector<std::vector<int32_t>> tokens;
};

Run burst(const std::shared_ptr<model::Model>& m, const std::vector<std::vector<int32_t>>& prompts,
          bool share, int64_t budget) {
  engine::EngineOptions o;
  o.same_step_prefix_sharing = share;
  o.max_num_batched_tokens = budget;
  o.paged_cache_memory_mb = 1024;  // room for the whole burst at once (no admission limit)
  o.paged_cache_initial_memory_mb = 1024;
  const auto e = bench::create_engine(m, o);
  const auto t0 = Clock::now();
  std::vector<engine::RequestHandlePtr> hs;
  for (const auto& p : prompts) hs.push_back(bench::submit_fixed(*e, p, 16));
  e->start();  // the burst is in the inbox together, as requests that arrive during a step
  Run run;
  std::vector<double> ttft;
  for (auto& h : hs) {
    const engine::RequestResult& r = bench::wait_ok(h);
    ttft.push_back(r.timings.ttft_ms);
    run.tokens.push_back(r.tokens);
  }
  run.wall_ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
  e->stop();
  const engine::EngineStats st = e->stats();
  run.forward_tokens = st.forward_tokens;
  run.prompt_computed = st.prompt_tokens - st.cached_prompt_tokens;
  run.ttft_p50 = percentile(ttft, 0.5);
  run.ttft_p95 = percentile(ttft, 0.95);
  return run;
}

}  // namespace

int main(int argc, char** argv) {
  cli::ArgParser flags("",
                       "Same-step prefix sharing: a burst of requests with one long uncached "
                       "system prompt, with vs without sharing.",
                       "bench_prefix_burst");
  flags.add_option("requests", "N", "requests in the burst", "32");
  flags.add_option("system-tokens", "N", "tokens of the shared system prompt", "2048");
  flags.add_option("preset", "NAME", "make-model preset", "tiny");
  flags.add_option("budget", "N", "max_num_batched_tokens (tokens per step)", "8192");
  if (auto rc = flags.parse_or_exit_code(argc, argv)) return *rc;
  const int requests = static_cast<int>(bench::int_flag(flags, "requests", 1));
  const int system_tokens = static_cast<int>(bench::int_flag(flags, "system-tokens", 1));
  const std::string preset = flags.get("preset");
  const int64_t budget = bench::int_flag(flags, "budget", 1);
  unsetenv("PAGEDKV_SAME_STEP_PREFIX_SHARING");
  const std::shared_ptr<model::Model> m = bench::load_random_model(preset);
  std::mt19937 g(11);
  const int32_t vocab = m->config().vocab_size;
  const std::vector<int32_t> system =
      bench::random_tokens(g, static_cast<size_t>(system_tokens), vocab);
  std::vector<std::vector<int32_t>> prompts;
  for (int i = 0; i < requests; ++i) {
    std::vector<int32_t> p = system;
    const std::vector<int32_t> user = bench::random_tokens(g, 48, vocab);
    p.insert(p.end(), user.begin(), user.end());
    prompts.push_back(std::move(p));
  }
  std::printf(
      "bench_prefix_burst: %s preset, %d requests at once, %d-token system prompt + 48 "
      "user tokens, 16 output tokens each, max_num_batched_tokens %lld\n",
      preset.c_str(), requests, system_tokens, static_cast<long long>(budget));
  const Run on = burst(m, prompts, true, budget);
  const Run off = burst(m, prompts, false, budget);
  for (const auto* r : {&on, &off}) {
    std::printf(
        "  sharing %-3s  forward tokens %8llu  prompt tokens computed %8llu  TTFT p50 "
        "%9.1f ms  p95 %9.1f ms  wall %9.1f ms\n",
        r == &on ? "on" : "off", static_cast<unsigned long long>(r->forward_tokens),
        static_cast<unsigned long long>(r->prompt_computed), r->ttft_p50, r->ttft_p95, r->wall_ms);
  }
  std::printf(
      "  on/off: forward tokens x%.3f, TTFT p50 x%.3f, p95 x%.3f, wall x%.3f; tokens "
      "identical: %s\n",
      static_cast<double>(on.forward_tokens) / static_cast<double>(off.forward_tokens),
      on.ttft_p50 / off.ttft_p50, on.ttft_p95 / off.ttft_p95, on.wall_ms / off.wall_ms,
      on.tokens == off.tokens ? "yes" : "NO");
  return 0;
}
