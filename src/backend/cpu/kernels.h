// CPU kernels with fixed reduction orders (docs/backend.md).
//
// Every dot product over K — matmul rows, attention scores, RMSNorm's sum of
// squares — is computed by one function shape: 8 independent lane accumulators,
// element k goes to lane k % 8 (the tail is zero-padded into the same lanes),
// lanes combined by the fixed tree ((l0+l4)+(l2+l6)) + ((l1+l5)+(l3+l7)). The
// matrix product accumulates each lane with fused multiply-adds (matmul_isa.h);
// attention and RMSNorm with a multiply then an add (-ffp-contract=off keeps the
// compiler from fusing them). A kernel processes tiles of rows/columns at once
// for speed, but each output element still sees exactly this sequence of IEEE
// operations, so M = 1 and M = 64, 1 thread or 16, AVX-512 or AVX2 or the
// baseline build, produce the same bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "backend/backend.h"
#include "backend/cpu/attention.h"
#include "backend/cpu/isa.h"
#include "backend/cpu/thread_pool.h"

namespace pagedkv::backend::cpu {

// Off: the matmul's packed (prefill) loop nest is never used, only the direct one
// (same bits; for tests and the benchmarks' same-run baseline).
void set_matmul_packing_for_testing(bool on);
// The packed nest's K block and row block (rounded to multiples of 8 and 24 and
// clamped; default 512 and 96): any values give the same bits.
void set_matmul_blocking_for_testing(int64_t kc, int64_t mb);
// Off: the matmul does not prefetch the next tile's weights (speed only).
void set_matmul_prefetch_for_testing(bool on);
// Measured FMA throughput of all the pool's threads running register-only FMA
// chains on the matmul path's vectors, GFLOP/s (0 on the baseline path).
double measure_fma_peak_gflops(ThreadPool* pool);

// Σ a[i]·b[i] in the fixed 8-lane order.
float dot_f32(const float* a, const float* b, int64_t n);

// y[m][n] = Σ_k x[m][k] · w[n][k]; w is f32/bf16/f16 [n][k]. pool may be null.
void matmul(const float* x, int64_t m, int64_t k, const void* w, WeightDType wdt, int64_t n,
            float* y, ThreadPool* pool);

// Rows in parallel when pool is given (each row computed whole by one thread).
void rms_norm(const float* x, int64_t m, int64_t d, const void* w, WeightDType wdt, float eps,
              bool one_plus_weight, float* y, ThreadPool* pool = nullptr);

void rope(float* x, int64_t m, int32_t num_heads, int32_t head_dim, const int32_t* positions,
          const RopeParams& p, ThreadPool* pool = nullptr);

// fn(begin, end) over [0, n) element ranges, split over the pool when n is large
// (heavy: each element costs a transcendental function, so split from 2,048 on).
void elementwise(int64_t n, ThreadPool* pool, const std::function<void(int64_t, int64_t)>& fn,
                 bool heavy = false);

// out[i] = g / (1 + e^-g) · up[i] with g = gate[i], e^x the fixed-order vexp
// below (every element alone, so the split over threads changes nothing).
void silu_mul(const float* gate, const float* up, int64_t n, float* out, ThreadPool* pool);

// The kernels' e^x (attention's softmax, SiLU): a fixed sequence of IEEE float
// operations, within 2 ulp of the correctly rounded value; exposed for tests.
float exp_for_testing(float x);

void softmax_rows(float* x, int64_t m, int64_t n);

void topk_route(const float* logits, int64_t m, int32_t num_experts, int32_t k, bool softmax_first,
                bool normalize, int32_t* ids, float* weights);

}  // namespace pagedkv::backend::cpu
