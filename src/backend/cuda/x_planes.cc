// Who holds a stream's plane buffer (x_planes.h): the check that x's planes reach the
// GEMM that reads them as their producer wrote them.
//
// A stream has one plane buffer. Each hand-out of it (gemm_x_planes) takes a new ticket,
// and so does a plane-less gemm() that splits its own x into it. A producer may write
// planes only while they are the buffer's newest ticket, and a GEMM may read them only
// if their producer wrote them and no ticket was taken since. Host calls on one stream
// are in the stream's order (and a CUDA graph captures them in that order), so checking
// the calls checks the kernels. Costs a lock and a short scan a call, on the host.
#include "backend/cuda/x_planes.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <string>
#include <vector>

namespace pagedkv::backend::cuda {
namespace {

struct Holder {
  int device;
  cudaStream_t stream;
  uint64_t newest;   // the last ticket taken on the buffer
  uint64_t written;  // the last ticket whose producer wrote its planes
};

std::mutex& holders_mu() {
  static std::mutex mu;
  return mu;
}
std::vector<Holder>& holders() {
  static std::vector<Holder> h;
  return h;
}

// The (device, stream)'s holder, added on first use; call with holders_mu() held.
Holder& holder_of(cudaStream_t stream) {
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
  for (Holder& h : holders())
    if (h.device == device && h.stream == stream) return h;
  holders().push_back({device, stream, 0, 0});
  return holders().back();
}

}  // namespace

uint64_t take_x_planes_ticket(cudaStream_t stream) {
  static std::atomic<uint64_t> next{0};
  const uint64_t ticket = next.fetch_add(1, std::memory_order_relaxed) + 1;
  std::lock_guard<std::mutex> lock(holders_mu());
  holder_of(stream).newest = ticket;
  return ticket;
}

Status note_x_planes_written(const XPlanes& planes, cudaStream_t stream, const char* producer) {
  if (!planes) return ok_status();
  std::lock_guard<std::mutex> lock(holders_mu());
  Holder& h = holder_of(stream);
  if (h.newest != planes.ticket)
    return failed_precondition(
        std::string("cuda ") + producer +
        ": x's planes are no longer the stream's plane buffer's (another gemm_x_planes or a "
        "plane-less k-split gemm() took it after they were handed out; x_planes.h)");
  h.written = planes.ticket;
  return ok_status();
}

Status check_x_planes_readable(const XPlanes& planes, cudaStream_t stream) {
  if (!planes) return ok_status();
  std::lock_guard<std::mutex> lock(holders_mu());
  const Holder& h = holder_of(stream);
  if (h.newest != planes.ticket)
    return failed_precondition(
        "cuda gemm_on_planes: x's planes were overwritten between their producer and this GEMM "
        "(another gemm_x_planes or a plane-less k-split gemm() took the stream's plane buffer; "
        "x_planes.h)");
  if (h.written != planes.ticket)
    return failed_precondition(
        "cuda gemm_on_planes: no producer wrote these planes (pass them to add_rms_norm or "
        "silu_mul_halves first; x_planes.h)");
  return ok_status();
}

}  // namespace pagedkv::backend::cuda
