// safetensors reader (mmap + validation) and writer. See safetensors.h.
#include "model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>

#include "util/file_system.h"

namespace pagedkv::model {
namespace {

constexpr uint64_t kMaxHeaderBytes = 100ull << 20;  // the format's own limit

struct DTypeName {
  const char* name;
  DType dtype;
  size_t size;
};
constexpr DTypeName kDTypes[] = {
    {"F32", DType::kF32, 4}, {"BF16", DType::kBF16, 2}, {"F16", DType::kF16, 2},
    {"I64", DType::kI64, 8}, {"I32", DType::kI32, 4},   {"U8", DType::kU8, 1},
    {"I8", DType::kI8, 1},   {"F64", DType::kF64, 8},   {"BOOL", DType::kBool, 1},
};

Status bad(const std::string& path, const std::string& what) {
  return invalid_argument("safetensors file " + path + ": " + what);
}

}  // namespace

bool parse_dtype(const std::string& s, DType* out) {
  for (const auto& d : kDTypes) {
    if (s == d.name) {
      *out = d.dtype;
      return true;
    }
  }
  return false;
}

const char* dtype_name(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.name;
  return "?";
}

size_t dtype_size(DType t) {
  for (const auto& d : kDTypes)
    if (d.dtype == t) return d.size;
  return 0;
}

int64_t TensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  return s + "]";
}

SafetensorsFile::~SafetensorsFile() {
  if (map_ != nullptr && map_ != MAP_FAILED) munmap(map_, map_size_);
}

StatusOr<std::unique_ptr<SafetensorsFile>> SafetensorsFile::open(const std::string& path) {
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  // O_NONBLOCK: opening a FIFO must not wait for a writer; fstat refuses it below.
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    int e = errno;
    if (e == ENOENT) return not_found("safetensors file " + path + " does not exist");
    return io_error("cannot open safetensors file " + path + ": " + std::strerror(e));
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return bad(path, "not a regular file (a FIFO, device or directory cannot hold tensors)");
  }
  uint64_t size = static_cast<uint64_t>(st.st_size);
  if (size < 8) {
    ::close(fd);
    return bad(
        path, "truncated: " + std::to_string(size) + " bytes, the 8-byte header length is missing");
  }
  void* m = mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
  int e = errno;
  ::close(fd);
  if (m == MAP_FAILED) return io_error("cannot mmap " + path + ": " + std::strerror(e));
  f->map_ = m;
  f->map_size_ = size;
  const auto* base = static_cast<const std::byte*>(m);

  uint64_t header_len = 0;
  for (int i = 0; i < 8; ++i) header_len |= static_cast<uint64_t>(base[i]) << (8 * i);
  if (header_len > kMaxHeaderBytes) {
    return bad(path, "header length " + std::to_string(header_len) + " exceeds the limit of " +
                         std::to_string(kMaxHeaderBytes) + " bytes");
  }
  if (header_len > size - 8) {
    return bad(path, "truncated: header length " + std::to_string(header_len) +
                         " runs past the end of the file (" + std::to_string(size) + " bytes)");
  }
  const char* hbegin = reinterpret_cast<const char*>(base + 8);
  const std::byte* data = base + 8 + header_len;
  uint64_t data_size = size - 8 - header_len;

  // Parse, rejecting duplicate top-level names (nlohmann would keep the last one).
  std::set<std::string> seen;
  std::string duplicate;
  nlohmann::json header;
  try {
    header = nlohmann::json::parse(
        hbegin, hbegin + header_len,
        [&](int depth, nlohmann::json::parse_event_t event, nlohmann::json& parsed) {
          if (event == nlohmann::json::parse_event_t::key && depth == 1) {
            std::string k = parsed.get<std::string>();
            if (!seen.insert(k).second && duplicate.empty()) duplicate = k;
          }
          return true;
        });
  } catch (const nlohmann::json::exception& ex) {
    return bad(path, std::string("header is not valid JSON: ") + ex.what());
  }
  if (!duplicate.empty()) return bad(path, "tensor name '" + duplicate + "' appears twice");
  if (!header.is_object()) return bad(path, "header is not a JSON object");

  struct Range {
    uint64_t begin, end;
    size_t idx;
  };
  std::vector<Range> ranges;
  for (auto it = header.begin(); it != header.end(); ++it) {
    const std::string& name = it.key();
    const auto& v = it.value();
    if (name == "__metadata__") {
      if (!v.is_object()) return bad(path, "__metadata__ is not an object");
      for (auto m2 = v.begin(); m2 != v.end(); ++m2) {
        if (!m2.value().is_string())
          return bad(path, "__metadata__." + m2.key() + " is not a string");
        f->metadata_[m2.key()] = m2.value().get<std::string>();
      }
      continue;
    }
    std::string where = "tensor '" + name + "'";
    if (!v.is_object()) return bad(path, where + " is not an object");
    if (!v.contains("dtype") || !v["dtype"].is_string())
      return bad(path, where + ": missing or non-string dtype");
    TensorInfo t;
    t.name = name;
    std::string ds = v["dtype"].get<std::string>();
    if (!parse_dtype(ds, &t.dtype)) return bad(path, where + ": unsupported dtype " + ds);
    if (!v.contains("shape") || !v["shape"].is_array())
      return bad(path, where + ": missing or non-array shape");
    uint64_t numel = 1;
    for (const auto& d : v["shape"]) {
      if (!d.is_number_integer() || d.get<int64_t>() < 0)
        return bad(path, where + ": shape entries must be non-negative integers");
      uint64_t dim = d.get<uint64_t>();
      if (dim != 0 && numel > (uint64_t{1} << 62) / dim)
        return bad(path, where + ": shape overflows");
      numel *= dim;
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    if (!v.contains("data_offsets") || !v["data_offsets"].is_array() ||
        v["data_offsets"].size() != 2 || !v["data_offsets"][0].is_number_unsigned() ||
        !v["data_offsets"][1].is_number_unsigned())
      return bad(path, where + ": data_offsets must be two non-negative integers");
    uint64_t b = v["data_offsets"][0].get<uint64_t>();
    uint64_t en = v["data_offsets"][1].get<uint64_t>();
    if (b > en) return bad(path, where + ": data_offsets begin > end");
    if (en > data_size) {
      return bad(path, where + ": data_offsets end " + std::to_string(en) +
                           " is past the end of the data section (" + std::to_string(data_size) +
                           " bytes; file truncated?)");
    }
    // numel <= 2^62 and the element size <= 8: the product can still wrap 64
    // bits (2^61 + 1 I64 elements "need" 8 bytes). Checked for every tensor,
    // unused ones too; past this, want == end - begin <= data size holds.
    const uint64_t esize = dtype_size(t.dtype);
    if (numel > std::numeric_limits<uint64_t>::max() / esize) {
      return bad(
          path, where + ": shape " + t.shape_string() + " x " + ds + " needs more than 2^64 bytes");
    }
    uint64_t want = numel * esize;
    if (want != en - b) {
      return bad(path, where + ": shape " + t.shape_string() + " x " + ds + " needs " +
                           std::to_string(want) + " bytes but data_offsets span " +
                           std::to_string(en - b));
    }
    t.data = data + b;
    t.nbytes = en - b;
    ranges.push_back({b, en, f->tensors_.size()});
    f->tensors_.push_back(std::move(t));
  }
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin < b.begin || (a.begin == b.begin && a.end < b.end);
  });
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].begin < ranges[i - 1].end) {
      return bad(path, "tensors '" + f->tensors_[ranges[i - 1].idx].name + "' and '" +
                           f->tensors_[ranges[i].idx].name + "' have overlapping byte ranges");
    }
  }
  for (size_t i = 0; i < f->tensors_.size(); ++i) f->index_[f->tensors_[i].name] = i;
  return f;
}

const TensorInfo* SafetensorsFile::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &tensors_[it->second];
}

StatusOr<std::vector<uint8_t>> encode_safetensors(
    const std::vector<TensorToWrite>& tensors, const std::map<std::string, std::string>& metadata) {
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(),
            [](const TensorToWrite* a, const TensorToWrite* b) { return a->name < b->name; });
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json m = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) m[k] = v;
    header["__metadata__"] = m;
  }
  uint64_t off = 0;
  for (size_t i = 0; i < sorted.size(); ++i) {
    const auto& t = *sorted[i];
    if (i > 0 && sorted[i - 1]->name == t.name)
      return invalid_argument("encode_safetensors: duplicate tensor name " + t.name);
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return invalid_argument("encode_safetensors: negative dimension in " + t.name);
      numel *= static_cast<uint64_t>(d);
    }
    if (numel * dtype_size(t.dtype) != t.bytes.size())
      return invalid_argument("encode_safetensors: tensor " + t.name + " has " +
                              std::to_string(t.bytes.size()) + " bytes, its shape needs " +
                              std::to_string(numel * dtype_size(t.dtype)));
    nlohmann::ordered_json e;
    e["dtype"] = dtype_name(t.dtype);
    e["shape"] = t.shape;
    e["data_offsets"] = {off, off + t.bytes.size()};
    header[t.name] = e;
    off += t.bytes.size();
  }
  std::string h = header.dump();
  while ((h.size() + 8) % 8 != 0) h.push_back(' ');
  std::vector<uint8_t> out;
  out.reserve(8 + h.size() + off);
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<uint8_t>(n >> (8 * i)));
  out.insert(out.end(), h.begin(), h.end());
  for (const auto* t : sorted) {
    const auto* p = reinterpret_cast<const uint8_t*>(t->bytes.data());
    out.insert(out.end(), p, p + t->bytes.size());
  }
  return out;
}

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata) {
  PKV_ASSIGN_OR_RETURN(auto bytes, encode_safetensors(tensors, metadata));
  return write_file_durably(FileSystem::posix(), path, bytes, 0644);
}

StatusOr<std::vector<float>> tensor_to_f32(const TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::kF32:
      // An empty tensor has no data pointer to copy from (memcpy(nullptr, ...) is UB).
      if (!out.empty()) std::memcpy(out.data(), t.data, out.size() * 4);
      break;
    case DType::kBF16:
    case DType::kF16:
      for (size_t i = 0; i < out.size(); ++i) {
        uint16_t v;
        std::memcpy(&v, t.data + 2 * i, 2);
        out[i] = t.dtype == DType::kBF16 ? bf16_to_f32(v) : f16_to_f32(v);
      }
      break;
    default:
      return invalid_argument("tensor " + t.name + " has dtype " + dtype_name(t.dtype) +
                              ", expected F32, BF16 or F16");
  }
  return out;
}

}  // namespace pagedkv::model
