// The large-M GEMM on Hopper's warpgroup MMA (gemm_wgmma.cu): y = x · Wᵀ for x [m][k]
// f32 (16-byte aligned), W [n][k] bf16, y [m][n] f32, with the bits of gemm.cu's
// 64×64-tile kernel and gemm_large_m.cu's pipelined kernel. gemm_large_m() runs it in
// their place where the device has it (docs/backend.md, "CUDA").
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <type_traits>

#include "backend/cuda/kernels.h"
#include "backend/cuda/x_planes.h"
#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// Whether gemm_large_m() takes the wgmma kernel: the current device is an sm_90 part
// (H100 / H200: wgmma is compiled for sm_90a alone, so nothing else has the kernel)
// and PAGEDKV_CUDA_GEMM_WGMMA (read once) or set_gemm_wgmma did not turn it off.
// Speed only: both kernels give the same bits. set_gemm_wgmma(false) forces the
// mma.sync kernel (tests, A/B runs) and returns the setting it replaced.
bool gemm_wgmma_enabled();
bool set_gemm_wgmma(bool on);

// Calls launch(std::integral_constant<int, P>{}) with P = gemm_planes() (1, 2 or 3): the
// wgmma kernels take the plane count as a template parameter, so that a step's wgmmas are
// issued back to back without a branch between them.
template <typename Launch>
Status with_gemm_planes(Launch&& launch) {
  switch (gemm_planes()) {
    case 1:
      return launch(std::integral_constant<int, 1>{});
    case 2:
      return launch(std::integral_constant<int, 2>{});
    default:
      return launch(std::integral_constant<int, 3>{});
  }
}

// rows: the tile's x rows, 128 or 64 (gemm_large_m_rows; at most 32 rows take a tile of
// 16 or 32 instead of 64). K a multiple of 8.
Status gemm_wgmma(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n, float* y,
                  int rows, cudaStream_t stream);

// The decode GEMM of 1–64 rows on wgmma (gemm_wgmma.cu): the kernel above in a tile
// of 16, 32 or 64 x rows, its k chunks split over a cluster of up to 16 CTAs — CTA z
// takes a contiguous run of them, the first folds its own as it goes, the others keep
// their chunks' partials, and the cluster folds them over distributed shared memory in
// ascending chunk order — so that a layer projection's few 128-column tiles fill the
// SMs. The same bits as gemm_wgmma() (every element the same MMAs and fold). Needs
// gemm_wgmma_enabled() and K a multiple of 8. set_gemm_wgmma_split caps the split (0:
// its own choice, 1: none; PAGEDKV_CUDA_GEMM_WGMMA_SPLIT, read once) and returns the
// setting it replaced.
bool gemm_wgmma_split_supports(int64_t m, int64_t k);
// Whether gemm_wgmma_split() would split this shape's k chunks at all (supported, and a
// split of at least 2 with every cluster resident at once): where it would not, it
// runs the one-CTA kernel, one CTA a 128-column tile, and another kernel is better.
bool gemm_wgmma_split_pays(int64_t m, int64_t k, int64_t n);
// `given`: x's planes, written by x's producer (x_planes.h; from gemm_wgmma_x_planes).
Status gemm_wgmma_split(const float* x, int64_t m, int64_t k, const __nv_bfloat16* w, int64_t n,
                        float* y, cudaStream_t stream, const XPlanes& given = XPlanes{});
// The stream's plane buffer for x of m rows and k columns, where the k-split kernel
// would take x split beforehand (x_planes.h); else none.
XPlanes gemm_wgmma_x_planes(int64_t m, int64_t k, cudaStream_t stream);
int set_gemm_wgmma_split(int split);
// Whether gemm_wgmma_split() (with all three planes) takes x's bf16 planes written
// beforehand — by x's producer (x_planes.h) where given, else by a split kernel of its
// own into a device buffer of the stream's — so that each CTA's steps are copies and
// MMAs alone, not every tile's CTAs splitting the same x again; off, gemm_wgmma_x_planes
// hands out no planes (PAGEDKV_CUDA_GEMM_WGMMA_PRESPLIT, default on, read once). Speed
// only: the same bits. Returns the setting it replaced.
bool set_gemm_wgmma_presplit(bool on);
// Whether gemm_wgmma() with all three planes, in its 64-row tile (33–64 rows: the LM head
// of a decode step at that many requests), takes x split once beforehand into the stream's
// plane buffer (split_planes_kernel) instead of each 128-column tile's CTA splitting the
// same x again (PAGEDKV_CUDA_GEMM_WGMMA_LARGE_PRESPLIT, default on, read once). Speed only: the
// same bits. Returns the setting it replaced.
bool set_gemm_wgmma_large_presplit(bool on);

}  // namespace pagedkv::backend::cuda
