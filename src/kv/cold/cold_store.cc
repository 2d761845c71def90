// ColdStore: index, reads with verification, the writer thread and the quota.
#include "kv/cold/cold_store.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "util/logging.h"

namespace pagedkv::cold {
namespace {

constexpr uint64_t kGiB = 1ull << 30;
constexpr uint64_t kFallbackQuota = 10 * kGiB;  // when statvfs is unavailable

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// "<64 hex>.tmp.<pid>.<n>" → pid, or -1.
long temp_owner_pid(const std::string& name) {
  if (name.size() < 64 + 5 || name.compare(64, 5, ".tmp.") != 0) return -1;
  if (!parse_key_hex(name.substr(0, 64), nullptr)) return -1;
  size_t dot = name.find('.', 69);
  if (dot == std::string::npos || dot == 69) return -1;
  long pid = 0;
  for (size_t i = 69; i < dot; ++i) {
    if (name[i] < '0' || name[i] > '9' || pid > 100000000) return -1;
    pid = pid * 10 + (name[i] - '0');
  }
  return pid;
}

bool pid_is_dead(long pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) != 0 && errno == ESRCH;
}

const char* type_name(FileType t) {
  switch (t) {
    case FileType::kRegular:
      return "regular file";
    case FileType::kDirectory:
      return "directory";
    case FileType::kSymlink:
      return "symlink";
    case FileType::kOther:
      return "FIFO/socket/device";
    case FileType::kMissing:
      return "missing";
  }
  return "?";
}

}  // namespace

uint64_t default_quota_bytes(const DiskSpace& disk) {
  return std::min<uint64_t>(disk.total_bytes / 10, 100 * kGiB);
}

ColdStore::ColdStore(ColdStoreOptions options)
    : options_(std::move(options)),
      fs_(options_.fs ? *options_.fs : FileSystem::posix()),
      root_(options_.root) {}

StatusOr<std::unique_ptr<ColdStore>> ColdStore::open(ColdStoreOptions options) {
  if (options.root.empty()) return invalid_argument("cold store: empty cache directory");
  if (options.queue_depth == 0) options.queue_depth = 1;
  std::unique_ptr<ColdStore> store(new ColdStore(std::move(options)));
  FileSystem& fs = store->fs_;
  PKV_RETURN_IF_ERROR(fs.create_dirs(store->root_, 0700).with_context("cold store"));
  PKV_ASSIGN_OR_RETURN(FileInfo info, fs.stat(store->root_));
  if (info.type == FileType::kDirectory && (info.mode & 077) != 0) {
    PKV_LOG(kWarn) << "cold cache directory " << store->root_ << " is accessible to others (mode "
                   << std::oct << info.mode << std::dec << "); objects are still created 0600";
  }
  if (store->options_.quota_bytes != 0) {
    store->quota_bytes_ = store->options_.quota_bytes;
  } else {
    auto disk = fs.disk_space(store->root_);
    store->quota_bytes_ = disk.ok() ? default_quota_bytes(*disk) : kFallbackQuota;
  }
  {
    std::lock_guard<std::mutex> lock(store->mu_);
    PKV_RETURN_IF_ERROR(store->scan_locked());
  }
  if (store->options_.start_writer) {
    store->writer_ = std::thread([s = store.get()] { s->writer_loop(); });
  }
  return store;
}

ColdStore::~ColdStore() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  queue_cv_.notify_all();
  if (writer_.joinable()) writer_.join();
}

std::string ColdStore::object_path(const ColdKey& key) const {
  return join_path(root_, key_hex(key));
}

Status ColdStore::scan_locked() {
  index_.clear();
  total_bytes_ = 0;
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> names, fs_.list_dir(root_));
  for (const std::string& name : names) {
    ColdKey key;
    const std::string path = join_path(root_, name);
    if (parse_key_hex(name, &key)) {
      auto info = fs_.stat(path);
      if (!info.ok() || info->type == FileType::kMissing) continue;  // raced with a remover
      if (info->type != FileType::kRegular) {
        counters_.corruptions++;
        PKV_LOG(kWarn) << "cold store: refusing " << type_name(info->type) << " at object name "
                       << path;
        // A read-only store (ls, verify, stats) changes nothing.
        if (options_.start_writer && info->type != FileType::kDirectory) {
          fs_.remove(path).ignore_error();
        }
        continue;
      }
      index_[key] = Entry{info->size, info->mtime_ns};
      total_bytes_ += info->size;
      continue;
    }
    long pid = temp_owner_pid(name);
    if (pid > 0 && pid != static_cast<long>(::getpid()) && pid_is_dead(pid)) {
      fs_.remove(path).ignore_error();  // a writer died mid-object
    }
  }
  return ok_status();
}

Status ColdStore::rescan() {
  std::lock_guard<std::mutex> lock(mu_);
  return scan_locked();
}

bool ColdStore::contains(const ColdKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) != 0;
}

bool ColdStore::contains_or_pending(const ColdKey& key) const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.count(key) != 0 || pending_.count(key) != 0;
}

void ColdStore::prune(const ColdKey& key, const std::string& why, bool unlink_file) {
  counters_.corruptions++;
  PKV_LOG(kWarn) << "cold store: pruning " << key_hex(key) << ": " << why;
  const std::string path = object_path(key);
  if (unlink_file) {
    Status st = fs_.remove(path);
    if (!st.ok() && st.code() != StatusCode::kNotFound) {
      PKV_LOG(kWarn) << "cold store: could not prune " << path << ": " << st.to_string();
    }
  }
  std::lock_guard<std::mutex> lock(mu_);
  auto it = index_.find(key);
  if (it != index_.end()) {
    total_bytes_ -= std::min(total_bytes_, it->second.size);
    index_.erase(it);
  }
}

StatusOr<std::vector<uint8_t>> ColdStore::read_object_file(const std::string& path) {
  PKV_ASSIGN_OR_RETURN(FileInfo info, fs_.stat(path));
  if (info.type == FileType::kMissing) return not_found("cold object " + path + " is absent");
  if (info.type != FileType::kRegular) {
    return corruption("cold object " + path + ": not a regular file: " + type_name(info.type));
  }
  PKV_ASSIGN_OR_RETURN(auto prefix, fs_.read_file_prefix(path, kFixedHeaderBytes));
  auto declared = declared_object_bytes(prefix, options_.limits);
  if (!declared.ok()) return declared.status().with_context(path);
  if (*declared != info.size) {
    return corruption("cold object " + path + ": the file is " + std::to_string(info.size) +
                      " bytes but its header declares " + std::to_string(*declared));
  }
  auto bytes = fs_.read_file(path, *declared);
  if (!bytes.ok() && bytes.status().code() == StatusCode::kResourceExhausted) {
    // It grew between the stat and the read: larger than it declares.
    return corruption(bytes.status().message());
  }
  return bytes;
}

StatusOr<ColdReadResult> ColdStore::read(const ColdExpectation& expect, bool count_hit) {
  const std::string path = object_path(expect.key);
  auto miss = [&](Status st) -> Status {
    counters_.misses++;
    return st;
  };
  // Never open what is not a regular file.
  auto info = fs_.stat(path);
  if (!info.ok()) return miss(not_found("cold object " + path + ": " + info.status().message()));
  if (info->type == FileType::kMissing) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = index_.find(expect.key);
    if (it != index_.end()) {  // evicted by another process
      total_bytes_ -= std::min(total_bytes_, it->second.size);
      index_.erase(it);
    }
    return miss(not_found("cold object " + key_hex(expect.key) + " is absent"));
  }
  if (info->type != FileType::kRegular) {
    std::string why = std::string("hostile entry: ") + type_name(info->type);
    prune(expect.key, why, info->type != FileType::kDirectory);
    return miss(corruption("cold object " + path + ": " + why));
  }
  auto bytes = read_object_file(path);
  if (!bytes.ok()) {
    if (bytes.status().code() == StatusCode::kCorruption) {  // bad header or size
      prune(expect.key, bytes.status().message(), true);
      return miss(bytes.status());
    }
    return miss(not_found("cold object read failed: " + bytes.status().message()));
  }
  counters_.reads++;
  ColdReadResult result;
  result.bytes = std::move(bytes).value();
  auto decoded = decode_object(result.bytes, options_.limits);
  Status st = decoded.ok() ? check_expectation(decoded->header, expect) : decoded.status();
  if (!st.ok()) {
    prune(expect.key, st.message(), true);
    return miss(st);
  }
  result.object = std::move(decoded).value();
  if (count_hit) {
    counters_.hits++;
    counters_.bytes_restored += result.object.payload.size();
  }
  fs_.touch(path).ignore_error();  // last use for LRU; best effort
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto [it, inserted] = index_.try_emplace(expect.key, Entry{result.bytes.size(), now_ns()});
    if (inserted) {
      total_bytes_ += result.bytes.size();
    } else {
      it->second.last_use_ns = now_ns();
    }
  }
  return result;
}

bool ColdStore::accept_locked(const Job& job) {
  queue_.push_back(job);
  pending_.insert(job.key);
  counters_.enqueued++;
  queue_cv_.notify_all();
  return true;
}

bool ColdStore::enqueue(const ColdKey& key, std::shared_ptr<const std::vector<uint8_t>> bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  if (index_.count(key) || pending_.count(key)) return true;
  if (stop_ || !options_.start_writer || queue_.size() >= options_.queue_depth) {
    counters_.queue_drops++;
    return false;
  }
  return accept_locked(Job{key, std::move(bytes)});
}

bool ColdStore::enqueue_before(const ColdKey& key,
                               std::shared_ptr<const std::vector<uint8_t>> bytes,
                               std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  if (index_.count(key) || pending_.count(key)) return true;
  bool room = options_.start_writer && queue_cv_.wait_until(lock, deadline, [&] {
    return stop_ || queue_.size() < options_.queue_depth;
  }) && !stop_;
  if (!room) {
    counters_.queue_drops++;
    return false;
  }
  return accept_locked(Job{key, std::move(bytes)});
}

void ColdStore::flush() {
  std::unique_lock<std::mutex> lock(mu_);
  idle_cv_.wait(lock, [&] { return queue_.empty() && !writer_busy_; });
}

void ColdStore::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  for (;;) {
    queue_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (queue_.empty()) break;  // stop_ and drained
    Job job = std::move(queue_.front());
    queue_.pop_front();
    writer_busy_ = true;
    queue_cv_.notify_all();  // a slot freed
    lock.unlock();
    write_one(job);
    lock.lock();
    pending_.erase(job.key);
    writer_busy_ = false;
    idle_cv_.notify_all();
  }
  idle_cv_.notify_all();
}

void ColdStore::write_one(const Job& job) {
  const std::string path = object_path(job.key);
  const uint64_t size = job.bytes ? job.bytes->size() : 0;
  if (size == 0 || size > quota_bytes_) {
    counters_.write_errors++;
    PKV_LOG(kDebug) << "cold store: object " << key_hex(job.key) << " of " << size
                    << " bytes does not fit the quota of " << quota_bytes_;
    return;
  }
  auto info = fs_.stat(path);
  if (info.ok() && info->type == FileType::kRegular) {  // another process wrote it
    std::unique_lock<std::mutex> lock(mu_);
    if (index_.try_emplace(job.key, Entry{info->size, info->mtime_ns}).second) {
      total_bytes_ += info->size;
    }
    return;
  }
  Status st = write_file_durably(fs_, path, *job.bytes, 0600, options_.sync);
  if (!st.ok()) {
    uint64_t n = ++counters_.write_errors;
    if (n <= 3) {
      PKV_LOG(kWarn) << "cold store: write failed (not fatal): " << st.to_string();
    }
    return;
  }
  counters_.bytes_written += size;
  std::unique_lock<std::mutex> lock(mu_);
  auto [it, inserted] = index_.try_emplace(job.key, Entry{size, now_ns()});
  if (inserted) {
    total_bytes_ += size;
  } else {
    total_bytes_ = total_bytes_ - std::min(total_bytes_, it->second.size) + size;
    it->second = Entry{size, now_ns()};
  }
  enforce_quota_locked(lock);
}

void ColdStore::enforce_quota() {
  std::unique_lock<std::mutex> lock(mu_);
  enforce_quota_locked(lock);
}

void ColdStore::enforce_quota_locked(std::unique_lock<std::mutex>& /*lock*/) {
  uint64_t need_free = 0;
  auto disk = fs_.disk_space(root_);
  if (disk.ok() && disk->total_bytes > 0) {
    const uint64_t reserve = disk->total_bytes / 20;  // keep ≥5% of the disk free
    if (disk->free_bytes < reserve) need_free = reserve - disk->free_bytes;
  }
  if (total_bytes_ <= quota_bytes_ && need_free == 0) return;
  // Evict down to 90% of the quota so a full directory does not sort on every write.
  const uint64_t target =
      total_bytes_ > quota_bytes_ ? quota_bytes_ - quota_bytes_ / 10 : total_bytes_;
  std::vector<std::pair<int64_t, ColdKey>> order;
  order.reserve(index_.size());
  for (const auto& [k, e] : index_) order.emplace_back(e.last_use_ns, k);
  std::sort(order.begin(), order.end());
  uint64_t freed = 0;
  for (const auto& [t, k] : order) {
    if (total_bytes_ <= target && freed >= need_free) break;
    auto it = index_.find(k);
    const uint64_t size = it->second.size;
    Status st = fs_.remove(object_path(k));
    if (st.ok()) {
      counters_.evictions++;
    } else if (st.code() != StatusCode::kNotFound) {
      PKV_LOG(kWarn) << "cold store: eviction failed: " << st.to_string();
      continue;  // keep it indexed; try the next one
    }
    total_bytes_ -= std::min(total_bytes_, size);
    freed += size;
    index_.erase(it);
  }
}

ColdCacheStats ColdStore::stats() const {
  ColdCacheStats s;
  counters_.fill(&s);
  s.enabled = true;
  s.root = root_;
  s.quota_bytes = quota_bytes_;
  return s;
}

uint64_t ColdStore::total_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return total_bytes_;
}

size_t ColdStore::object_count() const {
  std::lock_guard<std::mutex> lock(mu_);
  return index_.size();
}

std::vector<ColdObjectInfo> ColdStore::list() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::vector<ColdObjectInfo> out;
  out.reserve(index_.size());
  for (const auto& [k, e] : index_) out.push_back(ColdObjectInfo{k, e.size, e.last_use_ns});
  std::sort(out.begin(), out.end(),
            [](const ColdObjectInfo& a, const ColdObjectInfo& b) { return a.key < b.key; });
  return out;
}

ColdVerifyReport ColdStore::verify(bool prune_bad) {
  ColdVerifyReport report;
  auto names = fs_.list_dir(root_);
  if (!names.ok()) {
    report.bad.emplace_back(root_, names.status().to_string());
    return report;
  }
  std::sort(names->begin(), names->end());
  for (const std::string& name : *names) {
    ColdKey key;
    if (!parse_key_hex(name, &key)) continue;
    report.objects++;
    const std::string path = join_path(root_, name);
    std::string why;
    bool removable = true;
    auto info = fs_.stat(path);
    if (!info.ok()) {
      why = info.status().to_string();
      removable = false;
    } else if (info->type == FileType::kMissing) {
      report.objects--;  // raced with a remover
      continue;
    } else if (info->type != FileType::kRegular) {
      why = std::string("not a regular file: ") + type_name(info->type);
      removable = info->type != FileType::kDirectory;
    } else {
      auto bytes = read_object_file(path);
      if (!bytes.ok()) {
        why = bytes.status().to_string();
        removable = bytes.status().code() == StatusCode::kCorruption;
      } else {
        auto decoded = decode_object(*bytes, options_.limits);
        if (!decoded.ok()) {
          why = decoded.status().message();
        } else if (decoded->header.key != key) {
          why = "header key differs from the file name";
        }
      }
    }
    if (why.empty()) {
      report.ok++;
      continue;
    }
    report.bad.emplace_back(name, why);
    if (prune_bad && removable) {
      prune(key, why, true);
      report.pruned++;
    }
  }
  return report;
}

}  // namespace pagedkv::cold
