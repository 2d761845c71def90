// The server in-process over loopback (cpp-httplib's client) on the shipped
// default model: every endpoint, streaming and not; cached tokens on a repeated
// prefix; keys, tenants and their separate KV domains; 400/401/404/413/429 in
// each API's error shape; a client that disconnects (streaming or not) has its
// request cancelled and its blocks released — the engine's invariants hold and
// no block stays held afterwards.
#include "server/http_server.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <thread>

#include "server/api_request.h"

namespace pagedkv::server {
namespace {

// A TCP connection to the server on 127.0.0.1:`port`; -1 when it fails.
int connect_loopback(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return -1;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

std::string model_dir() { return std::string(PAGEDKV_TEST_DATA_DIR) + "/../../models/default"; }

// A preamble long enough for several full 16-token blocks.
const std::string kPreamble =
    "The Python Tutorial. Python is an easy to learn, powerful programming language. It has "
    "efficient high-level data structures and a simple but effective approach to object-oriented "
    "programming.";

class ServerTest : public ::testing::Test {
 protected:
  void start(ServerOptions opt = {}, EngineSessionOptions eo = {}) {
    auto s = EngineSession::open(model_dir(), eo);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    session_ = std::move(*s);
    opt.host = "127.0.0.1";
    opt.port = 0;
    opt.secret[0] = 42;
    opt.http_threads = 16;
    server_ = std::make_unique<HttpServer>(*session_, opt);
    ASSERT_TRUE(server_->bind().ok());
    thread_ = std::thread([this] { server_->run(); });
  }

  void TearDown() override {
    if (!server_) return;
    server_->shutdown();
    thread_.join();
    // Every request ended: the engine's KV invariants hold and nothing is held.
    int32_t held = -1;
    Status st = session_->settle_and_check(&held);
    EXPECT_TRUE(st.ok()) << st.to_string();
    EXPECT_EQ(held, 0);
  }

  httplib::Client client() {
    httplib::Client c("127.0.0.1", server_->port());
    c.set_read_timeout(120, 0);
    return c;
  }

  httplib::Result post(const std::string& path, const Json& body, httplib::Headers h = {}) {
    return client().Post(path.c_str(), h, body.dump(), "application/json");
  }

  // Waits (bounded) until the server holds no request.
  bool wait_idle() {
    for (int i = 0; i < 6000 && server_->in_flight() > 0; ++i)
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    return server_->in_flight() == 0;
  }

  std::unique_ptr<EngineSession> session_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

Json chat_body(const std::string& user, int max_tokens = 8) {
  return {{"model", "default"},
          {"max_tokens", max_tokens},
          {"messages",
           {{{"role", "system"}, {"content", kPreamble}}, {{"role", "user"}, {"content", user}}}}};
}

// The data payloads of an SSE body, in order.
std::vector<std::string> sse_datas(const std::string& body) {
  std::vector<std::string> out;
  size_t pos = 0;
  while ((pos = body.find("data: ", pos)) != std::string::npos) {
    size_t nl = body.find('\n', pos);
    out.push_back(body.substr(pos + 6, nl - pos - 6));
    pos = nl;
  }
  return out;
}

TEST_F(ServerTest, ChatCompletionsAndCachedTokensOnARepeatedPrefix) {
  start();
  auto r1 = post("/v1/chat/completions", chat_body("What is a list?"));
  ASSERT_TRUE(r1);
  ASSERT_EQ(r1->status, 200) << r1->body;
  Json j1 = Json::parse(r1->body);
  EXPECT_EQ(j1["object"], "chat.completion");
  EXPECT_EQ(j1["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(j1["usage"]["completion_tokens"], 8);
  EXPECT_EQ(j1["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j1["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto r2 = post("/v1/chat/completions", chat_body("What is a dict?"));
  ASSERT_TRUE(r2);
  Json j2 = Json::parse(r2->body);
  EXPECT_GE(j2["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 32);
  // Greedy: the same request gives the same text.
  auto r3 = post("/v1/chat/completions", chat_body("What is a list?"));
  EXPECT_EQ(Json::parse(r3->body)["choices"][0]["message"]["content"],
            j1["choices"][0]["message"]["content"]);
}

TEST_F(ServerTest, EveryEndpointStreamsAndAgreesWithNonStreaming) {
  start();
  struct Case {
    std::string path;
    Json body;
  };
  std::vector<Case> cases = {
      {"/v1/chat/completions", chat_body("Tell me about tuples.", 12)},
      {"/v1/completions", {{"model", "default"}, {"prompt", kPreamble}, {"max_tokens", 12}}},
      {"/v1/responses",
       {{"model", "default"},
        {"instructions", kPreamble},
        {"input", "Sets?"},
        {"max_output_tokens", 12}}},
      {"/v1/messages",
       {{"model", "default"},
        {"system", kPreamble},
        {"max_tokens", 12},
        {"messages", {{{"role", "user"}, {"content", "Sets?"}}}}}},
  };
  for (auto& c : cases) {
    auto plain = post(c.path, c.body);
    ASSERT_TRUE(plain);
    ASSERT_EQ(plain->status, 200) << c.path << ": " << plain->body;
    Json pj = Json::parse(plain->body);
    std::string plain_text = c.path == "/v1/chat/completions"
                                 ? pj["choices"][0]["message"]["content"]
                             : c.path == "/v1/completions" ? pj["choices"][0]["text"]
                             : c.path == "/v1/responses"   ? pj["output_text"]
                                                           : pj["content"][0]["text"];
    c.body["stream"] = true;
    if (c.path.find("completions") != std::string::npos)
      c.body["stream_options"] = {{"include_usage", true}};
    auto streamed = post(c.path, c.body);
    ASSERT_TRUE(streamed);
    ASSERT_EQ(streamed->status, 200);
    EXPECT_EQ(streamed->get_header_value("Content-Type"), "text/event-stream");
    std::string text;
    Json last_usage;
    for (const auto& d : sse_datas(streamed->body)) {
      if (d == "[DONE]") continue;
      Json j = Json::parse(d);
      if (c.path == "/v1/chat/completions") {
        if (!j["choices"].empty() && j["choices"][0]["delta"].contains("content"))
          text += j["choices"][0]["delta"]["content"].get<std::string>();
        if (!j["usage"].is_null()) last_usage = j["usage"];
      } else if (c.path == "/v1/completions") {
        if (!j["choices"].empty()) text += j["choices"][0]["text"].get<std::string>();
        if (!j["usage"].is_null()) last_usage = j["usage"];
      } else if (c.path == "/v1/responses") {
        if (j["type"] == "response.output_text.delta") text += j["delta"].get<std::string>();
        if (j["type"] == "response.completed" || j["type"] == "response.incomplete")
          last_usage = j["response"]["usage"];
      } else {
        if (j["type"] == "content_block_delta") text += j["delta"]["text"].get<std::string>();
        if (j["type"] == "message_delta") last_usage = j["usage"];
      }
    }
    EXPECT_EQ(text, plain_text) << c.path;
    ASSERT_FALSE(last_usage.is_null()) << c.path;
    if (c.path.find("completions") != std::string::npos) {
      EXPECT_EQ(sse_datas(streamed->body).back(), "[DONE]");
      EXPECT_GT(last_usage["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << c.path;
    }
  }
}

TEST_F(ServerTest, StopStringsCutTheTextAndEndTheRequest) {
  start();
  auto r =
      post("/v1/completions", {{"model", "default"}, {"prompt", kPreamble}, {"max_tokens", 40}});
  std::string full = Json::parse(r->body)["choices"][0]["text"];
  ASSERT_GE(full.size(), 6u);
  const std::string stop = full.substr(3, 3);
  auto s = post("/v1/completions",
                {{"model", "default"}, {"prompt", kPreamble}, {"max_tokens", 40}, {"stop", stop}});
  Json j = Json::parse(s->body);
  std::string text = j["choices"][0]["text"];
  EXPECT_EQ(text, full.substr(0, full.find(stop)));
  EXPECT_EQ(j["choices"][0]["finish_reason"], "stop");
  EXPECT_LT(j["usage"]["completion_tokens"].get<int>(), 40);
  auto m = post("/v1/messages", {{"model", "default"},
                                 {"system", kPreamble},
                                 {"max_tokens", 40},
                                 {"stop_sequences", {stop}},
                                 {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  Json mj = Json::parse(m->body);
  if (mj["stop_reason"] == "stop_sequence") {
    EXPECT_EQ(mj["stop_sequence"], stop);
  }
}

TEST_F(ServerTest, ErrorsInEachApisShape) {
  ServerOptions opt;
  opt.max_body_bytes = 4096;
  start(opt);
  auto bad = client().Post("/v1/chat/completions", "{nope", "application/json");
  ASSERT_TRUE(bad);
  EXPECT_EQ(bad->status, 400);
  EXPECT_NE(Json::parse(bad->body)["error"]["message"].get<std::string>().find("malformed JSON"),
            std::string::npos);
  auto anth = client().Post("/v1/messages", "{nope", "application/json");
  EXPECT_EQ(anth->status, 400);
  EXPECT_EQ(Json::parse(anth->body)["type"], "error");
  auto model = post("/v1/messages", {{"model", "gpt-9"},
                                     {"max_tokens", 3},
                                     {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  EXPECT_EQ(model->status, 404);
  EXPECT_EQ(Json::parse(model->body)["error"]["type"], "not_found_error");
  auto n2 =
      post("/v1/chat/completions",
           {{"model", "default"}, {"n", 2}, {"messages", {{{"role", "user"}, {"content", "x"}}}}});
  EXPECT_EQ(n2->status, 400);
  EXPECT_EQ(Json::parse(n2->body)["error"]["param"], "n");
  auto big = post("/v1/completions", {{"model", "default"}, {"prompt", std::string(8000, 'a')}});
  ASSERT_TRUE(big);
  EXPECT_EQ(big->status, 413);
  EXPECT_EQ(Json::parse(big->body)["error"]["code"], "request_too_large");
  auto long_prompt =
      post("/v1/completions", {{"model", "default"}, {"prompt", std::vector<int>(3000, 5)}});
  ASSERT_TRUE(long_prompt);
  EXPECT_EQ(long_prompt->status, 413);  // 3000 ids is over 4 KiB of JSON
  auto none = client().Get("/v1/nothing");
  EXPECT_EQ(none->status, 404);
  EXPECT_EQ(Json::parse(none->body)["error"]["type"], "not_found_error");
  auto metrics = client().Get("/metrics");
  EXPECT_NE(metrics->body.find("pagedkv_http_requests_total{endpoint=\"/v1/chat/completions\","
                               "status=\"400\"} 2"),
            std::string::npos)
      << metrics->body;
}

TEST_F(ServerTest, PromptLongerThanTheContextIs400) {
  start();
  auto r = post("/v1/completions", {{"model", "default"}, {"prompt", std::vector<int>(2100, 5)}});
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 400);
  EXPECT_NE(r->body.find("max_position_embeddings"), std::string::npos) << r->body;
}

TEST_F(ServerTest, KeysAndTenantsKeepKvDomainsApart) {
  ServerOptions opt;
  auto keys = ApiKeys::parse("alice-key-1 alice\nbob-key-11 bob\n", "keys");
  ASSERT_TRUE(keys.ok());
  opt.api_keys = std::move(*keys);
  start(opt);
  auto none = post("/v1/chat/completions", chat_body("x"));
  EXPECT_EQ(none->status, 401);
  EXPECT_EQ(Json::parse(none->body)["error"]["type"], "authentication_error");
  auto anth = post("/v1/messages",
                   {{"model", "default"},
                    {"max_tokens", 2},
                    {"messages", {{{"role", "user"}, {"content", "x"}}}}},
                   {{"x-api-key", "wrong-key-1"}});
  EXPECT_EQ(anth->status, 401);
  EXPECT_EQ(Json::parse(anth->body)["error"]["type"], "authentication_error");
  EXPECT_EQ(client().Get("/v1/models")->status, 401);
  httplib::Headers alice = {{"Authorization", "Bearer alice-key-1"}};
  httplib::Headers bob = {{"x-api-key", "bob-key-11"}};
  Json body = chat_body("Same question");
  body["cache_salt"] = "shared-salt";
  auto a1 = post("/v1/chat/completions", body, alice);
  ASSERT_EQ(a1->status, 200) << a1->body;
  auto a2 = post("/v1/chat/completions", body, alice);
  EXPECT_GE(Json::parse(a2->body)["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(),
            32);
  // Bob sends the same prompt and the same cache_salt: no block of Alice's.
  auto b1 = post("/v1/chat/completions", body, bob);
  ASSERT_EQ(b1->status, 200);
  EXPECT_EQ(Json::parse(b1->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  // Alice without the salt: another (sub)domain.
  body.erase("cache_salt");
  auto a3 = post("/v1/chat/completions", body, alice);
  EXPECT_EQ(Json::parse(a3->body)["usage"]["prompt_tokens_details"]["cached_tokens"], 0);
  auto models = client().Get("/v1/models", alice);
  EXPECT_EQ(models->status, 200);
  EXPECT_EQ(Json::parse(models->body)["data"][0]["id"], "default");
  // /v1/stats shows the caller's own recent requests only.
  auto stats = client().Get("/v1/stats", bob);
  ASSERT_EQ(stats->status, 200);
  EXPECT_EQ(Json::parse(stats->body)["recent"].size(), 1u);
}

TEST_F(ServerTest, FullQueueIs429AndAStreamingDisconnectCancels) {
  ServerOptions opt;
  opt.max_queue = 0;
  EngineSessionOptions eo;
  eo.max_num_seqs = 1;
  start(opt, eo);
  std::atomic<int> chunks{0};
  std::atomic<bool> hang_up{false};
  std::thread streamer([&] {
    Json body = chat_body("Write a long story.", 1900);
    body["stream"] = true;
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/chat/completions";
    req.body = body.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char*, size_t, uint64_t, uint64_t) {
      // Abort (close the connection) when told.
      ++chunks;
      return !hang_up.load();
    };
    auto c = client();
    c.send(req);
  });
  for (int i = 0; i < 6000 && chunks.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(chunks.load(), 0);
  {  // The stream is still running: the next request is over capacity.
    ASSERT_EQ(server_->in_flight(), 1);
    auto busy = post("/v1/messages", {{"model", "default"},
                                      {"max_tokens", 2},
                                      {"messages", {{{"role", "user"}, {"content", "x"}}}}});
    ASSERT_TRUE(busy);
    EXPECT_EQ(busy->status, 429);
    EXPECT_EQ(busy->get_header_value("Retry-After"), "1");
    EXPECT_EQ(Json::parse(busy->body)["error"]["type"], "rate_limit_error");
  }
  hang_up = true;
  streamer.join();
  ASSERT_TRUE(wait_idle());
  EngineSnapshot s = session_->stats();
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_LT(s.completion_tokens, 1900u);
}

TEST_F(ServerTest, ANonStreamingClientThatGoesAwayIsCancelled) {
  start();
  // A raw connection: send the request, wait until the engine runs it, hang up.
  const int fd = connect_loopback(server_->port());
  ASSERT_GE(fd, 0);
  const std::string body =
      Json{{"model", "default"}, {"prompt", kPreamble}, {"max_tokens", 1900}}.dump();
  const std::string req =
      "POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: "
      "application/json\r\nContent-Length: " +
      std::to_string(body.size()) + "\r\n\r\n" + body;
  ASSERT_EQ(write(fd, req.data(), req.size()), static_cast<ssize_t>(req.size()));
  for (int i = 0; i < 6000 && session_->stats().completion_tokens == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  close(fd);
  ASSERT_TRUE(wait_idle());
  EngineSnapshot s = session_->stats();
  EXPECT_EQ(s.cancelled, 1u);
  EXPECT_LT(s.completion_tokens, 1900u);
  EXPECT_EQ(s.running + s.waiting, 0);
}

TEST_F(ServerTest, AStalledClientIsDropped) {
  ServerOptions opt;
  opt.read_timeout_s = 1;
  start(opt);
  const int fd = connect_loopback(server_->port());
  ASSERT_GE(fd, 0);
  // Half a request, then silence: the server must hang up (not wait forever).
  const std::string part = "POST /v1/completions HTTP/1.1\r\nHost: x\r\n";
  ASSERT_EQ(write(fd, part.data(), part.size()), static_cast<ssize_t>(part.size()));
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char buf[256];
  ssize_t n = 0;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) {
  }
  EXPECT_EQ(n, 0) << "the connection should be closed by the server, errno " << errno;
  close(fd);
}

TEST_F(ServerTest, DrainDeadlineCancelsWithAnErrorEvent) {
  ServerOptions opt;
  opt.drain_timeout_s = 0;
  start(opt);
  std::atomic<int> chunks{0};
  std::string body;
  std::thread streamer([&] {
    Json b = {{"model", "default"},
              {"max_tokens", 1900},
              {"stream", true},
              {"messages", {{{"role", "user"}, {"content", "Write a long story."}}}}};
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/messages";
    req.body = b.dump();
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      body.append(d, n);
      ++chunks;
      return true;
    };
    auto c = client();
    c.send(req);
  });
  for (int i = 0; i < 6000 && chunks.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_GT(chunks.load(), 0);
  server_->shutdown();
  streamer.join();
  EXPECT_NE(body.find("event: error"), std::string::npos) << body.substr(0, 400);
  EXPECT_NE(body.find("overloaded_error"), std::string::npos);
  EXPECT_EQ(body.find("message_stop"), std::string::npos);
  EXPECT_TRUE(wait_idle());
}

TEST_F(ServerTest, HealthMetricsStatsAndDashboard) {
  start();
  auto h = client().Get("/health");
  EXPECT_EQ(h->status, 200);
  EXPECT_EQ(Json::parse(h->body)["status"], "ok");
  post("/v1/chat/completions", chat_body("Hi"));
  post("/v1/chat/completions", chat_body("Hello"));
  // A request is counted before its response is written (the post-routing
  // handler), so both are in the counters the moment the client has them.
  auto m = client().Get("/metrics");
  ASSERT_TRUE(m);
  ASSERT_EQ(m->status, 200);
  for (const char* name :
       {"pagedkv_http_requests_total{endpoint=\"/v1/chat/completions\",status=\"200\"} 2",
        "pagedkv_time_to_first_token_seconds_count 2", "pagedkv_inter_token_latency_seconds_bucket",
        "pagedkv_prefix_hit_rate", "pagedkv_kv_blocks{state=\"used\"}", "pagedkv_queue_depth",
        "pagedkv_preemptions_total", "pagedkv_cached_prompt_tokens_total"})
    EXPECT_NE(m->body.find(name), std::string::npos) << name;
  auto st = client().Get("/v1/stats");
  Json j = Json::parse(st->body);
  EXPECT_EQ(j["recent"].size(), 2u);
  EXPECT_GT(j["recent"][0]["cached_tokens"].get<int>(), 0);
  EXPECT_GT(j["engine"]["prefix_hit_rate"].get<double>(), 0.0);
  EXPECT_GT(j["pool"]["max_blocks"].get<int>(), 0);
  auto d = client().Get("/");
  EXPECT_EQ(d->status, 200);
  EXPECT_NE(d->body.find("<title>pagedkv dashboard</title>"), std::string::npos);
  EXPECT_EQ(d->body.find("http://"), std::string::npos);  // nothing fetched from elsewhere
  EXPECT_EQ(d->body.find("https://"), std::string::npos);
}

// Sends `raw` on a fresh connection and reads until the server closes it (or 60 s
// pass: then *closed is false).
std::string raw_exchange(int port, const std::string& raw, bool* closed) {
  const int fd = connect_loopback(port);
  EXPECT_GE(fd, 0);
  EXPECT_EQ(write(fd, raw.data(), raw.size()), static_cast<ssize_t>(raw.size()));
  timeval tv{60, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  std::string out;
  char buf[4096];
  ssize_t n = 0;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) out.append(buf, static_cast<size_t>(n));
  *closed = n == 0;
  close(fd);
  return out;
}

// Streaming Anthropic: message_start is sent once the engine admitted the
// request, so its usage carries the real cached-token count (it was always 0).
TEST_F(ServerTest, StreamingMessageStartCarriesTheCachedTokens) {
  start();
  auto body = [](const std::string& q) {
    return Json{{"model", "default"},
                {"max_tokens", 4},
                {"stream", true},
                {"system", kPreamble},
                {"messages", {{{"role", "user"}, {"content", q}}}}};
  };
  auto r1 = post("/v1/messages", body("What is a list?"));
  ASSERT_TRUE(r1);
  ASSERT_EQ(r1->status, 200) << r1->body;
  auto r2 = post("/v1/messages", body("What is a dict?"));
  ASSERT_TRUE(r2);
  ASSERT_EQ(r2->status, 200) << r2->body;
  auto datas = sse_datas(r2->body);
  ASSERT_FALSE(datas.empty());
  Json start_ev = Json::parse(datas.front());
  ASSERT_EQ(start_ev["type"], "message_start") << datas.front();
  const int64_t cached = start_ev["message"]["usage"]["cache_read_input_tokens"].get<int64_t>();
  EXPECT_GE(cached, 32) << datas.front();
  // ... the same count message_delta / the engine report at the end.
  Json last_usage;
  for (const auto& d : datas) {
    Json ev = Json::parse(d);
    if (ev["type"] == "message_delta") last_usage = ev["usage"];
  }
  if (last_usage.contains("cache_read_input_tokens")) {
    EXPECT_EQ(last_usage["cache_read_input_tokens"].get<int64_t>(), cached);
  }
}

// A request cpp-httplib cannot parse is a 400 that closes the connection
// (the server cannot find the next request's start on it).
TEST_F(ServerTest, AnUnparseableRequestIsA400ThatClosesTheConnection) {
  start();
  for (const std::string& raw :
       {std::string("HELLO WORLD\r\n\r\n"),
        std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: "
                    "chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n")}) {
    bool closed = false;
    std::string resp = raw_exchange(server_->port(), raw, &closed);
    EXPECT_EQ(resp.rfind("HTTP/1.1 400", 0), 0u) << resp;
    EXPECT_NE(resp.find("Connection: close\r\n"), std::string::npos) << resp;
    EXPECT_EQ(resp.find("Keep-Alive"), std::string::npos) << resp;
    // cpp-httplib 0.11 drops the socket once the client closes it (as it must
    // after `Connection: close`) or at the keep-alive timeout.
    EXPECT_TRUE(closed);
  }
}

// A negative Content-Length is malformed (400 naming the header), not an
// oversize body (cpp-httplib's strtoull wraps -5 into a huge length: 413).
TEST_F(ServerTest, ANegativeContentLengthIsA400) {
  start();
  for (const char* cl : {"-5", "12abc", "+7", "0x10"}) {
    bool closed = false;
    std::string resp =
        raw_exchange(server_->port(),
                     std::string("POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Length: ") +
                         cl + "\r\n\r\n",
                     &closed);
    EXPECT_EQ(resp.rfind("HTTP/1.1 400", 0), 0u) << cl << ": " << resp;
    EXPECT_NE(resp.find("Content-Length header"), std::string::npos) << resp;
    EXPECT_NE(resp.find("Connection: close\r\n"), std::string::npos) << resp;
    EXPECT_TRUE(closed);
  }
  // A well-formed body still works.
  auto ok = post("/v1/completions", {{"model", "default"}, {"prompt", "Hi"}, {"max_tokens", 2}});
  ASSERT_TRUE(ok);
  EXPECT_EQ(ok->status, 200) << ok->body;
}

// The cold tier (EngineSessionOptions::persist_paged_cache): /v1/stats and
// /metrics report it; a repeated prefix after the hot tier lost it is restored
// from disk and counted as cached (hot + cold) in the response's usage.
TEST_F(ServerTest, ColdTierIsReportedInStatsAndMetrics) {
  char tmpl[] = "/tmp/pkv_srv_cold_XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  EngineSessionOptions eo;
  eo.persist_paged_cache = true;
  eo.cold_cache_dir = std::string(tmpl) + "/cold";
  start({}, eo);
  auto r1 = post("/v1/chat/completions", chat_body("What is a list?", 2));
  ASSERT_TRUE(r1);
  ASSERT_EQ(r1->status, 200) << r1->body;
  session_->flush_cold_tier();
  auto st = client().Get("/v1/stats");
  ASSERT_TRUE(st);
  Json j = Json::parse(st->body);
  ASSERT_TRUE(j["cold"].is_object()) << st->body;
  EXPECT_EQ(j["cold"]["open_errors"], 0) << st->body;
  for (const char* k : {"hits", "misses", "restored_tokens", "corruptions", "queue_drops"})
    EXPECT_TRUE(j["cold"].contains(k)) << k;
  EXPECT_TRUE(j["engine"].contains("cached_prompt_tokens_cold"));
  auto m = client().Get("/metrics");
  ASSERT_TRUE(m);
  for (const char* name : {"pagedkv_cold_hits_total", "pagedkv_cold_misses_total",
                           "pagedkv_cold_restored_tokens_total", "pagedkv_cold_corruptions_total",
                           "pagedkv_cold_queue_drops_total", "pagedkv_cold_bytes_written_total"})
    EXPECT_NE(m->body.find(std::string("\n") + name + " "), std::string::npos) << name;
  std::error_code ec;  // best effort: a leftover temp folder fails nothing
  std::filesystem::remove_all(tmpl, ec);
}

TEST_F(ServerTest, WithoutTheColdTierStatsSayNotEnabled) {
  EngineSessionOptions eo;
  eo.persist_paged_cache = false;
  start({}, eo);
  auto st = client().Get("/v1/stats");
  ASSERT_TRUE(st);
  EXPECT_TRUE(Json::parse(st->body)["cold"].is_null()) << st->body;
  auto m = client().Get("/metrics");
  EXPECT_EQ(m->body.find("pagedkv_cold_hits_total"), std::string::npos);
}

}  // namespace
}  // namespace pagedkv::server
