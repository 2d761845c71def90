// What decides the bits of the CUDA kernels' arithmetic, besides the model's own
// choices (its attention kernel and GEMM plane count, named by the model).
//
// Every kernel has a fixed reduction order, so a build on a given GPU computes the
// same bits run after run; but a kernel change that reorders a sum, another nvcc
// (it contracts multiply-adds and schedules differently), or another architecture
// (other SASS, or PTX compiled by the driver) may compute other bits. The cold
// tier keys its objects on this identity (Model::kv_numerics), so K/V written by
// one of these is never restored into a run of another: a restored prefix always
// carries the bits this build would have computed.
//
// kKernelNumericsVersion is bumped by every change that alters any kernel's bits.
// tests/engine/cuda_engine_test.cc (RecordedBitsOfThisNumerics) holds a digest of
// each model case's logits per identity, and fails on the GPU it was recorded on
// when the bits change and the version does not.
#pragma once

#include <string>

namespace pagedkv::backend::cuda {

// v2 (2026-12-06): the tensor-core attention's softmax in base 2 (ex2.approx; see
// attention_mma_common.cuh).
inline constexpr int kKernelNumericsVersion = 2;

// "kernels v2, nvcc 13.0, sm_90": the version above, the nvcc that compiled the
// device code and the compute capability of CUDA device `device` ("sm_?" when it
// cannot be read).
std::string kernel_numerics_identity(int device);

}  // namespace pagedkv::backend::cuda
