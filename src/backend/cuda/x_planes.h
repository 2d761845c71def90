// x's bf16 planes written by the kernel that produces x, for the k-split decode GEMM.
//
// The k-split wgmma kernel (gemm_wgmma.cu) multiplies x's three bf16 planes (hi, mid, lo:
// x to f32 accuracy). Split inside the GEMM, every CTA of every output tile splits the
// same x again in its step loop; split by a kernel of its own before the GEMM, the
// GEMM's steps are copies and MMAs alone but the extra kernel's latency costs more than
// it saves (docs/performance.md, "x split beforehand"). So the kernel that produces x —
// the residual add + RMSNorm before the q/k/v and gate/up projections, the SwiGLU before
// down — writes the planes beside x (gemm_common.cuh's store_x_planes_pairs: the same
// bits as the split), and the GEMM reads them with the TMA. A producer writes rows < m
// and k < K only (gemm_wgmma_x_planes hands out planes only for K a multiple of 32): the
// rows past m in the last group of 8 keep what the buffer held, and feed only output
// rows the GEMM does not store.
//
// The model asks gemm_x_planes() before launching the producer: a non-empty XPlanes
// means gemm() would run that shape on the k-split kernel and the stream's plane buffer
// is ready for it; it passes that to the producer and then to gemm_on_planes(). Empty
// (other shapes, PAGEDKV_CUDA_GEMM_WGMMA_PRESPLIT=0, no sm_90a), both do what
// add_rms_norm / silu_mul_halves / gemm do. Speed only: the bits are gemm()'s.
//
// The stream has one plane buffer, and a gemm() given no planes that runs the k-split
// kernel splits its own x into that same buffer (split_planes_kernel). So between a
// producer writing the planes and the gemm_on_planes() that reads them, nothing on the
// stream may run such a gemm(): it would overwrite them. The CUDA model launches the
// producer and its GEMM back to back; a test that computes a reference GEMM must do so
// before the producer (a test written the other way read another x's planes: 2026-12-07,
// docs/performance.md, "The SwiGLU and the q/k/v prep in the k-split GEMM's fold").
// x_planes.cc enforces this on the host: each hand-out and each such split takes a new
// ticket of the buffer, the producer fails unless its planes hold the newest, and
// gemm_on_planes fails unless their producer wrote them and no ticket was taken since
// (a failed_precondition that says which).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "backend/backend.h"
#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

// A stream's plane buffer laid out for x of `groups` · 8 rows (bf16, gemm_common.cuh's
// x_planes_offset layout); data null: none.
struct XPlanes {
  uint16_t* data = nullptr;
  int32_t groups = 0;
  uint64_t ticket = 0;  // the buffer's hand-out these planes are (x_planes.cc)
  explicit operator bool() const { return data != nullptr; }
};

// The planes gemm(x, m, k, w, wdt, n) would read if x's producer wrote them, or none.
XPlanes gemm_x_planes(int64_t m, int64_t k, int64_t n, WeightDType wdt, cudaStream_t stream);

// gemm() on x whose producer wrote `planes` (gemm_x_planes of the same shape); with none,
// gemm() itself.
Status gemm_on_planes(const float* x, const XPlanes& planes, int64_t m, int64_t k, const void* w,
                      WeightDType wdt, int64_t n, float* y, cudaStream_t stream);

// The stream's plane buffer changes hands (a hand-out of planes, or a plane-less
// k-split gemm() splitting its x into it): the new ticket.
uint64_t take_x_planes_ticket(cudaStream_t stream);
// x's producer is about to write `planes`: ok while they hold the buffer's newest ticket
// (and then noted as written), else a failed_precondition naming `producer`. None: ok.
Status note_x_planes_written(const XPlanes& planes, cudaStream_t stream, const char* producer);
// A GEMM is about to read `planes`: ok if their producer wrote them and no ticket was
// taken since, else a failed_precondition. None: ok.
Status check_x_planes_readable(const XPlanes& planes, cudaStream_t stream);

// kernels.h's add_rms_norm and silu_mul_halves, also writing out's planes where given.
Status add_rms_norm(float* x, const float* y, int64_t m, int64_t d, const void* w, WeightDType wdt,
                    float eps, float* out, cudaStream_t stream, const XPlanes& planes);
Status silu_mul_halves(const float* gu, int64_t m, int64_t inter, float* out, cudaStream_t stream,
                       const XPlanes& planes);

}  // namespace pagedkv::backend::cuda
