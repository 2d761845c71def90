// Small formatting helpers for what the CLI prints, so every command says things
// the same way: counts with the right plural ("1 token", "2 tokens") and byte
// sizes readable at a glance, written without spaces so a key=value line stays
// one token per field ("512B", "1.5KiB", "12.0MiB", "3.25GiB").
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace pagedkv::cli {

// "1 token", "0 tokens", "17 tokens" (the plural adds an "s").
std::string count_noun(int64_t n, std::string_view noun);

// Bytes in binary units: below 1 KiB exact ("512B"), otherwise one decimal
// ("1.5KiB", "12.0MiB") — two for GiB and above ("3.25GiB").
std::string human_bytes(uint64_t bytes);

}  // namespace pagedkv::cli
