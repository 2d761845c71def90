// Row-wise and elementwise CUDA kernels: embedding, RMSNorm, RoPE, SwiGLU/GeGLU,
// residual add, softmax, top-k MoE routing and greedy argmax (see kernels.h for
// the exactness contract; reductions are the fixed trees of device_common.cuh).
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope_table.cuh"

namespace pagedkv::backend::cuda {
namespace {

constexpr int kRowThreads = 256;

Status check_positive(const char* op, const char* field, int64_t v) {
  if (v <= 0)
    return invalid_argument(std::string(op) + ": " + field + " must be > 0, got " +
                            std::to_string(v));
  return ok_status();
}

unsigned grid_1d(int64_t n, int threads) {
  int64_t b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 65535 * 32 ? b : 65535 * 32);
}

__global__ void embedding_kernel(const int32_t* ids, const void* table, WeightDType dt,
                                 int64_t rows, int64_t d, float* y) {
  enter_kernel();
  const int64_t r = blockIdx.x;
  const int32_t id = ids[r];
  float* out = y + r * d;
  if (id < 0 || id >= rows) {
    for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[j] = NAN;
    return;
  }
  for (int64_t j = threadIdx.x; j < d; j += blockDim.x) out[j] = widen(table, dt, id * d + j);
}

__global__ void rms_norm_kernel(const float* x, int64_t d, const void* w, WeightDType dt, float eps,
                                bool one_plus, float* y) {
  enter_kernel();
  __shared__ float scratch[32];
  const float* xr = x + blockIdx.x * d;
  float* yr = y + blockIdx.x * d;
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) ss = ss + xr[i] * xr[i];
  ss = block_sum<kRowThreads>(ss, scratch);
  const float inv = rms_inverse(ss, d, eps);
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) {
    float wi = widen(w, dt, i);
    if (one_plus) wi = 1.0f + wi;
    yr[i] = wi * (xr[i] * inv);
  }
}

// The table and the rotation: rope_table.cuh.
__global__ void rope_kernel(float* x, int32_t num_heads, int32_t head_dim, const int32_t* positions,
                            const RopeTable f) {
  enter_kernel();
  const int64_t t = blockIdx.x;
  const float pos = rope_position(positions[t], f.position_scale);
  for (int32_t idx = threadIdx.x; idx < num_heads * f.half; idx += blockDim.x) {
    const int32_t h = idx / f.half, i = idx % f.half;
    float* v = x + (t * num_heads + h) * head_dim;
    float a = v[i], b = v[i + f.span];
    rope_rotate(pos, f.inv_freq[i], a, b);
    v[i] = a;
    v[i + f.span] = b;
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  enter_kernel();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = silu_times(gate[i], up[i]);
  }
}

__global__ void gelu_tanh_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  enter_kernel();
  const float k0 = 0.7978845608028654f;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    const float inner = k0 * (g + 0.044715f * (g * g * g));
    out[i] = (0.5f * g * (1.0f + tanhf(inner))) * up[i];
  }
}

__global__ void add_kernel(float* x, const float* y, int64_t n) {
  enter_kernel();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x)
    x[i] = x[i] + y[i];
}

__global__ void softmax_kernel(float* x, int64_t n) {
  enter_kernel();
  __shared__ float scratch[32];
  float* v = x + blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) mx = fmaxf(mx, v[i]);
  mx = block_max<kRowThreads>(mx, scratch);
  float s = 0.0f;
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) {
    const float e = expf(v[i] - mx);
    v[i] = e;
    s = s + e;
  }
  s = block_sum<kRowThreads>(s, scratch);
  for (int64_t i = threadIdx.x; i < n; i += kRowThreads) v[i] = v[i] / s;
}

// One thread per row: routing rows are short (≤ 1024 experts) and the sequential
// softmax mirrors the CPU's order exactly (only expf's rounding may differ).
__global__ void topk_route_kernel(const float* logits, int64_t m, int32_t e, int32_t k,
                                  bool softmax_first, bool normalize, int32_t* ids,
                                  float* weights) {
  enter_kernel();
  extern __shared__ float smem[];
  const int64_t r = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (r >= m) return;
  float* p = smem + threadIdx.x * e;
  const float* lr = logits + r * e;
  for (int32_t i = 0; i < e; ++i) p[i] = lr[i];
  if (softmax_first) {
    float mx = -INFINITY;
    for (int32_t i = 0; i < e; ++i) mx = fmaxf(mx, p[i]);
    float s = 0.0f;
    for (int32_t i = 0; i < e; ++i) {
      p[i] = expf(p[i] - mx);
      s = s + p[i];
    }
    for (int32_t i = 0; i < e; ++i) p[i] = p[i] / s;
  }
  // k passes of "largest not yet taken, ties → lower id"; taken entries are marked
  // by writing their id into ids[] and skipped by scanning it.
  float sum = 0.0f;
  for (int32_t j = 0; j < k; ++j) {
    int32_t best = -1;
    for (int32_t i = 0; i < e; ++i) {
      bool taken = false;
      for (int32_t t = 0; t < j; ++t) taken = taken || ids[r * k + t] == i;
      if (taken) continue;
      if (best < 0 || p[i] > p[best]) best = i;
    }
    ids[r * k + j] = best;
    sum = sum + p[best];
  }
  for (int32_t j = 0; j < k; ++j) {
    const float pj = p[ids[r * k + j]];
    weights[r * k + j] = normalize ? pj / sum : pj;
  }
}

// The greedy argmax as one 64-bit key a row (argmax_keys, kernels.h): the high word
// is the value's bits made to order as unsigned integers (±0 made +0 first, so the two
// tie as the CPU's `>` has them), the low word 0xffffffff − index (a lower index is a
// larger key). The key order is the CPU sampler's (larger value, then lower index), so
// the row's largest key — reached by any grouping of the row — names its argmax; NaNs
// make no key and an all-NaN row's key stays 0 (no real key is 0: its high word would
// be a NaN's).
__device__ __forceinline__ unsigned long long argmax_key(float v, int64_t i) {
  const uint32_t u = __float_as_uint(v == 0.0f ? 0.0f : v);
  const uint32_t hi = (u & 0x80000000u) != 0 ? ~u : (u | 0x80000000u);
  return (static_cast<unsigned long long>(hi) << 32) | (0xffffffffu - static_cast<uint32_t>(i));
}

// A block of kArgmaxThreads takes kArgmaxSpan consecutive floats of row blockIdx.x
// (its blockIdx.y-th span; kArgmaxSpan / kArgmaxThreads a thread, every load issued
// before the first compare: float4s when the width is a multiple of 4 and the logits
// 16-byte aligned, else single floats), reduces their keys over the block and adds
// its best to the row's key with one atomicMax. No block waits for another: a 151,936-wide row is
// 38 blocks, and 64 rows fill the GPU once (the cluster kernel before it took 10 µs for one row:
// docs/performance.md).
constexpr int kArgmaxThreads = 256;
constexpr int kArgmaxPerThread = 16;
constexpr int64_t kArgmaxSpan = int64_t{kArgmaxThreads} * kArgmaxPerThread;

__global__ void __launch_bounds__(kArgmaxThreads)
    argmax_keys_kernel(const float* logits, int64_t n, unsigned long long* keys,
                       int32_t* nan_flag) {
  enter_kernel();
  __shared__ unsigned long long warp_best[kArgmaxThreads / 32];
  const float* row = logits + int64_t{blockIdx.x} * n;
  const int64_t lo = int64_t{blockIdx.y} * kArgmaxSpan;
  const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  float v[kArgmaxPerThread];
  int64_t at[kArgmaxPerThread];
  if (vec) {  // lo and n are multiples of 4: each float4 is wholly in or past the row
#pragma unroll
    for (int j = 0; j < kArgmaxPerThread / 4; ++j) {
      const int64_t i = lo + 4 * (threadIdx.x + int64_t{j} * kArgmaxThreads);
      const float4 q =
          i < n ? *reinterpret_cast<const float4*>(row + i) : make_float4(NAN, NAN, NAN, NAN);
      v[4 * j] = q.x;
      v[4 * j + 1] = q.y;
      v[4 * j + 2] = q.z;
      v[4 * j + 3] = q.w;
#pragma unroll
      for (int e = 0; e < 4; ++e) at[4 * j + e] = i + e;
    }
  } else {
#pragma unroll
    for (int j = 0; j < kArgmaxPerThread; ++j) {
      at[j] = lo + threadIdx.x + int64_t{j} * kArgmaxThreads;
      v[j] = at[j] < n ? row[at[j]] : NAN;
    }
  }
  unsigned long long best = 0;
  bool saw_nan = false;
#pragma unroll
  for (int j = 0; j < kArgmaxPerThread; ++j) {
    if (at[j] >= n) continue;  // past the row (its NaN padding is no logit)
    if (isnan(v[j])) {
      saw_nan = true;
    } else {
      const unsigned long long key = argmax_key(v[j], at[j]);
      best = key > best ? key : best;
    }
  }
  if (saw_nan && nan_flag != nullptr) *nan_flag = 1;  // every writer writes the same value
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const unsigned long long other = __shfl_xor_sync(0xffffffffu, best, o);
    best = other > best ? other : best;
  }
  if ((threadIdx.x & 31) == 0) warp_best[threadIdx.x >> 5] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w) best = warp_best[w] > best ? warp_best[w] : best;
    if (best != 0) atomicMax(keys + blockIdx.x, best);
  }
}

}  // namespace

Status embedding(const int32_t* ids, int64_t m, const void* table, WeightDType dt, int64_t rows,
                 int64_t d, float* y, cudaStream_t stream) {
  PKV_RETURN_IF_ERROR(check_positive("cuda embedding", "d", d));
  if (m == 0) return ok_status();
  return launch_kernel("embedding_kernel", embedding_kernel, static_cast<unsigned>(m), 128, 0,
                       stream, ids, table, dt, rows, d, y);
}

Status rms_norm(const float* x, int64_t m, int64_t d, const void* w, WeightDType wdt, float eps,
                bool one_plus_weight, float* y, cudaStream_t stream) {
  PKV_RETURN_IF_ERROR(check_positive("cuda rms_norm", "d", d));
  if (m == 0) return ok_status();
  return launch_kernel("rms_norm_kernel", rms_norm_kernel, static_cast<unsigned>(m), kRowThreads, 0,
                       stream, x, d, w, wdt, eps, one_plus_weight, y);
}

Status rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
            const RopeParams& p, cudaStream_t stream) {
  RopeTable f;
  PKV_RETURN_IF_ERROR(make_rope_table(p, head_dim, "cuda rope", &f));
  PKV_RETURN_IF_ERROR(check_positive("cuda rope", "num_heads", num_heads));
  if (m == 0) return ok_status();
  return launch_kernel("rope_kernel", rope_kernel, static_cast<unsigned>(m), 128, 0, stream, x,
                       num_heads, head_dim, positions, f);
}

Status silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return ok_status();
  return launch_kernel("silu_mul_kernel", silu_mul_kernel, grid_1d(n, 256), 256, 0, stream, gate,
                       up, n, out);
}

Status gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out,
                     cudaStream_t stream) {
  if (n == 0) return ok_status();
  return launch_kernel("gelu_tanh_mul_kernel", gelu_tanh_mul_kernel, grid_1d(n, 256), 256, 0,
                       stream, gate, up, n, out);
}

Status add(float* x, const float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return ok_status();
  return launch_kernel("add_kernel", add_kernel, grid_1d(n, 256), 256, 0, stream, x, y, n);
}

Status softmax(float* x, int64_t m, int64_t n, cudaStream_t stream) {
  PKV_RETURN_IF_ERROR(check_positive("cuda softmax", "n", n));
  if (m == 0) return ok_status();
  return launch_kernel("softmax_kernel", softmax_kernel, static_cast<unsigned>(m), kRowThreads, 0,
                       stream, x, n);
}

Status topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k,
                  bool softmax_first, bool normalize, int32_t* ids, float* weights,
                  cudaStream_t stream) {
  if (num_experts < 1 || num_experts > 1024) {
    return invalid_argument("cuda topk_route: num_experts must be in [1, 1024], got " +
                            std::to_string(num_experts));
  }
  if (k < 1 || k > num_experts) {
    return invalid_argument("cuda topk_route: k must be in [1, num_experts], got " +
                            std::to_string(k));
  }
  if (m == 0) return ok_status();
  const int threads = num_experts > 256 ? 8 : 32;
  const size_t smem = static_cast<size_t>(threads) * num_experts * sizeof(float);
  return launch_kernel("topk_route_kernel", topk_route_kernel, grid_1d(m, threads), threads, smem,
                       stream, logits, m, num_experts, k, softmax_first, normalize, ids, weights);
}

Status argmax_keys(const float* logits, int64_t m, int64_t n, unsigned long long* keys,
                   int32_t* nan_flag, cudaStream_t stream) {
  PKV_RETURN_IF_ERROR(check_positive("cuda argmax", "n", n));
  if (n > INT32_MAX) return invalid_argument("cuda argmax: n exceeds int32");
  const int64_t spans = (n + kArgmaxSpan - 1) / kArgmaxSpan;
  if (spans > 65535) return invalid_argument("cuda argmax: n exceeds 65,535 · 4,096");
  if (m < 0 || m > INT32_MAX) return invalid_argument("cuda argmax: m outside [0, 2³¹)");
  if (m == 0) return ok_status();
  return launch_kernel("argmax_keys_kernel", argmax_keys_kernel,
                       dim3(static_cast<unsigned>(m), static_cast<unsigned>(spans)), kArgmaxThreads,
                       0, stream, logits, n, keys, nan_flag);
}

}  // namespace pagedkv::backend::cuda
