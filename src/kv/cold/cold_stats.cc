// ColdCacheStats helpers and the per-turn JSONL trace writer.
#include "kv/cold/cold_stats.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <ctime>
#include <nlohmann/json.hpp>

#include "util/file_system.h"
#include "util/knobs.h"

namespace pagedkv::cold {

ColdCacheStats cold_stats_delta(const ColdCacheStats& before, const ColdCacheStats& after) {
  auto d = [](uint64_t a, uint64_t b) { return b >= a ? b - a : 0; };
  ColdCacheStats out = after;
  out.hits = d(before.hits, after.hits);
  out.misses = d(before.misses, after.misses);
  out.enqueued = d(before.enqueued, after.enqueued);
  out.queue_drops = d(before.queue_drops, after.queue_drops);
  out.bytes_written = d(before.bytes_written, after.bytes_written);
  out.reads = d(before.reads, after.reads);
  out.bytes_restored = d(before.bytes_restored, after.bytes_restored);
  out.evictions = d(before.evictions, after.evictions);
  out.corruptions = d(before.corruptions, after.corruptions);
  out.write_errors = d(before.write_errors, after.write_errors);
  out.restore_declines = d(before.restore_declines, after.restore_declines);
  return out;
}

std::string cold_stats_json(const ColdCacheStats& s) {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for_each_cold_stat(
      s, [&](std::string_view n, uint64_t v) { j[std::string(n)] = v; },
      [&](std::string_view n, bool v) { j[std::string(n)] = v; },
      [&](std::string_view n, const std::string& v) { j[std::string(n)] = v; });
  return j.dump();
}

void ColdCounters::fill(ColdCacheStats* s) const {
  s->hits = hits.load();
  s->misses = misses.load();
  s->enqueued = enqueued.load();
  s->queue_drops = queue_drops.load();
  s->bytes_written = bytes_written.load();
  s->reads = reads.load();
  s->bytes_restored = bytes_restored.load();
  s->evictions = evictions.load();
  s->corruptions = corruptions.load();
  s->write_errors = write_errors.load();
  s->restore_declines = restore_declines.load();
}

std::string default_metrics_dir() {
  if (auto d = env_string("PAGEDKV_METRICS_DIR")) return *d;
  if (auto x = env_string("XDG_CACHE_HOME")) return join_path(join_path(*x, "pagedkv"), "metrics");
  std::string home = env_string("HOME").value_or("/tmp");
  return join_path(join_path(join_path(home, ".cache"), "pagedkv"), "metrics");
}

StatusOr<ColdTraceWriter> ColdTraceWriter::open(std::optional<std::string> metrics_dir) {
  std::string dir = join_path(metrics_dir ? *metrics_dir : default_metrics_dir(), "traces");
  PKV_RETURN_IF_ERROR(FileSystem::posix().create_dirs(dir, 0700));
  std::time_t now = std::time(nullptr);
  std::tm tm{};
  gmtime_r(&now, &tm);
  char date[16];
  std::strftime(date, sizeof(date), "%Y-%m-%d", &tm);
  ColdTraceWriter w;
  w.path_ = join_path(dir, std::string(date) + "-" + std::to_string(::getpid()) + ".jsonl");
  return w;
}

Status ColdTraceWriter::append_turn(uint64_t turn, const ColdCacheStats& before,
                                    const ColdCacheStats& after, const std::string& extra_json) {
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch())
                      .count();
  std::string body = cold_stats_json(cold_stats_delta(before, after));  // "{...}"
  std::string line = "{\"ts\":" + std::to_string(ms) + ",\"turn\":" + std::to_string(turn) +
                     ",\"event\":\"cold_turn\"," + body.substr(1, body.size() - 2);
  if (!extra_json.empty()) line += "," + extra_json;
  line += "}\n";
  int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
  if (fd < 0) return io_error("open trace '" + path_ + "': " + std::strerror(errno));
  ssize_t n = ::write(fd, line.data(), line.size());
  int e = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(line.size())) {
    return io_error("append trace '" + path_ + "': " + (n < 0 ? std::strerror(e) : "short write"));
  }
  return ok_status();
}

}  // namespace pagedkv::cold
