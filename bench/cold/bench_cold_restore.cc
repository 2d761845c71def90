// bench_cold_restore: restore time per block vs recompute time per block, on the
// same prompt, in the same run, for the tiny, small and qwen3-0.6b-shape presets
// (random weights from make_random_model, cached like bench_model_throughput's under
// $PAGEDKV_BENCH_MODEL_DIR or ~/.cache/pagedkv/models).
//
// Per preset, a prompt of N full blocks + 1 token (restore never covers a prompt's
// last token, so the N blocks are exactly what a restore can give back):
//   recompute  fresh cache, prefill the whole prompt (T_full), then the 1-token
//              prefill that a restored request still runs (T_last, measured in the
//              restore runs); recompute of the N blocks = T_full - T_last.
//   capture    the recompute run's N blocks through ColdTierWalk::capture_chain
//              (budget raised to N blocks, 60 s) and ColdStore::flush (fsync).
//   restore    a fresh ColdStore::open (directory scan, timed separately) and a fresh
//              cache; ColdTierWalk::restore_extend = per block: read, verify both
//              SHA-256s and the expectation (key, parent, fingerprint, geometry,
//              tokens), copy into the reserved block; publish. Then the last token's
//              prefill, whose logits must be bit-identical to the recompute's.
// Restores run from the page cache ("warm": objects just written), after
// posix_fadvise(DONTNEED) on every object ("disk": the reads go to the device; a
// no-op on tmpfs), on each directory of PAGEDKV_COLD_BENCH_DIRS (default
// "/var/tmp:/dev/shm", missing ones skipped). Times are medians of the
// repetitions (prefill 3, restore 7; 1 and 3 for the 0.6B shape); wall clock and process CPU time
// (all threads) are both printed: the machine this was written on is shared, so wall time includes
// waiting for a core. Usage: bench_cold_restore [--quick]   (--quick skips the 0.6B-shape preset)
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "bench_machine.h"
#include "bench_model.h"
#include "engine/kv_cache_factory.h"
#include "engine/pool_kv_store.h"
#include "exit_on_error.h"
#include "kv/cold/cold_store.h"
#include "kv/cold/cold_tier_walk.h"
#include "kv/paged_kv_cache_adapter.h"

using namespace pagedkv;
using Clock = std::chrono::steady_clock;

namespace {

struct Times {
  double wall_ms = 0, cpu_ms = 0;
};

double cpu_now_ms() {
  timespec ts{};
  ::clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

class Timer {
 public:
  Timer() : wall_(Clock::now()), cpu_(cpu_now_ms()) {}
  Times stop() const {
    return {std::chrono::duration<double, std::milli>(Clock::now() - wall_).count(),
            cpu_now_ms() - cpu_};
  }

 private:
  Clock::time_point wall_;
  double cpu_;
};

Times median(std::vector<Times> v) {
  auto mid = [](std::vector<double> x) {
    std::sort(x.begin(), x.end());
    return x.size() % 2 ? x[x.size() / 2] : (x[x.size() / 2 - 1] + x[x.size() / 2]) / 2;
  };
  std::vector<double> w, c;
  for (const auto& t : v) {
    w.push_back(t.wall_ms);
    c.push_back(t.cpu_ms);
  }
  return {mid(w), mid(c)};
}

// The walks under test work on one adapter; this fills it the way one prefill
// row of the engine's step does (allocate, one forward, record), so the
// recompute and the restore are timed apart.
class Prefiller {
 public:
  Prefiller(model::Model& m, kv::PagedKVCache* c)
      : m_(m), c_(c), a_(std::make_unique<kv::PagedKVCacheAdapter>(c)) {}
  StatusOr<int64_t> begin(std::span<const int32_t> prompt) {
    prompt_.assign(prompt.begin(), prompt.end());
    a_->reset_for_new_request();
    return a_->find_cached_prefix(prompt);
  }
  Status prefill(std::vector<float>* logits) {
    const int64_t done = a_->num_tokens();
    PKV_RETURN_IF_ERROR(a_->allocate_suffix_blocks(static_cast<int64_t>(prompt_.size())));
    model::ForwardBatch b;
    b.path = model::KVPath::kPaged;
    const std::span<const int32_t> rest(prompt_.data() + done, prompt_.size() - done);
    model::ForwardRow& row =
        b.add_row(rest, static_cast<int32_t>(done), model::LogitsRequest::kLast);
    row.block_tables = {a_->block_table()};
    engine::PoolKVBlockStore store(c_->pool());
    b.kv_store = &store;
    model::ForwardOutput out;
    PKV_RETURN_IF_ERROR(m_.forward(b, &out));
    PKV_RETURN_IF_ERROR(a_->record_tokens(rest));
    *logits = out.logits;
    return ok_status();
  }
  void end() { a_->release_request(); }
  kv::PagedKVCacheAdapter* adapter() { return a_.get(); }

 private:
  model::Model& m_;
  kv::PagedKVCache* c_;
  std::unique_ptr<kv::PagedKVCacheAdapter> a_;
  std::vector<int32_t> prompt_;
};

std::unique_ptr<kv::PagedKVCache> cache_for(model::Model& m) {
  kv::PoolBudgetConfig c;
  c.paged_cache_memory_mb = 64;          // ≥ 17 blocks of the 0.6B shape; allocated per run
  c.paged_cache_initial_memory_mb = 64;  // no growth inside a timed section
  auto r = engine::make_paged_cache(m, c);
  bench::exit_on_error(r.status());
  return std::move(*r);
}

cold::ModelFingerprint fingerprint(const model::Model& m, const std::string& preset) {
  const kv::KVGeometry pool = engine::pool_geometry(m.kv_geometry());
  cold::ColdModelIdentity id;
  id.model_type = m.config().model_type;
  id.weight_identity = "bench_cold_restore:" + preset;
  return cold::fingerprint_for(id, pool);
}

// Drops the page cache of every object in `dir` (clean after the writer's fsync).
int drop_page_cache(const std::string& dir) {
  int n = 0;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    int fd = ::open(e.path().c_str(), O_RDONLY);
    if (fd < 0) continue;
    if (::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) == 0) ++n;
    ::close(fd);
  }
  return n;
}

void run_preset(const std::string& preset, model::DType dt, int n_blocks, int reps,
                int restore_reps, const std::vector<std::string>& dirs) {
  const std::shared_ptr<model::Model> loaded = bench::load_random_model(preset, dt);
  model::Model& m = *loaded;
  const auto fp = fingerprint(m, preset);
  const int b = m.kv_geometry().block_size;
  std::mt19937 g(7);
  std::uniform_int_distribution<int32_t> d(0, m.config().vocab_size - 1);
  std::vector<int32_t> prompt(static_cast<size_t>(n_blocks) * b + 1);
  for (auto& x : prompt) x = d(g);
  size_t block_bytes = 0;

  // Recompute: the whole prompt, `reps` times, each on a fresh cache.
  std::vector<Times> full;
  std::vector<float> ref_logits;
  std::unique_ptr<kv::PagedKVCache> keep_cache;  // the last run stays live for capture
  std::unique_ptr<Prefiller> keep_runner;
  for (int r = 0; r < reps; ++r) {
    auto c = cache_for(m);
    auto runner = std::make_unique<Prefiller>(m, c.get());
    bench::exit_on_error(runner->begin(prompt).status());
    std::vector<float> logits;
    Timer t;
    bench::exit_on_error(runner->prefill(&logits));
    full.push_back(t.stop());
    ref_logits = logits;
    if (r + 1 == reps) {
      keep_cache = std::move(c);
      keep_runner = std::move(runner);
    } else {
      runner->end();
    }
  }
  block_bytes = keep_cache->pool()->geometry().bytes_per_block();
  const Times t_full = median(full);
  std::printf("\n%s (%s weights, KV %zu bytes/block), prompt %d blocks + 1 token = %zu tokens\n",
              preset.c_str(), dt == model::DType::kBF16 ? "bf16" : "f32", block_bytes, n_blocks,
              prompt.size());
  std::printf(
      "  recompute: prefill %zu tokens  wall %9.2f ms  cpu %9.2f ms  (median of %d; "
      "restores: median of %d)\n",
      prompt.size(), t_full.wall_ms, t_full.cpu_ms, reps, restore_reps);

  for (const std::string& base : dirs) {
    const std::string dir = base + "/pkv_cold_restore_" + std::to_string(::getpid());
    std::filesystem::remove_all(dir);
    cold::ColdStoreOptions so;
    so.root = dir;
    so.quota_bytes = 16ull << 30;
    so.sync = SyncMode::kFsync;
    {
      auto store = cold::ColdStore::open(so);
      bench::exit_on_error(store.status());
      cold::ColdCaptureBudget budget;
      budget.max_blocks = static_cast<uint64_t>(n_blocks) + 1;
      budget.max_walk = std::chrono::milliseconds(60000);
      cold::ColdTierWalk walk(store->get(), fp, budget);
      Timer t;
      auto cr = walk.capture_chain(*keep_runner->adapter());
      (*store)->flush();
      Times tc = t.stop();
      std::printf(
          "  %s (%s): capture %d blocks + flush (fsync)  wall %8.2f ms = %.3f ms/block  (%s)\n",
          base.c_str(), bench::fs_type(base).c_str(), cr.enqueued, tc.wall_ms,
          tc.wall_ms / std::max(1, cr.enqueued), cr.stop.c_str());
    }
    for (const bool drop : {false, true}) {
      std::vector<Times> opens, restores, lasts;
      int restored = 0, dropped = 0;
      bool identical = true;
      for (int r = 0; r < restore_reps; ++r) {
        if (drop) dropped = drop_page_cache(dir);
        Timer to;
        auto store = cold::ColdStore::open(so);
        bench::exit_on_error(store.status());
        opens.push_back(to.stop());
        cold::ColdTierWalk walk(store->get(), fp);
        auto c = cache_for(m);
        Prefiller runner(m, c.get());
        auto hot = runner.begin(prompt);
        bench::exit_on_error(hot.status());
        Timer tr;
        auto rr = walk.restore_extend(*runner.adapter(), prompt);
        restores.push_back(tr.stop());
        restored = rr.restored;
        std::vector<float> logits;
        Timer tl;
        bench::exit_on_error(runner.prefill(&logits));
        lasts.push_back(tl.stop());
        identical = identical && logits == ref_logits && *hot == 0;
        runner.end();
        const auto st = (*store)->stats();
        if (st.corruptions != 0) identical = false;
      }
      const Times o = median(opens), rs = median(restores), l = median(lasts);
      const double recompute_ms = t_full.wall_ms - l.wall_ms;
      const double recompute_cpu = t_full.cpu_ms - l.cpu_ms;
      const double per_r = rs.wall_ms / std::max(1, restored);
      const double per_c = recompute_ms / n_blocks;
      std::printf(
          "    restore %-5s %d/%d blocks: open %7.2f ms | restore wall %8.2f ms = %.4f ms/block "
          "(%.0f MB/s), cpu %.4f ms/block | last-token prefill %7.2f ms | recompute %.4f "
          "ms/block wall, %.4f cpu | recompute/restore %.1fx wall, %.1fx cpu | TTFT %.1f ms vs "
          "%.1f ms = %.1fx | logits bit-identical: %s%s\n",
          drop ? "disk" : "warm", restored, n_blocks, o.wall_ms, rs.wall_ms, per_r,
          static_cast<double>(block_bytes) * restored / 1e3 / std::max(1e-9, rs.wall_ms),
          rs.cpu_ms / std::max(1, restored), l.wall_ms, per_c, recompute_cpu / n_blocks,
          per_c / per_r, (recompute_cpu / n_blocks) / (rs.cpu_ms / std::max(1, restored)),
          t_full.wall_ms, o.wall_ms + rs.wall_ms + l.wall_ms,
          t_full.wall_ms / (o.wall_ms + rs.wall_ms + l.wall_ms), identical ? "yes" : "NO",
          drop ? (" (page cache dropped for " + std::to_string(dropped) + " files)").c_str() : "");
    }
    std::filesystem::remove_all(dir);
  }
  keep_runner->end();
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  ::setenv("PAGEDKV_LOG_LEVEL", "warn", 0);  // no pool-size line per fresh cache
  std::printf("load average at start: %s\n", bench::load_average().c_str());
  const std::vector<std::string> dirs = bench::cold_bench_dirs();
  std::printf("== cold tier: restore vs recompute per block (sync fsync, block 16 tokens)\n");
  run_preset("tiny", model::DType::kF32, 128, 3, 7, dirs);
  run_preset("small", model::DType::kF32, 64, 3, 7, dirs);
  if (!quick) run_preset("qwen3-0.6b-shape", model::DType::kBF16, 4, 1, 3, dirs);
  std::printf("load average at end: %s\n", bench::load_average().c_str());
  return 0;
}
