// Test support: temporary directories and files that go away. make_temp_dir()
// creates a fresh directory (mkdtemp) and registers it for recursive removal
// when the test process exits — passed or failed — so no suite leaves
// pkv_* directories in /tmp or /dev/shm behind. remove_at_exit() registers a
// path made some other way. (A process killed by a signal cannot clean up.)
#ifndef PAGEDKV_TESTS_SUPPORT_TEMP_DIR_H_
#define PAGEDKV_TESTS_SUPPORT_TEMP_DIR_H_

#include <string>

namespace pagedkv::test {

// A new directory named <base>/<prefix>XXXXXX. base is /dev/shm when `tmpfs` and
// it is writable (fsync-heavy tests stay fast), else $TMPDIR or /tmp. Returns ""
// when the directory cannot be made.
std::string make_temp_dir(const std::string& prefix, bool tmpfs = false);

// Removes `path` (recursively) when the process exits.
void remove_at_exit(const std::string& path);

}  // namespace pagedkv::test

#endif  // PAGEDKV_TESTS_SUPPORT_TEMP_DIR_H_
