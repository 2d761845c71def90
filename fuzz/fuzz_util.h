// Shared helpers for the fuzz targets (fuzz/fuzz_*.cc). A target is one
// LLVMFuzzerTestOneInput over raw bytes; these helpers turn the bytes into what
// the code under test reads — parts of a multi-part input, a regular file with
// a stable path, a scratch directory — and keep the target's own output quiet.
// They never allocate in proportion to anything but the input itself.
//
// Adding a target (an HTTP request body, say): write fuzz/fuzz_<name>.cc with
// LLVMFuzzerTestOneInput (and, when it needs one-time setup, LLVMFuzzerInitialize),
// add fuzz/corpus/<name>/ with a few small seeds, optionally fuzz/dict/<name>.dict,
// and one pkv_add_fuzz_target(<name> ...) line to fuzz/CMakeLists.txt. The same
// source then builds as a libFuzzer binary (`make fuzz`) and as a replay-and-mutate
// smoke test in `make test` (fuzz/standalone_driver.cc). docs/fuzzing.md has more.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace pagedkv::fuzz {

// The separator between the parts of a multi-part input (a NUL byte: no JSON or
// template text contains one, and a mutator inserts it easily).
inline constexpr char kPartSeparator = '\0';

// Splits the input at kPartSeparator into at most `max_parts` parts (the last
// part keeps any further separators). Missing parts are empty.
std::vector<std::string_view> split_parts(const uint8_t* data, size_t size, size_t max_parts);

// A regular file in the scratch directory holding `bytes`; path() stays valid until
// the next write() of the same MemFile. Files are reused across inputs.
class ScratchFile {
 public:
  explicit ScratchFile(std::string name);
  // Replaces the content (truncating). Aborts only when the scratch area itself is
  // unusable (a harness failure, not a finding).
  void write(std::string_view bytes);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// A per-process scratch directory (under $TMPDIR, else /dev/shm, else /tmp),
// removed at exit.
const std::string& scratch_dir();

// While alive, std::cout and std::clog/std::cerr go nowhere and the pagedkv log
// threshold is above kError (the fuzz engine's own output is unaffected: it writes
// to the stderr file descriptor directly).
class QuietStreams {
 public:
  QuietStreams();
  ~QuietStreams();
  QuietStreams(const QuietStreams&) = delete;
  QuietStreams& operator=(const QuietStreams&) = delete;

 private:
  std::streambuf* out_;
  std::streambuf* err_;
  std::streambuf* log_;
};

// Env PKV_FUZZ_VERBOSE=1: note(...) prints what a target's input led to (for
// writing and checking a harness: is the input reaching the code it is meant for?).
void note(const std::string& what);

// Aborts (a finding) with `what` on stderr: for properties a target checks
// beyond "does not crash", e.g. a decode/encode round trip.
[[noreturn]] void property_failed(const std::string& what);

}  // namespace pagedkv::fuzz
