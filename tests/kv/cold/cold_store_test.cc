// ColdStore: durable round trip across reopen, on-disk corruption (miss + prune +
// exactly one corruption), hostile directory entries, the quota with LRU eviction,
// the bounded queue, and two stores sharing one directory.
#include "kv/cold/cold_store.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <condition_variable>
#include <fstream>
#include <thread>

#include "cold_test_util.h"
#include "corrupt_file.h"
#include "util/fault_injection_file_system.h"

namespace pagedkv::cold {
namespace {

using testing::ColdDirTest;

void flip_byte_on_disk(const std::string& path, size_t off) {
  ASSERT_TRUE(test::xor_byte_in_file(path, off, 0x10)) << path << " @" << off;
}

bool exists(const std::string& p) {
  struct stat st;
  return ::lstat(p.c_str(), &st) == 0;
}

using ColdStoreTest = ColdDirTest;

TEST_F(ColdStoreTest, RoundTripSurvivesReopenWithPrivatePermissions) {
  {
    auto store = open();
    ASSERT_NE(store, nullptr);
    for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(write_id(*store, id));
    auto s = store->stats();
    EXPECT_EQ(s.enqueued, 10u);
    EXPECT_EQ(s.write_errors, 0u);
    EXPECT_EQ(s.bytes_written, 10 * make_synthetic_object(fp_, 0).bytes->size());
    EXPECT_TRUE(s.enabled);
    EXPECT_EQ(s.root, root_);
  }
  struct stat st;
  ASSERT_EQ(::stat(root_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  auto store = open();
  ASSERT_NE(store, nullptr);
  EXPECT_EQ(store->object_count(), 10u);
  for (const auto& info : store->list()) {
    const std::string path = store->object_path(info.key);
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    EXPECT_EQ(path.substr(root_.size() + 1), key_hex(info.key));  // named only by the key
  }
  for (uint64_t id = 0; id < 10; ++id) {
    EXPECT_TRUE(store->contains(synthetic_key(fp_, id)));
    EXPECT_TRUE(read_id(*store, id).ok()) << id;
  }
  EXPECT_EQ(read_id(*store, 99).code(), StatusCode::kNotFound);
  auto s = store->stats();
  EXPECT_EQ(s.hits, 10u);
  EXPECT_EQ(s.reads, 10u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.corruptions, 0u);
  EXPECT_EQ(s.bytes_restored, 10 * synthetic_payload(fp_, 0).size());
}

TEST_F(ColdStoreTest, EveryOnDiskByteCorruptionClassIsMissPruneAndOneCorruption) {
  const size_t header = kFixedHeaderBytes + 4 * fp_.block_size + 32;
  const size_t total = make_synthetic_object(fp_, 0).bytes->size();
  const std::vector<std::pair<const char*, size_t>> positions = {
      {"header", 8},
      {"key", 60},
      {"payload start", header},
      {"payload middle", header + (total - header) / 2},
      {"payload end", total - 1},
      {"payload checksum", 170},
      {"header checksum", header - 10}};
  uint64_t id = 0;
  for (const auto& [cls, off] : positions) {
    auto store = open();
    ASSERT_TRUE(write_id(*store, id));
    const std::string path = store->object_path(synthetic_key(fp_, id));
    flip_byte_on_disk(path, off);
    auto store2 = open();  // a fresh process: index from the scan
    Status st = read_id(*store2, id);
    EXPECT_EQ(st.code(), StatusCode::kCorruption) << cls << ": " << st.to_string();
    EXPECT_FALSE(exists(path)) << cls << " not pruned";
    EXPECT_FALSE(store2->contains(synthetic_key(fp_, id))) << cls;
    EXPECT_EQ(read_id(*store2, id).code(), StatusCode::kNotFound) << cls;
    auto s = store2->stats();
    EXPECT_EQ(s.corruptions, 1u) << cls;
    EXPECT_EQ(s.misses, 2u) << cls;
    EXPECT_EQ(s.hits, 0u) << cls;
    ++id;
  }
}

TEST_F(ColdStoreTest, TruncatedOrMisnamedObjectIsPruned) {
  auto store = open();
  ASSERT_TRUE(write_id(*store, 1));
  ASSERT_TRUE(write_id(*store, 2));
  const std::string p1 = store->object_path(synthetic_key(fp_, 1));
  const std::string p2 = store->object_path(synthetic_key(fp_, 2));
  ASSERT_EQ(::truncate(p1.c_str(), 100), 0);
  ASSERT_EQ(::rename(p2.c_str(), store->object_path(synthetic_key(fp_, 3)).c_str()), 0);
  auto fresh = open();
  EXPECT_EQ(read_id(*fresh, 1).code(), StatusCode::kCorruption);
  // Object 2's bytes under object 3's name: the header key differs from the name.
  EXPECT_EQ(read_id(*fresh, 3).code(), StatusCode::kCorruption);
  EXPECT_EQ(fresh->stats().corruptions, 2u);
  EXPECT_EQ(fresh->object_count(), 0u);
}

TEST_F(ColdStoreTest, HostileEntriesAreRefusedCountedAndNeverFollowed) {
  {
    auto store = open();
    ASSERT_TRUE(write_id(*store, 0));
  }
  // A valid object elsewhere, reachable only through a symlink.
  const std::string outside = dir_ + "/outside";
  ASSERT_EQ(::rename((root_ + "/" + key_hex(synthetic_key(fp_, 0))).c_str(), outside.c_str()), 0);
  const std::string link = root_ + "/" + key_hex(synthetic_key(fp_, 0));
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);
  const std::string fifo = root_ + "/" + key_hex(synthetic_key(fp_, 1));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const std::string subdir = root_ + "/" + key_hex(synthetic_key(fp_, 2));
  ASSERT_EQ(::mkdir(subdir.c_str(), 0700), 0);
  ASSERT_EQ(::mkdir((subdir + "/x").c_str(), 0700), 0);
  auto store = open();
  EXPECT_EQ(store->stats().corruptions, 3u);
  EXPECT_EQ(store->object_count(), 0u);
  EXPECT_FALSE(exists(link));
  EXPECT_FALSE(exists(fifo));
  EXPECT_TRUE(exists(subdir + "/x"));  // a directory is refused, not deleted
  EXPECT_TRUE(exists(outside));        // the symlink's target is untouched
  // Entries that appear after open are refused at read time (a FIFO must not block).
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_EQ(read_id(*store, 0).code(), StatusCode::kCorruption);
  EXPECT_EQ(read_id(*store, 1).code(), StatusCode::kCorruption);
  EXPECT_EQ(read_id(*store, 2).code(), StatusCode::kCorruption);
  auto s = store->stats();
  EXPECT_EQ(s.corruptions, 6u);
  EXPECT_EQ(s.hits, 0u);
  EXPECT_TRUE(exists(outside));
  // verify reports the directory and cannot prune it.
  auto report = store->verify(true);
  EXPECT_EQ(report.bad.size(), 1u);
  EXPECT_EQ(report.pruned, 0u);
}

TEST_F(ColdStoreTest, QuotaEvictsLeastRecentlyUsedAndStaysUnderQuota) {
  const uint64_t obj = make_synthetic_object(fp_, 0).bytes->size();
  auto o = options();
  o.quota_bytes = 10 * obj;
  auto store_or = ColdStore::open(o);
  ASSERT_TRUE(store_or.ok());
  auto& store = **store_or;
  for (uint64_t id = 0; id < 10; ++id) ASSERT_TRUE(write_id(store, id));
  EXPECT_EQ(store.stats().evictions, 0u);
  ASSERT_TRUE(read_id(store, 0).ok());  // 0 becomes the most recently used
  for (uint64_t id = 10; id < 40; ++id) {
    ASSERT_TRUE(write_id(store, id));
    EXPECT_LE(store.total_bytes(), o.quota_bytes);
  }
  EXPECT_GT(store.stats().evictions, 0u);
  EXPECT_FALSE(store.contains(synthetic_key(fp_, 1)));  // least recently used went first
  EXPECT_TRUE(store.contains(synthetic_key(fp_, 39)));
  // The directory itself is under quota (what a fresh process sees).
  auto o2 = options();
  o2.quota_bytes = o.quota_bytes;
  o2.start_writer = false;
  auto fresh = ColdStore::open(o2);
  ASSERT_TRUE(fresh.ok());
  EXPECT_LE((*fresh)->total_bytes(), o.quota_bytes);
  EXPECT_EQ((*fresh)->object_count(), store.object_count());
}

TEST_F(ColdStoreTest, KeepsFivePercentOfTheDiskFree) {
  FaultInjectionFileSystem fs;
  const uint64_t obj = make_synthetic_object(fp_, 0).bytes->size();
  fs.set_disk_space(DiskSpace{1000 * obj, 1000 * obj});
  auto store = open(&fs);
  for (uint64_t id = 0; id < 20; ++id) ASSERT_TRUE(write_id(*store, id));
  EXPECT_EQ(store->stats().evictions, 0u);
  fs.set_disk_space(DiskSpace{1000 * obj, 45 * obj});  // 4.5% free: must free 5 objects
  ASSERT_TRUE(write_id(*store, 20));
  EXPECT_EQ(store->stats().evictions, 5u);
  EXPECT_EQ(store->object_count(), 16u);
  EXPECT_TRUE(store->contains(synthetic_key(fp_, 20)));
  EXPECT_FALSE(store->contains(synthetic_key(fp_, 0)));
}

TEST(ColdQuota, DefaultIsTenPercentCappedAt100GiB) {
  EXPECT_EQ(default_quota_bytes(DiskSpace{1ull << 40, 0}), 100ull << 30);
  EXPECT_EQ(default_quota_bytes(DiskSpace{100ull << 30, 0}), 10ull << 30);
}

// A FileSystem whose create_exclusive waits at a gate: holds the writer busy.
class GatedFileSystem final : public FileSystem {
 public:
  void open_gate() {
    std::lock_guard<std::mutex> l(mu_);
    open_ = true;
    cv_.notify_all();
  }
  bool wait_entered(std::chrono::milliseconds t) {
    std::unique_lock<std::mutex> l(mu_);
    return cv_.wait_for(l, t, [&] { return entered_; });
  }
  StatusOr<std::unique_ptr<WritableFile>> create_exclusive(const std::string& p,
                                                           uint32_t m) override {
    std::unique_lock<std::mutex> l(mu_);
    entered_ = true;
    cv_.notify_all();
    cv_.wait(l, [&] { return open_; });
    l.unlock();
    return base().create_exclusive(p, m);
  }
  StatusOr<std::vector<uint8_t>> read_file(const std::string& p, uint64_t m) override {
    return base().read_file(p, m);
  }
  Status rename(const std::string& a, const std::string& b) override { return base().rename(a, b); }
  Status remove(const std::string& p) override { return base().remove(p); }
  Status create_dirs(const std::string& p, uint32_t m) override { return base().create_dirs(p, m); }
  Status sync_dir(const std::string& p) override { return base().sync_dir(p); }
  StatusOr<FileInfo> stat(const std::string& p) override { return base().stat(p); }
  StatusOr<std::vector<std::string>> list_dir(const std::string& d) override {
    return base().list_dir(d);
  }
  Status touch(const std::string& p) override { return base().touch(p); }

 private:
  static FileSystem& base() { return FileSystem::posix(); }
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = false;
  bool entered_ = false;
};

TEST_F(ColdStoreTest, BoundedQueueDropsWhenFullAndEnqueueBeforeWaitsForASlot) {
  GatedFileSystem fs;
  auto o = options(&fs);
  o.queue_depth = 8;
  auto store_or = ColdStore::open(o);
  ASSERT_TRUE(store_or.ok());
  auto& store = **store_or;
  auto obj = [&](uint64_t id) { return make_synthetic_object(fp_, id); };
  auto o0 = obj(0);
  ASSERT_TRUE(store.enqueue(o0.key, o0.bytes));
  ASSERT_TRUE(fs.wait_entered(std::chrono::seconds(5)));  // writer holds object 0
  for (uint64_t id = 1; id <= 8; ++id) {
    auto x = obj(id);
    EXPECT_TRUE(store.enqueue(x.key, x.bytes)) << id;
  }
  EXPECT_TRUE(store.contains_or_pending(obj(5).key));
  EXPECT_FALSE(store.contains(obj(5).key));
  auto o9 = obj(9);
  EXPECT_FALSE(store.enqueue(o9.key, o9.bytes));
  EXPECT_EQ(store.stats().queue_drops, 1u);
  auto t0 = std::chrono::steady_clock::now();
  EXPECT_FALSE(store.enqueue_before(o9.key, o9.bytes, t0 + std::chrono::milliseconds(30)));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(30));
  EXPECT_EQ(store.stats().queue_drops, 2u);
  // A duplicate of a pending key is accepted without taking a slot.
  auto o3 = obj(3);
  EXPECT_TRUE(store.enqueue(o3.key, o3.bytes));
  std::thread opener([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    fs.open_gate();
  });
  EXPECT_TRUE(store.enqueue_before(o9.key, o9.bytes,
                                   std::chrono::steady_clock::now() + std::chrono::seconds(10)));
  opener.join();
  store.flush();
  auto s = store.stats();
  EXPECT_EQ(s.enqueued, 10u);
  EXPECT_EQ(s.write_errors, 0u);
  EXPECT_EQ(store.object_count(), 10u);
}

TEST_F(ColdStoreTest, TwoStoresShareADirectory) {
  auto a = open();
  auto b = open();
  ASSERT_TRUE(write_id(*a, 1));
  EXPECT_FALSE(b->contains(synthetic_key(fp_, 1)));  // b's index predates the write
  EXPECT_TRUE(read_id(*b, 1).ok());                  // ... but a read finds it
  EXPECT_TRUE(b->contains(synthetic_key(fp_, 1)));
  // b evicts everything; a's reads are clean misses, never corruptions.
  auto o = options();
  o.quota_bytes = 1;
  o.start_writer = false;
  auto gc = ColdStore::open(o);
  ASSERT_TRUE(gc.ok());
  (*gc)->enforce_quota();
  EXPECT_EQ((*gc)->stats().evictions, 1u);
  EXPECT_EQ(read_id(*a, 1).code(), StatusCode::kNotFound);
  EXPECT_EQ(a->stats().corruptions, 0u);
  EXPECT_FALSE(a->contains(synthetic_key(fp_, 1)));
  // The same key written by both: one object, both read it.
  ASSERT_TRUE(write_id(*a, 2));
  ASSERT_TRUE(write_id(*b, 2));
  EXPECT_TRUE(read_id(*a, 2).ok());
  EXPECT_TRUE(read_id(*b, 2).ok());
}

TEST_F(ColdStoreTest, VerifyFindsAndPrunesBadObjects) {
  auto store = open();
  for (uint64_t id = 0; id < 5; ++id) ASSERT_TRUE(write_id(*store, id));
  flip_byte_on_disk(store->object_path(synthetic_key(fp_, 2)), 300);
  std::ofstream(root_ + "/not-an-object.txt") << "ignored";
  auto report = store->verify(false);
  EXPECT_EQ(report.objects, 5u);
  EXPECT_EQ(report.ok, 4u);
  ASSERT_EQ(report.bad.size(), 1u);
  EXPECT_EQ(report.bad[0].first, key_hex(synthetic_key(fp_, 2)));
  EXPECT_TRUE(exists(store->object_path(synthetic_key(fp_, 2))));
  report = store->verify(true);
  EXPECT_EQ(report.pruned, 1u);
  EXPECT_FALSE(exists(store->object_path(synthetic_key(fp_, 2))));
  EXPECT_TRUE(exists(root_ + "/not-an-object.txt"));  // not ours: left alone
  EXPECT_EQ(store->verify(false).bad.size(), 0u);
}

// Issue #16 item 10: a read-only store (cold ls/verify/stats) changes nothing at
// open, and verify without prune reports the symlink and FIFO it found.
TEST_F(ColdStoreTest, ReadOnlyOpenAndVerifyWithoutPruneChangeNothing) {
  {
    auto store = open();
    for (uint64_t id = 0; id < 3; ++id) ASSERT_TRUE(write_id(*store, id));
  }
  const std::string outside = dir_ + "/outside";
  std::ofstream(outside) << "x";
  const std::string link = root_ + "/" + key_hex(synthetic_key(fp_, 7));
  ASSERT_EQ(::symlink(outside.c_str(), link.c_str()), 0);
  const std::string fifo = root_ + "/" + key_hex(synthetic_key(fp_, 8));
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto o = options();
  o.start_writer = false;
  auto ro = ColdStore::open(o);
  ASSERT_TRUE(ro.ok()) << ro.status().to_string();
  EXPECT_TRUE(exists(link));
  EXPECT_TRUE(exists(fifo));
  EXPECT_EQ((*ro)->stats().corruptions, 2u);  // counted, not removed
  auto report = (*ro)->verify(false);
  EXPECT_EQ(report.objects, 5u);
  EXPECT_EQ(report.ok, 3u);
  ASSERT_EQ(report.bad.size(), 2u);
  EXPECT_NE(report.bad[0].second.find("not a regular file"), std::string::npos);
  EXPECT_EQ(report.pruned, 0u);
  EXPECT_TRUE(exists(link));
  EXPECT_TRUE(exists(fifo));
  // --prune removes them (never following the symlink).
  report = (*ro)->verify(true);
  EXPECT_EQ(report.pruned, 2u);
  EXPECT_FALSE(exists(link));
  EXPECT_FALSE(exists(fifo));
  EXPECT_TRUE(exists(outside));
}

// Issue #16 item 11: the header's declared size is checked against the file's
// size before the body is read, so a huge (sparse) file at an object name is
// refused after one small read instead of being loaded whole.
TEST_F(ColdStoreTest, OversizedObjectIsRefusedFromItsHeaderAlone) {
  auto store = open();
  ASSERT_TRUE(write_id(*store, 0));
  ASSERT_TRUE(write_id(*store, 1));
  const std::string p0 = store->object_path(synthetic_key(fp_, 0));
  const std::string p1 = store->object_path(synthetic_key(fp_, 1));
  const uint64_t obj = make_synthetic_object(fp_, 0).bytes->size();
  ASSERT_EQ(::truncate(p0.c_str(), 900ll << 20), 0);  // sparse: costs no disk
  ASSERT_EQ(::truncate(p1.c_str(), 900ll << 20), 0);
  auto bytes = store->read_object_file(p0);
  ASSERT_FALSE(bytes.ok());
  EXPECT_EQ(bytes.status().code(), StatusCode::kCorruption);
  EXPECT_NE(bytes.status().message().find("its header declares " + std::to_string(obj)),
            std::string::npos)
      << bytes.status().message();
  auto report = store->verify(false);
  ASSERT_EQ(report.bad.size(), 2u);
  EXPECT_NE(report.bad[0].second.find("header declares"), std::string::npos)
      << report.bad[0].second;
  // A read is a miss that prunes the object and counts one corruption.
  EXPECT_EQ(read_id(*store, 0).code(), StatusCode::kCorruption);
  EXPECT_FALSE(exists(p0));
  EXPECT_EQ(store->stats().corruptions, 1u);
  // A header that is not an object's at all is refused the same way.
  std::ofstream(p1, std::ios::trunc) << std::string(300, 'z');
  bytes = store->read_object_file(p1);
  ASSERT_FALSE(bytes.ok());
  EXPECT_NE(bytes.status().message().find("bad magic"), std::string::npos);
}

}  // namespace
}  // namespace pagedkv::cold
