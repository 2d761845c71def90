// `pagedkv serve --device cuda` on the GPU (label "cuda"; SKIPs where no CUDA
// device is visible): the default model (qwen3) is served by the device-resident
// forward with its paged pool in device memory. A greedy completion succeeds; the
// same request again is a prefix-cache hit on the device pool and returns the same
// text (caching never changes an answer); /v1/stats reports the pool; SIGTERM
// drains and the process exits 0.
#include <gtest/gtest.h>
#include <httplib.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "serve_child.h"

namespace pagedkv::server {
namespace {

TEST(ServeCudaTest, ServesACompletionOnTheGpuAndAWarmRepeatIsIdentical) {
  if (backend::cuda::cuda_device_count() == 0)
    GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount failed or returned 0): "
                    "serve --device cuda skipped";
  const auto state =
      std::filesystem::temp_directory_path() / ("pkv_serve_cuda_" + std::to_string(getpid()));
  test::Child child = test::spawn({PAGEDKV_BINARY, "serve", "--device", "cuda", "--port", "0",
                                   "--state-dir", state.string(), "--no-persist-cache"});
  ASSERT_GT(child.pid, 0);
  const int port = test::read_port(child.out_fd);
  ASSERT_GT(port, 0) << "serve --device cuda did not come up (its stderr is above)";
  httplib::Client c("127.0.0.1", port);
  c.set_read_timeout(300, 0);
  const std::string req =
      R"({"model":"default","prompt":"The Python Tutorial. Python is an easy to learn, powerful programming language. It has efficient high-level data structures and a simple but effective approach to object-oriented programming. Python's elegant syntax","max_tokens":12,"temperature":0})";
  auto complete = [&](nlohmann::json* out) {
    auto r = c.Post("/v1/completions", req, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    *out = nlohmann::json::parse(r->body);
  };
  nlohmann::json cold, warm;
  complete(&cold);
  complete(&warm);
  const std::string text = cold["choices"][0]["text"].get<std::string>();
  EXPECT_FALSE(text.empty());
  EXPECT_GT(cold["usage"]["completion_tokens"].get<int>(), 0);
  EXPECT_EQ(warm["choices"][0]["text"].get<std::string>(), text)
      << "a prefix-cache hit on the device pool changed the answer";
  EXPECT_GT(warm["usage"]["prompt_tokens_details"]["cached_tokens"].get<int>(), 0) << warm.dump();
  auto st = c.Get("/v1/stats");
  ASSERT_TRUE(st);
  EXPECT_EQ(st->status, 200);
  EXPECT_NE(st->body.find("\"pool\""), std::string::npos) << st->body;
  ASSERT_EQ(kill(child.pid, SIGTERM), 0);
  const int status = test::wait_exit(child);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  std::filesystem::remove_all(state);
}

}  // namespace
}  // namespace pagedkv::server
