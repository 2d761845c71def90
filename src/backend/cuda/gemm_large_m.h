// The large-M GEMM's launcher (gemm_large_m.cu), called by gemm() in gemm.cu for bf16
// weights past the small-M kernels: x [m][k] f32 (16-byte aligned), w [n][k] bf16, y
// [m][n] f32 — the bits of gemm.cu's 64×64-tile kernel (docs/backend.md, "CUDA"). It
// runs the wgmma kernel (gemm_wgmma.cu) where the device has it, else the pipelined
// mma.sync kernel, in the tile rows gemm_large_m_rows chooses.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>

#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// The tile rows the pipelined kernel would run (128 or 64), or 0 where gemm() runs
// the 64×64 kernel instead: k not a multiple of 8, or too few tiles to fill the
// GPU. PAGEDKV_CUDA_GEMM_LARGE_ROWS (read once) or set_gemm_large_m_rows forces 0,
// 64 or 128 (tests and A/B runs; -1: the automatic choice). Speed only.
// set_gemm_large_m_rows returns the setting it replaced, for the caller to restore.
int gemm_large_m_rows(int64_t m, int64_t k, int64_t n);
int set_gemm_large_m_rows(int rows);

Status gemm_large_m(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                    float* y, cudaStream_t stream);

}  // namespace pagedkv::backend::cuda
