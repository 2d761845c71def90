// Tests for the POSIX FileSystem and the durable-write recipe.
#include "util/file_system.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>

namespace pagedkv {
namespace {

class FileSystemTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/pkv_fs_test_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override { (void)std::system(("rm -rf '" + dir_ + "'").c_str()); }
  std::string dir_;
  FileSystem& fs_ = FileSystem::posix();
};

TEST_F(FileSystemTest, DurableWriteThenRead) {
  std::string path = join_path(dir_, "obj");
  std::vector<uint8_t> bytes = {1, 2, 3, 4, 5};
  ASSERT_TRUE(write_file_durably(fs_, path, bytes, 0600).ok());
  auto back = fs_.read_file(path, 1 << 20);
  ASSERT_TRUE(back.ok()) << back.status().to_string();
  EXPECT_EQ(*back, bytes);
  auto info = fs_.stat(path);
  ASSERT_TRUE(info.ok());
  EXPECT_EQ(info->type, FileType::kRegular);
  EXPECT_EQ(info->mode, 0600u);
  // No temp files are left behind.
  auto names = fs_.list_dir(dir_);
  ASSERT_TRUE(names.ok());
  EXPECT_EQ(names->size(), 1u);
}

TEST_F(FileSystemTest, RefusesSymlinkFifoAndDirectory) {
  std::string target = join_path(dir_, "target");
  ASSERT_TRUE(write_file_durably(fs_, target, std::vector<uint8_t>{7}, 0600).ok());
  std::string link = join_path(dir_, "link");
  ASSERT_EQ(::symlink(target.c_str(), link.c_str()), 0);
  EXPECT_FALSE(fs_.read_file(link, 100).ok());
  std::string fifo = join_path(dir_, "fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  EXPECT_FALSE(fs_.read_file(fifo, 100).ok());
  EXPECT_FALSE(fs_.read_file(dir_, 100).ok());
  EXPECT_EQ(fs_.stat(link)->type, FileType::kSymlink);
  EXPECT_EQ(fs_.stat(fifo)->type, FileType::kOther);
}

TEST_F(FileSystemTest, SizeLimitAndMissing) {
  std::string path = join_path(dir_, "big");
  ASSERT_TRUE(write_file_durably(fs_, path, std::vector<uint8_t>(100, 1), 0600).ok());
  EXPECT_EQ(fs_.read_file(path, 99).status().code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(fs_.read_file(join_path(dir_, "nope"), 99).status().code(), StatusCode::kNotFound);
  EXPECT_EQ(fs_.stat(join_path(dir_, "nope"))->type, FileType::kMissing);
}

TEST_F(FileSystemTest, CreateExclusiveFailsWhenPresent) {
  std::string path = join_path(dir_, "x");
  ASSERT_TRUE(fs_.create_exclusive(path, 0600).ok());
  EXPECT_FALSE(fs_.create_exclusive(path, 0600).ok());
  ASSERT_TRUE(fs_.create_dirs(join_path(dir_, "a/b/c"), 0700).ok());
  EXPECT_EQ(fs_.stat(join_path(dir_, "a/b/c"))->type, FileType::kDirectory);
}

}  // namespace
}  // namespace pagedkv
