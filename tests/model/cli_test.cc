// End-to-end tests of the model commands through the real `pagedkv` binary:
// make-model is deterministic; `logits` matches the Hugging Face reference and is
// byte-identical with and without --warm-prefix and on the flat path; `generate`
// reports the second prompt's prefix hit and gives the same tokens paged and
// flat; bad input exits non-zero with a message naming the problem.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include "model/safetensors.h"
#include "run_command.h"
#include "test_util.h"

namespace pagedkv::model {
namespace {

using test::run_pagedkv;  // stdout and stderr merged

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
  ASSERT_EQ(
      run_pagedkv("make-model --family qwen3_moe --preset tiny --seed 9 --out " + a).exit_code, 0);
  ASSERT_EQ(
      run_pagedkv("make-model --family qwen3_moe --preset tiny --seed 9 --out " + b).exit_code, 0);
  EXPECT_EQ(file_bytes(a + "/model.safetensors"), file_bytes(b + "/model.safetensors"));
  EXPECT_EQ(file_bytes(a + "/config.json"), file_bytes(b + "/config.json"));
  auto r = run_pagedkv("make-model --family llama --out " + a);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("unknown family"), std::string::npos);
}

// --experts / --experts-per-tok override the MoE preset (config.json and the
// expert tensors follow); more experts per token than experts is refused by name.
TEST(CliTest, MakeModelOverridesTheExpertCounts) {
  std::string a = testing_util::temp_dir("cli_experts");
  ASSERT_EQ(run_pagedkv("make-model --family qwen3_moe --preset tiny --experts 12 "
                        "--experts-per-tok 3 --out " +
                        a)
                .exit_code,
            0);
  const std::string config = file_bytes(a + "/config.json");
  EXPECT_NE(config.find("\"num_experts\": 12"), std::string::npos) << config;
  EXPECT_NE(config.find("\"num_experts_per_tok\": 3"), std::string::npos) << config;
  const std::string tensors = file_bytes(a + "/model.safetensors");
  EXPECT_NE(tensors.find("mlp.experts.11.down_proj.weight"), std::string::npos);
  EXPECT_EQ(tensors.find("mlp.experts.12.down_proj.weight"), std::string::npos);
  auto r = run_pagedkv("make-model --family qwen3_moe --experts 4 --experts-per-tok 5 --out " + a);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("experts per token (5) exceeds the number of experts (4)"),
            std::string::npos)
      << r.output;
  r = run_pagedkv("make-model --family qwen3_moe --experts 2000 --out " + a);
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("--experts must be in [0, 1024]"), std::string::npos) << r.output;
}

TEST(CliTest, LogitsMatchesReferenceAndWarmPrefixIsByteIdentical) {
  std::string ref = std::string(PAGEDKV_TEST_DATA_DIR) + "/hf-reference/qwen3-a";
  std::string d = testing_util::temp_dir("cli_logits");
  std::string in = ref + "/reference.safetensors";
  auto cold = run_pagedkv("logits --model " + ref + " --input-ids " + in + " --out " + d +
                          "/cold.safetensors");
  ASSERT_EQ(cold.exit_code, 0) << cold.output;
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
    auto w = run_pagedkv("logits --model " + ref + " --input-ids " + in + " --out " + o +
                         " --warm-prefix " + std::to_string(n));
    ASSERT_EQ(w.exit_code, 0) << w.output;
    EXPECT_NE(w.output.find("(" + std::to_string(std::min(n, 79) / 16 * 16) +
                            " tokens from the prefix cache)"),
              std::string::npos)
        << w.output;
    EXPECT_EQ(data_section(o), cold_data) << "warm prefix " << n;
  }
  auto fl = run_pagedkv("logits --flat --chunk 7 --model " + ref + " --input-ids " + in +
                        " --out " + d + "/flat.safetensors");
  ASSERT_EQ(fl.exit_code, 0) << fl.output;
  EXPECT_EQ(data_section(d + "/flat.safetensors"), cold_data);
  // Text id files work too.
  testing_util::write_text(d + "/ids.txt", "1 2 3\n4,5");
  ASSERT_EQ(run_pagedkv("logits --model " + ref + " --input-ids " + d + "/ids.txt --out " + d +
                        "/t.safetensors")
                .exit_code,
            0);
  EXPECT_EQ((*SafetensorsFile::open(d + "/t.safetensors"))->find("logits")->shape,
            (std::vector<int64_t>{5, 512}));
}

TEST(CliTest, GenerateReportsThePrefixHitAndPagedEqualsFlat) {
  std::string m = testing_util::make_tiny("qwen3", 2, "cli_gen");
  std::string p1 = "5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24";
  std::string p2 = "5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 30 31 32";
  auto paged = run_pagedkv("generate --model " + m + " --max-tokens 12 --stats --prompt-ids \"" +
                           p1 + ";" + p2 + "\"");
  ASSERT_EQ(paged.exit_code, 0) << paged.output;
  EXPECT_NE(paged.output.find("prompt 2 (19 tokens, 16 cached)"), std::string::npos)
      << paged.output;
  EXPECT_NE(paged.output.find("hit_blocks=1"), std::string::npos) << paged.output;
  auto flat = run_pagedkv("generate --flat --model " + m + " --max-tokens 12 --prompt-ids \"" + p1 +
                          ";" + p2 + "\"");
  ASSERT_EQ(flat.exit_code, 0) << flat.output;
  auto tokens_of = [](const std::string& out, int k) {
    std::istringstream in(out);
    std::string line;
    while (std::getline(in, line))
      if (line.rfind("prompt " + std::to_string(k) + " (", 0) == 0)
        return line.substr(line.find("):"));
    return std::string("missing");
  };
  EXPECT_EQ(tokens_of(paged.output, 1), tokens_of(flat.output, 1));
  EXPECT_EQ(tokens_of(paged.output, 2), tokens_of(flat.output, 2));
  EXPECT_NE(tokens_of(paged.output, 2), "missing");
  // Env rollback selects the flat path.
  auto env = run_pagedkv("generate --stats --model " + m + " --max-tokens 2 --prompt-ids 1");
  EXPECT_NE(env.output.find("kv_path=paged"), std::string::npos);
  setenv("PAGEDKV_USE_BLOCK_PAGED_CACHE", "0", 1);
  env = run_pagedkv("generate --stats --model " + m + " --max-tokens 2 --prompt-ids 1");
  unsetenv("PAGEDKV_USE_BLOCK_PAGED_CACHE");
  EXPECT_NE(env.output.find("kv_path=flat"), std::string::npos) << env.output;
  // Seeded sampling is reproducible; a stop id ends generation.
  std::string samp = "generate --model " + m +
                     " --max-tokens 16 --temperature 0.9 --top-k 50 --top-p 0.95 --min-p 0.01 "
                     "--seed 3 --prompt-ids \"1 2 3\"";
  EXPECT_EQ(run_pagedkv(samp).output, run_pagedkv(samp).output);
  auto first = tokens_of(
      run_pagedkv("generate --model " + m + " --max-tokens 4 --prompt-ids \"1 2 3\"").output, 1);
  int stop = std::stoi(first.substr(3, first.find(' ', 3) - 3));
  auto stopped = run_pagedkv("generate --stats --model " + m + " --max-tokens 4 --stop-ids " +
                             std::to_string(stop) + " --prompt-ids \"1 2 3\"");
  EXPECT_NE(stopped.output.find("generated=1 finish=stop"), std::string::npos) << stopped.output;
}

// With a tokenizer.json in the model directory, generate takes text and prints text.
TEST(CliTest, GenerateUsesTheModelDirectorysTokenizer) {
  std::string m = testing_util::make_tiny("qwen3", 2, "cli_text");
  auto comps =
      testing_util::read_json(std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/components.json");
  testing_util::write_text(m + "/tokenizer.json",
                           comps["variants"]["split_string_Removed_false"].dump());
  auto r = run_pagedkv("generate --model " + m + " --max-tokens 6 --prompt \"12 3 4\"");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // Text mode: the header, then the continuation streamed as text on its own line.
  EXPECT_NE(r.output.find("prompt 1 ("), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("cached):\n"), std::string::npos) << r.output;
  testing_util::write_text(m + "/tokenizer.json", "{broken");
  r = run_pagedkv("generate --model " + m + " --prompt-ids 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("tokenizer.json"), std::string::npos) << r.output;
}

TEST(CliTest, BadInputExitsNonZeroWithAMessage) {
  std::string m = testing_util::make_tiny("qwen3", 2, "cli_bad");
  auto r = run_pagedkv("generate --model " + m + " --prompt-ids \"1 x 3\"");
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.output.find("'x' is not a token id"), std::string::npos);
  r = run_pagedkv("generate --model /nonexistent/dir --prompt-ids 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos);
  r = run_pagedkv("generate --model " + m + " --prompt-ids 1 --top-p 1.5");
  EXPECT_NE(r.output.find("top_p"), std::string::npos);
  r = run_pagedkv("generate --model " + m + " --prompt \"hello\"");
  EXPECT_NE(r.output.find("tokenizer"), std::string::npos);
  r = run_pagedkv("generate --model " + m + " --prompt-ids 1 --stop-ids '3 99999'");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--stop-ids: token id 99999 is outside the model's vocabulary of 512"),
            std::string::npos)
      << r.output;
  // --persist-cache on the flat path would silently persist nothing.
  r = run_pagedkv("generate --model " + m + " --prompt-ids 1 --persist-cache --flat");
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_NE(r.output.find("--persist-cache needs the paged KV path"), std::string::npos)
      << r.output;
  r = run_pagedkv("logits --model " + m + " --input-ids /nonexistent --out /tmp/x.safetensors");
  EXPECT_NE(r.exit_code, 0);
  std::filesystem::resize_file(m + "/model.safetensors", 100);
  r = run_pagedkv("generate --model " + m + " --prompt-ids 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
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
    auto r = run_pagedkv("generate --model " + m + " --prompt-ids '1 2 3 4 5 6 7 8 9 10' --stats" +
                         " --max-tokens 16777216" + path);
    ASSERT_EQ(r.exit_code, 0) << path << ": " << r.output;
    EXPECT_NE(r.output.find("generated=30 finish=max_position_embeddings"), std::string::npos)
        << path << ": " << r.output;
    EXPECT_NE(r.output.find("stopped after 30 tokens at the model's max_position_embeddings (40)"),
              std::string::npos)
        << path << ": " << r.output;
  }
  std::string long_prompt;
  for (int i = 0; i < 41; ++i) long_prompt += std::to_string(i + 1) + " ";
  for (const char* path : {"", " --flat"}) {
    auto r = run_pagedkv("generate --model " + m + " --prompt-ids '" + long_prompt + "'" + path);
    EXPECT_EQ(r.exit_code, 2) << path << ": " << r.output;
    EXPECT_NE(r.output.find("prompt 1 has 41 tokens, more than the model's "
                            "max_position_embeddings (40)"),
              std::string::npos)
        << path << ": " << r.output;
  }
}

// Issue #16 items 5, 7, 8: hostile input files. FIFOs in place of an input are
// refused at once (each command runs under `timeout`, so a regression fails
// instead of hanging); --out on a FIFO is refused and the FIFO left alone; a
// JSONL line over PAGEDKV_JSONL_MAX_LINE_BYTES is an error, not an abort.
TEST(CliTest, HostileInputFilesAreRefused) {
  const std::string m = testing_util::make_tiny("qwen3", 2, "cli_hostile");
  const std::string d = testing_util::temp_dir("cli_hostile_files");
  const std::string fifo = d + "/fifo";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0);
  auto timed = [](const std::string& args) {
    return test::run_command("timeout 60 " + test::pagedkv_command(args));
  };
  // --input-ids: text and .safetensors.
  auto r = timed("logits --model " + m + " --input-ids " + fifo + " --out " + d + "/o.safetensors");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "blocked on the FIFO";
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
  const std::string st_fifo = d + "/ids.safetensors";
  ASSERT_EQ(mkfifo(st_fifo.c_str(), 0600), 0);
  r = timed("logits --model " + m + " --input-ids " + st_fifo + " --out " + d + "/o.safetensors");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "blocked on the FIFO";
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
  // --out on a special file: refused, never renamed over.
  testing_util::write_text(d + "/ids.txt", "1 2 3");
  r = timed("logits --model " + m + " --input-ids " + d + "/ids.txt --out " + fifo);
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
  struct stat sb;
  ASSERT_EQ(::lstat(fifo.c_str(), &sb), 0);
  EXPECT_TRUE(S_ISFIFO(sb.st_mode)) << "--out replaced the FIFO";
  // model.safetensors and tokenizer.json as FIFOs.
  const std::string m2 = testing_util::make_tiny("qwen3", 2, "cli_hostile_model");
  std::filesystem::remove(m2 + "/model.safetensors");
  ASSERT_EQ(mkfifo((m2 + "/model.safetensors").c_str(), 0600), 0);
  r = timed("generate --model " + m2 + " --prompt-ids 1 --max-tokens 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "blocked on the FIFO";
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
  ASSERT_EQ(mkfifo((m + "/tokenizer.json").c_str(), 0600), 0);
  r = timed("generate --model " + m + " --prompt hello --max-tokens 1");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.exit_code, 124) << "blocked on the FIFO";
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
  std::filesystem::remove(m + "/tokenizer.json");

  // JSONL lines longer than the limit (1,000 bytes here) in the three readers.
  auto comps =
      testing_util::read_json(std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/components.json");
  const std::string tok = d + "/tokenizer.json";
  testing_util::write_text(tok, comps["variants"]["split_string_Removed_false"].dump());
  testing_util::write_text(d + "/text.jsonl",
                           "{\"text\":\"12 3\"}\n{\"text\":\"" + std::string(5000, '1') + "\"}\n");
  testing_util::write_text(d + "/ids.jsonl",
                           "{\"ids\":[1,2]}\n{\"ids\":[" + std::string(3000, '1') + "]}\n");
  testing_util::write_text(d + "/chat.jsonl", "{\"messages\":[{\"role\":\"user\",\"content\":\"" +
                                                  std::string(5000, 'x') + "\"}]}\n");
  setenv("PAGEDKV_JSONL_MAX_LINE_BYTES", "1000", 1);
  auto tk = timed("tokenize --tokenizer " + tok + " --jsonl " + d + "/text.jsonl");
  auto dt = timed("detokenize --tokenizer " + tok + " --jsonl " + d + "/ids.jsonl");
  auto cf = timed("chat-format --tokenizer-config " + std::string(PAGEDKV_TEST_DATA_DIR) +
                  "/chat/qwen3_tokenizer_config.json --jsonl " + d + "/chat.jsonl");
  unsetenv("PAGEDKV_JSONL_MAX_LINE_BYTES");
  for (const auto* res : {&tk, &dt, &cf}) {
    EXPECT_EQ(res->exit_code, 1) << res->output;
    EXPECT_NE(res->output.find("line is longer than the limit of 1000 bytes"), std::string::npos)
        << res->output;
  }
  EXPECT_NE(tk.output.find("text.jsonl:2"), std::string::npos) << tk.output;
  EXPECT_NE(dt.output.find("ids.jsonl:2"), std::string::npos) << dt.output;
  // Under the default limit the same files are fine.
  EXPECT_EQ(timed("tokenize --tokenizer " + tok + " --jsonl " + d + "/text.jsonl").exit_code, 0);
}

// Issue #16 item 6: `generate --chat` with a template that would run for hours
// stops at the render budget with an error (it used to hang).
TEST(CliTest, GenerateChatWithARunawayTemplateFailsFast) {
  const std::string m = testing_util::make_tiny("qwen3", 2, "cli_runaway");
  auto comps =
      testing_util::read_json(std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/components.json");
  testing_util::write_text(m + "/tokenizer.json",
                           comps["variants"]["split_string_Removed_false"].dump());
  nlohmann::json cfg;
  cfg["chat_template"] =
      "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}";
  testing_util::write_text(m + "/tokenizer_config.json", cfg.dump());
  auto r = test::run_command(
      "timeout 120 " +
      test::pagedkv_command("generate --model " + m + " --chat --prompt hi --max-tokens 1"));
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_NE(r.exit_code, 124) << "the render hung";
  EXPECT_NE(r.output.find("PAGEDKV_CHAT_TEMPLATE_MAX_STEPS"), std::string::npos) << r.output;
}

// Issue #16 items 12 and 14: a cold-cache directory that cannot be opened makes
// generate --persist-cache answer uncached (exit 0, a warning, a counted error);
// a usable one prints its stats line only after the pending writes drained.
TEST(CliTest, ColdTierFailuresDegradeAndStatsAreFinal) {
  const std::string m = testing_util::make_tiny("qwen3", 2, "cli_cold");
  const std::string d = testing_util::temp_dir("cli_cold_dir");
  testing_util::write_text(d + "/file", "not a directory");
  const std::string prompt =
      "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20 21 22 23 24 25 "
      "26 27 28 29 30 31 32 33 34 35 36 37 38 39 40";
  auto uncached =
      run_pagedkv("generate --model " + m + " --max-tokens 4 --prompt-ids \"" + prompt + "\"");
  ASSERT_EQ(uncached.exit_code, 0) << uncached.output;
  setenv("PAGEDKV_COLD_CACHE_DIR", (d + "/file/cold").c_str(), 1);
  auto r = run_pagedkv("generate --model " + m +
                       " --persist-cache --stats --max-tokens 4 "
                       "--prompt-ids \"" +
                       prompt + "\"");
  unsetenv("PAGEDKV_COLD_CACHE_DIR");
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("cold tier: disabled for this process"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[cold] enabled=false open_errors=1"), std::string::npos) << r.output;
  // The same answer as without the tier.
  auto first_line = [](const std::string& out) {
    size_t p = out.find("prompt 1 (");
    return p == std::string::npos ? std::string("missing") : out.substr(p, out.find('\n', p) - p);
  };
  EXPECT_EQ(first_line(r.output), first_line(uncached.output));
  // A working directory: every enqueued object is written (or counted as an
  // error) by the time the stats line is printed.
  const std::string cold_dir = d + "/cold";
  setenv("PAGEDKV_COLD_CACHE_DIR", cold_dir.c_str(), 1);
  r = run_pagedkv("generate --model " + m +
                  " --persist-cache --stats --max-tokens 4 "
                  "--prompt-ids \"" +
                  prompt + "\"");
  unsetenv("PAGEDKV_COLD_CACHE_DIR");
  ASSERT_EQ(r.exit_code, 0) << r.output;
  // "[cold] key=value ..." (counters as numbers, sizes as "81.4KiB").
  size_t at = r.output.find("[cold] ");
  ASSERT_NE(at, std::string::npos) << r.output;
  std::map<std::string, std::string> cold;
  std::istringstream fields(r.output.substr(at + 7, r.output.find('\n', at) - at - 7));
  for (std::string kv; fields >> kv;) {
    const size_t eq = kv.find('=');
    if (eq != std::string::npos) cold[kv.substr(0, eq)] = kv.substr(eq + 1);
  }
  ASSERT_TRUE(cold.count("enqueued") && cold.count("write_errors") && cold.count("written"))
      << r.output;
  uint64_t files = 0;
  for (const auto& e : std::filesystem::directory_iterator(cold_dir)) files += e.is_regular_file();
  const uint64_t enqueued = std::stoull(cold["enqueued"]);
  EXPECT_GT(enqueued, 0u) << r.output;
  EXPECT_EQ(enqueued, files + std::stoull(cold["write_errors"])) << r.output;
  EXPECT_EQ(cold["written"] != "0B", files > 0) << r.output;
}

}  // namespace
}  // namespace pagedkv::model
