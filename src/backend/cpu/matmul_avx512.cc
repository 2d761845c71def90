// The AVX-512 build of the matmul micro-kernels (matmul_kernel_impl.h): a zmm
// holds two output columns' 8 lanes. Compiled for AVX-512 by the pragma below
// (not by -march, so the binary stays portable) and chosen at run time
// (kernels.cc) only when the CPU has F, DQ, BW and VL.
#pragma GCC push_options
// GCC 12 warns inside its own AVX-512 headers (_mm512_undefined_*, the shuffles):
// false positives.
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC target("avx512f,avx512dq,avx512bw,avx512vl,avx2,fma,f16c")
#include <immintrin.h>

#define PKV_MM_ZMM 1
#define PKV_MM_SUFFIX avx512
#include "backend/cpu/matmul_kernel_impl.h"

#pragma GCC pop_options
