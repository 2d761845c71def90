// Paged attention on the GPU: decode and prefill/extend are one kernel pair.
//
// Exactness. A query at absolute position p reads keys [start, p] (start = 0, or
// p - window + 1). Keys are cut into partitions of kAttnPartition positions
// anchored at position 0 — partition i holds [i·P, (i+1)·P) — so the split layout
// depends only on p, never on the batch, the chunk or the number of cached tokens.
// For each (token, KV head, partition) one block of 8 warps computes, for every
// query head of the GQA group (K and V are read once for the whole group), the
// partition's scores (one thread per key, one FMA chain over d), their max m, the
// weights e^(s−m), their sum l (strided + butterfly), and the unnormalized
// Σ e^(s−m)·v (warp w takes keys ≡ w mod 8 in ascending order, one FMA chain per
// output element; the 8 warp partials are added in a fixed tree).
// The combine kernel then folds the partitions in ascending order:
//   out = Σ_i e^(m_i−M)·acc_i / Σ_i e^(m_i−M)·l_i,  M = max_i m_i.
// Every number a query's output depends on is computed by the same instruction
// sequence whether the query is alone (decode), in a chunk of a prompt, or in a
// batch of many sequences; only the key addresses differ between the layouts
// (block table, contiguous, tile pointers), so paged and flat give the same bits.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/attention_check.h"
#include "backend/cuda/attention_partitions.cuh"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace pagedkv::backend::cuda {
namespace {

constexpr int kP = kAttnPartition;
constexpr int kThreads = 256, kWarps = kThreads / 32;  // kP == kThreads: a key per thread
constexpr int kMaxGroup = 16;

__device__ __forceinline__ float to_f32(float v) { return v; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 v) { return __bfloat162float(v); }

// Loads E consecutive elements as f32 (vectorized when E·sizeof(T) is 8 or 16 bytes).
template <typename T, int E>
__device__ __forceinline__ void load_row(const T* p, float (&out)[E]) {
  if constexpr (sizeof(T) * E == 16) {
    union {
      uint4 u;
      T t[E];
    } v;
    v.u = *reinterpret_cast<const uint4*>(p);
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_f32(v.t[e]);
  } else if constexpr (sizeof(T) * E == 8) {
    union {
      uint2 u;
      T t[E];
    } v;
    v.u = *reinterpret_cast<const uint2*>(p);
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_f32(v.t[e]);
  } else {
#pragma unroll
    for (int e = 0; e < E; ++e) out[e] = to_f32(p[e]);
  }
}

// Element offset / pointer of the K (or V) row of (seq, pos) for head 0.
template <typename T, KvLayout L>
__device__ __forceinline__ const T* kv_row(const PagedAttentionParams& p, const void* base,
                                           const void* const* tiles, int32_t seq, int32_t pos,
                                           int64_t row_elems) {
  if constexpr (L == KvLayout::kBlockTable) {
    const int32_t blk =
        p.block_tables[static_cast<int64_t>(seq) * p.max_blocks_per_seq + pos / p.block_size];
    const int64_t slot = static_cast<int64_t>(blk) * p.block_size + pos % p.block_size;
    return static_cast<const T*>(base) + slot * row_elems;
  } else if constexpr (L == KvLayout::kContiguous) {
    return static_cast<const T*>(base) + (seq * p.seq_capacity + pos) * row_elems;
  } else {
    return static_cast<const T*>(tiles[pos / p.block_size]) +
           static_cast<int64_t>(pos % p.block_size) * row_elems;
  }
}

template <int D, typename T, KvLayout L>
__global__ void __launch_bounds__(kThreads)
    attn_partition_kernel(const PagedAttentionParams p, int32_t group, int32_t parts) {
  enter_kernel();
  // PV phase: lane l < kLanes owns output dims [l·E, l·E+E) (small heads: one each).
  constexpr int E = D >= 32 ? D / 32 : 1;
  constexpr int kLanes = D >= 32 ? 32 : D;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  float* q_s = reinterpret_cast<float*>(smem_raw);                 // [group][D]
  float* s_s = q_s + group * D;                                    // [group][kP]
  const T** krow = reinterpret_cast<const T**>(s_s + group * kP);  // [kP]
  const T** vrow = krow + kP;                                      // [kP]
  // then red [kWarps][4 heads][D] for the PV phase (below)

  const int32_t t = blockIdx.x, part = blockIdx.y, kvh = blockIdx.z;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t pos = p.positions[t];
  if (part * kP > pos) return;  // this token has fewer partitions
  const int32_t seq = p.token_seq != nullptr ? p.token_seq[t] : 0;
  const int32_t start =
      (p.sliding_window > 0 && pos - p.sliding_window + 1 > 0) ? pos - p.sliding_window + 1 : 0;
  const int32_t k_begin = part * kP;
  const int32_t k_end = min(pos + 1, k_begin + kP);
  const int32_t kb = max(k_begin, start);
  const int32_t n = k_end - kb;  // keys in this partition (≤ 0: all before the window)
  const int64_t row_elems = static_cast<int64_t>(p.num_kv_heads) * D;
  PartitionWorkspace ws = partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);
  const int32_t h0 = kvh * group;

  if (n <= 0) {
    for (int idx = tid; idx < group * D; idx += kThreads) {
      const int64_t slot = (static_cast<int64_t>(t) * p.num_heads + h0 + idx / D) * parts + part;
      ws.acc[slot * D + idx % D] = 0.0f;
      if (idx % D == 0) {
        ws.m[slot] = -INFINITY;
        ws.l[slot] = 0.0f;
      }
    }
    return;
  }

  for (int idx = tid; idx < group * D; idx += kThreads)
    q_s[idx] = p.q[(static_cast<int64_t>(t) * p.num_heads + h0) * D + idx];
  for (int j = tid; j < n; j += kThreads) {
    krow[j] = kv_row<T, L>(p, p.k_cache, p.k_tiles, seq, kb + j, row_elems) + kvh * D;
    vrow[j] = kv_row<T, L>(p, p.v_cache, p.v_tiles, seq, kb + j, row_elems) + kvh * D;
  }
  __syncthreads();

  // Scores: thread per key (keys tid, tid+128, …); each dot product runs over
  // d = 0 … D-1 in one FMA chain. Query heads of the group go 4 at a time.
  constexpr int C = 16 / sizeof(T);  // elements per 16-byte load
  for (int j = tid; j < n; j += kThreads) {
    const T* kr = krow[j];
    for (int hc = 0; hc < group; hc += 4) {
      float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll(D / C <= 16 ? D / C : 16)
      for (int c = 0; c < D / C; ++c) {
        float k[C];
        load_row<T, C>(kr + c * C, k);
#pragma unroll
        for (int hh = 0; hh < 4; ++hh) {
          if (hc + hh < group) {
            const float* qh = q_s + (hc + hh) * D + c * C;
#pragma unroll
            for (int e = 0; e < C; ++e) acc[hh] = __fmaf_rn(qh[e], k[e], acc[hh]);
          }
        }
      }
#pragma unroll
      for (int hh = 0; hh < 4; ++hh)
        if (hc + hh < group) s_s[(hc + hh) * kP + j] = acc[hh] * p.scale;
    }
  }
  __syncthreads();

  // Per head: max, weights, sum.
  for (int h = warp; h < group; h += kWarps) {
    float* s = s_s + h * kP;
    float mx = -INFINITY;
    for (int j = lane; j < n; j += 32) mx = fmaxf(mx, s[j]);
    mx = warp_max(mx);
    float l = 0.0f;
    for (int j = lane; j < n; j += 32) {
      const float e = expf(s[j] - mx);
      s[j] = e;
      l = l + e;
    }
    l = warp_sum(l);
    if (lane == 0) {
      const int64_t slot = (static_cast<int64_t>(t) * p.num_heads + h0 + h) * parts + part;
      ws.m[slot] = mx;
      ws.l[slot] = l;
    }
  }
  __syncthreads();

  // Σ_j w_j · v_j: warp w sums keys j ≡ w (mod 8) ascending, lane l owns dims
  // [l·E, l·E+E); the eight warp partials are added in the fixed tree
  // ((w0 + w1) + (w2 + w3)) + ((w4 + w5) + (w6 + w7)).
  float* red = s_s + group * kP + (2 * kP * sizeof(void*)) / sizeof(float);  // [kWarps][4][D]
  for (int hc = 0; hc < group; hc += 4) {
    float acc[4][E];
#pragma unroll
    for (int hh = 0; hh < 4; ++hh)
#pragma unroll
      for (int e = 0; e < E; ++e) acc[hh][e] = 0.0f;
#pragma unroll 8
    for (int j = warp; j < n; j += kWarps) {
      float v[E];
      if (lane >= kLanes) continue;
      load_row<T, E>(vrow[j] + lane * E, v);
#pragma unroll
      for (int hh = 0; hh < 4; ++hh) {
        if (hc + hh < group) {
          const float w = s_s[(hc + hh) * kP + j];
#pragma unroll
          for (int e = 0; e < E; ++e) acc[hh][e] = __fmaf_rn(w, v[e], acc[hh][e]);
        }
      }
    }
#pragma unroll
    for (int hh = 0; hh < 4; ++hh)
#pragma unroll
      for (int e = 0; e < E; ++e)
        if (lane < kLanes) red[(warp * 4 + hh) * D + lane * E + e] = acc[hh][e];
    __syncthreads();
    for (int idx = tid; idx < 4 * D; idx += kThreads) {
      const int hh = idx / D, d = idx % D;
      if (hc + hh >= group) continue;
      auto part_of = [&](int w) { return red[(w * 4 + hh) * D + d]; };
      static_assert(kWarps == 8, "the fixed warp-partial tree below is written for 8 warps");
      const float r = ((part_of(0) + part_of(1)) + (part_of(2) + part_of(3))) +
                      ((part_of(4) + part_of(5)) + (part_of(6) + part_of(7)));
      const int64_t slot = (static_cast<int64_t>(t) * p.num_heads + h0 + hc + hh) * parts + part;
      ws.acc[slot * D + d] = r;
    }
    __syncthreads();
  }
}

// The combine's reference form (combine_partitions_serial, a test hook): every
// thread runs each step of the fold itself — M, then L, then its dims' sums.
template <int D>
__global__ void attn_combine_serial_kernel(const PagedAttentionParams p, int32_t parts,
                                           bool trigger_at_entry) {
  if (trigger_at_entry) allow_next_kernel_launch();  // launch.h's early_trigger
  enter_kernel(trigger_at_entry);
  const int32_t t = blockIdx.x, h = blockIdx.y;
  const int32_t pos = p.positions[t];
  const int32_t np = pos / kP + 1;
  PartitionWorkspace ws = partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);
  const int64_t base = (static_cast<int64_t>(t) * p.num_heads + h) * parts;
  float M = -INFINITY;
  for (int32_t i = 0; i < np; ++i) M = fmaxf(M, ws.m[base + i]);
  float L = 0.0f;
  for (int32_t i = 0; i < np; ++i) L = L + ws.l[base + i] * expf(ws.m[base + i] - M);
  for (int d = threadIdx.x; d < D; d += blockDim.x) {
    float o = 0.0f;
    for (int32_t i = 0; i < np; ++i)
      o = __fmaf_rn(ws.acc[(base + i) * D + d], expf(ws.m[base + i] - M), o);
    p.out[(static_cast<int64_t>(t) * p.num_heads + h) * D + d] = o / L;
  }
}

// The combine: the serial kernel's operations with the shared work done once a
// block instead of once a thread. M is a max (exact in any order; a ±0 M changes
// no m_i − M's exponential), so the threads take strided partitions and reduce;
// each e^(m_i − M) is computed once into shared memory (`w`, one float a
// partition: the same bits as every thread computing it); thread 0 runs L's chain
// in ascending order while the others fold their dims, each dim's chain over the
// partitions ascending as before: so the same bits as attn_combine_serial_kernel,
// which tests/backend/cuda_attention_test.cc checks (PartitionCombineEqualsItsSerialReference,
// passed on the H200).
// The first kCombinePre partitions' numbers (a thread's m, its dims' acc, thread 0's
// l) are loaded at once, without waiting for the token's position (which, being the
// step's metadata, is read before the programmatic-launch wait: launch.cuh): a short
// context's combine waits for one round of loads, not three. Slots past the token's
// partitions hold numbers of no use (read, never used: the launch's `parts` slots are
// all allocated).
constexpr int kCombinePre = 4;

template <int D>
__global__ void attn_combine_kernel(const PagedAttentionParams p, int32_t parts,
                                    bool trigger_at_entry) {
  extern __shared__ float w[];  // [parts]
  __shared__ float red[4], total;
  if (trigger_at_entry) allow_next_kernel_launch();  // launch.h's early_trigger
  constexpr int kDims = (D + 127) / 128;             // dims a thread
  const int32_t t = blockIdx.x, h = blockIdx.y;
  const int32_t pos = p.positions[t];  // the step's metadata: before the wait
  enter_kernel(trigger_at_entry);
  PartitionWorkspace ws = partition_workspace(p.workspace, p.num_tokens, p.num_heads, D, parts);
  const int64_t base = (static_cast<int64_t>(t) * p.num_heads + h) * parts;
  const int tid = threadIdx.x, nthreads = blockDim.x;  // min(D, 128): 16 … 128
  const int32_t pre = parts < kCombinePre ? parts : kCombinePre;
  const float m_own = tid < parts ? ws.m[base + tid] : -INFINITY;  // partition tid's m
  float acc_pre[kDims][kCombinePre], l_pre[kCombinePre];
#pragma unroll
  for (int i = 0; i < kCombinePre; ++i) {
#pragma unroll
    for (int k = 0; k < kDims; ++k) {
      const int d = tid + k * nthreads;
      acc_pre[k][i] = i < pre && d < D ? ws.acc[(base + i) * D + d] : 0.0f;
    }
    l_pre[i] = tid == 0 && i < pre ? ws.l[base + i] : 0.0f;
  }
  const int32_t np = pos / kP + 1;
  float mx = -INFINITY;
  for (int32_t i = tid; i < np; i += nthreads) mx = fmaxf(mx, i == tid ? m_own : ws.m[base + i]);
  const unsigned mask = nthreads >= 32 ? 0xffffffffu : (1u << nthreads) - 1u;
  for (int o = (nthreads >= 32 ? 16 : nthreads / 2); o > 0; o >>= 1)
    mx = fmaxf(mx, __shfl_xor_sync(mask, mx, o));
  if ((tid & 31) == 0) red[tid >> 5] = mx;
  __syncthreads();
  float M = red[0];
  for (int k = 1; k < (nthreads + 31) / 32; ++k) M = fmaxf(M, red[k]);
  for (int32_t i = tid; i < np; i += nthreads) w[i] = expf((i == tid ? m_own : ws.m[base + i]) - M);
  __syncthreads();
  if (tid == 0) {
    float L = 0.0f;
#pragma unroll
    for (int i = 0; i < kCombinePre; ++i)
      if (i < np) L = L + l_pre[i] * w[i];
    for (int32_t i = kCombinePre; i < np; ++i) L = L + ws.l[base + i] * w[i];
    total = L;
  }
  float o[kDims];
#pragma unroll
  for (int k = 0; k < kDims; ++k) {
    const int d = tid + k * nthreads;
    float acc = 0.0f;
    if (d < D) {
#pragma unroll
      for (int i = 0; i < kCombinePre; ++i)
        if (i < np) acc = __fmaf_rn(acc_pre[k][i], w[i], acc);
      for (int32_t i = kCombinePre; i < np; ++i)
        acc = __fmaf_rn(ws.acc[(base + i) * D + d], w[i], acc);
    }
    o[k] = acc;
  }
  __syncthreads();
  const float L = total;
#pragma unroll
  for (int k = 0; k < kDims; ++k) {
    const int d = tid + k * nthreads;
    if (d < D) p.out[(static_cast<int64_t>(t) * p.num_heads + h) * D + d] = o[k] / L;
  }
}

template <int D, typename T, KvLayout L>
Status launch(const PagedAttentionParams& p, cudaStream_t stream) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int32_t parts = attention_partitions(p.max_position);
  const size_t smem =
      sizeof(float) * (static_cast<size_t>(group) * D + group * kP) + 2 * kP * sizeof(const void*) +
      sizeof(float) * kWarps * 4 * D;  // q, scores, row pointers, PV partials (see the kernel)
  auto kernel = attn_partition_kernel<D, T, L>;
  if (smem > 48 * 1024) {
    PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(parts),
            static_cast<unsigned>(p.num_kv_heads));
  PKV_RETURN_IF_ERROR(launch_kernel("attn_partition_kernel", kernel, grid, kThreads, smem, stream,
                                    p, group, parts));
  return combine_partitions(p, parts, stream);
}

template <int D, typename T>
Status dispatch_layout(const PagedAttentionParams& p, cudaStream_t stream) {
  switch (p.layout) {
    case KvLayout::kBlockTable:
      return launch<D, T, KvLayout::kBlockTable>(p, stream);
    case KvLayout::kContiguous:
      return launch<D, T, KvLayout::kContiguous>(p, stream);
    case KvLayout::kTilePointers:
      if constexpr (std::is_same_v<T, float>)
        return launch<D, T, KvLayout::kTilePointers>(p, stream);
      return invalid_argument("cuda attention: tile pointers need f32 KV");
  }
  return invalid_argument("cuda attention: unknown KV layout");
}

template <int D>
Status dispatch_type(const PagedAttentionParams& p, cudaStream_t stream) {
  return p.kv_type == KvType::kF32 ? dispatch_layout<D, float>(p, stream)
                                   : dispatch_layout<D, __nv_bfloat16>(p, stream);
}

}  // namespace

namespace {

// The combine kernel for p.head_dim (a block a (token, query head), min(D, 128)
// threads), `serial` the reference form.
Status launch_combine(const PagedAttentionParams& p, int32_t parts, bool serial,
                      cudaStream_t stream) {
  dim3 grid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const unsigned threads = p.head_dim < 128 ? static_cast<unsigned>(p.head_dim) : 128u;
  const size_t smem = serial ? 0 : sizeof(float) * static_cast<size_t>(parts);
  auto go = [&](auto kernel) -> Status {
    if (smem > 48 * 1024) {
      PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
    }
    return launch_kernel(serial ? "attn_combine_serial_kernel" : "attn_combine_kernel", kernel,
                         grid, threads, smem, stream, p, parts,
                         early_trigger(EarlyTrigger::kCombine));
  };
  switch (p.head_dim) {
    case 16:
      return serial ? go(attn_combine_serial_kernel<16>) : go(attn_combine_kernel<16>);
    case 32:
      return serial ? go(attn_combine_serial_kernel<32>) : go(attn_combine_kernel<32>);
    case 64:
      return serial ? go(attn_combine_serial_kernel<64>) : go(attn_combine_kernel<64>);
    case 128:
      return serial ? go(attn_combine_serial_kernel<128>) : go(attn_combine_kernel<128>);
    case 256:
      return serial ? go(attn_combine_serial_kernel<256>) : go(attn_combine_kernel<256>);
    default:
      return invalid_argument("cuda attention combine: head_dim " + std::to_string(p.head_dim));
  }
}

}  // namespace

Status combine_partitions(const PagedAttentionParams& p, int32_t parts, cudaStream_t stream) {
  return launch_combine(p, parts, false, stream);
}

Status combine_partitions_serial(const PagedAttentionParams& p, int32_t parts,
                                 cudaStream_t stream) {
  return launch_combine(p, parts, true, stream);
}

size_t attention_workspace_floats(int32_t num_tokens, int32_t num_heads, int32_t head_dim,
                                  int32_t max_position) {
  const size_t parts = static_cast<size_t>(max_position / kP + 1);
  return static_cast<size_t>(num_tokens) * num_heads * parts * (head_dim + 2);
}

Status paged_attention(const PagedAttentionParams& p, cudaStream_t stream) {
  auto bad = [](const std::string& what) { return invalid_argument("cuda attention: " + what); };
  PKV_RETURN_IF_ERROR(check_paged_attention_params(p, kMaxGroup, "cuda attention"));
  if (p.num_tokens == 0) return ok_status();
  switch (p.head_dim) {
    case 16:
      return dispatch_type<16>(p, stream);
    case 32:
      return dispatch_type<32>(p, stream);
    case 64:
      return dispatch_type<64>(p, stream);
    case 128:
      return dispatch_type<128>(p, stream);
    case 256:
      return dispatch_type<256>(p, stream);
    default:
      return bad("head_dim " + std::to_string(p.head_dim) + " is not 16, 32, 64, 128 or 256");
  }
}

}  // namespace pagedkv::backend::cuda
