// Row-wise and elementwise CUDA kernels: embedding, RMSNorm, RoPE, SwiGLU/GeGLU,
// residual add, softmax, top-k MoE routing and greedy argmax (see kernels.h for
// the exactness contract; reductions are the fixed trees of device_common.cuh).
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <cmath>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

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
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) {
    float wi = widen(w, dt, i);
    if (one_plus) wi = 1.0f + wi;
    yr[i] = wi * (xr[i] * inv);
  }
}

// Inverse frequencies computed on the host exactly as the CPU backend does
// (1 / powf(theta, 2i/base), then / inv_freq_divisor), passed by value, so the
// rotation angles are the CPU's bits and only cosf/sinf rounding differs. Pair i
// is (i, i + span): span = half (default) or head_dim / 2 (proportional).
constexpr int kMaxRopeHalf = 256;
struct RopeFreqs {
  float inv_freq[kMaxRopeHalf];
};

__global__ void rope_kernel(float* x, int32_t num_heads, int32_t head_dim, int32_t half,
                            int32_t span, const int32_t* positions, const RopeFreqs f,
                            float pos_scale) {
  enter_kernel();
  const int64_t t = blockIdx.x;
  float pos = static_cast<float>(positions[t]);
  if (pos_scale != 1.0f) pos = pos / pos_scale;
  for (int32_t idx = threadIdx.x; idx < num_heads * half; idx += blockDim.x) {
    const int32_t h = idx / half, i = idx % half;
    const float ang = pos * f.inv_freq[i];
    const float c = cosf(ang), s = sinf(ang);
    float* v = x + (t * num_heads + h) * head_dim;
    const float a = v[i], b = v[i + span];
    v[i] = a * c - b * s;
    v[i + span] = b * c + a * s;
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, float* out) {
  enter_kernel();
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float g = gate[i];
    out[i] = (g / (1.0f + expf(-g))) * up[i];
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

__device__ __forceinline__ bool better(float va, int32_t ia, float vb, int32_t ib) {
  if (ib < 0) return ia >= 0;
  if (ia < 0) return false;
  return va > vb || (va == vb && ia < ib);
}

// Greedy argmax of row blockIdx.x: a cluster of kArgmaxSlices blocks a row, block
// z taking the z-th contiguous slice with kArgmaxThreads threads; each block's best
// (value, index) goes to its shared memory and block 0 folds the slices over the
// cluster's shared memory. `better` is a total order (larger value, then lower
// index; NaN never wins), so any grouping of the row gives the serial scan's
// answer: the split only spreads the 600 KiB of a 151,936-wide row over eight SMs
// (one 256-thread block took ~250 µs a step on the H200; docs/performance.md).
// Rows whose width is a multiple of 4 on 16-byte-aligned logits are read as
// float4s (slices rounded up to whole float4s: a thread's loads all in flight at
// once instead of one float at a time); the others one float at a time. nan_flag
// (may be null): set to 1 when the rows hold a NaN — flag_nan's answer over the
// same floats, read in the same pass.
constexpr int kArgmaxSlices = 8;
constexpr int kArgmaxThreads = 1024;

__device__ __forceinline__ void argmax_take(float v, int64_t i, float& bv, int32_t& bi,
                                            bool& saw_nan) {
  if (isnan(v)) {
    saw_nan = true;
  } else if (better(v, static_cast<int32_t>(i), bv, bi)) {
    bv = v;
    bi = static_cast<int32_t>(i);
  }
}

__global__ void __cluster_dims__(1, kArgmaxSlices, 1) __launch_bounds__(kArgmaxThreads)
    argmax_kernel(const float* logits, int64_t n, int32_t* ids, int32_t* nan_flag) {
  enter_kernel();
  namespace cg = cooperative_groups;
  cg::cluster_group cluster = cg::this_cluster();
  __shared__ float sv[kArgmaxThreads / 32];
  __shared__ int32_t si[kArgmaxThreads / 32];
  __shared__ float block_v;
  __shared__ int32_t block_i;
  const float* row = logits + blockIdx.x * n;
  const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(logits) % 16 == 0;
  int64_t slice = (n + kArgmaxSlices - 1) / kArgmaxSlices;
  if (vec) slice = (slice + 3) / 4 * 4;
  const int64_t lo = blockIdx.y * slice < n ? blockIdx.y * slice : n;
  const int64_t hi = lo + slice < n ? lo + slice : n;
  float bv = 0.0f;
  int32_t bi = -1;
  bool saw_nan = false;
  if (vec) {  // lo and hi are multiples of 4: whole float4s
#pragma unroll 4
    for (int64_t i = lo + 4 * threadIdx.x; i < hi; i += 4 * kArgmaxThreads) {
      const float4 v = *reinterpret_cast<const float4*>(row + i);
      argmax_take(v.x, i, bv, bi, saw_nan);
      argmax_take(v.y, i + 1, bv, bi, saw_nan);
      argmax_take(v.z, i + 2, bv, bi, saw_nan);
      argmax_take(v.w, i + 3, bv, bi, saw_nan);
    }
  } else {
#pragma unroll 4
    for (int64_t i = lo + threadIdx.x; i < hi; i += kArgmaxThreads)
      argmax_take(row[i], i, bv, bi, saw_nan);
  }
  if (saw_nan && nan_flag != nullptr) *nan_flag = 1;  // every writer writes the same value
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
    const int32_t oi = __shfl_xor_sync(0xffffffffu, bi, o);
    if (better(ov, oi, bv, bi)) {
      bv = ov;
      bi = oi;
    }
  }
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  if (lane == 0) {
    sv[warp] = bv;
    si[warp] = bi;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kArgmaxThreads / 32; ++w)
      if (better(sv[w], si[w], sv[0], si[0])) {
        sv[0] = sv[w];
        si[0] = si[w];
      }
    block_v = sv[0];
    block_i = si[0];
  }
  cluster.sync();  // every slice's best is in its block's shared memory
  if (cluster.block_rank() == 0 && threadIdx.x == 0) {
    float v = block_v;
    int32_t idx = block_i;
    for (unsigned z = 1; z < kArgmaxSlices; ++z) {
      const float ov = *cluster.map_shared_rank(&block_v, z);
      const int32_t oi = *cluster.map_shared_rank(&block_i, z);
      if (better(ov, oi, v, idx)) {
        v = ov;
        idx = oi;
      }
    }
    ids[blockIdx.x] = idx < 0 ? 0 : idx;
  }
  cluster.sync();  // no block leaves while block 0 reads its shared memory
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
  const int32_t rot = p.rotary_dim > 0 ? p.rotary_dim : head_dim;
  if (rot > head_dim || rot % 2 != 0 || rot / 2 > kMaxRopeHalf) {
    return invalid_argument("cuda rope: rotary_dim " + std::to_string(rot) +
                            " must be even, ≤ head_dim " + std::to_string(head_dim) + " and ≤ " +
                            std::to_string(2 * kMaxRopeHalf));
  }
  PKV_RETURN_IF_ERROR(check_positive("cuda rope", "num_heads", num_heads));
  if (m == 0) return ok_status();
  const bool proportional = p.kind == RopeKind::kProportional;
  const int32_t half = rot / 2, span = proportional ? head_dim / 2 : half;
  const int32_t base = proportional ? head_dim : rot;
  RopeFreqs f{};
  for (int32_t i = 0; i < half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(base);
    f.inv_freq[i] = 1.0f / std::pow(p.theta, exponent);
    if (p.inv_freq_divisor != 1.0f) f.inv_freq[i] = f.inv_freq[i] / p.inv_freq_divisor;
  }
  return launch_kernel("rope_kernel", rope_kernel, static_cast<unsigned>(m), 128, 0, stream, x,
                       num_heads, head_dim, half, span, positions, f, p.position_scale);
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

Status argmax(const float* logits, int64_t m, int64_t n, int32_t* ids, int32_t* nan_flag,
              cudaStream_t stream) {
  PKV_RETURN_IF_ERROR(check_positive("cuda argmax", "n", n));
  if (n > INT32_MAX) return invalid_argument("cuda argmax: n exceeds int32");
  if (m == 0) return ok_status();
  return launch_kernel("argmax_kernel", argmax_kernel,
                       dim3(static_cast<unsigned>(m), kArgmaxSlices), kArgmaxThreads, 0, stream,
                       logits, n, ids, nan_flag);
}

}  // namespace pagedkv::backend::cuda
