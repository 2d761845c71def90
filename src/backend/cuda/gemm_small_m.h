// The cluster decode GEMMs' launchers (gemm_small_m.cu, gemm_cluster_tile.cu), called
// by gemm() in gemm.cu for bf16 weights and m ≤ 64: x [m][k] f32 (16-byte aligned), w [n][k] bf16,
// y [m][n] f32 — the large-M kernel's bits (docs/backend.md, "CUDA").
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

Status gemm_cluster(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                    float* y, cudaStream_t stream);

// The cluster tile kernel (gemm_cluster_tile.cu): a cluster a 64-row tile of 128
// or 224 columns, k chunks over its 8 (or 16) CTAs. Needs m ≤ 64 and k a multiple
// of 8.
bool gemm_cluster_tile_supports(int64_t m, int64_t k);
// Forces the tile width of launches of at most 8 k chunks (128 or 224; 0: the
// automatic choice), for tests and A/B runs; PAGEDKV_CUDA_GEMM_TILE_COLS sets it
// at start. The same bits whatever the width.
void set_gemm_tile_cols(int cols);
Status gemm_cluster_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                         float* y, cudaStream_t stream);

}  // namespace pagedkv::backend::cuda
