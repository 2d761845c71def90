// The best entries of logits rows in the host sampler's order (see top_entries.h).
//
// One block of 1024 threads per row. The sampler's order key of entry i is
// (desc_bits(logit) << 32) | i (engine/sampler.cc): ascending keys = descending
// logit, -0 == +0, ties by ascending id. The block finds u*, the upper half of
// the want-th smallest key, by a 4-pass radix select (8-bit digits, warp-
// aggregated shared-memory histograms), then collects every entry whose upper
// half is < u* (fewer than want of them) and, in index order, as many entries
// equal to u* as are still needed (the lowest ids: the order's ties), and sorts
// the ≤ 1024 keys with a bitonic network. Only integer compares: the result is
// the sampler's key prefix bit for bit, whatever the launch shape.
#include <cuda_runtime.h>

#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/launch.cuh"
#include "backend/cuda/top_entries.h"

namespace pagedkv::backend::cuda {
namespace {

constexpr int kThreads = 1024;
static_assert(kMaxTopEntries == kThreads, "one key per thread in the bitonic sort");

// The sampler's desc_bits: ascending order = descending logit, -0 and +0 one key.
__device__ __forceinline__ uint32_t desc_bits(float v) {
  uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
  return ~u;
}

// The logit of an upper half (the inverse of desc_bits; -0 reads back as +0).
__device__ __forceinline__ float key_logit(uint32_t hi) {
  uint32_t u = ~hi;
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  return __uint_as_float(u);
}

__global__ void __launch_bounds__(kThreads)
    top_entries_kernel(const float* logits, int64_t vocab, const int32_t* jobs, TopEntry* out,
                       int32_t* counts) {
  enter_kernel();
  __shared__ uint32_t hist[256];
  __shared__ unsigned long long keys[kThreads];
  __shared__ int32_t warp_cnt[kThreads / 32];
  __shared__ uint32_t s_prefix, s_remaining, s_need, s_valid;
  __shared__ int32_t s_less, s_eq_base;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const float* row = logits + static_cast<int64_t>(jobs[3 * blockIdx.x]) * vocab;
  const uint32_t want = static_cast<uint32_t>(jobs[3 * blockIdx.x + 1]);
  TopEntry* dst = out + jobs[3 * blockIdx.x + 2];

  uint32_t prefix = 0, mask = 0;
  for (int pass = 0; pass < 4; ++pass) {
    const int shift = 24 - 8 * pass;
    if (tid < 256) hist[tid] = 0;
    __syncthreads();
    for (int64_t base = 0; base < vocab; base += kThreads) {
      const int64_t i = base + tid;
      uint32_t digit = 0xffffffffu;  // no digit: out of range, NaN, or another prefix
      if (i < vocab) {
        const float v = row[i];
        if (!isnan(v)) {
          const uint32_t u = desc_bits(v);
          if ((u & mask) == prefix) digit = (u >> shift) & 0xffu;
        }
      }
      const unsigned peers = __match_any_sync(0xffffffffu, digit);
      if (digit != 0xffffffffu && lane == __ffs(peers) - 1) atomicAdd(&hist[digit], __popc(peers));
    }
    __syncthreads();
    if (tid == 0) {
      uint32_t remaining;
      if (pass == 0) {
        uint32_t valid = 0;
        for (int d = 0; d < 256; ++d) valid += hist[d];
        s_valid = valid;
        s_need = valid < want ? valid : want;
        remaining = s_need;
      } else {
        remaining = s_remaining;
      }
      uint32_t cum = 0, sel = 255;
      if (remaining > 0)
        for (uint32_t d = 0; d < 256; ++d) {
          if (cum + hist[d] >= remaining) {
            sel = d;
            break;
          }
          cum += hist[d];
        }
      s_remaining = remaining - cum;
      s_prefix = prefix | (sel << shift);
    }
    __syncthreads();
    if (s_need == 0) break;  // uniform: every entry is NaN
    prefix = s_prefix;
    mask |= 0xffu << shift;
  }
  const uint32_t need = s_need;
  if (need == 0) {
    if (tid == 0) {
      counts[2 * blockIdx.x] = 0;
      counts[2 * blockIdx.x + 1] = static_cast<int32_t>(s_valid);
    }
    return;
  }
  const uint32_t ustar = prefix;
  const int32_t quota = static_cast<int32_t>(s_remaining);  // entries equal to u* to take
  const int32_t n_less = static_cast<int32_t>(need) - quota;
  keys[tid] = ~0ull;
  if (tid == 0) {
    s_less = 0;
    s_eq_base = 0;
  }
  __syncthreads();
  for (int64_t base = 0; base < vocab; base += kThreads) {
    const int64_t i = base + tid;
    bool less = false, eq = false;
    uint32_t u = 0;
    if (i < vocab) {
      const float v = row[i];
      if (!isnan(v)) {
        u = desc_bits(v);
        less = u < ustar;
        eq = u == ustar;
      }
    }
    const unsigned long long key =
        (static_cast<unsigned long long>(u) << 32) | static_cast<uint32_t>(i);
    if (less) keys[atomicAdd(&s_less, 1)] = key;  // < n_less of them; the sort orders them
    const unsigned ballot = __ballot_sync(0xffffffffu, eq);
    if (lane == 0) warp_cnt[warp] = __popc(ballot);
    __syncthreads();
    // Between the two barriers warp_cnt and s_eq_base are only read.
    int32_t rank = s_eq_base + __popc(ballot & ((1u << lane) - 1u));
    for (int w = 0; w < warp; ++w) rank += warp_cnt[w];
    if (eq && rank < quota) keys[n_less + rank] = key;
    int32_t total = 0;
    if (tid == 0)
      for (int w = 0; w < kThreads / 32; ++w) total += warp_cnt[w];
    __syncthreads();
    if (tid == 0) s_eq_base += total;  // read again only after the next first barrier
  }
  __syncthreads();
  // Bitonic sort, ascending (unused slots hold ~0: they sort last).
  for (int k = 2; k <= kThreads; k <<= 1) {
    for (int j = k >> 1; j > 0; j >>= 1) {
      const int ixj = tid ^ j;
      if (ixj > tid) {
        const unsigned long long a = keys[tid], b = keys[ixj];
        if ((a > b) == ((tid & k) == 0)) {
          keys[tid] = b;
          keys[ixj] = a;
        }
      }
      __syncthreads();
    }
  }
  if (static_cast<uint32_t>(tid) < need) {
    const unsigned long long key = keys[tid];
    dst[tid] = TopEntry{key_logit(static_cast<uint32_t>(key >> 32)),
                        static_cast<int32_t>(key & 0xffffffffu)};
  }
  if (tid == 0) {
    counts[2 * blockIdx.x] = static_cast<int32_t>(need);
    counts[2 * blockIdx.x + 1] = static_cast<int32_t>(s_valid);
  }
}

}  // namespace

Status top_entries(const float* logits, int64_t vocab, const int32_t* jobs, int32_t n,
                   TopEntry* out, int32_t* counts, cudaStream_t stream) {
  if (vocab < 1 || vocab > 0x7fffffff)
    return invalid_argument("cuda top_entries: vocab must be in [1, 2^31), got " +
                            std::to_string(vocab));
  if (n < 0) return invalid_argument("cuda top_entries: n must be >= 0");
  if (n == 0) return ok_status();
  return launch_kernel("top_entries_kernel", top_entries_kernel, static_cast<unsigned>(n), kThreads,
                       0, stream, logits, vocab, jobs, out, counts);
}

}  // namespace pagedkv::backend::cuda
