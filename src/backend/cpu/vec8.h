// The 8-float vectors of the CPU kernels (kernels.cc, attention.cc): GCC vector
// extension types, loads and stores, exact bf16/f16 widening, the fixed lane tree
// hsum and the fixed-sequence exponential vexp. Everything has internal linkage and
// is always inlined, so each ISA clone of a kernel (target attribute) compiles it for
// its own width; every lane performs the same IEEE operations whatever the width.
// Include only in the CPU kernels' .cc files.
#pragma once

#include <cstdint>
#include <cstring>
#include <limits>

#include "backend/backend.h"
#include "backend/half.h"

// The 8-float vectors never cross a translation unit boundary, so the ABI note is moot.
#pragma GCC diagnostic ignored "-Wpsabi"

#define PKV_INLINE __attribute__((always_inline)) inline

namespace pagedkv::backend::cpu {
namespace {

typedef float v8f __attribute__((vector_size(32)));
typedef uint16_t v8u16 __attribute__((vector_size(16)));
typedef uint32_t v8u32 __attribute__((vector_size(32)));

PKV_INLINE v8f load8(const float* p) {
  v8f v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
PKV_INLINE void store8(float* p, v8f v) { std::memcpy(p, &v, sizeof(v)); }

// Loads up to 8 elements (zero padding past n).
PKV_INLINE v8f load_partial(const float* p, int64_t n) {
  float t[8] = {0, 0, 0, 0, 0, 0, 0, 0};
  for (int64_t i = 0; i < n; ++i) t[i] = p[i];
  return load8(t);
}

PKV_INLINE v8f widen_bf16(const uint16_t* p) {
  v8u16 h;
  std::memcpy(&h, p, sizeof(h));
  v8u32 u = __builtin_convertvector(h, v8u32) << 16;
  v8f f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

PKV_INLINE float hsum(v8f a) {
  return ((a[0] + a[4]) + (a[2] + a[6])) + ((a[1] + a[5]) + (a[3] + a[7]));
}

typedef int32_t v8i32 __attribute__((vector_size(32)));
PKV_INLINE v8f splat8(float f) { return v8f{f, f, f, f, f, f, f, f}; }

// e^x of 8 floats with a fixed sequence of IEEE operations (no FMA: the build has
// -ffp-contract=off), so every ISA clone, and a scalar call through the same
// function, gives the same bits. Cody-Waite reduction x = n·ln2 + r, |r| <= ln2/2,
// Cephes' degree-7 polynomial for e^r, times 2^n built in the exponent field.
// Within 2 ulp of the correctly rounded result on [-87.3, 88.3]; 0 below (also
// for -inf), +inf above, NaN stays NaN. Softmax and SiLU call it instead of
// std::exp: a vector of eight exps for the price of about one scalar libm call.
PKV_INLINE v8f vexp(v8f x) {
  const v8f hi = splat8(88.3762626647949f), lo = splat8(-87.3365478515625f);
  v8f xc = x > hi ? hi : x;
  xc = xc < lo ? lo : xc;
  const v8f magic = splat8(12582912.0f);  // 1.5·2^23: adding it rounds to an integer
  const v8f t = xc * splat8(1.44269504088896341f) + magic;
  const v8f n = t - magic;
  v8f r = xc - n * splat8(0.693359375f);
  r = r - n * splat8(-2.12194440e-4f);
  v8f p = splat8(1.9875691500e-4f);
  p = p * r + splat8(1.3981999507e-3f);
  p = p * r + splat8(8.3334519073e-3f);
  p = p * r + splat8(4.1665795894e-2f);
  p = p * r + splat8(1.6666665459e-1f);
  p = p * r + splat8(5.0000001201e-1f);
  p = p * (r * r) + r + splat8(1.0f);
  v8i32 ni, ti, mi;
  std::memcpy(&ti, &t, sizeof(ti));
  const v8f mg = magic;
  std::memcpy(&mi, &mg, sizeof(mi));
  ni = ti - mi;  // n as an integer (the low mantissa bits of t)
  const v8i32 sbits = (ni + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &sbits, sizeof(scale));
  v8f y = p * scale;
  y = x < lo ? splat8(0.0f) : y;
  y = x > hi ? splat8(std::numeric_limits<float>::infinity()) : y;
  return x != x ? x : y;
}
PKV_INLINE float vexp1(float x) { return vexp(splat8(x))[0]; }

inline float widen_scalar(const void* w, WeightDType d, int64_t i) {
  switch (d) {
    case WeightDType::kF32:
      return static_cast<const float*>(w)[i];
    case WeightDType::kBF16:
      return bf16_to_f32(static_cast<const uint16_t*>(w)[i]);
    default:
      return f16_to_f32(static_cast<const uint16_t*>(w)[i]);
  }
}

// Exact f16 → f32 of 8 values with integer vector operations (F. Giesen's
// method: normals rebias the exponent, subnormals subtract 2^-14 exactly).
PKV_INLINE v8f widen_f16_vec(const uint16_t* p) {
  v8u16 h;
  std::memcpy(&h, p, sizeof(h));
  v8u32 u = __builtin_convertvector(h, v8u32);
  const v8u32 sign = (u & 0x8000u) << 16;
  v8u32 o = (u & 0x7fffu) << 13;
  const v8u32 exp = o & (0x7c00u << 13);
  o += (127u - 15u) << 23;
  const v8u32 is_inf = reinterpret_cast<v8u32>(exp == (0x7c00u << 13));
  const v8u32 is_den = reinterpret_cast<v8u32>(exp == 0u);
  o += is_inf & ((128u - 16u) << 23);
  o += is_den & (1u << 23);
  v8f f;
  std::memcpy(&f, &o, sizeof(f));
  const float magic_f = 6.103515625e-05f;  // 2^-14
  v8f fd = f - v8f{magic_f, magic_f, magic_f, magic_f, magic_f, magic_f, magic_f, magic_f};
  v8u32 bits, bits_d;
  std::memcpy(&bits, &f, sizeof(bits));
  std::memcpy(&bits_d, &fd, sizeof(bits_d));
  v8u32 r = ((bits_d & is_den) | (bits & ~is_den)) | sign;
  v8f out;
  std::memcpy(&out, &r, sizeof(out));
  return out;
}

}  // namespace
}  // namespace pagedkv::backend::cpu
