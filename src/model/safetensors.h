// safetensors reading (memory-mapped, fully validated) and writing.
//
// Format: 8-byte little-endian header length N, N bytes of JSON
// {name: {dtype, shape, data_offsets: [begin, end]}, "__metadata__": {...}}, then
// the data section; offsets are relative to the data section.
//
// open() validates everything before any tensor is touched: the header fits in the
// file and parses as a JSON object; no name appears twice; each dtype is known;
// each shape is a list of non-negative integers; begin <= end <= data size;
// product(shape) * element size == end - begin (overflow-checked); no two byte
// ranges overlap. Every failure is a Status naming the file and the tensor.
// The mapping is read-only and lives as long as the SafetensorsFile.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/half.h"
#include "pagedkv/status.h"

namespace pagedkv::model {

enum class DType : uint8_t { kF32, kBF16, kF16, kI64, kI32, kU8, kI8, kF64, kBool };

// "F32" → kF32 ...; false when unknown.
bool parse_dtype(const std::string& s, DType* out);
const char* dtype_name(DType t);
size_t dtype_size(DType t);

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const std::byte* data = nullptr;  // inside the mapping
  uint64_t nbytes = 0;
  int64_t numel() const;
  std::string shape_string() const;  // "[512, 64]"
};

class SafetensorsFile {
 public:
  static StatusOr<std::unique_ptr<SafetensorsFile>> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const TensorInfo* find(const std::string& name) const;
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t map_size_ = 0;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t> index_;
  std::map<std::string, std::string> metadata_;
};

// A tensor to write: `bytes` must hold exactly numel * dtype_size bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::span<const std::byte> bytes;
};

// Serializes tensors (sorted by name, 8-byte aligned header) into a buffer.
StatusOr<std::vector<uint8_t>> encode_safetensors(
    const std::vector<TensorToWrite>& tensors,
    const std::map<std::string, std::string>& metadata = {});
// Writes durably (temp → fsync → rename).
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {});

// Converts a tensor of dtype F32/BF16/F16 to f32 values.
StatusOr<std::vector<float>> tensor_to_f32(const TensorInfo& t);

}  // namespace pagedkv::model
