// Prefill and decode throughput of every hybrid family (issue #15) against
// qwen3 on the same preset, in the same run: each family's random `make-model
// --preset P` checkpoint (seed 1) runs through the Engine (paged path, step()
// on this thread), one request of --prompt tokens generating --decode + 1
// tokens. Prefill: submit to its first token (one step: the whole prompt's
// forward); decode: its first token to its last (token_ms), one-token steps at
// a context of about --prompt tokens. The families are interleaved in
// every rep and the best of --reps is kept, so a neighbour's burst on a shared
// machine hits every family alike; each line's ratio is against qwen3 in the
// same run. Prints the machine's load average with the figures, and each
// family's pool bytes per token (only attention layers hold K/V).
// Usage: bench_hybrid_families [--preset small] [--prompt 512] [--decode 64]
//                              [--reps 3] [--families qwen3,lfm2,...]

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "bench_engine.h"
#include "bench_flags.h"
#include "bench_machine.h"
#include "bench_model.h"
#include "engine/kv_cache_factory.h"
#include "exit_on_error.h"
#include "model/model.h"
#include "pagedkv/engine.h"

using namespace pagedkv;

namespace {

struct Family {
  std::string name;
  std::shared_ptr<model::Model> model;
  double prefill_ms = 1e30;  // best of the reps
  double decode_ms = 1e30;
};

}  // namespace

int main(int argc, char** argv) {
  cli::ArgParser flags("",
                       "Prefill and decode throughput of every hybrid family against qwen3 on "
                       "the same make-model preset, in the same run.",
                       "bench_hybrid_families");
  flags.add_option("preset", "NAME", "make-model preset of every family", "small");
  flags.add_option("prompt", "N", "prompt tokens of each request", "512");
  flags.add_option("decode", "N", "tokens decoded after the first", "64");
  flags.add_option("reps", "N", "repetitions; the best is kept", "3");
  flags.add_option("families", "LIST", "comma-separated families, qwen3 (the baseline) first",
                   "qwen3,lfm2,lfm2_moe,qwen3_next,qwen3_5_text,qwen3_5_moe_text,nemotron_h");
  if (auto rc = flags.parse_or_exit_code(argc, argv)) return *rc;
  const int prompt = static_cast<int>(bench::int_flag(flags, "prompt", 1));
  const int decode = static_cast<int>(bench::int_flag(flags, "decode", 1));
  const int reps = static_cast<int>(bench::int_flag(flags, "reps", 1));
  const std::string preset = flags.get("preset");
  const std::string families = flags.get("families");
  std::vector<Family> fs;
  std::stringstream list(families);
  for (std::string f; std::getline(list, f, ',');)
    fs.push_back({f, bench::load_throwaway_model(f, preset)});
  if (fs.empty() || fs[0].name != "qwen3") {
    std::fprintf(stderr, "error: --families must start with qwen3 (the baseline)\n");
    return 1;
  }
  const std::string load_before = bench::load_average();
  for (int rep = 0; rep < reps; ++rep) {
    for (Family& f : fs) {
      std::mt19937 g(static_cast<uint32_t>(7 + rep));
      const int32_t vocab = f.model->config().vocab_size;
      engine::EngineOptions o;
      o.use_block_paged_cache = true;
      auto e = bench::create_engine(f.model, o);
      // One request: the whole prompt in one step (budget 2048) to its first
      // token, then `decode` one-token steps at a context of ~prompt tokens.
      const std::vector<int32_t> p = bench::random_tokens(g, static_cast<size_t>(prompt), vocab);
      auto h = bench::submit_fixed(*e, p, decode + 1);
      e->run_until_idle();
      const engine::RequestResult& r = bench::wait_ok(h);
      f.prefill_ms = std::min(f.prefill_ms, r.token_ms.front());
      f.decode_ms = std::min(f.decode_ms, r.token_ms.back() - r.token_ms.front());
    }
  }
  std::printf(
      "bench_hybrid_families preset=%s prompt=%d decode=%d reps=%d (best of reps, wall, "
      "paged, one request)\nload average before: %s, after: %s\n",
      preset.c_str(), prompt, decode, reps, load_before.c_str(), bench::load_average().c_str());
  std::printf("%-18s %14s %8s %14s %8s %12s\n", "family", "prefill tok/s", "vs qwen3",
              "decode tok/s", "vs qwen3", "KV B/token");
  const double base_p = prompt / fs[0].prefill_ms, base_d = decode / fs[0].decode_ms;
  for (const Family& f : fs) {
    const double p = prompt / f.prefill_ms, d = decode / f.decode_ms;
    // Pool bytes per token: K + V of the layers that own K/V (kv_cache_factory.h).
    const kv::KVGeometry pg = engine::pool_geometry(f.model->kv_geometry());
    std::printf("%-18s %14.1f %7.2fx %14.1f %7.2fx %12zu\n", f.name.c_str(), p * 1e3, p / base_p,
                d * 1e3, d / base_d, pg.bytes_per_block() / static_cast<size_t>(pg.block_size));
  }
  return 0;
}
