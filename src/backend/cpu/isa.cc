// Which compiled variant the CPU kernels run (isa.h): the CPU's features, read
// once, capped by set_isa_for_testing.
#include "backend/cpu/isa.h"

namespace pagedkv::backend::cpu {
namespace {

Isa g_isa_override = Isa::kAuto;

}  // namespace

void set_isa_for_testing(Isa isa) { g_isa_override = isa; }

bool kernels_use_avx2() {
  static const bool has = __builtin_cpu_supports("avx2");
  if (g_isa_override == Isa::kGeneric) return false;
  return has;
}

bool kernels_use_avx512() {
  return kernels_use_avx2() && g_isa_override == Isa::kAuto && cpu_has_avx512();
}

bool cpu_has_avx2_fma() {
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                          __builtin_cpu_supports("f16c");
  return has;
}
bool cpu_has_avx512() {
  static const bool has = cpu_has_avx2_fma() && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512dq") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
  return has;
}
// The matmul path: the widest the CPU has unless a test forces a narrower one.
Isa matmul_isa() {
  switch (g_isa_override) {
    case Isa::kGeneric:
      return Isa::kGeneric;
    case Isa::kAvx2:
      return cpu_has_avx2_fma() ? Isa::kAvx2 : Isa::kGeneric;
    default:
      return cpu_has_avx512() ? Isa::kAvx512 : cpu_has_avx2_fma() ? Isa::kAvx2 : Isa::kGeneric;
  }
}

const char* isa_name() {
  switch (matmul_isa()) {
    case Isa::kAvx512:
      return "avx512 (F/DQ/BW/VL, 2 columns x 8 lanes per zmm, FMA)";
    case Isa::kAvx2:
      return "avx2+fma (8 lanes per ymm, FMA)";
    default:
      return "generic (scalar fmaf lanes)";
  }
}

}  // namespace pagedkv::backend::cpu
