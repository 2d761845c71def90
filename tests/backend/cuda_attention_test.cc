// Paged attention on the GPU, all three kernels (attention.cu's `paged_attention`,
// attention_warp.cu's `paged_attention_warp` and attention_mma.cu's tensor-core
// `paged_attention_mma`; each test runs once per kernel): the fixed order's promises beyond
// cuda_ops_test's shape sweep (which covers paged_attention alone). Every query of a long prompt
// run as its own decode launch gives the bits of the whole-prompt (prefill) launch, with and
// without a sliding window that cuts through the 32-key warp sub-partitions; 64 decode rows of
// different lengths give each row its bits alone, in any row order, paged or contiguous; peaked
// softmaxes (large scores: the per-warp maxima differ widely, so the warp kernel's e^(m_w − M)
// rescaling matters) stay within the CPU tolerance (2e-5 · (1 + |cpu|), as in cuda_ops_test). The
// tensor-core kernel runs every test once more with bf16 operands (MmaOperands::kBf16), checked
// against a double-precision reference of bf16-rounded q within the bound the weights' bf16
// rounding allows (expect_close_bf16). On an sm_90 GPU its prefill blocks run on wgmma
// (attention_wgmma.cu), so its prefill-vs-decode tests compare the wgmma kernel with the
// mma.sync decode kernels; mma_sync_prefill runs them once more with the mma.sync prefill
// blocks. Every test SKIPs without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/kernels.h"
#include "backend/half.h"
#include "cuda_test_util.h"

namespace pagedkv::backend::cuda {
namespace {

using namespace testing;  // cuda_test_util.h: CudaTest and the device helpers

constexpr int32_t kBs = 16;
using AttnFn = std::function<Status(const PagedAttentionParams&, cudaStream_t)>;

// The kernels, and the tensor-core kernel with every decode launch forced into one
// of its launch shapes (one-warp blocks, the eight-warp kernel in one or two
// rounds, packed one-warp blocks, packed eight-warp blocks in one or two rounds),
// and its automatic shapes with only the first partition packed (a second launch
// for the rest), which must give the bits of its prefill launches.
enum class Kernel {
  kThreadPerKey,
  kWarp,
  kMma,
  kMmaOneWarp,
  kMmaWide,
  kMmaWideTwoRounds,
  kMmaPacked,
  kMmaPackedWide,
  kMmaPackedWideTwoRounds,
  kMmaPackedFirstPartition,
  kMmaSyncPrefill,
  kMmaOneWarpgroupPrefill,
  kMmaWsPrefill2,
  kMmaWsPrefill3
};
template <MmaDecodeShape S>
Status mma_forced(const PagedAttentionParams& p, cudaStream_t stream) {
  return paged_attention_mma_with_decode_shape(p, S, stream);
}
// The automatic shapes told that only the first partition is shared: a decode launch
// runs it packed and the others a block a token, in two launches.
Status mma_packed_first_partition(const PagedAttentionParams& p, cudaStream_t stream) {
  PagedAttentionParams first = p;
  first.packed_partitions = 1;
  return paged_attention_mma(first, stream);
}
// The tensor-core kernel with its prefill blocks on mma.sync where the wgmma kernel
// (attention_wgmma.cu) would run them: both must give the decode launches' bits.
Status mma_sync_prefill(const PagedAttentionParams& p, cudaStream_t stream) {
  const bool was = set_attention_wgmma(false);
  const Status s = paged_attention_mma(p, stream);
  set_attention_wgmma(was);
  return s;
}
// The tensor-core kernel with its wgmma prefill blocks forced into one shape
// (attention_wgmma.cu): one warpgroup a block copying its own K/V (consumers 1), or
// `consumers` warpgroups sharing a producer warpgroup's K/V stages. Each must give the
// decode launches' bits.
template <int consumers>
Status mma_ws_prefill(const PagedAttentionParams& p, cudaStream_t stream) {
  const int was = set_attention_wgmma_consumers(consumers);
  const Status s = paged_attention_mma(p, stream);
  set_attention_wgmma_consumers(was);
  return s;
}
AttnFn kernel_fn_of(Kernel k) {
  switch (k) {
    case Kernel::kWarp:
      return paged_attention_warp;
    case Kernel::kMma:
      return paged_attention_mma;
    case Kernel::kMmaOneWarp:
      return mma_forced<MmaDecodeShape::kOneWarp>;
    case Kernel::kMmaWide:
      return mma_forced<MmaDecodeShape::kWide>;
    case Kernel::kMmaWideTwoRounds:
      return mma_forced<MmaDecodeShape::kWideTwoRounds>;
    case Kernel::kMmaPacked:
      return mma_forced<MmaDecodeShape::kPacked>;
    case Kernel::kMmaPackedWide:
      return mma_forced<MmaDecodeShape::kPackedWide>;
    case Kernel::kMmaPackedWideTwoRounds:
      return mma_forced<MmaDecodeShape::kPackedWideTwoRounds>;
    case Kernel::kMmaPackedFirstPartition:
      return mma_packed_first_partition;
    case Kernel::kMmaSyncPrefill:
      return mma_sync_prefill;
    case Kernel::kMmaOneWarpgroupPrefill:
      return mma_ws_prefill<1>;
    case Kernel::kMmaWsPrefill2:
      return mma_ws_prefill<2>;
    case Kernel::kMmaWsPrefill3:
      return mma_ws_prefill<3>;
    default:
      return paged_attention;
  }
}
std::string kernel_name_of(Kernel k) {
  switch (k) {
    case Kernel::kWarp:
      return "warp";
    case Kernel::kMma:
      return "mma";
    case Kernel::kMmaOneWarp:
      return "mma_decode_one_warp";
    case Kernel::kMmaWide:
      return "mma_decode_wide";
    case Kernel::kMmaWideTwoRounds:
      return "mma_decode_wide_two_rounds";
    case Kernel::kMmaPacked:
      return "mma_decode_packed";
    case Kernel::kMmaPackedWide:
      return "mma_decode_packed_wide";
    case Kernel::kMmaPackedWideTwoRounds:
      return "mma_decode_packed_wide_two_rounds";
    case Kernel::kMmaPackedFirstPartition:
      return "mma_packed_first_partition";
    case Kernel::kMmaSyncPrefill:
      return "mma_sync_prefill";
    case Kernel::kMmaOneWarpgroupPrefill:
      return "mma_one_warpgroup_prefill";
    case Kernel::kMmaWsPrefill2:
      return "mma_ws_prefill2";
    case Kernel::kMmaWsPrefill3:
      return "mma_ws_prefill3";
    default:
      return "thread_per_key";
  }
}

// A kernel and, for the tensor-core kernel, its operands.
struct KernelCase {
  Kernel kernel;
  MmaOperands operands = MmaOperands::kSplit;
};
constexpr KernelCase bf16(Kernel k) { return KernelCase{k, MmaOperands::kBf16}; }
bool bf16_operands(const KernelCase& c) { return c.operands == MmaOperands::kBf16; }
AttnFn kernel_fn(const KernelCase& c) {
  AttnFn fn = kernel_fn_of(c.kernel);
  if (!bf16_operands(c)) return fn;
  return [fn](const PagedAttentionParams& p, cudaStream_t stream) {
    PagedAttentionParams with_operands = p;
    with_operands.mma_operands = MmaOperands::kBf16;
    return fn(with_operands, stream);
  };
}
std::string kernel_name(const KernelCase& c) {
  return kernel_name_of(c.kernel) + (bf16_operands(c) ? "_bf16" : "");
}

// Sequences of bf16-valued K/V (host [len][kvh][hd] as f32), a permuted paged pool
// and a contiguous cache holding the same rows.
struct Kv {
  int32_t heads, kv_heads, hd;
  std::vector<int32_t> lens;
  std::vector<std::vector<float>> k, v;
  std::vector<int32_t> tables;  // [seqs][max_blocks]
  int32_t max_blocks = 0;
  int64_t cap = 0;
  DeviceBuffer pool_k, pool_v, flat_k, flat_v, dtables;

  int64_t row() const { return int64_t{kv_heads} * hd; }

  // share_group (optional, one entry a sequence): sequences of one group ≥ 0 share
  // the blocks, and so the K/V rows, of the group's first sequence for their first
  // `shared` tokens (a cached prefix; that sequence must be at least as long);
  // −1: none.
  Kv(int32_t h, int32_t kvh, int32_t d, std::vector<int32_t> l, uint32_t seed,
     std::vector<int32_t> share_group = {}, int32_t shared = 0)
      : heads(h), kv_heads(kvh), hd(d), lens(std::move(l)) {
    std::mt19937 g(seed);
    int32_t blocks = 1;  // block 0: the null block, never referenced
    for (int32_t len : lens) {
      max_blocks = std::max(max_blocks, (len + kBs - 1) / kBs);
      blocks += (len + kBs - 1) / kBs;
      cap = std::max<int64_t>(cap, len);
    }
    std::vector<int32_t> perm(blocks - 1);
    std::iota(perm.begin(), perm.end(), 1);
    std::shuffle(perm.begin(), perm.end(), g);
    tables.assign(lens.size() * max_blocks, 0);
    std::vector<uint16_t> pk(size_t{1} * blocks * kBs * row()), pv(pk.size());
    std::vector<uint16_t> fk(lens.size() * cap * row()), fv(fk.size());
    size_t next = 0;
    std::vector<int> owner(lens.size(), -1);  // the sequence whose prefix s shares
    for (size_t s = 0; s < share_group.size() && s < lens.size(); ++s)
      for (size_t o = 0; o < s && share_group[s] >= 0; ++o)
        if (share_group[o] == share_group[s]) {
          owner[s] = static_cast<int>(o);
          break;
        }
    for (size_t s = 0; s < lens.size(); ++s) {
      auto kk = randn(lens[s] * row(), seed + 10 * s + 1);
      auto vv = randn(lens[s] * row(), seed + 10 * s + 2);
      for (auto& x : kk) x = bf16_to_f32(f32_to_bf16(x));
      for (auto& x : vv) x = bf16_to_f32(f32_to_bf16(x));
      const int32_t own_from = owner[s] >= 0 ? std::min(lens[s], shared) : 0;
      if (owner[s] >= 0) {
        const int o = owner[s];
        std::copy(k[o].begin(), k[o].begin() + own_from * row(), kk.begin());
        std::copy(v[o].begin(), v[o].begin() + own_from * row(), vv.begin());
      }
      for (int32_t b = 0; b * kBs < lens[s]; ++b)
        tables[s * max_blocks + b] =
            b * kBs < own_from ? tables[owner[s] * max_blocks + b] : perm[next++];
      for (int32_t p = 0; p < lens[s]; ++p) {
        const size_t slot = static_cast<size_t>(tables[s * max_blocks + p / kBs]) * kBs + p % kBs;
        for (int64_t e = 0; e < row(); ++e) {
          pk[slot * row() + e] = f32_to_bf16(kk[p * row() + e]);
          pv[slot * row() + e] = f32_to_bf16(vv[p * row() + e]);
          fk[(s * cap + p) * row() + e] = pk[slot * row() + e];
          fv[(s * cap + p) * row() + e] = pv[slot * row() + e];
        }
      }
      k.push_back(std::move(kk));
      v.push_back(std::move(vv));
    }
    pool_k = dev(pk);
    pool_v = dev(pv);
    flat_k = dev(fk);
    flat_v = dev(fv);
    dtables = dev(tables);
  }

  // The GPU's attention for queries (seq, pos), bf16 KV.
  std::vector<float> gpu(const std::vector<float>& q, const std::vector<int32_t>& seq,
                         const std::vector<int32_t>& pos, int32_t window, bool paged, AttnFn fn,
                         int32_t max_query_len = 0, int32_t decode_tokens = 0) const {
    const int32_t T = static_cast<int32_t>(pos.size());
    auto dq = dev(q), dpos = dev(pos), dseq = dev(seq);
    auto dout = dev_poisoned(q.size() * 4);
    PagedAttentionParams p;
    p.q = dq.as<float>();
    p.out = dout.as<float>();
    p.num_tokens = T;
    p.num_heads = heads;
    p.num_kv_heads = kv_heads;
    p.head_dim = hd;
    p.positions = dpos.as<int32_t>();
    p.token_seq = dseq.as<int32_t>();
    p.max_position = *std::max_element(pos.begin(), pos.end());
    p.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    p.sliding_window = window;
    p.kv_type = KvType::kBF16;
    p.layout = paged ? KvLayout::kBlockTable : KvLayout::kContiguous;
    p.k_cache = paged ? pool_k.data() : flat_k.data();
    p.v_cache = paged ? pool_v.data() : flat_v.data();
    p.block_size = kBs;
    p.block_tables = dtables.as<int32_t>();
    p.max_blocks_per_seq = max_blocks;
    p.seq_capacity = cap;
    auto ws = dev_poisoned(attention_workspace_floats(T, heads, hd, p.max_position) * 4);
    p.workspace = ws.as<float>();
    p.max_query_len = max_query_len;
    p.decode_tokens = decode_tokens;
    p.packed_partitions = INT32_MAX;  // a launch-shape hint: packed blocks where they apply
    const Status s = fn(p, 0);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return host<float>(dout, q.size());
  }

  // The CPU backend's attention for queries of sequence s.
  std::vector<float> cpu(size_t s, const std::vector<float>& q, const std::vector<int32_t>& pos,
                         int32_t window) const {
    std::vector<const float*> kt, vt;
    for (int32_t t = 0; t * kBs < lens[s]; ++t) {
      kt.push_back(k[s].data() + t * kBs * row());
      vt.push_back(v[s].data() + t * kBs * row());
    }
    std::vector<float> out(q.size());
    AttentionArgs a;
    a.q = q.data();
    a.out = out.data();
    a.num_tokens = static_cast<int32_t>(pos.size());
    a.num_heads = heads;
    a.num_kv_heads = kv_heads;
    a.head_dim = hd;
    a.positions = pos.data();
    a.scale = 1.0f / std::sqrt(static_cast<float>(hd));
    a.tile = kBs;
    a.k_tiles = kt.data();
    a.v_tiles = vt.data();
    a.num_tiles = static_cast<int32_t>(kt.size());
    a.sliding_window = window;
    cpu_backend().attention(a);
    return out;
  }

  // A double-precision reference for bf16 operands: q rounded to bf16, the softmax
  // exact; `bound` per element is Σ_j w_j |v_j| (w the softmax weights), which
  // scales the error the weights' bf16 rounding may add (each weight off by at most
  // 2⁻⁹ of itself).
  struct Reference {
    std::vector<double> out, bound;
  };
  Reference bf16_reference(size_t s, const std::vector<float>& q, const std::vector<int32_t>& pos,
                           int32_t window) const {
    const int32_t T = static_cast<int32_t>(pos.size()), group = heads / kv_heads;
    const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
    Reference r{std::vector<double>(q.size()), std::vector<double>(q.size())};
    std::vector<double> qb(hd), w;
    for (int32_t t = 0; t < T; ++t) {
      const int32_t first = window > 0 ? std::max(0, pos[t] - window + 1) : 0;
      for (int32_t h = 0; h < heads; ++h) {
        const size_t qo = (static_cast<size_t>(t) * heads + h) * hd;  // q and out row
        for (int32_t d = 0; d < hd; ++d) qb[d] = bf16_to_f32(f32_to_bf16(q[qo + d]));
        const int32_t kvh = h / group;
        w.assign(pos[t] - first + 1, 0.0);
        double mx = -std::numeric_limits<double>::infinity();
        for (int32_t j = first; j <= pos[t]; ++j) {
          const float* kr = k[s].data() + j * row() + kvh * hd;
          double dot = 0.0;
          for (int32_t d = 0; d < hd; ++d) dot += qb[d] * kr[d];
          w[j - first] = dot * scale;
          mx = std::max(mx, w[j - first]);
        }
        double l = 0.0;
        for (double& x : w) l += (x = std::exp(x - mx));
        for (int32_t j = first; j <= pos[t]; ++j) {
          const float* vr = v[s].data() + j * row() + kvh * hd;
          const double wj = w[j - first] / l;
          for (int32_t d = 0; d < hd; ++d) {
            r.out[qo + d] += wj * vr[d];
            r.bound[qo + d] += wj * std::fabs(vr[d]);
          }
        }
      }
    }
    return r;
  }
};

void expect_close(const std::vector<float>& gpu, const std::vector<float>& cpu,
                  const std::string& what) {
  ASSERT_EQ(gpu.size(), cpu.size());
  int bad = 0;
  for (size_t i = 0; i < gpu.size() && bad < 5; ++i)
    if (!(std::fabs(gpu[i] - cpu[i]) <= 2e-5f * (1.0f + std::fabs(cpu[i])))) {
      ADD_FAILURE() << what << " [" << i << "]: gpu " << gpu[i] << " cpu " << cpu[i];
      ++bad;
    }
}

// bf16 operands against bf16_reference: within 2⁻⁸ · Σ_j w_j |v_j| (twice what the
// weights' bf16 rounding can add; the scores' f32 sums add far less) plus the CPU
// tolerance. A key dropped or added moves an output by w_j |v_j − o|, above that
// bound wherever v_j is not close to the output.
void expect_close_bf16(const std::vector<float>& gpu, const Kv::Reference& ref,
                       const std::string& what) {
  ASSERT_EQ(gpu.size(), ref.out.size());
  int bad = 0;
  for (size_t i = 0; i < gpu.size() && bad < 5; ++i) {
    const double tol = std::ldexp(ref.bound[i], -8) + 2e-5 * (1.0 + std::fabs(ref.out[i]));
    if (!(std::fabs(gpu[i] - ref.out[i]) <= tol)) {
      ADD_FAILURE() << what << " [" << i << "]: gpu " << gpu[i] << " reference " << ref.out[i]
                    << " (bound " << tol << ")";
      ++bad;
    }
  }
}

// The GPU's output for queries (s, pos) against the CPU (f32 operands) or the bf16
// reference (bf16 operands).
void expect_matches_reference(const Kv& kv, const KernelCase& c, const std::vector<float>& gpu,
                              size_t s, const std::vector<float>& q,
                              const std::vector<int32_t>& pos, int32_t window,
                              const std::string& what) {
  if (bf16_operands(c))
    expect_close_bf16(gpu, kv.bf16_reference(s, q, pos, window), what);
  else
    expect_close(gpu, kv.cpu(s, q, pos, window), what);
}

// Decode rows (row s: sequence s at its last position, q scaled by 2) each give
// their bits alone, in reversed row order and from the contiguous cache; the rows
// `vs_cpu` picks are also within the CPU tolerance.
void expect_decode_rows_keep_their_bits(const Kv& kv, const KernelCase& c, uint32_t q_seed,
                                        const std::function<bool(int32_t)>& vs_cpu) {
  const AttnFn fn = kernel_fn(c);
  const int32_t n = static_cast<int32_t>(kv.lens.size());
  const size_t qrow = static_cast<size_t>(kv.heads) * kv.hd;
  auto q = randn(n * qrow, q_seed, 2.0f);
  std::vector<int32_t> pos(n), seq(n);
  for (int32_t s = 0; s < n; ++s) {
    pos[s] = kv.lens[s] - 1;
    seq[s] = s;
  }
  const auto batch = kv.gpu(q, seq, pos, 0, true, fn);
  EXPECT_TRUE(same_bits(batch.data(), kv.gpu(q, seq, pos, 0, false, fn).data(), batch.size() * 4))
      << "paged vs contiguous";
  std::vector<float> qr;
  std::vector<int32_t> pr(pos.rbegin(), pos.rend()), sr(seq.rbegin(), seq.rend());
  for (int32_t s = n - 1; s >= 0; --s)
    qr.insert(qr.end(), q.begin() + s * qrow, q.begin() + (s + 1) * qrow);
  const auto rev = kv.gpu(qr, sr, pr, 0, true, fn);
  for (int32_t s = 0; s < n; ++s) {
    std::vector<float> qs(q.begin() + s * qrow, q.begin() + (s + 1) * qrow);
    const auto alone = kv.gpu(qs, {s}, {pos[s]}, 0, true, fn);
    EXPECT_TRUE(same_bits(alone.data(), batch.data() + s * qrow, qrow * 4)) << "row " << s;
    EXPECT_TRUE(same_bits(rev.data() + (n - 1 - s) * qrow, batch.data() + s * qrow, qrow * 4))
        << "row " << s << " reversed";
    if (vs_cpu(s)) expect_matches_reference(kv, c, alone, s, qs, {pos[s]}, 0, "row vs cpu");
  }
}

class CudaAttentionOrderTest : public CudaTest, public ::testing::WithParamInterface<KernelCase> {
 protected:
  AttnFn fn() const { return kernel_fn(GetParam()); }
};

TEST_P(CudaAttentionOrderTest, EveryDecodeStepEqualsTheWholePrompt) {
  // 700 tokens: three 256-key partitions, the last partly filled; windows 0 and 45
  // (a window start inside a warp's 32 keys); q scaled up by 4 for peaked weights.
  const Kv kv(16, 8, 128, {700}, 31);
  const int32_t L = 700;
  const size_t qrow = size_t{16} * 128;
  auto q = randn(L * qrow, 32, 4.0f);
  std::vector<int32_t> pos(L), seq(L, 0);
  std::iota(pos.begin(), pos.end(), 0);
  for (int32_t window : {0, 45}) {
    SCOPED_TRACE("window " + std::to_string(window));
    const auto whole = kv.gpu(q, seq, pos, window, true, fn());
    expect_matches_reference(kv, GetParam(), whole, 0, q, pos, window, "whole prompt vs cpu");
    EXPECT_TRUE(
        same_bits(whole.data(), kv.gpu(q, seq, pos, window, false, fn()).data(), whole.size() * 4))
        << "paged vs contiguous";
    int mismatches = 0;
    for (int32_t p = 0; p < L; ++p) {
      std::vector<float> qp(q.begin() + p * qrow, q.begin() + (p + 1) * qrow);
      const auto one = kv.gpu(qp, {0}, {p}, window, true, fn());
      if (!same_bits(one.data(), whole.data() + p * qrow, qrow * 4)) ++mismatches;
    }
    EXPECT_EQ(mismatches, 0) << "decode steps whose bits differ from the whole prompt's";
  }
}

TEST_P(CudaAttentionOrderTest, SixtyFourDecodeRowsEqualEachRowAlone) {
  // Lengths from 1 to 1,000 (every partition and sub-partition fill); GQA 4.
  std::vector<int32_t> lens(64);
  std::mt19937 g(5);
  for (auto& l : lens) l = 1 + static_cast<int32_t>(g() % 1000);
  lens[0] = 1;
  lens[1] = 256;
  lens[2] = 257;
  lens[3] = 32;
  lens[4] = 33;
  const Kv kv(16, 4, 64, lens, 77);
  expect_decode_rows_keep_their_bits(kv, GetParam(), 78,
                                     [](int32_t s) { return s % 8 == 0 || s < 5; });
}

TEST_P(CudaAttentionOrderTest, DecodeRowsInPrefillBlocksAndInterleavedPromptsKeepTheirBits) {
  // The mma kernel's prefill blocks take runs of one sequence's tokens; decode rows
  // launched with a prefill hint (a run per row) and two prompts whose tokens
  // alternate in the launch (runs of one token) must give each query its bits alone.
  std::vector<int32_t> lens = {300, 300, 1, 17, 256, 257, 513, 40};
  const Kv kv(16, 8, 128, lens, 91);
  const size_t qrow = size_t{16} * 128;
  std::vector<int32_t> pos, seq;
  for (int32_t s = 0; s < 8; ++s) {
    pos.push_back(lens[s] - 1);
    seq.push_back(s);
  }
  auto q = randn(pos.size() * qrow, 92, 2.0f);
  const auto decode = kv.gpu(q, seq, pos, 0, true, fn(), 1);
  const auto as_prefill = kv.gpu(q, seq, pos, 0, true, fn(), 64);
  EXPECT_TRUE(same_bits(decode.data(), as_prefill.data(), decode.size() * 4))
      << "decode rows launched as decode vs as prefill tiles";
  // Prompts 0 and 1 (300 tokens each) interleaved token by token.
  std::vector<int32_t> ipos, iseq;
  for (int32_t p = 0; p < 300; ++p)
    for (int32_t s = 0; s < 2; ++s) {
      ipos.push_back(p);
      iseq.push_back(s);
    }
  auto iq = randn(ipos.size() * qrow, 93, 2.0f);
  const auto inter = kv.gpu(iq, iseq, ipos, 30, true, fn());
  for (int32_t s = 0; s < 2; ++s) {
    std::vector<float> qs;
    std::vector<int32_t> ps, ss;
    for (int32_t p = 0; p < 300; ++p) {
      const size_t t = 2 * p + s;
      qs.insert(qs.end(), iq.begin() + t * qrow, iq.begin() + (t + 1) * qrow);
      ps.push_back(p);
      ss.push_back(s);
    }
    const auto alone = kv.gpu(qs, ss, ps, 30, true, fn());
    int mismatches = 0;
    for (int32_t p = 0; p < 300; ++p)
      if (!same_bits(alone.data() + p * qrow, inter.data() + (2 * p + s) * qrow, qrow * 4))
        ++mismatches;
    EXPECT_EQ(mismatches, 0) << "prompt " << s << ": interleaved tokens whose bits differ";
    expect_matches_reference(kv, GetParam(), alone, s, qs, ps, 30, "prompt vs cpu");
  }
}

TEST_P(CudaAttentionOrderTest, MixedStepDecodeRowsApartKeepTheirBits) {
  // A continuous-batching step in the model's order: eight decode rows, then a
  // 300-token chunk of a 600-token prompt (300 cached) and a 70-token prompt. Told
  // that the first eight tokens are one-token rows (decode_tokens), the tensor-core
  // kernel runs them in decode launches beside the prompts' prefill launch: every
  // token's bits are those of one launch for all, and of its row or prompt alone.
  const std::vector<int32_t> lens = {1, 17, 256, 257, 700, 40, 513, 300, 600, 70};
  const int32_t rows = 8;
  const Kv kv(16, 8, 128, lens, 95);
  const size_t qrow = size_t{16} * 128;
  std::vector<int32_t> pos, seq;
  for (int32_t s = 0; s < rows; ++s) {
    pos.push_back(lens[s] - 1);
    seq.push_back(s);
  }
  for (int32_t p = 300; p < 600; ++p) {
    pos.push_back(p);
    seq.push_back(8);
  }
  for (int32_t p = 0; p < 70; ++p) {
    pos.push_back(p);
    seq.push_back(9);
  }
  const auto q = randn(pos.size() * qrow, 96, 2.0f);
  const auto apart = kv.gpu(q, seq, pos, 0, true, fn(), 300, rows);
  const auto together = kv.gpu(q, seq, pos, 0, true, fn(), 300);
  EXPECT_TRUE(same_bits(apart.data(), together.data(), apart.size() * 4))
      << "decode rows apart vs in the prefill launch";
  for (int32_t s = 0; s < rows; ++s) {
    const std::vector<float> qs(q.begin() + s * qrow, q.begin() + (s + 1) * qrow);
    const auto alone = kv.gpu(qs, {s}, {pos[s]}, 0, true, fn(), 1);
    EXPECT_TRUE(same_bits(alone.data(), apart.data() + s * qrow, qrow * 4)) << "decode row " << s;
  }
  size_t t = rows;
  for (int32_t s : {8, 9}) {
    std::vector<int32_t> ps, ss;
    while (t + ps.size() < pos.size() && seq[t + ps.size()] == s) {
      ps.push_back(pos[t + ps.size()]);
      ss.push_back(s);
    }
    const std::vector<float> qs(q.begin() + t * qrow, q.begin() + (t + ps.size()) * qrow);
    const auto alone = kv.gpu(qs, ss, ps, 0, true, fn(), static_cast<int32_t>(ps.size()));
    EXPECT_TRUE(same_bits(alone.data(), apart.data() + t * qrow, alone.size() * 4))
        << "prompt " << s << " alone vs in the mixed launch";
    t += ps.size();
  }
}

TEST_P(CudaAttentionOrderTest, DecodeRowsSharingPrefixBlocksKeepTheirBits) {
  // 64 decode rows behind two cached 512-token prefixes (two full partitions of
  // shared blocks; the packed decode blocks run such rows together), every seventh
  // row with a prefix of its own, a few rows shorter than the prefix: each row's
  // bits are its bits alone, in reversed order, and from the contiguous cache.
  const int32_t shared = 512;
  std::vector<int32_t> lens(64), group(64);
  std::mt19937 g(41);
  for (int32_t s = 0; s < 64; ++s) {
    lens[s] = shared + 1 + static_cast<int32_t>(g() % 300);
    group[s] = s % 7 == 3 ? -1 : (s < 40 ? 0 : 1);
  }
  lens[5] = 200;  // inside the prefix: shares its first 13 blocks
  lens[6] = shared;
  lens[7] = shared + 1;
  lens[50] = 300;
  const Kv kv(16, 8, 128, lens, 43, group, shared);
  expect_decode_rows_keep_their_bits(kv, GetParam(), 44,
                                     [](int32_t s) { return s % 8 == 0 || (s >= 3 && s <= 7); });
}

// Shapes (GQA 1/2/4/8/16, head_dim 16–256, windows 0/30/100; bf16 KV): a 300-token
// prompt vs the CPU, chunks starting at block and partition boundaries == the whole
// prompt, paged == contiguous.
struct Shape {
  int32_t heads, kv_heads, hd, window;
};
class CudaAttentionShapeTest : public CudaTest,
                               public ::testing::WithParamInterface<std::tuple<Shape, KernelCase>> {
};

TEST_P(CudaAttentionShapeTest, ChunkedEqualsWholeAndMatchesCpu) {
  const auto [c, kernel] = GetParam();
  const AttnFn fn = kernel_fn(kernel);
  const Kv kv(c.heads, c.kv_heads, c.hd, {300}, 17);
  const int32_t L = 300;
  const size_t qrow = static_cast<size_t>(c.heads) * c.hd;
  auto q = randn(L * qrow, 18, 2.0f);
  std::vector<int32_t> pos(L), seq(L, 0);
  std::iota(pos.begin(), pos.end(), 0);
  const auto whole = kv.gpu(q, seq, pos, c.window, true, fn);
  expect_matches_reference(kv, kernel, whole, 0, q, pos, c.window, "whole vs cpu");
  const auto flat = kv.gpu(q, seq, pos, c.window, false, fn);
  EXPECT_TRUE(same_bits(whole.data(), flat.data(), whole.size() * 4)) << "paged vs contiguous";
  for (int32_t b : {0, 16, 31, 32, 255, 256, 299}) {
    for (int32_t e : {b + 1, std::min(L, b + 40), L}) {
      if (e <= b) continue;
      std::vector<float> qc(q.begin() + b * qrow, q.begin() + e * qrow);
      std::vector<int32_t> pc(pos.begin() + b, pos.begin() + e), sc(e - b, 0);
      const auto out = kv.gpu(qc, sc, pc, c.window, true, fn);
      EXPECT_TRUE(same_bits(out.data(), whole.data() + b * qrow, out.size() * 4))
          << "chunk [" << b << ", " << e << ")";
    }
  }
}

std::string shape_name(const Shape& c) {
  return "h" + std::to_string(c.heads) + "_kv" + std::to_string(c.kv_heads) + "_d" +
         std::to_string(c.hd) + "_w" + std::to_string(c.window);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, CudaAttentionShapeTest,
    ::testing::Combine(
        ::testing::Values(Shape{16, 8, 128, 0}, Shape{8, 1, 64, 0}, Shape{32, 2, 128, 100},
                          Shape{4, 4, 256, 0}, Shape{4, 2, 16, 0}, Shape{8, 2, 32, 30}),
        ::testing::Values(KernelCase{Kernel::kThreadPerKey}, KernelCase{Kernel::kWarp})),
    [](const auto& info) {
      return shape_name(std::get<0>(info.param)) + "_" + kernel_name(std::get<1>(info.param));
    });

// The tensor-core kernel's shapes: head_dim 16 … 128, groups 1, 2, 4, 8, 16; both
// operand modes.
INSTANTIATE_TEST_SUITE_P(
    MmaShapes, CudaAttentionShapeTest,
    ::testing::Combine(
        ::testing::Values(Shape{16, 8, 128, 0}, Shape{8, 1, 64, 0}, Shape{32, 2, 128, 100},
                          Shape{8, 8, 64, 30}, Shape{16, 4, 128, 45}, Shape{16, 16, 128, 0},
                          Shape{4, 2, 16, 0}, Shape{8, 2, 32, 30}),
        ::testing::Values(KernelCase{Kernel::kMma}, bf16(Kernel::kMma),
                          KernelCase{Kernel::kMmaSyncPrefill}, bf16(Kernel::kMmaSyncPrefill),
                          KernelCase{Kernel::kMmaOneWarpgroupPrefill},
                          bf16(Kernel::kMmaOneWarpgroupPrefill), KernelCase{Kernel::kMmaWsPrefill2},
                          bf16(Kernel::kMmaWsPrefill2), bf16(Kernel::kMmaWsPrefill3))),
    [](const auto& info) {
      return shape_name(std::get<0>(info.param)) + "_" + kernel_name(std::get<1>(info.param));
    });

// The packed eight-warp blocks at every group (tiles of 16 down to 1 token), with
// and without a window (which keeps every token its own run).
INSTANTIATE_TEST_SUITE_P(
    MmaPackedShapes, CudaAttentionShapeTest,
    ::testing::Combine(
        ::testing::Values(Shape{16, 8, 128, 0}, Shape{8, 1, 64, 0}, Shape{16, 16, 128, 0},
                          Shape{32, 2, 128, 100}, Shape{16, 4, 128, 45}),
        ::testing::Values(KernelCase{Kernel::kMmaPackedWide}, bf16(Kernel::kMmaPackedWide))),
    [](const auto& info) {
      return shape_name(std::get<0>(info.param)) + "_" + kernel_name(std::get<1>(info.param));
    });

INSTANTIATE_TEST_SUITE_P(
    Kernels, CudaAttentionOrderTest,
    ::testing::Values(KernelCase{Kernel::kThreadPerKey}, KernelCase{Kernel::kWarp},
                      KernelCase{Kernel::kMma}, KernelCase{Kernel::kMmaOneWarp},
                      KernelCase{Kernel::kMmaWide}, KernelCase{Kernel::kMmaWideTwoRounds},
                      KernelCase{Kernel::kMmaPacked}, KernelCase{Kernel::kMmaPackedWide},
                      KernelCase{Kernel::kMmaPackedWideTwoRounds},
                      KernelCase{Kernel::kMmaPackedFirstPartition}, bf16(Kernel::kMma),
                      bf16(Kernel::kMmaOneWarp), bf16(Kernel::kMmaWide),
                      bf16(Kernel::kMmaWideTwoRounds), bf16(Kernel::kMmaPacked),
                      bf16(Kernel::kMmaPackedWide), bf16(Kernel::kMmaPackedWideTwoRounds),
                      bf16(Kernel::kMmaPackedFirstPartition), KernelCase{Kernel::kMmaSyncPrefill},
                      bf16(Kernel::kMmaSyncPrefill), KernelCase{Kernel::kMmaOneWarpgroupPrefill},
                      bf16(Kernel::kMmaOneWarpgroupPrefill), KernelCase{Kernel::kMmaWsPrefill2},
                      bf16(Kernel::kMmaWsPrefill2), bf16(Kernel::kMmaWsPrefill3)),
    [](const auto& info) { return kernel_name(info.param); });

class CudaAttentionMmaTest : public CudaTest {};

TEST_F(CudaAttentionMmaTest, RefusesWhatItDoesNotSupportByName) {
  EXPECT_TRUE(paged_attention_mma_supports(128, 16, 8, KvType::kBF16));
  EXPECT_FALSE(paged_attention_mma_supports(128, 16, 8, KvType::kF32));
  EXPECT_FALSE(paged_attention_mma_supports(256, 16, 8, KvType::kBF16));
  EXPECT_TRUE(paged_attention_mma_supports(32, 8, 4, KvType::kBF16));
  EXPECT_FALSE(paged_attention_mma_supports(128, 12, 4, KvType::kBF16));  // group 3
  const Kv kv(12, 4, 128, {20}, 5);
  std::vector<int32_t> pos = {19}, seq = {0};
  PagedAttentionParams p;
  p.num_tokens = 1;
  p.num_heads = 12;
  p.num_kv_heads = 4;
  p.head_dim = 128;
  auto dq = dev(randn(12 * 128, 6)), dout = dev_poisoned(12 * 128 * 4), dpos = dev(pos);
  p.q = dq.as<float>();
  p.out = dout.as<float>();
  p.positions = dpos.as<int32_t>();
  p.max_position = 19;
  p.kv_type = KvType::kBF16;
  p.layout = KvLayout::kBlockTable;
  p.k_cache = kv.pool_k.data();
  p.v_cache = kv.pool_v.data();
  p.block_tables = kv.dtables.as<int32_t>();
  p.max_blocks_per_seq = kv.max_blocks;
  auto ws = dev_poisoned(attention_workspace_floats(1, 12, 128, 19) * 4);
  p.workspace = ws.as<float>();
  const Status s = paged_attention_mma(p, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("query heads per KV head"), std::string::npos) << s.to_string();
}

TEST_F(CudaAttentionMmaTest, Bf16OperandsAreTheirOwnNumbers) {
  // The operand mode reaches the kernels: a 300-token prompt's bits differ between
  // the two modes (in prefill and decode launches alike), and each is nearer its own
  // reference than the other's (the bf16-rounded q moves the scores by ~1e-3).
  const Kv kv(16, 8, 128, {300}, 23);
  const size_t qrow = size_t{16} * 128;
  auto q = randn(300 * qrow, 24, 2.0f);
  std::vector<int32_t> pos(300), seq(300, 0);
  std::iota(pos.begin(), pos.end(), 0);
  const auto split = kv.gpu(q, seq, pos, 0, true, kernel_fn(KernelCase{Kernel::kMma}));
  const auto rounded = kv.gpu(q, seq, pos, 0, true, kernel_fn(bf16(Kernel::kMma)));
  EXPECT_FALSE(same_bits(split.data(), rounded.data(), split.size() * 4));
  std::vector<float> q_last(q.end() - qrow, q.end());
  const auto split_decode =
      kv.gpu(q_last, {0}, {299}, 0, true, kernel_fn(KernelCase{Kernel::kMma}), 1);
  const auto rounded_decode = kv.gpu(q_last, {0}, {299}, 0, true, kernel_fn(bf16(Kernel::kMma)), 1);
  EXPECT_FALSE(same_bits(split_decode.data(), rounded_decode.data(), qrow * 4));
  const auto cpu = kv.cpu(0, q, pos, 0);
  const auto ref = kv.bf16_reference(0, q, pos, 0);
  double split_to_cpu = 0, split_to_ref = 0, rounded_to_cpu = 0, rounded_to_ref = 0;
  for (size_t i = 0; i < cpu.size(); ++i) {
    split_to_cpu += std::fabs(split[i] - cpu[i]);
    split_to_ref += std::fabs(split[i] - ref.out[i]);
    rounded_to_cpu += std::fabs(rounded[i] - cpu[i]);
    rounded_to_ref += std::fabs(rounded[i] - ref.out[i]);
  }
  EXPECT_LT(split_to_cpu, split_to_ref);
  EXPECT_LT(rounded_to_ref, rounded_to_cpu);
}

TEST_F(CudaAttentionMmaTest, PackedDecodeRunsFollowTheSharedBlocks) {
  // 16 decode rows (GQA 2: tiles of 8 tokens) behind one cached 256-token prefix
  // (partition 0), except row 6 (a prefix of its own); row 3 is 100 tokens long
  // (inside the prefix). Partition 0: tile 0 runs [0, 6), [6, 7), [7, 8), tile 1
  // one run [8, 16). Partition 1 (each row's own blocks): a run a row, except row
  // 3, which reaches none of it and so joins row 2's run.
  const int32_t shared = 256;
  std::vector<int32_t> lens(16), group(16, 0);
  for (int32_t s = 0; s < 16; ++s) lens[s] = 300 + 7 * s;
  lens[3] = 100;
  group[6] = -1;
  const Kv kv(16, 8, 128, lens, 61, group, shared);
  std::vector<int32_t> pos(16), seq(16);
  for (int32_t s = 0; s < 16; ++s) {
    pos[s] = lens[s] - 1;
    seq[s] = s;
  }
  auto dpos = dev(pos), dseq = dev(seq);
  PagedAttentionParams p;
  p.num_tokens = 16;
  p.num_heads = 16;
  p.num_kv_heads = 8;
  p.head_dim = 128;
  p.positions = dpos.as<int32_t>();
  p.token_seq = dseq.as<int32_t>();
  p.max_position = *std::max_element(pos.begin(), pos.end());
  p.kv_type = KvType::kBF16;
  p.layout = KvLayout::kBlockTable;
  p.block_size = kBs;
  p.block_tables = kv.dtables.as<int32_t>();
  p.max_blocks_per_seq = kv.max_blocks;
  auto druns = dev_poisoned(2 * 16 * 4);
  auto runs_of = [&](int32_t part) {
    const Status s = packed_decode_runs(p, part, druns.as<int32_t>(), 0);
    EXPECT_TRUE(s.ok()) << s.to_string();
    return host<int32_t>(druns, 2 * 16);
  };
  // One past each run's end for the tokens that start one (−1 for the rest), and the
  // sequence it loads through: the run's row that reaches furthest.
  const auto part0 = runs_of(0);
  const std::vector<int32_t> end0 = {6, -1, -1, -1, -1, -1, 7, 8, 16, -1, -1, -1, -1, -1, -1, -1};
  const std::vector<int32_t> ref0 = {5, -1, -1, -1, -1, -1, 6, 7, 15, -1, -1, -1, -1, -1, -1, -1};
  const auto part1 = runs_of(1);
  for (int32_t t = 0; t < 16; ++t) {
    EXPECT_EQ(part0[2 * t], end0[t]) << "partition 0, token " << t;
    EXPECT_EQ(part0[2 * t + 1], ref0[t]) << "partition 0, token " << t;
    const int32_t end1 = t == 3 ? -1 : (t == 2 ? 4 : t + 1);
    EXPECT_EQ(part1[2 * t], end1) << "partition 1, token " << t;
    EXPECT_EQ(part1[2 * t + 1], t == 3 ? -1 : t) << "partition 1, token " << t;
  }
}

// Decode blocks that copy the keys below each token's position before they wait
// for the kernel before them (PagedAttentionParams::keys_below_position_settled)
// copy each token's own key and value after the wait: with those rows NaN in the
// pool until a K/V write launched just before, every decode shape gives the bits of
// the same launch without the promise over the written pool.
TEST_F(CudaAttentionMmaTest, KeysCopiedBeforeTheWaitLeaveEachTokensOwnToTheWrite) {
  // Seven rows behind a cached 512-token prefix (packed partitions 0 and 1) with own
  // tails of 1 to 188 tokens, and one row of its own.
  const std::vector<int32_t> lens = {515, 530, 560, 592, 600, 513, 700, 530};
  const Kv kv(16, 8, 128, lens, 71, {0, 0, 0, 0, 0, 0, 0, -1}, 512);
  const int32_t n = static_cast<int32_t>(lens.size());
  const int64_t row = kv.row();
  const size_t qrow = size_t{16} * 128;
  std::vector<int32_t> pos(n), seq(n);
  std::vector<float> k_new(n * row), v_new(n * row);  // each token's own rows
  for (int32_t s = 0; s < n; ++s) {
    pos[s] = lens[s] - 1;
    seq[s] = s;
    std::copy_n(kv.k[s].begin() + pos[s] * row, row, k_new.begin() + s * row);
    std::copy_n(kv.v[s].begin() + pos[s] * row, row, v_new.begin() + s * row);
  }
  const std::vector<uint16_t> nan_row(row, 0x7fc0);  // bf16 NaN
  cudaStream_t st = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking), cudaSuccess);
  // The first `count` rows from `first`: their own keys NaN, then the write and the
  // launch on one stream; the output.
  auto run = [&](int32_t first, int32_t count, MmaDecodeShape shape, bool settled) {
    for (int32_t s = first; s < first + count; ++s) {
      const int64_t slot =
          int64_t{kv.tables[s * kv.max_blocks + pos[s] / kBs]} * kBs + pos[s] % kBs;
      for (const DeviceBuffer* pool : {&kv.pool_k, &kv.pool_v})
        EXPECT_EQ(cudaMemcpy(pool->as<uint16_t>() + slot * row, nan_row.data(), row * 2,
                             cudaMemcpyHostToDevice),
                  cudaSuccess);
    }
    const std::vector<int32_t> p_pos(pos.begin() + first, pos.begin() + first + count);
    const std::vector<int32_t> p_seq(seq.begin() + first, seq.begin() + first + count);
    auto dpos = dev(p_pos), dseq = dev(p_seq);
    auto dk =
        dev(std::vector<float>(k_new.begin() + first * row, k_new.begin() + (first + count) * row));
    auto dv =
        dev(std::vector<float>(v_new.begin() + first * row, v_new.begin() + (first + count) * row));
    auto q = randn(count * qrow, 73 + first, 2.0f);
    auto dq = dev(q);
    auto dout = dev_poisoned(q.size() * 4);
    const int32_t max_pos = *std::max_element(p_pos.begin(), p_pos.end());
    auto ws = dev_poisoned(attention_workspace_floats(count, 16, 128, max_pos) * 4);
    KvWriteParams w;
    w.k = dk.as<float>();
    w.v = dv.as<float>();
    w.num_tokens = count;
    w.num_kv_heads = 8;
    w.head_dim = 128;
    w.positions = dpos.as<int32_t>();
    w.token_seq = dseq.as<int32_t>();
    w.k_cache = kv.pool_k.data();
    w.v_cache = kv.pool_v.data();
    w.block_size = kBs;
    w.block_tables = kv.dtables.as<int32_t>();
    w.max_blocks_per_seq = kv.max_blocks;
    PagedAttentionParams p;
    p.q = dq.as<float>();
    p.out = dout.as<float>();
    p.num_tokens = count;
    p.num_heads = 16;
    p.num_kv_heads = 8;
    p.head_dim = 128;
    p.positions = dpos.as<int32_t>();
    p.token_seq = dseq.as<int32_t>();
    p.max_position = max_pos;
    p.scale = 1.0f / std::sqrt(128.0f);
    p.k_cache = kv.pool_k.data();
    p.v_cache = kv.pool_v.data();
    p.block_size = kBs;
    p.block_tables = kv.dtables.as<int32_t>();
    p.max_blocks_per_seq = kv.max_blocks;
    p.workspace = ws.as<float>();
    p.max_query_len = 1;
    p.packed_partitions = 2;
    p.keys_below_position_settled = settled;
    Status s = write_kv(w, st);
    if (s.ok()) s = paged_attention_mma_with_decode_shape(p, shape, st);
    EXPECT_TRUE(s.ok()) << s.to_string();
    EXPECT_EQ(cudaStreamSynchronize(st), cudaSuccess);
    return host<float>(dout, q.size());
  };
  using S = MmaDecodeShape;
  for (const S shape : {S::kAuto, S::kWide, S::kWideTwoRounds, S::kPackedWide,
                        S::kPackedWideTwoRounds, S::kOneWarp}) {
    for (const auto& [first, count] : {std::pair{0, n}, std::pair{6, 1}, std::pair{4, 1}}) {
      const auto early = run(first, count, shape, true);
      const auto after = run(first, count, shape, false);
      for (float x : after) ASSERT_FALSE(std::isnan(x)) << "the write reached the pool";
      EXPECT_TRUE(same_bits(early.data(), after.data(), early.size() * 4))
          << "shape " << static_cast<int>(shape) << ", rows " << first << " +" << count;
    }
  }
  cudaStreamDestroy(st);
}

// The partition combine (a block a (token, head), shared work done once a block)
// gives the bits of its serial reference (every thread running the whole fold), for
// every head_dim, 1 to 130 partitions a row, and partitions no key reached
// (m = −∞, l = 0, acc = 0) among the others.
TEST_F(CudaAttentionMmaTest, PartitionCombineEqualsItsSerialReference) {
  const std::vector<int32_t> pos = {0, 255, 256, 1800, 10000, 33279};
  const int32_t T = static_cast<int32_t>(pos.size()), H = 3;
  const int32_t max_pos = *std::max_element(pos.begin(), pos.end());
  const int32_t parts = max_pos / kAttnPartition + 1;
  auto dpos = dev(pos);
  for (int32_t D : {16, 32, 64, 128, 256}) {
    const size_t n = static_cast<size_t>(T) * H * parts;
    std::vector<float> acc = randn(n * D, 100 + D), m = randn(n, 200 + D, 8.0f),
                       l = randn(n, 300 + D);
    for (size_t i = 0; i < n; ++i) {
      l[i] = std::fabs(l[i]) + 0.5f;
      if (i % 7 == 3) {  // a partition no key of the row reached
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int32_t d = 0; d < D; ++d) acc[i * D + d] = 0.0f;
      }
    }
    std::vector<float> ws(acc);
    ws.insert(ws.end(), m.begin(), m.end());
    ws.insert(ws.end(), l.begin(), l.end());
    auto dws = dev(ws);
    auto out_a = dev_poisoned(sizeof(float) * T * H * D),
         out_b = dev_poisoned(sizeof(float) * T * H * D);
    PagedAttentionParams p;
    p.num_tokens = T;
    p.num_heads = H;
    p.num_kv_heads = H;
    p.head_dim = D;
    p.positions = dpos.as<int32_t>();
    p.max_position = max_pos;
    p.workspace = dws.as<float>();
    p.out = out_a.as<float>();
    Status s = combine_partitions_serial(p, parts, 0);
    ASSERT_TRUE(s.ok()) << s.to_string();
    p.out = out_b.as<float>();
    s = combine_partitions(p, parts, 0);
    ASSERT_TRUE(s.ok()) << s.to_string();
    const auto a = host<float>(out_a, static_cast<size_t>(T) * H * D);
    const auto b = host<float>(out_b, static_cast<size_t>(T) * H * D);
    EXPECT_TRUE(same_bits(a.data(), b.data(), a.size() * sizeof(float))) << "head_dim " << D;
    EXPECT_TRUE(std::isfinite(a[0]) && std::isfinite(a.back())) << "head_dim " << D;
  }
}

}  // namespace
}  // namespace pagedkv::backend::cuda
