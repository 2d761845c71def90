// Metrics: the server's counters and histograms (requests by endpoint and
// status, tokens, TTFT, inter-token latency, durations), the ring of recent
// requests the dashboard shows, and the renderers for GET /metrics (Prometheus
// text format 0.0.4, names in docs/server.md) and GET /v1/stats (JSON). Engine
// gauges (pool, running/waiting, preemptions) come in as an EngineSnapshot at
// render time. Thread-safe: one mutex, held only to update or copy.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <mutex>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/engine_session.h"

namespace pagedkv::server {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends `name`_bucket/_sum/_count lines.
  void render(const std::string& name, std::string* out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket (not cumulative); last = +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct RequestRecord {
  std::string id;
  std::string endpoint;
  std::string tenant;
  int status = 0;
  bool stream = false;
  int64_t prompt_tokens = 0, cached_tokens = 0, completion_tokens = 0;
  double ttft_ms = 0, total_ms = 0;
  std::string finish_reason;
  int64_t unix_time = 0;
};

struct ServerGauges {
  int64_t in_flight = 0;
  int64_t max_queue = 0;
  int32_t admission_width = 0;
  bool draining = false;
  double uptime_s = 0;
  std::string model;
};

class Metrics {
 public:
  Metrics();

  // Every HTTP answer (endpoint = route or "other").
  void count_http(const std::string& endpoint, int status);
  // A generation that ran: tokens, TTFT and per-token gaps (ms since submit).
  void record_generation(const RequestRecord& record, const std::vector<double>& token_ms);

  std::string render_prometheus(const EngineSnapshot& engine, const ServerGauges& server) const;
  // `tenant` filters the recent requests ("" = all).
  nlohmann::ordered_json stats_json(const EngineSnapshot& engine, const ServerGauges& server,
                                    const std::string& tenant) const;
  uint64_t requests_total() const;

  static constexpr size_t kRecent = 50;

 private:
  mutable std::mutex mu_;
  std::map<std::pair<std::string, int>, uint64_t> http_;
  uint64_t prompt_tokens_ = 0, cached_tokens_ = 0, completion_tokens_ = 0;
  Histogram ttft_, itl_, duration_;
  std::deque<RequestRecord> recent_;
};

}  // namespace pagedkv::server
