// Fused step kernels for the device-resident forward (src/model/cuda): the q/k/v
// and gate/up GEMMs of a layer run as one GEMM each over row-concatenated
// weights, and these kernels take the fused outputs apart (split_qkv,
// silu_mul_halves), prepare q/k/v in one pass (per-head RMSNorm, RoPE, the K/V
// write: qkv_norm_rope_write) and fold the residual add into the next RMSNorm
// (add_rms_norm). Each computes every element with the exact operation sequence
// of the separate kernels it replaces (elementwise.cu's rms_norm, rope, add,
// silu_mul and kv_write.cu's write_kv: the same 256-thread strided sum and
// block tree — or, in the q/k/v prep's 128-thread blocks, a tree that gives its
// bits — the same expressions), so a fused step gives the separate
// kernels' bits; each output column of a GEMM is one dot product over k in a
// fixed order whatever the number of columns (kernels.h). Given x_planes.h's planes,
// the add + RMSNorm and the SwiGLU also write their output's bf16 planes for the
// k-split GEMM after them (the split's bits, gemm_common.cuh's store_x_planes_pairs).
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/gemm_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_slot.cuh"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/rope_table.cuh"
#include "backend/cuda/x_planes.h"
#include "util/knobs.h"

namespace pagedkv::backend::cuda {
namespace {

__global__ void split_qkv_kernel(const float* x, int64_t qd, int64_t kd, float* q, float* k,
                                 float* v) {
  enter_kernel();
  const int64_t t = blockIdx.x, w = qd + 2 * kd;
  const float* src = x + t * w;
  for (int64_t i = threadIdx.x; i < w; i += blockDim.x) {
    const float e = src[i];
    if (i < qd) {
      q[t * qd + i] = e;
    } else if (i < qd + kd) {
      k[t * kd + i - qd] = e;
    } else {
      v[t * kd + i - qd - kd] = e;
    }
  }
}

// Row blockIdx.x, elements blockIdx.y·256 + threadIdx.x: a block a 256-wide piece
// (not a block a row, whose one block walked the row 256 at a time: ~11 µs at one
// row on the H200).
// planes (x_planes.h): also the output's planes for the down GEMM.
__global__ void silu_mul_halves_kernel(const float* gu, int64_t inter, float* out,
                                       const int32_t* live_rows, bool trigger_at_entry,
                                       uint16_t* planes, int32_t groups) {
  if (trigger_at_entry) allow_next_kernel_launch();  // launch.h's early_trigger
  enter_kernel(trigger_at_entry);
  const int64_t t = blockIdx.x, i = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (live_rows != nullptr && t >= *live_rows) return;  // the whole block
  const bool in = i < inter;
  float v = 0.0f;
  if (in) {
    const float* gate = gu + t * 2 * inter;
    v = silu_times(gate[i], gate[inter + i]);
    out[t * inter + i] = v;
  }
  // Every lane of the block's whole warps: i's parity is the lane's.
  if (planes != nullptr) gemm_detail::store_x_planes_pairs(planes, groups, t, i, v, in);
}

constexpr int kRowThreads = 256;  // rms_norm_kernel's block (elementwise.cu)
constexpr int kMaxHeadDim = 256;

// rms_norm_kernel after add_kernel, one row per block.
// Rows of up to kRowThreads · kRowRegs elements (hidden sizes to 2048) stay in
// registers between the add and the norm, and their weights are read before the
// wait for the previous kernel (weights are never written by one); longer rows
// reread x. The same operations in the same order either way: one bit pattern.
constexpr int kRowRegs = 8;

// planes (x_planes.h): also out's planes for the GEMM after it.
__global__ void add_rms_norm_kernel(float* x, const float* y, int64_t d, const void* w,
                                    WeightDType dt, float eps, float* out, bool trigger_at_entry,
                                    uint16_t* planes, int32_t groups) {
  __shared__ float scratch[32];
  if (trigger_at_entry) allow_next_kernel_launch();  // launch.h's early_trigger
  float* xr = x + blockIdx.x * d;
  const float* yr = y + blockIdx.x * d;
  float* orow = out + blockIdx.x * d;
  if (d <= kRowThreads * kRowRegs) {
    float wr[kRowRegs], xv[kRowRegs];
#pragma unroll
    for (int j = 0; j < kRowRegs; ++j) {
      const int64_t i = threadIdx.x + j * kRowThreads;
      wr[j] = i < d ? widen(w, dt, i) : 0.0f;
    }
    enter_kernel(trigger_at_entry);
#pragma unroll
    for (int j = 0; j < kRowRegs; ++j) {
      const int64_t i = threadIdx.x + j * kRowThreads;
      if (i < d) {
        xv[j] = xr[i] + yr[i];
        xr[i] = xv[j];
      }
    }
    float ss = 0.0f;
#pragma unroll
    for (int j = 0; j < kRowRegs; ++j)
      if (threadIdx.x + j * kRowThreads < d) ss = ss + xv[j] * xv[j];
    ss = block_sum<kRowThreads>(ss, scratch);
    const float inv = rms_inverse(ss, d, eps);
#pragma unroll
    for (int j = 0; j < kRowRegs; ++j) {
      const int64_t i = threadIdx.x + j * kRowThreads;
      const bool in = i < d;
      float o = 0.0f;
      if (in) {
        o = wr[j] * (xv[j] * inv);
        orow[i] = o;
      }
      if (planes != nullptr && j * kRowThreads < d)  // the block's warps alike
        gemm_detail::store_x_planes_pairs(planes, groups, blockIdx.x, i, o, in);
    }
    return;
  }
  enter_kernel(trigger_at_entry);
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) xr[i] = xr[i] + yr[i];
  float ss = 0.0f;
  for (int64_t i = threadIdx.x; i < d; i += kRowThreads) ss = ss + xr[i] * xr[i];
  ss = block_sum<kRowThreads>(ss, scratch);
  const float inv = rms_inverse(ss, d, eps);
  // Whole warps every pass (the planes' pair stores shuffle): i's parity is the lane's.
  for (int64_t base = 0; base < d; base += kRowThreads) {
    const int64_t i = base + threadIdx.x;
    const bool in = i < d;
    float o = 0.0f;
    if (in) {
      const float wi = widen(w, dt, i);
      o = wi * (xr[i] * inv);
      orow[i] = o;
    }
    if (planes != nullptr) gemm_detail::store_x_planes_pairs(planes, groups, blockIdx.x, i, o, in);
  }
}

// One block per (token, head of q, k, v): q and k heads get rms_norm_kernel's
// normalization and rope_kernel's rotation; q goes to p.q, k and v to the cache.
// A head is at most kRowThreads wide, so thread i holds element i. Before the wait
// for the q/k/v GEMM it reads what no kernel writes — its norm weight, the token's
// position and cache row (the step's metadata) — so the chain after the wait is
// the GEMM's output alone.
// kThreads: 128 for heads of up to 128 (half the warps of 256, none of them idle at
// head_dim 128), else 256. The norm's sum is block_sum<256>'s (rms_norm_kernel's) either
// way: warps past the head add exact zeros in its tree, whose first cross-warp step pairs
// warp w with w + 4 (warp_sum's xor 4 after xor 16 and 8 add zeros), so dropping them
// changes no bit.
static_assert(kMaxHeadDim <= kRowThreads, "an element a thread");
template <typename T, int kThreads>
__global__ void __launch_bounds__(kThreads)
    qkv_prep_kernel(const QkvPrepParams p, const RopeTable f) {
  __shared__ float scratch[32];
  __shared__ float hv[kMaxHeadDim];
  if (p.trigger_next_at_entry) allow_next_kernel_launch();
  const int32_t t = blockIdx.x, head = blockIdx.y, i = threadIdx.x;
  const int32_t NH = p.num_heads, KVH = p.kv.num_kv_heads, D = p.kv.head_dim;
  const bool is_q = head < NH, is_v = head >= NH + KVH;
  const int64_t row = static_cast<int64_t>(KVH) * D;
  const int64_t slot = is_q ? 0 : kv_slot(p.kv, t);
  const float wi = !is_v && i < D ? widen(is_q ? p.q_norm : p.k_norm, p.norm_dtype, i) : 0.0f;
  const float pos = rope_position(p.kv.positions[t], f.position_scale);
  wait_for_prior_kernels();
  if (!p.trigger_next_at_entry) allow_next_kernel_launch();
  const float* src = p.qkv + (static_cast<int64_t>(t) * (NH + 2 * KVH) + head) * D;
  if (is_v) {  // a V head: the K/V write's copy
    T* dst = static_cast<T*>(p.kv.v_cache) + slot * row + (head - NH - KVH) * D;
    if (i < D) dst[i] = to_kv<T>(src[i]);
    return;
  }
  const float x = i < D ? src[i] : 0.0f;
  float ss = 0.0f;
  if (i < D) ss = ss + x * x;
  ss = block_sum<kThreads>(ss, scratch);
  const float inv = rms_inverse(ss, D, p.eps);
  if (i < D) hv[i] = wi * (x * inv);
  __syncthreads();
  if (i < f.half) rope_rotate(pos, f.inv_freq[i], hv[i], hv[i + f.span]);
  __syncthreads();
  if (i >= D) return;
  if (is_q) {
    p.q[(static_cast<int64_t>(t) * NH + head) * D + i] = hv[i];
  } else {
    T* dst = static_cast<T*>(p.kv.k_cache) + slot * row + (head - NH) * D;
    dst[i] = to_kv<T>(hv[i]);
  }
}

// Whether heads of up to 128 take the 128-thread prep (PAGEDKV_CUDA_QKV_PREP_NARROW,
// default on; read once): speed only, the same bits (qkv_prep_kernel).
bool qkv_prep_narrow() {
  static const bool on = env_bool("PAGEDKV_CUDA_QKV_PREP_NARROW").value_or(true);
  return on;
}

}  // namespace

Status add_rms_norm(float* x, const float* y, int64_t m, int64_t d, const void* w, WeightDType wdt,
                    float eps, float* out, cudaStream_t stream, const XPlanes& planes) {
  if (m < 0 || d <= 0) return invalid_argument("cuda add_rms_norm: need m ≥ 0, d > 0");
  if (m == 0) return ok_status();
  PKV_RETURN_IF_ERROR(note_x_planes_written(planes, stream, "add_rms_norm"));
  return launch_kernel("add_rms_norm_kernel", add_rms_norm_kernel, static_cast<unsigned>(m),
                       kRowThreads, 0, stream, x, y, d, w, wdt, eps, out,
                       early_trigger(EarlyTrigger::kAddNorm), planes.data, planes.groups);
}

Status add_rms_norm(float* x, const float* y, int64_t m, int64_t d, const void* w, WeightDType wdt,
                    float eps, float* out, cudaStream_t stream) {
  return add_rms_norm(x, y, m, d, w, wdt, eps, out, stream, XPlanes{});
}

Status qkv_norm_rope_write(const QkvPrepParams& p, const RopeParams& rope, cudaStream_t stream) {
  auto bad = [](const std::string& what) {
    return invalid_argument("cuda qkv_norm_rope_write: " + what);
  };
  const KvWriteParams& kv = p.kv;
  if (p.num_tokens < 0) return bad("num_tokens < 0");
  if (p.num_tokens == 0) return ok_status();
  if (p.num_heads < 1 || kv.num_kv_heads < 1) return bad("num_heads and num_kv_heads must be ≥ 1");
  if (kv.head_dim < 2 || kv.head_dim > kMaxHeadDim) return bad("head_dim must be in [2, 256]");
  if (p.qkv == nullptr || p.q == nullptr || p.q_norm == nullptr || p.k_norm == nullptr ||
      kv.positions == nullptr || kv.k_cache == nullptr || kv.v_cache == nullptr)
    return bad("qkv, q, q_norm, k_norm, positions and the caches must be set");
  if (kv.layout == KvLayout::kBlockTable && (kv.block_tables == nullptr || kv.block_size < 1))
    return bad("block layout needs block_tables and block_size");
  RopeTable f;  // rope()'s table (rope_table.cuh)
  PKV_RETURN_IF_ERROR(make_rope_table(rope, kv.head_dim, "cuda qkv_norm_rope_write", &f));
  const dim3 grid(static_cast<unsigned>(p.num_tokens),
                  static_cast<unsigned>(p.num_heads + 2 * kv.num_kv_heads));
  const bool f32 = kv.kv_type == KvType::kF32;
  if (kv.head_dim <= 128 && qkv_prep_narrow())
    return launch_kernel("qkv_prep_kernel",
                         f32 ? qkv_prep_kernel<float, 128> : qkv_prep_kernel<__nv_bfloat16, 128>,
                         grid, 128, 0, stream, p, f);
  return launch_kernel(
      "qkv_prep_kernel",
      f32 ? qkv_prep_kernel<float, kRowThreads> : qkv_prep_kernel<__nv_bfloat16, kRowThreads>, grid,
      kRowThreads, 0, stream, p, f);
}

Status split_qkv(const float* x, int64_t m, int64_t qd, int64_t kd, float* q, float* k, float* v,
                 cudaStream_t stream) {
  if (m < 0 || qd <= 0 || kd <= 0)
    return invalid_argument("cuda split_qkv: need m ≥ 0, qd > 0, kd > 0");
  if (m == 0) return ok_status();
  return launch_kernel("split_qkv_kernel", split_qkv_kernel, static_cast<unsigned>(m), 256, 0,
                       stream, x, qd, kd, q, k, v);
}

namespace {

Status launch_silu_mul_halves(const float* gu, int64_t m, int64_t inter, float* out,
                              cudaStream_t stream, const int32_t* live_rows,
                              const XPlanes& planes) {
  if (m < 0 || m > 0x7fffffff || inter <= 0)
    return invalid_argument("cuda silu_mul_halves: need 0 ≤ m < 2³¹, inter > 0");
  if (m == 0) return ok_status();
  const int64_t pieces = (inter + 255) / 256;
  if (pieces > 65535) return invalid_argument("cuda silu_mul_halves: inter exceeds 65535·256");
  PKV_RETURN_IF_ERROR(note_x_planes_written(planes, stream, "silu_mul_halves"));
  return launch_kernel("silu_mul_halves_kernel", silu_mul_halves_kernel,
                       dim3(static_cast<unsigned>(m), static_cast<unsigned>(pieces)), 256, 0,
                       stream, gu, inter, out, live_rows, early_trigger(EarlyTrigger::kSwiglu),
                       planes.data, planes.groups);
}

}  // namespace

Status silu_mul_halves(const float* gu, int64_t m, int64_t inter, float* out, cudaStream_t stream,
                       const int32_t* live_rows) {
  return launch_silu_mul_halves(gu, m, inter, out, stream, live_rows, XPlanes{});
}

Status silu_mul_halves(const float* gu, int64_t m, int64_t inter, float* out, cudaStream_t stream,
                       const XPlanes& planes) {
  return launch_silu_mul_halves(gu, m, inter, out, stream, nullptr, planes);
}

}  // namespace pagedkv::backend::cuda
