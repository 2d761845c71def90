// Crash safety with real processes: `pagedkv cold stress` children writing under
// load (with quota churn) are killed with SIGKILL at random moments, 200 times;
// after every kill a fresh store serves only verified objects with exactly the
// synthetic bytes and counts no corruption. Then two processes share a directory.
// A child is killed only after it has created its first file in the directory,
// so a slow start (a ThreadSanitizer or Debug build, a loaded machine) cannot turn
// every kill into a kill before the first write.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <set>

#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <thread>

#include "cold_test_util.h"

extern char** environ;

namespace pagedkv::cold {
namespace {

constexpr uint64_t kObjectsInQuota = 150;

pid_t spawn_stress(const std::string& dir, uint64_t start, uint64_t count, uint64_t seed,
                   uint64_t quota_bytes, const std::string& out_path) {
  std::vector<std::string> args = {PAGEDKV_BINARY,
                                   "cold",
                                   "stress",
                                   "--dir",
                                   dir,
                                   "--start",
                                   std::to_string(start),
                                   "--count",
                                   std::to_string(count),
                                   "--seed",
                                   std::to_string(seed),
                                   "--quota-bytes",
                                   std::to_string(quota_bytes),
                                   "--sync",
                                   "fdatasync"};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_addopen(&fa, 1, out_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
  pid_t pid = -1;
  int rc = posix_spawn(&pid, PAGEDKV_BINARY, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  return rc == 0 ? pid : -1;
}

// Inode numbers of the entries of `dir` (empty when it does not exist yet).
std::set<ino_t> inodes_in(const std::string& dir) {
  std::set<ino_t> out;
  auto names = FileSystem::posix().list_dir(dir);
  if (!names.ok()) return out;
  for (const auto& n : *names) {
    struct stat st;
    if (::lstat((dir + "/" + n).c_str(), &st) == 0) out.insert(st.st_ino);
  }
  return out;
}

// Waits until the directory holds an entry whose inode was not in `before` (the
// child created a file: a temp file, or an object renamed from one) or the child
// has exited; true when it wrote. Polls without a deadline of its own: a child that
// never writes ends by itself (it writes or fails), and ctest's timeout bounds a hang.
bool wait_for_first_write(const std::string& dir, const std::set<ino_t>& before, pid_t pid) {
  for (;;) {
    for (ino_t ino : inodes_in(dir))
      if (!before.count(ino)) return true;
    siginfo_t info{};  // exited? (WNOWAIT: left for the caller's waitpid)
    if (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != 0)
      return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
}

class ColdCrashTest : public testing::ColdDirTest {
 protected:
  // Opens a fresh read-only store and reads every indexed object. Returns the
  // number of objects served; any wrong byte or corruption fails the test.
  uint64_t verify_all(const char* when) {
    ColdStoreOptions o = options();
    o.start_writer = false;
    auto store_or = ColdStore::open(o);
    EXPECT_TRUE(store_or.ok()) << store_or.status().to_string();
    if (!store_or.ok()) return 0;
    ColdStore& store = **store_or;
    uint64_t served = 0;
    for (const auto& info : store.list()) {
      ColdExpectation e;
      e.key = info.key;
      e.fingerprint = fpd_;
      e.geometry = &geom_;
      auto got = store.read(e);
      if (!got.ok()) {
        EXPECT_EQ(got.status().code(), StatusCode::kNotFound)
            << when << ": " << got.status().to_string();
        continue;
      }
      const uint64_t id = got->object.header.block_index;
      EXPECT_EQ(got->object.header.tokens, synthetic_tokens(fp_, id)) << when;
      auto want = synthetic_payload(fp_, id);
      EXPECT_TRUE(std::equal(want.begin(), want.end(), got->object.payload.begin(),
                             got->object.payload.end()))
          << when << ": wrong bytes served for id " << id;
      ++served;
    }
    EXPECT_EQ(store.stats().corruptions, 0u) << when;
    return served;
  }
};

TEST_F(ColdCrashTest, SigkillAtRandomMomentsNeverLeavesAnUnverifiedObject) {
  ASSERT_EQ(::access(PAGEDKV_BINARY, X_OK), 0) << PAGEDKV_BINARY;
  const uint64_t obj = make_synthetic_object(fp_, 0).bytes->size();
  const std::string out = dir_ + "/child.out";
  std::mt19937_64 rng(20261129);
  int killed_mid_run = 0;
  uint64_t max_served = 0;
  // Until 200 children were killed mid-run (one that finished first still counts
  // for verification, not towards the 200).
  int never_wrote = 0;
  for (int i = 0; killed_mid_run < 200 && i < 400; ++i) {
    const std::set<ino_t> before = inodes_in(root_);
    pid_t pid = spawn_stress(root_, (i * 37) % 1000, 400, i, kObjectsInQuota * obj, out);
    ASSERT_GT(pid, 0);
    // Kill at a random moment after the child's first write (not before it).
    if (!wait_for_first_write(root_, before, pid)) ++never_wrote;
    std::this_thread::sleep_for(std::chrono::microseconds(rng() % 15000));
    ::kill(pid, SIGKILL);
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    if (WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) {
      ++killed_mid_run;
    } else {
      EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "child failed, iteration " << i;
    }
    max_served = std::max(max_served, verify_all(("after kill " + std::to_string(i)).c_str()));
    if (HasFatalFailure() || HasNonfatalFailure()) break;
  }
  EXPECT_GE(killed_mid_run, 200);
  EXPECT_EQ(never_wrote, 0) << "children that exited before creating any file";
  EXPECT_GT(max_served, 0u);  // the children did get objects onto disk
  // No temp files of the dead children survive a reopen.
  verify_all("final");
  auto names = FileSystem::posix().list_dir(root_);
  ASSERT_TRUE(names.ok());
  for (const auto& n : *names) EXPECT_EQ(n.find(".tmp."), std::string::npos) << n;
}

TEST_F(ColdCrashTest, TwoProcessesShareADirectory) {
  ASSERT_EQ(::access(PAGEDKV_BINARY, X_OK), 0) << PAGEDKV_BINARY;
  const uint64_t obj = make_synthetic_object(fp_, 0).bytes->size();
  const std::string out_a = dir_ + "/a.out", out_b = dir_ + "/b.out";
  pid_t a = spawn_stress(root_, 0, 2000, 1, 200 * obj, out_a);
  pid_t b = spawn_stress(root_, 1000, 2000, 2, 200 * obj, out_b);
  ASSERT_GT(a, 0);
  ASSERT_GT(b, 0);
  for (auto [pid, path] : {std::pair{a, out_a}, std::pair{b, out_b}}) {
    int status = 0;
    ASSERT_EQ(::waitpid(pid, &status, 0), pid);
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0) << "exit 3 means wrong bytes were served";
    std::ifstream in(path);
    std::string first;
    ASSERT_TRUE(std::getline(in, first));
    auto j = nlohmann::json::parse(first);
    EXPECT_EQ(j["coldCorruptions"], 0) << first;
    EXPECT_EQ(j["coldWriteErrors"], 0) << first;
    EXPECT_GT(j["coldHits"].get<uint64_t>(), 0u) << first;
  }
  EXPECT_GT(verify_all("after sharing"), 0u);
}

}  // namespace
}  // namespace pagedkv::cold
