// How fast the GPU streams K/V-like data into shared memory, by load path (issue 12:
// whether the decode attention's loads, or its work between them, keep it below
// torch SDPA's bandwidth). Every variant reads the same two arrays (K and V, 2 GiB
// each) once and touches every byte it loads:
//  - ldg:     plain 16-byte loads into registers, grid-stride (the streaming ceiling);
//  - cpasync: blocks of 1 or 4 warps, each a segment of keys, K and V in chunks of
//             8 KB a warp through two shared buffers with cp.async — with one warp,
//             the decode attention's one-warp blocks without the math; also with the
//             `.L2::256B` prefetch-size hint;
//  - bulk:    the one-warp blocks with one cp.async.bulk (the TMA's 1-D copy) a
//             chunk, completed on an mbarrier, 2 or 4 buffers deep.
// Blocks an SM are capped through the dynamic shared memory (6, 10 — the decode
// attention's — or 16 one-warp blocks; 2 or 3 four-warp ones). Segments of 64 KB (a
// 256-key partition of one KV head at head_dim 128: our decode blocks) and of 2 MB (a
// whole 8K-token sequence: SDPA's blocks without a split).
// Median of 9 timed runs after 2 warm-ups; GB/s = bytes read / time.
// Run: read_paths_bench (no arguments; needs an sm_90 GPU). Results:
// docs/performance.md, "Decode attention: the load path's ceiling".
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr int kChunkBytes = 8192;  // 32 keys × 128 dims × bf16

__global__ void ldg_kernel(const uint4* k, const uint4* v, size_t n, unsigned* out) {
  unsigned acc = 0;
  const size_t stride = static_cast<size_t>(gridDim.x) * blockDim.x;
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += 2 * stride) {
    const uint4 a = __ldcs(k + i), b = __ldcs(v + i);
    uint4 c{}, d{};
    if (i + stride < n) c = __ldcs(k + i + stride), d = __ldcs(v + i + stride);
    acc ^= a.x ^ a.y ^ a.z ^ a.w ^ b.x ^ b.y ^ b.z ^ b.w ^ c.x ^ c.y ^ c.z ^ c.w ^ d.x ^ d.y ^ d.z ^
           d.w;
  }
  if (acc == 0x12345678u) out[0] = acc;  // keeps the loads
}

// H = 0: no hint; 128 / 256: the L2 prefetch-size hint (`.L2::128B`, `.L2::256B`).
template <int H>
__device__ __forceinline__ void cp16(unsigned dst, const void* src) {
  if constexpr (H == 256)
    asm volatile("cp.async.cg.shared.global.L2::256B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  else if constexpr (H == 128)
    asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
  else
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(dst), "l"(src));
}

// W warps: segment blockIdx.x of K and of V, chunk c of K then chunk c of V (W·8 KB
// a chunk, each warp copying its 8 KB), two buffers (the next copy issued before this
// one is consumed). W = 1 is the decode attention's one-warp block.
template <int W, int H = 0>
__global__ void __launch_bounds__(W * 32)
    cpasync_kernel(const char* k, const char* v, size_t seg_bytes, unsigned* out) {
  constexpr int kBytes = W * kChunkBytes;
  extern __shared__ __align__(16) unsigned char sm[];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(sm));
  const char* ks = k + blockIdx.x * seg_bytes;
  const char* vs = v + blockIdx.x * seg_bytes;
  const int t = threadIdx.x;
  const int n = static_cast<int>(seg_bytes / kBytes) * 2;  // K, V, K, V, …
  auto issue = [&](int i) {
    const char* src = (i & 1 ? vs : ks) + static_cast<size_t>(i >> 1) * kBytes;
    const unsigned dst = base + (i & 1) * kBytes;
#pragma unroll
    for (int j = 0; j < kChunkBytes / 512; ++j)
      cp16<H>(dst + j * 512 * W + t * 16, src + j * 512 * W + t * 16);
    asm volatile("cp.async.commit_group;\n" ::: "memory");
  };
  unsigned acc = 0;
  issue(0);
  for (int i = 0; i < n; ++i) {
    if (i + 1 < n) {
      issue(i + 1);
      asm volatile("cp.async.wait_group 1;\n" ::: "memory");
    } else {
      asm volatile("cp.async.wait_group 0;\n" ::: "memory");
    }
    if (W == 1)
      __syncwarp();
    else
      __syncthreads();
    const uint4* b = reinterpret_cast<const uint4*>(sm + (i & 1) * kBytes);
#pragma unroll
    for (int j = 0; j < kChunkBytes / 512; ++j) {
      const uint4 x = b[j * 32 * W + t];
      acc ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    if (W == 1)
      __syncwarp();
    else
      __syncthreads();
  }
  if (acc == 0x12345678u) out[0] = acc;
}

__device__ __forceinline__ void mbar_init(unsigned bar, unsigned count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(bar), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned bar, unsigned bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(bar), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned bar, unsigned phase) {
  asm volatile(
      "{\n .reg .pred done;\n wait_%=:\n"
      " mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      " @!done bra wait_%=;\n}\n" ::"r"(bar),
      "r"(phase)
      : "memory");
}
__device__ __forceinline__ void bulk_copy(unsigned dst, const void* src, unsigned bytes,
                                          unsigned bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::
          "r"(dst),
      "l"(src), "r"(bytes), "r"(bar)
      : "memory");
}

// The same blocks with one bulk copy a chunk (lane 0 issues; the warp waits on the
// chunk's mbarrier). `depth` buffers in flight (2 = cpasync's).
__global__ void __launch_bounds__(32)
    bulk_kernel(const char* k, const char* v, size_t seg_bytes, int depth, unsigned* out) {
  extern __shared__ __align__(16) unsigned char sm[];
  __shared__ __align__(8) unsigned long long bars[8];
  const unsigned base = static_cast<unsigned>(__cvta_generic_to_shared(sm));
  const char* ks = k + blockIdx.x * seg_bytes;
  const char* vs = v + blockIdx.x * seg_bytes;
  const int lane = threadIdx.x;
  const int n = static_cast<int>(seg_bytes / kChunkBytes) * 2;
  if (lane < depth) mbar_init(static_cast<unsigned>(__cvta_generic_to_shared(&bars[lane])), 1);
  asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
  __syncwarp();
  auto issue = [&](int i) {
    if (lane != 0) return;
    const char* src = (i & 1 ? vs : ks) + static_cast<size_t>(i >> 1) * kChunkBytes;
    const int slot = i % depth;
    const unsigned bar = static_cast<unsigned>(__cvta_generic_to_shared(&bars[slot]));
    mbar_expect_tx(bar, kChunkBytes);
    bulk_copy(base + slot * kChunkBytes, src, kChunkBytes, bar);
  };
  for (int i = 0; i < depth - 1 && i < n; ++i) issue(i);
  unsigned acc = 0;
  for (int i = 0; i < n; ++i) {
    if (i + depth - 1 < n) issue(i + depth - 1);
    const int slot = i % depth;
    mbar_wait(static_cast<unsigned>(__cvta_generic_to_shared(&bars[slot])), (i / depth) & 1);
    const uint4* b = reinterpret_cast<const uint4*>(sm + slot * kChunkBytes);
#pragma unroll
    for (int j = 0; j < kChunkBytes / 512; ++j) {
      const uint4 x = b[j * 32 + lane];
      acc ^= x.x ^ x.y ^ x.z ^ x.w;
    }
    __syncwarp();  // every lane done with the slot before lane 0 refills it
  }
  if (acc == 0x12345678u) out[0] = acc;
}

template <typename F>
float median_ms(F&& launch) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  for (int i = 0; i < 2; ++i) launch();
  std::vector<float> ts;
  for (int i = 0; i < 9; ++i) {
    CHECK(cudaEventRecord(a));
    launch();
    CHECK(cudaEventRecord(b));
    CHECK(cudaEventSynchronize(b));
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    ts.push_back(ms);
  }
  CHECK(cudaGetLastError());
  std::sort(ts.begin(), ts.end());
  return ts[ts.size() / 2];
}

}  // namespace

int main() {
  cudaDeviceProp prop{};
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("device: %s, %d SMs\n", prop.name, prop.multiProcessorCount);
  const size_t bytes = size_t{2} << 30;  // each of K and V
  char *k = nullptr, *v = nullptr;
  unsigned* out = nullptr;
  CHECK(cudaMalloc(&k, bytes));
  CHECK(cudaMalloc(&v, bytes));
  CHECK(cudaMalloc(&out, 4));
  CHECK(cudaMemset(k, 1, bytes));
  CHECK(cudaMemset(v, 2, bytes));
  const double total = 2.0 * static_cast<double>(bytes);
  auto report = [&](const char* name, float ms) {
    std::printf("%-44s %8.3f ms %8.1f GB/s\n", name, ms, total / (ms * 1e-3) / 1e9);
  };
  const size_t n16 = bytes / 16;
  for (int blocks_per_sm : {4, 8, 16}) {
    const int grid = prop.multiProcessorCount * blocks_per_sm;
    char name[64];
    std::snprintf(name, sizeof name, "ldg 256 threads, %d blocks an SM", blocks_per_sm);
    report(name, median_ms([&] {
             ldg_kernel<<<grid, 256>>>(reinterpret_cast<const uint4*>(k),
                                       reinterpret_cast<const uint4*>(v), n16, out);
           }));
  }
  const int smem_max = static_cast<int>(prop.sharedMemPerMultiprocessor);
  // Dynamic shared memory up to the opt-in limit less each kernel's static shared memory.
  auto allow_smem = [&](const void* kernel) {
    cudaFuncAttributes attr{};
    CHECK(cudaFuncGetAttributes(&attr, kernel));
    const int most = static_cast<int>(prop.sharedMemPerBlockOptin - attr.sharedSizeBytes);
    CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, most));
  };
  allow_smem(reinterpret_cast<const void*>(cpasync_kernel<1>));
  allow_smem(reinterpret_cast<const void*>(cpasync_kernel<1, 256>));
  allow_smem(reinterpret_cast<const void*>(cpasync_kernel<4>));
  allow_smem(reinterpret_cast<const void*>(bulk_kernel));
  for (size_t seg : {size_t{64} << 10, size_t{2} << 20}) {
    const int grid = static_cast<int>(bytes / seg);
    char name[96];
    for (int per_sm : {6, 10, 16}) {
      // Dynamic shared memory sized so at most per_sm blocks fit an SM.
      const int smem = std::max(2 * kChunkBytes, smem_max / per_sm - 1024);
      std::snprintf(name, sizeof name, "cpasync 1 warp, seg %zu KB, <=%d blocks an SM", seg >> 10,
                    per_sm);
      report(name, median_ms([&] { cpasync_kernel<1><<<grid, 32, smem>>>(k, v, seg, out); }));
      std::snprintf(name, sizeof name, "cpasync 1 warp L2::256B, seg %zu KB, <=%d an SM", seg >> 10,
                    per_sm);
      report(name, median_ms([&] { cpasync_kernel<1, 256><<<grid, 32, smem>>>(k, v, seg, out); }));
      for (int depth : {2, 4}) {
        const int bsmem = std::max(depth * kChunkBytes, smem_max / per_sm - 1024);
        if (depth * kChunkBytes > smem_max / per_sm - 1024) continue;
        std::snprintf(name, sizeof name, "bulk seg %zu KB, depth %d, <=%d blocks an SM", seg >> 10,
                      depth, per_sm);
        report(name, median_ms([&] { bulk_kernel<<<grid, 32, bsmem>>>(k, v, seg, depth, out); }));
      }
    }
    for (int per_sm : {2, 3}) {
      const int smem = std::max(8 * kChunkBytes, smem_max / per_sm - 1024);
      std::snprintf(name, sizeof name, "cpasync 4 warps, seg %zu KB, <=%d blocks an SM", seg >> 10,
                    per_sm);
      report(name, median_ms([&] { cpasync_kernel<4><<<grid, 128, smem>>>(k, v, seg, out); }));
    }
  }
  return 0;
}
