// How a benchmark program reads its flags: the CLI's ArgParser (src/cli/args.h),
// so --help lists exactly the flags that parse, and an unknown flag, a missing
// value or a value that is not a number in range is an error naming the flag
// (exit 2) instead of being ignored. Typical use:
//
//   cli::ArgParser flags("", "what the program measures", "bench_x");
//   flags.add_option("reps", "N", "repetitions; the best is kept", "3");
//   if (auto rc = flags.parse_or_exit_code(argc, argv)) return *rc;
//   const int reps = bench::int_flag(flags, "reps", 1);
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <string>

#include "cli/args.h"

namespace pagedkv::bench {

// --name as an integer in [lo, hi]; prints "error: ..." and exits 2 when it is not.
inline int64_t int_flag(const cli::ArgParser& flags, const std::string& name, int64_t lo = 0,
                        int64_t hi = std::numeric_limits<int32_t>::max()) {
  StatusOr<int64_t> v = flags.get_int_in(name, lo, hi);
  if (!v.ok()) {
    std::fprintf(stderr, "error: %s\n", v.status().message().c_str());
    std::exit(2);
  }
  return *v;
}

}  // namespace pagedkv::bench
