// FaultInjectionFileSystem: error injection, torn writes, read bit flips and a
// simulated power cut over a real directory (see the header for the model).
#include "util/fault_injection_file_system.h"

#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace pagedkv {

class FaultWritableFile final : public WritableFile {
 public:
  FaultWritableFile(FaultInjectionFileSystem& fs, std::unique_ptr<WritableFile> base,
                    std::string path)
      : fs_(fs), base_(std::move(base)), path_(std::move(path)) {}

  Status append(std::span<const uint8_t> bytes) override {
    PKV_RETURN_IF_ERROR(fs_.maybe_fail(FaultInjectionFileSystem::Op::kAppend, path_));
    double keep = -1.0;
    {
      std::lock_guard<std::mutex> lock(fs_.mu_);
      keep = fs_.tear_keep_fraction_;
      if (keep >= 0.0) {
        fs_.tear_keep_fraction_ = -1.0;
        ++fs_.fired_;
      }
    }
    if (keep >= 0.0) {
      size_t n = static_cast<size_t>(keep * static_cast<double>(bytes.size()));
      if (n > bytes.size()) n = bytes.size();
      PKV_RETURN_IF_ERROR(base_->append(bytes.first(n)));
      fs_.on_append(path_, n);
      return io_error("injected torn write on '" + path_ + "' after " + std::to_string(n) + " of " +
                      std::to_string(bytes.size()) + " bytes");
    }
    PKV_RETURN_IF_ERROR(base_->append(bytes));
    fs_.on_append(path_, bytes.size());
    return ok_status();
  }

  Status sync(SyncMode mode) override {
    PKV_RETURN_IF_ERROR(fs_.maybe_fail(FaultInjectionFileSystem::Op::kSync, path_));
    PKV_RETURN_IF_ERROR(base_->sync(mode));
    if (mode != SyncMode::kNone) fs_.on_sync(path_);
    return ok_status();
  }

  Status close() override {
    Status injected = fs_.maybe_fail(FaultInjectionFileSystem::Op::kClose, path_);
    Status st = base_->close();  // the descriptor is released either way
    if (!injected.ok()) return injected;
    return st;
  }

 private:
  FaultInjectionFileSystem& fs_;
  std::unique_ptr<WritableFile> base_;
  std::string path_;
};

FaultInjectionFileSystem::FaultInjectionFileSystem(FileSystem& base) : base_(base) {}

void FaultInjectionFileSystem::fail_op(Op op, int err, int count, int skip) {
  std::lock_guard<std::mutex> lock(mu_);
  faults_[op] = Fault{err, count, skip};
}

void FaultInjectionFileSystem::tear_next_append(double keep_fraction) {
  std::lock_guard<std::mutex> lock(mu_);
  tear_keep_fraction_ = keep_fraction < 0.0 ? 0.0 : (keep_fraction > 1.0 ? 1.0 : keep_fraction);
}

void FaultInjectionFileSystem::flip_bit_on_next_read(uint64_t offset, int bit) {
  std::lock_guard<std::mutex> lock(mu_);
  flip_offset_ = static_cast<int64_t>(offset);
  flip_bit_ = bit & 7;
}

void FaultInjectionFileSystem::set_disk_space(DiskSpace space) {
  std::lock_guard<std::mutex> lock(mu_);
  has_disk_space_ = true;
  disk_space_ = space;
}

void FaultInjectionFileSystem::clear_faults() {
  std::lock_guard<std::mutex> lock(mu_);
  faults_.clear();
  tear_keep_fraction_ = -1.0;
  flip_offset_ = -1;
}

uint64_t FaultInjectionFileSystem::faults_fired() const {
  std::lock_guard<std::mutex> lock(mu_);
  return fired_;
}

Status FaultInjectionFileSystem::errno_to_status(const std::string& what, const std::string& path,
                                                 int err) {
  std::string msg = "injected " + what + " failure on '" + path + "': " + std::strerror(err);
  if (err == ENOENT) return not_found(msg);
  if (err == ENOSPC || err == EDQUOT) return resource_exhausted(msg);
  return io_error(msg);
}

Status FaultInjectionFileSystem::maybe_fail(Op op, const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = faults_.find(op);
  if (it == faults_.end() || it->second.count <= 0) return ok_status();
  if (it->second.skip > 0) {
    --it->second.skip;
    return ok_status();
  }
  --it->second.count;
  ++fired_;
  static const char* const kNames[] = {"create", "append", "sync",     "close",       "rename",
                                       "remove", "read",   "sync_dir", "create_dirs", "touch"};
  return errno_to_status(kNames[static_cast<int>(op)], path, it->second.err);
}

void FaultInjectionFileSystem::on_append(const std::string& path, uint64_t bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  files_[path].size += bytes;
}

void FaultInjectionFileSystem::on_sync(const std::string& path) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& f = files_[path];
  f.synced_size = f.size;
}

StatusOr<std::unique_ptr<WritableFile>> FaultInjectionFileSystem::create_exclusive(
    const std::string& path, uint32_t mode) {
  PKV_RETURN_IF_ERROR(maybe_fail(Op::kCreate, path));
  auto base_or = base_.create_exclusive(path, mode);
  if (!base_or.ok()) return base_or.status();
  {
    std::lock_guard<std::mutex> lock(mu_);
    files_[path] = FileState{};
    dir_changes_.push_back(DirChange{DirChange::kCreated, dir_name(path), "", path});
  }
  return std::unique_ptr<WritableFile>(
      new FaultWritableFile(*this, std::move(base_or).value(), path));
}

StatusOr<std::vector<uint8_t>> FaultInjectionFileSystem::read_file(const std::string& path,
                                                                   uint64_t max_bytes) {
  PKV_RETURN_IF_ERROR(maybe_fail(Op::kRead, path));
  auto data_or = base_.read_file(path, max_bytes);
  if (!data_or.ok()) return data_or;
  std::lock_guard<std::mutex> lock(mu_);
  if (flip_offset_ >= 0 && static_cast<uint64_t>(flip_offset_) < data_or->size()) {
    (*data_or)[static_cast<size_t>(flip_offset_)] ^= static_cast<uint8_t>(1u << flip_bit_);
    flip_offset_ = -1;
    ++fired_;
  }
  return data_or;
}

StatusOr<std::vector<uint8_t>> FaultInjectionFileSystem::read_file_prefix(const std::string& path,
                                                                          uint64_t n) {
  // Faults apply to the full read that follows a header check, not to the peek.
  return base_.read_file_prefix(path, n);
}

Status FaultInjectionFileSystem::rename(const std::string& from, const std::string& to) {
  PKV_RETURN_IF_ERROR(maybe_fail(Op::kRename, from));
  PKV_RETURN_IF_ERROR(base_.rename(from, to));
  std::lock_guard<std::mutex> lock(mu_);
  auto it = files_.find(from);
  if (it != files_.end()) {
    files_[to] = it->second;
    files_.erase(from);
  }
  dir_changes_.push_back(DirChange{DirChange::kRenamed, dir_name(to), from, to});
  return ok_status();
}

Status FaultInjectionFileSystem::remove(const std::string& path) {
  PKV_RETURN_IF_ERROR(maybe_fail(Op::kRemove, path));
  PKV_RETURN_IF_ERROR(base_.remove(path));
  std::lock_guard<std::mutex> lock(mu_);
  files_.erase(path);
  // A removal that is lost at a power cut would resurrect the file; a store must
  // tolerate that anyway (readers verify), so the model keeps removals durable.
  return ok_status();
}

Status FaultInjectionFileSystem::create_dirs(const std::string& path, uint32_t mode) {
  PKV_RETURN_IF_ERROR(maybe_fail(Op::kCreateDirs, path));
  return base_.create_dirs(path, mode);
}

Status FaultInjectionFileSystem::sync_dir(const std::string& path) {
  PKV_RETURN_IF_ERROR(maybe_fail(Op::kSyncDir, path));
  PKV_RETURN_IF_ERROR(base_.sync_dir(path));
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<DirChange> kept;
  for (auto& c : dir_changes_) {
    if (c.dir != path) kept.push_back(std::move(c));
  }
  dir_changes_ = std::move(kept);
  return ok_status();
}

StatusOr<FileInfo> FaultInjectionFileSystem::stat(const std::string& path) {
  return base_.stat(path);
}

StatusOr<std::vector<std::string>> FaultInjectionFileSystem::list_dir(const std::string& dir) {
  return base_.list_dir(dir);
}

Status FaultInjectionFileSystem::touch(const std::string& path) {
  PKV_RETURN_IF_ERROR(maybe_fail(Op::kTouch, path));
  return base_.touch(path);
}

StatusOr<DiskSpace> FaultInjectionFileSystem::disk_space(const std::string& path) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (has_disk_space_) return disk_space_;
  }
  return base_.disk_space(path);
}

Status FaultInjectionFileSystem::power_cut(const PowerCutOptions& options) {
  std::lock_guard<std::mutex> lock(mu_);
  std::mt19937_64 rng(options.seed);
  // 1. Data: every unsynced tail goes (or is torn).
  for (const auto& [path, f] : files_) {
    if (f.size <= f.synced_size) continue;
    uint64_t keep = f.synced_size;
    if (options.torn) keep += rng() % (f.size - f.synced_size + 1);
    if (::truncate(path.c_str(), static_cast<off_t>(keep)) != 0 && errno != ENOENT) {
      return io_error("power_cut: truncate '" + path + "': " + std::strerror(errno));
    }
  }
  // 2. Directory entries changed since the last sync_dir, undone newest first.
  if (!options.keep_directory_changes) {
    for (auto it = dir_changes_.rbegin(); it != dir_changes_.rend(); ++it) {
      if (it->kind == DirChange::kCreated) {
        if (::unlink(it->to.c_str()) != 0 && errno != ENOENT) {
          return io_error("power_cut: unlink '" + it->to + "': " + std::strerror(errno));
        }
      } else if (::rename(it->to.c_str(), it->from.c_str()) != 0 && errno != ENOENT) {
        return io_error("power_cut: rename back '" + it->to + "': " + std::strerror(errno));
      }
    }
  }
  files_.clear();
  dir_changes_.clear();
  faults_.clear();
  tear_keep_fraction_ = -1.0;
  flip_offset_ = -1;
  return ok_status();
}

}  // namespace pagedkv
