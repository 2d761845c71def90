// Formatting helpers for CLI output (see text_format.h).
#include "cli/text_format.h"

#include <cstdio>

namespace pagedkv::cli {

std::string count_noun(int64_t n, std::string_view noun) {
  std::string out = std::to_string(n) + " " + std::string(noun);
  if (n != 1) out += "s";
  return out;
}

std::string human_bytes(uint64_t bytes) {
  if (bytes < 1024) return std::to_string(bytes) + "B";
  const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  double v = static_cast<double>(bytes) / 1024.0;
  int u = 0;
  while (v >= 1024.0 && u < 4) {
    v /= 1024.0;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof(buf), u >= 2 ? "%.2f%s" : "%.1f%s", v, units[u]);
  return buf;
}

}  // namespace pagedkv::cli
