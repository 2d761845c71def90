// `pagedkv serve` as a subprocess: the ready line (with --port 0's real port),
// a streaming request that is in flight when SIGTERM arrives still completes
// (the drain), new connections are refused, and the process exits 0; a
// non-loopback --host without --api-keys is refused; --device names a missing GPU
// or a CUDA-less build clearly (the GPU itself: serve_cuda_test.cc).
#include <fcntl.h>
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <thread>

#include "run_command.h"
#include "serve_child.h"

namespace pagedkv::server {
namespace {

using test::Child;
using test::read_port;
using test::spawn;

TEST(ServeCliTest, SigtermDrainsAnInFlightStreamAndExitsZero) {
  const auto state =
      std::filesystem::temp_directory_path() / ("pkv_serve_cli_" + std::to_string(getpid()));
  Child child = spawn({PAGEDKV_BINARY, "serve", "--port", "0", "--state-dir", state.string(),
                       "--drain-timeout-s", "120"});
  ASSERT_GT(child.pid, 0);
  const int port = read_port(child.out_fd);
  ASSERT_GT(port, 0);
  std::atomic<int> chunks{0};
  std::string body;
  bool ok = false;
  std::thread streamer([&] {
    httplib::Client c("127.0.0.1", port);
    c.set_read_timeout(300, 0);
    httplib::Request req;
    req.method = "POST";
    req.path = "/v1/completions";
    req.body = R"({"model":"default","prompt":"The json module","max_tokens":150,"stream":true})";
    req.set_header("Content-Type", "application/json");
    req.content_receiver = [&](const char* d, size_t n, uint64_t, uint64_t) {
      body.append(d, n);
      ++chunks;
      return true;
    };
    auto r = c.send(req);
    ok = static_cast<bool>(r) && r->status == 200;
  });
  for (int i = 0; i < 30000 && chunks.load() == 0; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  ASSERT_GT(chunks.load(), 0);
  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  streamer.join();
  const int status = test::wait_exit(child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_TRUE(ok);
  // The stream ran to its natural end.
  EXPECT_NE(body.find("\"finish_reason\":\"length\""), std::string::npos) << body;
  EXPECT_NE(body.find("data: [DONE]"), std::string::npos);
  // The secret was created 0600.
  EXPECT_EQ(
      std::filesystem::status(state / "server-secret").permissions() & std::filesystem::perms::all,
      std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::filesystem::remove_all(state);
}

TEST(ServeCliTest, NonLoopbackWithoutKeysIsRefused) {
  auto r = test::run_pagedkv("serve --host 0.0.0.0 --port 0 --state-dir /nonexistent-never");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--api-keys"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--insecure"), std::string::npos) << r.output;
}

TEST(ServeCliTest, BadKeysFileIsNamed) {
  const auto f =
      std::filesystem::temp_directory_path() / ("pkv_keys_" + std::to_string(getpid()) + ".txt");
  {
    FILE* fp = fopen(f.c_str(), "w");
    fputs("only-one-field\n", fp);
    fclose(fp);
  }
  auto r = test::run_pagedkv("serve --port 0 --api-keys " + test::shell_quote(f.string()));
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find(f.string() + ":1"), std::string::npos) << r.output;
  std::filesystem::remove(f);
}

// --persist-cache / --cold-cache-dir turn the engine's cold tier on: /v1/stats
// reports it, and on SIGTERM the writer is flushed (objects on disk) before exit 0.
TEST(ServeCliTest, PersistCacheTurnsTheColdTierOnAndSigtermFlushesIt) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("pkv_serve_cold_" + std::to_string(getpid()));
  Child child =
      spawn({PAGEDKV_BINARY, "serve", "--port", "0", "--state-dir", (dir / "state").string(),
             "--persist-cache", "--cold-cache-dir", (dir / "cold").string()});
  ASSERT_GT(child.pid, 0);
  const int port = read_port(child.out_fd);
  ASSERT_GT(port, 0);
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  auto r = c.Post(
      "/v1/completions",
      R"({"model":"default","prompt":"The Python Tutorial. Python is an easy to learn, powerful programming language. It has efficient high-level data structures and a simple but effective approach to object-oriented programming.","max_tokens":2})",
      "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  auto st = c.Get("/v1/stats");
  ASSERT_TRUE(st);
  EXPECT_NE(st->body.find("\"cold\":{\"hits\""), std::string::npos) << st->body;
  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  const int status = test::wait_exit(child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  size_t files = 0;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir / "cold"))
    files += e.is_regular_file() ? 1 : 0;
  EXPECT_GT(files, 0u) << "the cold tier wrote nothing under " << (dir / "cold");
  std::filesystem::remove_all(dir);
}

// --device cuda:N on a machine without that GPU (or a build without the CUDA
// backend) is a FailedPrecondition naming which, before anything is served; an
// unknown device name is InvalidArgument (exit 2).
TEST(ServeCliTest, DeviceWithoutThatGpuIsNamed) {
  const auto state =
      std::filesystem::temp_directory_path() / ("pkv_serve_dev_" + std::to_string(getpid()));
  auto r = test::run_pagedkv("serve --port 0 --device cuda:99 --state-dir " +
                             test::shell_quote(state.string()));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(r.output.find("listening on"), std::string::npos) << r.output;
  const bool no_backend = r.output.find("built without the CUDA backend") != std::string::npos;
  const bool no_device = r.output.find("device 99 is not available") != std::string::npos;
  EXPECT_TRUE(no_backend || no_device) << r.output;
  auto bad = test::run_pagedkv("serve --port 0 --device tpu --state-dir " +
                               test::shell_quote(state.string()));
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("'tpu' is not cpu, cuda or cuda:N"), std::string::npos) << bad.output;
  auto help = test::run_pagedkv("serve --help");
  EXPECT_NE(help.output.find("--device"), std::string::npos) << help.output;
  std::filesystem::remove_all(state);
}

TEST(ServeCliTest, ContradictoryPersistFlagsAreRefused) {
  auto r = test::run_pagedkv("serve --port 0 --persist-cache --no-persist-cache");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--no-persist-cache"), std::string::npos) << r.output;
}

}  // namespace
}  // namespace pagedkv::server
