// Hybrid prefix reuse (issue #15): time to first token of a request whose
// prompt shares a long prefix with an earlier one, on an lfm2 model, resumed
// from a recurrent-state checkpoint vs computed cold — in the same run, one
// engine each. The warm engine first runs the shared prefix (+1 token) alone,
// which publishes the state checkpoint at its last full block; the measured
// request then resumes there. The cold engine has checkpoints off
// (PAGEDKV_STATE_CHECKPOINT_MAX_MB=0, so every prompt is computed from token
// 0). Reports TTFT (best of --reps, process CPU time of the step thread, since
// wall time on a shared machine mostly measures the neighbours) for both and
// the ratio cold / warm; the two first tokens and their logits must be equal.
// Usage: bench_hybrid_prefix [--prefix 1024] [--suffix 16] [--preset tiny]
//                            [--family lfm2] [--reps 5]
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "bench_flags.h"
#include "bench_model.h"
#include "model/model.h"
#include "pagedkv/engine.h"

using namespace pagedkv;

namespace {

void check(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    std::exit(1);
  }
}

double cpu_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) * 1e3 + static_cast<double>(ts.tv_nsec) / 1e6;
}

struct Run {
  double ttft_ms = 0;
  std::vector<float> logits;
  int32_t token = -1;
  int64_t cached = 0;
};

// One request stepped to its first token on `e` (step() mode, this thread).
Run first_token(engine::Engine& e, const std::vector<int32_t>& prompt) {
  engine::GenerateRequest r;
  r.prompt = prompt;
  r.sampling.max_tokens = 1;
  r.ignore_eos = true;
  r.return_logits = true;
  const double t0 = cpu_ms();
  auto h = e.submit(r);
  check(h.status());
  e.run_until_idle();
  Run out;
  out.ttft_ms = cpu_ms() - t0;
  const engine::RequestResult& res = (*h)->wait();
  check(res.error);
  out.token = res.tokens.at(0);
  out.logits = res.logits.at(0);
  out.cached = res.usage.cached_prompt_tokens;
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  cli::ArgParser flags("",
                       "Hybrid prefix reuse: TTFT resumed from a recurrent-state checkpoint vs "
                       "computed cold, in the same run.",
                       "bench_hybrid_prefix");
  flags.add_option("prefix", "N", "tokens of the shared prefix", "1024");
  flags.add_option("suffix", "N", "new tokens after the prefix", "16");
  flags.add_option("preset", "NAME", "make-model preset", "tiny");
  flags.add_option("family", "NAME", "hybrid family", "lfm2");
  flags.add_option("reps", "N", "repetitions; the best is kept", "5");
  if (auto rc = flags.parse_or_exit_code(argc, argv)) return *rc;
  const int prefix = static_cast<int>(bench::int_flag(flags, "prefix", 1));
  const int suffix = static_cast<int>(bench::int_flag(flags, "suffix", 1));
  const int reps = static_cast<int>(bench::int_flag(flags, "reps", 1));
  const std::string preset = flags.get("preset");
  const std::string family = flags.get("family");
  const std::shared_ptr<model::Model> model = bench::load_throwaway_model(family, preset);

  std::mt19937 g(7);
  std::uniform_int_distribution<int32_t> d(0, model->config().vocab_size - 1);
  double warm_best = 1e30, cold_best = 1e30;
  int64_t cached = 0;
  for (int rep = 0; rep < reps; ++rep) {
    std::vector<int32_t> shared(static_cast<size_t>(prefix) + 1);
    for (auto& t : shared) t = d(g);
    std::vector<int32_t> prompt(shared.begin(), shared.end() - 1);
    for (int i = 0; i < suffix; ++i) prompt.push_back(d(g));
    engine::EngineOptions o;
    o.use_block_paged_cache = true;
    auto warm_e = engine::Engine::create(model, o);
    check(warm_e.status());
    first_token(**warm_e, shared);  // publishes the checkpoint at the prefix
    const Run warm = first_token(**warm_e, prompt);
    ::setenv("PAGEDKV_STATE_CHECKPOINT_MAX_MB", "0", 1);
    auto cold_e = engine::Engine::create(model, o);
    ::unsetenv("PAGEDKV_STATE_CHECKPOINT_MAX_MB");
    check(cold_e.status());
    first_token(**cold_e, shared);  // same K/V cached, but no checkpoint
    const Run cold = first_token(**cold_e, prompt);
    if (warm.token != cold.token || warm.logits.size() != cold.logits.size() ||
        std::memcmp(warm.logits.data(), cold.logits.data(), warm.logits.size() * 4) != 0) {
      std::fprintf(stderr, "error: warm and cold first tokens differ\n");
      return 1;
    }
    if (cold.cached != 0) {
      std::fprintf(stderr, "error: the cold run took a K/V-only hit\n");
      return 1;
    }
    warm_best = std::min(warm_best, warm.ttft_ms);
    cold_best = std::min(cold_best, cold.ttft_ms);
    cached = warm.cached;
  }
  std::printf(
      "bench_hybrid_prefix family=%s preset=%s prefix=%d suffix=%d reps=%d\n"
      "  cold (recomputed from 0)   ttft_cpu_ms=%.2f\n"
      "  warm (state checkpoint)    ttft_cpu_ms=%.2f cached_prompt_tokens=%lld\n"
      "  ratio cold/warm=%.2fx\n",
      family.c_str(), preset.c_str(), prefix, suffix, reps, cold_best, warm_best,
      static_cast<long long>(cached), cold_best / warm_best);
  return 0;
}
