// CPU kernels (see kernels.h): the matrix product, RMSNorm, RoPE, SiLU, softmax and
// MoE routing (attention is attention.cc). The matrix product dispatches at run time
// to the AVX-512 or AVX2/FMA micro-kernels (matmul_avx512.cc, matmul_avx2.cc) or to
// the baseline loop here, all of which compute the same bits (matmul_isa.h). The
// other kernels are written with GCC vector extensions over 8 floats (vec8.h) so the
// compiler emits SIMD for whatever the target offers; the arithmetic is per lane, so
// it is the same IEEE sequence whatever the width.
#include "backend/cpu/kernels.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <memory>
#include <vector>

#include "backend/cpu/isa.h"
#include "backend/cpu/matmul_isa.h"
#include "backend/cpu/vec8.h"
#include "backend/half.h"
#include "util/knobs.h"

namespace pagedkv::backend::cpu {
namespace {

bool g_matmul_packing = true;
int64_t g_matmul_kc = 512, g_matmul_mb = 96;
bool g_matmul_prefetch = true;

template <WeightDType D>
float widen_at(const void* w, int64_t i) {
  if constexpr (D == WeightDType::kF32) {
    return static_cast<const float*>(w)[i];
  } else if constexpr (D == WeightDType::kBF16) {
    return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
  } else {
    return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
}

// The baseline build of the matmul contract (matmul_isa.h): per output element 8
// lanes of fused multiply-adds (fmaf is correctly rounded in software where the
// CPU lacks FMA, so the bits equal the SIMD builds'), zero-padded tail, lane tree.
template <WeightDType D>
void cols_generic(const MatmulArgs& a, int64_t nb, int64_t ne) {
  const int64_t k = a.k, k8 = k & ~int64_t{7};
  for (int64_t m = 0; m < a.m; ++m) {
    const float* x = a.x + m * k;
    for (int64_t j = nb; j < ne; ++j) {
      float l[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      for (int64_t kk = 0; kk < k8; kk += 8)
        for (int i = 0; i < 8; ++i)
          l[i] = __builtin_fmaf(x[kk + i], widen_at<D>(a.w, j * k + kk + i), l[i]);
      if (k8 < k) {
        for (int i = 0; i < 8; ++i) {
          bool in = k8 + i < k;
          l[i] = __builtin_fmaf(in ? x[k8 + i] : 0.0f, in ? widen_at<D>(a.w, j * k + k8 + i) : 0.0f,
                                l[i]);
        }
      }
      a.y[m * a.n + j] = ((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7]));
    }
  }
}

PKV_INLINE float dot_body(const float* a, const float* b, int64_t n) {
  v8f acc = {0, 0, 0, 0, 0, 0, 0, 0};
  int64_t n8 = n & ~int64_t{7};
  for (int64_t i = 0; i < n8; i += 8) acc += load8(a + i) * load8(b + i);
  if (n8 < n) acc += load_partial(a + n8, n - n8) * load_partial(b + n8, n - n8);
  return hsum(acc);
}

__attribute__((target("avx2"))) float dot_avx2(const float* a, const float* b, int64_t n) {
  return dot_body(a, b, n);
}
float dot_generic(const float* a, const float* b, int64_t n) { return dot_body(a, b, n); }

// This thread's lane buffer for the packed matmul loop nest (matmul_isa.h).
float* matmul_scratch() {
  static thread_local std::unique_ptr<float[]> buf;
  if (!buf) buf.reset(new float[kMatmulScratchFloats + 16]);
  const auto p = reinterpret_cast<uintptr_t>(buf.get());
  return reinterpret_cast<float*>((p + 63) & ~uintptr_t{63});
}

// Element-wise work below this many elements runs on the caller alone: a parallel
// region costs microseconds.
constexpr int64_t kParallelElems = 1 << 15;

}  // namespace

void set_matmul_packing_for_testing(bool on) { g_matmul_packing = on; }
void set_matmul_prefetch_for_testing(bool on) { g_matmul_prefetch = on; }
void set_matmul_blocking_for_testing(int64_t kc, int64_t mb) {
  g_matmul_kc = std::clamp<int64_t>(kc / 8 * 8, 8, kMatmulMaxKc);
  g_matmul_mb = std::clamp<int64_t>(mb / 24 * 24, 24, kMatmulMaxRowBlock);
}

float dot_f32(const float* a, const float* b, int64_t n) {
  return kernels_use_avx2() ? dot_avx2(a, b, n) : dot_generic(a, b, n);
}

double measure_fma_peak_gflops(ThreadPool* pool) {
  const Isa isa = matmul_isa();
  if (isa == Isa::kGeneric) return 0.0;
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  const int64_t iters = 20'000'000;
  std::vector<double> flops(static_cast<size_t>(threads), 0.0);
  auto t0 = std::chrono::steady_clock::now();
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i)
      flops[i] = isa == Isa::kAvx512 ? fma_peak_flops_avx512(iters) : fma_peak_flops_avx2(iters);
  };
  if (pool != nullptr) {
    pool->parallel_for(threads, 1, body);
  } else {
    body(0, 1);
  }
  double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  double total = 0;
  for (double f : flops) total += f;
  return total / s / 1e9;
}

namespace {

// How many column chunks a thread a one-row matmul is cut into:
// PAGEDKV_CPU_DECODE_CHUNKS (default 4; 1: one fixed range a thread), read once.
// Speed only: which thread computes a column never changes its bits.
int64_t decode_chunks_per_thread() {
  static const int64_t chunks =
      std::clamp<int64_t>(env_i64("PAGEDKV_CPU_DECODE_CHUNKS").value_or(4), 1, 64);
  return chunks;
}

// Where the direct nest prefetches a matmul's weights: into L1 while the whole
// matrix is at most PAGEDKV_CPU_PREFETCH_L2_KIB (default 1024, one core's L2 on
// the Zen 5 build host) — it stays cached from call to call — and into L2 only
// when it is larger and so streams from L3 or DRAM (docs/performance.md, "the
// weights' prefetch into L2"). Read once; speed only.
WeightPrefetch matmul_weight_prefetch(int64_t k, int64_t n, WeightDType wdt) {
  static const int64_t l2_kib = std::clamp<int64_t>(
      env_i64("PAGEDKV_CPU_PREFETCH_L2_KIB").value_or(1024), 0, int64_t{1} << 40);
  if (!g_matmul_prefetch) return WeightPrefetch::kNone;
  const int64_t bytes = k * n * (wdt == WeightDType::kF32 ? 4 : 2);
  return bytes > l2_kib * 1024 ? WeightPrefetch::kL2 : WeightPrefetch::kL1;
}

}  // namespace

void matmul(const float* x, int64_t m, int64_t k, const void* w, WeightDType wdt, int64_t n,
            float* y, ThreadPool* pool) {
  if (m <= 0 || n <= 0) return;
  MatmulArgs a;
  a.x = x;
  a.m = m;
  a.k = k;
  a.w = w;
  a.wdt = static_cast<int>(wdt);
  a.n = n;
  a.y = y;
  a.kc = g_matmul_kc;
  a.mb = g_matmul_mb;
  a.prefetch = matmul_weight_prefetch(k, n, wdt);
  void (*simd)(const MatmulArgs&, int64_t, int64_t, float*) = nullptr;
  void (*generic)(const MatmulArgs&, int64_t, int64_t) = nullptr;
  int64_t group = 1;  // the packed nest's column group on this ISA
  switch (matmul_isa()) {
    case Isa::kAvx512:
      simd = matmul_cols_avx512;
      group = kMatmulGroupColsAvx512;
      break;
    case Isa::kAvx2:
      simd = matmul_cols_avx2;
      group = kMatmulGroupColsAvx2;
      break;
    default:
      generic = wdt == WeightDType::kF32    ? cols_generic<WeightDType::kF32>
                : wdt == WeightDType::kBF16 ? cols_generic<WeightDType::kBF16>
                                            : cols_generic<WeightDType::kF16>;
      break;
  }
  // The packed loop nest's lane buffer: one per thread, allocated on first use.
  auto cols = [&](const MatmulArgs& args, int64_t b, int64_t e) {
    if (simd == nullptr) return generic(args, b, e);
    simd(args, b, e, m >= kPackMinRows && g_matmul_packing ? matmul_scratch() : nullptr);
  };
  // Every column is computed over all m rows by one thread, so each weight tile is
  // streamed from memory once per call for the whole batch. Hand work to the pool
  // only when it outweighs a hand-off: ~a million multiply-adds (tens of µs on one
  // core). On an idle machine a hand-off to a spinning worker costs ~1 µs, but on a
  // loaded one a worker may not be running, and a region below this size is cheaper
  // done alone (qwen3-0.6B's smallest decode projection, 1024×1024, still splits).
  const bool split = pool != nullptr && pool->num_threads() > 1 && m * n * k >= (int64_t{1} << 20);
  if (split && simd != nullptr && m >= kPackMinRows && g_matmul_packing) {
    // The packed (prefill) nest: column chunks of 64–128 (about four per thread;
    // whole column groups: 126, not 128, on AVX2), handed out first come, first
    // served, so a thread that starts late or runs slower (a shared host) does less
    // of the call instead of the others waiting for it. Which thread computes a
    // column never changes its bits.
    const int64_t per = n / (4 * int64_t{pool->num_threads()}) / 16 * 16;
    const int64_t grain = std::clamp<int64_t>(per, 64, kMatmulPanelCols) / group * group;
    pool->parallel_dynamic(n, grain, [&](int64_t b, int64_t e) { cols(a, b, e); });
  } else if (split && m == 1 && decode_chunks_per_thread() > 1) {
    // One row (a lone decode request): column chunks of at least 16, about
    // decode_chunks_per_thread() a thread, first come, first served — as the packed
    // nest, a thread slowed by the host's other work computes fewer of them (16-core
    // H200 host: 1.06× at one request; with 8 rows it measured 0.94×, so the
    // fixed ranges below stay for 2–15 rows).
    const int64_t per = n / (decode_chunks_per_thread() * int64_t{pool->num_threads()}) / 16 * 16;
    pool->parallel_dynamic(n, std::max<int64_t>(16, per),
                           [&](int64_t b, int64_t e) { cols(a, b, e); });
  } else if (split) {
    // One fixed contiguous range per thread (in groups of 16 columns).
    pool->parallel_for(n, 16, [&](int64_t b, int64_t e) { cols(a, b, e); });
  } else {
    cols(a, 0, n);
  }
}

void rms_norm(const float* x, int64_t m, int64_t d, const void* w, WeightDType wdt, float eps,
              bool one_plus_weight, float* y, ThreadPool* pool) {
  auto rows = [&](int64_t rb, int64_t re) {
    for (int64_t r = rb; r < re; ++r) {
      const float* xr = x + r * d;
      float* yr = y + r * d;
      float ss = dot_f32(xr, xr, d);
      float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
      // 8 elements at a time, each with the scalar loop's operations.
      const int64_t d8 = d & ~int64_t{7};
      const v8f iv = {inv, inv, inv, inv, inv, inv, inv, inv};
      const v8f ones = {1, 1, 1, 1, 1, 1, 1, 1};
      for (int64_t i = 0; i < d8; i += 8) {
        v8f wi = wdt == WeightDType::kF32    ? load8(static_cast<const float*>(w) + i)
                 : wdt == WeightDType::kBF16 ? widen_bf16(static_cast<const uint16_t*>(w) + i)
                                             : widen_f16_vec(static_cast<const uint16_t*>(w) + i);
        if (one_plus_weight) wi = ones + wi;
        store8(yr + i, wi * (load8(xr + i) * iv));
      }
      for (int64_t i = d8; i < d; ++i) {
        float wi = widen_scalar(w, wdt, i);
        if (one_plus_weight) wi = 1.0f + wi;
        yr[i] = wi * (xr[i] * inv);
      }
    }
  };
  if (pool != nullptr && m > 1 && m * d >= kParallelElems) {
    pool->parallel_for(m, std::max<int64_t>(1, kParallelElems / 4 / d), rows);
  } else {
    rows(0, m);
  }
}

void rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
          const RopeParams& p, ThreadPool* pool) {
  int32_t rot = p.rotary_dim > 0 ? p.rotary_dim : head_dim;
  const bool proportional = p.kind == RopeKind::kProportional;
  // half: rotated pairs; span: distance from a pair's first element to its second;
  // base: the dims the exponent 2i/base counts (backend.h, RopeKind).
  const int32_t half = proportional ? std::min(rot, head_dim) / 2 : rot / 2;
  const int32_t span = proportional ? head_dim / 2 : half;
  const int32_t base = proportional ? head_dim : rot;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int32_t i = 0; i < half; ++i) {
    float exponent = static_cast<float>(2 * i) / static_cast<float>(base);
    inv_freq[i] = 1.0f / std::pow(p.theta, exponent);
    if (p.inv_freq_divisor != 1.0f) inv_freq[i] = inv_freq[i] / p.inv_freq_divisor;
  }
  auto tokens = [&](int64_t tb, int64_t te) {
    std::vector<float> cs(static_cast<size_t>(half)), sn(static_cast<size_t>(half));
    for (int64_t t = tb; t < te; ++t) {
      float pos = static_cast<float>(positions[t]);
      if (p.position_scale != 1.0f) pos = pos / p.position_scale;
      for (int32_t i = 0; i < half; ++i) {
        float ang = pos * inv_freq[i];
        cs[i] = std::cos(ang);
        sn[i] = std::sin(ang);
      }
      for (int32_t h = 0; h < num_heads; ++h) {
        float* v = x + (t * num_heads + h) * head_dim;
        for (int32_t i = 0; i < half; ++i) {
          float a = v[i], b = v[i + span];
          v[i] = a * cs[i] - b * sn[i];
          v[i + span] = b * cs[i] + a * sn[i];
        }
      }
    }
  };
  const int64_t per_token = static_cast<int64_t>(num_heads) * head_dim;
  if (pool != nullptr && m > 1 && m * per_token >= kParallelElems / 4) {
    pool->parallel_for(m, std::max<int64_t>(1, kParallelElems / 16 / per_token), tokens);
  } else {
    tokens(0, m);
  }
}

void elementwise(int64_t n, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn,
                 bool heavy) {
  if (heavy && pool != nullptr && n >= 2048) {
    pool->parallel_for(n, 256, fn);
  } else if (pool != nullptr && n >= 2 * kParallelElems) {
    pool->parallel_for(n, kParallelElems / 2, fn);
  } else {
    fn(0, n);
  }
}

float exp_for_testing(float x) { return vexp1(x); }

namespace {
PKV_INLINE void silu_mul_body(const float* gate, const float* up, int64_t b, int64_t e,
                              float* out) {
  const v8f one = splat8(1.0f);
  int64_t i = b;
  for (; i + 8 <= e; i += 8) {
    const v8f g = load8(gate + i);
    store8(out + i, (g / (one + vexp(-g))) * load8(up + i));
  }
  if (i < e) {
    const v8f g = load_partial(gate + i, e - i), u = load_partial(up + i, e - i);
    const v8f o = (g / (one + vexp(-g))) * u;
    for (int64_t j = i; j < e; ++j) out[j] = o[j - i];
  }
}
__attribute__((target("avx2"))) void silu_mul_avx2(const float* gate, const float* up, int64_t b,
                                                   int64_t e, float* out) {
  silu_mul_body(gate, up, b, e, out);
}
void silu_mul_generic(const float* gate, const float* up, int64_t b, int64_t e, float* out) {
  silu_mul_body(gate, up, b, e, out);
}
}  // namespace

void silu_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool) {
  const bool avx2 = kernels_use_avx2();
  elementwise(
      n, pool,
      [&](int64_t b, int64_t e) {
        if (avx2) {
          silu_mul_avx2(gate, up, b, e, out);
        } else {
          silu_mul_generic(gate, up, b, e, out);
        }
      },
      /*heavy=*/true);
}

void softmax_rows(float* x, int64_t m, int64_t n) {
  for (int64_t r = 0; r < m; ++r) {
    float* v = x + r * n;
    float mx = -std::numeric_limits<float>::infinity();
    for (int64_t i = 0; i < n; ++i) mx = std::max(mx, v[i]);
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) {
      v[i] = std::exp(v[i] - mx);
      s = s + v[i];
    }
    for (int64_t i = 0; i < n; ++i) v[i] = v[i] / s;
  }
}

void topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k, bool softmax_first,
                bool normalize, int32_t* ids, float* weights) {
  std::vector<float> p(static_cast<size_t>(num_experts));
  std::vector<int32_t> order(static_cast<size_t>(num_experts));
  for (int64_t r = 0; r < m; ++r) {
    std::copy(logits + r * num_experts, logits + (r + 1) * num_experts, p.begin());
    if (softmax_first) softmax_rows(p.data(), 1, num_experts);
    for (int32_t e = 0; e < num_experts; ++e) order[e] = e;
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [&](int32_t a, int32_t b) { return p[a] > p[b] || (p[a] == p[b] && a < b); });
    float sum = 0.0f;
    for (int32_t i = 0; i < k; ++i) sum = sum + p[order[i]];
    for (int32_t i = 0; i < k; ++i) {
      ids[r * k + i] = order[i];
      weights[r * k + i] = normalize ? p[order[i]] / sum : p[order[i]];
    }
  }
}

}  // namespace pagedkv::backend::cpu
