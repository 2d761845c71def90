// Helpers shared by the CUDA test suites: the skip-without-GPU fixture, device
// vectors, random data and bit comparison.
#pragma once

#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_status.h"
#include "backend/cuda/device_memory.h"

namespace pagedkv::backend::cuda::testing {

// Every GPU test derives from this: it SKIPs (not fails) where no CUDA device is
// visible, e.g. on CI machines that build the CUDA code but have no GPU.
class CudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (cuda_device_count() == 0) {
      GTEST_SKIP() << "no CUDA device visible (cudaGetDeviceCount failed or returned 0): "
                      "CUDA tests skipped";
    }
  }
};

// A CudaTest with a CudaBackend on device 0 (gpu_).
class CudaBackendTest : public CudaTest {
 protected:
  void SetUp() override {
    CudaTest::SetUp();
    if (IsSkipped()) return;
    auto b = CudaBackend::create(0);
    ASSERT_TRUE(b.ok()) << b.status().to_string();
    gpu_ = std::move(*b);
  }
  std::unique_ptr<CudaBackend> gpu_;
};

template <typename T>
DeviceBuffer dev(const std::vector<T>& v) {
  auto b = upload_vector(v);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return std::move(*b);
}

// A device buffer of `bytes` filled with 0xff (NaN floats, −1 ints), so that an output
// a kernel fails to write shows. Not zeros: a test that needs zeros (a counter array,
// an accumulator) must clear it itself.
inline DeviceBuffer dev_poisoned(size_t bytes) {
  auto b = DeviceBuffer::allocate(bytes);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  cudaMemset(b->data(), 0xff, bytes);  // poison: NaN floats, -1 ints
  // The backend runs on a non-blocking stream, which the legacy-stream memset is
  // not ordered against: finish the poison before any kernel writes the buffer.
  cudaDeviceSynchronize();
  return std::move(*b);
}

template <typename T>
std::vector<T> host(const DeviceBuffer& b, size_t n) {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  auto v = download_vector<T>(b.data(), n);
  EXPECT_TRUE(v.ok()) << v.status().to_string();
  return std::move(*v);
}

inline std::vector<float> randn(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(g);
  return v;
}

inline bool same_bits(const void* a, const void* b, size_t bytes) {
  return std::memcmp(a, b, bytes) == 0;
}

}  // namespace pagedkv::backend::cuda::testing
