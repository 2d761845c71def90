// cpu_numerics_identity (see the header).
#include "backend/cpu/numerics.h"

#if defined(__GLIBC__)
#include <gnu/libc-version.h>
#endif

namespace pagedkv::backend::cpu {

std::string cpu_numerics_identity() {
  std::string libc = "libc unknown";
#if defined(__GLIBC__)
  libc = std::string("glibc ") + gnu_get_libc_version();
#if defined(__x86_64__)
  // glibc's x86-64 expf/powf/sinf/cosf pick a variant at load time: the FMA one
  // where FMA and AVX2 are usable, else FMA4, else SSE2 (sysdeps/x86_64/fpu/
  // multiarch); the variants may round differently.
  __builtin_cpu_init();
  if (__builtin_cpu_supports("fma") && __builtin_cpu_supports("avx2"))
    libc += " (libm fma)";
  else if (__builtin_cpu_supports("fma4"))
    libc += " (libm fma4)";
  else
    libc += " (libm sse2)";
#endif
#endif
  return "cpu kernels v" + std::to_string(kCpuKernelNumericsVersion) + ", " + libc;
}

}  // namespace pagedkv::backend::cpu
