// The device-resident qwen3 forward end to end (issue 12's speed table): on the
// qwen3-0.6b-shape bf16 checkpoint (make_random_model, cached like every bench
// model), through the Engine as every front end drives it:
//   - prefill of one 512-token prompt (one step);
//   - aggregate decode tok/s at 1, 8, 32 and 64 concurrent requests: a 512-token
//     prefix is computed once (prefix cache), then n requests of that prefix + 16
//     own tokens are submitted together; only the steps with n decode rows and no
//     prefill row are timed (they include the scheduler, the logits copy to the
//     host and greedy sampling);
// each printed beside llama.cpp's figures on the same GPU (issue 12: 641 / 3,199 /
// 6,847 / 9,911 tok/s) as a ratio. bf16 KV runs one configuration of the step
// knobs after another in one run (eager + host sampling, then graphs, device greedy,
// fused GEMMs, fused norms, programmatic dependent launch: PAGEDKV_CUDA_GRAPHS /
// _DEVICE_SAMPLING / _FUSED / _FUSED_NORMS, set_programmatic_launch) and prints a table of
// them last; f32 KV (PAGEDKV_BENCH_F32=1) runs the full configuration only;
// PAGEDKV_BENCH_FIRST_CONFIG=i starts at configuration i (0 eager … 5 programmatic
// launch), e.g. 4 for a short PDL off / on A/B; PAGEDKV_BENCH_REQUESTS=64 (a
// comma list of 1, 8, 32, 64) runs only those request counts (e.g. a profiler
// run of the 64-row step: bench/cuda/profile_decode_on_device.sh);
// PAGEDKV_BENCH_DECODE_STEPS=n runs n decode steps a count in the main table (default
// 32, 64 at one request; more amortize a bucket's capture over the timed window; the
// --seeded-moe / --moe tables keep their own); before each count's timed run an untimed
// one of 4 decode steps at the same count warms what the count first uses (its bucket's
// graph capture, kernels loaded on first launch, the GPU's clocks) —
// PAGEDKV_BENCH_WARMUP=0 skips it (the figures before 2026-12-07's last session, when a
// process that ran 64 requests alone read 5–15% below one that ran 1, 8 and 32 first,
// docs/performance.md). Each count
// also prints its step time split into the CUDA model's host spans
// (CudaModelStats: before the upload, the launch call, launch to results, after).
// Usage: bench_cuda_model [PRESET]   (default qwen3-0.6b-shape); with
// PAGEDKV_CUDA_PROFILE=1 it prints where a decode step's time goes instead.
// bench_cuda_model --seeded-moe: two before/after tables in one run instead —
// a seeded workload (temperature 0.8, top-k 40, top-p 0.95) with the logits rows
// copied and sampled on the host (PAGEDKV_CUDA_DEVICE_SAMPLING=0) vs the best
// entries on the device; and qwen3_moe of the same shape (8 experts, top 2)
// eager (PAGEDKV_CUDA_GRAPHS=0: one host sync per MoE layer) vs graphs.
// bench_cuda_model --moe: that qwen3_moe table for more experts too — 8 experts,
// top 2 (28 layers); 64, top 8 (8 layers); 128, top 8 (4 layers: Qwen3-30B-A3B's
// routing) — eager vs graphs, whose experts run grouped (one launch for every chosen
// expert's gate/up and one for the down projections, rows listed on the device).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "backend/cuda/launch.h"
#include "bench_engine.h"
#include "bench_model.h"
#include "model/cuda/cuda_model.h"
#include "model/make_model.h"
#include "pagedkv/engine.h"
#include "util/knobs.h"

using namespace pagedkv;
using Clock = std::chrono::steady_clock;

namespace {

bool g_seeded = false;  // --seeded-moe: decode requests sample with a seed

// PAGEDKV_BENCH_REQUESTS (a comma list): whether to run n concurrent requests.
bool requested(int n) {
  const char* env = std::getenv("PAGEDKV_BENCH_REQUESTS");
  if (env == nullptr || *env == '\0') return true;
  const std::string list = std::string(",") + env + ",";
  return list.find("," + std::to_string(n) + ",") != std::string::npos;
}

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

std::unique_ptr<engine::Engine> engine_for(const std::shared_ptr<model::Model>& m, int64_t chunk) {
  engine::EngineOptions o;
  o.paged_cache_memory_mb = 8192;
  o.paged_cache_initial_memory_mb = 8192;  // no pool growth while timed
  o.max_num_batched_tokens = chunk;
  o.max_num_seqs = 128;
  return bench::create_engine(m, o);
}

double prefill(const std::shared_ptr<model::Model>& m, size_t len) {
  std::mt19937 g(7);
  auto p = bench::random_tokens(g, len, m->config().vocab_size);
  auto e = engine_for(m, static_cast<int64_t>(len));
  auto h = bench::submit_fixed(*e, p, 1);
  auto t = Clock::now();
  while (!h->done() && e->stats().completion_tokens == 0) e->step();
  const double s = secs(t);
  e->run_until_idle();
  bench::wait_ok(h);
  return static_cast<double>(len) / s;
}

// PAGEDKV_BENCH_DECODE_STEPS: how many decode steps a request count runs (else
// `fallback`); more steps amortize one-time costs (graph capture, buffers first
// touched) over the timed window. An unparseable value is ignored with a warning
// (util/knobs.h), as is one outside 1 … 1,000,000.
int decode_steps(int fallback) {
  const std::optional<int64_t> v = env_i64("PAGEDKV_BENCH_DECODE_STEPS");
  return v && *v > 0 && *v <= 1'000'000 ? static_cast<int>(*v) : fallback;
}

// quiet: no step-time line (a warm-up run).
double batched_decode(const std::shared_ptr<model::Model>& m, int n, size_t prefix_len, int steps,
                      bool quiet = false) {
  const int32_t V = m->config().vocab_size;
  auto e = engine_for(m, 2048);
  std::mt19937 g(42);
  auto prefix = bench::random_tokens(g, prefix_len, V);
  bench::wait_ok([&] {
    auto h = bench::submit_fixed(*e, prefix, 1);
    e->run_until_idle();
    return h;
  }());
  std::vector<engine::RequestHandlePtr> hs;
  for (int i = 0; i < n; ++i) {
    std::vector<int32_t> p = prefix;
    std::mt19937 gi(1000 + i);
    for (int j = 0; j < 16; ++j) p.push_back(static_cast<int32_t>(gi() % V));
    if (!g_seeded) {
      hs.push_back(bench::submit_fixed(*e, p, steps + 1));
      continue;
    }
    engine::GenerateRequest r;
    r.prompt = p;
    r.sampling.max_tokens = steps + 1;
    r.sampling.temperature = 0.8;
    r.sampling.top_k = 40;
    r.sampling.top_p = 0.95;
    r.sampling.seed = 1000u + static_cast<uint64_t>(i);
    r.ignore_eos = true;
    auto h = e->submit(std::move(r));
    if (!h.ok()) std::exit(1);
    hs.push_back(*h);
  }
  double sec = 0, fwd_ms = 0;
  int64_t tokens = 0, steps_timed = 0;
  // The CUDA model's host spans over the timed steps (zero for another model).
  model::cuda::CudaModelStats spans;
  auto add_spans = [&spans](const model::cuda::CudaModelStats& a,
                            const model::cuda::CudaModelStats& b) {
    spans.before_upload_ms += b.before_upload_ms - a.before_upload_ms;
    spans.upload_to_launched_ms += b.upload_to_launched_ms - a.upload_to_launched_ms;
    spans.launch_to_results_ms += b.launch_to_results_ms - a.launch_to_results_ms;
    spans.after_results_ms += b.after_results_ms - a.after_results_ms;
  };
  for (;;) {
    const bool pure = e->stats().running == n && e->stats().waiting == 0;
    const double f0 = e->stats().forward_ms;
    const model::cuda::CudaModelStats s0 = model::cuda::cuda_model_stats(*m);
    auto t = Clock::now();
    engine::StepReport rep = e->step();
    const double dt = secs(t);
    if (rep.idle()) break;
    if (pure && rep.prefill_rows == 0 && rep.decode_rows == n) {
      add_spans(s0, model::cuda::cuda_model_stats(*m));
      sec += dt;
      fwd_ms += e->stats().forward_ms - f0;
      tokens += rep.decode_rows;
      ++steps_timed;
    }
  }
  for (auto& h : hs) bench::wait_ok(h);
  if (steps_timed > 0 && !quiet) {
    const double k = 1e3 / static_cast<double>(steps_timed);  // ms in all → µs a step
    std::printf(
        "  (%d rows: %.1f us per step, of which %.1f us in Model::forward: %.1f before the "
        "upload, %.1f from there to the launch, %.1f from the launch to the results, %.1f "
        "after)\n",
        n, 1e6 * sec / static_cast<double>(steps_timed), fwd_ms * k, spans.before_upload_ms * k,
        spans.upload_to_launched_ms * k, spans.launch_to_results_ms * k,
        spans.after_results_ms * k);
  }
  return sec > 0 ? static_cast<double>(tokens) / sec : 0;
}

}  // namespace

// PAGEDKV_CUDA_PROFILE=1 (graphs off, as profiling turns them off): bf16 KV only, a fresh model per
// request count, so the phase profile each model prints when destroyed is that count's (its decode
// steps dominate; the two prefill steps are included).
int profile_runs(const std::string& dir) {
  for (int n : {1, 8, 32, 64}) {
    model::LoadOptions lo;
    lo.kv_dtype = model::KVDType::kBF16;
    auto loaded = model::cuda::load_cuda_model(dir, lo);
    if (!loaded.ok()) return 1;
    std::shared_ptr<model::Model> m(std::move(*loaded));
    std::fprintf(stderr, "profile, %d requests: ", n);
    batched_decode(m, n, 512, 32);
  }
  return 0;
}

// One configuration of the model's step knobs (read at load): the eager path
// with the logits copied to the host and sampled there (the state before issue
// 12's graphs), graphs only, and graphs with greedy tokens picked on the device.
struct Config {
  const char* name;
  const char* graphs;
  const char* device_sampling;
  const char* fused;
  const char* fused_norms;
  bool pdl;  // programmatic dependent launch (backend/cuda/launch.cuh)
};
constexpr int kConfigs = 6;

// A qwen3_moe checkpoint of the 0.6B shape with `experts` experts, `top_k` a token
// and `layers` layers (bf16, seed 1), written once into the bench model cache; ""
// when writing it failed (the error printed).
std::string moe_model_dir(int32_t experts, int32_t top_k, int32_t layers) {
  const std::string dir =
      bench::bench_model_cache_dir() +
      (experts == 8 && top_k == 2 && layers == 28
           ? std::string("/qwen3_moe-qwen3-0.6b-shape-bf16-seed1")  // the preset's own
           : "/qwen3_moe-qwen3-0.6b-shape-e" + std::to_string(experts) + "k" +
                 std::to_string(top_k) + "l" + std::to_string(layers) + "-bf16-seed1");
  if (std::filesystem::exists(dir + "/model.safetensors")) return dir;
  model::MakeModelOptions o;
  o.family = "qwen3_moe";
  o.preset = "qwen3-0.6b-shape";
  o.dtype = model::DType::kBF16;
  o.seed = 1;
  o.num_experts = experts;
  o.experts_per_tok = top_k;
  o.num_layers = layers;
  o.out_dir = dir;
  std::fprintf(stderr, "writing %s\n", dir.c_str());
  Status st = model::make_random_model(o);
  if (!st.ok()) {
    std::fprintf(stderr, "error: %s\n", st.to_string().c_str());
    return "";
  }
  return dir;
}

// One before/after table: a knob's two values on one checkpoint, decode at 1, 8
// and 64 requests.
struct BeforeAfter {
  std::string what;
  std::string dir;
  bool seeded;
  const char* knob;
  const char* before;
  const char* after;
};

int before_after_tables(const std::vector<BeforeAfter>& runs) {
  const int ns[] = {1, 8, 64};
  for (const BeforeAfter& run : runs) {
    if (run.dir.empty()) return 1;
    g_seeded = run.seeded;
    double tps[2][3] = {};
    for (int c = 0; c < 2; ++c) {
      setenv(run.knob, c == 0 ? run.before : run.after, 1);
      model::LoadOptions lo;
      lo.kv_dtype = model::KVDType::kBF16;
      auto loaded = model::cuda::load_cuda_model(run.dir, lo);
      if (!loaded.ok()) {
        std::fprintf(stderr, "error: %s\n", loaded.status().to_string().c_str());
        return 1;
      }
      std::shared_ptr<model::Model> m(std::move(*loaded));
      std::printf("== %s: %s=%s\n", run.what.c_str(), run.knob, c == 0 ? run.before : run.after);
      for (size_t i = 0; i < 3; ++i) {
        tps[c][i] = batched_decode(m, ns[i], 512, ns[i] == 1 ? 48 : 24);
        std::printf("decode, %2d requests  %9.1f tok/s\n", ns[i], tps[c][i]);
        std::fflush(stdout);
      }
      const model::cuda::CudaModelStats st = model::cuda::cuda_model_stats(*m);
      std::printf(
          "  graphs captured %lld, replayed %lld; device greedy rows %lld; seeded rows "
          "from best entries %lld, whole-row fallbacks %lld\n",
          static_cast<long long>(st.graph_captures), static_cast<long long>(st.graph_replays),
          static_cast<long long>(st.device_greedy_rows),
          static_cast<long long>(st.device_draw_rows),
          static_cast<long long>(st.device_draw_fallbacks));
    }
    unsetenv(run.knob);
    std::printf("\n%s\n| requests | before tok/s | after tok/s | ratio |\n", run.what.c_str());
    for (size_t i = 0; i < 3; ++i)
      std::printf("| %d | %.0f | %.0f | %.2fx |\n", ns[i], tps[0][i], tps[1][i],
                  tps[0][i] > 0 ? tps[1][i] / tps[0][i] : 0.0);
    std::printf("\n");
  }
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "--seeded-moe" || mode == "--moe") {
    std::vector<BeforeAfter> runs;
    if (mode == "--seeded-moe")
      runs.push_back(
          {"seeded (T 0.8, top-k 40, top-p 0.95), qwen3-0.6b-shape: host sampling -> "
           "device best entries",
           bench::random_model_dir("qwen3-0.6b-shape", model::DType::kBF16), true,
           "PAGEDKV_CUDA_DEVICE_SAMPLING", "0", "1"});
    const int32_t moe_shapes[][3] = {{8, 2, 28}, {64, 8, 8}, {128, 8, 4}};
    for (const auto& [experts, top_k, layers] : moe_shapes) {
      if (mode == "--seeded-moe" && experts != 8) break;
      runs.push_back({"qwen3_moe 0.6b shape (" + std::to_string(experts) + " experts, top " +
                          std::to_string(top_k) + ", " + std::to_string(layers) +
                          " layers), greedy: eager -> graphs",
                      moe_model_dir(experts, top_k, layers), false, "PAGEDKV_CUDA_GRAPHS", "0",
                      "1"});
    }
    return before_after_tables(runs);
  }
  const std::string preset = argc > 1 ? argv[1] : "qwen3-0.6b-shape";
  const std::string dir = bench::random_model_dir(preset, model::DType::kBF16);
  if (const char* p = std::getenv("PAGEDKV_CUDA_PROFILE"); p != nullptr && *p == '1')
    return profile_runs(dir);
  const int ns[] = {1, 8, 32, 64};
  const double llama[] = {641, 3199, 6847, 9911};
  const Config configs[kConfigs] = {
      {"eager, host sampling", "0", "0", "0", "0", false},
      {"graphs, host sampling", "1", "0", "0", "0", false},
      {"graphs + device greedy", "1", "1", "0", "0", false},
      {"+ fused GEMMs", "1", "1", "1", "0", false},
      {"+ fused norm/RoPE/KV write, add+norm", "1", "1", "1", "1", false},
      {"+ programmatic launch (default)", "1", "1", "1", "1", true}};
  double tps[kConfigs][4] = {};
  const char* f32_env = std::getenv("PAGEDKV_BENCH_F32");
  const bool f32 = f32_env != nullptr && *f32_env == '1';
  // PAGEDKV_BENCH_FIRST_CONFIG=i: skip the configurations before i (a shorter A/B
  // of the last ones; the ratio is then to configuration i).
  const char* first_env = std::getenv("PAGEDKV_BENCH_FIRST_CONFIG");
  const int first = first_env != nullptr ? std::clamp(std::atoi(first_env), 0, kConfigs - 1) : 0;
  for (model::KVDType kv : {model::KVDType::kBF16, model::KVDType::kF32}) {
    const char* kvn = kv == model::KVDType::kBF16 ? "bf16" : "f32";
    for (int c = 0; c < kConfigs; ++c) {
      // f32 KV (PAGEDKV_BENCH_F32=1): only the full configuration.
      if (kv == model::KVDType::kF32 && (c != kConfigs - 1 || !f32)) continue;
      if (c < first) continue;
      setenv("PAGEDKV_CUDA_GRAPHS", configs[c].graphs, 1);
      setenv("PAGEDKV_CUDA_DEVICE_SAMPLING", configs[c].device_sampling, 1);
      setenv("PAGEDKV_CUDA_FUSED", configs[c].fused, 1);
      setenv("PAGEDKV_CUDA_FUSED_NORMS", configs[c].fused_norms, 1);
      backend::cuda::set_programmatic_launch(configs[c].pdl);
      model::LoadOptions lo;
      lo.kv_dtype = kv;
      auto t = Clock::now();
      auto loaded = model::cuda::load_cuda_model(dir, lo);
      if (!loaded.ok()) {
        std::fprintf(stderr, "error: %s\n", loaded.status().to_string().c_str());
        return 1;
      }
      std::shared_ptr<model::Model> m(std::move(*loaded));
      std::printf("== %s bf16 weights, %s KV on cuda:0, %s (load %.1f s)\n", preset.c_str(), kvn,
                  configs[c].name, secs(t));
      std::printf("prefill, 512-token prompt (one step)   %9.1f tok/s\n", prefill(m, 512));
      double one = 0;
      for (size_t i = 0; i < 4; ++i) {
        if (!requested(ns[i])) continue;
        if (env_i64("PAGEDKV_BENCH_WARMUP").value_or(1) != 0)
          (void)batched_decode(m, ns[i], 512, 4, true);
        const double r = batched_decode(m, ns[i], 512, decode_steps(ns[i] == 1 ? 64 : 32));
        if (i == 0) one = r;
        if (kv == model::KVDType::kBF16) tps[c][i] = r;
        std::printf("decode, %2d request%s  %9.1f tok/s   llama.cpp %6.0f  ratio %.2fx", ns[i],
                    ns[i] == 1 ? " " : "s", r, llama[i], r / llama[i]);
        if (one > 0) std::printf("   (x%.2f of 1 request)", r / one);  // 1 may be skipped
        std::printf("\n");
        std::fflush(stdout);
      }
      const model::cuda::CudaModelStats st = model::cuda::cuda_model_stats(*m);
      std::printf("  graphs captured %lld, replayed %lld; device greedy rows %lld\n",
                  static_cast<long long>(st.graph_captures),
                  static_cast<long long>(st.graph_replays),
                  static_cast<long long>(st.device_greedy_rows));
    }
  }
  std::printf("\nbf16 KV decode tok/s, same run (ratio = last column / the first)\n| requests |");
  for (int c = first; c < kConfigs; ++c) std::printf(" %s |", configs[c].name);
  std::printf(" ratio | llama.cpp |\n");
  for (size_t i = 0; i < 4; ++i) {
    std::printf("| %d |", ns[i]);
    for (int c = first; c < kConfigs; ++c) std::printf(" %.0f |", tps[c][i]);
    std::printf(" %.2fx | %.0f |\n", tps[first][i] > 0 ? tps[kConfigs - 1][i] / tps[first][i] : 0.0,
                llama[i]);
  }
  return 0;
}
