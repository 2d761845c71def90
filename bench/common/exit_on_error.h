// How a benchmark program handles a failed Status: it is a plain program with
// no caller to return to, so it prints "error: <status>" to stderr and exits 1.
#pragma once

#include <cstdio>
#include <cstdlib>

#include "pagedkv/status.h"

namespace pagedkv::bench {

inline void exit_on_error(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "error: %s\n", s.to_string().c_str());
    std::exit(1);
  }
}

}  // namespace pagedkv::bench
