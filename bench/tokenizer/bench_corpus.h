// Deterministic benchmark corpora for the tokenizer benchmark.
//
// English+code: the license texts Debian ships in /usr/share/common-licenses
// (package base-files, on every Debian system) followed by libstdc++'s
// headers in /usr/include/c++/<ver>/bits (package libstdc++-<ver>-dev, pulled
// in by build-essential), files in sorted order, cut to `bytes` at a UTF-8
// boundary. CJK: generated from a fixed list of common Chinese characters,
// kana and CJK punctuation with a seeded PRNG (Zipf-like character choice,
// random sentence lengths), so it is identical on every machine.
#pragma once

#include <string>

namespace pagedkv::bench {

// Empty when the Debian files are missing.
std::string english_code_corpus(size_t bytes);
std::string cjk_corpus(size_t bytes);

}  // namespace pagedkv::bench
