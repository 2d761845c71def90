// CUDA kernels of the backend: host-side launchers over device pointers.
//
// Exactness (docs/backend.md, "CUDA"): every kernel computes each output element
// with one fixed sequence of operations chosen by compile-time constants and the
// element's own shape (row length, position) — never by the number of rows, the
// grid size or how a prompt was chunked. Hence a row's bits are the same alone or
// batched (1, 2, 3, 8, 64 rows) and a query's attention output is the same in a
// prefill chunk of any size or in a decode step. Results differ from the CPU
// backend only by rounding (different but fixed reduction trees, CUDA's expf etc.).
//
// Every launcher validates its shape arguments (InvalidArgument naming the field)
// and returns the launch status; all run on `stream` (0 = the legacy default).
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

#include "backend/backend.h"
#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// y[i][:] = table[ids[i]][:] widened to f32. Out-of-range ids write NaN rows and
// are reported by a later check (ids are validated on the host by the caller).
Status embedding(const int32_t* ids, int64_t m, const void* table, WeightDType dt, int64_t rows,
                 int64_t d, float* y, cudaStream_t stream = 0);

// y = x / sqrt(mean(x²) + eps) · w (or · (1 + w)); x and y may alias. One block of
// 256 threads per row; the sum of squares is a fixed strided + tree reduction.
Status rms_norm(const float* x, int64_t m, int64_t d, const void* w, WeightDType wdt, float eps,
                bool one_plus_weight, float* y, cudaStream_t stream = 0);

// In place on x [m][num_heads][head_dim] (half-split "rotate_half" layout, as the CPU).
Status rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
            const RopeParams& p, cudaStream_t stream = 0);

Status silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t stream = 0);
Status gelu_tanh_mul(const float* gate, const float* up, int64_t n, float* out,
                     cudaStream_t stream = 0);
// x[i] += y[i]
Status add(float* x, const float* y, int64_t n, cudaStream_t stream = 0);
// In-place softmax of each row of x [m][n].
Status softmax(float* x, int64_t m, int64_t n, cudaStream_t stream = 0);
// Top-k MoE routing, the CPU's contract (backend.h). num_experts ≤ 1024, k ≤ num_experts.
Status topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k,
                  bool softmax_first, bool normalize, int32_t* ids, float* weights,
                  cudaStream_t stream = 0);
// Greedy sampling: keys[i] = row i of logits [m][n]'s argmax as one 64-bit key (NaN
// skipped, ties → lower index) — exactly the CPU sampler's argmax once decoded by
// argmax_key_id (0 when the row is all NaN). keys must hold zeros (the caller clears
// them; the kernel folds with atomicMax). nan_flag (null: not asked): set to 1 when
// the m rows hold a NaN, as flag_nan over them would (the caller zeroes it first), in
// the same pass over the logits.
Status argmax_keys(const float* logits, int64_t m, int64_t n, unsigned long long* keys,
                   int32_t* nan_flag = nullptr, cudaStream_t stream = 0);
inline int32_t argmax_key_id(unsigned long long key) {
  return key == 0 ? 0 : static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
}

// y[m][n] = Σ_k x[m][k] · w[n][k]  (x f32, w bf16/f16/f32 [n][k], fp32 accumulation).
// bf16 weights run on tensor cores (mma.sync m16n8k16): x is split exactly-enough
// into three bf16 terms (hi + mid + lo, 24 mantissa bits) so the product keeps f32
// accuracy; each output element accumulates k in 16-wide steps in a fixed order.
// m ≤ 64 runs a small-M kernel (gemm_small_m() below) that issues the identical MMA sequence per
// element. f32/f16 weights use a SIMT kernel (one FMA chain per
// element, k ascending). Either way the result of a row does not depend on m.
Status gemm(const float* x, int64_t m, int64_t k, const void* w, WeightDType wdt, int64_t n,
            float* y, cudaStream_t stream = 0);

// The experts' GEMMs of a MoE step in one launch, their rows listed in device memory
// (no host sync: a CUDA graph can hold it). Groups g own the rows [bounds[g],
// bounds[g + 1]) of x ([rows][k] f32, 16-byte aligned) and y ([rows][n] f32) and
// the weight w[g] ([n][k], wdt; w a device array of device pointers, each 16-byte
// aligned). The work comes as bands of at most kGroupedBandRows rows of one group:
// bands[0] = their count (≤ max_bands), then for band i bands[1 + 2i] = its group
// and bands[2 + 2i] = its first row (moe_group writes such a list). max_rows bounds
// the rows of any group (a MoE step's tokens; ≤ 8 picks a smaller tile). Each row's
// bits are those gemm() gives x's rows of that group alone (every kernel is
// row-invariant; the bf16 ones all compute an element alike); rows of y outside
// the listed bands are not written.
inline constexpr int32_t kGroupedBandRows = 16;
Status gemm_grouped(const float* x, int64_t max_rows, int64_t k, const void* const* w,
                    WeightDType wdt, int64_t n, const int32_t* bounds, const int32_t* bands,
                    int32_t max_bands, float* y, cudaStream_t stream = 0);

// How many of x's three bf16 planes (hi, mid, lo) every bf16 GEMM kernel multiplies
// (PAGEDKV_CUDA_GEMM_PLANES = 1, 2 or 3, default 3; read once). 3 keeps x to f32
// accuracy (the default, checked against the HF fixtures); 1 (hi only: x rounded to
// bf16, as most engines compute) and 2 do a third and two thirds of the MMAs. Every
// kernel takes the same count, so a row's bits still do not depend on the rows
// beside it or the kernel; but they differ between counts, so the model names the
// count in its kv_numerics() (the cold tier's fingerprint).
int gemm_planes();

// Which bf16 kernel gemm() runs for m ≤ 64 — speed only: every choice gives the same
// bits (tests/backend/cuda_ops_test.cc compares them). kAuto is the measured choice
// (docs/performance.md); kWarpChunks is the warp-per-k-chunk decode kernel,
// kWarpChunks8 the same with main's dispatch before the cluster kernel (8 warps a
// block whatever K: the A/B baseline), kCluster the cluster kernel
// (gemm_small_m.cu), kClusterTile the cluster tile kernel (gemm_cluster_tile.cu: a
// 64 × 128 tile a cluster; the warp kernel where it does not apply), kWgmmaTile the
// same structure on wgmma (gemm_wgmma_tile.cu; sm_90 only, else kClusterTile), kLargeM the
// large-M kernels (gemm_large_m.cu's pipelined tiles where they fill the GPU, else
// gemm.cu's 64×64 tiles), kWgmmaSplit the large-M wgmma kernel's tile with its k chunks
// split over a cluster (gemm_wgmma.h; sm_90 only, else kWgmmaTile). Process-wide; the
// first call reads PAGEDKV_CUDA_GEMM_SMALL_M
// (auto | warps | warps8 | cluster | tiles | wgtiles | large | wgsplit);
// set_gemm_small_m overrides it (tests, the kernel bench's A/B).
enum class GemmSmallM : uint8_t {
  kAuto = 0,
  kWarpChunks = 1,
  kCluster = 2,
  kLargeM = 3,
  kWarpChunks8 = 4,
  kClusterTile = 5,
  kWgmmaTile = 6,
  kWgmmaSplit = 7
};
void set_gemm_small_m(GemmSmallM path);
GemmSmallM gemm_small_m();

// ---- Attention ------------------------------------------------------------------

enum class KvType : uint8_t { kF32 = 0, kBF16 = 1 };

// How a (sequence, position) maps to a K/V row of [num_kv_heads][head_dim] elements.
enum class KvLayout : uint8_t {
  // The paged pool: row = cache + (block_tables[seq][pos / block_size] · block_size +
  // pos % block_size) · row_elems.
  kBlockTable = 0,
  // A contiguous per-sequence cache: row = cache + (seq · seq_capacity + pos) · row_elems.
  kContiguous = 1,
  // Backend::attention's tile pointers (one sequence): row = tiles[pos / block_size] +
  // (pos % block_size) · row_elems; the pointer arrays live in device memory.
  kTilePointers = 2,
};

// Keys are split into partitions of kAttnPartition absolute positions anchored at
// position 0: query at position p uses partitions 0..p/kAttnPartition whatever the
// batch or chunk, and combines them in ascending order.
inline constexpr int32_t kAttnPartition = 256;

// The tensor-core kernel's operands (paged_attention_mma; the other kernels ignore
// it). kSplit: q (f32) as three bf16 planes (hi, mid, lo: 24 bits) and the softmax
// weights as two (hi, lo), five MMAs per step pair, within the CPU tolerance of the
// f32 kernels. kBf16: q and the weights rounded to bf16, one MMA each (what
// FlashAttention and torch SDPA compute in bf16), 2.5× fewer MMAs and a third of
// the q tile's shared memory. Each is exact within itself (decode == prefill ==
// chunked, batched == alone, paged == flat); their bits differ, so a model uses one
// for every launch and names it in its kv_numerics().
enum class MmaOperands { kSplit, kBf16 };

struct PagedAttentionParams {
  const float* q = nullptr;  // [num_tokens][num_heads][head_dim]
  float* out = nullptr;      // [num_tokens][num_heads][head_dim]
  int32_t num_tokens = 0, num_heads = 0, num_kv_heads = 0, head_dim = 0;
  const int32_t* positions = nullptr;  // [num_tokens] absolute positions (device)
  const int32_t* token_seq = nullptr;  // [num_tokens] sequence index (device; null = all 0)
  int32_t max_position = 0;            // ≥ every positions[i] (host-known; sizes the grid)
  float scale = 1.0f;
  int32_t sliding_window = 0;  // 0 = unlimited
  KvType kv_type = KvType::kBF16;
  KvLayout layout = KvLayout::kBlockTable;
  const void* k_cache = nullptr;  // kBlockTable / kContiguous base (this layer)
  const void* v_cache = nullptr;
  int32_t block_size = 16;                // tokens per block / tile
  const int32_t* block_tables = nullptr;  // [num_seqs][max_blocks_per_seq] (device)
  int32_t max_blocks_per_seq = 0;
  int64_t seq_capacity = 0;              // kContiguous: tokens per sequence
  const void* const* k_tiles = nullptr;  // kTilePointers (device array)
  const void* const* v_tiles = nullptr;
  float* workspace = nullptr;  // attention_workspace_floats(...) floats (device)
  // The most tokens of one sequence in this launch (1: a decode batch; 0: unknown).
  // A launch-shape hint only: no kernel's bits depend on it.
  int32_t max_query_len = 0;
  // The fewest tokens of one sequence in this launch (0: unknown). A launch-shape hint
  // as above: the prefill launch runs its warp-specialized blocks (large tiles) only
  // where every sequence brings a prompt's worth of tokens, not decode rows riding
  // along (attention_wgmma.h).
  int32_t min_query_len = 0;
  // A mixed step's decode rows (a launch-shape hint as above): when 0 < decode_tokens
  // < num_tokens, the first decode_tokens tokens are sequences of one token each, and
  // max_query_len / min_query_len describe the sequences after them. The tensor-core
  // kernel runs those rows with its decode blocks (a block a row and partition) beside
  // a prefill launch for the rest, instead of a prefill tile a row walking the row's
  // whole context. Any other value: one launch for all tokens.
  int32_t decode_tokens = 0;
  // Partitions [0, packed_partitions) of a decode launch (kAttnPartition keys each)
  // where consecutive rows read the same KV blocks (requests behind one cached
  // prefix: the partitions it fills): the tensor-core kernel runs those rows there
  // together (its packed blocks), the other partitions a block a token. A
  // launch-shape hint only, as above.
  int32_t packed_partitions = 0;
  // The tensor-core kernel's operands (MmaOperands above): numerics, not a hint.
  MmaOperands mma_operands = MmaOperands::kSplit;
  // An ordering promise from the caller (false is always safe): every key a token
  // reads below its own position was written before the step's first kernel (by
  // earlier steps), and the step's kernels write no key a token reads except its own
  // (a decode step: the K/V write before attention stores each row's new token).
  // The tensor-core decode blocks that wait for the kernel before (launch.cuh) then
  // copy those keys before the wait, overlapping that kernel; the bits are the same.
  bool keys_below_position_settled = false;
};

// Floats of workspace paged_attention needs.
size_t attention_workspace_floats(int32_t num_tokens, int32_t num_heads, int32_t head_dim,
                                  int32_t max_position);

// Causal attention of each query token over keys max(0, p - window + 1) .. p of its
// sequence (the CPU's AttentionArgs contract, any layout). head_dim ∈ {16, 32, 64, 128, 256},
// num_heads / num_kv_heads ≤ 16 (GQA: one block serves a KV head's query group).
Status paged_attention(const PagedAttentionParams& p, cudaStream_t stream = 0);

// The same contract with another fixed order (attention_warp.cu: coalesced 16-byte
// K/V loads, a warp per 32-key sub-partition, per-warp softmax rescaled in the
// block's fold). Decode == prefill == chunked, batched == alone and paged == flat
// hold within it; its bits differ from paged_attention's, so a caller must use one
// of the two for every launch. Not the engine's kernel yet (bench_cuda_kernels'
// A/B rows; docs/backend.md).
Status paged_attention_warp(const PagedAttentionParams& p, cudaStream_t stream = 0);

// The same contract on tensor cores (attention_mma.cu: q and the softmax weights
// split into bf16 planes or rounded to bf16, p.mma_operands; mma.sync, 32-key
// online-softmax chunks inside the 256-key partitions, attention.cu's combine).
// Decode == prefill == chunked, batched == alone and paged == flat hold within it;
// its bits differ from the other two kernels'. Needs paged_attention_mma_supports():
// bf16 KV, head_dim 16–128, 1, 2, 4, 8 or 16 query heads per KV head, block-table
// or contiguous layout.
Status paged_attention_mma(const PagedAttentionParams& p, cudaStream_t stream = 0);
// paged_attention_mma with its decode launches (one token a row) forced into one
// launch shape, whatever their size: for tests (every shape gives the same bits).
// kWide and kWideTwoRounds are the eight-warp kernel (head_dim 64 and 128; 16 and
// 32 take the one-warp blocks with every chunk loading at once), kOneWarp the
// one-warp blocks with one K/V buffer, kPacked the one-warp blocks that run the
// consecutive decode rows sharing a partition's KV blocks together (a block table:
// a contiguous launch takes kOneWarp), kPackedWide and kPackedWideTwoRounds the
// eight-warp kernel running those packed rows (head_dim 64 and 128; 16 and 32 take
// kPacked); kAuto is paged_attention_mma's choice.
enum class MmaDecodeShape {
  kAuto,
  kOneWarp,
  kWide,
  kWideTwoRounds,
  kPacked,
  kPackedWide,
  kPackedWideTwoRounds
};
Status paged_attention_mma_with_decode_shape(const PagedAttentionParams& p, MmaDecodeShape shape,
                                             cudaStream_t stream = 0);
// The runs the packed decode blocks form for partition `part` of a decode launch
// (a test hook): runs[2t] = one past the last token of the run token t starts, or −1
// when t does not start one; runs[2t + 1] = the sequence whose block table the run
// loads through (−1 likewise). `runs`: 2 · num_tokens int32 in device memory.
Status packed_decode_runs(const PagedAttentionParams& p, int32_t part, int32_t* runs,
                          cudaStream_t stream = 0);
bool paged_attention_mma_supports(int32_t head_dim, int32_t num_heads, int32_t num_kv_heads,
                                  KvType kv_type);
// The partition combine of the thread-per-key and tensor-core kernels: folds
// p.workspace (attention_partitions.cuh; `parts` partitions a row) into p.out
// (head_dim 16 … 256). The kernels launch it themselves; public for tests.
Status combine_partitions(const PagedAttentionParams& p, int32_t parts, cudaStream_t stream = 0);
// The same fold in its reference form: every thread of a (token, head) block runs
// the whole fold (a test hook; combine_partitions must give its bits).
Status combine_partitions_serial(const PagedAttentionParams& p, int32_t parts,
                                 cudaStream_t stream = 0);

// ---- Step plumbing for a device-resident forward (src/model/cuda/) ------------

// Where a step's K/V rows go: the same addressing as PagedAttentionParams (block
// table of the token's sequence, or a contiguous per-sequence cache).
struct KvWriteParams {
  const float* k = nullptr;  // [num_tokens][num_kv_heads][head_dim] f32 (device)
  const float* v = nullptr;
  int32_t num_tokens = 0, num_kv_heads = 0, head_dim = 0;
  const int32_t* positions = nullptr;  // [num_tokens] (device)
  const int32_t* token_seq = nullptr;  // [num_tokens] (device; null = all 0)
  KvType kv_type = KvType::kBF16;
  KvLayout layout = KvLayout::kBlockTable;  // kBlockTable or kContiguous
  void* k_cache = nullptr;
  void* v_cache = nullptr;
  int32_t block_size = 16;
  const int32_t* block_tables = nullptr;  // [num_seqs][max_blocks_per_seq] (device)
  int32_t max_blocks_per_seq = 0;
  int64_t seq_capacity = 0;
};

// Stores every token's K and V row at its slot, in the cache's element type
// (bf16: round to nearest even, as the CPU's f32_to_bf16).
Status write_kv(const KvWriteParams& p, cudaStream_t stream = 0);

// y[i][:] = x[rows[i]][:] for i < m (x, y [.][d] f32; rows device int32). With
// live_rows (device), only the rows i < *live_rows, a count a kernel before wrote
// (moe_group's listed slots); the others are left alone. The same for
// scale_to_slots and silu_mul_halves.
Status gather_rows(const float* x, const int32_t* rows, int64_t m, int64_t d, float* y,
                   cudaStream_t stream = 0, const int32_t* live_rows = nullptr);

// *flag = 1 when any of x[0..n) is NaN (else *flag is left alone: clear it first).
Status flag_nan(const float* x, int64_t n, int32_t* flag, cudaStream_t stream = 0);

// ---- MoE plumbing (the CPU's moe_experts order, layers.cc) ----

// results[slots[i]][:] = y[i][:] · weights[slots[i]] for i < m (y [m][d]; results
// and weights indexed by slot = token · top_k + rank; slots device int32).
Status scale_to_slots(const float* y, const int32_t* slots, const float* weights, int64_t m,
                      int64_t d, float* results, cudaStream_t stream = 0,
                      const int32_t* live_rows = nullptr);

// out[t][:] = results[t][0][:] + results[t][1][:] + … (ranks added in order onto
// rank 0), results [t][top_k][d].
Status sum_ranks(const float* results, int64_t t, int32_t top_k, int64_t d, float* out,
                 cudaStream_t stream = 0);

// ---- Fused projections (fused_step.cu; src/model/cuda's concatenated weights) ----

// x [m][qd + 2·kd] (one GEMM over the row-concatenated q, k, v weights) split into
// q [m][qd], k [m][kd], v [m][kd]: copies.
Status split_qkv(const float* x, int64_t m, int64_t qd, int64_t kd, float* q, float* k, float* v,
                 cudaStream_t stream = 0);

// out[t][i] = silu(gu[t][i]) · gu[t][inter + i] (gu [m][2·inter]: one GEMM over the
// row-concatenated gate and up weights): silu_mul's expression element for element.
Status silu_mul_halves(const float* gu, int64_t m, int64_t inter, float* out,
                       cudaStream_t stream = 0, const int32_t* live_rows = nullptr);

// x += y, then out = rms_norm(x) · w (x, y, out [m][d]): add's and rms_norm's
// operations element for element, in one launch. w is read before the wait for the
// previous kernel (programmatic launch): it must not be written by a kernel of
// the stream (model weights are uploaded before any step).
Status add_rms_norm(float* x, const float* y, int64_t m, int64_t d, const void* w, WeightDType wdt,
                    float eps, float* out, cudaStream_t stream = 0);

// One pass over the fused q/k/v GEMM's output qkv [num_tokens][(num_heads + 2 ·
// kv.num_kv_heads) · kv.head_dim]: per q and k head rms_norm (q_norm / k_norm
// weights, eps) then RoPE at the token's position, q into q [num_tokens][num_heads ·
// head_dim], k and v rows into the cache as write_kv (kv: addressing, types; its k
// and v fields are unused). The operations of rms_norm, rope and write_kv element
// for element (head_dim ≤ 256). The norm weights and kv's positions, sequence ids
// and block tables are read before the programmatic-launch wait (launch.cuh): no
// kernel on the stream may write them.
struct QkvPrepParams {
  const float* qkv = nullptr;
  float* q = nullptr;
  int32_t num_tokens = 0, num_heads = 0;
  const void* q_norm = nullptr;
  const void* k_norm = nullptr;
  WeightDType norm_dtype = WeightDType::kF32;
  float eps = 1e-6f;
  KvWriteParams kv;
  // Let the next kernel launch at entry, before this one's wait (launch.cuh's rule
  // bent): that kernel's blocks may then run while the kernel before this one
  // (the q/k/v GEMM) still does, so before its own wait it may read only what no
  // kernel of the step writes (the decode attention with keys_below_position_settled:
  // the step's metadata and earlier steps' keys). Its wait still covers this kernel,
  // and this kernel's completion the GEMM's. Off: the launch after the wait.
  bool trigger_next_at_entry = false;
};
Status qkv_norm_rope_write(const QkvPrepParams& p, const RopeParams& rope, cudaStream_t stream = 0);

}  // namespace pagedkv::backend::cuda
