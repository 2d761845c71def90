// The machine description benchmarks print (see bench_machine.h).
#include "bench_machine.h"

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "util/knobs.h"

namespace pagedkv::bench {

std::string fs_type(const std::string& dir) {
  std::string out;
  FILE* p = ::popen(("df -T '" + dir + "' | tail -1 | awk '{print $2}'").c_str(), "r");
  if (!p) return "?";
  char buf[128];
  while (std::fgets(buf, sizeof(buf), p)) out += buf;
  ::pclose(p);
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

std::string load_average() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

std::vector<std::string> cold_bench_dirs() {
  std::vector<std::string> dirs;
  std::stringstream spec(env_string("PAGEDKV_COLD_BENCH_DIRS").value_or("/var/tmp:/dev/shm"));
  for (std::string d; std::getline(spec, d, ':');)
    if (!d.empty() && std::filesystem::is_directory(d)) dirs.push_back(d);
  return dirs;
}

}  // namespace pagedkv::bench
