// Fuzz target: a safetensors file (8-byte header length, JSON header, data).
// The bytes become a regular file that SafetensorsFile::open maps and validates;
// when it accepts, the target acts as a consumer would: every tensor's byte range
// must be exactly numel × element size (a property, checked here because
// consumers such as `--input-ids` trust numel) and is read in full; small float
// tensors go through tensor_to_f32.
#include <cstdint>
#include <string>

#include "fuzz_util.h"
#include "model/safetensors.h"

using pagedkv::fuzz::property_failed;
using pagedkv::fuzz::QuietStreams;
using pagedkv::fuzz::ScratchFile;
namespace model = pagedkv::model;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static ScratchFile file("model.safetensors");
  QuietStreams quiet;
  file.write(std::string_view(reinterpret_cast<const char*>(data), size));
  auto st = model::SafetensorsFile::open(file.path());
  pagedkv::fuzz::note(st.ok() ? std::to_string((*st)->tensors().size()) + " tensors"
                              : st.status().message());
  if (!st.ok()) {
    if (st.status().message().empty()) property_failed("an error without a message");
    return 0;
  }
  volatile uint8_t sink = 0;
  for (const model::TensorInfo& t : (*st)->tensors()) {
    const int64_t numel = t.numel();
    uint64_t want = 0;
    if (numel < 0 ||
        __builtin_mul_overflow(static_cast<uint64_t>(numel), model::dtype_size(t.dtype), &want) ||
        want != t.nbytes) {
      property_failed("tensor '" + t.name + "' " + t.shape_string() + " " +
                      model::dtype_name(t.dtype) + " claims " + std::to_string(numel) +
                      " elements in " + std::to_string(t.nbytes) + " bytes");
    }
    for (uint64_t i = 0; i < t.nbytes; ++i) sink = sink ^ static_cast<uint8_t>(t.data[i]);
    if ((*st)->find(t.name) != &t) property_failed("find() does not return tensor " + t.name);
    if (numel <= (1 << 16)) {
      auto f = model::tensor_to_f32(t);
      if (f.ok() && f->size() != static_cast<size_t>(numel))
        property_failed("tensor_to_f32 size mismatch for " + t.name);
    }
  }
  for (const auto& [k, v] : (*st)->metadata())
    sink = sink ^ static_cast<uint8_t>(k.size() + v.size());
  return 0;
}
