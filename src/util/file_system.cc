// POSIX implementation of the FileSystem seam and the durable-write recipe.
#include "util/file_system.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>

namespace pagedkv {
namespace {

Status errno_status(const std::string& what, const std::string& path, int err) {
  std::string msg = what + " '" + path + "': " + std::strerror(err);
  if (err == ENOENT) return not_found(msg);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(msg);
  return io_error(msg);
}

// Reads a whole regular file. O_NONBLOCK so that opening a FIFO never waits for
// a writer; fstat then refuses anything that is not a regular file.
StatusOr<std::vector<uint8_t>> read_regular(const std::string& path, uint64_t max_bytes,
                                            bool follow_symlinks, uint64_t prefix = UINT64_MAX) {
  int flags = O_RDONLY | O_CLOEXEC | O_NONBLOCK | (follow_symlinks ? 0 : O_NOFOLLOW);
  int fd = ::open(path.c_str(), flags);
  if (fd < 0) {
    if (errno == ELOOP && !follow_symlinks)
      return io_error("refusing to follow symlink '" + path + "'");
    return errno_status("open", path, errno);
  }
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    int e = errno;
    ::close(fd);
    return errno_status("stat", path, e);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    return io_error("'" + path + "' is not a regular file");
  }
  if (static_cast<uint64_t>(st.st_size) > max_bytes) {
    ::close(fd);
    return resource_exhausted("'" + path + "' is " + std::to_string(st.st_size) +
                              " bytes, more than the limit of " + std::to_string(max_bytes));
  }
  std::vector<uint8_t> data(static_cast<size_t>(std::min<uint64_t>(st.st_size, prefix)));
  size_t got = 0;
  while (got < data.size()) {
    ssize_t n = ::read(fd, data.data() + got, data.size() - got);
    if (n < 0) {
      if (errno == EINTR) continue;
      int e = errno;
      ::close(fd);
      return errno_status("read", path, e);
    }
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  data.resize(got);
  return data;
}

class PosixWritableFile final : public WritableFile {
 public:
  PosixWritableFile(int fd, std::string path) : fd_(fd), path_(std::move(path)) {}
  ~PosixWritableFile() override {
    if (fd_ >= 0) ::close(fd_);
  }
  Status append(std::span<const uint8_t> bytes) override {
    const uint8_t* p = bytes.data();
    size_t left = bytes.size();
    while (left > 0) {
      ssize_t n = ::write(fd_, p, left);
      if (n < 0) {
        if (errno == EINTR) continue;
        return errno_status("write", path_, errno);
      }
      p += n;
      left -= static_cast<size_t>(n);
    }
    return ok_status();
  }
  Status sync(SyncMode mode) override {
    int rc = 0;
    if (mode == SyncMode::kFsync) rc = ::fsync(fd_);
    if (mode == SyncMode::kFdatasync) rc = ::fdatasync(fd_);
    if (rc != 0) return errno_status("sync", path_, errno);
    return ok_status();
  }
  Status close() override {
    if (fd_ < 0) return ok_status();
    int rc = ::close(fd_);
    fd_ = -1;
    if (rc != 0) return errno_status("close", path_, errno);
    return ok_status();
  }

 private:
  int fd_;
  std::string path_;
};

class PosixFileSystem final : public FileSystem {
 public:
  StatusOr<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                           uint32_t mode) override {
    int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC | O_NOFOLLOW, mode);
    if (fd < 0) return errno_status("create", path, errno);
    return std::unique_ptr<WritableFile>(new PosixWritableFile(fd, path));
  }

  StatusOr<std::vector<uint8_t>> read_file(const std::string& path, uint64_t max_bytes) override {
    return read_regular(path, max_bytes, /*follow_symlinks=*/false);
  }

  StatusOr<std::vector<uint8_t>> read_file_prefix(const std::string& path, uint64_t n) override {
    return read_regular(path, UINT64_MAX, /*follow_symlinks=*/false, n);
  }

  Status rename(const std::string& from, const std::string& to) override {
    if (::rename(from.c_str(), to.c_str()) != 0) return errno_status("rename", from, errno);
    return ok_status();
  }

  Status remove(const std::string& path) override {
    if (::unlink(path.c_str()) != 0) return errno_status("remove", path, errno);
    return ok_status();
  }

  Status create_dirs(const std::string& path, uint32_t mode) override {
    if (path.empty()) return invalid_argument("create_dirs: empty path");
    std::string cur;
    size_t pos = 0;
    while (pos <= path.size()) {
      size_t next = path.find('/', pos);
      if (next == std::string::npos) next = path.size();
      cur = path.substr(0, next);
      pos = next + 1;
      if (cur.empty()) continue;
      if (::mkdir(cur.c_str(), mode) != 0 && errno != EEXIST) {
        return errno_status("mkdir", cur, errno);
      }
    }
    struct stat st;
    if (::stat(path.c_str(), &st) != 0) return errno_status("stat", path, errno);
    if (!S_ISDIR(st.st_mode)) return io_error("'" + path + "' exists and is not a directory");
    return ok_status();
  }

  Status sync_dir(const std::string& path) override {
    int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return errno_status("open directory", path, errno);
    int rc = ::fsync(fd);
    int e = errno;
    ::close(fd);
    if (rc != 0) return errno_status("fsync directory", path, e);
    return ok_status();
  }

  StatusOr<FileInfo> stat(const std::string& path) override {
    struct stat st;
    FileInfo info;
    if (::lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) return info;  // kMissing
      return errno_status("lstat", path, errno);
    }
    if (S_ISREG(st.st_mode)) {
      info.type = FileType::kRegular;
    } else if (S_ISDIR(st.st_mode)) {
      info.type = FileType::kDirectory;
    } else if (S_ISLNK(st.st_mode)) {
      info.type = FileType::kSymlink;
    } else {
      info.type = FileType::kOther;
    }
    info.size = static_cast<uint64_t>(st.st_size);
    info.mtime_ns = static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000LL + st.st_mtim.tv_nsec;
    info.mode = st.st_mode & 07777;
    return info;
  }

  StatusOr<std::vector<std::string>> list_dir(const std::string& dir) override {
    DIR* d = ::opendir(dir.c_str());
    if (d == nullptr) return errno_status("opendir", dir, errno);
    std::vector<std::string> names;
    while (struct dirent* e = ::readdir(d)) {
      std::string n(e->d_name);
      if (n == "." || n == "..") continue;
      names.push_back(std::move(n));
    }
    ::closedir(d);
    return names;
  }

  Status touch(const std::string& path) override {
    if (::utimensat(AT_FDCWD, path.c_str(), nullptr, AT_SYMLINK_NOFOLLOW) != 0)
      return errno_status("touch", path, errno);
    return ok_status();
  }

  StatusOr<DiskSpace> disk_space(const std::string& path) override {
    struct statvfs sv;
    if (::statvfs(path.c_str(), &sv) != 0) return errno_status("statvfs", path, errno);
    DiskSpace d;
    d.total_bytes = static_cast<uint64_t>(sv.f_blocks) * sv.f_frsize;
    d.free_bytes = static_cast<uint64_t>(sv.f_bavail) * sv.f_frsize;
    return d;
  }
};

}  // namespace

StatusOr<DiskSpace> FileSystem::disk_space(const std::string& path) {
  return failed_precondition("disk_space is not supported by this FileSystem ('" + path + "')");
}

StatusOr<std::vector<uint8_t>> FileSystem::read_file_prefix(const std::string& path, uint64_t n) {
  PKV_ASSIGN_OR_RETURN(auto data, read_file(path, UINT64_MAX));
  if (data.size() > n) data.resize(static_cast<size_t>(n));
  return data;
}

FileSystem& FileSystem::posix() {
  static PosixFileSystem fs;
  return fs;
}

StatusOr<std::vector<uint8_t>> read_regular_file(const std::string& path, uint64_t max_bytes) {
  return read_regular(path, max_bytes, /*follow_symlinks=*/true);
}

std::string dir_name(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

Status write_file_durably(FileSystem& fs, const std::string& path, std::span<const uint8_t> bytes,
                          uint32_t mode, SyncMode sync) {
  // The rename would replace a device node, FIFO or socket (`--out /dev/full`)
  // with a regular file: refuse any existing target that is not a regular file
  // (a symlink is replaced, never followed).
  auto existing = fs.stat(path);
  if (existing.ok() &&
      (existing->type == FileType::kOther || existing->type == FileType::kDirectory)) {
    return invalid_argument("refusing to write '" + path +
                            "': it exists and is not a regular file (a device, FIFO, socket "
                            "or directory)");
  }
  static std::atomic<uint64_t> counter{0};
  std::string tmp =
      path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter.fetch_add(1));
  auto file_or = fs.create_exclusive(tmp, mode);
  if (!file_or.ok()) return file_or.status();
  auto file = std::move(file_or).value();
  Status st = file->append(bytes);
  if (st.ok()) st = file->sync(sync);
  Status close_st = file->close();
  if (st.ok()) st = close_st;
  if (st.ok()) st = fs.rename(tmp, path);
  if (!st.ok()) {
    fs.remove(tmp).ignore_error();
    return st;
  }
  if (sync != SyncMode::kNone) PKV_RETURN_IF_ERROR(fs.sync_dir(dir_name(path)));
  return ok_status();
}

}  // namespace pagedkv
