// bench_engine: the engine workload runs behind docs/performance.md's engine
// section, run by `make bench`. It invokes `pagedkv bench` (src/cli/cmd_bench.cc),
// which holds the workloads and the measurement; this program only fixes the
// arguments so the published figures can be reproduced with one command.
#include <cstdio>
#include <cstdlib>
#include <string>

int main() {
  const std::string bin = PAGEDKV_BINARY;
  const char* runs[] = {
      // Aggregate throughput vs concurrency (ratio to concurrency 1).
      "bench --workload chat --concurrency 1,2,4,8,16 --requests 48 --max-tokens 64",
      // Sharing on vs off on the same workloads.
      "bench --workload chat --concurrency 8 --requests 48 --max-tokens 64 --sharing both",
      "bench --workload agent --concurrency 4 --requests 24 --max-tokens 32 --sharing both",
      // The no-sharing baseline.
      "bench --workload nosharing --concurrency 8 --requests 48 --max-tokens 64",
  };
  int rc = 0;
  for (const char* args : runs) {
    std::printf("== pagedkv %s\n", args);
    std::fflush(stdout);
    const std::string cmd = bin + " " + args;
    if (std::system(cmd.c_str()) != 0) rc = 1;
  }
  return rc;
}
