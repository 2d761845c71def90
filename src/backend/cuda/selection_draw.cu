// A draw without top-k by selection on the device (see selection_draw.h).
//
// engine/sampler.cc's draw_by_selection step for step, in two launches. The first
// weighs a row in slices (up to 16 blocks a row, so that a few rows still fill the
// GPU): each block finds the row's max m; top = m·(1/T) and the candidate cut as the
// host computes them (IEEE double operations without contraction: the same
// candidates); every candidate of its slice's weight e^(x·(1/T) − top)
// (exp_nonpositive: within 2e-11) summed whole, over the entries min-p keeps, and by
// the 12 leading bits of its order key into shared-memory buckets, all written out.
// The second, one block of 1024 threads a row, adds the slices' buckets and sums up
// and finds the crossings. A crossing — the entry where the running sum of the weights
// in the sampler's order passes a target — is the bucket the target falls in, then
// 12 and 8 more bits, then the ids of one logit in order: top-p's (the end of the
// kept prefix, at top_p of the mass), then the draw's (u times the kept mass). The
// atomics sum in any order, which the bounds allow for: the token is returned only
// where every target is farther than twice the bound from both ends of its entry's
// interval (the host's constants: (s·count + 64)·2·2⁻⁵³ + 4·2e-11 of the mass, s 4
// for temperature alone and 6 with top-p or min-p) and no weight lies within the
// host's band of the min-p threshold.
#include "backend/cuda/selection_draw.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <string>

#include "backend/cuda/cuda_status.h"
#include "backend/cuda/launch.cuh"

namespace pagedkv::backend::cuda {
namespace {

constexpr int kThreads = 1024;
constexpr int kBuckets = 4096;       // 12 bits
constexpr double kExpError = 2e-11;  // exp_nonpositive's relative error, bounded above

// The sampler's order bits: ascending = descending logit, -0 and +0 one value.
__device__ __forceinline__ uint32_t desc_bits(float v) {
  uint32_t u = v == 0.0f ? 0u : __float_as_uint(v);
  u ^= static_cast<uint32_t>(static_cast<int32_t>(u) >> 31) | 0x80000000u;
  return ~u;
}

// The logit of an order value (desc_bits' inverse; -0 reads back as +0).
__device__ __forceinline__ float desc_logit(uint32_t d) {
  uint32_t u = ~d;
  u = (u & 0x80000000u) ? (u & 0x7fffffffu) : ~u;
  return __uint_as_float(u);
}

// e^x for x in [-60, 0] within a relative 2e-11 (engine/sampler.cc's exp_nonpositive:
// x = k·ln 2 + r, Taylor to r^9/9!, 2^k in the exponent bits).
__device__ __forceinline__ double exp_nonpositive(double x) {
  constexpr double kRound = 6755399441055744.0;  // 1.5 · 2^52
  const double kr = __fma_rn(x, 1.4426950408889634, kRound);
  const double k = __dsub_rn(kr, kRound);
  const double r = __fma_rn(-k, 1.4286068203094173e-06, __fma_rn(-k, 0.693145751953125, x));
  double e = 1.0 / 362880.0;
  e = __fma_rn(e, r, 1.0 / 40320.0);
  e = __fma_rn(e, r, 1.0 / 5040.0);
  e = __fma_rn(e, r, 1.0 / 720.0);
  e = __fma_rn(e, r, 1.0 / 120.0);
  e = __fma_rn(e, r, 1.0 / 24.0);
  e = __fma_rn(e, r, 1.0 / 6.0);
  e = __fma_rn(e, r, 0.5);
  e = __fma_rn(e, r, 1.0);
  e = __fma_rn(e, r, 1.0);
  const unsigned long long bits =
      (static_cast<unsigned long long>(__double_as_longlong(kr)) + 1023ull) << 52;
  return e * __longlong_as_double(static_cast<long long>(bits));
}

// The block's sum of v, in every thread (one fixed order: the same value everywhere).
template <typename T>
__device__ T block_sum(T v, T* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  T s = 0;
  for (int w = 0; w < kThreads / 32; ++w) s += red[w];
  __syncthreads();
  return s;
}

// The sum of v over the threads before this one.
template <typename T>
__device__ T block_exclusive_scan(T v, T* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  T inc = v;
  for (int o = 1; o < 32; o <<= 1) {
    const T y = __shfl_up_sync(0xffffffffu, inc, o);
    if (lane >= o) inc += y;
  }
  T exc = __shfl_up_sync(0xffffffffu, inc, 1);
  if (lane == 0) exc = 0;
  if (lane == 31) red[warp] = inc;
  __syncthreads();
  T base = 0;
  for (int w = 0; w < warp; ++w) base += red[w];
  __syncthreads();
  return base + exc;
}

constexpr int kMaxSlices = 16;

// The slices a row's weights are summed in, for n rows: up to 16 blocks a row while
// the rows fill fewer than ~128 blocks.
int slices_for(int32_t n) { return std::clamp(128 / std::max(n, 1), 1, kMaxSlices); }

// One slice's sums (the first launch's output beside its buckets).
struct SlicePartial {
  double total;        // the candidates' weights
  double min_mass;     // the weights of the candidates min-p keeps
  long long count;     // candidates
  long long near_min;  // weights within the band of the min-p threshold
  float max;           // the row's largest non-NaN value
  float pad;
};

struct Shared {
  double hist[kBuckets];
  double red_d[kThreads / 32];
  long long red_i[kThreads / 32];
  float red_f[kThreads / 32];
  int bucket, token;
  double before;
};

// The first of buckets [0, nb) (nb a multiple of the threads' share, or ≤ the
// threads) whose running sum from `before` exceeds target; `before` becomes the
// running sum ahead of it. -1 when none does (the sums ran out under the target).
__device__ int narrow(Shared& s, int nb, double target, double& before) {
  const int tid = threadIdx.x;
  const int per = nb >= kThreads ? nb / kThreads : 1;
  const int first = tid * per;
  const bool active = first < nb;
  double local = 0;
  if (active)
    for (int j = 0; j < per; ++j) local += s.hist[first + j];
  const double exc = block_exclusive_scan(local, s.red_d);
  if (tid == 0) s.bucket = INT_MAX;
  __syncthreads();
  int mine = -1;
  double mine_before = 0;
  if (active) {
    double run = before + exc;
    for (int j = 0; j < per; ++j) {
      const double m = s.hist[first + j];
      if (mine < 0 && run + m > target) {
        mine = first + j;
        mine_before = run;
      }
      run += m;
    }
    if (mine >= 0) atomicMin(&s.bucket, mine);
  }
  __syncthreads();
  const int b = s.bucket;
  if (b != INT_MAX && mine == b) s.before = mine_before;
  __syncthreads();
  if (b == INT_MAX) return -1;
  before = s.before;
  __syncthreads();
  return b;
}

// A row's candidates (entries >= cut; NaN never passes) and their weights, with
// the host sampler's roundings of z = x·(1/T) − top.
struct Candidates {
  const float* x;
  int64_t n;
  float cut;
  double inv_t, top;
  __device__ bool has(float v) const { return v >= cut; }
  __device__ double weight(float v) const {
    return exp_nonpositive(__dsub_rn(__dmul_rn(static_cast<double>(v), inv_t), top));
  }
};

// f(i, x[i]) for i in [lo, hi), the block's threads striding over it with eight
// loads in flight each (a plain strided loop waits out one load's latency an entry:
// a 151,936-entry row cost one block ~35 µs a pass on an H100).
template <typename F>
__device__ void for_each_entry(const float* x, int64_t lo, int64_t hi, F&& f) {
  constexpr int kInFlight = 8;
  int64_t i = lo + threadIdx.x;
  for (; i + (kInFlight - 1) * kThreads < hi; i += kInFlight * kThreads) {
    float v[kInFlight];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) v[j] = x[i + j * kThreads];
#pragma unroll
    for (int j = 0; j < kInFlight; ++j) f(i + j * kThreads, v[j]);
  }
  for (; i < hi; i += kThreads) f(i, x[i]);
}

// Where the running sum of the candidates' weights in the sampler's order passes
// `target`: the entry (its order bits `key` and its rank among that logit's
// candidates in id order), the sum ahead of it (`at`) and its weight.
struct Crossing {
  bool found = false;
  uint32_t key = 0;
  long long rank = 0;
  int first = 0;  // the lowest id of that logit's candidates (the token when rank is 0)
  double at = 0, w = 0;
};

// The sampler's order of two crossings' entries: a's at or before b's.
__device__ bool not_after(const Crossing& a, const Crossing& b) {
  return a.key < b.key || (a.key == b.key && a.rank <= b.rank);
}

// A crossing the host's computation provably makes at the same entry.
__device__ bool certified(const Crossing& c, double target, double margin) {
  return c.found && target - c.at > margin && c.at + c.w - target > margin;
}

// s.hist = the row's weights by the keys' leading 12 bits: its slices' buckets added.
__device__ void load_level0(Shared& s, const double* slice_hists, int slices) {
  for (int b = threadIdx.x; b < kBuckets; b += kThreads) {
    double sum = 0;
    for (int j = 0; j < slices; ++j) sum += slice_hists[static_cast<int64_t>(j) * kBuckets + b];
    s.hist[b] = sum;
  }
  __syncthreads();
}

// The crossing of `target` (block-uniform). s.hist holds the weights by the keys'
// leading 12 bits when `level0_ready`; it is reloaded from the slices' buckets
// otherwise, and left holding the last level's sums.
__device__ Crossing find_crossing(Shared& s, const Candidates& c, double target, bool level0_ready,
                                  const double* slice_hists, int slices) {
  const int tid = threadIdx.x;
  Crossing out;
  if (!level0_ready) load_level0(s, slice_hists, slices);
  double before = 0;
  const int b1 = narrow(s, kBuckets, target, before);
  if (b1 < 0) return out;
  // The next 12 bits, among b1's candidates.
  for (int b = tid; b < kBuckets; b += kThreads) s.hist[b] = 0;
  __syncthreads();
  for_each_entry(c.x, 0, c.n, [&](int64_t, float v) {
    const uint32_t d = desc_bits(v);
    if (c.has(v) && (d >> 20) == static_cast<uint32_t>(b1))
      atomicAdd(&s.hist[(d >> 8) & 0xfff], c.weight(v));
  });
  __syncthreads();
  const int b2 = narrow(s, kBuckets, target, before);
  if (b2 < 0) return out;
  // The last 8 bits.
  const uint32_t hi24 = (static_cast<uint32_t>(b1) << 12) | static_cast<uint32_t>(b2);
  for (int b = tid; b < 256; b += kThreads) s.hist[b] = 0;
  __syncthreads();
  for_each_entry(c.x, 0, c.n, [&](int64_t, float v) {
    const uint32_t d = desc_bits(v);
    if (c.has(v) && (d >> 8) == hi24) atomicAdd(&s.hist[d & 0xff], c.weight(v));
  });
  __syncthreads();
  const int b3 = narrow(s, 256, target, before);
  if (b3 < 0) return out;
  // One logit's candidates, one weight each, in id order: the target falls in the
  // rank-th one's interval.
  const uint32_t key = (hi24 << 8) | static_cast<uint32_t>(b3);
  long long mine = 0;
  if (tid == 0) s.token = INT_MAX;
  __syncthreads();
  for_each_entry(c.x, 0, c.n, [&](int64_t i, float v) {
    if (c.has(v) && desc_bits(v) == key) {
      ++mine;
      atomicMin(&s.token, static_cast<int>(i));
    }
  });
  const long long group = block_sum(mine, s.red_i);  // its barriers order s.token's atomics
  out.first = s.token;
  const double w = c.weight(desc_logit(key));
  const double rank = floor((target - before) / w);
  if (!(rank >= 0 && rank < static_cast<double>(group))) return out;
  out.found = true;
  out.key = key;
  out.rank = static_cast<long long>(rank);
  out.at = before + rank * w;
  out.w = w;
  return out;
}

// The id of the rank-th candidate (in id order) whose order bits are `key`.
__device__ int nth_candidate(Shared& s, const Candidates& c, uint32_t key, long long rank) {
  const int tid = threadIdx.x;
  const int64_t per = (c.n + kThreads - 1) / kThreads;
  const int64_t lo = min(c.n, tid * per), hi = min(c.n, lo + per);
  long long mine = 0;
  for (int64_t i = lo; i < hi; ++i) {
    const float v = c.x[i];
    mine += (c.has(v) && desc_bits(v) == key) ? 1 : 0;
  }
  const long long exc = block_exclusive_scan(mine, s.red_i);
  if (tid == 0) s.token = -1;
  __syncthreads();
  if (exc <= rank && rank < exc + mine) {
    long long k = rank - exc;
    for (int64_t i = lo; i < hi; ++i) {
      const float v = c.x[i];
      if (!(c.has(v) && desc_bits(v) == key)) continue;
      if (k == 0) {
        s.token = static_cast<int>(i);
        break;
      }
      --k;
    }
  }
  __syncthreads();
  return s.token;
}

// The row's largest non-NaN value (fmaxf skips NaN), in every thread.
__device__ float row_max(const float* row, int64_t vocab, float* red) {
  const int tid = threadIdx.x;
  float mx = -INFINITY;
  for_each_entry(row, 0, vocab, [&](int64_t, float v) { mx = fmaxf(mx, v); });
  for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
  if ((tid & 31) == 0) red[tid >> 5] = mx;
  __syncthreads();
  float m = -INFINITY;
  for (int w = 0; w < kThreads / 32; ++w) m = fmaxf(m, red[w]);
  __syncthreads();
  return m;
}

// The candidates of a row whose max is m, or false where the row is degenerate (no
// finite entry, a +inf, 1/T overflowing): then the host draws.
__device__ bool candidates_of(const float* row, int64_t vocab, float m, double inv_t,
                              Candidates* c) {
  const double top = __dmul_rn(static_cast<double>(m), inv_t);
  if (!isfinite(top) || !isfinite(inv_t)) return false;
  // engine/sampler.cc's candidate_cut: two float steps under (top − 40)·T.
  const float cut0 = __double2float_rn(__ddiv_rn(__dsub_rn(top, 40.0), inv_t));
  *c = Candidates{row, vocab, nextafterf(nextafterf(cut0, -INFINITY), -INFINITY), inv_t, top};
  return true;
}

constexpr double kEps = 1.1102230246251565e-16;  // 2^-53

// min-p's band around its threshold (the host's: its two divisions and product,
// and the weights' errors).
__device__ double min_p_band(double min_weight) {
  return 2.0 * (8.0 * kEps + 2.0 * kExpError) * min_weight;
}

// Launch 1: block (job, slice) sums its slice's weights (buckets and partial sums).
__global__ void __launch_bounds__(kThreads)
    selection_weigh_kernel(const float* logits, int64_t vocab, const SelectionJob* jobs, int slices,
                           double* hists, SlicePartial* partials) {
  enter_kernel();
  __shared__ Shared s;
  const int tid = threadIdx.x;
  const int64_t at = static_cast<int64_t>(blockIdx.x) * slices + blockIdx.y;
  const SelectionJob job = jobs[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(job.row) * vocab;
  SlicePartial out{0, 0, 0, 0, row_max(row, vocab, s.red_f), 0};
  Candidates c;
  if (candidates_of(row, vocab, out.max, job.inv_t, &c)) {  // block-uniform
    const bool min_p = job.min_p > 0;
    const double min_weight = min_p ? job.min_p : 0.0;
    const double band = min_p_band(min_weight);
    for (int b = tid; b < kBuckets; b += kThreads) s.hist[b] = 0;
    __syncthreads();
    const int64_t per = (vocab + slices - 1) / slices;
    const int64_t lo = min(vocab, static_cast<int64_t>(blockIdx.y) * per),
                  hi = min(vocab, lo + per);
    double part = 0, min_part = 0;
    long long cnt = 0, close = 0;
    for_each_entry(row, lo, hi, [&](int64_t, float v) {
      if (!c.has(v)) return;
      const double e = c.weight(v);
      part += e;
      ++cnt;
      if (min_p) {
        min_part += e >= min_weight ? e : 0.0;
        close += fabs(e - min_weight) <= band ? 1 : 0;
      }
      atomicAdd(&s.hist[desc_bits(v) >> 20], e);
    });
    out.total = block_sum(part, s.red_d);
    out.count = block_sum(cnt, s.red_i);
    out.min_mass = block_sum(min_part, s.red_d);
    out.near_min = block_sum(close, s.red_i);
    for (int b = tid; b < kBuckets; b += kThreads) hists[at * kBuckets + b] = s.hist[b];
  }
  if (tid == 0) partials[at] = out;
}

// Launch 2: block job finds its draw's token from the slices' sums.
__global__ void __launch_bounds__(kThreads)
    selection_draw_kernel(const float* logits, int64_t vocab, const SelectionJob* jobs, int slices,
                          const double* hists, const SlicePartial* partials, int32_t* tokens) {
  enter_kernel();
  __shared__ Shared s;
  const int tid = threadIdx.x;
  const SelectionJob job = jobs[blockIdx.x];
  const float* row = logits + static_cast<int64_t>(job.row) * vocab;
  const SlicePartial* part = partials + static_cast<int64_t>(blockIdx.x) * slices;
  const double* slice_hists = hists + static_cast<int64_t>(blockIdx.x) * slices * kBuckets;
  int32_t token = -1;
  Candidates c;
  if (candidates_of(row, vocab, part[0].max, job.inv_t, &c)) {  // block-uniform
    double total = 0, min_mass = 0;
    long long count = 0, near_min = 0;
    for (int j = 0; j < slices; ++j) {
      total += part[j].total;
      min_mass += part[j].min_mass;
      count += part[j].count;
      near_min += part[j].near_min;
    }
    const bool min_p = job.min_p > 0;
    const double min_weight = min_p ? job.min_p : 0.0;
    if (count > 0 && total > 0 && near_min == 0) {
      load_level0(s, slice_hists, slices);
      const double sums = job.top_p < 1.0 || min_p ? 6.0 : 4.0;
      const double bound =
          2.0 * (sums * static_cast<double>(count) + 64.0) * kEps + 4.0 * kExpError;
      const double margin = 2.0 * bound * total;
      // The kept candidates: a prefix of the order (top-p's, then min-p's within it).
      bool ok = true, level0_ready = true;
      double kept = total;
      Crossing last;  // top-p's last kept entry
      if (job.top_p < 1.0) {
        const double at = job.top_p * total;
        last = find_crossing(s, c, at, true, slice_hists, slices);
        level0_ready = false;
        ok = certified(last, at, margin);
        kept = last.at + last.w;
      }
      // Min-p ends the prefix first unless top-p's last entry passes it.
      if (ok && min_p && !(last.found && last.w >= min_weight)) kept = min_mass;
      if (ok) {
        const double target = job.u * kept;
        const Crossing d = find_crossing(s, c, target, level0_ready, slice_hists, slices);
        if (certified(d, target, margin) && d.w >= min_weight &&
            (!last.found || not_after(d, last)))  // block-uniform
          token = d.rank == 0 ? d.first : nth_candidate(s, c, d.key, d.rank);
      }
    }
  }
  if (tid == 0) tokens[blockIdx.x] = token;
}

}  // namespace

size_t selection_draw_workspace_bytes(int32_t n) {
  const size_t blocks = static_cast<size_t>(std::max(n, 0)) * static_cast<size_t>(slices_for(n));
  return blocks * (kBuckets * sizeof(double) + sizeof(SlicePartial));
}

Status selection_draw(const float* logits, int64_t vocab, const SelectionJob* jobs, int32_t n,
                      int32_t* tokens, void* workspace, cudaStream_t stream) {
  if (n < 0 || vocab <= 0 || vocab > INT32_MAX)
    return invalid_argument("cuda selection_draw: needs n >= 0 and 0 < vocab <= 2^31 - 1 (got n " +
                            std::to_string(n) + ", vocab " + std::to_string(vocab) + ")");
  if (n == 0) return ok_status();
  const int slices = slices_for(n);
  auto* hists = static_cast<double*>(workspace);
  auto* partials =
      reinterpret_cast<SlicePartial*>(hists + static_cast<size_t>(n) * slices * kBuckets);
  PKV_RETURN_IF_ERROR(launch_kernel("selection_weigh_kernel", selection_weigh_kernel,
                                    dim3(static_cast<unsigned>(n), static_cast<unsigned>(slices)),
                                    kThreads, 0, stream, logits, vocab, jobs, slices, hists,
                                    partials));
  return launch_kernel("selection_draw_kernel", selection_draw_kernel,
                       dim3(static_cast<unsigned>(n)), kThreads, 0, stream, logits, vocab, jobs,
                       slices, static_cast<const double*>(hists),
                       static_cast<const SlicePartial*>(partials), tokens);
}

}  // namespace pagedkv::backend::cuda
