// HttpServer (http_server.h): routes, auth, limits, the generation request's
// life on the HTTP side (Run), and the drain.
#include "server/http_server.h"

#include <httplib.h>
#include <openssl/rand.h>

#include <ctime>

#include "server/api_request.h"
#include "server/completion.h"
#include "server/connection_probe.h"
#include "server/dashboard.h"
#include "server/json_text.h"
#include "server/text_assembler.h"
#include "tokenizer/tokenizer.h"
#include "util/logging.h"

namespace pagedkv::server {
namespace {

constexpr auto kPoll = std::chrono::milliseconds(50);

ApiStyle style_for_path(const std::string& path) {
  return path.rfind("/v1/messages", 0) == 0 ? ApiStyle::kAnthropic : ApiStyle::kOpenAI;
}

std::string route_of(const std::string& path) {
  static const char* kRoutes[] = {"/v1/chat/completions",
                                  "/v1/completions",
                                  "/v1/responses",
                                  "/v1/messages",
                                  "/v1/models",
                                  "/v1/stats",
                                  "/health",
                                  "/metrics",
                                  "/"};
  for (const char* r : kRoutes)
    if (path == r) return r;
  return "other";
}

void write_error(httplib::Response& res, ApiStyle style, const ApiError& e) {
  res.status = e.status;
  if (e.status == 429) res.set_header("Retry-After", "1");
  res.set_content(error_body(style, e), "application/json");
}

// After a request it could not parse (or whose body it will not read) the server
// cannot find the next request's start on the connection: the answer says
// `Connection: close` and cpp-httplib closes the socket after it (it honours
// the request's Connection header when it writes the response).
void close_after(const httplib::Request& req, httplib::Response& res) {
  // The Request cpp-httplib hands to its handlers is its own non-const local.
  auto& headers = const_cast<httplib::Request&>(req).headers;
  headers.erase("Connection");
  headers.emplace("Connection", "close");
  res.headers.erase("Connection");
}

// A Content-Length that is not a plain decimal number (cpp-httplib reads it
// with strtoull, which wraps "-5" to a huge length and answers 413).
bool invalid_content_length(const httplib::Request& req, std::string* value) {
  if (!req.has_header("Content-Length")) return false;
  if (req.get_header_value_count("Content-Length") > 1) {
    *value = "(given more than once)";
    return true;
  }
  *value = req.get_header_value("Content-Length");
  if (value->empty()) return true;
  for (char c : *value)
    if (c < '0' || c > '9') return true;
  return false;
}

int64_t unix_now() { return static_cast<int64_t>(std::time(nullptr)); }

uint64_t random_seed() {
  uint64_t s = 0;
  if (RAND_bytes(reinterpret_cast<unsigned char*>(&s), sizeof(s)) != 1)
    s = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
  return s;
}

const char* finish_label(Finish f) {
  switch (f) {
    case Finish::kStop:
      return "stop";
    case Finish::kStopString:
      return "stop_string";
    case Finish::kLength:
      return "length";
    case Finish::kCancelled:
      return "cancelled";
    case Finish::kError:
      return "error";
  }
  return "";
}

}  // namespace

// One generation request on the HTTP side: pulls tokens from the engine,
// assembles text (stop strings), writes SSE or the final body, cancels on a
// stop string or a lost client, and accounts once at the end.
class HttpServer::Run {
 public:
  Run(HttpServer& server, ApiRequest request, std::shared_ptr<Generation> gen,
      ConnectionProbe probe, Completion meta, std::string tenant)
      : server_(server),
        req_(std::move(request)),
        gen_(std::move(gen)),
        probe_(probe),
        assembler_(server.engine_.tokenizer(), req_.stop),
        c_(std::move(meta)),
        tenant_(std::move(tenant)) {}

  // Takes one event; false once the engine finished and every token was taken.
  // Appends newly final text to *text.
  bool step(std::string* text) {
    Generation::Event ev = gen_->next(kPoll);
    // The client's socket is checked every kPoll, whether tokens flow or not.
    const auto now = std::chrono::steady_clock::now();
    if (!client_gone_ && now - last_probe_ >= kPoll) {
      last_probe_ = now;
      if (probe_.peer_gone()) lose_client();
    }
    switch (ev.kind) {
      case Generation::Event::kToken:
        if (assembler_.stopped()) return true;  // output after a stop string
        ++tokens_;
        *text += assembler_.push(ev.token);
        if (assembler_.stopped()) gen_->cancel();
        return true;
      case Generation::Event::kIdle:
        return true;
      case Generation::Event::kDone:
        return false;
    }
    return false;
  }

  // After the engine finished: the rest of the text and the Completion.
  std::string conclude() {
    GenerationResult r = gen_->result();
    std::string tail;
    if (assembler_.stopped()) {
      c_.finish = Finish::kStopString;
      c_.stop_string = assembler_.matched_stop();
    } else {
      tail = assembler_.finish();
      switch (r.finish) {
        case EngineFinish::kLength:
          c_.finish = Finish::kLength;
          break;
        case EngineFinish::kCancelled:
          c_.finish = Finish::kCancelled;
          break;
        case EngineFinish::kError:
          c_.finish = Finish::kError;
          error_ = r.error;
          break;
        default:
          c_.finish = Finish::kStop;
      }
    }
    c_.text = assembler_.text();
    c_.cached_tokens = r.cached_tokens;
    if (r.prompt_tokens > 0) c_.prompt_tokens = r.prompt_tokens;
    c_.completion_tokens = assembler_.stopped() ? tokens_ : r.completion_tokens;
    result_ = std::move(r);
    return tail;
  }

  // The error to report for a cancelled / failed request.
  ApiError failure() const {
    if (c_.finish == Finish::kError) return server_error("engine error: " + error_.to_string());
    return unavailable("the request was cancelled: the server is shutting down");
  }

  void lose_client() {
    client_gone_ = true;
    gen_->cancel();
  }

  // Non-streaming: runs to the end; fills `res`.
  void serve_blocking(httplib::Response& res) {
    std::string ignored;
    while (step(&ignored)) ignored.clear();
    conclude();
    const ApiStyle style = style_of(req_.kind);
    if (c_.finish == Finish::kCancelled || c_.finish == Finish::kError) {
      if (client_gone_) status_ = 499;  // nobody to answer (nginx's "client closed")
      write_error(res, style, failure());
      if (!client_gone_) status_ = res.status;
    } else {
      res.status = 200;
      res.set_content(render_completion(req_, c_), "application/json");
      status_ = 200;
    }
    account();
  }

  // Streaming: writes every event into `sink`; false when the client is gone.
  bool serve_stream(httplib::DataSink& sink) {
    auto encoder = make_stream_encoder(req_);
    auto write = [&](const std::string& s) {
      if (s.empty() || client_gone_) return !client_gone_;
      if (!sink.write(s.data(), s.size())) lose_client();
      return !client_gone_;
    };
    // The opening event (Anthropic's message_start) carries the cached-token
    // count, which the engine knows once it admitted the request: wait for
    // that (or the end) first; tokens that arrive meanwhile are held in `text`.
    std::string text;
    bool more = true;
    while (more && !gen_->admitted_cached_tokens()) more = step(&text);
    if (auto cached = gen_->admitted_cached_tokens()) c_.cached_tokens = *cached;
    write(encoder->begin(c_));
    if (!text.empty()) {
      write(encoder->delta(text));
      text.clear();
    }
    while (more && step(&text)) {
      if (!text.empty()) {
        write(encoder->delta(text));
        text.clear();
      }
    }
    if (!text.empty()) write(encoder->delta(text));
    std::string tail = conclude();
    if (!tail.empty()) write(encoder->delta(tail));
    if (c_.finish == Finish::kCancelled || c_.finish == Finish::kError)
      write(encoder->error(failure()));
    else
      write(encoder->end(c_));
    status_ = client_gone_ ? 499 : 200;
    if (!client_gone_) sink.done();
    account();
    return !client_gone_;
  }

  // Called when the response is released (success or not).
  void released(bool success) {
    if (!success && !gen_->done()) lose_client();
    if (!accounted_) {
      // The provider never ran to the end (the client went away first).
      while (!gen_->done()) gen_->next(kPoll);
      conclude();
      status_ = 499;
      account();
    }
  }

  void cancel() { gen_->cancel(); }

 private:
  void account() {
    if (accounted_) return;
    accounted_ = true;
    RequestRecord rec;
    rec.id = c_.id;
    rec.endpoint = std::string(endpoint_path(req_.kind));
    rec.tenant = tenant_;
    rec.status = status_;
    rec.stream = req_.stream;
    rec.prompt_tokens = c_.prompt_tokens;
    rec.cached_tokens = c_.cached_tokens;
    rec.completion_tokens = c_.completion_tokens;
    rec.ttft_ms = result_.ttft_ms;
    rec.total_ms = result_.total_ms;
    rec.finish_reason = finish_label(c_.finish);
    rec.unix_time = unix_now();
    std::vector<double> token_ms = result_.token_ms;
    if (assembler_.stopped() && token_ms.size() > static_cast<size_t>(tokens_))
      token_ms.resize(static_cast<size_t>(tokens_));
    server_.metrics_.record_generation(rec, token_ms);
    server_.in_flight_.fetch_sub(1);
  }

  HttpServer& server_;
  ApiRequest req_;
  std::shared_ptr<Generation> gen_;
  ConnectionProbe probe_;
  TextAssembler assembler_;
  Completion c_;
  std::string tenant_;
  GenerationResult result_;
  Status error_;
  int64_t tokens_ = 0;
  int status_ = 200;
  bool client_gone_ = false;
  std::chrono::steady_clock::time_point last_probe_ = std::chrono::steady_clock::now();
  bool accounted_ = false;
};

HttpServer::HttpServer(EngineSession& engine, ServerOptions options)
    : engine_(engine), opt_(std::move(options)), http_(std::make_unique<httplib::Server>()) {
  started_ = std::chrono::steady_clock::now();
  const int threads = opt_.http_threads < 1 ? 1 : opt_.http_threads;
  http_->new_task_queue = [threads] { return new httplib::ThreadPool(threads); };
  http_->set_payload_max_length(opt_.max_body_bytes);
  http_->set_read_timeout(opt_.read_timeout_s, 0);
  http_->set_write_timeout(opt_.write_timeout_s, 0);
  http_->set_keep_alive_timeout(opt_.keep_alive_timeout_s);
  install_routes();
}

HttpServer::~HttpServer() {
  shutdown();
  if (watchdog_.joinable()) watchdog_.join();
}

Status HttpServer::bind() {
  if (opt_.port == 0) {
    port_ = http_->bind_to_any_port(opt_.host);
    if (port_ < 0) return io_error("cannot bind " + opt_.host + " (any port)");
  } else {
    if (!http_->bind_to_port(opt_.host, opt_.port))
      return io_error("cannot bind " + opt_.host + ":" + std::to_string(opt_.port) +
                      " (in use, or not an address of this machine)");
    port_ = opt_.port;
  }
  return ok_status();
}

void HttpServer::run() {
  if (!draining_.load()) http_->listen_after_bind();
  std::lock_guard<std::mutex> lk(shutdown_mu_);
  if (watchdog_.joinable()) watchdog_.join();
}

void HttpServer::shutdown() {
  std::lock_guard<std::mutex> lk(shutdown_mu_);
  if (draining_.exchange(true)) return;
  http_->stop();
  watchdog_ = std::thread([this] { drain_watchdog(); });
}

void HttpServer::drain_watchdog() {
  const auto deadline =
      std::chrono::steady_clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(opt_.drain_timeout_s * 1000));
  while (in_flight_.load() > 0 && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  if (in_flight_.load() > 0) {
    PKV_LOG(kWarn) << "serve: drain deadline passed; cancelling " << in_flight_.load()
                   << " request(s)";
    std::lock_guard<std::mutex> lk(active_mu_);
    for (const auto& r : active_) r->cancel();
  }
}

void HttpServer::track(const std::shared_ptr<Run>& run, bool add) {
  std::lock_guard<std::mutex> lk(active_mu_);
  if (add)
    active_.insert(run);
  else
    active_.erase(run);
}

ServerGauges HttpServer::gauges() const {
  ServerGauges g;
  g.in_flight = in_flight_.load();
  g.max_queue = opt_.max_queue;
  g.admission_width = engine_.admission_width();
  g.draining = draining_.load();
  g.uptime_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - started_).count();
  g.model = opt_.served_model_name;
  return g;
}

std::optional<std::string> HttpServer::authenticate(const httplib::Request& req,
                                                    httplib::Response& res, int style) {
  if (!opt_.api_keys) return std::string(kDefaultTenant);
  std::string key;
  const std::string auth = req.get_header_value("Authorization");
  if (auth.rfind("Bearer ", 0) == 0) key = auth.substr(7);
  if (key.empty()) key = req.get_header_value("x-api-key");
  if (key.empty()) {
    write_error(res, static_cast<ApiStyle>(style),
                unauthorized("missing API key: send `Authorization: Bearer KEY` or "
                             "`x-api-key: KEY`"));
    return std::nullopt;
  }
  auto tenant = opt_.api_keys->tenant_for(key);
  if (!tenant) {
    write_error(res, static_cast<ApiStyle>(style), unauthorized("invalid API key"));
    return std::nullopt;
  }
  return tenant;
}

void HttpServer::handle_generate(const httplib::Request& req, httplib::Response& res,
                                 int kind_int) {
  const ApiKind kind = static_cast<ApiKind>(kind_int);
  const ApiStyle style = style_of(kind);
  auto tenant = authenticate(req, res, static_cast<int>(style));
  if (!tenant) return;
  if (draining_.load()) return write_error(res, style, unavailable("the server is shutting down"));

  Json body;
  try {
    body = Json::parse(req.body);
  } catch (const nlohmann::json::exception& e) {
    return write_error(res, style, bad_request(std::string("malformed JSON body: ") + e.what()));
  }
  ApiRequest api;
  if (auto err = parse_request(kind, body, &api)) return write_error(res, style, *err);
  if (api.model != opt_.served_model_name)
    return write_error(res, style,
                       not_found_error("model '" + api.model +
                                           "' does not exist; this server "
                                           "serves '" +
                                           opt_.served_model_name + "'",
                                       "model_not_found"));

  GenerationSpec spec;
  if (api.is_chat()) {
    auto ids = engine_.format_chat(dump_json(api.messages));
    if (!ids.ok()) return write_error(res, style, from_status(ids.status(), "messages"));
    spec.prompt = std::move(*ids);
  } else if (api.has_prompt_ids) {
    spec.prompt = api.prompt_ids;
  } else {
    spec.prompt = engine_.tokenizer().encode(api.prompt_text, /*add_special_tokens=*/true);
  }
  if (spec.prompt.empty())
    return write_error(res, style, bad_request("the prompt encodes to no tokens"));
  int64_t max_tokens = api.max_tokens.value_or(opt_.default_max_tokens);
  if (max_tokens > INT32_MAX) max_tokens = INT32_MAX;
  spec.max_tokens = static_cast<int32_t>(max_tokens);
  spec.temperature = api.temperature.value_or(0.0);
  spec.top_k = api.top_k;
  spec.top_p = api.top_p;
  spec.min_p = api.min_p;
  spec.seed = api.seed ? *api.seed : (spec.temperature > 0 ? random_seed() : 0);
  TenantDomain domain(opt_.secret, *tenant);
  spec.cache_salt = domain.cache_salt(api.cache_salt);
  spec.owner = domain.owner(api.prompt_cache_key);

  // Admission: the engine's width plus the queue.
  const int64_t limit = engine_.admission_width() + opt_.max_queue;
  if (in_flight_.fetch_add(1) + 1 > limit) {
    in_flight_.fetch_sub(1);
    return write_error(res, style,
                       rate_limited("the server is at capacity (" + std::to_string(limit) +
                                    " requests in flight); retry later"));
  }
  auto gen = engine_.submit(spec);
  if (!gen.ok()) {
    in_flight_.fetch_sub(1);
    return write_error(res, style, from_status(gen.status()));
  }
  Completion meta;
  meta.id = new_completion_id(kind);
  meta.created = unix_now();
  meta.model = opt_.served_model_name;
  meta.prompt_tokens = static_cast<int64_t>(spec.prompt.size());
  const bool stream = api.stream;
  ConnectionProbe probe(req.local_addr, req.local_port, req.remote_addr, req.remote_port);
  auto run = std::make_shared<Run>(*this, std::move(api), std::move(*gen), probe, meta, *tenant);
  track(run, true);
  if (stream) {
    res.status = 200;
    res.set_header("Cache-Control", "no-cache");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [run](size_t, httplib::DataSink& sink) { return run->serve_stream(sink); },
        [this, run](bool success) {
          run->released(success);
          track(run, false);
        });
    return;
  }
  run->serve_blocking(res);
  track(run, false);
}

void HttpServer::install_routes() {
  using httplib::Request;
  using httplib::Response;
  auto& s = *http_;
  for (ApiKind kind : {ApiKind::kChatCompletions, ApiKind::kCompletions, ApiKind::kResponses,
                       ApiKind::kMessages}) {
    s.Post(std::string(endpoint_path(kind)), [this, kind](const Request& req, Response& res) {
      handle_generate(req, res, static_cast<int>(kind));
    });
  }
  s.Get("/v1/models", [this](const Request& req, Response& res) {
    if (!authenticate(req, res, static_cast<int>(ApiStyle::kOpenAI))) return;
    OrderedJson j;
    j["object"] = "list";
    OrderedJson m;
    m["id"] = opt_.served_model_name;
    m["object"] = "model";
    m["created"] = 0;
    m["owned_by"] = "pagedkv";
    // Anthropic's models.list reads these two.
    m["type"] = "model";
    m["display_name"] = opt_.served_model_name;
    m["created_at"] = "1970-01-01T00:00:00Z";
    j["data"] = OrderedJson::array({m});
    j["has_more"] = false;
    j["first_id"] = opt_.served_model_name;
    j["last_id"] = opt_.served_model_name;
    res.set_content(j.dump(), "application/json");
  });
  s.Get("/v1/stats", [this](const Request& req, Response& res) {
    auto tenant = authenticate(req, res, static_cast<int>(ApiStyle::kOpenAI));
    if (!tenant) return;
    auto j = metrics_.stats_json(engine_.stats(), gauges(), opt_.api_keys ? *tenant : "");
    res.set_header("Cache-Control", "no-store");
    res.set_content(dump_json(j), "application/json");
  });
  s.Get("/health", [this](const Request&, Response& res) {
    OrderedJson j;
    j["status"] = draining_.load() ? "draining" : "ok";
    j["model"] = opt_.served_model_name;
    res.status = draining_.load() ? 503 : 200;
    res.set_content(j.dump(), "application/json");
  });
  s.Get("/metrics", [this](const Request&, Response& res) {
    res.set_content(metrics_.render_prometheus(engine_.stats(), gauges()),
                    "text/plain; version=0.0.4; charset=utf-8");
  });
  s.Get("/", [](const Request&, Response& res) {
    res.set_header("Cache-Control", "no-store");
    res.set_content(std::string(dashboard_html()), "text/html; charset=utf-8");
  });
  s.set_pre_routing_handler([](const Request& req, Response& res) {
    std::string value;
    if (!invalid_content_length(req, &value)) return httplib::Server::HandlerResponse::Unhandled;
    close_after(req, res);
    write_error(res, style_for_path(req.path),
                bad_request("invalid Content-Length header '" + value +
                            "': it must be a non-negative decimal number of bytes"));
    return httplib::Server::HandlerResponse::Handled;
  });
  s.set_error_handler([](const Request& req, Response& res) {
    // Malformed HTTP (400), an unread body (413), a too-long URI (414): the
    // connection cannot carry another request.
    if (res.status == 400 || res.status == 413 || res.status == 414) close_after(req, res);
    if (!res.body.empty()) return;
    const ApiStyle style = style_for_path(req.path);
    ApiError e;
    switch (res.status) {
      case 404:
        e = not_found_error("no route for " + req.method + " " + req.path);
        break;
      case 413:
        e = too_large("the request body is larger than the server's limit (--max-body-bytes)");
        break;
      case 400:
        e = bad_request("malformed HTTP request");
        break;
      default:
        e = ApiError{res.status, res.status >= 500 ? "server_error" : "invalid_request_error",
                     "HTTP " + std::to_string(res.status), "", ""};
    }
    write_error(res, style, e);
  });
  s.set_exception_handler([](const Request& req, Response& res, std::exception_ptr ep) {
    std::string what = "unknown exception";
    try {
      if (ep) std::rethrow_exception(ep);
    } catch (const std::exception& e) {
      what = e.what();
    } catch (...) {
    }
    write_error(res, style_for_path(req.path), server_error("internal error: " + what));
  });
  // Counted before the response is written (httplib's logger runs after it), so a client that
  // reads /metrics right after a response always sees that response counted.
  s.set_post_routing_handler([this](const Request& req, Response& res) {
    metrics_.count_http(route_of(req.path), res.status);
  });
}

}  // namespace pagedkv::server
