// Metrics and their renderers (metrics.h).
#include "server/metrics.h"

#include <cstdio>

namespace pagedkv::server {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "%.9g", v);
  return buf;
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void metric(std::string* out, const char* name, const char* type, const char* help) {
  *out += "# HELP ";
  *out += name;
  *out += " ";
  *out += help;
  *out += "\n# TYPE ";
  *out += name;
  *out += " ";
  *out += type;
  *out += "\n";
}

void sample(std::string* out, const std::string& name, double v) {
  *out += name + " " + num(v) + "\n";
}

// The cold tier is on, or was asked for and failed to open (then
// cold.open_error says why).
bool has_cold(const EngineSnapshot& e) { return e.cold.enabled || e.cold.open_errors > 0; }

double hit_rate(const EngineSnapshot& e) {
  return e.prompt_tokens
             ? static_cast<double>(e.cached_prompt_tokens) / static_cast<double>(e.prompt_tokens)
             : 0.0;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double v) {
  size_t i = 0;
  while (i < bounds_.size() && v > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += v;
  ++count_;
}

void Histogram::render(const std::string& name, std::string* out) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    *out += name + "_bucket{le=\"" + num(bounds_[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  cum += counts_.back();
  *out += name + "_bucket{le=\"+Inf\"} " + std::to_string(cum) + "\n";
  *out += name + "_sum " + num(sum_) + "\n";
  *out += name + "_count " + std::to_string(count_) + "\n";
}

Metrics::Metrics()
    : ttft_({0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60}),
      itl_({0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5}),
      duration_({0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300}) {}

void Metrics::count_http(const std::string& endpoint, int status) {
  std::lock_guard<std::mutex> lk(mu_);
  ++http_[{endpoint, status}];
}

void Metrics::record_generation(const RequestRecord& r, const std::vector<double>& token_ms) {
  std::lock_guard<std::mutex> lk(mu_);
  prompt_tokens_ += static_cast<uint64_t>(r.prompt_tokens);
  cached_tokens_ += static_cast<uint64_t>(r.cached_tokens);
  completion_tokens_ += static_cast<uint64_t>(r.completion_tokens);
  if (!token_ms.empty()) ttft_.observe(r.ttft_ms / 1000.0);
  for (size_t i = 1; i < token_ms.size(); ++i)
    itl_.observe((token_ms[i] - token_ms[i - 1]) / 1000.0);
  duration_.observe(r.total_ms / 1000.0);
  recent_.push_front(r);
  if (recent_.size() > kRecent) recent_.pop_back();
}

uint64_t Metrics::requests_total() const {
  std::lock_guard<std::mutex> lk(mu_);
  uint64_t n = 0;
  for (const auto& [k, v] : http_) n += v;
  return n;
}

std::string Metrics::render_prometheus(const EngineSnapshot& e, const ServerGauges& s) const {
  std::string out;
  {
    std::lock_guard<std::mutex> lk(mu_);
    metric(&out, "pagedkv_http_requests_total", "counter", "HTTP requests by endpoint and status");
    for (const auto& [k, v] : http_)
      out += "pagedkv_http_requests_total{endpoint=\"" + escape_label(k.first) + "\",status=\"" +
             std::to_string(k.second) + "\"} " + std::to_string(v) + "\n";
    metric(&out, "pagedkv_prompt_tokens_total", "counter", "prompt tokens of served requests");
    sample(&out, "pagedkv_prompt_tokens_total", static_cast<double>(prompt_tokens_));
    metric(&out, "pagedkv_cached_prompt_tokens_total", "counter",
           "prompt tokens served from the KV cache");
    sample(&out, "pagedkv_cached_prompt_tokens_total", static_cast<double>(cached_tokens_));
    metric(&out, "pagedkv_completion_tokens_total", "counter", "generated tokens");
    sample(&out, "pagedkv_completion_tokens_total", static_cast<double>(completion_tokens_));
    metric(&out, "pagedkv_time_to_first_token_seconds", "histogram", "submit to first token");
    ttft_.render("pagedkv_time_to_first_token_seconds", &out);
    metric(&out, "pagedkv_inter_token_latency_seconds", "histogram", "gap between tokens");
    itl_.render("pagedkv_inter_token_latency_seconds", &out);
    metric(&out, "pagedkv_request_duration_seconds", "histogram", "submit to finish");
    duration_.render("pagedkv_request_duration_seconds", &out);
  }
  metric(&out, "pagedkv_prefix_hit_rate", "gauge", "engine cached / prompt tokens since start");
  sample(&out, "pagedkv_prefix_hit_rate", hit_rate(e));
  metric(&out, "pagedkv_kv_blocks", "gauge", "KV pool blocks by state");
  sample(&out, "pagedkv_kv_blocks{state=\"used\"}", e.pool.used_blocks);
  sample(&out, "pagedkv_kv_blocks{state=\"cached\"}", e.pool.cached_blocks);
  sample(&out, "pagedkv_kv_blocks{state=\"free\"}", e.pool.free_blocks);
  sample(&out, "pagedkv_kv_blocks{state=\"total\"}", e.pool.num_blocks);
  sample(&out, "pagedkv_kv_blocks{state=\"max\"}", e.pool.max_blocks);
  metric(&out, "pagedkv_preemptions_total", "counter", "requests preempted and recomputed");
  sample(&out, "pagedkv_preemptions_total", static_cast<double>(e.preemptions));
  metric(&out, "pagedkv_requests_running", "gauge", "requests the engine is running");
  sample(&out, "pagedkv_requests_running", e.running);
  metric(&out, "pagedkv_requests_waiting", "gauge", "requests waiting for admission");
  sample(&out, "pagedkv_requests_waiting", e.waiting);
  metric(&out, "pagedkv_queue_depth", "gauge", "requests waiting for admission");
  sample(&out, "pagedkv_queue_depth", e.waiting);
  metric(&out, "pagedkv_requests_in_flight", "gauge", "generation requests the server holds");
  sample(&out, "pagedkv_requests_in_flight", static_cast<double>(s.in_flight));
  metric(&out, "pagedkv_engine_requests_total", "counter", "engine requests by outcome");
  sample(&out, "pagedkv_engine_requests_total{outcome=\"submitted\"}",
         static_cast<double>(e.submitted));
  sample(&out, "pagedkv_engine_requests_total{outcome=\"finished\"}",
         static_cast<double>(e.finished));
  sample(&out, "pagedkv_engine_requests_total{outcome=\"cancelled\"}",
         static_cast<double>(e.cancelled));
  sample(&out, "pagedkv_engine_requests_total{outcome=\"error\"}", static_cast<double>(e.errors));
  sample(&out, "pagedkv_engine_requests_total{outcome=\"rejected\"}",
         static_cast<double>(e.rejected));
  if (has_cold(e)) {
    auto counter = [&](const char* name, const char* help, uint64_t v) {
      metric(&out, name, "counter", help);
      sample(&out, name, static_cast<double>(v));
    };
    counter("pagedkv_cold_hits_total", "cold-tier objects read, verified and restored",
            e.cold.hits);
    counter("pagedkv_cold_misses_total", "cold-tier lookups that found no object", e.cold.misses);
    counter("pagedkv_cold_restored_tokens_total", "prompt tokens restored from the cold tier",
            e.cold.restored_tokens);
    counter("pagedkv_cold_corruptions_total", "cold-tier objects that failed verification",
            e.cold.corruptions);
    counter("pagedkv_cold_queue_drops_total", "captures the cold-tier writer queue refused",
            e.cold.queue_drops);
    counter("pagedkv_cold_bytes_written_total", "bytes the cold-tier writer wrote",
            e.cold.bytes_written);
    counter("pagedkv_cold_open_errors_total", "cold-tier directories that could not be opened",
            e.cold.open_errors);
  }
  return out;
}

nlohmann::ordered_json Metrics::stats_json(const EngineSnapshot& e, const ServerGauges& s,
                                           const std::string& tenant) const {
  using J = nlohmann::ordered_json;
  J j;
  j["model"] = s.model;
  j["uptime_s"] = s.uptime_s;
  j["draining"] = s.draining;
  J eng;
  eng["steps"] = e.steps;
  eng["running"] = e.running;
  eng["waiting"] = e.waiting;
  eng["live_owners"] = e.live_owners;
  eng["submitted"] = e.submitted;
  eng["finished"] = e.finished;
  eng["cancelled"] = e.cancelled;
  eng["errors"] = e.errors;
  eng["rejected"] = e.rejected;
  eng["preemptions"] = e.preemptions;
  eng["prompt_tokens"] = e.prompt_tokens;
  eng["cached_prompt_tokens"] = e.cached_prompt_tokens;  // hot + cold
  eng["cached_prompt_tokens_hot"] = e.cached_prompt_tokens_hot;
  eng["cached_prompt_tokens_cold"] = e.cached_prompt_tokens_cold;
  eng["completion_tokens"] = e.completion_tokens;
  eng["prefix_hit_rate"] = hit_rate(e);
  j["engine"] = eng;
  J pool;
  pool["num_blocks"] = e.pool.num_blocks;
  pool["max_blocks"] = e.pool.max_blocks;
  pool["used_blocks"] = e.pool.used_blocks;
  pool["cached_blocks"] = e.pool.cached_blocks;
  pool["free_blocks"] = e.pool.free_blocks;
  pool["block_size"] = e.pool.block_size;
  j["pool"] = pool;
  if (has_cold(e)) {
    J cold;
    cold["hits"] = e.cold.hits;
    cold["misses"] = e.cold.misses;
    cold["restored_tokens"] = e.cold.restored_tokens;
    cold["corruptions"] = e.cold.corruptions;
    cold["queue_drops"] = e.cold.queue_drops;
    cold["bytes"] = e.cold.bytes_written;  // written by the writer
    cold["open_errors"] = e.cold.open_errors;
    cold["open_error"] = e.cold.open_error;
    j["cold"] = cold;
  } else {
    j["cold"] = nullptr;
  }
  J server;
  server["in_flight"] = s.in_flight;
  server["requests_total"] = requests_total();
  server["max_queue"] = s.max_queue;
  server["admission_width"] = s.admission_width;
  j["server"] = server;
  J recent = J::array();
  std::lock_guard<std::mutex> lk(mu_);
  for (const auto& r : recent_) {
    if (!tenant.empty() && r.tenant != tenant) continue;
    J x;
    x["id"] = r.id;
    x["endpoint"] = r.endpoint;
    x["status"] = r.status;
    x["stream"] = r.stream;
    x["prompt_tokens"] = r.prompt_tokens;
    x["cached_tokens"] = r.cached_tokens;
    x["completion_tokens"] = r.completion_tokens;
    x["ttft_ms"] = r.ttft_ms;
    x["total_ms"] = r.total_ms;
    x["finish_reason"] = r.finish_reason;
    x["unix_time"] = r.unix_time;
    recent.push_back(std::move(x));
  }
  j["recent"] = recent;
  return j;
}

}  // namespace pagedkv::server
