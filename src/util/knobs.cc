// Environment parsing for knobs (see knobs.h for the rules).
#include "util/knobs.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>

#include "util/logging.h"

namespace pagedkv {
namespace {

void warn_unparseable(const char* name, const std::string& value, const char* what) {
  PKV_LOG(kWarn) << "ignoring " << name << "='" << value << "': not " << what
                 << " (using the config value or default)";
}

}  // namespace

std::optional<std::string> env_string(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr) return std::nullopt;
  std::string s(v);
  bool blank = std::all_of(s.begin(), s.end(), [](unsigned char c) { return std::isspace(c); });
  if (blank) return std::nullopt;
  return s;
}

std::optional<uint64_t> parse_u64(const std::string& s) {
  if (s.empty() || !std::isdigit(static_cast<unsigned char>(s[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  unsigned long long v = std::strtoull(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
  return static_cast<uint64_t>(v);
}

std::optional<int64_t> parse_i64(const std::string& s) {
  if (s.empty()) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  long long v = std::strtoll(s.c_str(), &end, 10);
  if (errno != 0 || end != s.c_str() + s.size() || std::isspace(static_cast<unsigned char>(s[0])))
    return std::nullopt;
  return static_cast<int64_t>(v);
}

std::optional<double> parse_double(const std::string& s) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return std::nullopt;
  errno = 0;
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  if (errno != 0 || end != s.c_str() + s.size()) return std::nullopt;
  return v;
}

std::optional<bool> parse_bool(const std::string& s) {
  std::string l = s;
  std::transform(l.begin(), l.end(), l.begin(), [](unsigned char c) { return std::tolower(c); });
  if (l == "1" || l == "true" || l == "yes" || l == "on") return true;
  if (l == "0" || l == "false" || l == "no" || l == "off") return false;
  return std::nullopt;
}

std::optional<uint64_t> env_u64(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  auto v = parse_u64(*s);
  if (!v) warn_unparseable(name, *s, "an unsigned integer");
  return v;
}

std::optional<int64_t> env_i64(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  auto v = parse_i64(*s);
  if (!v) warn_unparseable(name, *s, "an integer");
  return v;
}

std::optional<double> env_double(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  auto v = parse_double(*s);
  if (!v) warn_unparseable(name, *s, "a number");
  return v;
}

std::optional<bool> env_bool(const char* name) {
  auto s = env_string(name);
  if (!s) return std::nullopt;
  auto v = parse_bool(*s);
  if (!v) warn_unparseable(name, *s, "a boolean (1/0, true/false, yes/no, on/off)");
  return v;
}

}  // namespace pagedkv
