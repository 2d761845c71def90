// The cluster tile decode GEMM on wgmma (gemm_wgmma_tile.cu): y = x · Wᵀ for x [m][k]
// f32 (16-byte aligned), W [n][k] bf16, y [m][n] f32 with m ≤ 64, with the bits of the
// large-M kernel (gemm.cu) — gemm() runs it for decode steps where the device has it
// (docs/backend.md, "CUDA").
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// Whether gemm_wgmma_tile() runs these rows: the current device runs the sm_90a image,
// gemm_wgmma_enabled() (PAGEDKV_CUDA_GEMM_WGMMA), 1 ≤ m ≤ 64 and k a multiple of 8.
bool gemm_wgmma_tile_supports(int64_t m, int64_t k);

// Forces the tile width of launches of at most 8 k chunks (128 or 256; 0: the automatic
// choice), for tests and A/B runs; PAGEDKV_CUDA_GEMM_WGMMA_TILE_COLS sets it at start.
// The same bits whatever the width.
void set_gemm_wgmma_tile_cols(int cols);

Status gemm_wgmma_tile(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                       float* y, cudaStream_t stream);

}  // namespace pagedkv::backend::cuda
