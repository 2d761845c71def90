// RoPE's per-launch table and its rotation, shared by every kernel that rotates q or k
// (rope_kernel in elementwise.cu, the fused q/k/v prep in fused_step.cu), so that they
// rotate with the same bits. The inverse
// frequencies are computed on the host exactly as the CPU backend does (1 / powf(theta,
// 2i / base), then / inv_freq_divisor) and passed by value, so the angles are the CPU's
// bits and only cosf / sinf rounding differs. Pair i is (i, i + span): span = half
// (default) or head_dim / 2 (proportional).
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <string>

#include "backend/backend.h"
#include "pagedkv/status.h"

namespace pagedkv::backend::cuda {

constexpr int kMaxRopeHalf = 256;

struct RopeTable {
  float inv_freq[kMaxRopeHalf];
  int32_t half = 0;  // rotated pairs of a head
  int32_t span = 0;  // pair i is (i, i + span)
  float position_scale = 1.0f;
};

// The table for heads of head_dim, or an invalid-argument error that names `who`.
inline Status make_rope_table(const RopeParams& p, int32_t head_dim, const std::string& who,
                              RopeTable* table) {
  const int32_t rot = p.rotary_dim > 0 ? p.rotary_dim : head_dim;
  if (rot > head_dim || rot % 2 != 0 || rot / 2 > kMaxRopeHalf)
    return invalid_argument(who + ": rotary_dim " + std::to_string(rot) +
                            " must be even, ≤ head_dim " + std::to_string(head_dim) + " and ≤ " +
                            std::to_string(2 * kMaxRopeHalf));
  const bool proportional = p.kind == RopeKind::kProportional;
  table->half = rot / 2;
  table->span = proportional ? head_dim / 2 : table->half;
  table->position_scale = p.position_scale;
  const int32_t base = proportional ? head_dim : rot;
  for (int32_t i = 0; i < kMaxRopeHalf; ++i) table->inv_freq[i] = 0.0f;
  for (int32_t i = 0; i < table->half; ++i) {
    const float exponent = static_cast<float>(2 * i) / static_cast<float>(base);
    table->inv_freq[i] = 1.0f / std::pow(p.theta, exponent);
    if (p.inv_freq_divisor != 1.0f) table->inv_freq[i] = table->inv_freq[i] / p.inv_freq_divisor;
  }
  return ok_status();
}

// A token's position as the rotation takes it (divided by a scale other than 1).
__device__ __forceinline__ float rope_position(int32_t position, float scale) {
  float pos = static_cast<float>(position);
  if (scale != 1.0f) pos = pos / scale;
  return pos;
}

// Pair i's rotation at pos (inv_freq = the table's inv_freq[i]): a' = a·c − b·s, b' = b·c
// + a·s with c, s the cosine and sine of pos · inv_freq.
__device__ __forceinline__ void rope_rotate(float pos, float inv_freq, float& a, float& b) {
  const float ang = pos * inv_freq;
  const float c = cosf(ang), s = sinf(ang);
  const float a0 = a, b0 = b;
  a = a0 * c - b0 * s;
  b = b0 * c + a0 * s;
}

}  // namespace pagedkv::backend::cuda
