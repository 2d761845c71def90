// HttpServer: the HTTP front of `pagedkv serve` (cpp-httplib). Routes the
// endpoints of docs/server.md, checks keys (tenants.h), parses each API's JSON
// (api_request.h and the three adapters), submits to the engine through
// EngineSession, and answers — a JSON body, or SSE events written as tokens
// arrive. It also owns the server-side limits (body size, queue depth, client
// timeouts), disconnect → cancel, metrics, and the SIGTERM drain.
//
// Threads: run() listens on the caller's thread; cpp-httplib's pool of
// --http-threads workers runs every handler, and a streaming response is
// written by the handler's worker until the request ends. Workers talk to the
// engine only through EngineSession (the engine's own thread-safe API); the
// server's own shared state is atomics plus two mutexes (the active-request set
// and Metrics). shutdown() may be called from any thread (the signal thread).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>

#include "pagedkv/status.h"
#include "server/engine_session.h"
#include "server/metrics.h"
#include "server/tenants.h"

namespace httplib {
class Server;
struct Request;
struct Response;
}  // namespace httplib

namespace pagedkv::server {

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 8000;  // 0 = any free port
  std::string served_model_name = "default";
  std::optional<ApiKeys> api_keys;  // nullopt: single tenant "default"
  ServerSecret secret{};
  size_t max_body_bytes = 4u << 20;
  int64_t max_queue = 256;
  int http_threads = 512;
  int read_timeout_s = 10;
  int write_timeout_s = 10;
  int keep_alive_timeout_s = 5;
  double drain_timeout_s = 30;
  int64_t default_max_tokens = 256;
};

class HttpServer {
 public:
  HttpServer(EngineSession& engine, ServerOptions options);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds host:port (IOError naming the address when it cannot).
  Status bind();
  int port() const { return port_; }
  // Serves until shutdown() has drained every request; then returns.
  void run();
  // Stops accepting, lets in-flight requests finish within drain_timeout_s
  // (then cancels them). Idempotent; any thread.
  void shutdown();
  bool draining() const { return draining_.load(); }
  int64_t in_flight() const { return in_flight_.load(); }

  Metrics& metrics() { return metrics_; }

  class Run;  // one generation request being served (http_server.cc)

 private:
  void install_routes();
  void handle_generate(const httplib::Request& req, httplib::Response& res, int kind);
  // The caller's tenant, or nullopt (401 written) when the key is missing/wrong.
  std::optional<std::string> authenticate(const httplib::Request& req, httplib::Response& res,
                                          int style);
  ServerGauges gauges() const;
  void track(const std::shared_ptr<Run>& run, bool add);
  void drain_watchdog();

  EngineSession& engine_;
  ServerOptions opt_;
  std::unique_ptr<httplib::Server> http_;
  int port_ = -1;
  Metrics metrics_;
  std::atomic<int64_t> in_flight_{0};
  std::atomic<bool> draining_{false};
  std::chrono::steady_clock::time_point started_;
  std::mutex active_mu_;
  std::set<std::shared_ptr<Run>> active_;
  std::thread watchdog_;
  std::mutex shutdown_mu_;
};

}  // namespace pagedkv::server
