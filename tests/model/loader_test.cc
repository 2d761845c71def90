// Loader tests: safetensors round trip and validation, config.json errors, shape
// checks against the config, sharded and tied checkpoints, bf16 weights, and the
// optional real-checkpoint gate (PAGEDKV_TEST_MODEL_PATH). Every bad input is a
// tiny crafted file and must produce a Status that names what is wrong.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include "engine/kv_cache_factory.h"
#include "engine/pool_kv_store.h"
#include "kv/pool_budget.h"
#include "model/checkpoint.h"
#include "model/flat_kv_cache.h"
#include "model/layers.h"
#include "model/model.h"
#include "model/recurrent_state.h"
#include "model/safetensors.h"
#include "test_util.h"
#include "util/fault_injection_file_system.h"

namespace pagedkv::model {
namespace {

using namespace testing_util;

std::string write_raw(const std::string& header, size_t data_bytes, const std::string& tag) {
  std::string dir = temp_dir(tag);
  std::string path = dir + "/x.safetensors";
  std::string h = header;
  std::string bytes(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>(n >> (8 * i));
  bytes += h;
  bytes += std::string(data_bytes, '\x01');
  write_text(path, bytes);
  return path;
}

::testing::AssertionResult fails_with(const std::string& path, const std::string& needle) {
  auto f = SafetensorsFile::open(path);
  if (f.ok()) return ::testing::AssertionFailure() << "opened " << path;
  if (f.status().code() != StatusCode::kInvalidArgument)
    return ::testing::AssertionFailure() << "code " << f.status().to_string();
  if (f.status().message().find(needle) == std::string::npos)
    return ::testing::AssertionFailure()
           << "message lacks '" << needle << "': " << f.status().message();
  if (f.status().message().find(path) == std::string::npos)
    return ::testing::AssertionFailure()
           << "message does not name the file: " << f.status().message();
  return ::testing::AssertionSuccess();
}

TEST(SafetensorsTest, RoundTripKeepsNamesShapesAndBytes) {
  std::vector<float> a = {1, 2, 3, 4, 5, 6};
  std::vector<uint16_t> b = {7, 8};
  std::vector<TensorToWrite> w = {
      {"zeta", DType::kF32, {2, 3}, std::as_bytes(std::span(a))},
      {"alpha", DType::kBF16, {2}, std::as_bytes(std::span(b))},
      {"empty", DType::kF32, {0, 4}, {}},
  };
  std::string path = temp_dir("rt") + "/t.safetensors";
  ASSERT_TRUE(write_safetensors(path, w, {{"format", "pt"}}).ok());
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->tensors().size(), 3u);
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  const TensorInfo* z = (*f)->find("zeta");
  ASSERT_NE(z, nullptr);
  EXPECT_EQ(z->shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(std::memcmp(z->data, a.data(), 24), 0);
  EXPECT_EQ((*f)->find("alpha")->dtype, DType::kBF16);
  EXPECT_EQ((*f)->find("empty")->nbytes, 0u);
  EXPECT_EQ((reinterpret_cast<uintptr_t>(z->data) -
             reinterpret_cast<uintptr_t>((*f)->find("alpha")->data)),
            4u);
}

TEST(SafetensorsTest, TruncatedFiles) {
  std::string dir = temp_dir("trunc");
  write_text(dir + "/a.safetensors", "abc");
  EXPECT_TRUE(fails_with(dir + "/a.safetensors", "truncated"));
  // Header length says 1000 but the file ends sooner.
  std::string p = write_raw("{}", 0, "trunc2");
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(0xe8);
  bytes[1] = 0x03;
  write_text(p, bytes + "{}");
  EXPECT_TRUE(fails_with(p, "runs past the end"));
  // A valid file cut short inside the data section.
  std::string ok =
      write_raw(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}})", 16, "trunc3");
  ASSERT_TRUE(SafetensorsFile::open(ok).ok());
  std::filesystem::resize_file(ok, std::filesystem::file_size(ok) - 4);
  EXPECT_TRUE(fails_with(ok, "past the end of the data section"));
}

TEST(SafetensorsTest, OffsetPastTheEnd) {
  EXPECT_TRUE(fails_with(
      write_raw(R"({"t":{"dtype":"F32","shape":[4],"data_offsets":[16,32]}})", 16, "past"),
      "past the end"));
}

TEST(SafetensorsTest, OverlappingRanges) {
  EXPECT_TRUE(fails_with(write_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                                   R"("b":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})",
                                   16, "overlap"),
                         "overlapping"));
}

TEST(SafetensorsTest, DtypeShapeMismatchUnknownDtypeDuplicatesAndBadJson) {
  EXPECT_TRUE(
      fails_with(write_raw(R"({"t":{"dtype":"F32","shape":[2,2],"data_offsets":[0,8]}})", 8, "mm"),
                 "needs 16 bytes"));
  EXPECT_TRUE(
      fails_with(write_raw(R"({"t":{"dtype":"Q4","shape":[2],"data_offsets":[0,8]}})", 8, "dt"),
                 "unsupported dtype"));
  EXPECT_TRUE(fails_with(write_raw(R"({"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},)"
                                   R"("t":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})",
                                   8, "dup"),
                         "appears twice"));
  EXPECT_TRUE(fails_with(write_raw(R"({"t":)", 0, "json"), "not valid JSON"));
  EXPECT_TRUE(
      fails_with(write_raw(R"({"t":{"dtype":"F32","shape":[-1],"data_offsets":[0,4]}})", 4, "neg"),
                 "non-negative"));
}

// Issue #16 item 1: count x dtype size must fit in 64 bits and in the data
// section, for every tensor (an unused one too), before anything reads it.
TEST(SafetensorsTest, ElementCountTimesDtypeSizeOverflowIsRefused) {
  // 2^61 + 1 elements of 8 bytes wrap to 8 bytes in 64 bits.
  EXPECT_TRUE(fails_with(write_raw(R"({"input_ids":{"dtype":"I64","shape":[2305843009213693953],)"
                                   R"("data_offsets":[0,8]}})",
                                   8, "ovf1"),
                         "needs more than 2^64 bytes"));
  // 2^62 F32 elements wrap to 0 bytes: an unused tensor that claims it is refused.
  EXPECT_TRUE(fails_with(
      write_raw(R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},)"
                R"("unused":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[16,16]}})",
                16, "ovf2"),
      "'unused'"));
  // A huge dimension times a zero one is an empty tensor, still fine.
  EXPECT_TRUE(
      SafetensorsFile::open(write_raw(R"({"e":{"dtype":"I64","shape":[4611686018427387904,0],)"
                                      R"("data_offsets":[0,0]}})",
                                      0, "ovf3"))
          .ok());
}

// Issue #16 item 7: a FIFO in place of the file is refused at once (no blocking
// open waiting for a writer).
TEST(SafetensorsTest, FifoIsRefusedWithoutBlocking) {
  std::string path = temp_dir("fifo") + "/model.safetensors";
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  EXPECT_TRUE(fails_with(path, "not a regular file"));
}

::testing::AssertionResult load_fails_with(const std::string& dir, const std::string& needle) {
  auto m = load_model(dir);
  if (m.ok()) return ::testing::AssertionFailure() << "loaded " << dir;
  if (m.status().message().find(needle) == std::string::npos)
    return ::testing::AssertionFailure()
           << "message lacks '" << needle << "': " << m.status().to_string();
  if (m.status().code() != StatusCode::kInvalidArgument &&
      m.status().code() != StatusCode::kNotFound)
    return ::testing::AssertionFailure() << m.status().to_string();
  return ::testing::AssertionSuccess();
}

TEST(LoaderTest, MissingTensorIsNamed) {
  std::string d = make_tiny("qwen3", 1, "missing");
  rewrite_tensors(d, [](std::vector<OwnedTensor>& ts) {
    std::erase_if(
        ts, [](const OwnedTensor& t) { return t.name == "model.layers.1.mlp.up_proj.weight"; });
  });
  EXPECT_TRUE(load_fails_with(d, "model.layers.1.mlp.up_proj.weight' is missing"));
}

TEST(LoaderTest, TensorShapedWrongForTheConfig) {
  std::string d = make_tiny("qwen3", 1, "shape");
  rewrite_tensors(d, [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts)
      if (t.name == "model.layers.0.self_attn.k_proj.weight") t.shape = {16, 128};
  });
  EXPECT_TRUE(load_fails_with(d, "model.layers.0.self_attn.k_proj.weight' in "));
  EXPECT_TRUE(load_fails_with(d, "has shape [16, 128] but the config needs [32, 64]"));
}

TEST(LoaderTest, ConfigErrorsNameTheFieldAndFile) {
  std::string d = make_tiny("qwen3", 1, "cfg");
  auto cfg = read_json(d + "/config.json");
  auto no_hidden = cfg;
  no_hidden.erase("hidden_size");
  write_text(d + "/config.json", no_hidden.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'hidden_size' is missing"));
  EXPECT_TRUE(load_fails_with(d, d + "/config.json"));
  auto typed = cfg;
  typed["num_attention_heads"] = "4";
  write_text(d + "/config.json", typed.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'num_attention_heads' must be an integer"));
  auto unknown = cfg;
  unknown["model_type"] = "llama9";
  write_text(d + "/config.json", unknown.dump());
  EXPECT_TRUE(load_fails_with(d, "'llama9' is not supported"));
  auto rope = cfg;
  rope["rope_parameters"]["rope_type"] = "yarn";
  write_text(d + "/config.json", rope.dump());
  EXPECT_TRUE(load_fails_with(d, "rope_type"));
  write_text(d + "/config.json", "{not json");
  EXPECT_TRUE(load_fails_with(d, "not valid JSON"));
  EXPECT_TRUE(load_fails_with(d + "/nope", "does not exist"));
}

// Issue #16 item 2: config.json shapes are checked against the checkpoint (and
// a context bound) before they size anything: these used to allocate gigabytes
// and abort.
TEST(LoaderTest, HugeConfigShapesAreRefusedBeforeAllocating) {
  std::string d = make_tiny("qwen3", 1, "huge");
  auto cfg = read_json(d + "/config.json");
  for (int64_t layers : {int64_t{1073741824}, int64_t{10000000}, int64_t{3}}) {
    auto c = cfg;
    c["num_hidden_layers"] = layers;
    write_text(d + "/config.json", c.dump());
    EXPECT_TRUE(load_fails_with(
        d, "field 'num_hidden_layers' is " + std::to_string(layers) + " but the checkpoint"));
  }
  auto c = cfg;
  c["max_position_embeddings"] = 1000000000;
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'max_position_embeddings' must be in [1, 67108864]"));
  c["max_position_embeddings"] = 0;
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'max_position_embeddings' must be in"));
}

// Issue #16 item 2: a default pool (one full context) larger than the machine's
// memory is refused before it is allocated, naming the knob that caps it.
TEST(LoaderTest, PoolLargerThanMemoryIsRefusedBeforeAllocating) {
  std::string d = make_tiny("qwen3", 1, "bigpool");
  auto cfg = read_json(d + "/config.json");
  cfg["max_position_embeddings"] = int64_t{1} << 26;
  write_text(d + "/config.json", cfg.dump());
  auto m = load_model(d);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  auto want =
      kv::PoolBudget::resolve(engine::pool_geometry((*m)->kv_geometry()), int64_t{1} << 26, {});
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  const uint64_t ram = engine::physical_memory_bytes();
  if (ram == 0 || want->initial_bytes <= ram)
    GTEST_SKIP() << "this machine could hold the " << (want->initial_bytes >> 20) << " MiB pool";
  auto c = engine::make_paged_cache(**m);
  ASSERT_FALSE(c.ok());
  EXPECT_EQ(c.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(c.status().message().find("paged_cache_memory_mb"), std::string::npos)
      << c.status().message();
}

// Issue #16 item 13: out-of-range values are refused, not silently used.
TEST(LoaderTest, OutOfRangeConfigValuesAreRefused) {
  std::string d = make_tiny("qwen3", 1, "range");
  auto cfg = read_json(d + "/config.json");
  auto c = cfg;
  c["rms_norm_eps"] = -1;
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'rms_norm_eps' must be in (0, 1]"));
  c["rms_norm_eps"] = 1e-300;  // 0 as a float
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'rms_norm_eps'"));
  c = cfg;
  c.erase("rope_parameters");
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 1e-300}};
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_fails_with(d, "factor' must be in [1e-3, 1e6]"));
  c["rope_scaling"] = {{"rope_type", "linear"}, {"factor", 4.0}};
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_model(d).ok());
  c = cfg;
  c["eos_token_id"] = int64_t{1} << 40;  // used to be truncated to 0
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'eos_token_id' holds 1099511627776"));
  c["eos_token_id"] = nlohmann::json::array({2, -5});
  write_text(d + "/config.json", c.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'eos_token_id' holds -5"));
}

// Issue #16 item 13: a NaN logit is an error naming where, never a token.
TEST(LoaderTest, NanLogitIsAnError) {
  ForwardOutput out;
  out.vocab_size = 4;
  out.logits = {0, 1, 2, 3, 4, 5, std::nanf(""), 7};
  out.row_begin = {0, 1};
  out.row_count = {1, 1};
  Status st = check_logits(out);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("NaN logit (batch row 1, token id 2)"), std::string::npos)
      << st.to_string();
  out.logits[6] = 6;
  EXPECT_TRUE(check_logits(out).ok());
  // End to end: a checkpoint whose final norm holds a NaN fails the forward.
  std::string d = make_tiny("qwen3", 1, "nan");
  rewrite_tensors(d, [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts) {
      if (t.name != "model.norm.weight") continue;
      float nan = std::nanf("");
      std::memcpy(t.bytes.data(), &nan, sizeof(nan));
    }
  });
  auto m = load_model(d);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  FlatKVCache flat((*m)->kv_geometry());
  ForwardBatch b;
  b.path = KVPath::kFlat;
  const std::vector<int32_t> ids = {1, 2, 3};
  b.add_row(ids, 0, LogitsRequest::kLast).flat = &flat;
  ForwardOutput o;
  Status fs = (*m)->forward(b, &o);
  EXPECT_FALSE(fs.ok());
  EXPECT_NE(fs.message().find("NaN logit"), std::string::npos) << fs.to_string();
}

// Issue #16 item 9: make-model on a failed write (ENOSPC) leaves no debris: no
// model.safetensors.tmp and no config.json without its weights.
TEST(MakeModelTest, FailedWriteLeavesNoDebris) {
  for (auto op : {FaultInjectionFileSystem::Op::kAppend, FaultInjectionFileSystem::Op::kSync,
                  FaultInjectionFileSystem::Op::kRename}) {
    FaultInjectionFileSystem fs;
    // Weights: header append then data appends; config.json: one append. Fail
    // in the middle of the weights, in the config's sync, at the last rename.
    fs.fail_op(op, ENOSPC, 1, op == FaultInjectionFileSystem::Op::kAppend ? 3 : 1);
    MakeModelOptions o;
    o.preset = "tiny";
    o.out_dir = temp_dir("enospc");
    o.fs = &fs;
    Status st = make_random_model(o);
    EXPECT_FALSE(st.ok()) << static_cast<int>(op);
    EXPECT_EQ(st.code(), StatusCode::kResourceExhausted) << st.to_string();
    std::vector<std::string> left;
    for (const auto& e : std::filesystem::directory_iterator(o.out_dir))
      left.push_back(e.path().filename().string());
    EXPECT_TRUE(left.empty()) << static_cast<int>(op) << ": left " << left.size() << " files, "
                              << (left.empty() ? "" : left[0]);
  }
}

// qwen3_moe layer kinds: mlp_only_layers and decoder_sparse_step decide which
// layers are dense; the loader then asks for dense tensors there (and experts elsewhere).
TEST(LoaderTest, MoeLayerSelectionFollowsSparseStepAndMlpOnlyLayers) {
  std::string d = make_tiny("qwen3_moe", 1, "moe_layers");
  auto cfg = read_json(d + "/config.json");
  auto only = cfg;
  only["mlp_only_layers"] = {1};
  write_text(d + "/config.json", only.dump());
  EXPECT_TRUE(load_fails_with(d, "model.layers.1.mlp.gate_proj.weight' is missing"));
  auto step = cfg;
  step["decoder_sparse_step"] = 2;  // layer 0 dense, layer 1 sparse
  write_text(d + "/config.json", step.dump());
  EXPECT_TRUE(load_fails_with(d, "model.layers.0.mlp.gate_proj.weight' is missing"));
  // Give layer 0 dense weights: now it loads.
  rewrite_tensors(d, [](std::vector<OwnedTensor>& ts) {
    std::vector<float> w(128 * 64, 0.01f), down(64 * 128, 0.01f);
    auto bytes = [](const std::vector<float>& v) {
      auto b = std::as_bytes(std::span(v));
      return std::vector<std::byte>(b.begin(), b.end());
    };
    ts.push_back({"model.layers.0.mlp.gate_proj.weight", DType::kF32, {128, 64}, bytes(w)});
    ts.push_back({"model.layers.0.mlp.up_proj.weight", DType::kF32, {128, 64}, bytes(w)});
    ts.push_back({"model.layers.0.mlp.down_proj.weight", DType::kF32, {64, 128}, bytes(down)});
  });
  auto m = load_model(d);
  EXPECT_TRUE(m.ok()) << m.status().to_string();
  auto missing = cfg;
  missing.erase("num_experts");
  write_text(d + "/config.json", missing.dump());
  EXPECT_TRUE(load_fails_with(d, "field 'num_local_experts' is missing"));
}

std::vector<float> all_logits(Model& m, const std::vector<int32_t>& ids) {
  FlatKVCache flat(m.kv_geometry());
  ForwardBatch b;
  b.path = KVPath::kFlat;
  b.add_row(ids, 0, LogitsRequest::kAll).flat = &flat;
  ForwardOutput out;
  EXPECT_TRUE(m.forward(b, &out).ok());
  return out.logits;
}

TEST(LoaderTest, ShardedCheckpointEqualsSingleFile) {
  std::string d = make_tiny("qwen3_moe", 3, "shard");
  std::vector<int32_t> ids = {1, 5, 9, 200, 511, 0, 42};
  auto single = load_model(d);
  ASSERT_TRUE(single.ok()) << single.status().to_string();
  auto want = all_logits(**single, ids);
  // Split into two shards + index.
  std::vector<OwnedTensor> ts;
  rewrite_tensors(d, [&](std::vector<OwnedTensor>& t) { ts = t; });
  std::string s = temp_dir("shard2");
  std::filesystem::copy(d + "/config.json", s + "/config.json");
  nlohmann::json index;
  std::vector<TensorToWrite> a, b;
  for (size_t i = 0; i < ts.size(); ++i) {
    auto& dst = i % 2 ? a : b;
    dst.push_back({ts[i].name, ts[i].dtype, ts[i].shape, ts[i].bytes});
    index["weight_map"][ts[i].name] =
        i % 2 ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  ASSERT_TRUE(write_safetensors(s + "/model-00001-of-00002.safetensors", a).ok());
  ASSERT_TRUE(write_safetensors(s + "/model-00002-of-00002.safetensors", b).ok());
  write_text(s + "/model.safetensors.index.json", index.dump());
  auto sharded = load_model(s);
  ASSERT_TRUE(sharded.ok()) << sharded.status().to_string();
  auto got = all_logits(**sharded, ids);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
  // An index naming a tensor its file lacks.
  index["weight_map"]["model.extra.weight"] = "model-00001-of-00002.safetensors";
  write_text(s + "/model.safetensors.index.json", index.dump());
  EXPECT_TRUE(load_fails_with(s, "model.extra.weight"));
}

TEST(LoaderTest, NestedTextConfigAndLanguageModelTensorNamesLoad) {
  // A multimodal-style checkpoint: the language model's fields under text_config,
  // its tensors under model.language_model.*, an unrelated vision tower beside it.
  std::string d = make_tiny("qwen3", 6, "nested");
  std::vector<int32_t> ids = {7, 3, 99, 12, 0, 511};
  auto flat_cfg = load_model(d);
  ASSERT_TRUE(flat_cfg.ok()) << flat_cfg.status().to_string();
  auto want = all_logits(**flat_cfg, ids);
  rewrite_tensors(d, [](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts)
      if (t.name.rfind("model.", 0) == 0) t.name = "model.language_model." + t.name.substr(6);
    ts.push_back({"model.vision_tower.patch.weight", DType::kF32, {2}, std::vector<std::byte>(8)});
  });
  nlohmann::json text = read_json(d + "/config.json");
  nlohmann::json top;
  top["model_type"] = "qwen3_vl_like";
  top["eos_token_id"] = text["eos_token_id"];
  top["vision_config"] = {{"hidden_size", 3}};
  text.erase("eos_token_id");
  top["text_config"] = text;
  write_text(d + "/config.json", top.dump());
  auto nested = load_model(d);
  ASSERT_TRUE(nested.ok()) << nested.status().to_string();
  EXPECT_EQ((*nested)->config().model_type, "qwen3");
  auto got = all_logits(**nested, ids);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
  // Without a nested model_type, the top-level type + "_text" names the family.
  top["text_config"].erase("model_type");
  top["model_type"] = "qwen3_textless";
  write_text(d + "/config.json", top.dump());
  EXPECT_TRUE(load_fails_with(d, "qwen3_textless_text"));
  // A text_config that is not an object is named.
  top["text_config"] = 5;
  write_text(d + "/config.json", top.dump());
  EXPECT_TRUE(load_fails_with(d, "text_config"));
}

TEST(LoaderTest, TiedEmbeddingsUseTheEmbeddingAsLmHead) {
  std::string d = make_tiny("qwen3", 4, "tied");
  std::vector<int32_t> ids = {3, 1, 4, 1, 5};
  // Untied model whose lm_head equals embed_tokens ...
  std::vector<std::byte> embed;
  rewrite_tensors(d, [&](std::vector<OwnedTensor>& ts) {
    for (auto& t : ts)
      if (t.name == "model.embed_tokens.weight") embed = t.bytes;
    for (auto& t : ts)
      if (t.name == "lm_head.weight") t.bytes = embed;
  });
  auto untied = load_model(d);
  ASSERT_TRUE(untied.ok());
  auto want = all_logits(**untied, ids);
  // ... equals the tied model without lm_head.
  rewrite_tensors(d, [&](std::vector<OwnedTensor>& ts) {
    std::erase_if(ts, [](const OwnedTensor& t) { return t.name == "lm_head.weight"; });
  });
  EXPECT_TRUE(load_fails_with(d, "lm_head.weight"));  // untied config needs it
  auto cfg = read_json(d + "/config.json");
  cfg["tie_word_embeddings"] = true;
  write_text(d + "/config.json", cfg.dump());
  auto tied = load_model(d);
  ASSERT_TRUE(tied.ok()) << tied.status().to_string();
  EXPECT_TRUE((*tied)->config().tie_word_embeddings);
  auto got = all_logits(**tied, ids);
  EXPECT_EQ(0, std::memcmp(got.data(), want.data(), got.size() * 4));
}

TEST(LoaderTest, Bf16CheckpointLoadsAndIsDeterministic) {
  std::string d1 = make_tiny("qwen3", 5, "bf16a", DType::kBF16);
  std::string d2 = make_tiny("qwen3", 5, "bf16b", DType::kBF16);
  auto a = load_model(d1), b = load_model(d2);
  ASSERT_TRUE(a.ok() && b.ok());
  std::vector<int32_t> ids = {7, 8, 9};
  auto la = all_logits(**a, ids), lb = all_logits(**b, ids);
  EXPECT_EQ(0, std::memcmp(la.data(), lb.data(), la.size() * 4));
  std::string d3 = make_tiny("qwen3", 6, "bf16c", DType::kBF16);
  auto c = load_model(d3);
  ASSERT_TRUE(c.ok());
  EXPECT_NE(0, std::memcmp(la.data(), all_logits(**c, ids).data(), la.size() * 4));
}

TEST(RecurrentStateTest, SizedPerLayerZeroedAndCheckedAgainstTheRow) {
  KVGeometry g;
  g.num_layers = 3;
  g.num_kv_heads = 1;
  g.head_dim = 4;
  g.groups = {CacheGroup{CacheGroupKind::kFullAttention, 0},
              CacheGroup{CacheGroupKind::kRecurrent, 0}};
  g.layer_group = {1, 0, 1};
  g.layer_state_floats = {6, 0, 2};
  ASSERT_TRUE(g.has_recurrent_state());
  RecurrentState st(g);
  EXPECT_EQ(st.layer_floats(0), 6u);
  EXPECT_EQ(st.layer(1), nullptr);
  EXPECT_EQ(st.memory_bytes(), 8 * sizeof(float));
  st.layer(2)[1] = 5.0f;
  st.set_length(3);
  RecurrentState checkpoint = st;  // a checkpoint is a copy
  st.clear();
  EXPECT_EQ(st.layer(2)[1], 0.0f);
  EXPECT_EQ(st.length(), 0);
  EXPECT_EQ(checkpoint.layer(2)[1], 5.0f);
  EXPECT_EQ(checkpoint.length(), 3);

  FlatKVCache flat(g);
  std::vector<int32_t> ids = {1, 2};
  ForwardBatch b;
  b.path = KVPath::kFlat;
  b.add_row(ids, 0, LogitsRequest::kLast).flat = &flat;
  Status s = validate_batch(b, g, 16);
  EXPECT_NE(s.message().find("recurrent state"), std::string::npos) << s.to_string();
  b.rows[0].state = &checkpoint;  // holds 3 tokens, the row says 0
  s = validate_batch(b, g, 16);
  EXPECT_NE(s.message().find("holds 3 tokens"), std::string::npos) << s.to_string();
  b.rows[0].state = &st;
  EXPECT_TRUE(validate_batch(b, g, 16).ok());
}

TEST(LoaderTest, MalformedBatchIsRejected) {
  std::string d = make_tiny("qwen3", 1, "batch");
  auto m = load_model(d);
  ASSERT_TRUE(m.ok());
  FlatKVCache flat((*m)->kv_geometry());
  ForwardBatch b;
  b.path = KVPath::kFlat;
  std::vector<int32_t> bad = {1, 512};
  b.add_row(bad, 0, LogitsRequest::kLast).flat = &flat;
  ForwardOutput out;
  Status s = (*m)->forward(b, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("outside the vocabulary"), std::string::npos);
  ForwardBatch p;
  p.path = KVPath::kPaged;
  std::vector<int32_t> ok = {1, 2};
  p.add_row(ok, 0, LogitsRequest::kLast);
  EXPECT_FALSE((*m)->forward(p, &out).ok());  // no kv_store, no block table
  auto cache = engine::make_paged_cache(**m);
  ASSERT_TRUE(cache.ok());
  engine::PoolKVBlockStore store((*cache)->pool());
  p.kv_store = &store;
  for (int32_t bad_block : {0, -1, 1 << 30}) {
    std::vector<int32_t> table = {bad_block};
    p.rows[0].block_tables = {table};
    s = (*m)->forward(p, &out);
    EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
    EXPECT_NE(s.message().find("is not a block of the pool"), std::string::npos) << s.message();
  }
  std::vector<int32_t> good = {1};
  p.rows[0].block_tables = {good};
  EXPECT_TRUE((*m)->forward(p, &out).ok());
  ForwardBatch gap = p;
  gap.rows[0].first_token = 1;
  EXPECT_FALSE((*m)->forward(gap, &out).ok());
}

// Optional: a real checkpoint. Unset or empty skips; set to a non-directory fails.
TEST(RealCheckpointTest, LoadsAndRunsWhenConfigured) {
  const char* env = std::getenv("PAGEDKV_TEST_MODEL_PATH");
  if (env == nullptr || env[0] == '\0') GTEST_SKIP() << "PAGEDKV_TEST_MODEL_PATH not set";
  std::string path = env;
  ASSERT_TRUE(std::filesystem::is_directory(path))
      << "PAGEDKV_TEST_MODEL_PATH=" << path << " is not a directory";
  auto m = load_model(path);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  std::vector<int32_t> ids = {1, 2, 3, 4};
  auto logits = all_logits(**m, ids);
  ASSERT_EQ(logits.size(), 4u * (*m)->config().vocab_size);
  for (float v : logits) ASSERT_TRUE(std::isfinite(v));
}

}  // namespace
}  // namespace pagedkv::model
