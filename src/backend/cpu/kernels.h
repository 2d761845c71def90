// CPU kernels with fixed reduction orders (docs/backend.md).
//
// Every dot product over K — matmul rows, attention scores, RMSNorm's sum of
// squares — is computed by one function shape: 8 independent lane accumulators,
// element k goes to lane k % 8 (the tail is zero-padded into the same lanes),
// lanes combined by the fixed tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)).
// A kernel processes tiles of rows/columns at once for speed, but each output
// element still sees exactly this sequence of IEEE operations, so M = 1 and
// M = 64, 1 thread or 2, produce the same bits. No FMA (-ffp-contract=off).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "backend/cpu/thread_pool.h"

namespace pagedkv::backend::cpu {

// Which compiled variant the kernels use: kAuto = AVX2 when the CPU has it, else the
// baseline build. Both give identical bits; the switch exists so tests can prove it.
enum class Isa { kAuto, kGeneric };
void set_isa_for_testing(Isa isa);

// Σ a[i]·b[i] in the fixed 8-lane order.
float dot_f32(const float* a, const float* b, int64_t n);

// y[m][n] = Σ_k x[m][k] · w[n][k]; w is f32/bf16/f16 [n][k]. pool may be null.
void matmul(const float* x, int64_t m, int64_t k, const void* w, WeightDType wdt, int64_t n,
            float* y, ThreadPool* pool);

void rms_norm(const float* x, int64_t m, int64_t d, const void* w, WeightDType wdt, float eps,
              bool one_plus_weight, float* y);

void rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
          const RopeParams& p);

void attention(const AttentionArgs& a, ThreadPool* pool);

void softmax_rows(float* x, int64_t m, int64_t n);

void topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k, bool softmax_first,
                bool normalize, int32_t* ids, float* weights);

}  // namespace pagedkv::backend::cpu
