// The shipped default model's held-out loss over the fixed 4,096-token slice
// (issue 7), computed by our engine on CPU exactly as train_report.json →
// heldout_slice defines it: 8 independent windows w = 0..7, input
// ids[512w : 512w+512], targets ids[512w+1 : 512w+513], mean NLL in nats over
// the 4,096 targets, fp32 compute. It must agree with PyTorch's
// loss_fp32_cpu within 1e-3 and stay below the bound in docs/default-model.md.
// The same loss is computed twice: in process (the engine, flat KV path) and
// through the CLI (`pagedkv logits`, paged KV path, one process per window);
// the two must be bit-identical (caching never changes an answer).
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <cstring>

#include "default_model_util.h"
#include "model/registry.h"
#include "model/safetensors.h"
#include "pagedkv/engine.h"
#include "run_command.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

namespace dm = default_model;

TEST(DefaultModelLossTest, SliceLossAgreesWithPyTorchInProcessAndThroughPagedkvLogits) {
  const std::vector<int32_t> ids = dm::slice_ids();
  ASSERT_EQ(ids.size(), static_cast<size_t>(dm::kWindows * dm::kWindow + 1));
  auto report = dm::train_report();
  const double want = report["heldout_slice"]["loss_fp32_cpu"].get<double>();
  const auto want_windows = report["heldout_slice"]["window_losses_fp32_cpu"];

  auto m = load_model(dm::model_dir());
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  const int32_t V = (*m)->config().vocab_size;
  engine::EngineOptions eo;
  eo.use_block_paged_cache = false;
  eo.max_num_batched_tokens = dm::kWindow;
  auto flat_engine_or = engine::Engine::create(std::shared_ptr<Model>(std::move(*m)), eo);
  ASSERT_TRUE(flat_engine_or.ok()) << flat_engine_or.status().to_string();
  auto& flat_engine = *flat_engine_or;
  const std::string tmp = testing_util::temp_dir("default_loss");

  double total_engine = 0, total_cli = 0;
  for (int w = 0; w < dm::kWindows; ++w) {
    const size_t start = static_cast<size_t>(w) * dm::kWindow;
    std::vector<int32_t> in(ids.begin() + start, ids.begin() + start + dm::kWindow);

    // In process, through the engine on the flat KV path.
    engine::GenerateRequest rq;
    rq.prompt = in;
    rq.sampling.max_tokens = 0;
    rq.return_prompt_logits = true;
    auto h = flat_engine->submit(rq);
    ASSERT_TRUE(h.ok()) << h.status().to_string();
    flat_engine->run_until_idle();
    const std::vector<float>& logits = (*h)->wait().prompt_logits;
    ASSERT_EQ(logits.size(), static_cast<size_t>(dm::kWindow) * V);
    const double sum_engine = dm::window_nll_sum(logits, V, ids, start);

    // `pagedkv logits` (paged KV path) on the same window.
    std::string ids_txt;
    for (int32_t id : in) ids_txt += std::to_string(id) + " ";
    const std::string in_path = tmp + "/w" + std::to_string(w) + ".txt";
    const std::string out_path = tmp + "/w" + std::to_string(w) + ".safetensors";
    testing_util::write_text(in_path, ids_txt);
    const test::CommandResult logits_run = test::run_pagedkv(
        "logits --model " + dm::model_dir() + " --input-ids " + in_path + " --out " + out_path);
    ASSERT_EQ(logits_run.exit_code, 0) << logits_run.output;
    auto f = SafetensorsFile::open(out_path);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    const TensorInfo* t = (*f)->find("logits");
    ASSERT_NE(t, nullptr);
    ASSERT_EQ(t->shape, (std::vector<int64_t>{dm::kWindow, V}));
    std::vector<float> cli(static_cast<size_t>(dm::kWindow) * V);
    std::memcpy(cli.data(), t->data, cli.size() * sizeof(float));
    EXPECT_EQ(std::memcmp(cli.data(), logits.data(), cli.size() * sizeof(float)), 0)
        << "window " << w << ": pagedkv logits (paged) differs from the in-process flat run";
    const double sum_cli = dm::window_nll_sum(cli, V, ids, start);

    EXPECT_NEAR(sum_engine / dm::kWindow, want_windows[w].get<double>(), 1e-3) << "window " << w;
    std::printf("window %d: engine %.6f  pagedkv-logits %.6f  PyTorch %.6f\n", w,
                sum_engine / dm::kWindow, sum_cli / dm::kWindow, want_windows[w].get<double>());
    total_engine += sum_engine;
    total_cli += sum_cli;
  }
  const double loss = total_engine / (dm::kWindows * dm::kWindow);
  const double loss_cli = total_cli / (dm::kWindows * dm::kWindow);
  std::printf(
      "slice loss (nats/token): engine %.9f  pagedkv logits %.9f  PyTorch fp32 CPU %.9f  "
      "difference %.2e\n",
      loss, loss_cli, want, loss - want);
  EXPECT_NEAR(loss, want, 1e-3);
  EXPECT_EQ(loss, loss_cli);
  EXPECT_LT(loss, dm::kSliceLossBound);
}

}  // namespace
}  // namespace pagedkv::model
