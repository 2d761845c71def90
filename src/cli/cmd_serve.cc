// `pagedkv serve`: the HTTP server (src/server, docs/server.md) over one engine
// — OpenAI chat/completions and completions, Responses and Anthropic messages,
// streaming and not, with tenants (--api-keys), metrics and the dashboard.
// This file only parses flags, loads keys and the secret, loads the model on
// --device (cpu, or the GPU's device-resident forward: src/cli/device_option.h),
// opens the engine over it, prints the ready line and turns SIGTERM/SIGINT into a
// drain.
#include <pthread.h>
#include <signal.h>

#include <cstdio>
#include <iostream>
#include <thread>

#include "cli/args.h"
#include "cli/checkpoint_text.h"
#include "cli/command_registry.h"
#include "cli/device_option.h"
#include "cli/engine_flags.h"
#include "kv/cold/cold_tier.h"
#include "server/engine_session.h"
#include "server/http_server.h"
#include "server/tenants.h"
#include "util/file_system.h"

namespace pagedkv::cli {
namespace {

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1";
}

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Reads an integer flag into `out` within [lo, hi]; the error names the flag.
Status int_flag(const ArgParser& p, const std::string& name, int64_t lo, int64_t hi, int64_t* out) {
  PKV_ASSIGN_OR_RETURN(*out, p.get_int_in(name, lo, hi));
  return ok_status();
}

int serve_main(int argc, char** argv) {
  ArgParser p("serve",
              "Serve a model over HTTP: OpenAI (/v1/chat/completions, /v1/completions), "
              "Responses (/v1/responses) and Anthropic (/v1/messages) APIs, streaming and not; "
              "GET / is a live dashboard, /metrics Prometheus text. The model runs on --device "
              "(cpu, or cuda / cuda:N for qwen3 and qwen3_moe on an NVIDIA GPU, KV in device "
              "memory). See docs/server.md.");
  add_default_model_option(p);
  add_device_option(p);
  p.add_option("served-model-name", "NAME",
               "the model id clients send (default: the model directory's name)");
  p.add_option("host", "ADDR", "bind address (without --api-keys only loopback, unless --insecure)",
               "127.0.0.1");
  p.add_option("port", "N", "TCP port (0 = any free port)", "8000");
  p.add_option("api-keys", "FILE", "`KEY TENANT` per line; every /v1 request then needs a key");
  p.add_flag("insecure", "allow a non-loopback --host without --api-keys");
  p.add_option("state-dir", "DIR",
               "where the server secret lives (default: the cold-tier directory's parent)");
  p.add_option("max-body-bytes", "N", "largest request body (larger: 413)", "4194304");
  p.add_option("max-queue", "N",
               "requests that may wait beyond the engine's admission width "
               "(more: 429)",
               "256");
  p.add_option("http-threads", "N", "HTTP worker threads (one per open connection)", "512");
  p.add_option("read-timeout-s", "S", "drop a client that sends nothing for S seconds", "10");
  p.add_option("write-timeout-s", "S", "drop a client that reads nothing for S seconds", "10");
  p.add_option("keep-alive-timeout-s", "S", "idle keep-alive connection lifetime", "5");
  p.add_option("drain-timeout-s", "S",
               "on SIGTERM/SIGINT, how long in-flight requests may finish before they are "
               "cancelled",
               "30");
  p.add_option("default-max-tokens", "N", "max tokens when a request names none", "256");
  add_scheduler_flags(p);
  add_pool_memory_flag(p, "paged-cache-mb");
  add_pool_blocks_flag(p);
  add_cold_tier_flags(p);
  if (auto rc = p.parse_or_exit_code(argc, argv)) return *rc;
  auto dir = resolve_model_dir(p.get("model"));
  if (!dir.ok()) return report_error("serve", dir.status());

  server::ServerOptions opt;
  opt.host = p.get("host");
  opt.served_model_name = p.get_optional("served-model-name").value_or(base_name(*dir));
  if (opt.served_model_name.empty())
    return report_error("serve", invalid_argument("--served-model-name must not be empty"));
  int64_t port = 0, body = 0, queue = 0, threads = 0, rto = 0, wto = 0, kato = 0, maxtok = 0;
  for (const Status& st :
       {int_flag(p, "port", 0, 65535, &port), int_flag(p, "max-body-bytes", 1024, 1LL << 32, &body),
        int_flag(p, "max-queue", 0, 1 << 20, &queue),
        int_flag(p, "http-threads", 1, 8192, &threads),
        int_flag(p, "read-timeout-s", 1, 3600, &rto), int_flag(p, "write-timeout-s", 1, 3600, &wto),
        int_flag(p, "keep-alive-timeout-s", 1, 3600, &kato),
        int_flag(p, "default-max-tokens", 1, INT32_MAX, &maxtok)})
    if (!st.ok()) return report_error("serve", st);
  auto drain = p.get_double("drain-timeout-s");
  if (!drain.ok()) return report_error("serve", drain.status());
  if (!(*drain >= 0 && *drain <= 86400))
    return report_error("serve", invalid_argument("--drain-timeout-s must be in [0, 86400]"));
  opt.port = static_cast<int>(port);
  opt.max_body_bytes = static_cast<size_t>(body);
  opt.max_queue = queue;
  opt.http_threads = static_cast<int>(threads);
  opt.read_timeout_s = static_cast<int>(rto);
  opt.write_timeout_s = static_cast<int>(wto);
  opt.keep_alive_timeout_s = static_cast<int>(kato);
  opt.drain_timeout_s = *drain;
  opt.default_max_tokens = maxtok;

  auto flags = read_engine_flags(p);
  if (!flags.ok()) return report_error("serve", flags.status());
  server::EngineSessionOptions eo = *flags;

  FileSystem& fs = FileSystem::posix();
  if (auto keys = p.get_optional("api-keys")) {
    auto k = server::ApiKeys::load(fs, *keys);
    if (!k.ok()) return report_error("serve", k.status());
    opt.api_keys = std::move(*k);
  } else if (!is_loopback(opt.host) && !p.has("insecure")) {
    return report_error("serve",
                        invalid_argument("--host " + opt.host +
                                         " without --api-keys would serve anyone who can reach "
                                         "it; give --api-keys FILE, or --insecure to allow it"));
  }
  const std::string state_dir =
      p.get_optional("state-dir")
          .value_or(dir_name(cold::resolve_cold_cache_dir(eo.cold_cache_dir)));
  auto secret = server::load_or_create_secret(fs, state_dir);
  if (!secret.ok()) return report_error("serve", secret.status());
  opt.secret = *secret;

  // SIGTERM/SIGINT go to one thread (blocked everywhere else, including the
  // engine's and the HTTP workers', which inherit this mask).
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGTERM);
  sigaddset(&sigs, SIGINT);
  pthread_sigmask(SIG_BLOCK, &sigs, nullptr);
  signal(SIGPIPE, SIG_IGN);

  const std::string device = requested_device(p);
  std::cerr << "pagedkv serve: loading " << *dir << " on " << device << "\n";
  auto model = load_model_on(*dir, device);
  if (!model.ok()) return report_error("serve", model.status());
  eo.model = std::shared_ptr<model::Model>(std::move(*model));
  auto engine = server::EngineSession::open(*dir, eo);
  if (!engine.ok()) return report_error("serve", engine.status());
  server::HttpServer http(**engine, opt);
  Status s = http.bind();
  if (!s.ok()) return report_error("serve", s);

  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&sigs, &sig);
    if (sig == 0) return;  // woken by ourselves at exit
    std::cerr << "pagedkv serve: " << (sig == SIGTERM ? "SIGTERM" : "SIGINT")
              << ": draining (up to " << opt.drain_timeout_s << " s)\n";
    http.shutdown();
  });
  const std::string host =
      opt.host.find(':') != std::string::npos ? "[" + opt.host + "]" : opt.host;
  std::cerr << "pagedkv serve: model " << opt.served_model_name << " (" << (*engine)->model_type()
            << ", on " << device << "), "
            << (opt.api_keys ? std::to_string(opt.api_keys->size()) + " API key(s)"
                             : std::string("single tenant, no keys"))
            << ", admission width " << (*engine)->admission_width() << "\n";
  std::cout << "pagedkv serve: listening on http://" << host << ":" << http.port() << std::endl;
  http.run();
  // The HTTP side has drained; wake the signal thread if no signal came.
  if (!http.draining()) http.shutdown();
  pthread_kill(signal_thread.native_handle(), SIGTERM);
  signal_thread.join();
  // Everything the cold tier queued reaches disk before exit 0 (no-op when off).
  (*engine)->flush_cold_tier();
  (*engine)->stop();
  engine->reset();
  std::cerr << "pagedkv serve: stopped\n";
  return 0;
}

}  // namespace

PKV_REGISTER_COMMAND("serve",
                     "HTTP server: OpenAI, Responses and Anthropic APIs, dashboard, metrics",
                     serve_main);

}  // namespace pagedkv::cli
