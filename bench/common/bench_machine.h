// What a benchmark prints about the machine it measured on, so that a figure
// in docs/performance.md can be read against its conditions: the file system
// a directory lives on (tmpfs, ext4, ...), the load average, and the
// directories a disk benchmark measures on.
#pragma once

#include <string>
#include <vector>

namespace pagedkv::bench {

// The file-system type of `dir` as `df -T` names it; "?" when df cannot run.
std::string fs_type(const std::string& dir);

// The 1, 5 and 15 minute load averages from /proc/loadavg ("0.52 0.60 0.71").
std::string load_average();

// The directories of PAGEDKV_COLD_BENCH_DIRS (':'-separated, default
// "/var/tmp:/dev/shm"), those that do not exist skipped.
std::vector<std::string> cold_bench_dirs();

}  // namespace pagedkv::bench
