// Helpers for the tests of the shipped default model (models/default, issue 7):
// where it and its held-out slice are, and the slice's loss as
// models/default/train_report.json → heldout_slice defines it (8 independent
// windows of 512 input tokens, mean NLL in nats over the 4,096 targets).
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

namespace pagedkv::model::default_model {

// The source tree's models/default (tests/data/../../models/default).
inline std::string model_dir() {
  return std::string(PAGEDKV_TEST_DATA_DIR) + "/../../models/default";
}
inline std::string data_dir() { return std::string(PAGEDKV_TEST_DATA_DIR) + "/default-model"; }

inline std::string read_file(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  EXPECT_TRUE(f.good()) << "cannot read " << path;
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

inline nlohmann::json train_report() {
  return nlohmann::json::parse(read_file(model_dir() + "/train_report.json"));
}

// tests/data/default-model/heldout_slice_ids.txt: the 4,097 ids of the slice.
inline std::vector<int32_t> slice_ids() {
  std::istringstream in(read_file(data_dir() + "/heldout_slice_ids.txt"));
  std::vector<int32_t> ids;
  int64_t v;
  while (in >> v) ids.push_back(static_cast<int32_t>(v));
  return ids;
}

// The slice's text (exactly the decode of slice_ids()).
inline std::string slice_text() { return read_file(data_dir() + "/heldout_slice.txt"); }

constexpr int kWindows = 8;
constexpr int kWindow = 512;

// NLL (nats) of `target` under one logits row, computed in double: logsumexp - logit.
inline double nll(const float* row, int32_t vocab, int32_t target) {
  double mx = row[0];
  for (int32_t v = 1; v < vocab; ++v) mx = std::max(mx, static_cast<double>(row[v]));
  double sum = 0;
  for (int32_t v = 0; v < vocab; ++v) sum += std::exp(static_cast<double>(row[v]) - mx);
  return mx + std::log(sum) - static_cast<double>(row[target]);
}

// Sum of NLL over the targets ids[start+1 .. start+kWindow] given the logits rows
// of inputs ids[start .. start+kWindow-1] (kWindow rows of `vocab` floats).
inline double window_nll_sum(const std::vector<float>& logits, int32_t vocab,
                             const std::vector<int32_t>& ids, size_t start) {
  double s = 0;
  for (int t = 0; t < kWindow; ++t)
    s += nll(logits.data() + static_cast<size_t>(t) * vocab, vocab, ids[start + t + 1]);
  return s;
}

// The bound docs/default-model.md reports for the slice loss (nats/token): the
// test fails if the engine's loss on the slice reaches it.
constexpr double kSliceLossBound = 1.75;

}  // namespace pagedkv::model::default_model
