// What one dependency between the phases of a decode step costs on the GPU, three
// ways (issue 12: the 1-row step is a chain of ~10 dependent kernels a layer, and
// the question is what a persistent layer kernel would save):
//  - kernels: N dependent kernel launches captured in a CUDA graph, each block
//    reading a value another block of the kernel before wrote — with programmatic
//    dependent launch (griddepcontrol.wait first, then launch_dependents: the
//    engine's decode step) and without it (plain stream order);
//  - barrier: one persistent kernel whose N phases are separated by a grid-wide
//    barrier (an arrival counter, a release fence, an acquire spin; launched
//    cooperatively so every block is resident);
//  - flags: one persistent kernel whose block b in phase p waits only for the blocks
//    it reads (b − 1, b and b + 1 of phase p − 1) through per-block flags — the
//    dataflow a persistent kernel could use where a phase reads a few producers.
// Each phase's work is one load and one store a block, so the figures are the
// dependency's latency. Grids of every SM, 32, 8 and 1 block(s) of 256 threads;
// median of 5 timed runs of N = 2,000 phases after a warm-up.
// Run: step_sync_bench (no arguments; sm_90 for the programmatic launch). Results:
// docs/performance.md, "What a dependency costs: kernels, grid barriers, flags".
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "cuda_check.h"

namespace {

constexpr int kThreads = 256;
constexpr int kPhases = 2000;
constexpr int kMaxBlocks = 1024;

__device__ __forceinline__ unsigned load_acquire(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void store_release(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// One phase's work: block b reads what block b + 1 wrote in the phase before and
// writes its own slot (two buffers by phase parity).
__device__ __forceinline__ void phase_work(float* buf, int phase) {
  if (threadIdx.x != 0) return;
  const int b = blockIdx.x, g = gridDim.x;
  const float* prev = buf + ((phase + 1) & 1) * kMaxBlocks;
  float* cur = buf + (phase & 1) * kMaxBlocks;
  cur[b] = *reinterpret_cast<const volatile float*>(prev + (b + 1) % g) + 1.0f;
}

// Without the launch attribute the two instructions do nothing.
__global__ void chain_kernel(float* buf, int phase) {
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
  phase_work(buf, phase);
}

__global__ void barrier_kernel(float* buf, unsigned* arrived, int phases) {
  for (int phase = 0; phase < phases; ++phase) {
    phase_work(buf, phase);
    __syncthreads();
    if (threadIdx.x == 0) {
      __threadfence();
      atomicAdd(arrived, 1u);
      const unsigned target = static_cast<unsigned>(phase + 1) * gridDim.x;
      while (load_acquire(arrived) < target) {
      }
    }
    __syncthreads();
  }
}

__global__ void flags_kernel(float* buf, unsigned* flags, int phases) {
  const int b = blockIdx.x, g = gridDim.x;
  for (int phase = 0; phase < phases; ++phase) {
    if (threadIdx.x < 3 && phase > 0) {  // the producers this block reads
      const int p = (b + g + static_cast<int>(threadIdx.x) - 1) % g;
      while (load_acquire(flags + p) < static_cast<unsigned>(phase)) {
      }
    }
    __syncthreads();
    phase_work(buf, phase);
    __syncthreads();
    if (threadIdx.x == 0) store_release(flags + b, static_cast<unsigned>(phase + 1));
  }
}

// The median of 5 timed runs of `run` on `stream` after a warm-up.
template <typename F>
float median_ms(F&& run, cudaStream_t stream = nullptr) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  run();  // warm-up
  CHECK(cudaDeviceSynchronize());
  std::vector<float> ms;
  for (int i = 0; i < 5; ++i) {
    CHECK(cudaEventRecord(a, stream));
    run();
    CHECK(cudaEventRecord(b, stream));
    CHECK(cudaEventSynchronize(b));
    float t = 0;
    CHECK(cudaEventElapsedTime(&t, a, b));
    ms.push_back(t);
  }
  std::sort(ms.begin(), ms.end());
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return ms[ms.size() / 2];
}

// N chained launches of `blocks` blocks captured into a graph (legacy stream capture
// needs a stream of its own).
float chain_us(int blocks, bool pdl, float* buf) {
  cudaStream_t s;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t cfg = {};
  cfg.gridDim = dim3(static_cast<unsigned>(blocks));
  cfg.blockDim = dim3(kThreads);
  cfg.stream = s;
  cfg.attrs = attr;
  cfg.numAttrs = pdl ? 1 : 0;
  CHECK(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed));
  for (int p = 0; p < kPhases; ++p) CHECK(cudaLaunchKernelEx(&cfg, chain_kernel, buf, p));
  cudaGraph_t g;
  CHECK(cudaStreamEndCapture(s, &g));
  cudaGraphExec_t exec;
  CHECK(cudaGraphInstantiate(&exec, g, 0));
  const float ms = median_ms([&] { CHECK(cudaGraphLaunch(exec, s)); }, s);
  CHECK(cudaGraphExecDestroy(exec));
  CHECK(cudaGraphDestroy(g));
  CHECK(cudaStreamDestroy(s));
  return 1000.0f * ms / kPhases;
}

float persistent_us(int blocks, bool flags, float* buf, unsigned* counters) {
  int phases = kPhases;
  const float ms = median_ms([&] {
    CHECK(cudaMemset(counters, 0, sizeof(unsigned) * kMaxBlocks));
    void* args[] = {&buf, &counters, &phases};
    CHECK(cudaLaunchCooperativeKernel(
        flags ? reinterpret_cast<void*>(flags_kernel) : reinterpret_cast<void*>(barrier_kernel),
        dim3(static_cast<unsigned>(blocks)), dim3(kThreads), args, 0, nullptr));
  });
  return 1000.0f * ms / kPhases;
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  CHECK(cudaGetDevice(&dev));
  CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, dev));
  std::printf("%s, %d SMs; N = %d phases, %d threads a block; µs a dependency\n", prop.name, sms,
              kPhases, kThreads);
  float* buf = nullptr;
  unsigned* counters = nullptr;
  CHECK(cudaMalloc(&buf, sizeof(float) * 2 * kMaxBlocks));
  CHECK(cudaMemset(buf, 0, sizeof(float) * 2 * kMaxBlocks));
  CHECK(cudaMalloc(&counters, sizeof(unsigned) * kMaxBlocks));
  std::printf(
      "| blocks | kernels, graph | kernels, graph + PDL | grid barrier | flags (3 producers) |\n");
  std::printf("|---|---|---|---|---|\n");
  for (const int blocks : {sms, 32, 8, 1}) {
    const float plain = chain_us(blocks, false, buf);
    const float pdl = chain_us(blocks, true, buf);
    const float barrier = persistent_us(blocks, false, buf, counters);
    const float flags = persistent_us(blocks, true, buf, counters);
    std::printf("| %d | %.2f | %.2f | %.2f | %.2f |\n", blocks, plain, pdl, barrier, flags);
  }
  CHECK(cudaFree(buf));
  CHECK(cudaFree(counters));
  return 0;
}
