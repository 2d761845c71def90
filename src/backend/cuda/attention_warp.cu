// Paged attention, warp sub-partition order (`paged_attention_warp`): an
// alternative to attention.cu's thread-per-key kernel with its own fixed order,
// not yet the engine's kernel (measured and open items: docs/backend.md, "What is
// left (issue #12)"). Same parameters, workspace layout and contract as
// `paged_attention`; decode and prefill/extend are one kernel pair here too.
//
// Exactness. A query at absolute position p reads keys [start, p] (start = 0, or
// p - window + 1). Keys are cut into partitions of kAttnPartition (256) positions
// anchored at position 0, and each partition into 8 sub-partitions of 32 keys (one
// warp each), so the split depends only on p, never on the batch, the chunk or the
// number of cached tokens. Per (token, KV head, partition) one block of 8 warps
// serves every query head of the GQA group (K and V are read once per group):
//  - score of key j (sub-partition slot j): LPK = min(4, row chunks) lanes share
//    the key; lane u takes the 16-byte chunks u, u+LPK, … of the head's K row
//    (elements ascending), one FMA chain from 0 per lane; the LPK partials are
//    added by a butterfly (xor 1, then xor 2); times the scale; keys outside
//    [start, p] are −∞;
//  - per warp: m_w = max, e_j = e^(s_j − m_w), l_w = butterfly sum over the 32
//    slots (xor 16, 8, 4, 2, 1), and for each output element the LV lanes-per-key
//    split of V: lane group g takes slots g, g + KV, g + 2·KV, … ascending in one
//    FMA chain (acc = fma(e_j, v_j, acc)), the KV group partials added by a
//    butterfly;
//  - per block: M = max_w m_w, f_w = e^(m_w − M) (0 for a warp with no key),
//    l = ((f0·l0 + f1·l1) + (f2·l2 + f3·l3)) + ((f4·l4 + …)), acc likewise.
// The combine kernel folds the partitions in ascending order:
//   out = Σ_i e^(m_i−M)·acc_i / Σ_i e^(m_i−M)·l_i,  M = max_i m_i  (FMA chains).
// Every number a query's output depends on is computed by the same instruction
// sequence whether the query is alone (decode), in a chunk of a prompt, or in a
// batch of many sequences; only the key addresses differ between the layouts
// (block table, contiguous, tile pointers), so paged and flat give the same bits.
//
// Speed (decode is bandwidth-bound): K and V are read with coalesced 16-byte
// streaming loads (a warp reads 8 keys' 64-byte pieces, or 2 whole V rows, per
// instruction); each warp loads its 32 keys' K at once, then their V at once, and
// the warps of a block meet only for the final fold. Blocks are numbered KV head
// fastest, so the heads of one token row (adjacent in memory) are read together.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <type_traits>

#include "backend/cuda/attention_check.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/launch.cuh"

namespace pagedkv::backend::cuda {
namespace {

constexpr int kP = kAttnPartition;
constexpr int kThreads = 256, kWarps = kThreads / 32, kSub = kP / kWarps;  // 32 keys a warp
static_assert(kSub == 32, "a warp's sub-partition is one key per lane");
constexpr int kMaxGroup = 16;
constexpr int kHeadChunk = 4;  // query heads per V pass (registers)
constexpr unsigned kFull = 0xffffffffu;

// 16-byte streaming load (read-only, not kept in L1; L2 fetches the 256-byte line).
__device__ __forceinline__ uint4 ld16(const void* ptr) {
  uint4 r;
  asm("ld.global.nc.L1::no_allocate.L2::256B.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
      : "l"(ptr));
  return r;
}

// The 16 bytes as 16 / sizeof(T) floats (bf16 widens exactly).
template <typename T>
__device__ __forceinline__ void unpack(const uint4& u, float (&f)[16 / sizeof(T)]) {
  if constexpr (std::is_same_v<T, float>) {
    f[0] = __uint_as_float(u.x);
    f[1] = __uint_as_float(u.y);
    f[2] = __uint_as_float(u.z);
    f[3] = __uint_as_float(u.w);
  } else {
    const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(w[i] << 16);
      f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
    }
  }
}

// Pointer to the K (or V) row of (seq, pos) for head 0.
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

// Workspace: acc [T][H][parts][D], then m [T][H][parts], then l [T][H][parts].
struct Ws {
  float* acc;
  float* m;
  float* l;
};
__host__ __device__ inline Ws ws_layout(float* base, int32_t T, int32_t H, int32_t D,
                                        int32_t parts) {
  const int64_t n = static_cast<int64_t>(T) * H * parts;
  return Ws{base, base + n * D, base + n * D + n};
}

// Shared memory of the partition kernel, in bytes (pointers first: 8-byte aligned).
__host__ __device__ constexpr size_t part_smem(int D, int group) {
  return 2 * sizeof(void*) * kWarps * kSub                  // K and V row pointers
         + sizeof(float) * (static_cast<size_t>(group) * D  // q
                            + kWarps * group * kSub         // scores, then weights
                            + 2 * kWarps * group            // m_w, l_w
                            + kWarps * kHeadChunk * D);     // warp partials of Σ e·v
}

template <int D, typename T, KvLayout L>
__global__ void __launch_bounds__(kThreads, 2)
    attn_partition_kernel(const PagedAttentionParams p, int32_t group, int32_t parts) {
  enter_kernel();
  constexpr int C = 16 / sizeof(T);      // elements per 16-byte chunk
  constexpr int CR = D / C;              // chunks per head row (≥ 2)
  constexpr int LPK = CR < 4 ? CR : 4;   // K: lanes per key
  constexpr int RK = CR / LPK;           // K: chunks per lane per key
  constexpr int KPI = 32 / LPK;          // K: keys per warp instruction
  constexpr int NK = kSub / KPI;         // K: key steps
  constexpr int LV = CR < 32 ? CR : 32;  // V: lanes per key
  constexpr int RV = CR / LV;            // V: chunks per lane per key
  constexpr int KV = 32 / LV;            // V: keys per warp instruction
  constexpr int NV = kSub / KV;          // V: key steps
  constexpr int EV = RV * C;             // V: output elements per lane
  static_assert(CR >= 2 && CR % LPK == 0 && CR % LV == 0, "head row layout");

  extern __shared__ __align__(16) unsigned char smem_raw[];
  const T** kp_s = reinterpret_cast<const T**>(smem_raw);       // [kWarps][kSub]
  const T** vp_s = kp_s + kWarps * kSub;                        // [kWarps][kSub]
  float* q_s = reinterpret_cast<float*>(vp_s + kWarps * kSub);  // [group][D]
  float* s_s = q_s + group * D;                                 // [kWarps][group][kSub]
  float* m_s = s_s + kWarps * group * kSub;                     // [kWarps][group]
  float* l_s = m_s + kWarps * group;                            // [kWarps][group]
  float* red = l_s + kWarps * group;                            // [kWarps][kHeadChunk][D]

  const int32_t nkv = p.num_kv_heads;
  const int32_t kvh = static_cast<int32_t>(blockIdx.x % nkv);
  const int64_t rest = blockIdx.x / nkv;
  const int32_t part = static_cast<int32_t>(rest % parts);
  const int32_t t = static_cast<int32_t>(rest / parts);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int32_t pos = p.positions[t];
  if (part * kP > pos) return;  // this token has fewer partitions
  const int32_t seq = p.token_seq != nullptr ? p.token_seq[t] : 0;
  const int32_t start =
      (p.sliding_window > 0 && pos - p.sliding_window + 1 > 0) ? pos - p.sliding_window + 1 : 0;
  const int32_t k_begin = part * kP;
  const int32_t k_end = min(pos + 1, k_begin + kP);
  const int32_t kb = max(k_begin, start);
  const int64_t row_elems = static_cast<int64_t>(nkv) * D;
  Ws ws = ws_layout(p.workspace, p.num_tokens, p.num_heads, D, parts);
  const int32_t h0 = kvh * group;

  if (k_end <= kb) {  // the whole partition lies before the window
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

  // This warp's slots: keys w0 + 0 … w0 + 31; live when one lies in [kb, k_end).
  const int32_t w0 = k_begin + warp * kSub;
  const bool live = w0 + kSub > kb && w0 < k_end;  // warp-uniform
  for (int idx = tid; idx < group * D; idx += kThreads)
    q_s[idx] = p.q[(static_cast<int64_t>(t) * p.num_heads + h0) * D + idx];
  if (live) {
    const int32_t key = w0 + lane;
    const bool valid = key >= kb && key < k_end;
    kp_s[warp * kSub + lane] =
        valid ? kv_row<T, L>(p, p.k_cache, p.k_tiles, seq, key, row_elems) + kvh * D : nullptr;
    vp_s[warp * kSub + lane] =
        valid ? kv_row<T, L>(p, p.v_cache, p.v_tiles, seq, key, row_elems) + kvh * D : nullptr;
  }
  __syncthreads();

  float* sw = s_s + warp * group * kSub;  // this warp's [group][kSub]
  if (live) {
    // Scores. Lane (kk, u): key slots it·KPI + kk, chunks u + LPK·r of the row.
    const int u = lane % LPK, kk = lane / LPK;
    constexpr int NB = RK >= 8 ? 1 : (8 / RK < NK ? 8 / RK : NK);  // key steps a batch
    static_assert(NK % NB == 0, "key batches");
#pragma unroll 1
    for (int b0 = 0; b0 < NK; b0 += NB) {
      uint4 kr[NB][RK];  // at most 8 chunks (32 registers) in flight a lane (RK ≤ 8)
#pragma unroll
      for (int ib = 0; ib < NB; ++ib) {
        const T* row = kp_s[warp * kSub + (b0 + ib) * KPI + kk];
#pragma unroll
        for (int r = 0; r < RK; ++r)
          kr[ib][r] = row != nullptr ? ld16(row + (u + LPK * r) * C) : make_uint4(0, 0, 0, 0);
      }
      for (int hc = 0; hc < group; hc += kHeadChunk) {
#pragma unroll
        for (int ib = 0; ib < NB; ++ib) {
          float acc[kHeadChunk];
#pragma unroll
          for (int hh = 0; hh < kHeadChunk; ++hh) acc[hh] = 0.0f;
#pragma unroll
          for (int r = 0; r < RK; ++r) {
            float k[C];
            unpack<T>(kr[ib][r], k);
            const int d0 = (u + LPK * r) * C;
#pragma unroll
            for (int hh = 0; hh < kHeadChunk; ++hh) {
              if (hc + hh < group) {
                const float* qh = q_s + (hc + hh) * D + d0;
#pragma unroll
                for (int e = 0; e < C; ++e) acc[hh] = __fmaf_rn(qh[e], k[e], acc[hh]);
              }
            }
          }
          const int slot = (b0 + ib) * KPI + kk;
          const bool valid = kp_s[warp * kSub + slot] != nullptr;
#pragma unroll
          for (int hh = 0; hh < kHeadChunk; ++hh) {
#pragma unroll
            for (int o = 1; o < LPK; o <<= 1)
              acc[hh] = __fadd_rn(acc[hh], __shfl_xor_sync(kFull, acc[hh], o));
            if (u == 0 && hc + hh < group)
              sw[(hc + hh) * kSub + slot] = valid ? __fmul_rn(acc[hh], p.scale) : -INFINITY;
          }
        }
      }
    }
    __syncwarp();
    // Per head: the warp's max, weights and their sum (lane = slot).
    for (int h = 0; h < group; ++h) {
      const float s = sw[h * kSub + lane];
      const float m = warp_max(s);  // finite: a live warp has a key
      const float e = expf(__fsub_rn(s, m));
      float l = e;
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) l = __fadd_rn(l, __shfl_xor_sync(kFull, l, o));
      sw[h * kSub + lane] = e;
      if (lane == 0) {
        m_s[warp * group + h] = m;
        l_s[warp * group + h] = l;
      }
    }
    __syncwarp();
  } else {
    for (int h = lane; h < group; h += 32) {
      m_s[warp * group + h] = -INFINITY;
      l_s[warp * group + h] = 0.0f;
    }
  }

  // Σ e·v per warp, kHeadChunk query heads a pass; then the block's fold.
  const int vl = lane % LV, vk = lane / LV;
  for (int hc = 0; hc < group; hc += kHeadChunk) {
    float acc[kHeadChunk][EV];
#pragma unroll
    for (int hh = 0; hh < kHeadChunk; ++hh)
#pragma unroll
      for (int e = 0; e < EV; ++e) acc[hh][e] = 0.0f;
    if (live) {
#pragma unroll(4 / RV)  // at most 4 chunks (16 registers) of V in flight a lane
      for (int i = 0; i < NV; ++i) {
        const int slot = i * KV + vk;
        const T* row = vp_s[warp * kSub + slot];
        uint4 v[RV];
#pragma unroll
        for (int r = 0; r < RV; ++r)
          v[r] = row != nullptr ? ld16(row + (vl + LV * r) * C) : make_uint4(0, 0, 0, 0);
        float w[kHeadChunk];
#pragma unroll
        for (int hh = 0; hh < kHeadChunk; ++hh)
          w[hh] = hc + hh < group ? sw[(hc + hh) * kSub + slot] : 0.0f;
#pragma unroll
        for (int r = 0; r < RV; ++r) {
          float f[C];
          unpack<T>(v[r], f);
#pragma unroll
          for (int hh = 0; hh < kHeadChunk; ++hh)
#pragma unroll
            for (int e = 0; e < C; ++e)
              acc[hh][r * C + e] = __fmaf_rn(w[hh], f[e], acc[hh][r * C + e]);
        }
      }
#pragma unroll
      for (int hh = 0; hh < kHeadChunk; ++hh)
#pragma unroll
        for (int e = 0; e < EV; ++e)
#pragma unroll
          for (int o = LV; o < 32; o <<= 1)
            acc[hh][e] = __fadd_rn(acc[hh][e], __shfl_xor_sync(kFull, acc[hh][e], o));
    }
    if (vk == 0) {
#pragma unroll
      for (int hh = 0; hh < kHeadChunk; ++hh)
#pragma unroll
        for (int r = 0; r < RV; ++r)
#pragma unroll
          for (int e = 0; e < C; ++e)
            red[(warp * kHeadChunk + hh) * D + (vl + LV * r) * C + e] = acc[hh][r * C + e];
    }
    __syncthreads();
    for (int idx = tid; idx < kHeadChunk * D; idx += kThreads) {
      const int hh = idx / D, d = idx % D, h = hc + hh;
      if (h >= group) continue;
      float M = -INFINITY;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, m_s[w * group + h]);
      float f[kWarps];
#pragma unroll
      for (int w = 0; w < kWarps; ++w) {
        const float mw = m_s[w * group + h];
        f[w] = mw == -INFINITY ? 0.0f : expf(__fsub_rn(mw, M));
      }
      auto tree = [&](auto val) {
        static_assert(kWarps == 8, "the fixed warp tree below is written for 8 warps");
        float x[kWarps];
#pragma unroll
        for (int w = 0; w < kWarps; ++w) x[w] = __fmul_rn(f[w], val(w));
        return __fadd_rn(__fadd_rn(__fadd_rn(x[0], x[1]), __fadd_rn(x[2], x[3])),
                         __fadd_rn(__fadd_rn(x[4], x[5]), __fadd_rn(x[6], x[7])));
      };
      const int64_t slot = (static_cast<int64_t>(t) * p.num_heads + h0 + h) * parts + part;
      ws.acc[slot * D + d] = tree([&](int w) { return red[(w * kHeadChunk + hh) * D + d]; });
      if (d == 0) {
        ws.m[slot] = M;
        ws.l[slot] = tree([&](int w) { return l_s[w * group + h]; });
      }
    }
    __syncthreads();
  }
}

// One block per (token, query head): M = max_i m_i, e_i = e^(m_i − M) (shared
// memory), L = Σ l_i·e_i and o_d = Σ acc_i,d·e_i in ascending i (FMA chains), out =
// o / L. Thread d owns output element d.
template <int D>
__global__ void attn_combine_kernel(const PagedAttentionParams p, int32_t parts) {
  enter_kernel();
  extern __shared__ float e_s[];  // [np]
  __shared__ float red_s[32];
  const int32_t t = blockIdx.x, h = blockIdx.y;
  const int32_t pos = p.positions[t];
  const int32_t np = pos / kP + 1;
  Ws ws = ws_layout(p.workspace, p.num_tokens, p.num_heads, D, parts);
  const int64_t base = (static_cast<int64_t>(t) * p.num_heads + h) * parts;
  float mx = -INFINITY;
  for (int32_t i = threadIdx.x; i < np; i += blockDim.x) mx = fmaxf(mx, ws.m[base + i]);
  mx = warp_max(mx);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
  if (lane == 0) red_s[warp] = mx;
  __syncthreads();
  float M = -INFINITY;
  for (int w = 0; w < nw; ++w) M = fmaxf(M, red_s[w]);
  for (int32_t i = threadIdx.x; i < np; i += blockDim.x)
    e_s[i] = expf(__fsub_rn(ws.m[base + i], M));
  __syncthreads();
  const int d = threadIdx.x;
  if (d >= D) return;
  float L = 0.0f, o = 0.0f;
  const float* acc = ws.acc + base * D + d;
  const float* l = ws.l + base;
#pragma unroll 16
  for (int32_t i = 0; i < np; ++i) {
    const float e = e_s[i];
    L = __fmaf_rn(l[i], e, L);
    o = __fmaf_rn(acc[static_cast<int64_t>(i) * D], e, o);
  }
  p.out[(static_cast<int64_t>(t) * p.num_heads + h) * D + d] = __fdiv_rn(o, L);
}

template <int D, typename T, KvLayout L>
Status launch(const PagedAttentionParams& p, cudaStream_t stream) {
  const int32_t group = p.num_heads / p.num_kv_heads;
  const int32_t parts = p.max_position / kP + 1;
  const size_t smem = part_smem(D, group);
  auto kernel = attn_partition_kernel<D, T, L>;
  if (smem > 48 * 1024) {
    PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const int64_t blocks = static_cast<int64_t>(p.num_tokens) * parts * p.num_kv_heads;
  if (blocks > 0x7fffffff) return invalid_argument("cuda attention: too many blocks");
  PKV_RETURN_IF_ERROR(launch_kernel("attn_partition_kernel", kernel, static_cast<unsigned>(blocks),
                                    kThreads, smem, stream, p, group, parts));
  dim3 cgrid(static_cast<unsigned>(p.num_tokens), static_cast<unsigned>(p.num_heads));
  const unsigned combine_threads = D < 32 ? 32 : D;
  const size_t csmem = sizeof(float) * static_cast<size_t>(parts);
  auto combine = attn_combine_kernel<D>;
  if (csmem > 48 * 1024) {
    PKV_CUDA_RETURN_IF_ERROR(cudaFuncSetAttribute(
        combine, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(csmem)));
  }
  return launch_kernel("attn_combine_kernel", combine, cgrid, combine_threads, csmem, stream, p,
                       parts);
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

Status paged_attention_warp(const PagedAttentionParams& p, cudaStream_t stream) {
  auto bad = [](const std::string& what) {
    return invalid_argument("cuda attention (warp): " + what);
  };
  PKV_RETURN_IF_ERROR(check_paged_attention_params(p, kMaxGroup, "cuda attention (warp)"));
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
