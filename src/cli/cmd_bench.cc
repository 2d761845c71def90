// `pagedkv bench`: workload benchmarks of the continuous-batching engine.
//
// Built-in workloads (deterministic from --seed, so every run of a sweep sees
// the same requests):
//   chat       shared-system-prompt chat: 4 system prompts, each request one of
//              them + a random user message
//   agent      a multi-turn agent per client: the conversation grows every turn
//              with the previous reply and a tool-result frame; each agent is an
//              owner (prompt_cache_key), so its next turn continues live
//   nosharing  the no-sharing baseline: unique random prompts of the chat lengths
// Clients are closed-loop: --concurrency clients each submit a request, wait
// for it to finish and submit the next. `--sharing off` gives every request its
// own cache_salt (and no owner), so nothing is shared across requests while the
// work stays identical.
//
// Reports throughput (completion tokens/s and all tokens/s; and completion tokens
// per CPU-second, which other processes on a shared machine cannot skew), TTFT p50/p95,
// inter-token latency p50/p95, prefix hit rate, cached tokens, prefill tokens/s and
// pure decode tokens/s (Model::forward time of the steps with prompt rows and of
// those with decode rows only: no sampling or scheduling in them), the step loop's
// time split into forward, host sampling and the rest, pool occupancy over time
// and preemptions; a progress bar on stderr when it is a terminal;
// --json prints one JSON document instead. A comma list for --concurrency or
// `--sharing both` runs a sweep and adds each run's throughput as a ratio to the
// first run.
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "backend/backend.h"
#include "cli/args.h"
#include "cli/command_registry.h"
#include "cli/device_option.h"
#include "cli/engine_flags.h"
#include "model/make_model.h"
#include "model/model.h"
#include "pagedkv/engine.h"

namespace pagedkv::cli {
namespace {

using Clock = std::chrono::steady_clock;
using engine::Engine;
using engine::EngineOptions;
using engine::GenerateRequest;
using engine::RequestResult;

struct BenchConfig {
  std::string workload = "chat";
  int concurrency = 1;
  int requests = 32;
  bool sharing = true;
  int system_tokens = 256;
  int user_min = 32, user_max = 96;
  int max_tokens = 32;
  // Every request's sampling (its seed and max_tokens set per request): seeded
  // temperature 0.8 unless the flags say otherwise (temperature 0: greedy).
  engine::SamplingParams sampling = [] {
    engine::SamplingParams sp;
    sp.temperature = 0.8;
    return sp;
  }();
  int frame_min = 48, frame_max = 128;  // agent tool-result frames
  uint64_t seed = 1;
  EngineOptions engine;
};

struct RunResult {
  BenchConfig cfg;
  double wall_s = 0;
  double cpu_s = 0;  // process CPU time (all threads) during the run
  int64_t requests = 0, prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  std::vector<double> ttft_ms, itl_ms;
  engine::EngineStats engine;  // the engine's counters at the end of the run
  int32_t peak_used = 0;
  std::vector<std::pair<double, int32_t>> occupancy;  // (seconds, used blocks)
  int errors = 0;
};

double process_cpu_s() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const double idx = p * static_cast<double>(v.size() - 1);
  const size_t lo = static_cast<size_t>(idx);
  const size_t hi = std::min(lo + 1, v.size() - 1);
  return v[lo] + (v[hi] - v[lo]) * (idx - static_cast<double>(lo));
}

std::vector<int32_t> random_ids(std::mt19937_64& rng, int n, int32_t vocab) {
  std::vector<int32_t> v(static_cast<size_t>(n));
  for (auto& t : v) t = std::uniform_int_distribution<int32_t>(0, vocab - 1)(rng);
  return v;
}

// Prompts of the chat / nosharing workloads (same lengths; nosharing's are unique).
std::vector<std::vector<int32_t>> single_turn_prompts(const BenchConfig& c, int32_t vocab) {
  std::mt19937_64 rng(c.seed);
  std::vector<std::vector<int32_t>> systems;
  for (int i = 0; i < 4; ++i) systems.push_back(random_ids(rng, c.system_tokens, vocab));
  std::vector<std::vector<int32_t>> out;
  for (int i = 0; i < c.requests; ++i) {
    const int user = std::uniform_int_distribution<int>(c.user_min, c.user_max)(rng);
    std::vector<int32_t> p = c.workload == "nosharing" ? random_ids(rng, c.system_tokens, vocab)
                                                       : systems[static_cast<size_t>(i % 4)];
    auto u = random_ids(rng, user, vocab);
    p.insert(p.end(), u.begin(), u.end());
    out.push_back(std::move(p));
  }
  return out;
}

class Progress {
 public:
  Progress(int total, bool enabled) : total_(total), enabled_(enabled) {}
  void tick() {
    const int d = ++done_;
    if (!enabled_) return;
    std::lock_guard<std::mutex> lk(mu_);
    const int width = 30;
    const int fill = total_ > 0 ? d * width / total_ : width;
    std::fprintf(stderr, "\r[%s%s] %d/%d requests",
                 std::string(static_cast<size_t>(fill), '#').c_str(),
                 std::string(static_cast<size_t>(width - fill), ' ').c_str(), d, total_);
    if (d == total_) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  }

 private:
  int total_;
  bool enabled_;
  std::atomic<int> done_{0};
  std::mutex mu_;
};

StatusOr<RunResult> run_workload(std::shared_ptr<model::Model> model, const BenchConfig& c,
                                 bool progress_bar) {
  PKV_ASSIGN_OR_RETURN(std::unique_ptr<Engine> eng, Engine::create(model, c.engine));
  const int32_t vocab = model->config().vocab_size;
  RunResult rr;
  rr.cfg = c;
  std::mutex mu;
  std::vector<RequestResult> results;
  std::atomic<int> next{0};
  std::atomic<uint64_t> salt_counter{0};
  const bool agent = c.workload == "agent";
  const int turns = agent ? std::max(1, c.requests / c.concurrency) : 0;
  const int total = agent ? turns * c.concurrency : c.requests;
  std::vector<std::vector<int32_t>> prompts;
  if (!agent) prompts = single_turn_prompts(c, vocab);
  Progress progress(total, progress_bar);
  Status client_error;

  auto make_request = [&](std::vector<int32_t> prompt, uint64_t seed, const std::string& owner) {
    GenerateRequest r;
    r.prompt = std::move(prompt);
    r.sampling = c.sampling;
    r.sampling.max_tokens = c.max_tokens;
    r.sampling.seed = seed;
    r.ignore_eos = true;
    if (c.sharing) {
      r.owner = owner;
    } else {
      r.cache_salt = "bench-private-" + std::to_string(salt_counter++);
    }
    return r;
  };
  auto record = [&](const RequestResult& res) {
    std::lock_guard<std::mutex> lk(mu);
    results.push_back(res);
    progress.tick();
  };
  auto fail = [&](const Status& s) {
    std::lock_guard<std::mutex> lk(mu);
    if (client_error.ok()) client_error = s;
  };

  eng->start();
  const auto t0 = Clock::now();
  const double cpu0 = process_cpu_s();
  std::atomic<bool> sampling{true};
  std::thread sampler([&] {
    while (sampling.load()) {
      const auto st = eng->stats();
      {
        std::lock_guard<std::mutex> lk(mu);
        rr.occupancy.emplace_back(std::chrono::duration<double>(Clock::now() - t0).count(),
                                  st.pool.used_blocks);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  std::vector<std::thread> clients;
  for (int ci = 0; ci < c.concurrency; ++ci) {
    clients.emplace_back([&, ci] {
      if (agent) {
        std::mt19937_64 rng(c.seed * 1000003 + static_cast<uint64_t>(ci));
        std::mt19937_64 sys_rng(c.seed);
        std::vector<int32_t> conv = random_ids(sys_rng, c.system_tokens, vocab);  // shared system
        auto task = random_ids(rng, c.user_max, vocab);
        conv.insert(conv.end(), task.begin(), task.end());
        for (int t = 0; t < turns; ++t) {
          auto h = eng->submit(make_request(conv, rng(), "agent-" + std::to_string(ci)));
          if (!h.ok()) return fail(h.status());
          const RequestResult& res = (*h)->wait();
          record(res);
          conv.insert(conv.end(), res.tokens.begin(), res.tokens.end());
          auto frame = random_ids(
              rng, std::uniform_int_distribution<int>(c.frame_min, c.frame_max)(rng), vocab);
          conv.insert(conv.end(), frame.begin(), frame.end());
        }
      } else {
        for (int i = next++; i < c.requests; i = next++) {
          auto h = eng->submit(
              make_request(prompts[static_cast<size_t>(i)], c.seed + static_cast<uint64_t>(i), ""));
          if (!h.ok()) return fail(h.status());
          record((*h)->wait());
        }
      }
    });
  }
  for (auto& t : clients) t.join();
  rr.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  rr.cpu_s = process_cpu_s() - cpu0;
  sampling = false;
  sampler.join();
  eng->stop();
  if (!client_error.ok()) return client_error;

  rr.engine = eng->stats();
  for (const auto& o : rr.occupancy) rr.peak_used = std::max(rr.peak_used, o.second);
  for (const RequestResult& r : results) {
    ++rr.requests;
    if (r.finish_reason == engine::FinishReason::kError) ++rr.errors;
    rr.prompt_tokens += r.usage.prompt_tokens;
    rr.cached_tokens += r.usage.cached_prompt_tokens;
    rr.completion_tokens += r.usage.completion_tokens;
    if (!r.tokens.empty()) rr.ttft_ms.push_back(r.timings.ttft_ms);
    for (size_t i = 1; i < r.token_ms.size(); ++i)
      rr.itl_ms.push_back(r.token_ms[i] - r.token_ms[i - 1]);
  }
  return rr;
}

// Prefill tokens/s: the prompt rows' tokens over the Model::forward time of the steps
// that carry them (decode rows riding along in those steps count as their time).
double prefill_tps(const RunResult& r) {
  return r.engine.prompt_forward_ms > 0
             ? 1e3 * static_cast<double>(r.engine.prompt_step_prompt_tokens) /
                   r.engine.prompt_forward_ms
             : 0.0;
}

// Pure decode tokens/s: the tokens of steps with decode rows only over their
// Model::forward time (no sampling, no scheduling, no prompt work).
double decode_tps(const RunResult& r) {
  return r.engine.decode_forward_ms > 0
             ? 1e3 * static_cast<double>(r.engine.decode_step_tokens) / r.engine.decode_forward_ms
             : 0.0;
}

nlohmann::ordered_json to_json(const RunResult& r, double baseline_tps, double baseline_cpu) {
  nlohmann::ordered_json j;
  j["workload"] = r.cfg.workload;
  j["concurrency"] = r.cfg.concurrency;
  j["temperature"] = r.cfg.sampling.temperature;
  j["top_k"] = r.cfg.sampling.top_k;
  j["top_p"] = r.cfg.sampling.top_p;
  j["min_p"] = r.cfg.sampling.min_p;
  j["sharing"] = r.cfg.sharing;
  j["requests"] = r.requests;
  j["errors"] = r.errors;
  j["wall_s"] = r.wall_s;
  const double tps = r.completion_tokens / r.wall_s;
  j["throughput_tokens_per_s"] = tps;
  j["throughput_ratio"] = baseline_tps > 0 ? tps / baseline_tps : 1.0;
  // Completion tokens per CPU-second: the engine's efficiency, robust to other
  // processes competing for the cores (wall-clock throughput is not).
  const double tpc = r.cpu_s > 0 ? r.completion_tokens / r.cpu_s : 0.0;
  j["cpu_s"] = r.cpu_s;
  j["tokens_per_cpu_s"] = tpc;
  j["cpu_efficiency_ratio"] = baseline_cpu > 0 ? tpc / baseline_cpu : 1.0;
  j["all_tokens_per_s"] = static_cast<double>(r.prompt_tokens + r.completion_tokens) / r.wall_s;
  j["prompt_tokens"] = r.prompt_tokens;
  j["cached_prompt_tokens"] = r.cached_tokens;
  j["prefix_hit_rate"] =
      r.prompt_tokens > 0 ? static_cast<double>(r.cached_tokens) / r.prompt_tokens : 0.0;
  j["completion_tokens"] = r.completion_tokens;
  j["forward_tokens"] = r.engine.forward_tokens;
  j["steps"] = r.engine.steps;
  j["forward_ms"] = r.engine.forward_ms;
  j["prefill_tokens_per_s"] = prefill_tps(r);
  j["prompt_steps"] = r.engine.prompt_steps;
  j["prompt_step_prompt_tokens"] = r.engine.prompt_step_prompt_tokens;
  j["prompt_forward_ms"] = r.engine.prompt_forward_ms;
  j["decode_tokens_per_s"] = decode_tps(r);
  j["decode_steps"] = r.engine.decode_steps;
  j["decode_step_tokens"] = r.engine.decode_step_tokens;
  j["decode_forward_ms"] = r.engine.decode_forward_ms;
  j["step_ms"] = r.engine.step_ms;
  j["sample_ms"] = r.engine.sample_ms;
  j["ttft_ms"] = {{"p50", percentile(r.ttft_ms, 0.5)}, {"p95", percentile(r.ttft_ms, 0.95)}};
  j["itl_ms"] = {{"p50", percentile(r.itl_ms, 0.5)}, {"p95", percentile(r.itl_ms, 0.95)}};
  j["preemptions"] = r.engine.preemptions;
  j["pool"] = {{"max_blocks", r.engine.pool.max_blocks},
               {"block_size", r.engine.pool.block_size},
               {"peak_used_blocks", r.peak_used}};
  nlohmann::ordered_json occ = nlohmann::ordered_json::array();
  for (const auto& [t, used] : r.occupancy) occ.push_back({t, used});
  j["pool_occupancy"] = occ;  // [seconds, used blocks] samples every 20 ms
  return j;
}

// Ten buckets of mean pool occupancy (percent of the max pool) over the run.
std::string occupancy_line(const RunResult& r) {
  if (r.occupancy.empty() || r.engine.pool.max_blocks <= 1) return "-";
  std::ostringstream out;
  const size_t n = r.occupancy.size();
  for (size_t b = 0; b < 10; ++b) {
    const size_t lo = b * n / 10, hi = std::max(lo + 1, (b + 1) * n / 10);
    double sum = 0;
    size_t cnt = 0;
    for (size_t i = lo; i < hi && i < n; ++i, ++cnt) sum += r.occupancy[i].second;
    const double pct =
        cnt ? 100.0 * sum / static_cast<double>(cnt) / (r.engine.pool.max_blocks - 1) : 0;
    out << (b ? " " : "") << static_cast<int>(pct + 0.5);
  }
  return out.str();
}

void print_text(const RunResult& r, double baseline_tps, double baseline_cpu) {
  const double tps = r.completion_tokens / r.wall_s;
  const double tpc = r.cpu_s > 0 ? r.completion_tokens / r.cpu_s : 0.0;
  std::printf(
      "workload=%s concurrency=%d sharing=%s requests=%lld errors=%d wall=%.2fs\n"
      "  throughput        %.1f completion tok/s (x%.2f vs first run), %.1f all tok/s\n"
      "  CPU efficiency    %.1f completion tok per CPU-second (x%.2f vs first run), %.1f CPU-s\n"
      "  TTFT              p50 %.1f ms  p95 %.1f ms\n"
      "  inter-token       p50 %.2f ms  p95 %.2f ms\n"
      "  prefix hit rate   %.1f%% (%lld of %lld prompt tokens cached)\n"
      "  steps             %llu (%llu tokens forwarded, %.0f ms in forward)\n"
      "  prefill           %.1f tok/s (%llu prompt tokens in %llu steps, %.0f ms in forward)\n"
      "  decode            %.1f tok/s (%llu steps of decode rows only, %.0f ms in forward)\n"
      "  step time         %.0f ms in steps: %.0f forward, %.0f host sampling, %.0f the rest\n"
      "  preemptions       %llu\n"
      "  pool occupancy    peak %d of %d blocks; %% over time: %s\n",
      r.cfg.workload.c_str(), r.cfg.concurrency, r.cfg.sharing ? "on" : "off",
      static_cast<long long>(r.requests), r.errors, r.wall_s, tps,
      baseline_tps > 0 ? tps / baseline_tps : 1.0,
      static_cast<double>(r.prompt_tokens + r.completion_tokens) / r.wall_s, tpc,
      baseline_cpu > 0 ? tpc / baseline_cpu : 1.0, r.cpu_s, percentile(r.ttft_ms, 0.5),
      percentile(r.ttft_ms, 0.95), percentile(r.itl_ms, 0.5), percentile(r.itl_ms, 0.95),
      r.prompt_tokens ? 100.0 * static_cast<double>(r.cached_tokens) / r.prompt_tokens : 0.0,
      static_cast<long long>(r.cached_tokens), static_cast<long long>(r.prompt_tokens),
      static_cast<unsigned long long>(r.engine.steps),
      static_cast<unsigned long long>(r.engine.forward_tokens), r.engine.forward_ms, prefill_tps(r),
      static_cast<unsigned long long>(r.engine.prompt_step_prompt_tokens),
      static_cast<unsigned long long>(r.engine.prompt_steps), r.engine.prompt_forward_ms,
      decode_tps(r), static_cast<unsigned long long>(r.engine.decode_steps),
      r.engine.decode_forward_ms, r.engine.step_ms, r.engine.forward_ms, r.engine.sample_ms,
      r.engine.step_ms - r.engine.forward_ms - r.engine.sample_ms,
      static_cast<unsigned long long>(r.engine.preemptions), r.peak_used,
      r.engine.pool.max_blocks - 1, occupancy_line(r).c_str());
}

StatusOr<std::vector<int>> parse_int_list(const std::string& s, const std::string& flag) {
  std::vector<int> out;
  std::stringstream ss(s);
  std::string part;
  while (std::getline(ss, part, ',')) {
    char* end = nullptr;
    const long v = std::strtol(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || v < 1 || v > 4096)
      return invalid_argument(flag + ": '" + part + "' is not a positive integer");
    out.push_back(static_cast<int>(v));
  }
  if (out.empty()) return invalid_argument(flag + " is empty");
  return out;
}

int bench_main(int argc, char** argv) {
  ArgParser p("bench",
              "Workload benchmark of the continuous-batching engine: throughput, TTFT, "
              "inter-token latency, prefix hit rate, prefill and pure decode tok/s (model "
              "forward time only), pool occupancy, preemptions.");
  p.add_option("model", "DIR",
               "checkpoint directory (default: a random `make-model --preset small` qwen3 made "
               "in a temp directory)");
  p.add_option("preset", "NAME", "make-model preset when --model is not given", "small");
  p.add_option("layers", "N", "make-model: override the preset's layer count (0 = preset)", "0");
  p.add_option("vocab", "N", "make-model: override the preset's vocabulary size (0 = preset)", "0");
  p.add_option("workload", "NAME",
               "chat | agent | nosharing (unique prompts; always runs as --sharing off)", "chat");
  p.add_option("concurrency", "N[,N...]",
               "closed-loop clients; a comma list runs a sweep (e.g. 1,2,4,8,16)", "4");
  p.add_option("requests", "N", "requests per run (agent: split into turns per client)", "32");
  p.add_option("sharing", "on|off|both",
               "off: every request gets its own cache_salt and no owner (nothing shared); both: a "
               "run per --concurrency value with sharing, then the same runs without",
               "on");
  p.add_option("system-tokens", "N", "system prompt length (chat, agent; nosharing prefix)", "256");
  p.add_option("max-tokens", "N", "tokens generated per request", "32");
  p.add_option("temperature", "T",
               "sampling temperature of every request, each with its own seed (0 = greedy)", "0.8");
  p.add_option("top-k", "K", "keep each row's K most likely tokens when sampling (0 = off)", "0");
  p.add_option("top-p", "P", "nucleus sampling mass (1 = off)", "1");
  p.add_option("min-p", "P", "drop tokens below P x the top probability (0 = off)", "0");
  p.add_option("seed", "S", "workload seed", "1");
  add_scheduler_flags(p);
  add_pool_memory_flag(p, "pool-mb");
  p.add_flag("json", "print one JSON document instead of text");
  // --verbose (every command has it, args.cc) also prints the backend and kernel path.
  add_device_option(p);
  if (auto rc = p.parse_or_exit_code(argc, argv)) return *rc;
  BenchConfig base;
  base.workload = p.get("workload");
  if (base.workload != "chat" && base.workload != "agent" && base.workload != "nosharing")
    return report_error("bench", invalid_argument("--workload must be chat, agent or nosharing, "
                                                  "got '" +
                                                  base.workload + "'"));
  auto conc = parse_int_list(p.get("concurrency"), "--concurrency");
  if (!conc.ok()) return report_error("bench", conc.status());
  std::vector<bool> sharing_modes;
  const std::string sh = p.get("sharing");
  if (sh == "on") {
    sharing_modes = {true};
  } else if (sh == "off") {
    sharing_modes = {false};
  } else if (sh == "both") {
    sharing_modes = {true, false};
  } else {
    return report_error("bench", invalid_argument("--sharing must be on, off or both"));
  }
  // nosharing is the no-sharing baseline whatever --sharing says: report sharing=off.
  if (base.workload == "nosharing") sharing_modes = {false};
  for (const char* name : {"requests", "system-tokens", "max-tokens", "seed"}) {
    auto v = p.get_int(name);
    if (!v.ok()) return report_error("bench", v.status());
    if (*v < (std::string(name) == "seed" ? 0 : 1))
      return report_error("bench", invalid_argument(std::string("--") + name + " must be >= " +
                                                    (std::string(name) == "seed" ? "0" : "1")));
  }
  // They are held as int: a larger value would wrap (--requests 4294967297 ran 1).
  for (const char* name : {"requests", "system-tokens", "max-tokens"}) {
    if (*p.get_int(name) > INT32_MAX)
      return report_error("bench", invalid_argument(std::string("--") + name + " must be at most " +
                                                    std::to_string(INT32_MAX)));
  }
  base.requests = static_cast<int>(*p.get_int("requests"));
  base.system_tokens = static_cast<int>(*p.get_int("system-tokens"));
  base.max_tokens = static_cast<int>(*p.get_int("max-tokens"));
  base.seed = static_cast<uint64_t>(*p.get_int("seed"));
  {
    auto temp = p.get_double("temperature");
    auto top_k = p.get_int("top-k");
    auto top_p = p.get_double("top-p");
    auto min_p = p.get_double("min-p");
    for (const Status* st : {&temp.status(), &top_k.status(), &top_p.status(), &min_p.status()})
      if (!st->ok()) return report_error("bench", *st);
    if (*top_k > INT32_MAX)
      return report_error("bench",
                          invalid_argument("--top-k must be at most " + std::to_string(INT32_MAX) +
                                           ", got " + p.get("top-k")));
    engine::SamplingParams& sp = base.sampling;
    sp.temperature = *temp;
    sp.top_k = static_cast<int32_t>(*top_k);
    sp.top_p = *top_p;
    sp.min_p = *min_p;
    // The sampler's own checks (as `generate` runs them).
    if (Status s = sp.validate(); !s.ok()) return report_error("bench", s.with_context("sampling"));
  }
  auto flags = read_engine_flags(p);
  if (!flags.ok()) return report_error("bench", flags.status());
  base.engine.max_num_batched_tokens = flags->max_num_batched_tokens;
  base.engine.max_num_seqs = flags->max_num_seqs;
  base.engine.paged_cache_memory_mb = flags->paged_cache_mb;

  std::string dir = p.get("model");
  std::string temp;
  if (dir.empty()) {
    temp = (std::filesystem::temp_directory_path() / ("pagedkv-bench-" + std::to_string(getpid())))
               .string();
    model::MakeModelOptions mo;
    mo.preset = p.get("preset");
    mo.seed = 1;
    auto layers = p.get_int("layers");
    auto vocab = p.get_int("vocab");
    if (!layers.ok() || !vocab.ok() || *layers < 0 || *vocab < 0 || *layers > 1024 ||
        *vocab > (1 << 24))
      return report_error("bench", invalid_argument("--layers and --vocab must be small "
                                                    "non-negative integers"));
    mo.num_layers = static_cast<int32_t>(*layers);
    mo.vocab_size = static_cast<int32_t>(*vocab);
    mo.out_dir = temp;
    std::filesystem::create_directories(temp);
    Status ms = model::make_random_model(mo);
    if (!ms.ok()) {
      std::filesystem::remove_all(temp);
      return report_error("bench", ms);
    }
    dir = temp;
  }
  auto loaded = load_model_on(dir, requested_device(p));
  if (!temp.empty()) std::filesystem::remove_all(temp);  // the weights stay mapped
  if (!loaded.ok()) return report_error("bench", loaded.status());
  std::shared_ptr<model::Model> model(std::move(*loaded));
  // Every prompt starts with the system tokens: refuse a length the model's context
  // cannot hold before the workload materializes it (a huge value used to
  // allocate gigabytes of prompt ids before the engine refused the first request).
  const int64_t max_context = model->config().max_position_embeddings;
  if (max_context > 0 && base.system_tokens >= max_context)
    return report_error("bench",
                        invalid_argument("--system-tokens " + std::to_string(base.system_tokens) +
                                         " leaves no room in the model's "
                                         "max_position_embeddings (" +
                                         std::to_string(max_context) + ")"));

  const bool json = p.has("json");
  const bool bar = !json && isatty(STDERR_FILENO);
  if (p.has("verbose")) std::fprintf(stderr, "%s\n", backend::cpu_backend().describe().c_str());
  if (!json) {
    std::printf("model %s (%s, hidden %d, %d layers, vocab %d)\n",
                temp.empty() ? dir.c_str() : ("make-model --preset " + p.get("preset")).c_str(),
                model->config().model_type.c_str(), model->config().hidden_size,
                model->config().num_hidden_layers, model->config().vocab_size);
  }
  nlohmann::ordered_json runs = nlohmann::ordered_json::array();
  double baseline = 0, baseline_cpu = 0;
  for (bool sharing : sharing_modes) {
    for (int cc : *conc) {
      BenchConfig c = base;
      c.sharing = sharing;
      c.concurrency = cc;
      auto r = run_workload(model, c, bar);
      if (!r.ok()) return report_error("bench", r.status());
      const double tps = r->completion_tokens / r->wall_s;
      if (baseline == 0) baseline = tps;
      if (baseline_cpu == 0 && r->cpu_s > 0) baseline_cpu = r->completion_tokens / r->cpu_s;
      if (json) {
        runs.push_back(to_json(*r, baseline, baseline_cpu));
      } else {
        print_text(*r, baseline, baseline_cpu);
      }
    }
  }
  if (json) {
    nlohmann::ordered_json doc;
    doc["model"] = temp.empty() ? dir : "make-model --preset " + p.get("preset");
    doc["hidden_size"] = model->config().hidden_size;
    doc["num_layers"] = model->config().num_hidden_layers;
    doc["vocab_size"] = model->config().vocab_size;
    doc["model_type"] = model->config().model_type;
    doc["runs"] = runs;
    std::cout << doc.dump(2) << "\n";
  }
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("bench", "workload benchmark of the engine (throughput, TTFT, sharing)",
                     bench_main);

}  // namespace pagedkv::cli
