// Helpers for the fuzz targets (see fuzz_util.h).
#include "fuzz_util.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <streambuf>

#include "util/logging.h"

namespace pagedkv::fuzz {
namespace {

class NullBuf : public std::streambuf {
 protected:
  int overflow(int c) override { return traits_type::not_eof(c); }
  std::streamsize xsputn(const char*, std::streamsize n) override { return n; }
};

NullBuf& null_buf() {
  static NullBuf b;
  return b;
}

void remove_scratch() {
  std::error_code ec;
  std::filesystem::remove_all(scratch_dir(), ec);
}

}  // namespace

std::vector<std::string_view> split_parts(const uint8_t* data, size_t size, size_t max_parts) {
  std::vector<std::string_view> parts;
  std::string_view rest(reinterpret_cast<const char*>(data), size);
  while (parts.size() + 1 < max_parts) {
    const size_t at = rest.find(kPartSeparator);
    if (at == std::string_view::npos) break;
    parts.push_back(rest.substr(0, at));
    rest.remove_prefix(at + 1);
  }
  parts.push_back(rest);
  while (parts.size() < max_parts) parts.emplace_back();
  return parts;
}

const std::string& scratch_dir() {
  static const std::string dir = [] {
    // Memory-backed /dev/shm when there is one: the targets rewrite a file per input.
    const char* tmp = std::getenv("TMPDIR");
    std::string base = tmp != nullptr && *tmp != '\0' ? tmp : "/tmp";
    if ((tmp == nullptr || *tmp == '\0') && ::access("/dev/shm", W_OK | X_OK) == 0)
      base = "/dev/shm";
    std::string templ = base + "/pkv-fuzz-XXXXXX";
    if (::mkdtemp(templ.data()) == nullptr) {
      std::perror("fuzz: mkdtemp");
      std::abort();
    }
    return templ;
  }();
  static const bool registered = (std::atexit(remove_scratch), true);
  (void)registered;
  return dir;
}

ScratchFile::ScratchFile(std::string name) : path_(scratch_dir() + "/" + std::move(name)) {}

void ScratchFile::write(std::string_view bytes) {
  const int fd = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) {
    std::perror(("fuzz: open " + path_).c_str());
    std::abort();
  }
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      std::perror(("fuzz: write " + path_).c_str());
      std::abort();
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

QuietStreams::QuietStreams()
    : out_(std::cout.rdbuf(&null_buf())),
      err_(std::cerr.rdbuf(&null_buf())),
      log_(std::clog.rdbuf(&null_buf())) {
  // Above kError: a hostile input may make the code under test log on every run.
  set_log_threshold(static_cast<LogLevel>(static_cast<int>(LogLevel::kError) + 1));
}

QuietStreams::~QuietStreams() {
  std::cout.rdbuf(out_);
  std::cerr.rdbuf(err_);
  std::clog.rdbuf(log_);
}

void note(const std::string& what) {
  static const bool verbose = [] {
    const char* v = std::getenv("PKV_FUZZ_VERBOSE");
    return v != nullptr && *v != '\0' && *v != '0';
  }();
  if (verbose) std::fprintf(stderr, "fuzz: %s\n", what.c_str());
}

void property_failed(const std::string& what) {
  std::fprintf(stderr, "fuzz: property failed: %s\n", what.c_str());
  std::abort();
}

}  // namespace pagedkv::fuzz
