// Sampler speed (issue 11): sample_token's fast paths against the reference
// pipeline (a comparator sort of the whole vocabulary, the scalar greedy loop)
// on the same logits rows, in the same run, checking that every token agrees.
// Rows: the Qwen3 vocabulary (151,936) and the `small` preset's (4,096), logits
// ~ N(0, 2) (random-weight models have narrow rows) and ~ N(0, 8) (wide, like a
// trained model's), times per row in microseconds of thread CPU time.
// Usage: bench_sampler [rows per case, default 20] [fast]: with `fast`, the fast paths
// alone (no reference, no check: a quick A/B of their times).
#include <time.h>

#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace {

using pagedkv::engine::SamplingParams;

double thread_cpu_s() {
  timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

struct Case {
  const char* name;
  double temperature;
  int32_t top_k;
  double top_p;
  double min_p;
};

}  // namespace

int main(int argc, char** argv) {
  const int rows = argc > 1 ? std::max(1, std::atoi(argv[1])) : 20;
  const bool fast_only = argc > 2 && std::string(argv[2]) == "fast";
  const Case cases[] = {{"greedy", 0.0, 0, 1.0, 0.0},
                        {"T=0.8", 0.8, 0, 1.0, 0.0},
                        {"T=0.8 top_p=0.95", 0.8, 0, 0.95, 0.0},
                        {"T=0.8 min_p=0.05", 0.8, 0, 1.0, 0.05},
                        {"T=0.8 top_p=0.9 min_p=0.05", 0.8, 0, 0.9, 0.05},
                        {"T=0.8 top_k=50", 0.8, 50, 1.0, 0.0},
                        {"T=0.7 k=40 p=0.9 min_p=0.05", 0.7, 40, 0.9, 0.05}};
  std::printf("%-8s %-6s %-30s %12s %12s %8s\n", "vocab", "spread", "setting", "reference us",
              "fast us", "speed-up");
  int mismatches = 0;
  for (size_t vocab : {size_t{151936}, size_t{4096}}) {
    for (float spread : {2.0f, 8.0f}) {
      std::mt19937 g(42);
      std::normal_distribution<float> d(0.0f, spread);
      std::vector<std::vector<float>> data(static_cast<size_t>(rows), std::vector<float>(vocab));
      for (auto& r : data)
        for (auto& v : r) v = d(g);
      for (const Case& c : cases) {
        SamplingParams p;
        p.temperature = c.temperature;
        p.top_k = c.top_k;
        p.top_p = c.top_p;
        p.min_p = c.min_p;
        p.seed = 7;
        std::vector<int32_t> ref(data.size()), fast(data.size());
        double t = thread_cpu_s();
        for (size_t i = 0; i < data.size() && !fast_only; ++i)
          ref[i] = pagedkv::engine::sample_token_reference(data[i], p, static_cast<int64_t>(i));
        const double t_ref = thread_cpu_s() - t;
        t = thread_cpu_s();
        for (int rep = 0; rep < 3; ++rep)
          for (size_t i = 0; i < data.size(); ++i)
            fast[i] = pagedkv::engine::sample_token(data[i], p, static_cast<int64_t>(i));
        const double t_fast = (thread_cpu_s() - t) / 3;
        for (size_t i = 0; i < data.size() && !fast_only; ++i) mismatches += ref[i] != fast[i];
        if (fast_only) {
          std::printf("%-8zu %-6.0f %-30s %12s %12.1f %8s\n", vocab, spread, c.name, "-",
                      1e6 * t_fast / rows, "-");
        } else {
          std::printf("%-8zu %-6.0f %-30s %12.1f %12.1f %7.1fx\n", vocab, spread, c.name,
                      1e6 * t_ref / rows, 1e6 * t_fast / rows, t_ref / t_fast);
        }
      }
    }
  }
  if (fast_only) {
    std::printf("(fast paths only: tokens not compared with the reference)\n");
  } else {
    std::printf("tokens that differ from the reference: %d\n", mismatches);
  }
  return mismatches == 0 ? 0 : 1;
}
