// bench_cold_writer: the cold-tier writer's service time per object (Tw) for a
// qwen3-0.6b-shape block (28 layers x 8 KV heads x 128 x 16 tokens x K+V x bf16 =
// 1,835,008 bytes) and a small block (4 x 2 x 64 x 16 x K+V x bf16 = 32 KiB), under
// each sync mode (fsync / fdatasync / none), next to the disk's sequential write
// bandwidth measured with dd in the same run (the baseline).
//
// Tw is measured end to end through ColdStore: the producer keeps the bounded
// queue full (enqueue_before), so elapsed / objects is the writer's per-object
// service time (temp O_EXCL create, write, sync, rename, directory fsync, index
// update). Encoding (payload SHA-256) is timed separately; it runs on the producer.
//
// Directory: PAGEDKV_COLD_BENCH_DIR (default /var/tmp), a fresh subdirectory that is
// removed afterwards. Objects per case: PAGEDKV_COLD_BENCH_OBJECTS (default 48 big /
// 4x that small).
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "kv/cold/cold_store.h"
#include "kv/cold/cold_synthetic.h"
#include "util/knobs.h"

using namespace pagedkv;
using namespace pagedkv::cold;
using Clock = std::chrono::steady_clock;

namespace {

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

std::string run(const std::string& cmd) {
  std::string out;
  FILE* p = ::popen(cmd.c_str(), "r");
  if (!p) return out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  ::pclose(p);
  return out;
}

ModelFingerprint bf16_fp(uint32_t layers, uint32_t heads, uint32_t dim) {
  ModelFingerprint fp = synthetic_fingerprint(layers, heads, dim, 16);
  fp.dtype = ColdDType::kBF16;
  return fp;
}

}  // namespace

int main() {
  const std::string base = env_string("PAGEDKV_COLD_BENCH_DIR").value_or("/var/tmp");
  const std::string dir = base + "/pkv_cold_bench_" + std::to_string(::getpid());
  const uint64_t n_big = env_u64("PAGEDKV_COLD_BENCH_OBJECTS").value_or(48);
  if (!FileSystem::posix().create_dirs(dir, 0700).ok()) {
    std::fprintf(stderr, "cannot create %s\n", dir.c_str());
    return 1;
  }
  std::printf("directory: %s\n", dir.c_str());
  std::printf("%s", run("df -hT '" + dir + "' | tail -1").c_str());

  // Baseline: sequential write bandwidth with dd (256 MiB, fdatasync at the end).
  const std::string dd =
      run("dd if=/dev/zero of='" + dir + "/dd.bin' bs=1M count=256 conv=fdatasync 2>&1 | tail -1");
  std::printf("dd sequential write (256 MiB, conv=fdatasync): %s", dd.c_str());
  ::unlink((dir + "/dd.bin").c_str());

  struct Shape {
    const char* name;
    ModelFingerprint fp;
    uint64_t n;
  };
  const Shape shapes[] = {{"qwen3-0.6b block (1.84 MB)", bf16_fp(28, 8, 128), n_big},
                          {"small block (32 KiB)", bf16_fp(4, 2, 64), 4 * n_big}};
  const std::pair<const char*, SyncMode> modes[] = {
      {"fsync", SyncMode::kFsync}, {"fdatasync", SyncMode::kFdatasync}, {"none", SyncMode::kNone}};
  std::printf("\n%-28s %-10s %8s %12s %12s %14s\n", "block", "sync", "objects", "Tw ms/obj", "MB/s",
              "encode ms/obj");
  uint64_t round = 0;
  for (const Shape& s : shapes) {
    // Pre-encode (timed: the producer's cost, SHA-256 of the payload included).
    std::vector<SyntheticObject> objs;
    auto t_enc = Clock::now();
    for (uint64_t i = 0; i < s.n * 3; ++i) objs.push_back(make_synthetic_object(s.fp, i));
    const double enc_ms = ms_since(t_enc) / static_cast<double>(objs.size());
    const uint64_t bytes = objs[0].bytes->size();
    for (const auto& [mode_name, mode] : modes) {
      ColdStoreOptions o;
      o.root = dir + "/r" + std::to_string(round++);
      o.sync = mode;
      o.quota_bytes = 64ull << 30;
      auto store = ColdStore::open(o);
      if (!store.ok()) {
        std::fprintf(stderr, "%s\n", store.status().to_string().c_str());
        return 1;
      }
      const uint64_t first = (round - 1) % 3 * s.n;  // distinct keys per mode
      auto t0 = Clock::now();
      for (uint64_t i = 0; i < s.n; ++i) {
        const auto& ob = objs[first + i];
        (*store)->enqueue_before(ob.key, ob.bytes, Clock::now() + std::chrono::seconds(60));
      }
      (*store)->flush();
      const double ms = ms_since(t0);
      const double per = ms / static_cast<double>(s.n);
      const auto st = (*store)->stats();
      std::printf("%-28s %-10s %8llu %12.3f %12.1f %14.3f%s\n", s.name, mode_name,
                  static_cast<unsigned long long>(s.n), per,
                  static_cast<double>(bytes) / 1e6 / (per / 1e3), enc_ms,
                  st.write_errors ? "  (WRITE ERRORS)" : "");
      store->reset();
      run("rm -rf '" + o.root + "'");
    }
  }
  run("rm -rf '" + dir + "'");
  return 0;
}
