// Which compiled variant the CPU kernels run. The matmul has AVX-512, AVX2+FMA
// and baseline builds of one contract (matmul_isa.h); the other kernels, written
// over 8-float vectors (vec8.h), have a baseline build and an AVX2 clone (and
// attention an AVX-512VL clone). Every variant computes the same bits; the choice
// is speed only, and tests force each one to prove it.
#pragma once

namespace pagedkv::backend::cpu {

// kAuto = the widest the CPU has (matmul: AVX-512, else AVX2+FMA, else the
// baseline build; the other kernels: AVX2 or baseline, attention AVX-512VL too).
// kAvx2 caps matmul at AVX2. All give identical bits; the switch exists so tests
// can prove it.
enum class Isa { kAuto, kGeneric, kAvx2, kAvx512 };
void set_isa_for_testing(Isa isa);
// The matmul path taken on this CPU (for --verbose and the benchmarks).
const char* isa_name();

// For the kernels' translation units: the CPU's features (read once) and the
// variant each kind of kernel runs under the testing cap.
bool cpu_has_avx2_fma();
bool cpu_has_avx512();
Isa matmul_isa();
bool kernels_use_avx2();    // the 8-float kernels' AVX2 clone (not under kGeneric)
bool kernels_use_avx512();  // attention's AVX-512VL clone (kAuto only)

}  // namespace pagedkv::backend::cpu
