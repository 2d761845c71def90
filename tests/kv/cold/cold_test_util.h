// Shared helpers for the cold-tier tests: a scratch directory (on tmpfs when
// available, so fsync-heavy tests stay fast) and synthetic objects.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "kv/cold/cold_store.h"
#include "kv/cold/cold_synthetic.h"
#include "temp_dir.h"

namespace pagedkv::cold::testing {

// A fresh directory (on /dev/shm when writable), removed at process exit even
// when a test fails before removing it (tests/support/temp_dir.h).
inline std::string make_scratch_dir(const char* tag) {
  return ::pagedkv::test::make_temp_dir(std::string("pkv_cold_") + tag + "_", /*tmpfs=*/true);
}

inline void remove_tree(const std::string& dir) {
  if (!dir.empty()) (void)std::system(("rm -rf '" + dir + "'").c_str());
}

class ColdDirTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = make_scratch_dir("t");
    ASSERT_FALSE(dir_.empty());
    root_ = dir_ + "/cold";
  }
  void TearDown() override { remove_tree(dir_); }

  ColdStoreOptions options(FileSystem* fs = nullptr) const {
    ColdStoreOptions o;
    o.root = root_;
    o.fs = fs;
    o.quota_bytes = 64ull << 20;
    o.sync = SyncMode::kFsync;
    return o;
  }
  std::unique_ptr<ColdStore> open(FileSystem* fs = nullptr) {
    auto s = ColdStore::open(options(fs));
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    return s.ok() ? std::move(s).value() : nullptr;
  }
  // Reads synthetic object `id`; returns the status (payload compared when OK).
  Status read_id(ColdStore& store, uint64_t id) {
    auto tokens = synthetic_tokens(fp_, id);
    auto got = store.read(synthetic_expectation(fp_, fpd_, geom_, tokens, id));
    if (!got.ok()) return got.status();
    auto want = synthetic_payload(fp_, id);
    if (!std::equal(want.begin(), want.end(), got->object.payload.begin(),
                    got->object.payload.end())) {
      return internal_error("WRONG BYTES SERVED for id " + std::to_string(id));
    }
    return ok_status();
  }
  bool write_id(ColdStore& store, uint64_t id) {
    auto o = make_synthetic_object(fp_, id);
    bool ok = store.enqueue_before(o.key, o.bytes,
                                   std::chrono::steady_clock::now() + std::chrono::seconds(10));
    store.flush();
    return ok;
  }

  std::string dir_;
  std::string root_;
  ModelFingerprint fp_ = synthetic_fingerprint();
  Digest256 fpd_ = fp_.digest();
  ColdGeometry geom_ = ColdGeometry::from(fp_);
};

}  // namespace pagedkv::cold::testing
