// The plane buffer's tickets (src/backend/cuda/x_planes.cc): the host-side check that x's
// planes reach the GEMM that reads them as their producer wrote them. Host logic only —
// no kernel runs and no plane is dereferenced — so these run without a GPU (label unit);
// tests/backend/cuda_ops_test.cc's PlaneBufferContractRefusesOverwrittenPlanes runs the
// same rules through the real producers and GEMMs on a GPU.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "backend/cuda/x_planes.h"

namespace pagedkv::backend::cuda {
namespace {

// Distinct stream handles that are never used as streams here.
cudaStream_t fake_stream(uintptr_t id) { return reinterpret_cast<cudaStream_t>(0x1000 + id); }

// A hand-out of the stream's buffer, as gemm_x_planes gives it (the data pointer is a
// stand-in: nothing reads it).
XPlanes hand_out(cudaStream_t stream) {
  static uint16_t stand_in[8];
  return XPlanes{stand_in, 1, take_x_planes_ticket(stream)};
}

bool refused(const Status& st, const std::string& says) {
  return st.code() == StatusCode::kFailedPrecondition &&
         st.message().find(says) != std::string::npos;
}

TEST(XPlanesTicketTest, HandOutProducerGemmPasses) {
  const cudaStream_t s = fake_stream(1);
  const XPlanes p = hand_out(s);
  EXPECT_TRUE(note_x_planes_written(p, s, "add_rms_norm").ok());
  EXPECT_TRUE(check_x_planes_readable(p, s).ok());
}

TEST(XPlanesTicketTest, PlanesNoProducerWroteAreRefused) {
  const cudaStream_t s = fake_stream(2);
  const XPlanes p = hand_out(s);
  const Status st = check_x_planes_readable(p, s);
  EXPECT_TRUE(refused(st, "no producer")) << st.to_string();
}

TEST(XPlanesTicketTest, ASplitBetweenProducerAndGemmIsRefused) {
  const cudaStream_t s = fake_stream(3);
  const XPlanes p = hand_out(s);
  ASSERT_TRUE(note_x_planes_written(p, s, "silu_mul_halves").ok());
  (void)take_x_planes_ticket(s);  // a plane-less k-split gemm() splits into the buffer
  const Status st = check_x_planes_readable(p, s);
  EXPECT_TRUE(refused(st, "overwritten")) << st.to_string();
}

TEST(XPlanesTicketTest, AnOlderHandOutsProducerIsRefused) {
  const cudaStream_t s = fake_stream(4);
  const XPlanes first = hand_out(s), second = hand_out(s);
  const Status st = note_x_planes_written(first, s, "add_rms_norm");
  EXPECT_TRUE(refused(st, "add_rms_norm")) << st.to_string();
  EXPECT_TRUE(note_x_planes_written(second, s, "add_rms_norm").ok());
  EXPECT_TRUE(check_x_planes_readable(second, s).ok());
  EXPECT_FALSE(check_x_planes_readable(first, s).ok());
}

TEST(XPlanesTicketTest, StreamsHoldTheirOwnBuffers) {
  const cudaStream_t a = fake_stream(5), b = fake_stream(6);
  const XPlanes p = hand_out(a);
  ASSERT_TRUE(note_x_planes_written(p, a, "add_rms_norm").ok());
  const XPlanes q = hand_out(b);  // another stream's buffer changes hands
  (void)take_x_planes_ticket(b);
  EXPECT_TRUE(check_x_planes_readable(p, a).ok());
  EXPECT_FALSE(note_x_planes_written(q, b, "add_rms_norm").ok());
}

TEST(XPlanesTicketTest, NoPlanesAlwaysPass) {
  const cudaStream_t s = fake_stream(7);
  const XPlanes none;
  (void)take_x_planes_ticket(s);
  EXPECT_TRUE(note_x_planes_written(none, s, "add_rms_norm").ok());
  EXPECT_TRUE(check_x_planes_readable(none, s).ok());
}

}  // namespace
}  // namespace pagedkv::backend::cuda
