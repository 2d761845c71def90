// Locates the real Qwen3/Gemma3 tokenizer files that scripts/fetch-tokenizers.sh
// caches ($PAGEDKV_TOKENIZER_CACHE, else $XDG_CACHE_HOME/pagedkv/tokenizers,
// else ~/.cache/pagedkv/tokenizers), and the fixture JSONL files. A missing
// file is a test failure telling the reader to run the fetch script.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tokenizer/tokenizer.h"

namespace pagedkv::tokenizer::testing {

inline std::string tokenizer_cache_dir() {
  if (const char* c = std::getenv("PAGEDKV_TOKENIZER_CACHE"); c != nullptr && *c != '\0') return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/pagedkv/tokenizers";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/pagedkv/tokenizers";
}

inline std::string real_tokenizer_json(const std::string& name) {
  return tokenizer_cache_dir() + "/" + name + "/tokenizer.json";
}

// Loads the cached tokenizer `name` (qwen3, gemma3) once per process; fails the
// current test when it is absent.
inline const Tokenizer* real_tokenizer(const std::string& name) {
  static std::map<std::string, std::unique_ptr<Tokenizer>> loaded;
  auto it = loaded.find(name);
  if (it != loaded.end()) return it->second.get();
  std::string path = real_tokenizer_json(name);
  if (!std::ifstream(path).good()) {
    ADD_FAILURE() << "real tokenizer file " << path
                  << " is missing: run scripts/fetch-tokenizers.sh (make test runs it), or set "
                     "PAGEDKV_TOKENIZER_CACHE to the directory it fetched into";
    return nullptr;
  }
  auto t = Tokenizer::load(path);
  if (!t.ok()) {
    ADD_FAILURE() << "loading " << path << ": " << t.status().to_string();
    return nullptr;
  }
  return (loaded[name] = std::move(*t)).get();
}

struct FixtureCase {
  std::string text;
  std::vector<int32_t> ids;
  std::string decoded;
};

inline std::vector<FixtureCase> load_fixture(const std::string& file) {
  std::vector<FixtureCase> out;
  std::ifstream in(std::string(PAGEDKV_TEST_DATA_DIR) + "/tokenizer/" + file);
  EXPECT_TRUE(in.good()) << "missing fixture " << file;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line);
    out.push_back({j["text"].get<std::string>(), j["ids"].get<std::vector<int32_t>>(),
                   j["decoded"].get<std::string>()});
  }
  return out;
}

}  // namespace pagedkv::tokenizer::testing
