// The matrix-product micro-kernels compiled for one instruction set each
// (matmul_avx2.cc and matmul_avx512.cc, both from matmul_kernel_impl.h; the
// baseline in kernels.cc), behind one plain-C signature so the ISA translation
// units share no inline library code with the rest of the program (an AVX-512
// copy of a std:: inline function must never be the one the linker keeps).
//
// The contract every variant meets (docs/backend.md, "Exactness"): output
// y[m][n] is one dot product over K with 8 lane accumulators; element k goes to
// lane k % 8 by a fused multiply-add (the last partial chunk zero-padded), lanes
// combined by the tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). How rows, columns
// and K are blocked (lanes parked in memory between K blocks are reloaded
// exactly), which ISA runs, and which thread computes a column never change that
// sequence, so every variant, batch size and thread count gives the same bits.
#pragma once

#include <cstdint>

namespace pagedkv::backend::cpu {

// Where the direct nest asks for the next tile's weight lines: not at all, into
// L1 (prefetcht0), or into L2 only (prefetcht2). Speed only, never a value.
enum class WeightPrefetch : int { kNone, kL1, kL2 };

struct MatmulArgs {
  const float* x = nullptr;  // [m][k]
  int64_t m = 0, k = 0;
  const void* w = nullptr;  // [n][k] of wdt
  int wdt = 0;              // 0 f32, 1 bf16, 2 f16 (WeightDType's values)
  int64_t n = 0;
  float* y = nullptr;  // [m][n]
  // The packed nest's K block (a multiple of 8, at most kMatmulMaxKc) and row
  // block (a multiple of 24, at most kMatmulMaxRowBlock). Any values give the
  // same bits; they only move data between cache levels differently.
  int64_t kc = 512, mb = 96;
  // The direct nest prefetches the next tile's weight columns (speed only; the
  // same in the packed nest's packing measured no better on the 16-core host):
  // into L1 for weights that stay cached between calls, into L2 only for weights
  // streamed from L3 or DRAM (see matmul_weight_prefetch in kernels.cc).
  WeightPrefetch prefetch = WeightPrefetch::kL1;
};

// The packed (prefill) loop nest: used from this many rows on (K a multiple of 8);
// K blocks and row blocks as MatmulArgs says, column panels of up to
// kMatmulPanelCols. Its per-thread scratch (64-byte aligned) holds
// kMatmulScratchFloats floats: the lane buffer (kMatmulLaneFloats), then room for
// one K block of a whole panel's widened weights (kMatmulPanelFloats).
inline constexpr int64_t kPackMinRows = 16;
inline constexpr int64_t kMatmulMaxKc = 512;
inline constexpr int64_t kMatmulMaxRowBlock = 192;
inline constexpr int64_t kMatmulPanelCols = 128;
inline constexpr int64_t kMatmulLaneFloats = kMatmulMaxRowBlock * kMatmulPanelCols * 8;
inline constexpr int64_t kMatmulPanelFloats = kMatmulMaxKc * kMatmulPanelCols;
inline constexpr int64_t kMatmulScratchFloats = kMatmulLaneFloats + kMatmulPanelFloats;
// The packed nest's column group (one register tile's columns) per build: a
// thread's column chunk is best a whole number of them, or its last group computes
// empty columns.
inline constexpr int64_t kMatmulGroupColsAvx2 = 3, kMatmulGroupColsAvx512 = 8;

// Computes y[0..m)[nb..ne). scratch: a per-thread buffer of kMatmulScratchFloats
// floats, or null (then only the direct loop nest runs).
void matmul_cols_avx512(const MatmulArgs& a, int64_t nb, int64_t ne, float* scratch);
void matmul_cols_avx2(const MatmulArgs& a, int64_t nb, int64_t ne, float* scratch);
void matmul_cols_generic(const MatmulArgs& a, int64_t nb, int64_t ne);

// A register-only loop of independent FMAs; returns the flops it performed (the
// benchmarks' measured compute peak per core).
double fma_peak_flops_avx512(int64_t iters);
double fma_peak_flops_avx2(int64_t iters);

}  // namespace pagedkv::backend::cpu
