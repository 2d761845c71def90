// End-to-end tests of the model commands through the real `pagedkv` binary:
// make-model is deterministic; `logits` matches the Hugging Face reference and is
// byte-identical with and without --warm-prefix and on the flat path; `generate`
// reports the second prompt's prefix hit and gives the same tokens paged and
// flat; bad input exits non-zero with a message naming the problem.
#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "model/safetensors.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

struct Result {
  int rc;
  std::string out;
};

Result sh(const std::string& args) {
  std::string cmd = std::string(PAGEDKV_BINARY) + " " + args + " 2>&1";
  Result r{0, ""};
  FILE* f = popen(cmd.c_str(), "r");
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) r.out.append(buf.data(), n);
  int st = pclose(f);
  r.rc = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  return r;
}

std::string data_section(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  uint64_t n = 0;
  std::memcpy(&n, s.data(), 8);
  return s.substr(8 + n);
}

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

TEST(CliTest, MakeModelIsDeterministicFromTheSeed) {
  std::string a = testing_util::temp_dir("cli_a"), b = testing_util::temp_dir("cli_b");
  ASSERT_EQ(sh("make-model --family qwen3_moe --preset tiny --seed 9 --out " + a).rc, 0);
  ASSERT_EQ(sh("make-model --family qwen3_moe --preset tiny --seed 9 --out " + b).rc, 0);
  EXPECT_EQ(file_bytes(a + "/model.safetensors"), file_bytes(b + "/model.safetensors"));
  EXPECT_EQ(file_bytes(a + "/config.json"), file_bytes(b + "/config.json"));
  auto r = sh("make-model --family llama --out " + a);
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("unknown family"), std::string::npos);
}

TEST(CliTest, LogitsMatchesReferenceAndWarmPrefixIsByteIdentical) {
  std::string ref = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/qwen3-a";
  std::string d = testing_util::temp_dir("cli_logits");
  std::string in = ref + "/reference.safetensors";
  auto cold =
      sh("logits --model " + ref + " --input-ids " + in + " --out " + d + "/cold.safetensors");
  ASSERT_EQ(cold.rc, 0) << cold.out;
  auto f = SafetensorsFile::open(d + "/cold.safetensors");
  ASSERT_TRUE(f.ok());
  auto r = SafetensorsFile::open(in);
  ASSERT_TRUE(r.ok());
  auto ours = tensor_to_f32(*(*f)->find("logits"));
  auto want = tensor_to_f32(*(*r)->find("full_logits"));
  const int64_t V = 512, T = (*f)->find("logits")->shape[0];
  ASSERT_EQ(T, 80);
  for (int64_t row = 0; row < T; ++row) {
    double md = 0, mr = 0;
    for (int64_t j = 0; j < V; ++j) {
      md = std::max(md, std::fabs(double((*ours)[row * V + j]) - (*want)[row * V + j]));
      mr = std::max(mr, std::fabs(double((*want)[row * V + j])));
    }
    EXPECT_LE(md / mr, 1e-4) << "row " << row;
  }
  std::string cold_data = data_section(d + "/cold.safetensors");
  for (int n : {1, 15, 16, 17, 40, 64, 80}) {
    std::string o = d + "/w" + std::to_string(n) + ".safetensors";
    auto w = sh("logits --model " + ref + " --input-ids " + in + " --out " + o + " --warm-prefix " +
                std::to_string(n));
    ASSERT_EQ(w.rc, 0) << w.out;
    EXPECT_NE(w.out.find("(" + std::to_string(std::min(n, 79) / 16 * 16) +
                         " tokens from the prefix cache)"),
              std::string::npos)
        << w.out;
    EXPECT_EQ(data_section(o), cold_data) << "warm prefix " << n;
  }
  auto fl = sh("logits --flat --chunk 7 --model " + ref + " --input-ids " + in + " --out " + d +
               "/flat.safetensors");
  ASSERT_EQ(fl.rc, 0) << fl.out;
  EXPECT_EQ(data_section(d + "/flat.safetensors"), cold_data);
  // Text id files work too.
  testing_util::write_text(d + "/ids.txt", "1 2 3\n4,5");
  ASSERT_EQ(
      sh("logits --model " + ref + " --input-ids " + d + "/ids.txt --out " + d + "/t.safetensors")
          .rc,
      0);
  EXPECT_EQ((*SafetensorsFile::open(d + "/t.safetensors"))->find("logits")->shape,
            (std::vector<int64_t>{5, 512}));
}

TEST(CliTest, GenerateReportsThePrefixHitAndPagedEqualsFlat) {
  std::string m = testing_util::make_tiny("qwen3", 2, "cli_gen");
  std::string p1 = "5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24";
  std::string p2 = "5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 30 31 32";
  auto paged = sh("generate --model " + m + " --max-tokens 12 --stats --prompt-ids \"" + p1 + ";" +
                  p2 + "\"");
  ASSERT_EQ(paged.rc, 0) << paged.out;
  EXPECT_NE(paged.out.find("prompt 2 (19 tokens, 16 cached)"), std::string::npos) << paged.out;
  EXPECT_NE(paged.out.find("hit_blocks=1"), std::string::npos) << paged.out;
  auto flat = sh("generate --flat --model " + m + " --max-tokens 12 --prompt-ids \"" + p1 + ";" +
                 p2 + "\"");
  ASSERT_EQ(flat.rc, 0) << flat.out;
  auto tokens_of = [](const std::string& out, int k) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("prompt " + std::to_string(k) + " (", 0) == 0)
        return line.substr(line.find("):"));
    return std::string("missing");
  };
  EXPECT_EQ(tokens_of(paged.out, 1), tokens_of(flat.out, 1));
  EXPECT_EQ(tokens_of(paged.out, 2), tokens_of(flat.out, 2));
  EXPECT_NE(tokens_of(paged.out, 2), "missing");
  // Env rollback selects the flat path.
  auto env = sh("generate --stats --model " + m + " --max-tokens 2 --prompt-ids 1");
  EXPECT_NE(env.out.find("kv_path=paged"), std::string::npos);
  setenv("PAGEDKV_USE_BLOCK_PAGED_CACHE", "0", 1);
  env = sh("generate --stats --model " + m + " --max-tokens 2 --prompt-ids 1");
  unsetenv("PAGEDKV_USE_BLOCK_PAGED_CACHE");
  EXPECT_NE(env.out.find("kv_path=flat"), std::string::npos) << env.out;
  // Seeded sampling is reproducible; a stop id ends generation.
  std::string samp = "generate --model " + m +
                     " --max-tokens 16 --temperature 0.9 --top-k 50 --top-p 0.95 --min-p 0.01 "
                     "--seed 3 --prompt-ids \"1 2 3\"";
  EXPECT_EQ(sh(samp).out, sh(samp).out);
  auto first =
      tokens_of(sh("generate --model " + m + " --max-tokens 4 --prompt-ids \"1 2 3\"").out, 1);
  int stop = std::stoi(first.substr(3, first.find(' ', 3) - 3));
  auto stopped = sh("generate --stats --model " + m + " --max-tokens 4 --stop-ids " +
                    std::to_string(stop) + " --prompt-ids \"1 2 3\"");
  EXPECT_NE(stopped.out.find("generated=1 finish=stop"), std::string::npos) << stopped.out;
}

// With a tokenizer.json in the model directory, generate takes text and prints text.
TEST(CliTest, GenerateUsesTheModelDirectorysTokenizer) {
  std::string m = testing_util::make_tiny("qwen3", 2, "cli_text");
  auto comps =
      testing_util::read_json(std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/components.json");
  testing_util::write_text(m + "/tokenizer.json",
                           comps["variants"]["split_string_Removed_false"].dump());
  auto r = sh("generate --model " + m + " --max-tokens 6 --prompt \"12 3 4\"");
  ASSERT_EQ(r.rc, 0) << r.out;
  // Text mode: the header, then the continuation streamed as text on its own line.
  EXPECT_NE(r.out.find("prompt 1 ("), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("cached):\n"), std::string::npos) << r.out;
  testing_util::write_text(m + "/tokenizer.json", "{broken");
  r = sh("generate --model " + m + " --prompt-ids 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("tokenizer.json"), std::string::npos) << r.out;
}

TEST(CliTest, BadInputExitsNonZeroWithAMessage) {
  std::string m = testing_util::make_tiny("qwen3", 2, "cli_bad");
  auto r = sh("generate --model " + m + " --prompt-ids \"1 x 3\"");
  EXPECT_EQ(r.rc, 2);
  EXPECT_NE(r.out.find("'x' is not a token id"), std::string::npos);
  r = sh("generate --model /nonexistent/dir --prompt-ids 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("does not exist"), std::string::npos);
  r = sh("generate --model " + m + " --prompt-ids 1 --top-p 1.5");
  EXPECT_NE(r.out.find("top_p"), std::string::npos);
  r = sh("generate --model " + m + " --prompt \"hello\"");
  EXPECT_NE(r.out.find("tokenizer"), std::string::npos);
  r = sh("generate --model " + m + " --prompt-ids 1 --stop-ids '3 99999'");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--stop-ids: token id 99999 is outside the model's vocabulary of 512"),
            std::string::npos)
      << r.out;
  // --persist-cache on the flat path would silently persist nothing.
  r = sh("generate --model " + m + " --prompt-ids 1 --persist-cache --flat");
  EXPECT_EQ(r.rc, 2) << r.out;
  EXPECT_NE(r.out.find("--persist-cache needs the paged KV path"), std::string::npos) << r.out;
  r = sh("logits --model " + m + " --input-ids /nonexistent --out /tmp/x.safetensors");
  EXPECT_NE(r.rc, 0);
  std::filesystem::resize_file(m + "/model.safetensors", 100);
  r = sh("generate --model " + m + " --prompt-ids 1");
  EXPECT_NE(r.rc, 0);
  EXPECT_NE(r.out.find("model.safetensors"), std::string::npos) << r.out;
}

TEST(CliTest, GenerateStopsAtTheModelsContextOnBothPaths) {
  // A 40-token context: a huge --max-tokens ends there (the flat path used to
  // decode on past it until --max-tokens, the paged one to fail in the
  // allocator); a longer prompt is refused.
  std::string m = testing_util::make_tiny("qwen3", 4, "cli_ctx");
  auto cfg = testing_util::read_json(m + "/config.json");
  cfg["max_position_embeddings"] = 40;
  testing_util::write_text(m + "/config.json", cfg.dump());
  for (const char* path : {"", " --flat"}) {
    auto r = sh("generate --model " + m + " --prompt-ids '1 2 3 4 5 6 7 8 9 10' --stats" +
                " --max-tokens 16777216" + path);
    ASSERT_EQ(r.rc, 0) << path << ": " << r.out;
    EXPECT_NE(r.out.find("generated=30 finish=max_position_embeddings"), std::string::npos)
        << path << ": " << r.out;
    EXPECT_NE(r.out.find("stopped after 30 tokens at the model's max_position_embeddings (40)"),
              std::string::npos)
        << path << ": " << r.out;
  }
  std::string long_prompt;
  for (int i = 0; i < 41; ++i) long_prompt += std::to_string(i + 1) + " ";
  for (const char* path : {"", " --flat"}) {
    auto r = sh("generate --model " + m + " --prompt-ids '" + long_prompt + "'" + path);
    EXPECT_EQ(r.rc, 2) << path << ": " << r.out;
    EXPECT_NE(r.out.find("prompt 1 has 41 tokens, more than the model's "
                         "max_position_embeddings (40)"),
              std::string::npos)
        << path << ": " << r.out;
  }
}

}  // namespace
}  // namespace pagedkv::model
