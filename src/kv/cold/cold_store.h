// ColdStore: the on-disk cold tier — a directory of verified KV block objects,
// an in-memory index of the keys present, one writer thread behind a bounded
// queue, and a byte quota with LRU eviction.
//
// Threads: the writer thread owns writes, renames and evictions; any thread may
// call contains/read/enqueue. The index and its byte total are guarded by one
// mutex; counters are atomics.
//
// Durability (DESIGN.md): each object is written temp "<hex>.tmp.<pid>.<n>"
// (O_EXCL) → all bytes → fsync/fdatasync (PAGEDKV_COLD_SYNC) → rename to "<hex>"
// → fsync of the directory. Rename atomicity means no reader sees a partial
// object; a crash leaves at most a temp file, removed at the next open once its pid
// is gone. Every read re-verifies both checksums, so even data the disk lost after
// a power cut (with sync off) is a miss, never wrong KV.
//
// Sharing: two processes may use one directory. Writes are atomic renames of
// complete objects; readers verify; eviction and reads tolerate ENOENT (another
// process removed the object); an index miss falls back to one lstat so objects
// written by the other process are found.
//
// Hostile contents: a symlink, FIFO, device or directory where an object should be
// is refused and counted as a corruption — never opened, never followed (lstat
// plus O_NOFOLLOW|O_NONBLOCK and an fstat regular-file check in read_file); a
// symlink or FIFO entry is unlinked (unlink never follows) by a store that writes,
// a directory left alone. A read-only store (start_writer false: `cold ls`,
// `verify`, `stats`) leaves them in place: it only counts and skips them (it
// still removes temp files of dead writers, which hold no object).
// Every object read first peeks at the fixed header and compares the size it
// declares with the file's size, so a huge file at an object name costs one
// small read, never its whole length.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "kv/cold/cold_key.h"
#include "kv/cold/cold_object.h"
#include "kv/cold/cold_stats.h"
#include "util/file_system.h"

namespace pagedkv::cold {

struct ColdKeyHash {
  size_t operator()(const ColdKey& k) const {
    size_t h;
    static_assert(sizeof(h) <= sizeof(ColdKey));
    std::memcpy(&h, k.data(), sizeof(h));
    return h;
  }
};

inline constexpr size_t kDefaultQueueDepth = 8;

struct ColdStoreOptions {
  std::string root;          // required (see resolve_cold_cache_dir)
  FileSystem* fs = nullptr;  // default: FileSystem::posix()
  uint64_t quota_bytes = 0;  // 0: default_quota_bytes(disk)
  SyncMode sync = SyncMode::kFsync;
  size_t queue_depth = kDefaultQueueDepth;
  DecodeLimits limits;
  bool start_writer = true;  // false: read-only tools (ls/verify/stats)
};

// min(10% of the disk, 100 GiB).
uint64_t default_quota_bytes(const DiskSpace& disk);

struct ColdObjectInfo {
  ColdKey key{};
  uint64_t size = 0;
  int64_t last_use_ns = 0;
};

struct ColdVerifyReport {
  uint64_t objects = 0;  // entries named like an object
  uint64_t ok = 0;
  std::vector<std::pair<std::string, std::string>> bad;  // (name, why)
  uint64_t pruned = 0;
};

// A verified object read back: `object.payload` points into `bytes`.
struct ColdReadResult {
  std::vector<uint8_t> bytes;
  DecodedObject object;
  ColdReadResult() = default;
  ColdReadResult(const ColdReadResult&) = delete;
  ColdReadResult& operator=(const ColdReadResult&) = delete;
  ColdReadResult(ColdReadResult&&) = default;  // vector move keeps the buffer
  ColdReadResult& operator=(ColdReadResult&&) = default;
};

class ColdStore {
 public:
  // Creates the directory (0700), scans it into the index (removing temp files
  // of dead writers, refusing hostile entries), and starts the writer.
  static StatusOr<std::unique_ptr<ColdStore>> open(ColdStoreOptions options);
  ~ColdStore();  // drains the queue, then stops the writer
  ColdStore(const ColdStore&) = delete;
  ColdStore& operator=(const ColdStore&) = delete;

  const std::string& root() const { return root_; }
  uint64_t quota_bytes() const { return quota_bytes_; }
  std::string object_path(const ColdKey& key) const;

  // In the index (persisted by us or found at open/by a read). No I/O.
  bool contains(const ColdKey& key) const;
  // contains() or waiting in the writer queue. No I/O.
  bool contains_or_pending(const ColdKey& key) const;

  // Reads, decodes, verifies and checks `expect`. Outcomes:
  //   OK          hit (hits, reads, bytesRestored counted; last use touched)
  //   NotFound    miss: absent, or open/read failed (misses counted)
  //   Corruption  miss: the file was read but failed verification or was hostile;
  //               it was pruned and one corruption counted (misses counted too)
  // `count_hit` false: a re-read of an object already counted as a hit (a restore
  // retrying a shorter run) counts only `reads`.
  StatusOr<ColdReadResult> read(const ColdExpectation& expect, bool count_hit = true);

  // Queues an encoded object. Returns false (queueDrops counted) when the queue
  // is full. A key already present or pending is accepted without a new write.
  bool enqueue(const ColdKey& key, std::shared_ptr<const std::vector<uint8_t>> bytes);
  // Waits up to `deadline` for a slot; false (queueDrops counted) on timeout.
  bool enqueue_before(const ColdKey& key, std::shared_ptr<const std::vector<uint8_t>> bytes,
                      std::chrono::steady_clock::time_point deadline);
  // Blocks until the queue is empty and the writer is idle.
  void flush();

  // A walk declined a verified object (wrong tokens/geometry, no room).
  void count_restore_decline() { counters_.restore_declines++; }

  ColdCacheStats stats() const;
  uint64_t total_bytes() const;
  size_t object_count() const;
  std::vector<ColdObjectInfo> list() const;

  // The bytes of the object file at `path`, read only after its header's
  // declared size matched the file's size (declared_object_bytes): kCorruption
  // for a hostile entry, a bad header or a size mismatch; NotFound when absent;
  // other errors from the file system.
  StatusOr<std::vector<uint8_t>> read_object_file(const std::string& path);

  // Evicts least-recently-used objects until under quota and ≥5% of the disk free.
  void enforce_quota();
  // Re-checks every entry like fsck; with `prune`, removes the bad ones.
  ColdVerifyReport verify(bool prune);
  // Re-reads the directory into the index (picks up other processes' writes).
  Status rescan();

 private:
  struct Entry {
    uint64_t size = 0;
    int64_t last_use_ns = 0;
  };
  struct Job {
    ColdKey key;
    std::shared_ptr<const std::vector<uint8_t>> bytes;
  };

  explicit ColdStore(ColdStoreOptions options);
  Status scan_locked();
  void writer_loop();
  void write_one(const Job& job);
  void prune(const ColdKey& key, const std::string& why, bool unlink_file);
  bool accept_locked(const Job& job);
  void enforce_quota_locked(std::unique_lock<std::mutex>& lock);

  ColdStoreOptions options_;
  FileSystem& fs_;
  std::string root_;
  uint64_t quota_bytes_ = 0;
  ColdCounters counters_;

  mutable std::mutex mu_;
  std::condition_variable queue_cv_;  // writer waits for work / producers for a slot
  std::condition_variable idle_cv_;
  std::unordered_map<ColdKey, Entry, ColdKeyHash> index_;
  uint64_t total_bytes_ = 0;
  std::deque<Job> queue_;
  std::unordered_set<ColdKey, ColdKeyHash> pending_;
  bool writer_busy_ = false;
  bool stop_ = false;
  std::thread writer_;
};

}  // namespace pagedkv::cold
