// Gated DeltaNet hybrids (qwen3_5_text, qwen3_next) on the CPU backend, at the
// model level (the engine does not yet drive recurrent state): prefill and decode
// tokens/s against qwen3 of the same dimensions (the baseline, measured in the same
// run), and time to first token for a 2,048-token prompt cold vs resumed from a
// state checkpoint + K/V at 2,032 tokens (a copy of the RecurrentState and of the
// flat K/V, as a prefix hit would give). Random weights from make_random_model.
// Usage: bench_hybrid_qwen [--quick]   (--quick: the small preset only)
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "model/flat_kv_cache.h"
#include "model/make_model.h"
#include "model/model.h"
#include "model/recurrent_state.h"

namespace pm = pagedkv::model;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

struct Shape {
  const char* name;
  const char* preset;
  int32_t layers, vocab;
};

// One request on the flat path; the state is attached when the model has one.
struct Session {
  explicit Session(const pm::Model& m) : flat(m.kv_geometry()), state(m.kv_geometry()) {}
  pm::FlatKVCache flat;
  pm::RecurrentState state;
};

double feed(pm::Model& m, Session& s, const std::vector<int32_t>& toks, size_t begin, size_t end) {
  pm::ForwardBatch b;
  b.path = pm::KVPath::kFlat;
  auto& row = b.add_row(std::span<const int32_t>(toks.data() + begin, end - begin),
                        static_cast<int32_t>(begin), pm::LogitsRequest::kLast);
  row.flat = &s.flat;
  if (m.kv_geometry().has_recurrent_state()) row.state = &s.state;
  pm::ForwardOutput out;
  double t = now_s();
  auto st = m.forward(b, &out);
  t = now_s() - t;
  if (!st.ok()) {
    std::fprintf(stderr, "forward: %s\n", st.to_string().c_str());
    std::exit(1);
  }
  return t;
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::strcmp(argv[1], "--quick") == 0;
  std::vector<Shape> shapes = {{"small", "small", 0, 0}};
  if (!quick) shapes.push_back({"0.6b-dims, 8 layers, vocab 8192", "qwen3-0.6b-shape", 8, 8192});
  const std::string root = std::filesystem::temp_directory_path() / "pagedkv_bench_hybrid";
  const int32_t kPrompt = 2048, kDecode = 64, kHit = 2032;
  for (const Shape& sh : shapes) {
    std::printf("== %s (prompt %d, decode %d)\n", sh.name, kPrompt, kDecode);
    double base_prefill = 0, base_decode = 0;
    for (const char* family : {"qwen3", "qwen3_5_text", "qwen3_next"}) {
      pm::MakeModelOptions o;
      o.family = family;
      o.preset = sh.preset;
      o.num_layers = sh.layers;
      o.vocab_size = sh.vocab;
      o.seed = 1;
      o.out_dir = root + "/" + family + "_" + sh.preset;
      if (!std::filesystem::exists(o.out_dir + "/config.json")) {
        auto st = pm::make_random_model(o);
        if (!st.ok()) return std::fprintf(stderr, "%s\n", st.to_string().c_str()), 1;
      }
      auto m = pm::load_model(o.out_dir);
      if (!m.ok()) return std::fprintf(stderr, "%s\n", m.status().to_string().c_str()), 1;
      std::mt19937 g(7);
      std::vector<int32_t> toks(kPrompt + kDecode);
      for (auto& t : toks) t = static_cast<int32_t>(g() % (*m)->config().vocab_size);
      Session cold(**m);
      const double prefill = feed(**m, cold, toks, 0, kPrompt);
      double decode = 0;
      for (int32_t i = 0; i < kDecode; ++i)
        decode += feed(**m, cold, toks, kPrompt + i, kPrompt + i + 1);
      // TTFT resumed from a checkpoint at kHit: copy state + K/V, feed the rest.
      Session first(**m);
      feed(**m, first, toks, 0, kHit);
      Session resumed = first;
      const double warm = feed(**m, resumed, toks, kHit, kPrompt);
      const double pf_tps = kPrompt / prefill, dc_tps = kDecode / decode;
      if (std::string(family) == "qwen3") {
        base_prefill = pf_tps;
        base_decode = dc_tps;
      }
      std::printf(
          "%-14s prefill %8.0f tok/s (%.2fx qwen3)  decode %7.1f tok/s (%.2fx qwen3)  "
          "TTFT cold %.3f s, from checkpoint at %d %.4f s (%.0fx faster)\n",
          family, pf_tps, pf_tps / base_prefill, dc_tps, dc_tps / base_decode, prefill, kHit, warm,
          prefill / warm);
    }
  }
  return 0;
}
