// What decides the bits of the CPU kernels' arithmetic (Backend::numerics).
//
// The kernels' results do not depend on the ISA path, the thread count or the
// batch (kernels.h), but they do on the kernels themselves — a change that
// reorders a sum or replaces an approximation computes other bits — and on the C
// library's math functions that some of them call (RoPE's powf, cosf and sinf;
// softmax and MoE routing's expf).
// The cold tier keys its objects on this identity, so K/V computed by another
// build or another C library are a miss, never a restore of other bits.
//
// kCpuKernelNumericsVersion is bumped by every change that alters the bits a CPU
// family computes: a kernel's or a model layer's host code (model/layers.cc).
// tests/engine/engine_cold_test.cc (CpuNumericsTest) holds a digest of the
// logits of the families the cold tier persists, per identity, and fails where it
// was recorded when the bits change and the version does not.
#pragma once

#include <string>

namespace pagedkv::backend::cpu {

inline constexpr int kCpuKernelNumericsVersion = 1;

// "cpu kernels v1, glibc 2.36 (libm fma)": the version above, the C library's
// name and version as the process sees them at run time ("libc unknown" where it
// cannot be told) and, on x86-64, which variant of its math functions glibc
// picks on this CPU.
std::string cpu_numerics_identity();

}  // namespace pagedkv::backend::cpu
