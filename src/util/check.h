// Invariant checks. PKV_CHECK holds in every build and aborts with the failing
// condition and location; PKV_DCHECK is compiled out of release builds (NDEBUG)
// and is meant for hot paths. Neither is for validating user input: bad input
// gets a Status (include/pagedkv/status.h).
#pragma once

#include <cstdio>
#include <cstdlib>

namespace pagedkv::detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const char* msg);
}  // namespace pagedkv::detail

#define PKV_CHECK(cond)                                                    \
  do {                                                                     \
    if (!(cond)) [[unlikely]]                                              \
      ::pagedkv::detail::check_failed(__FILE__, __LINE__, #cond, nullptr); \
  } while (0)

#define PKV_CHECK_MSG(cond, msg)                                       \
  do {                                                                 \
    if (!(cond)) [[unlikely]]                                          \
      ::pagedkv::detail::check_failed(__FILE__, __LINE__, #cond, msg); \
  } while (0)

#ifdef NDEBUG
#define PKV_DCHECK(cond) \
  do {                   \
  } while (0 && (cond))
#else
#define PKV_DCHECK(cond) PKV_CHECK(cond)
#endif
