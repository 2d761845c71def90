// bench_cold_restart: the restart share of issue 6 — one turn of an 8,192-token
// prompt through `pagedkv generate --persist-cache` into a fresh cold directory,
// then fresh processes with the same prompt, each of which restores what the
// previous ones persisted and captures the next blocks (the walk resumes at the
// chain's first hole). Per process it reports the share of the prompt restored
// (restored tokens / prompt tokens), the blocks it captured against the per-turn
// budget (PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN, default 128; PAGEDKV_COLD_CAPTURE_
// BUDGET_MS, default 250), the walk's stop reason and elapsed time (from the
// per-turn JSONL trace), and time to first token; until the whole prompt is
// restored. A second series raises the block budget to the whole prompt (the
// deadline stays 250 ms) to show whether the disk absorbs every full block in one
// turn, and on a non-tmpfs directory the default budget with PAGEDKV_COLD_SYNC=none
// (a writer at page-cache speed: a disk that keeps up). A persist-off process of the same prompt is
// the TTFT baseline.
//
// Model: the tiny preset (random weights, seed 1) with max_position_embeddings
// raised to 16,384 in its config.json so that an 8,192-token prompt fits (the
// preset's 4,096 only sizes the pool's default; no RoPE scaling is involved), cached
// under $PAGEDKV_BENCH_MODEL_DIR or ~/.cache/pagedkv/models.
// Directories: PAGEDKV_COLD_BENCH_DIRS (default "/var/tmp:/dev/shm", missing ones
// skipped); each series gets a fresh subdirectory, removed afterwards.
// Prompt length: PAGEDKV_COLD_RESTART_TOKENS (default 8192).
// The pagedkv binary: PAGEDKV_BINARY, default the one built next to this program.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "bench_model.h"
#include "util/knobs.h"

using namespace pagedkv;
using Clock = std::chrono::steady_clock;
namespace fs = std::filesystem;

#ifndef PAGEDKV_CLI
#define PAGEDKV_CLI "pagedkv"
#endif

namespace {

constexpr int kBlock = 16;

std::string model_dir() {
  const std::string dir = bench::bench_model_cache_dir() + "/qwen3-tiny-f32-seed1-ctx16k";
  if (!fs::exists(dir + "/model.safetensors")) {
    bench::make_bench_model(dir, "tiny", model::DType::kF32);
    nlohmann::json j;
    {
      std::ifstream in(dir + "/config.json");
      j = nlohmann::json::parse(in);
    }
    j["max_position_embeddings"] = 16384;
    std::ofstream(dir + "/config.json") << j.dump(2) << "\n";
  }
  return dir;
}

struct Turn {
  int64_t prompt_tokens = -1, restored = -1;
  double ttft_ms = -1, wall_s = 0, capture_ms = -1;
  int64_t capture_blocks = -1, capture_enqueued = -1, bytes_written = -1, corruptions = -1;
  std::string capture_stop = "?";
  std::string error;
};

// Runs one `pagedkv generate` process and parses its --stats output and JSONL line.
Turn run_process(const std::string& bin, const std::string& model, const std::string& ids,
                 const std::string& cold_dir, bool persist, const std::string& metrics_dir) {
  Turn t;
  fs::remove_all(metrics_dir);
  ::setenv("PAGEDKV_COLD_CACHE_DIR", cold_dir.c_str(), 1);
  ::setenv("PAGEDKV_METRICS_DIR", metrics_dir.c_str(), 1);
  const std::string cmd = "'" + bin + "' generate --model '" + model + "' --max-tokens 1 --stats " +
                          (persist ? "--persist-cache " : "") + "--prompt-ids '" + ids + "' 2>&1";
  const auto t0 = Clock::now();
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (p == nullptr) {
    t.error = "popen failed";
    return t;
  }
  char buf[4096];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  const int rc = ::pclose(p);
  t.wall_s = std::chrono::duration<double>(Clock::now() - t0).count();
  if (rc != 0) t.error = "exit " + std::to_string(WEXITSTATUS(rc)) + ": " + out.substr(0, 400);
  std::smatch m;
  if (std::regex_search(out, m, std::regex(R"(prompt 1 \((\d+) tokens, (\d+) cached\))"))) {
    t.prompt_tokens = std::stoll(m[1]);
    t.restored = std::stoll(m[2]);  // a fresh process: everything cached came from disk
  }
  if (std::regex_search(out, m, std::regex(R"(ttft_ms=([0-9.]+))"))) t.ttft_ms = std::stod(m[1]);
  if (persist && fs::is_directory(metrics_dir + "/traces")) {
    for (const auto& e : fs::directory_iterator(metrics_dir + "/traces")) {
      std::ifstream in(e.path());
      std::string line;
      while (std::getline(in, line)) {
        try {
          auto j = nlohmann::json::parse(line);
          t.capture_blocks = j.value("captureBlocks", int64_t{-1});
          t.capture_enqueued = j.value("captureEnqueued", int64_t{-1});
          t.capture_stop = j.value("captureStop", std::string("?"));
          t.capture_ms = j.value("captureElapsedMs", -1.0);
          t.bytes_written = j.value("coldBytesWritten", int64_t{-1});
          t.corruptions = j.value("coldCorruptions", int64_t{-1});
        } catch (const nlohmann::json::exception&) {
        }
      }
    }
  }
  return t;
}

// One series: fresh cold dir, processes until the whole prompt is restored (or
// `max_turns`). Returns false on an error.
bool series(const std::string& bin, const std::string& model, const std::string& ids,
            int64_t prompt_tokens, const std::string& base, const std::string& label,
            const char* blocks_per_turn, const char* sync, int max_turns) {
  const std::string dir = base + "/pkv_cold_restart_" + std::to_string(::getpid());
  const std::string metrics = dir + ".metrics";
  fs::remove_all(dir);
  if (blocks_per_turn) {
    ::setenv("PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN", blocks_per_turn, 1);
  } else {
    ::unsetenv("PAGEDKV_COLD_CAPTURE_BLOCKS_PER_TURN");
  }
  const char* inherited_sync = std::getenv("PAGEDKV_COLD_SYNC");
  const std::string saved_sync = inherited_sync ? inherited_sync : "";
  if (sync) ::setenv("PAGEDKV_COLD_SYNC", sync, 1);
  const int64_t max_restorable = (prompt_tokens - 1) / kBlock * kBlock;
  std::printf("\n%s (%s), %s; load average %s\n", base.c_str(), bench::fs_type(base).c_str(),
              label.c_str(), bench::load_average().c_str());
  std::printf("%-5s %9s %7s %10s %10s %-9s %11s %10s %9s\n", "turn", "restored", "share",
              "captured", "walked", "stop", "capture ms", "TTFT ms", "wall s");
  bool ok = true;
  for (int turn = 1; turn <= max_turns; ++turn) {
    Turn t = run_process(bin, model, ids, dir, true, metrics);
    if (!t.error.empty()) {
      std::printf("turn %d failed: %s\n", turn, t.error.c_str());
      ok = false;
      break;
    }
    std::printf("%-5d %9lld %6.1f%% %6lld/%-3s %5lld/%-4lld %-9s %11.1f %10.1f %9.2f%s\n", turn,
                static_cast<long long>(t.restored),
                100.0 * static_cast<double>(t.restored) / static_cast<double>(t.prompt_tokens),
                static_cast<long long>(t.capture_enqueued),
                blocks_per_turn ? blocks_per_turn : "128", static_cast<long long>(t.capture_blocks),
                static_cast<long long>(prompt_tokens / kBlock), t.capture_stop.c_str(),
                t.capture_ms, t.ttft_ms, t.wall_s, t.corruptions > 0 ? "  CORRUPTIONS" : "");
    std::fflush(stdout);
    if (t.restored >= max_restorable) break;
  }
  fs::remove_all(dir);
  fs::remove_all(metrics);
  if (sync) {
    if (inherited_sync) {
      ::setenv("PAGEDKV_COLD_SYNC", saved_sync.c_str(), 1);
    } else {
      ::unsetenv("PAGEDKV_COLD_SYNC");
    }
  }
  return ok;
}

}  // namespace

int main() {
  const std::string bin = env_string("PAGEDKV_BINARY").value_or(PAGEDKV_CLI);
  const int64_t n = static_cast<int64_t>(env_u64("PAGEDKV_COLD_RESTART_TOKENS").value_or(8192));
  if (n < 2 * kBlock || n > 16000) {
    std::fprintf(stderr, "PAGEDKV_COLD_RESTART_TOKENS must be in [32, 16000]\n");
    return 1;
  }
  const std::vector<std::string> dirs = bench::cold_bench_dirs();
  const std::string model = model_dir();
  std::mt19937 g(11);
  std::uniform_int_distribution<int32_t> dist(0, 511);  // the tiny preset's vocabulary
  std::string ids;
  for (int64_t i = 0; i < n; ++i) ids += (i ? " " : "") + std::to_string(dist(g));
  ::unsetenv("PAGEDKV_COLD_CAPTURE_BUDGET_MS");
  ::unsetenv("PAGEDKV_PERSIST_PAGED_CACHE");
  const char* sync = std::getenv("PAGEDKV_COLD_SYNC");
  std::printf(
      "== cold tier: restart share, %lld-token prompt, tiny preset, %lld full blocks, "
      "sync %s\n",
      static_cast<long long>(n), static_cast<long long>(n / kBlock),
      sync ? sync : "fsync (default)");
  std::printf("load average at start: %s\n", bench::load_average().c_str());
  const std::string tmp = fs::temp_directory_path().string() + "/pkv_cold_restart_base";
  Turn base = run_process(bin, model, ids, tmp, false, tmp + ".metrics");
  if (!base.error.empty()) {
    std::fprintf(stderr, "baseline failed: %s\n", base.error.c_str());
    return 1;
  }
  std::printf("persist-off baseline (same prompt): TTFT %.1f ms, process %.2f s\n", base.ttft_ms,
              base.wall_s);
  fs::remove_all(tmp + ".metrics");
  bool ok = true;
  const std::string whole = std::to_string(n / kBlock + 1);
  for (const std::string& d : dirs) {
    ok = series(bin, model, ids, n, d, "default budget (128 blocks, 250 ms)", nullptr, nullptr,
                24) &&
         ok;
    ok = series(bin, model, ids, n, d, "block budget " + whole + " (whole prompt), 250 ms",
                whole.c_str(), nullptr, 3) &&
         ok;
    // On a real disk, the same with sync off: the writer then runs at page-cache speed,
    // i.e. a disk that keeps up (durability against power loss traded, never correctness).
    if (sync == nullptr && bench::fs_type(d) != "tmpfs") {
      ok = series(bin, model, ids, n, d, "default budget, PAGEDKV_COLD_SYNC=none", nullptr, "none",
                  8) &&
           ok;
    }
  }
  std::printf("\nload average at end: %s\n", bench::load_average().c_str());
  return ok ? 0 : 1;
}
