// The FileSystem seam: every disk access the project makes for data it keeps
// goes through this interface, so tests can substitute a file system that injects
// faults (torn writes, dropped unsynced data, ENOSPC, EIO, bit flips). The POSIX
// implementation is `FileSystem::posix()`.
//
// Durable writes follow one recipe (write_file_durably): create a temp file with
// O_EXCL → write everything → fsync/fdatasync → rename over the target → fsync the
// directory. A reader never sees a partial file.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "pagedkv/status.h"

namespace pagedkv {

enum class FileType { kRegular, kDirectory, kSymlink, kOther, kMissing };

// Capacity of the file system holding a path (statvfs), in bytes.
struct DiskSpace {
  uint64_t total_bytes = 0;
  uint64_t free_bytes = 0;  // available to unprivileged users (f_bavail)
};

struct FileInfo {
  FileType type = FileType::kMissing;
  uint64_t size = 0;
  int64_t mtime_ns = 0;
  uint32_t mode = 0;  // permission bits
};

enum class SyncMode { kFsync, kFdatasync, kNone };

class WritableFile {
 public:
  virtual ~WritableFile() = default;
  virtual Status append(std::span<const uint8_t> bytes) = 0;
  virtual Status sync(SyncMode mode) = 0;
  virtual Status close() = 0;
};

class FileSystem {
 public:
  virtual ~FileSystem() = default;

  // The process-wide POSIX implementation.
  static FileSystem& posix();

  // Creates `path` with O_CREAT|O_EXCL (fails if it exists) and mode `mode`.
  virtual StatusOr<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                                   uint32_t mode) = 0;
  // Reads a whole regular file; refuses symlinks, FIFOs and directories
  // (O_NOFOLLOW|O_NONBLOCK, then fstat). At most `max_bytes` are accepted.
  virtual StatusOr<std::vector<uint8_t>> read_file(const std::string& path, uint64_t max_bytes) = 0;
  // The first min(n, size) bytes of a regular file, with read_file's refusals
  // (a reader checks a header before reading a large body). The default reads
  // the whole file through read_file, so existing test doubles keep compiling.
  virtual StatusOr<std::vector<uint8_t>> read_file_prefix(const std::string& path, uint64_t n);
  virtual Status rename(const std::string& from, const std::string& to) = 0;
  virtual Status remove(const std::string& path) = 0;
  // mkdir -p with `mode` for directories it creates.
  virtual Status create_dirs(const std::string& path, uint32_t mode) = 0;
  virtual Status sync_dir(const std::string& path) = 0;
  // lstat: never follows a symlink.
  virtual StatusOr<FileInfo> stat(const std::string& path) = 0;
  // Names (not paths) in `dir`, without "." and "..".
  virtual StatusOr<std::vector<std::string>> list_dir(const std::string& dir) = 0;
  // Sets the modification time (used as "last use" by LRU policies).
  virtual Status touch(const std::string& path) = 0;
  // Size and free space of the file system that holds `path` (statvfs). The
  // default says "unsupported" so existing test doubles keep compiling.
  virtual StatusOr<DiskSpace> disk_space(const std::string& path);
};

// temp (O_EXCL) → write → sync → rename → directory sync. The temp file lives in
// the target's directory and is removed on any failure. An existing target that
// is a device, FIFO, socket or directory is refused (InvalidArgument), never
// renamed over.
Status write_file_durably(FileSystem& fs, const std::string& path, std::span<const uint8_t> bytes,
                          uint32_t mode, SyncMode sync = SyncMode::kFsync);

// Reads a whole input file (a tokenizer, an ids file) outside the FileSystem seam,
// following symlinks (Hugging Face caches link to blobs) but refusing FIFOs,
// devices and directories without blocking (O_NONBLOCK, then fstat), and files
// larger than `max_bytes` (ResourceExhausted naming the file and the limit).
StatusOr<std::vector<uint8_t>> read_regular_file(const std::string& path, uint64_t max_bytes);

// Directory part of a path ("." when none).
std::string dir_name(const std::string& path);
// "a" + "b" → "a/b".
std::string join_path(const std::string& a, const std::string& b);

}  // namespace pagedkv
