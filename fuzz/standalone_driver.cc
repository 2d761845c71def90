// A small fuzz driver for builds without libFuzzer (g++, CI): links with one
// target's LLVMFuzzerTestOneInput, replays every file of the corpus directories
// it is given, then runs a fixed number of deterministic mutations of them
// (seeded: the same build and flags run the same inputs every time). A crash,
// an abort or a hang (-timeout) writes the input to ./fuzz-crash-<target> and
// fails the process, so `ctest -L fuzz` catches a regression in seconds.
//
//   fuzz_<t>_smoke [-runs=N] [-seed=S] [-max_len=B] [-timeout=SEC]
//                  [-max_total_time=SEC] [-dict=FILE] [-rss_limit_mb=MB] DIR|FILE...
//
// -max_total_time only bounds the mutation phase (it stops early, it never
// fails); -rss_limit_mb caps the address space (not under AddressSanitizer).
#include <fcntl.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace {

using Bytes = std::vector<uint8_t>;

// The input being run, for the crash handler (async-signal-safe access only).
const uint8_t* g_current = nullptr;
size_t g_current_size = 0;
char g_crash_path[512] = "fuzz-crash";
bool g_write_crash = false;  // false while replaying files (they already exist)

void write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w <= 0) return;
    c += w;
    n -= static_cast<size_t>(w);
  }
}

void on_fatal_signal(int sig) {
  const char msg[] = "\nfuzz smoke: fatal signal on an input; written to ";
  const char replay[] = "\nfuzz smoke: fatal signal while replaying ";
  if (g_write_crash) {
    write_all(2, msg, sizeof(msg) - 1);
  } else {
    write_all(2, replay, sizeof(replay) - 1);
  }
  write_all(2, g_crash_path, std::strlen(g_crash_path));
  write_all(2, "\n", 1);
  if (g_write_crash && g_current != nullptr) {
    int fd = ::open(g_crash_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      write_all(fd, g_current, g_current_size);
      ::close(fd);
    }
  }
  if (sig == SIGALRM) {
    const char t[] = "fuzz smoke: timeout (an input ran longer than -timeout)\n";
    write_all(2, t, sizeof(t) - 1);
  }
  ::signal(SIGABRT, SIG_DFL);
  ::_exit(128 + sig);
}

void install_handlers() {
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  // The sanitizer's own SEGV report (with the stack) is worth more than ours.
  for (int sig : {SIGABRT, SIGALRM}) ::signal(sig, on_fatal_signal);
#else
  for (int sig : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGALRM})
    ::signal(sig, on_fatal_signal);
#endif
}

// splitmix64: deterministic and tiny.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  size_t below(size_t n) { return n == 0 ? 0 : static_cast<size_t>(next() % n); }
};

bool read_file(const std::filesystem::path& p, Bytes* out) {
  std::ifstream in(p, std::ios::binary);
  if (!in) return false;
  out->assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  return true;
}

// libFuzzer dictionary format: one entry per line, name="value" or "value",
// with \\, \" and \xNN escapes; '#' starts a comment.
std::vector<Bytes> read_dict(const std::string& path) {
  std::vector<Bytes> dict;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t q = line.find('"');
    const size_t e = line.rfind('"');
    if (line.empty() || line[0] == '#' || q == std::string::npos || e <= q) continue;
    Bytes v;
    for (size_t i = q + 1; i < e; ++i) {
      if (line[i] == '\\' && i + 1 < e) {
        if (line[i + 1] == 'x' && i + 3 < e) {
          v.push_back(static_cast<uint8_t>(std::stoi(line.substr(i + 2, 2), nullptr, 16)));
          i += 3;
        } else {
          v.push_back(static_cast<uint8_t>(line[++i]));
        }
      } else {
        v.push_back(static_cast<uint8_t>(line[i]));
      }
    }
    if (!v.empty()) dict.push_back(std::move(v));
  }
  return dict;
}

const char* const kInterestingNumbers[] = {"0",
                                           "-1",
                                           "1",
                                           "255",
                                           "256",
                                           "65536",
                                           "2147483647",
                                           "2147483648",
                                           "4294967296",
                                           "-2147483649",
                                           "9223372036854775807",
                                           "9223372036854775808",
                                           "18446744073709551616",
                                           "1e308",
                                           "1e-300",
                                           "-0",
                                           "0.5",
                                           "1073741824",
                                           "100000",
                                           "NaN"};

// One to four random edits: byte flips and sets, insertions and deletions,
// block copies, dictionary words, splices with another input, and numbers
// replaced by boundary values.
void mutate(Bytes* b, const std::vector<Bytes>& corpus, const std::vector<Bytes>& dict, Rng& rng,
            size_t max_len) {
  const int edits = 1 + static_cast<int>(rng.below(4));
  for (int k = 0; k < edits; ++k) {
    switch (rng.below(9)) {
      case 0:
        if (!b->empty()) (*b)[rng.below(b->size())] ^= static_cast<uint8_t>(1u << rng.below(8));
        break;
      case 1:
        if (!b->empty()) (*b)[rng.below(b->size())] = static_cast<uint8_t>(rng.next());
        break;
      case 2:
        b->insert(b->begin() + static_cast<ptrdiff_t>(rng.below(b->size() + 1)),
                  static_cast<uint8_t>(rng.next()));
        break;
      case 3:
        if (!b->empty()) {
          size_t at = rng.below(b->size());
          size_t n = 1 + rng.below(std::min<size_t>(16, b->size() - at));
          b->erase(b->begin() + static_cast<ptrdiff_t>(at),
                   b->begin() + static_cast<ptrdiff_t>(at + n));
        }
        break;
      case 4:
        if (!b->empty()) {  // copy a block elsewhere
          size_t from = rng.below(b->size());
          size_t n = 1 + rng.below(std::min<size_t>(64, b->size() - from));
          Bytes blk(b->begin() + static_cast<ptrdiff_t>(from),
                    b->begin() + static_cast<ptrdiff_t>(from + n));
          b->insert(b->begin() + static_cast<ptrdiff_t>(rng.below(b->size() + 1)), blk.begin(),
                    blk.end());
        }
        break;
      case 5:
      case 6:
        if (!dict.empty()) {
          const Bytes& w = dict[rng.below(dict.size())];
          b->insert(b->begin() + static_cast<ptrdiff_t>(rng.below(b->size() + 1)), w.begin(),
                    w.end());
        }
        break;
      case 7:
        if (!corpus.empty()) {  // splice: our head, another input's tail
          const Bytes& o = corpus[rng.below(corpus.size())];
          size_t cut = rng.below(b->size() + 1);
          size_t ocut = rng.below(o.size() + 1);
          b->resize(cut);
          b->insert(b->end(), o.begin() + static_cast<ptrdiff_t>(ocut), o.end());
        }
        break;
      case 8: {  // a run of digits → a boundary value
        std::vector<size_t> starts;
        for (size_t i = 0; i < b->size(); ++i)
          if (std::isdigit((*b)[i]) && (i == 0 || !std::isdigit((*b)[i - 1]))) starts.push_back(i);
        if (starts.empty()) break;
        size_t at = starts[rng.below(starts.size())], end = at;
        while (end < b->size() && std::isdigit((*b)[end])) ++end;
        const char* num = kInterestingNumbers[rng.below(std::size(kInterestingNumbers))];
        b->erase(b->begin() + static_cast<ptrdiff_t>(at), b->begin() + static_cast<ptrdiff_t>(end));
        b->insert(b->begin() + static_cast<ptrdiff_t>(at), num, num + std::strlen(num));
        break;
      }
    }
  }
  if (b->size() > max_len) b->resize(max_len);
}

void run_one(const Bytes& input, unsigned timeout_s) {
  // A copy of exactly the input's size, so an overread is not hidden by slack.
  std::unique_ptr<uint8_t[]> copy(new uint8_t[input.size() + (input.empty() ? 1 : 0)]);
  std::memcpy(copy.get(), input.data(), input.size());
  g_current = copy.get();
  g_current_size = input.size();
  if (timeout_s > 0) ::alarm(timeout_s);
  LLVMFuzzerTestOneInput(copy.get(), input.size());
  if (timeout_s > 0) ::alarm(0);
  g_current = nullptr;
}

}  // namespace

int main(int argc, char** argv) {
  uint64_t runs = 0, seed = 1;
  size_t max_len = 4096;
  unsigned timeout_s = 60;
  double max_total_time = 0;
  long rss_limit_mb = 4096;
  std::string dict_path;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto val = [&](const char* flag) -> const char* {
      const size_t n = std::strlen(flag);
      return a.compare(0, n, flag) == 0 ? argv[i] + n : nullptr;
    };
    if (const char* v = val("-runs="))
      runs = std::strtoull(v, nullptr, 10);
    else if (const char* v = val("-seed="))
      seed = std::strtoull(v, nullptr, 10);
    else if (const char* v = val("-max_len="))
      max_len = std::strtoull(v, nullptr, 10);
    else if (const char* v = val("-timeout="))
      timeout_s = static_cast<unsigned>(std::atoi(v));
    else if (const char* v = val("-max_total_time="))
      max_total_time = std::atof(v);
    else if (const char* v = val("-rss_limit_mb="))
      rss_limit_mb = std::atol(v);
    else if (const char* v = val("-dict="))
      dict_path = v;
    else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "fuzz smoke: unknown flag %s\n", a.c_str());
      return 2;
    } else {
      paths.push_back(a);
    }
  }
  const std::string target = std::filesystem::path(argv[0]).filename().string();
  std::snprintf(g_crash_path, sizeof(g_crash_path), "fuzz-crash-%s", target.c_str());
#if !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
  if (rss_limit_mb > 0) {
    rlimit rl{static_cast<rlim_t>(rss_limit_mb) << 20, static_cast<rlim_t>(rss_limit_mb) << 20};
    ::setrlimit(RLIMIT_AS, &rl);
  }
#else
  (void)rss_limit_mb;  // accepted and ignored: the sanitizers reserve more address space
                       // than any address-space limit of that size would allow
#endif
  if (LLVMFuzzerInitialize != nullptr) LLVMFuzzerInitialize(&argc, &argv);
  install_handlers();

  std::vector<Bytes> corpus;
  for (const auto& p : paths) {
    std::error_code ec;
    std::vector<std::filesystem::path> files;
    if (std::filesystem::is_directory(p, ec)) {
      for (const auto& e : std::filesystem::directory_iterator(p, ec))
        if (e.is_regular_file()) files.push_back(e.path());
      std::sort(files.begin(), files.end());
    } else if (std::filesystem::exists(p, ec)) {
      files.emplace_back(p);
    } else {
      std::fprintf(stderr, "fuzz smoke: %s does not exist\n", p.c_str());
      return 2;
    }
    for (const auto& f : files) {
      Bytes b;
      if (!read_file(f, &b)) {
        std::fprintf(stderr, "fuzz smoke: cannot read %s\n", f.c_str());
        return 2;
      }
      std::snprintf(g_crash_path, sizeof(g_crash_path), "%s", f.c_str());  // replay: name it
      run_one(b, timeout_s);
      corpus.push_back(std::move(b));
    }
  }
  std::snprintf(g_crash_path, sizeof(g_crash_path), "fuzz-crash-%s", target.c_str());
  g_write_crash = true;
  if (corpus.empty()) corpus.emplace_back();
  const std::vector<Bytes> dict = dict_path.empty() ? std::vector<Bytes>() : read_dict(dict_path);

  Rng rng{seed};
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t done = 0;
  for (; done < runs; ++done) {
    if (max_total_time > 0 &&
        std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
            max_total_time)
      break;
    Bytes b = corpus[rng.below(corpus.size())];
    mutate(&b, corpus, dict, rng, max_len);
    run_one(b, timeout_s);
  }
  std::printf("fuzz smoke %s: replayed %zu inputs, ran %llu of %llu mutations (seed %llu)\n",
              target.c_str(), corpus.size(), static_cast<unsigned long long>(done),
              static_cast<unsigned long long>(runs), static_cast<unsigned long long>(seed));
  return 0;
}
