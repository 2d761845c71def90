// bench_tokenizer: encode throughput of the real Qwen3 and Gemma3 tokenizers
// on ~1 MB of English+code and ~1 MB of CJK text (bench_corpus.h), one thread.
//
// For each (tokenizer, text) it reports MB/s (1 MB = 10^6 bytes of input) for
//   uncached   the BPE word cache off: every pre-token is merged afresh (the
//              baseline, measured in the same run);
//   cold       cache on, first pass after load;
//   warm       cache on, best of 3 further passes;
// and checks that all three produce identical ids. Times are thread CPU time. Tokenizer files come
// from scripts/fetch-tokenizers.sh (same cache lookup as the tests).
#include <time.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench_corpus.h"
#include "tokenizer/tokenizer.h"

namespace {

std::string cache_dir() {
  if (const char* c = std::getenv("PAGEDKV_TOKENIZER_CACHE"); c != nullptr && *c != '\0') return c;
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x != nullptr && *x != '\0') {
    return std::string(x) + "/pagedkv/tokenizers";
  }
  const char* home = std::getenv("HOME");
  return std::string(home != nullptr ? home : "") + "/.cache/pagedkv/tokenizers";
}

double seconds_of(const pagedkv::tokenizer::Tokenizer& tok, const std::string& text,
                  std::vector<int32_t>* ids) {
  // Thread CPU time, not wall time: the build machines are shared, and CPU
  // time is what one core spends on the encode regardless of other load.
  timespec a, b;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &a);
  *ids = tok.encode(text);
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &b);
  return static_cast<double>(b.tv_sec - a.tv_sec) +
         1e-9 * static_cast<double>(b.tv_nsec - a.tv_nsec);
}

}  // namespace

int main() {
  using pagedkv::tokenizer::Tokenizer;
  const size_t kBytes = 1 << 20;
  struct Text {
    const char* name;
    std::string text;
  };
  std::vector<Text> texts = {{"english+code", pagedkv::bench::english_code_corpus(kBytes)},
                             {"cjk", pagedkv::bench::cjk_corpus(kBytes)}};
  for (const auto& t : texts) {
    if (t.text.size() < kBytes / 2) {
      std::fprintf(stderr,
                   "bench_tokenizer: could not build the %s corpus (Debian files missing?)\n",
                   t.name);
      return 1;
    }
  }
  std::printf("%-8s %-13s %9s %7s %11s %9s %9s %8s\n", "tokenizer", "text", "bytes", "tokens",
              "uncached", "cold", "warm", "warm/unc");
  for (const char* name : {"qwen3", "gemma3"}) {
    std::string path = cache_dir() + "/" + name + "/tokenizer.json";
    for (const auto& t : texts) {
      // A fresh tokenizer per text, so "cold" really starts with an empty cache.
      auto tok = Tokenizer::load(path);
      if (!tok.ok()) {
        std::fprintf(stderr, "bench_tokenizer: %s (run scripts/fetch-tokenizers.sh)\n",
                     tok.status().to_string().c_str());
        return 1;
      }
      std::vector<int32_t> base, cold, warm;
      (*tok)->set_word_cache_enabled(false);
      double s_unc = seconds_of(**tok, t.text, &base);
      (*tok)->set_word_cache_enabled(true);
      double s_cold = seconds_of(**tok, t.text, &cold);
      double s_warm = 1e30;
      for (int r = 0; r < 3; ++r) s_warm = std::min(s_warm, seconds_of(**tok, t.text, &warm));
      if (base != cold || base != warm) {
        std::fprintf(stderr, "bench_tokenizer: ids differ between cached and uncached runs!\n");
        return 1;
      }
      const double mb = static_cast<double>(t.text.size()) / 1e6;
      std::printf("%-9s %-13s %9zu %7zu %6.1f MB/s %4.1f MB/s %4.1f MB/s %7.2fx\n", name, t.name,
                  t.text.size(), base.size(), mb / s_unc, mb / s_cold, mb / s_warm, s_unc / s_warm);
    }
  }
  return 0;
}
