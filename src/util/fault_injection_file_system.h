// A FileSystem for tests that injects the faults a durable store must survive:
// an operation failing with ENOSPC/EIO/..., a torn write (a prefix of the bytes
// lands, then the call fails), a bit flipped in data handed back by a read, and a
// simulated power cut that drops everything not yet made durable.
//
// It wraps a real FileSystem (normally POSIX on a temp directory) and keeps a model
// of what is durable: per file the size at its last sync, per directory the entry
// changes (creates, renames) since its last sync_dir. power_cut() rewinds the disk
// to that model — unsynced tails are truncated away (or torn at a random point),
// and unsynced directory changes are undone in reverse order — exactly the
// guarantees POSIX gives and no more. power_cut() truncates with truncate(2)
// directly, so the wrapped FileSystem must be the POSIX one.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <random>
#include <string>
#include <vector>

#include "util/file_system.h"

namespace pagedkv {

class FaultInjectionFileSystem final : public FileSystem {
 public:
  enum class Op {
    kCreate,
    kAppend,
    kSync,
    kClose,
    kRename,
    kRemove,
    kRead,
    kSyncDir,
    kCreateDirs,
    kTouch,
  };

  explicit FaultInjectionFileSystem(FileSystem& base = FileSystem::posix());

  // The next `count` calls of `op`, after letting `skip` calls succeed, fail with
  // `err` (an errno value: ENOSPC, EIO, EDQUOT, ...) without touching the disk.
  void fail_op(Op op, int err, int count = 1, int skip = 0);
  // The next append writes only floor(keep_fraction * size) bytes, then fails with EIO.
  void tear_next_append(double keep_fraction);
  // The next successful read returns data with bit `bit` of byte `offset` flipped
  // (when the file is that long); the file on disk is unchanged.
  void flip_bit_on_next_read(uint64_t offset, int bit = 0);
  // Forces disk_space() to report `space` (quota tests).
  void set_disk_space(DiskSpace space);
  // Removes every pending fault (not the durability model).
  void clear_faults();
  // How many faults fired so far.
  uint64_t faults_fired() const;

  struct PowerCutOptions {
    // true: an unsynced tail is cut at a random point between the synced size and
    // the current size (a torn write); false: exactly at the synced size.
    bool torn = false;
    // true: unsynced directory changes survive (metadata journalled ahead of data,
    // as on ext4 data=writeback) — the harshest case for a reader.
    bool keep_directory_changes = false;
    uint64_t seed = 1;
  };
  // Rewinds the disk to what was durable; afterwards the model starts clean.
  Status power_cut(const PowerCutOptions& options);

  // FileSystem.
  StatusOr<std::unique_ptr<WritableFile>> create_exclusive(const std::string& path,
                                                           uint32_t mode) override;
  StatusOr<std::vector<uint8_t>> read_file(const std::string& path, uint64_t max_bytes) override;
  StatusOr<std::vector<uint8_t>> read_file_prefix(const std::string& path, uint64_t n) override;
  Status rename(const std::string& from, const std::string& to) override;
  Status remove(const std::string& path) override;
  Status create_dirs(const std::string& path, uint32_t mode) override;
  Status sync_dir(const std::string& path) override;
  StatusOr<FileInfo> stat(const std::string& path) override;
  StatusOr<std::vector<std::string>> list_dir(const std::string& dir) override;
  Status touch(const std::string& path) override;
  StatusOr<DiskSpace> disk_space(const std::string& path) override;

 private:
  friend class FaultWritableFile;
  struct FileState {
    uint64_t size = 0;
    uint64_t synced_size = 0;
  };
  struct DirChange {
    enum Kind { kCreated, kRenamed } kind;
    std::string dir;
    std::string from;  // kRenamed
    std::string to;    // path created / renamed to
  };
  struct Fault {
    int err = 0;
    int count = 0;
    int skip = 0;
  };

  // Returns a non-OK Status when a fault is armed for `op` (consuming it).
  Status maybe_fail(Op op, const std::string& path);
  void on_append(const std::string& path, uint64_t bytes);
  void on_sync(const std::string& path);
  static Status errno_to_status(const std::string& what, const std::string& path, int err);

  FileSystem& base_;
  mutable std::mutex mu_;
  std::map<Op, Fault> faults_;
  double tear_keep_fraction_ = -1.0;
  int64_t flip_offset_ = -1;
  int flip_bit_ = 0;
  bool has_disk_space_ = false;
  DiskSpace disk_space_;
  uint64_t fired_ = 0;
  std::map<std::string, FileState> files_;  // files written since the last power cut
  std::vector<DirChange> dir_changes_;      // not yet made durable by sync_dir
};

}  // namespace pagedkv
