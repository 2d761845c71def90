// Minimal leveled logging to stderr. The threshold comes from PAGEDKV_LOG_LEVEL
// (debug|info|warn|error; default info). Usage: PKV_LOG(kInfo) << "pool grew to " << n;
// A line is written whole with one write(2), so lines from threads never interleave.
#pragma once

#include <sstream>
#include <string_view>

namespace pagedkv {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarn = 2, kError = 3 };

// Current threshold (read once from the environment, overridable).
LogLevel log_threshold();
void set_log_threshold(LogLevel level);

class LogLine {
 public:
  LogLine(LogLevel level, const char* file, int line);
  ~LogLine();
  template <typename T>
  LogLine& operator<<(const T& v) {
    stream_ << v;
    return *this;
  }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};

}  // namespace pagedkv

#define PKV_LOG(level)                                           \
  if (::pagedkv::LogLevel::level < ::pagedkv::log_threshold()) { \
  } else                                                         \
    ::pagedkv::LogLine(::pagedkv::LogLevel::level, __FILE__, __LINE__)
