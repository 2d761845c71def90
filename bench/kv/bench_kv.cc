// Benchmarks of the paged KV cache core (issue 2). Figures: docs/performance.md.
//
//  BM_BlockKeyHashing      block-key hashing (BlockHasher::hash_chain, B=16) in
//                          tokens/s, interleaved in the same loop with two raw
//                          SHA-256 baselines over the same tokens:
//                            raw_msg  = OpenSSL EVP SHA-256 with one reused context
//                                       over each block's 100-byte key input
//                                       (parent|count|tokens), chained;
//                            raw_bulk = one streaming SHA-256 over all token bytes.
//                          Counters: key/raw_msg and key/raw_bulk ratios.
//  BM_FindCachedPrefix     find_cached_prefix on a fully cached 131,072-token prompt
//                          (arg 0: the blocks are in use by another request;
//                          arg 1: they are free-cached and revived from the LRU queue).
//  BM_DecodeStepBookkeeping one engine step's bookkeeping for 256 live requests each
//                          reserving (allocate_suffix_blocks) and recording one
//                          decode token (publishing the blocks that fill).
#include <benchmark/benchmark.h>
#include <openssl/evp.h>
#include <openssl/sha.h>
#include <time.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "kv/block_hasher.h"
#include "kv/paged_kv_cache_adapter.h"

namespace pagedkv::kv {
namespace {

// Thread CPU time: the machine these run on is shared, and wall time would charge
// other processes' work to ours. Every timed section here is single-threaded.
struct CpuClock {
  using duration = std::chrono::nanoseconds;
  using time_point = std::chrono::time_point<CpuClock, duration>;
  static time_point now() {
    timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return time_point(duration(static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec));
  }
};
using Clock = CpuClock;

std::vector<int32_t> random_tokens(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> out(n);
  for (auto& t : out) t = static_cast<int32_t>(rng() % 151000);
  return out;
}

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void BM_BlockKeyHashing(benchmark::State& state) {
  constexpr int32_t kB = 16;
  const size_t n = 131072;
  const auto toks = random_tokens(n, 1);
  BlockHasher hasher;
  std::vector<BlockKey> keys;
  keys.reserve(n / kB);
  double t_key = 0, t_msg = 0, t_bulk = 0;
  uint8_t msg[100];
  uint8_t digest[32];
  EVP_MD* md = EVP_MD_fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* ctx = EVP_MD_CTX_new();
  for (auto _ : state) {
    auto t0 = Clock::now();
    keys.clear();
    hasher.hash_chain(toks, kB, {}, &keys);
    benchmark::DoNotOptimize(keys.data());
    auto t1 = Clock::now();
    // Raw SHA-256, one 100-byte message per block (what a key must hash at minimum).
    std::memset(msg, 0, 36);
    for (size_t i = 0; i < n; i += kB) {
      std::memcpy(msg + 36, toks.data() + i, kB * 4);
      unsigned int len = 0;
      EVP_DigestInit_ex(ctx, md, nullptr);
      EVP_DigestUpdate(ctx, msg, sizeof(msg));
      EVP_DigestFinal_ex(ctx, digest, &len);
      std::memcpy(msg, digest, 32);  // chain like the keys do
    }
    benchmark::DoNotOptimize(digest);
    auto t2 = Clock::now();
    SHA256(reinterpret_cast<const uint8_t*>(toks.data()), n * 4, digest);
    benchmark::DoNotOptimize(digest);
    auto t3 = Clock::now();
    t_key += seconds(t1 - t0);
    t_msg += seconds(t2 - t1);
    t_bulk += seconds(t3 - t2);
  }
  EVP_MD_CTX_free(ctx);
  EVP_MD_free(md);
  const double tokens = static_cast<double>(n) * state.iterations();
  state.counters["key_tok_per_s"] = tokens / t_key;
  state.counters["raw_msg_tok_per_s"] = tokens / t_msg;
  state.counters["raw_bulk_tok_per_s"] = tokens / t_bulk;
  state.counters["key_vs_raw_msg"] = t_msg / t_key;
  state.counters["key_vs_raw_bulk"] = t_bulk / t_key;
}
BENCHMARK(BM_BlockKeyHashing)->Unit(benchmark::kMillisecond)->MinTime(1.0);

void BM_FindCachedPrefix(benchmark::State& state) {
  constexpr int32_t kB = 16;
  const size_t n = 131072;
  const bool free_cached = state.range(0) == 1;
  auto cache = std::move(*PagedKVCache::create_logical(kB, n / kB + 2, n / kB + 2));
  const auto prompt = random_tokens(n, 2);
  PagedKVCacheAdapter owner(cache.get());
  owner.reset_for_new_request();
  if (!owner.find_cached_prefix(prompt).ok() || !owner.allocate_suffix_blocks(n).ok() ||
      !owner.record_tokens(prompt).ok()) {
    state.SkipWithError("setup failed");
    return;
  }
  if (free_cached) owner.release_request();
  PagedKVCacheAdapter a(cache.get());
  int64_t cached = 0;
  for (auto _ : state) {
    a.reset_for_new_request();
    auto t0 = Clock::now();
    cached = *a.find_cached_prefix(prompt);
    auto t1 = Clock::now();
    state.SetIterationTime(seconds(t1 - t0));
    a.release_request();
  }
  state.counters["cached_tokens"] = static_cast<double>(cached);
  state.SetLabel(free_cached ? "blocks free-cached (revived from LRU)" : "blocks in use");
}
// Manual time = thread CPU time of find_cached_prefix alone (release excluded).
BENCHMARK(BM_FindCachedPrefix)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);

void BM_DecodeStepBookkeeping(benchmark::State& state) {
  constexpr int32_t kB = 16;
  constexpr int kRequests = 256;
  constexpr int kStepsPerEpoch = 4096;
  // A fixed pool of 2^17 blocks (2M tokens): large enough for every live row, small
  // enough that epochs recycle cached blocks (evictions) as a serving pool does.
  auto cache = std::move(*PagedKVCache::create_logical(kB, 1 << 17, 1 << 17));
  std::vector<std::unique_ptr<PagedKVCacheAdapter>> reqs;
  std::vector<std::vector<int32_t>> prompts;
  for (int r = 0; r < kRequests; ++r) {
    reqs.push_back(std::make_unique<PagedKVCacheAdapter>(cache.get()));
    prompts.push_back(random_tokens(100 + static_cast<size_t>(r) * 3, 100 + r));
  }
  auto start_epoch = [&] {
    for (int r = 0; r < kRequests; ++r) {
      auto& a = *reqs[static_cast<size_t>(r)];
      a.reset_for_new_request();
      const auto& p = prompts[static_cast<size_t>(r)];
      const int64_t c = *a.find_cached_prefix(p);
      (void)a.allocate_suffix_blocks(static_cast<int64_t>(p.size()));
      (void)a.record_tokens(std::span(p).subspan(static_cast<size_t>(c)));
    }
  };
  start_epoch();
  uint64_t lcg = 7;
  std::vector<int32_t> next(kRequests);
  int step = 0;
  for (auto _ : state) {
    if (++step == kStepsPerEpoch) {
      state.PauseTiming();
      start_epoch();
      step = 0;
      state.ResumeTiming();
    }
    for (auto& t : next) {  // a cheap LCG: the generator is not what is measured
      lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
      t = static_cast<int32_t>((lcg >> 33) % 151000);
    }
    for (int r = 0; r < kRequests; ++r) {
      auto& a = *reqs[static_cast<size_t>(r)];
      if (!a.allocate_suffix_blocks(a.num_tokens() + 1).ok() ||
          !a.record_tokens(std::span(&next[static_cast<size_t>(r)], 1)).ok()) {
        state.SkipWithError("decode bookkeeping failed");
        return;
      }
    }
  }
  state.counters["requests"] = kRequests;
}
BENCHMARK(BM_DecodeStepBookkeeping)->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace pagedkv::kv

BENCHMARK_MAIN();
