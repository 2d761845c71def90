// Capture after ONE turn (issue #10): how much of an 8,192-token prompt a later
// process can restore after a single turn, and what the capture costs the
// engine's step thread. The reference captures within a per-turn budget (128
// blocks / 250 ms), so one turn leaves ~25% of a 512-block prompt restorable; the
// engine's capture continuation pins the blocks past that budget and writes
// them after the turn on its own thread.
//
// Per mode — continuation on (default) vs off (PAGEDKV_COLD_CAPTURE_CONTINUE=0,
// the reference's behaviour) — and a persist-off baseline:
//   turn      one request (the prompt + 1 token) through an Engine with the
//             cold tier on: wall ms of the step loop (run_until_idle), which
//             includes the step thread's share of the capture;
//   drain     ms until the continuation and the writer are done (flush);
//   restore   a fresh Engine on the same directory runs the same prompt:
//             restored tokens / restorable tokens, and its TTFT.
// Usage: bench_cold_turn [--tokens N] [--preset small] [--dir BASE]
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
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

double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

struct Turn {
  double turn_ms = 0, drain_ms = 0;
  engine::EngineStats stats;
  engine::RequestResult result;
};

Turn run_turn(const std::shared_ptr<model::Model>& m, const std::string& dir,
              const std::vector<int32_t>& prompt, bool persist) {
  engine::EngineOptions o;
  o.persist_paged_cache = persist;
  o.cold_cache_dir = dir + "/cold";
  o.metrics_dir = dir + "/metrics";
  o.max_num_batched_tokens = static_cast<int64_t>(prompt.size());
  const auto e = bench::create_engine(m, o);
  const engine::RequestHandlePtr h = bench::submit_fixed(*e, prompt, 1);
  Turn t;
  auto t0 = Clock::now();
  e->run_until_idle();
  t.turn_ms = ms_since(t0);
  t0 = Clock::now();
  e->flush_cold_tier();
  t.drain_ms = ms_since(t0);
  t.result = h->wait();
  t.stats = e->stats();
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  cli::ArgParser flags("",
                       "Capture after one turn: the restorable share of a long prompt and the "
                       "capture's cost, with and without the capture continuation.",
                       "bench_cold_turn");
  flags.add_option("tokens", "N", "prompt tokens", "8192");
  flags.add_option("preset", "NAME", "make-model preset", "small");
  flags.add_option("dir", "BASE", "directory the cold-tier directories are made under", "/tmp");
  if (auto rc = flags.parse_or_exit_code(argc, argv)) return *rc;
  const int64_t tokens = bench::int_flag(flags, "tokens", 1);
  const std::string preset = flags.get("preset");
  const std::string base = flags.get("dir");
  unsetenv("PAGEDKV_PERSIST_PAGED_CACHE");
  unsetenv("PAGEDKV_COLD_CACHE_DIR");
  const std::shared_ptr<model::Model> m = bench::load_random_model(preset);
  const int32_t b = m->kv_geometry().block_size;
  std::mt19937 g(5);
  const std::vector<int32_t> prompt =
      bench::random_tokens(g, static_cast<size_t>(tokens), m->config().vocab_size);
  const int64_t restorable = (tokens - 1) / b * b;
  std::printf("bench_cold_turn: %s preset, %lld-token prompt (%lld restorable tokens), dir %s\n",
              preset.c_str(), static_cast<long long>(tokens), static_cast<long long>(restorable),
              base.c_str());
  const std::string work = base + "/pkv_cold_turn_" + std::to_string(::getpid());
  const Turn off = run_turn(m, work + "/off", prompt, /*persist=*/false);
  std::printf("  persist off          turn %9.1f ms\n", off.turn_ms);
  for (const bool cont : {true, false}) {
    setenv("PAGEDKV_COLD_CAPTURE_CONTINUE", cont ? "1" : "0", 1);
    const std::string dir = work + (cont ? "/on" : "/ref");
    std::filesystem::remove_all(dir);
    const Turn first = run_turn(m, dir, prompt, true);
    const Turn second = run_turn(m, dir, prompt, true);  // a "restarted process"
    const int64_t restored = second.result.usage.cached_prompt_tokens_cold;
    const bool same = second.result.tokens == off.result.tokens;
    std::printf(
        "  continuation %-3s    turn %9.1f ms (x%.3f of persist off; step-thread capture %llu "
        "blocks) | drain %8.1f ms (%llu blocks after the turn) | after ONE turn: %lld of %lld "
        "tokens restorable (%.1f%%), restart TTFT %.1f ms vs %.1f ms cold, tokens identical: %s\n",
        cont ? "on" : "off", first.turn_ms, first.turn_ms / off.turn_ms,
        static_cast<unsigned long long>(first.stats.cold.captured_blocks), first.drain_ms,
        static_cast<unsigned long long>(first.stats.cold.continued_blocks),
        static_cast<long long>(restored), static_cast<long long>(restorable),
        100.0 * static_cast<double>(restored) / static_cast<double>(restorable),
        second.result.timings.ttft_ms, off.result.timings.ttft_ms, same ? "yes" : "NO");
  }
  unsetenv("PAGEDKV_COLD_CAPTURE_CONTINUE");
  std::filesystem::remove_all(work);
  return 0;
}
