// Test support: corrupting a file on disk in place, the way a bad sector or a
// stray write would, to check that a reader notices (the cold tier's SHA-256
// verification, the store's pruning). One byte is XORed with a mask; nothing
// else in the file changes.
#ifndef PAGEDKV_TESTS_SUPPORT_CORRUPT_FILE_H_
#define PAGEDKV_TESTS_SUPPORT_CORRUPT_FILE_H_

#include <cstdint>
#include <string>

namespace pagedkv::test {

// XORs the byte at `offset` of `path` with `mask`. False when the file cannot
// be opened or has no byte there.
bool xor_byte_in_file(const std::string& path, uint64_t offset, uint8_t mask);

}  // namespace pagedkv::test

#endif  // PAGEDKV_TESTS_SUPPORT_CORRUPT_FILE_H_
