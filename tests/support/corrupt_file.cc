// Test support: corrupting a file in place (see corrupt_file.h).
#include "corrupt_file.h"

#include <fcntl.h>
#include <unistd.h>

namespace pagedkv::test {

bool xor_byte_in_file(const std::string& path, uint64_t offset, uint8_t mask) {
  const int fd = ::open(path.c_str(), O_RDWR);
  if (fd < 0) return false;
  uint8_t b = 0;
  const off_t off = static_cast<off_t>(offset);
  bool ok = ::pread(fd, &b, 1, off) == 1;
  b ^= mask;
  ok = ok && ::pwrite(fd, &b, 1, off) == 1;
  ::close(fd);
  return ok;
}

}  // namespace pagedkv::test
