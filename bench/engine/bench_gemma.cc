// Gemma through the engine (issue #14): prefill and decode tokens/s of
// gemma3_text and gemma4_text `small` presets, against a qwen3 `small` model
// with the same number of layers (the baseline, measured in the same run), and
// sliding-window residency — KV blocks a request holds per cache group — at a
// 4K context.
//
// Throughput: every model runs through the same engine (Engine::step on this
// thread), paged — gemma through the KVCacheCoordinator, qwen3 through the
// one-pool path — and flat (per-request contiguous KV: the model's own cost
// without any cache bookkeeping). Prefill = one request of --prefill tokens, max_tokens 1;
// decode = --rows requests of 32-token prompts generating --decode tokens each,
// timing only the steps that carry no prefill row. Time is process CPU time
// (run with PAGEDKV_CPU_THREADS=1 so it is one core's work; the build machine
// is shared, so wall time would mostly measure the neighbours), best of --reps.
//
// Residency: one request of --context prompt tokens generating 64 tokens. At
// every decode token (on_token, on the step thread) the engine's held blocks
// are sampled; the per-group split comes from replaying the engine's calls
// (admission: hit + reserve the prompt in full groups and the first slice in
// sliding groups; prefill slices of 2048, each grown before it runs; decode
// one token at a time) on a logical KVCacheCoordinator of the model's spec,
// whose total must equal the engine's. Reported: blocks of the full and the
// sliding group at their peak during the prefill (a slice reserved, not yet
// recorded) and while decoding, their ratio sliding/full, and KV bytes per request against the
// all-full-attention size of the same layers and against the qwen3 baseline
// (same K/V row shape, 6 layers, its held blocks measured the same way).
//
// Usage: bench_gemma [--prefill 1024] [--rows 4] [--decode 64] [--context 4096]
//                    [--reps 3]
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_engine.h"
#include "bench_flags.h"
#include "bench_machine.h"
#include "bench_model.h"
#include "engine/coordinator_kv.h"
#include "exit_on_error.h"
#include "kv/kv_cache_coordinator.h"
#include "model/make_model.h"
#include "model/model.h"
#include "pagedkv/engine.h"

using namespace pagedkv;

namespace {

double cpu_s() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// A random `small` checkpoint of `family` with 6 layers (cached between runs).
std::shared_ptr<model::Model> small_model(const std::string& family) {
  const std::string dir = bench::bench_model_cache_dir() + "/" + family + "-small-6l-f32-seed1";
  const auto make = [&] {
    model::MakeModelOptions o;
    o.family = family;
    o.preset = "small";
    o.num_layers = 6;
    o.seed = 1;
    o.out_dir = dir;
    bench::exit_on_error(model::make_random_model(o));
  };
  if (!std::filesystem::exists(dir + "/model.safetensors")) make();
  auto m = model::load_model(dir);
  if (!m.ok()) {  // cached by an older make-model whose config this build refuses
    std::fprintf(stderr, "  (cached %s does not load: %s; writing it again)\n", dir.c_str(),
                 m.status().to_string().c_str());
    std::filesystem::remove_all(dir);
    make();
    m = model::load_model(dir);
  }
  bench::exit_on_error(m.status());
  return std::shared_ptr<model::Model>(std::move(*m));
}

std::unique_ptr<engine::Engine> paged_engine(const std::shared_ptr<model::Model>& m,
                                             bool paged = true) {
  engine::EngineOptions o;
  o.use_block_paged_cache = paged;
  o.max_num_seqs = 8;
  return bench::create_engine(m, o);
}

struct Throughput {
  double prefill_tps = 0;
  double decode_tps = 0;
};

Throughput measure_throughput(const std::shared_ptr<model::Model>& m, bool paged, int prefill,
                              int rows, int decode, int reps) {
  Throughput best;
  const int32_t vocab = m->config().vocab_size;
  for (int rep = 0; rep < reps; ++rep) {
    std::mt19937 g(11 + static_cast<uint32_t>(rep));
    {
      auto e = paged_engine(m, paged);
      const auto prompt = bench::random_tokens(g, static_cast<size_t>(prefill), vocab);
      const double t0 = cpu_s();
      auto h = bench::submit_fixed(*e, prompt, 1);
      e->run_until_idle();
      const double t = cpu_s() - t0;
      bench::wait_ok(h);
      best.prefill_tps = std::max(best.prefill_tps, prefill / t);
    }
    {
      auto e = paged_engine(m, paged);
      std::vector<engine::RequestHandlePtr> hs;
      for (int r = 0; r < rows; ++r)
        hs.push_back(bench::submit_fixed(*e, bench::random_tokens(g, 32, vocab), decode));
      double decode_cpu = 0;
      int64_t decode_tokens = 0;
      for (;;) {
        const double t0 = cpu_s();
        const engine::StepReport rep_ = e->step();
        const double t = cpu_s() - t0;
        if (rep_.rows == 0) break;
        if (rep_.prefill_rows == 0) {
          decode_cpu += t;
          decode_tokens += rep_.decode_rows;
        }
      }
      for (const auto& h : hs) bench::wait_ok(h);
      best.decode_tps = std::max(best.decode_tps, static_cast<double>(decode_tokens) / decode_cpu);
    }
  }
  return best;
}

struct Residency {
  std::vector<int64_t> admit;   // per group, the most during the prefill
  std::vector<int64_t> decode;  // per group, the most while decoding
  int64_t engine_decode_max = 0;
  int64_t replay_decode_max = 0;
};

// The engine's calls for one request on a logical coordinator of `spec`.
Residency replay(const kv::KVCacheSpec& spec, int64_t context, int decode, int64_t chunk) {
  kv::CoordinatorBudget budget;
  budget.max_context_tokens = context + decode + 16;
  budget.max_live_rows = 1;
  auto c = kv::KVCacheCoordinator::create_logical(spec, budget);
  bench::exit_on_error(c.status());
  kv::KVCacheCoordinator& k = **c;
  std::mt19937 g(5);
  std::vector<int32_t> tokens(static_cast<size_t>(context));
  for (auto& t : tokens) t = static_cast<int32_t>(g() % 1000);
  const kv::SeqId id = k.add_sequence();
  bench::exit_on_error(k.find_cached_prefix(id, tokens).status());
  bench::exit_on_error(k.allocate_slots(id, context, chunk));
  Residency r;
  auto held = [&](int32_t grp) { return static_cast<int64_t>(k.manager(id, grp).held_blocks()); };
  r.admit.assign(static_cast<size_t>(k.num_groups()), 0);
  r.decode.assign(r.admit.size(), 0);
  for (int64_t p = 0; p < context; p += chunk) {
    const int64_t n = std::min(chunk, context - p);
    bench::exit_on_error(k.allocate_slots(id, p + n));  // the scheduler's grow
    for (int32_t grp = 0; grp < k.num_groups(); ++grp)
      r.admit[grp] = std::max(r.admit[grp], held(grp));
    bench::exit_on_error(k.record_tokens(
        id, std::span(tokens).subspan(static_cast<size_t>(p), static_cast<size_t>(n))));
  }
  for (int i = 0; i < decode; ++i) {
    // The step feeding token i of the completion (the first sampled token is fed
    // at position `context`).
    const int32_t tok = static_cast<int32_t>(g() % 1000);
    int64_t sum = 0;
    for (int32_t grp = 0; grp < k.num_groups(); ++grp) {
      r.decode[grp] = std::max(r.decode[grp], held(grp));
      sum += held(grp);
    }
    r.replay_decode_max = std::max(r.replay_decode_max, sum);
    if (i + 1 == decode) break;
    bench::exit_on_error(k.allocate_slots(id, k.num_tokens(id) + 1));
    bench::exit_on_error(k.record_tokens(id, std::span(&tok, 1)));
  }
  return r;
}

int64_t engine_decode_held(const std::shared_ptr<model::Model>& m, int64_t context, int decode) {
  auto e = paged_engine(m);
  std::mt19937 g(5);
  engine::GenerateRequest r;
  r.prompt = bench::random_tokens(g, static_cast<size_t>(context), m->config().vocab_size);
  r.sampling.max_tokens = decode;
  r.ignore_eos = true;
  int64_t most = 0;
  engine::Engine* ep = e.get();
  r.on_token = [&](int32_t) { most = std::max<int64_t>(most, ep->held_blocks()); };
  auto h = e->submit(r);
  bench::exit_on_error(h.status());
  e->run_until_idle();
  bench::wait_ok(*h);
  return most;
}

}  // namespace

int main(int argc, char** argv) {
  cli::ArgParser flags("",
                       "Gemma through the cache-group path: prefill and decode tokens/s against "
                       "qwen3 of the same size, and sliding-window residency at a long context.",
                       "bench_gemma");
  flags.add_option("prefill", "N", "prompt tokens of the prefill run", "1024");
  flags.add_option("rows", "N", "requests of 32-token prompts in the decode run", "4");
  flags.add_option("decode", "N", "tokens each decode request (and the residency one) generates",
                   "64");
  flags.add_option("context", "N", "prompt tokens of the residency request", "4096");
  flags.add_option("reps", "N", "repetitions of the throughput runs; the best is kept", "3");
  if (auto rc = flags.parse_or_exit_code(argc, argv)) return *rc;
  const int prefill = static_cast<int>(bench::int_flag(flags, "prefill", 1));
  const int rows = static_cast<int>(bench::int_flag(flags, "rows", 1));
  const int decode = static_cast<int>(bench::int_flag(flags, "decode", 1));
  const int64_t context = bench::int_flag(flags, "context", 1);
  const int reps = static_cast<int>(bench::int_flag(flags, "reps", 1));
  std::printf(
      "bench_gemma: load average %s; PAGEDKV_CPU_THREADS=%s\n", bench::load_average().c_str(),
      std::getenv("PAGEDKV_CPU_THREADS") ? std::getenv("PAGEDKV_CPU_THREADS") : "(default)");
  std::printf(
      "throughput (process CPU time, best of %d): prefill %d tokens; decode %d rows x %d "
      "tokens\n",
      reps, prefill, rows, decode);
  std::printf("%-12s %6s %14s %8s %14s %8s\n", "family", "path", "prefill tok/s", "vs qwen3",
              "decode tok/s", "vs qwen3");
  Throughput base[2];
  for (const std::string family : {"qwen3", "gemma3_text", "gemma4_text"}) {
    const auto m = small_model(family);
    for (int paged = 1; paged >= 0; --paged) {
      const Throughput t = measure_throughput(m, paged == 1, prefill, rows, decode, reps);
      if (family == "qwen3") base[paged] = t;
      std::printf("%-12s %6s %14.0f %7.2fx %14.1f %7.2fx\n", family.c_str(),
                  paged ? "paged" : "flat", t.prefill_tps, t.prefill_tps / base[paged].prefill_tps,
                  t.decode_tps, t.decode_tps / base[paged].decode_tps);
    }
  }

  std::printf("\nresidency: one request, %lld prompt tokens + %d decoded; blocks of 16 tokens\n",
              static_cast<long long>(context), decode);
  // The baseline: qwen3 of the same shape pages every layer's K/V at full context.
  const auto qwen = small_model("qwen3");
  const int64_t qwen_blocks = engine_decode_held(qwen, context, decode);
  const int64_t qwen_layers = qwen->kv_geometry().num_layers;
  std::printf("%-12s all %lld layers full attention: %lld blocks per layer while decoding\n",
              "qwen3", static_cast<long long>(qwen_layers), static_cast<long long>(qwen_blocks));
  for (const std::string family : {"gemma3_text", "gemma4_text"}) {
    const auto m = small_model(family);
    const kv::KVCacheSpec spec = engine::CoordinatorKV::spec_for(m->kv_geometry());
    Residency r = replay(spec, context, decode, 2048);
    r.engine_decode_max = engine_decode_held(m, context, decode);
    int32_t full = -1, sliding = -1;
    for (int32_t g = 0; g < static_cast<int32_t>(spec.groups.size()); ++g) {
      if (spec.groups[g].kind == kv::CacheGroupKind::kFullAttention) full = g;
      if (spec.groups[g].kind == kv::CacheGroupKind::kSlidingWindow) sliding = g;
    }
    // KV bytes per request: blocks × physical layers per group, against every
    // KV-owning layer holding the full context.
    int64_t layer_blocks = 0, all_full = 0;
    for (int32_t g = 0; g < static_cast<int32_t>(spec.groups.size()); ++g) {
      layer_blocks += r.decode[g] * spec.physical_layers(g);
      all_full += r.decode[full] * spec.physical_layers(g);
    }
    std::printf(
        "%-12s window %d: full group %lld blocks (prefill peak %lld), sliding group %lld blocks "
        "while decoding (prefill peak %lld); sliding/full %.3f; KV bytes vs its layers all full "
        "%.3f, vs "
        "qwen3 %.3f (KV layers: %d full, %d sliding); engine held %lld = replay %lld%s\n",
        family.c_str(), spec.groups[sliding].sliding_window, static_cast<long long>(r.decode[full]),
        static_cast<long long>(r.admit[full]), static_cast<long long>(r.decode[sliding]),
        static_cast<long long>(r.admit[sliding]),
        static_cast<double>(r.decode[sliding]) / static_cast<double>(r.decode[full]),
        static_cast<double>(layer_blocks) / static_cast<double>(all_full),
        static_cast<double>(layer_blocks) / static_cast<double>(qwen_blocks * qwen_layers),
        spec.physical_layers(full), spec.physical_layers(sliding),
        static_cast<long long>(r.engine_decode_max), static_cast<long long>(r.replay_decode_max),
        r.engine_decode_max == r.replay_decode_max ? "" : "  (MISMATCH)");
  }
  return 0;
}
