// A kernel timeline for any CUDA program, CUDA graphs included: an injection
// library (CUDA_INJECTION64_PATH=libpkv_kernel_timeline.so) that asks CUPTI's
// activity API for the start and end of every kernel, memcpy and memset on the GPU
// and of every CUDA runtime call on the host, and writes them to one CSV when the
// program exits. Nsight Systems does this too, but the device machines do not have
// it; Nsight Compute times each kernel alone (serialized), which says nothing about
// what a step waits on when its kernels overlap under programmatic launch.
//
// Usage (the GPU machine):
//   CUDA_INJECTION64_PATH=$PWD/build/bench/cuda/libpkv_kernel_timeline.so
//     PKV_TIMELINE_OUT=/tmp/timeline.csv ./build/bench/cuda/bench_cuda_model
//   python3 bench/cuda/kernel_timeline_summary.py /tmp/timeline.csv
// Every line is one record, its times in ns on the GPU's and the host's common
// CUPTI clock:
//   k,start,end,correlation,graph,graph_node,stream,grid,block,cluster,registers,name
//   m,start,end,correlation,graph,graph_node,stream,bytes,copy_kind   (memcpy)
//   s,start,end,correlation,graph,graph_node,stream,bytes             (memset)
//   a,start,end,correlation,thread,call                               (runtime API)
//   d,start,end,correlation,thread,call                               (driver API)
// The kernels of one graph launch share its correlation id (and carry the graph's
// id), so the summary can cut the record into steps (bench/cuda/kernel_timeline_summary.py).
// CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL keeps kernels concurrent, but tracing costs
// host time (a graph launch took ~250 µs under it on an H200, against a few µs):
// read the kernels' times and gaps from it, and a run's tok/s from an untraced run.
#include <cupti.h>
#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>

namespace {

constexpr size_t kBufferBytes = 8u << 20;

std::mutex g_mu;
FILE* g_out = nullptr;
bool g_ok = true;

void check(CUptiResult r, const char* what) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  std::fprintf(stderr, "kernel_timeline: %s failed: %s\n", what, msg != nullptr ? msg : "?");
  g_ok = false;
}

// The kernel's demangled name without its argument list (templates kept), commas
// replaced so the CSV stays one field.
std::string kernel_name(const char* mangled) {
  if (mangled == nullptr) return "?";
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d != nullptr ? d : mangled;
  std::free(d);
  // Kernels in an anonymous namespace: its parentheses are not an argument list.
  const std::string anon = "(anonymous namespace)";
  for (size_t at = s.find(anon); at != std::string::npos; at = s.find(anon, at))
    s.replace(at, anon.size(), "{anon}");
  // Cut the argument list: the last '(' at template depth 0.
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) {
      s.resize(i);
      break;
    }
  }
  for (char& c : s)
    if (c == ',') c = ';';
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  *size = kBufferBytes;
  *max_records = 0;
}

// A copy's or a memset's common fields (the line's end is the caller's).
template <class Record>
void write_transfer(char tag, const Record& m) {
  std::fprintf(g_out, "%c,%llu,%llu,%u,%u,%llu,%u,%llu", tag,
               static_cast<unsigned long long>(m.start), static_cast<unsigned long long>(m.end),
               m.correlationId, m.graphId, static_cast<unsigned long long>(m.graphNodeId),
               m.streamId, static_cast<unsigned long long>(m.bytes));
}

void write_record(const CUpti_Activity* rec) {
  switch (rec->kind) {
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
    case CUPTI_ACTIVITY_KIND_KERNEL: {
      const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
      std::fprintf(g_out, "k,%llu,%llu,%u,%u,%llu,%u,%dx%dx%d,%dx%dx%d,%ux%ux%u,%u,%s\n",
                   static_cast<unsigned long long>(k->start),
                   static_cast<unsigned long long>(k->end), k->correlationId, k->graphId,
                   static_cast<unsigned long long>(k->graphNodeId), k->streamId, k->gridX, k->gridY,
                   k->gridZ, k->blockX, k->blockY, k->blockZ, k->clusterX, k->clusterY, k->clusterZ,
                   static_cast<unsigned>(k->registersPerThread), kernel_name(k->name).c_str());
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(rec);
      write_transfer('m', *m);
      std::fprintf(g_out, ",%u\n", static_cast<unsigned>(m->copyKind));
      break;
    }
    case CUPTI_ACTIVITY_KIND_MEMSET:
      write_transfer('s', *reinterpret_cast<const CUpti_ActivityMemset4*>(rec));
      std::fputc('\n', g_out);
      break;
    case CUPTI_ACTIVITY_KIND_RUNTIME:
    case CUPTI_ACTIVITY_KIND_DRIVER: {
      const auto* a = reinterpret_cast<const CUpti_ActivityAPI*>(rec);
      const bool runtime = rec->kind == CUPTI_ACTIVITY_KIND_RUNTIME;
      const char* name = nullptr;
      if (cuptiGetCallbackName(runtime ? CUPTI_CB_DOMAIN_RUNTIME_API : CUPTI_CB_DOMAIN_DRIVER_API,
                               a->cbid, &name) != CUPTI_SUCCESS)
        name = "?";
      std::fprintf(g_out, "%c,%llu,%llu,%u,%u,%s\n", runtime ? 'a' : 'd',
                   static_cast<unsigned long long>(a->start),
                   static_cast<unsigned long long>(a->end), a->correlationId, a->threadId, name);
      break;
    }
    default:
      break;
  }
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    CUpti_Activity* rec = nullptr;
    while (g_out != nullptr && cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS)
      write_record(rec);
    size_t dropped = 0;
    if (cuptiActivityGetNumDroppedRecords(nullptr, 0, &dropped) == CUPTI_SUCCESS && dropped > 0)
      std::fprintf(stderr, "kernel_timeline: %zu records dropped\n", dropped);
  }
  std::free(buffer);
}

void at_exit() {
  cuptiActivityFlushAll(1);
  std::lock_guard<std::mutex> lock(g_mu);
  if (g_out != nullptr) {
    std::fclose(g_out);
    g_out = nullptr;
  }
}

}  // namespace

// Called by the CUDA driver at its initialization when CUDA_INJECTION64_PATH names
// this library.
extern "C" int InitializeInjection() {
  const char* path = std::getenv("PKV_TIMELINE_OUT");
  if (path == nullptr || *path == '\0') path = "/tmp/pkv_timeline.csv";
  g_out = std::fopen(path, "w");
  if (g_out == nullptr) {
    std::fprintf(stderr, "kernel_timeline: cannot write %s\n", path);
    return 0;
  }
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "register callbacks");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enable kernels");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY), "enable memcpy");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET), "enable memset");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_RUNTIME), "enable runtime API");
  check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_DRIVER), "enable driver API");
  std::atexit(at_exit);
  std::fprintf(stderr, "kernel_timeline: tracing to %s%s\n", path, g_ok ? "" : " (incomplete)");
  return 1;
}
