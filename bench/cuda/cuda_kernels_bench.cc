// CUDA kernel microbenchmarks (results: docs/performance.md, "CUDA kernels").
//
//   bench_cuda_kernels [csv_path]      (PKV_BENCH_GEMM_ONLY=1: stop after the
//                                       step GEMMs, for quick A/B builds; =large:
//                                       after them the large-M GEMM's rows too;
//                                       PKV_BENCH_GEMM_ROWS=64: only those rows;
//                                       PKV_BENCH_MOE_ONLY=1: the copy and the
//                                       MoE experts rows only;
//                                       PKV_BENCH_ATTN_ONLY=1: the copy and the
//                                       attention rows only; =decode: the copy
//                                       and the decode attention rows only (no
//                                       CSV); PKV_BENCH_DECODE_KV_HEADS=1, 2
//                                       or 4: the decode rows with that many KV
//                                       heads and 8 / that many times the rows;
//                                       PKV_BENCH_PREFILL_ONLY=1: the copy and the
//                                       prefill attention rows only; =mma: only the
//                                       tensor-core kernel's, both operand modes;
//                                       =mma_bf16: its bf16-operand mode only; the
//                                       tensor-core rows run their prefill blocks on
//                                       wgmma, `_wgmma`, then on mma.sync; then
//                                       continuous-batching steps (decode rows and a
//                                       prompt chunk: one launch against the decode
//                                       rows apart); =mixed: those alone)
//
// Prints one table: HBM device-to-device copy bandwidth (the roofline), a decode
// step's GEMMs (Qwen3-0.6B, 28 layers, 1/8/16/32/48/64 rows; launched and graph-
// replayed; per small-M kernel, with per-GEMM µs for the model's fused shapes) plus
// the LM head, paged decode attention (bf16 KV, Qwen3-0.6B head
// shape: 16 query heads, 8 KV heads, head_dim 128, block 16, block tables randomly
// permuted) against our contiguous variant of the same kernel (the cost of
// paging), prefill attention TFLOP/s, and the batch-invariant GEMM's TFLOP/s. The
// attention rows run four times in the same run: the thread-per-key kernel
// (attention.cu), the warp sub-partition kernel (`*_warp`, attention_warp.cu) and
// the tensor-core kernel (`*_mma`, attention_mma.cu) with its split operands and
// with bf16 operands (`*_mma_bf16`, MmaOperands::kBf16); then decode rows
// behind one cached prefix (`decode_attn_shared_*`: the tensor-core kernel's
// one-warp blocks against its eight-warp and packed blocks).
// Each figure is the median of 20 timed runs (10 for the step GEMMs; CUDA events)
// after 3 warm-ups, on random data. bench/cuda/sdpa_baseline.py times torch SDPA /
// torch.matmul on the same shapes for the ratios.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <numeric>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/cuda/attention_wgmma.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_memory.h"
#include "backend/cuda/gemm_large_m.h"
#include "backend/cuda/gemm_wgmma.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/moe_group.h"
#include "backend/half.h"

namespace pagedkv::backend::cuda {
namespace {

void die_if(const Status& s) {
  if (!s.ok()) {
    std::fprintf(stderr, "%s\n", s.to_string().c_str());
    std::exit(1);
  }
}

DeviceBuffer alloc(size_t bytes) {
  auto b = DeviceBuffer::allocate(bytes);
  die_if(b.status());
  return std::move(*b);
}

// Fills device memory with random bf16 (or f32) values via a host staging chunk
// (uniform on [-√3, √3): unit variance; xorshift, so the 1.1 GB of step weights
// fill in about a second).
void fill_random(void* dst, size_t elems, bool bf16, uint32_t seed) {
  uint64_t st = 0x9E3779B97F4A7C15ull * (seed + 1);
  auto next = [&st] {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    return (static_cast<float>(st >> 40) * (1.0f / 16777216.0f) * 2.0f - 1.0f) * 1.7320508f;
  };
  const size_t chunk = size_t{1} << 22;
  std::vector<uint16_t> h16;
  std::vector<float> h32;
  for (size_t off = 0; off < elems; off += chunk) {
    const size_t n = std::min(chunk, elems - off);
    if (bf16) {
      h16.resize(n);
      for (auto& x : h16) x = f32_to_bf16(next());
      die_if(copy_to_device(static_cast<uint16_t*>(dst) + off, h16.data(), n * 2));
    } else {
      h32.resize(n);
      for (auto& x : h32) x = next();
      die_if(copy_to_device(static_cast<float*>(dst) + off, h32.data(), n * 4));
    }
  }
}

double median_ms(const std::function<void()>& fn, int reps = 20) {
  cudaEvent_t a, b;
  cudaEventCreate(&a);
  cudaEventCreate(&b);
  for (int i = 0; i < 3; ++i) fn();
  die_if(cuda_status(cudaDeviceSynchronize(), "warmup"));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    cudaEventRecord(a);
    fn();
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    t.push_back(ms);
  }
  die_if(cuda_status(cudaGetLastError(), "timed runs"));
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

struct Row {
  std::string name, shape;
  double ms, value;
  std::string unit;
  double ratio;  // vs the baseline named in `shape`' row group (0 = none)
};
std::vector<Row> rows;

void report(const std::string& name, const std::string& shape, double ms, double value,
            const std::string& unit, double ratio = 0) {
  rows.push_back({name, shape, ms, value, unit, ratio});
  std::printf("%-26s %-34s %9.4f ms %10.1f %-8s %s\n", name.c_str(), shape.c_str(), ms, value,
              unit.c_str(), ratio > 0 ? ("x" + std::to_string(ratio)).c_str() : "");
  std::fflush(stdout);
}

double bench_copy() {
  const size_t bytes = size_t{4} << 30;
  auto a = alloc(bytes), b = alloc(bytes);
  cudaMemset(a.data(), 1, bytes);
  double ms = median_ms([&] { cudaMemcpy(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice); });
  const double gbs = 2.0 * bytes / (ms * 1e-3) / 1e9;
  report("hbm_copy", "4 GiB d2d (read+write)", ms, gbs, "GB/s");
  return gbs;
}

// Decode (or prefill) attention over bf16 KV; returns ms. `paged` chooses block
// tables (randomly permuted blocks) or the contiguous layout.
using AttnFn = Status (*)(const PagedAttentionParams&, cudaStream_t);
// The tensor-core kernel with bf16 operands (PAGEDKV_CUDA_ATTENTION=mma-bf16).
Status mma_bf16_operands(const PagedAttentionParams& p, cudaStream_t s) {
  PagedAttentionParams with_operands = p;
  with_operands.mma_operands = MmaOperands::kBf16;
  return paged_attention_mma(with_operands, s);
}
const std::pair<AttnFn, const char*> kAttnKernels[] = {{paged_attention, ""},
                                                       {paged_attention_warp, "_warp"},
                                                       {paged_attention_mma, "_mma"},
                                                       {mma_bf16_operands, "_mma_bf16"}};

// One launch of `fn` over tokens at positions `pos` of sequences `seq` (block tables
// of max_blocks a sequence, or contiguous caches of ctx tokens): its median ms.
double attention_ms_of(const std::vector<int32_t>& pos, const std::vector<int32_t>& seq,
                       int32_t ctx, int32_t min_query_len, int32_t max_query_len, bool paged,
                       DeviceBuffer& kc, DeviceBuffer& vc, const DeviceBuffer& tables,
                       int32_t max_blocks, AttnFn fn, int32_t packed_partitions = 0,
                       int32_t kv_heads = 8, int32_t decode_tokens = 0) {
  const int32_t KVH = kv_heads, H = 2 * kv_heads, D = 128, bs = 16;
  const auto T = static_cast<int32_t>(pos.size());
  auto dpos = *upload_vector(pos);
  auto dseq = *upload_vector(seq);
  auto q = alloc(size_t{4} * T * H * D), out = alloc(size_t{4} * T * H * D);
  fill_random(q.data(), size_t{1} * T * H * D, false, 3);
  auto ws = alloc(4 * attention_workspace_floats(T, H, D, ctx - 1));
  PagedAttentionParams p;
  p.q = q.as<float>();
  p.out = out.as<float>();
  p.num_tokens = T;
  p.num_heads = H;
  p.num_kv_heads = KVH;
  p.head_dim = D;
  p.positions = dpos.as<int32_t>();
  p.token_seq = dseq.as<int32_t>();
  p.max_position = ctx - 1;
  p.scale = 1.0f / std::sqrt(128.0f);
  p.kv_type = KvType::kBF16;
  p.layout = paged ? KvLayout::kBlockTable : KvLayout::kContiguous;
  p.k_cache = kc.data();
  p.v_cache = vc.data();
  p.block_size = bs;
  p.block_tables = tables.as<int32_t>();
  p.max_blocks_per_seq = max_blocks;
  p.seq_capacity = ctx;
  p.workspace = ws.as<float>();
  p.max_query_len = max_query_len;
  p.min_query_len = min_query_len;
  p.packed_partitions = packed_partitions;
  p.decode_tokens = decode_tokens;
  return median_ms([&] { die_if(fn(p, 0)); });
}

// `seqs` sequences of `ctx` tokens, the last q_per_seq of each as queries.
double attention_ms(int32_t seqs, int32_t ctx, int32_t q_per_seq, bool paged, DeviceBuffer& kc,
                    DeviceBuffer& vc, const DeviceBuffer& tables, int32_t max_blocks, AttnFn fn,
                    int32_t packed_partitions = 0, int32_t kv_heads = 8) {
  const int32_t T = seqs * q_per_seq;
  std::vector<int32_t> pos(T), seq(T);
  for (int32_t s = 0; s < seqs; ++s)
    for (int32_t i = 0; i < q_per_seq; ++i) {
      pos[s * q_per_seq + i] = ctx - q_per_seq + i;
      seq[s * q_per_seq + i] = s;
    }
  return attention_ms_of(pos, seq, ctx, q_per_seq, q_per_seq, paged, kc, vc, tables, max_blocks, fn,
                         packed_partitions, kv_heads);
}

// Decode rows behind one cached prefix: `seqs` rows of `ctx` tokens whose first
// `shared` tokens are the same KV blocks (as the prefix cache gives them), the
// tensor-core kernel's one-warp blocks against its packed blocks (the same bits).
// GB/s counts every row's K/V bytes (what the rows read, not what is stored).
Status mma_one_warp(const PagedAttentionParams& p, cudaStream_t s) {
  return paged_attention_mma_with_decode_shape(p, MmaDecodeShape::kOneWarp, s);
}
Status mma_packed(const PagedAttentionParams& p, cudaStream_t s) {
  return paged_attention_mma_with_decode_shape(p, MmaDecodeShape::kPacked, s);
}
Status mma_wide(const PagedAttentionParams& p, cudaStream_t s) {
  return paged_attention_mma_with_decode_shape(p, MmaDecodeShape::kWide, s);
}
Status mma_packed_wide(const PagedAttentionParams& p, cudaStream_t s) {
  return paged_attention_mma_with_decode_shape(p, MmaDecodeShape::kPackedWide, s);
}
Status mma_packed_wide2(const PagedAttentionParams& p, cudaStream_t s) {
  return paged_attention_mma_with_decode_shape(p, MmaDecodeShape::kPackedWideTwoRounds, s);
}
void bench_decode_shared_prefix(int32_t seqs, int32_t ctx, int32_t shared) {
  const int32_t KVH = 8, D = 128, bs = 16;
  const int32_t blocks_per_seq = ctx / bs, shared_blocks = shared / bs;
  const int32_t pool_blocks = shared_blocks + seqs * (blocks_per_seq - shared_blocks);
  const size_t elems = size_t{1} * pool_blocks * bs * KVH * D;
  auto kc = alloc(elems * 2), vc = alloc(elems * 2);
  fill_random(kc.data(), elems, true, 1);
  fill_random(vc.data(), elems, true, 2);
  std::vector<int32_t> tables(size_t{1} * seqs * blocks_per_seq);
  int32_t next = shared_blocks;
  for (int32_t s = 0; s < seqs; ++s)
    for (int32_t b = 0; b < blocks_per_seq; ++b)
      tables[size_t{1} * s * blocks_per_seq + b] = b < shared_blocks ? b : next++;
  auto dt = *upload_vector(tables);
  const double bytes = 2.0 * seqs * ctx * KVH * D * 2;
  const std::string shape = std::to_string(seqs) + " rows x " + std::to_string(ctx) + " ctx, " +
                            std::to_string(shared) + " shared";
  const double one = attention_ms(seqs, ctx, 1, true, kc, vc, dt, blocks_per_seq, mma_one_warp);
  report("decode_attn_shared_one_warp_mma", shape, one, bytes / (one * 1e-3) / 1e9, "GB/s");
  // The other shapes, each against the one-warp blocks: the automatic choice with
  // the hint the model gives (the partitions the prefix fills), then each decode
  // shape forced (the packed ones packing every partition).
  const std::pair<const char*, AttnFn> others[] = {
      {"decode_attn_shared_auto_mma", paged_attention_mma},
      {"decode_attn_shared_wide_mma", mma_wide},
      {"decode_attn_shared_packed_mma", mma_packed},
      {"decode_attn_shared_packed_wide_mma", mma_packed_wide},
      {"decode_attn_shared_packed_wide2_mma", mma_packed_wide2}};
  for (const auto& [name, fn] : others) {
    const double ms =
        attention_ms(seqs, ctx, 1, true, kc, vc, dt, blocks_per_seq, fn, shared / kAttnPartition);
    report(name, shape, ms, bytes / (ms * 1e-3) / 1e9, "GB/s", one / ms);
  }
}

// A paged bf16 K/V pool of `seqs` sequences of `ctx` tokens (head_dim 128, blocks of
// 16), random values, every block used once in a random order of the block tables.
struct RandomPool {
  size_t elems;
  DeviceBuffer k, v, tables;
  RandomPool(int32_t seqs, int32_t ctx, int32_t kv_heads)
      : elems(size_t{1} * seqs * ctx * kv_heads * 128), k(alloc(elems * 2)), v(alloc(elems * 2)) {
    fill_random(k.data(), elems, true, 1);
    fill_random(v.data(), elems, true, 2);
    std::vector<int32_t> t(size_t{1} * seqs * (ctx / 16));
    std::iota(t.begin(), t.end(), 0);
    std::shuffle(t.begin(), t.end(), std::mt19937(7));
    tables = *upload_vector(t);
  }
};

// PKV_BENCH_DECODE_KV_HEADS=1, 2 or 4 (a layout experiment; anything else is 8): the
// decode rows with that many KV heads (two query heads each) and 8 / that many times
// the rows — the same K/V bytes, but a slot's rows of a head interleaved with fewer
// other heads' (with 1, each head's rows contiguous).
void bench_decode(int32_t seqs, int32_t ctx) {
  const char* kvh_env = std::getenv("PKV_BENCH_DECODE_KV_HEADS");
  const int32_t want = kvh_env != nullptr ? std::atoi(kvh_env) : 8;
  const int32_t KVH = want == 1 || want == 2 || want == 4 ? want : 8;
  seqs *= 8 / KVH;
  const int32_t blocks_per_seq = ctx / 16;
  RandomPool pool(seqs, ctx, KVH);
  auto &kc = pool.k, &vc = pool.v, &dt = pool.tables;
  const double bytes = 2.0 * pool.elems * 2;  // K and V, bf16
  const std::string shape = std::to_string(seqs) + " rows x " + std::to_string(ctx) + " ctx";
  for (const auto& [fn, suffix] : kAttnKernels) {
    const std::string tag = suffix;
    const double flat = attention_ms(seqs, ctx, 1, false, kc, vc, dt, blocks_per_seq, fn, 0, KVH);
    const double paged = attention_ms(seqs, ctx, 1, true, kc, vc, dt, blocks_per_seq, fn, 0, KVH);
    report("decode_attn_contiguous" + tag, shape, flat, bytes / (flat * 1e-3) / 1e9, "GB/s");
    report("decode_attn_paged" + tag, shape, paged, bytes / (paged * 1e-3) / 1e9, "GB/s",
           flat / paged);
  }
}

// A continuous-batching step: `rows` decode rows of sequences of `ctx` tokens, then
// one sequence's prompt chunk of `chunk` tokens (the last of its `ctx`), in the
// model's order (the scheduler puts decode rows first). The tensor-core kernel:
// everything in one prefill launch (a decode row a run of one token in the prefill
// tiles; the model before PagedAttentionParams::decode_tokens), against the decode
// rows in decode launches beside the chunk's prefill launch (the hint; the same
// bits); then the decode rows alone and the chunk alone, for reference.
void bench_mixed_step(int32_t chunk, int32_t rows, int32_t ctx) {
  const int32_t blocks_per_seq = ctx / 16;
  RandomPool pool(rows + 1, ctx, 8);
  auto &kc = pool.k, &vc = pool.v, &dt = pool.tables;
  std::vector<int32_t> pos, seq;
  for (int32_t r = 1; r <= rows; ++r) {
    pos.push_back(ctx - 1);
    seq.push_back(r);
  }
  for (int32_t i = 0; i < chunk; ++i) {
    pos.push_back(ctx - chunk + i);
    seq.push_back(0);
  }
  const std::vector<int32_t> dpos(pos.begin(), pos.begin() + rows),
      dseq(seq.begin(), seq.begin() + rows), cpos(pos.begin() + rows, pos.end()),
      cseq(seq.begin() + rows, seq.end());
  const std::string shape = std::to_string(rows) + " decode rows + " + std::to_string(chunk) +
                            "-token chunk, " + std::to_string(ctx) + " ctx";
  for (const auto& [fn, suffix] : kAttnKernels) {
    if (std::string(suffix).rfind("_mma", 0) != 0) continue;
    const std::string name = std::string("mixed_step_attn") + suffix;
    const double one =
        attention_ms_of(pos, seq, ctx, 1, chunk, true, kc, vc, dt, blocks_per_seq, fn);
    report(name + "_one_launch", shape, one, 0.0, "");
    const double split = attention_ms_of(pos, seq, ctx, chunk, chunk, true, kc, vc, dt,
                                         blocks_per_seq, fn, 0, 8, rows);
    report(name + "_split", shape, split, 0.0, "", one / split);
    const double decode =
        attention_ms_of(dpos, dseq, ctx, 1, 1, true, kc, vc, dt, blocks_per_seq, fn);
    report(name + "_decode_rows_alone", shape, decode, 0.0, "");
    const double prompt =
        attention_ms_of(cpos, cseq, ctx, chunk, chunk, true, kc, vc, dt, blocks_per_seq, fn);
    report(name + "_chunk_alone", shape, prompt, 0.0, "");
  }
}

void bench_prefill(int32_t len) {
  const int32_t KVH = 8, D = 128, bs = 16, H = 16;
  const size_t elems = size_t{1} * len * KVH * D;
  auto kc = alloc(elems * 2), vc = alloc(elems * 2);
  fill_random(kc.data(), elems, true, 1);
  fill_random(vc.data(), elems, true, 2);
  std::vector<int32_t> tables(len / bs);
  std::iota(tables.begin(), tables.end(), 0);
  std::shuffle(tables.begin(), tables.end(), std::mt19937(7));
  auto dt = *upload_vector(tables);
  const double flops = 4.0 * H * D * (double(len) * len / 2);  // causal
  for (const auto& [fn, suffix] : kAttnKernels) {
    // PKV_BENCH_PREFILL_ONLY=mma: the tensor-core kernel alone, both operand modes;
    // =mma_bf16: its bf16-operand mode alone (a profiler's run: the kernels whose
    // suffix begins with _<value>).
    const char* only = std::getenv("PKV_BENCH_PREFILL_ONLY");
    if (only != nullptr && std::string(only) != "1" &&
        std::string(suffix).rfind(std::string("_") + only, 0) != 0)
      continue;
    auto run = [&](const std::string& name) {
      const double ms = attention_ms(1, len, len, true, kc, vc, dt, len / bs, fn);
      report("prefill_attn_paged" + name, "1 x " + std::to_string(len) + " causal", ms,
             flops / (ms * 1e-3) / 1e12, "TFLOP/s");
    };
    // The tensor-core kernel's prefill blocks on wgmma (attention_wgmma.cu: `_wgmma`)
    // where the device has it, then on mma.sync: a same-run A/B.
    const bool mma = std::string(suffix).rfind("_mma", 0) == 0;
    if (mma && attention_wgmma_enabled()) {
      // The automatic choice (the warp-specialized blocks at head_dim 128), then the
      // one-warpgroup blocks and the warp-specialized ones with two and (bf16 operands)
      // three consumer warpgroups forced (attention_wgmma.cu), then mma.sync.
      run(std::string(suffix) + "_wgmma");
      const int was = set_attention_wgmma_consumers(1);
      run(std::string(suffix) + "_wgmma_ws1");
      set_attention_wgmma_consumers(2);
      run(std::string(suffix) + "_wgmma_ws2");
      if (std::string(suffix).find("bf16") != std::string::npos) {
        set_attention_wgmma_consumers(3);
        run(std::string(suffix) + "_wgmma_ws3");
      }
      set_attention_wgmma_consumers(was);
      set_attention_wgmma(false);
      run(suffix);
      set_attention_wgmma(true);
    } else {
      run(suffix);
    }
  }
}

// One GEMM's TFLOP/s (2·M·N·K once). bf16 weights: the automatic choice, then
// (where it differs) the pipelined mma.sync kernel with the wgmma kernel off
// (gemm_large_m.cu, gemm_wgmma.cu) and gemm.cu's 64×64-tile kernel forced — a
// same-run A/B of the large-M kernels.
void bench_gemm(int64_t m, int64_t k, int64_t n, WeightDType dt) {
  auto x = alloc(size_t{4} * m * k), y = alloc(size_t{4} * m * n);
  auto w = alloc((dt == WeightDType::kF32 ? 4 : 2) * size_t{1} * n * k);
  fill_random(x.data(), size_t{1} * m * k, false, 1);
  fill_random(w.data(), size_t{1} * n * k, dt != WeightDType::kF32, 2);
  const std::string shape = std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  auto run = [&](const std::string& name) {
    const double ms =
        median_ms([&] { die_if(gemm(x.as<float>(), m, k, w.data(), dt, n, y.as<float>())); });
    report(name, shape, ms, 2.0 * m * k * n / (ms * 1e-3) / 1e12, "TFLOP/s");
  };
  if (dt != WeightDType::kBF16) return run("gemm_f32w_simt");
  const int rows = gemm_large_m_rows(m, k, n);
  const bool wgmma = gemm_wgmma_enabled();
  run(rows == 0 ? "gemm_bf16w_mma3"
      : wgmma   ? "gemm_bf16w_wgmma3_" + std::to_string(rows)
                : "gemm_bf16w_mma3_pipelined" + std::to_string(rows));
  if (rows != 0) {
    if (wgmma) {
      set_gemm_wgmma(false);
      run("gemm_bf16w_mma3_pipelined" + std::to_string(rows));
      set_gemm_wgmma(true);
    }
    const int saved = set_gemm_large_m_rows(0);
    run("gemm_bf16w_mma3_tile64");
    set_gemm_large_m_rows(saved);
  }
}

// A MoE layer's experts for t tokens, each routed to top_k distinct random experts:
// E experts of [gate; up] (2·inter × hidden, concatenated as the model fuses them)
// and down (hidden × inter), bf16. Three rows: the grouped path of a graph step
// (moe_group, gather_rows, gemm_grouped, silu_mul_halves, gemm_grouped,
// scale_to_slots: all on the device); the eager path's launches with the list
// bounds already on the host (its per-layer copy and sync left out: a lower
// bound); and the GEMMs alone of the padded step that grouped launches replaced
// (one GEMM of all t tokens over every expert's [gate; up], every expert's down
// GEMM over t rows). GB/s counts the chosen experts' weights once.
void bench_moe_experts(int32_t experts, int32_t top_k, int64_t hidden, int64_t inter, int64_t t) {
  static DeviceBuffer gu, down, ptrs;
  static int64_t made = 0;  // experts · hidden · inter of the weights made
  const int64_t per = hidden * inter;
  if (made != experts * per) {
    gu = alloc(size_t{2} * 2 * experts * per);
    down = alloc(size_t{2} * experts * per);
    fill_random(gu.data(), size_t{2} * experts * per, true, 11);
    fill_random(down.data(), size_t{1} * experts * per, true, 12);
    std::vector<const void*> p(2 * static_cast<size_t>(experts));
    for (int32_t e = 0; e < experts; ++e) {
      p[static_cast<size_t>(e)] = gu.as<uint16_t>() + 2 * e * per;
      p[static_cast<size_t>(experts + e)] = down.as<uint16_t>() + e * per;
    }
    ptrs = alloc(p.size() * sizeof(void*));
    die_if(copy_to_device(ptrs.data(), p.data(), p.size() * sizeof(void*)));
    made = experts * per;
  }
  const int64_t tk = t * top_k;
  std::mt19937 g(static_cast<uint32_t>(tk + experts));
  std::vector<int32_t> ids(static_cast<size_t>(tk)), all(static_cast<size_t>(experts));
  for (int64_t i = 0; i < t; ++i) {
    std::iota(all.begin(), all.end(), 0);
    std::shuffle(all.begin(), all.end(), g);
    std::copy_n(all.begin(), top_k, ids.begin() + i * top_k);
  }
  std::vector<int32_t> begin(static_cast<size_t>(experts) + 1, 0);
  for (int32_t e : ids) ++begin[static_cast<size_t>(e) + 1];
  std::partial_sum(begin.begin(), begin.end(), begin.begin());
  int64_t chosen = 0;
  for (int32_t e = 0; e < experts; ++e) chosen += begin[e + 1] > begin[e];
  const int32_t max_bands = moe_group_max_bands(tk, experts);
  auto d_ids = alloc(size_t{4} * tk), d_begin = alloc(size_t{4} * (experts + 1));
  auto d_lists = alloc(size_t{4} * (2 * tk + 1 + 2 * max_bands));
  die_if(copy_to_device(d_ids.data(), ids.data(), ids.size() * 4));
  auto h = alloc(size_t{4} * t * hidden), xin = alloc(size_t{4} * tk * hidden);
  auto gu_out = alloc(size_t{4} * std::max(tk, t * experts) * 2 * inter);
  auto act = alloc(size_t{4} * std::max(tk, t * experts) * inter);
  auto yout = alloc(size_t{4} * std::max(tk, t * experts) * hidden);
  auto results = alloc(size_t{4} * tk * hidden), wts = alloc(size_t{4} * tk);
  fill_random(h.data(), size_t{1} * t * hidden, false, 13);
  fill_random(wts.data(), size_t{1} * tk, false, 14);
  int32_t* rows_d = d_lists.as<int32_t>();
  int32_t* slots_d = rows_d + tk;
  int32_t* bands_d = slots_d + tk;
  const int32_t* listed = d_begin.as<int32_t>() + experts;
  const auto* wp = ptrs.as<const void*>();
  const std::string shape = std::to_string(experts) + "e top" + std::to_string(top_k) + " " +
                            std::to_string(hidden) + "x" + std::to_string(inter) + " t" +
                            std::to_string(t);
  const double gb = 3.0 * 2 * per * chosen / 1e9;
  const double grouped = median_ms([&] {
    die_if(moe_group(d_ids.as<int32_t>(), tk, top_k, experts, d_begin.as<int32_t>(), rows_d,
                     slots_d, bands_d));
    die_if(gather_rows(h.as<float>(), rows_d, tk, hidden, xin.as<float>(), 0, listed));
    die_if(gemm_grouped(xin.as<float>(), t, hidden, wp, WeightDType::kBF16, 2 * inter,
                        d_begin.as<int32_t>(), bands_d, max_bands, gu_out.as<float>()));
    die_if(silu_mul_halves(gu_out.as<float>(), tk, inter, act.as<float>(), 0, listed));
    die_if(gemm_grouped(act.as<float>(), t, inter, wp + experts, WeightDType::kBF16, hidden,
                        d_begin.as<int32_t>(), bands_d, max_bands, yout.as<float>()));
    die_if(scale_to_slots(yout.as<float>(), slots_d, wts.as<float>(), tk, hidden,
                          results.as<float>(), 0, listed));
  });
  report("moe_experts_grouped", shape, grouped, gb / (grouped * 1e-3), "GB/s");
  const double eager = median_ms([&] {
    die_if(moe_group(d_ids.as<int32_t>(), tk, top_k, experts, d_begin.as<int32_t>(), rows_d,
                     slots_d, bands_d));
    for (int32_t e = 0; e < experts; ++e) {
      const int64_t b = begin[static_cast<size_t>(e)], m = begin[static_cast<size_t>(e) + 1] - b;
      if (m == 0) continue;
      die_if(gather_rows(h.as<float>(), rows_d + b, m, hidden, xin.as<float>()));
      die_if(gemm(xin.as<float>(), m, hidden, gu.as<uint16_t>() + 2 * e * per, WeightDType::kBF16,
                  2 * inter, gu_out.as<float>()));
      die_if(silu_mul_halves(gu_out.as<float>(), m, inter, act.as<float>()));
      die_if(gemm(act.as<float>(), m, inter, down.as<uint16_t>() + e * per, WeightDType::kBF16,
                  hidden, yout.as<float>()));
      die_if(scale_to_slots(yout.as<float>(), slots_d + b, wts.as<float>(), m, hidden,
                            results.as<float>()));
    }
  });
  report("moe_experts_per_expert", shape, eager, gb / (eager * 1e-3), "GB/s", eager / grouped);
  const double padded = median_ms([&] {
    die_if(gemm(h.as<float>(), t, hidden, gu.data(), WeightDType::kBF16, experts * 2 * inter,
                gu_out.as<float>()));
    for (int32_t e = 0; e < experts; ++e)
      die_if(gemm(act.as<float>() + e * t * inter, t, inter, down.as<uint16_t>() + e * per,
                  WeightDType::kBF16, hidden, yout.as<float>() + e * t * hidden));
  });
  report("moe_padded_gemms_only", shape, padded, gb / (padded * 1e-3), "GB/s", padded / grouped);
}

// A decode step's GEMMs on the Qwen3-0.6B shape: 28 layers × (q 1024→2048, k and
// v 1024→1024, o 2048→1024, gate and up 1024→3072, down 3072→1024), each layer its
// own weights (840 MB in all, far past the L2), launched back to back as a step
// does, then the tied LM head (1024→151,936, 311 MB) alone. GB/s = weight bytes
// / time (the bandwidth floor is bytes / the copy rate above). Every figure is
// taken for each small-M kernel (set_gemm_small_m: the warp-per-chunk decode
// kernel with main's dispatch (warps8, the baseline) and with 16/24 warps for long
// K, the cluster kernel, the large-M kernel, and the automatic choice) on the
// same weights and input, so the rows are a same-run A/B. Per-GEMM rows: the
// model's four projections as it runs them (q/k/v and gate/up fused by rows:
// 1024→4096, 2048→1024, 1024→6144, 3072→1024), 28 layers' distinct weights in
// one graph, ms per GEMM.
struct StepShape {
  int64_t k, n;
};
const StepShape kLayer[] = {{1024, 2048}, {1024, 1024}, {1024, 1024}, {2048, 1024},
                            {1024, 3072}, {1024, 3072}, {3072, 1024}};
const StepShape kFused[] = {{1024, 4096}, {2048, 1024}, {1024, 6144}, {3072, 1024}};
const char* const kFusedName[] = {"qkv", "o", "gate_up", "down"};
constexpr int kLayers = 28;

// Replays `launch` (all on stream s) as one captured graph; median ms.
double graph_ms(const std::function<void(cudaStream_t)>& launch) {
  cudaStream_t s;
  die_if(cuda_status(cudaStreamCreate(&s), "stream"));
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  die_if(cuda_status(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), "capture"));
  launch(s);
  die_if(cuda_status(cudaStreamEndCapture(s, &graph), "end capture"));
  die_if(cuda_status(cudaGraphInstantiate(&exec, graph, 0), "instantiate"));
  const double ms = median_ms([&] { cudaGraphLaunch(exec, s); }, 10);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(s);
  return ms;
}

void bench_step_gemms(int64_t m) {
  static std::vector<DeviceBuffer> weights, fused;  // made once, reused for every m
  static DeviceBuffer head;
  int64_t bytes = 0;
  for (const auto& sh : kLayer) bytes += sh.k * sh.n * 2;
  if (weights.empty()) {
    for (int l = 0; l < kLayers; ++l)
      for (size_t i = 0; i < std::size(kLayer); ++i) {
        weights.push_back(alloc(size_t{2} * kLayer[i].k * kLayer[i].n));
        fill_random(weights.back().data(), size_t{1} * kLayer[i].k * kLayer[i].n, true,
                    100 + l * 8 + i);
      }
    for (int l = 0; l < kLayers; ++l)
      for (size_t i : {size_t{0}, size_t{2}}) {  // fused q/k/v and gate/up (o, down: above)
        fused.push_back(alloc(size_t{2} * kFused[i].k * kFused[i].n));
        fill_random(fused.back().data(), size_t{1} * kFused[i].k * kFused[i].n, true,
                    500 + l * 8 + i);
      }
    head = alloc(size_t{2} * 1024 * 151936);
    fill_random(head.data(), size_t{1} * 1024 * 151936, true, 99);
  }
  auto fused_w = [&](int l, size_t i) -> const void* {
    return i == 0   ? fused[l * 2].data()
           : i == 2 ? fused[l * 2 + 1].data()
                    : weights[l * std::size(kLayer) + (i == 1 ? 3 : 6)].data();
  };
  auto x = alloc(size_t{4} * m * 3072), y = alloc(size_t{4} * m * 151936);
  fill_random(x.data(), size_t{1} * m * 3072, false, 5);
  const std::string rows = std::to_string(m) + " rows";
  const std::pair<GemmSmallM, const char*> paths[] = {
      {GemmSmallM::kWarpChunks8, "warps8"}, {GemmSmallM::kWarpChunks, "warps"},
      {GemmSmallM::kCluster, "cluster"},    {GemmSmallM::kClusterTile, "tiles"},
      {GemmSmallM::kWgmmaTile, "wgtiles"},  {GemmSmallM::kLargeM, "large"},
      {GemmSmallM::kWgmmaSplit, "wgsplit"}, {GemmSmallM::kAuto, "auto"}};
  const GemmSmallM saved = gemm_small_m();
  for (const auto& [path, pname] : paths) {
    set_gemm_small_m(path);
    const std::string tag = std::string("[") + pname + "]";
    auto step = [&](cudaStream_t s) {
      for (int l = 0; l < kLayers; ++l)
        for (size_t i = 0; i < std::size(kLayer); ++i)
          die_if(gemm(x.as<float>(), m, kLayer[i].k, weights[l * std::size(kLayer) + i].data(),
                      WeightDType::kBF16, kLayer[i].n, y.as<float>(), s));
    };
    if (path == GemmSmallM::kAuto) {
      const double ms = median_ms([&] { step(0); }, 10);
      report("step_gemms_28_layers" + tag, rows + " (196 GEMMs, 840 MB)", ms,
             double(bytes) * kLayers / (ms * 1e-3) / 1e9, "GB/s");
    }
    // The same 196 launches captured in a CUDA graph and replayed (no host launch
    // gaps, as a graph-captured decode step runs them).
    const double gms = graph_ms(step);
    report("step_gemms_graph" + tag, rows + " (196 GEMMs, 840 MB)", gms,
           double(bytes) * kLayers / (gms * 1e-3) / 1e9, "GB/s");
    for (size_t i = 0; i < std::size(kFused); ++i) {
      const double fms = graph_ms([&](cudaStream_t s) {
        for (int l = 0; l < kLayers; ++l)
          die_if(gemm(x.as<float>(), m, kFused[i].k, fused_w(l, i), WeightDType::kBF16, kFused[i].n,
                      y.as<float>(), s));
      });
      report(std::string("gemm_") + kFusedName[i] + tag,
             rows + " x " + std::to_string(kFused[i].k) + " x " + std::to_string(kFused[i].n) +
                 " (per GEMM)",
             fms / kLayers, 2.0 * kFused[i].k * kFused[i].n / (fms * 1e-3 / kLayers) / 1e9, "GB/s");
    }
    const double hms = median_ms([&] {
      die_if(gemm(x.as<float>(), m, 1024, head.data(), WeightDType::kBF16, 151936, y.as<float>()));
    });
    report("lm_head_gemm" + tag, rows + " x 1024 x 151936 (311 MB)", hms,
           2.0 * 1024 * 151936 / (hms * 1e-3) / 1e9, "GB/s");
  }
  set_gemm_small_m(saved);
}

// PKV_BENCH_GEMM_ROWS=64 (a comma list) times the step GEMMs at those row counts only.
bool gemm_rows_wanted(int64_t m) {
  const char* e = std::getenv("PKV_BENCH_GEMM_ROWS");
  if (e == nullptr || *e == '\0') return true;
  const std::string list = std::string(",") + e + ",";
  return list.find("," + std::to_string(m) + ",") != std::string::npos;
}

}  // namespace
}  // namespace pagedkv::backend::cuda

int main(int argc, char** argv) {
  using namespace pagedkv::backend::cuda;
  using pagedkv::backend::WeightDType;
  if (cuda_device_count() == 0) {
    std::printf("no CUDA device: nothing to benchmark\n");
    return 0;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  std::printf("device: %s, %d SMs, %.0f MiB\n", prop.name, prop.multiProcessorCount,
              prop.totalGlobalMem / 1048576.0);
  bench_copy();
  if (std::getenv("PKV_BENCH_MOE_ONLY") != nullptr) {
    // qwen3_moe's 0.6B-shape bench model (8 experts, top 2) and Qwen3-30B-A3B's
    // experts (128, top 8, hidden 2048, moe_intermediate 768).
    for (const auto& [e, k, hd, in] :
         {std::tuple<int32_t, int32_t, int64_t, int64_t>{8, 2, 1024, 768}, {128, 8, 2048, 768}})
      for (int64_t t : {1, 8, 64}) bench_moe_experts(e, k, hd, in, t);
    return 0;
  }
  const bool prefill_only = std::getenv("PKV_BENCH_PREFILL_ONLY") != nullptr;
  const bool attn_only = prefill_only || std::getenv("PKV_BENCH_ATTN_ONLY") != nullptr;
  // PKV_BENCH_PREFILL_ONLY=mixed: the continuous-batching steps alone.
  const bool mixed_only =
      prefill_only && std::string(std::getenv("PKV_BENCH_PREFILL_ONLY")) == "mixed";
  if (prefill_only) {
    if (!mixed_only) {
      bench_prefill(4096);
      bench_prefill(16384);
    }
    bench_mixed_step(512, 63, 4096);
    bench_mixed_step(2048, 64, 8192);
    return 0;
  }
  if (!attn_only)
    for (int64_t m : {1, 8, 16, 32, 48, 64})
      if (gemm_rows_wanted(m)) bench_step_gemms(m);
  if (const char* g = std::getenv("PKV_BENCH_GEMM_ONLY"); g != nullptr) {
    if (std::string(g) == "large") {  // the batch-invariant GEMM's rows (prefill shapes)
      for (int64_t m : {512, 4096}) bench_gemm(m, 1024, 3072, WeightDType::kBF16);
      bench_gemm(4096, 4096, 4096, WeightDType::kBF16);
      // An 8,192-token prefill's projections on the Qwen3-0.6B shape (q/k/v and
      // gate/up fused), and the LM head at 64 rows.
      for (const auto& [k, n] :
           {std::pair<int64_t, int64_t>{1024, 4096}, {2048, 1024}, {1024, 6144}, {3072, 1024}})
        bench_gemm(8192, k, n, WeightDType::kBF16);
      bench_gemm(64, 1024, 151936, WeightDType::kBF16);
    }
    return 0;
  }
  bench_decode(1, 32768);
  bench_decode(32, 8192);
  bench_decode(64, 8192);
  bench_decode(256, 8192);
  bench_decode_shared_prefix(8, 576, 512);
  bench_decode_shared_prefix(32, 576, 512);
  bench_decode_shared_prefix(64, 576, 512);
  bench_decode_shared_prefix(64, 8192, 7680);
  if (const char* a = std::getenv("PKV_BENCH_ATTN_ONLY");
      a != nullptr && std::string(a) == "decode")
    return 0;
  bench_prefill(4096);
  bench_prefill(16384);
  bench_mixed_step(512, 63, 4096);
  bench_mixed_step(2048, 64, 8192);
  for (int64_t m : {1, 16, 64, 512, 4096}) {
    if (attn_only) break;
    bench_gemm(m, 1024, 3072, WeightDType::kBF16);
  }
  if (!attn_only) {
    bench_gemm(4096, 4096, 4096, WeightDType::kBF16);
    bench_gemm(4096, 4096, 4096, WeightDType::kF32);
    bench_gemm(1, 1024, 3072, WeightDType::kF32);
  }
  if (argc > 1) {
    FILE* f = std::fopen(argv[1], "w");
    if (f != nullptr) {
      std::fprintf(f, "name,shape,ms,value,unit,ratio_vs_contiguous\n");
      for (const auto& r : rows)
        std::fprintf(f, "%s,%s,%.5f,%.2f,%s,%.4f\n", r.name.c_str(), r.shape.c_str(), r.ms, r.value,
                     r.unit.c_str(), r.ratio);
      std::fclose(f);
    }
  }
  return 0;
}
