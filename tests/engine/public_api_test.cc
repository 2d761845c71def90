// The public API (include/pagedkv) as a library user sees it: Engine::model_info()
// describes the loaded model without its headers; SamplingParams comes from
// pagedkv/sampling.h; a RequestHandle's engine side (constructor, push_token,
// finish) is not reachable from outside the engine.
#include <gtest/gtest.h>

#include <functional>
#include <type_traits>

#include "engine_test_util.h"
#include "pagedkv/pagedkv.h"

namespace pagedkv::engine {
namespace {

template <typename H>
concept CanPushToken = requires(H& h) {
  h.push_token(int32_t{1});
};
template <typename H>
concept CanFinish = requires(H& h) {
  h.finish(RequestResult{});
};

// Compile-time: only the engine (through internal::HandleAccess) makes, feeds and
// finishes handles.
static_assert(!std::is_constructible_v<RequestHandle, uint64_t, std::function<void()>>);
static_assert(!CanPushToken<RequestHandle>);
static_assert(!CanFinish<RequestHandle>);

TEST(PublicApi, ModelInfoDescribesTheLoadedModel) {
  auto model = testing_util::tiny_model("qwen3", 3);
  ASSERT_NE(model, nullptr);
  auto engine = Engine::create(model);
  ASSERT_TRUE(engine.ok()) << engine.status().to_string();
  const ModelInfo info = (*engine)->model_info();
  const model::ModelConfig& c = model->config();
  EXPECT_EQ(info.model_type, "qwen3");
  EXPECT_EQ(info.vocab_size, c.vocab_size);
  EXPECT_GT(info.vocab_size, 0);
  EXPECT_EQ(info.hidden_size, c.hidden_size);
  EXPECT_EQ(info.num_layers, c.num_hidden_layers);
  EXPECT_EQ(info.max_position_embeddings, c.max_position_embeddings);
  EXPECT_EQ(info.eos_token_ids, c.eos_token_ids);
  EXPECT_EQ(info.bos_token_id, c.bos_token_id);
  EXPECT_EQ(info.block_size, model->kv_geometry().block_size);

  // The vocabulary bound is the one submit() enforces.
  GenerateRequest bad;
  bad.prompt = {info.vocab_size};
  EXPECT_EQ((*engine)->submit(bad).status().code(), StatusCode::kInvalidArgument);
  GenerateRequest good;
  good.prompt = {info.vocab_size - 1};
  good.sampling.max_tokens = 1;
  auto h = (*engine)->submit(good);
  ASSERT_TRUE(h.ok()) << h.status().to_string();
  (*engine)->run_until_idle();
  EXPECT_EQ((*h)->wait().tokens.size(), 1u);
}

TEST(PublicApi, SamplingParamsValidateNamesTheField) {
  SamplingParams p;
  EXPECT_TRUE(p.validate().ok());
  p.top_p = 0;
  const Status s = p.validate();
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("top_p"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace pagedkv::engine
