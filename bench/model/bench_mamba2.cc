// The Mamba-2 mixer's cost on the CPU backend (src/model/mamba2.h): its exact
// per-token scan (conv + state recurrence + gated norm, host code on the step
// thread) against the two projections it cannot avoid (in_proj, out_proj), timed
// in the same run on the same tokens. The ratio says how much the exact scan
// costs on top of the matrix products; prefill is also compared with feeding the
// same tokens one at a time (which must give the same bits, checked here too).
// Shapes: the nemotron_h `small` preset's mixer and a mid-size mixer (hidden
// 2048, 64 heads of 64, state 128, 8 groups: Nemotron-H's head and state sizes).
// Usage: bench_mamba2 [--quick]
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "model/mamba2.h"
#include "model/recurrent_state.h"

using namespace pagedkv;
using Clock = std::chrono::steady_clock;

namespace {

double secs(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

struct Shape {
  const char* name;
  int32_t hidden, heads, head_dim, state, groups, tokens;
};

std::vector<float> rnd(size_t n, std::mt19937& rng, float scale, float center = 0.0f) {
  std::uniform_real_distribution<float> u(-scale, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = center + u(rng);
  return v;
}

void run(const Shape& s) {
  backend::Backend& be = backend::cpu_backend();
  std::mt19937 rng(1);
  model::Mamba2Spec spec;
  spec.num_heads = s.heads;
  spec.head_dim = s.head_dim;
  spec.state_size = s.state;
  spec.n_groups = s.groups;
  spec.dt_min = 0.001f;
  const int64_t H = s.hidden, P = spec.proj_dim(), I = spec.inner(), CD = spec.conv_dim();
  std::vector<float> in_w = rnd(static_cast<size_t>(P * H), rng, 0.03f);
  std::vector<float> out_w = rnd(static_cast<size_t>(H * I), rng, 0.03f);
  auto upload = [&](const std::vector<float>& v, int64_t rows, int64_t cols) {
    backend::HostTensorView t;
    t.rows = rows;
    t.cols = cols;
    t.data = reinterpret_cast<const std::byte*>(v.data());
    return std::move(*be.upload(t));
  };
  model::Mamba2Weights w;
  w.in_proj = upload(in_w, P, H);
  w.out_proj = upload(out_w, H, I);
  w.conv_w = rnd(static_cast<size_t>(CD * spec.conv_kernel), rng, 0.5f);
  w.conv_b = rnd(static_cast<size_t>(CD), rng, 0.1f);
  w.A = rnd(static_cast<size_t>(s.heads), rng, 0.5f, -2.0f);
  w.D = rnd(static_cast<size_t>(s.heads), rng, 0.1f, 1.0f);
  w.dt_bias = rnd(static_cast<size_t>(s.heads), rng, 1.0f, -2.0f);
  w.norm_w = rnd(static_cast<size_t>(I), rng, 0.1f, 1.0f);

  model::KVGeometry g;
  g.num_layers = 1;
  g.layer_state_floats = {model::mamba2_state_floats(spec)};
  const int32_t T = s.tokens;
  std::vector<float> h = rnd(static_cast<size_t>(T * H), rng, 1.0f);
  std::vector<int32_t> ids(static_cast<size_t>(T), 0);

  auto block = [&](model::RecurrentState& st, int32_t first, int32_t n, float* out) {
    model::ForwardBatch b;
    b.add_row(std::span<const int32_t>(ids.data(), static_cast<size_t>(n)), first,
              model::LogitsRequest::kNone)
        .state = &st;
    model::mamba2_block(be, spec, w, b, h.data() + static_cast<int64_t>(first) * H, n, out);
    st.set_length(first + n);
  };
  std::vector<float> out(static_cast<size_t>(T * H)), out1(static_cast<size_t>(T * H));
  std::vector<float> proj(static_cast<size_t>(T * P)), y(static_cast<size_t>(T * I));
  // Warm up (pages, threads).
  {
    model::RecurrentState st(g);
    block(st, 0, T, out.data());
  }
  const int reps = 3;
  double t_block = 1e30, t_mm = 1e30, t_tok = 1e30, t_mm1 = 1e30;
  for (int r = 0; r < reps; ++r) {
    model::RecurrentState st(g);
    auto t0 = Clock::now();
    block(st, 0, T, out.data());
    t_block = std::min(t_block, secs(t0));
    t0 = Clock::now();
    be.matmul(h.data(), T, *w.in_proj, proj.data());
    be.matmul(y.data(), T, *w.out_proj, out1.data());
    t_mm = std::min(t_mm, secs(t0));
    model::RecurrentState st1(g);
    t0 = Clock::now();
    for (int32_t i = 0; i < T; ++i) block(st1, i, 1, out1.data() + static_cast<int64_t>(i) * H);
    t_tok = std::min(t_tok, secs(t0));
    t0 = Clock::now();
    for (int32_t i = 0; i < T; ++i) {
      be.matmul(h.data() + static_cast<int64_t>(i) * H, 1, *w.in_proj, proj.data());
      be.matmul(y.data(), 1, *w.out_proj, out1.data() + static_cast<int64_t>(i) * H);
    }
    t_mm1 = std::min(t_mm1, secs(t0));
    // One token at a time must give the same bits as the whole prefill.
    model::RecurrentState st2(g);
    for (int32_t i = 0; i < T; ++i) block(st2, i, 1, out1.data() + static_cast<int64_t>(i) * H);
    if (std::memcmp(out.data(), out1.data(), out.size() * sizeof(float)) != 0)
      std::printf("  MISMATCH: one token at a time differs from the whole prefill\n");
  }
  std::printf(
      "%-6s hidden %d, %d heads x %d, state %d, %d groups, %d tokens\n"
      "  prefill: mixer %.2f ms (%.0f tok/s); in_proj+out_proj alone %.2f ms -> scan+conv+norm "
      "%.1f%% of the mixer\n"
      "  one token at a time: mixer %.2f ms/token; projections alone %.2f ms/token -> scan %.1f%%\n"
      "  prefill / token-at-a-time speed ratio: %.1fx (same bits)\n",
      s.name, s.hidden, s.heads, s.head_dim, s.state, s.groups, T, t_block * 1e3, T / t_block,
      t_mm * 1e3, 100.0 * (t_block - t_mm) / t_block, t_tok * 1e3 / T, t_mm1 * 1e3 / T,
      100.0 * (t_tok - t_mm1) / t_tok, t_tok / t_block);
}

}  // namespace

int main(int argc, char** argv) {
  const bool quick = argc > 1 && std::string(argv[1]) == "--quick";
  std::printf("%s\n", backend::cpu_backend().describe().c_str());
  run({"small", 256, 32, 16, 16, 2, 256});
  if (!quick) run({"mid", 2048, 64, 64, 128, 8, 256});
  return 0;
}
