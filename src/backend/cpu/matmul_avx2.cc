// The AVX2 + FMA + F16C build of the matmul micro-kernels
// (matmul_kernel_impl.h): a ymm holds one output column's 8 lanes. Chosen at run
// time (kernels.cc) only when the CPU has these extensions; compiled for them by
// the pragma below, not by -march, so the binary stays portable.
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#define PKV_MM_ZMM 0
#define PKV_MM_SUFFIX avx2
#include "backend/cpu/matmul_kernel_impl.h"

#pragma GCC pop_options
