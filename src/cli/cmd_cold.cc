// `pagedkv cold`: inspect and maintain a cold-tier directory.
//   stats   summary of the directory (objects, bytes, quota, disk)
//   ls      one line per object (key, size, last use; --long decodes the header)
//   verify  re-check every object like fsck; --prune removes the bad ones
//   gc      enforce the quota (LRU eviction) and remove dead writers' temp files
// A hidden `stress` subcommand writes synthetic objects under load; the crash and
// sharing tests run it as a child process and kill it with SIGKILL.
#include <chrono>
#include <cstring>
#include <ctime>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "cli/args.h"
#include "cli/command_registry.h"
#include "cli/text_format.h"
#include "kv/cold/cold_store.h"
#include "kv/cold/cold_synthetic.h"
#include "kv/cold/cold_tier.h"
#include "util/knobs.h"

namespace pagedkv::cli {
namespace {

using cold::ColdStore;
using cold::ColdStoreOptions;

constexpr char kUsage[] =
    "usage: pagedkv cold <stats|ls|verify|gc> [--dir DIR] [options]\n\n"
    "Inspect and maintain the cold tier (persisted KV blocks, docs/cold-tier.md).\n"
    "DIR defaults to PAGEDKV_COLD_CACHE_DIR, else $XDG_CACHE_HOME/pagedkv/cold,\n"
    "else ~/.cache/pagedkv/cold.\n\n"
    "  stats    objects, bytes, quota and disk space of the directory\n"
    "  ls       one line per object: key, size, last use (--long: decoded header)\n"
    "  verify   re-check every object (checksums, bounds, key); --prune removes bad ones;\n"
    "           exit status 1 when any bad object was found\n"
    "  gc       when over the quota (--quota-mb or PAGEDKV_COLD_CACHE_QUOTA_MB, default\n"
    "           min(10% of disk, 100 GiB)), evict least-recently-used objects down to 90%\n"
    "           of it; also evict while the disk has less than 5% free\n"
    "Every subcommand first removes temp files left by writers that are gone.\n"
    "\nRun `pagedkv cold <subcommand> --help` for its options.\n";

StatusOr<std::unique_ptr<ColdStore>> open_store(const ArgParser& args, bool writer,
                                                uint64_t quota_bytes = 0) {
  ColdStoreOptions o = cold::resolve_cold_store_options(cold::ColdConfig{});
  if (auto d = args.get_optional("dir")) o.root = *d;
  o.start_writer = writer;
  if (quota_bytes) o.quota_bytes = quota_bytes;
  // These commands inspect a directory: a mistyped one is named, not created empty.
  PKV_ASSIGN_OR_RETURN(FileInfo info, FileSystem::posix().stat(o.root));
  if (info.type == FileType::kMissing)
    return not_found("cold directory " + o.root + " does not exist");
  return ColdStore::open(o);
}

std::string format_time(int64_t ns) {
  std::time_t t = static_cast<std::time_t>(ns / 1000000000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

int cmd_stats(ArgParser& args) {
  auto store = open_store(args, false);
  if (!store.ok()) return report_error("cold stats", store.status());
  auto disk = FileSystem::posix().disk_space((*store)->root());
  auto s = (*store)->stats();
  // One key=value line, sizes in binary units (the [cold] line of --stats too).
  std::cout << "root=" << (*store)->root() << " objects=" << (*store)->object_count()
            << " size=" << human_bytes((*store)->total_bytes())
            << " quota=" << human_bytes((*store)->quota_bytes());
  if (disk.ok()) {
    std::cout << " disk_total=" << human_bytes(disk->total_bytes)
              << " disk_free=" << human_bytes(disk->free_bytes);
  }
  std::cout << " hostile_entries_refused=" << s.corruptions << "\n";
  return 0;
}

int cmd_ls(ArgParser& args) {
  auto store = open_store(args, false);
  if (!store.ok()) return report_error("cold ls", store.status());
  const bool longfmt = args.has("long");
  for (const auto& info : (*store)->list()) {
    std::cout << cold::key_hex(info.key) << "  " << info.size << "  "
              << format_time(info.last_use_ns);
    if (longfmt) {
      // Header and size first: never reads more than the object declares.
      auto bytes = (*store)->read_object_file((*store)->object_path(info.key));
      auto dec =
          bytes.ok() ? cold::decode_object(*bytes) : StatusOr<cold::DecodedObject>(bytes.status());
      if (!dec.ok()) {
        std::cout << "  BAD: " << dec.status().message();
      } else {
        const auto& h = dec->header;
        std::cout << "  block=" << h.block_index << " tokens=" << h.tokens.size()
                  << " layers=" << h.geometry.num_layers << " kv_heads=" << h.geometry.num_kv_heads
                  << " head_dim=" << h.geometry.head_dim
                  << " dtype=" << cold::dtype_name(h.geometry.dtype)
                  << " fingerprint=" << to_hex(h.fingerprint).substr(0, 16);
      }
    }
    std::cout << "\n";
  }
  return 0;
}

int cmd_verify(ArgParser& args) {
  auto store = open_store(args, false);
  if (!store.ok()) return report_error("cold verify", store.status());
  auto report = (*store)->verify(args.has("prune"));
  for (const auto& [name, why] : report.bad) std::cout << "BAD " << name << ": " << why << "\n";
  std::cout << "checked " << report.objects << " objects: " << report.ok << " ok, "
            << report.bad.size() << " bad, " << report.pruned << " pruned\n";
  return report.bad.empty() ? 0 : 1;
}

int cmd_gc(ArgParser& args) {
  uint64_t quota = 0;
  if (args.has("quota-mb")) {
    auto q = args.get_int("quota-mb");
    // Held in bytes: a larger value would wrap around 2^64 bytes.
    constexpr int64_t kMaxQuotaMb = int64_t{1} << 43;
    if (!q.ok() || *q <= 0 || *q > kMaxQuotaMb) {
      return report_error("cold gc", invalid_argument("--quota-mb must be a positive integer of "
                                                      "at most " +
                                                      std::to_string(kMaxQuotaMb)));
    }
    quota = static_cast<uint64_t>(*q) << 20;
  }
  auto store = open_store(args, false, quota);
  if (!store.ok()) return report_error("cold gc", store.status());
  const uint64_t before = (*store)->total_bytes();
  (*store)->enforce_quota();
  auto s = (*store)->stats();
  std::cout << "quota=" << human_bytes((*store)->quota_bytes())
            << " size_before=" << human_bytes(before)
            << " size_after=" << human_bytes((*store)->total_bytes())
            << " evicted_objects=" << s.evictions << "\n";
  return 0;
}

// Hidden: writes synthetic objects [start, start+count) in a random order through
// the writer (waiting for queue slots), reading back and checking random earlier
// ids as it goes; prints the final counters as JSON. Exit 3 when a read served
// bytes that differ from the synthetic content.
int cmd_stress(ArgParser& args) {
  auto count = args.get_int("count");
  auto start = args.get_int("start");
  auto seed = args.get_int("seed");
  auto quota = args.get_int("quota-bytes");
  if (!count.ok() || !start.ok() || !seed.ok() || !quota.ok()) {
    return report_error("cold stress", invalid_argument("bad numeric option"));
  }
  ColdStoreOptions o = cold::resolve_cold_store_options(cold::ColdConfig{});
  if (auto d = args.get_optional("dir")) o.root = *d;
  o.quota_bytes = static_cast<uint64_t>(*quota);
  if (auto m = cold::parse_sync_mode(args.get("sync"))) o.sync = *m;
  auto store_or = ColdStore::open(o);
  if (!store_or.ok()) return report_error("cold stress", store_or.status());
  ColdStore& store = **store_or;
  const auto fp = cold::synthetic_fingerprint();
  const auto fpd = fp.digest();
  const auto geom = cold::ColdGeometry::from(fp);
  std::mt19937_64 rng(static_cast<uint64_t>(*seed));
  std::vector<uint64_t> ids;
  for (int64_t i = 0; i < *count; ++i) ids.push_back(static_cast<uint64_t>(*start + i));
  std::shuffle(ids.begin(), ids.end(), rng);
  uint64_t wrong = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    auto obj = cold::make_synthetic_object(fp, ids[i]);
    store.enqueue_before(obj.key, obj.bytes,
                         std::chrono::steady_clock::now() + std::chrono::seconds(5));
    if (i % 4 == 3) {
      uint64_t id = ids[rng() % (i + 1)];
      auto tokens = cold::synthetic_tokens(fp, id);
      auto got = store.read(cold::synthetic_expectation(fp, fpd, geom, tokens, id));
      if (got.ok()) {
        auto want = cold::synthetic_payload(fp, id);
        if (!std::equal(want.begin(), want.end(), got->object.payload.begin(),
                        got->object.payload.end())) {
          ++wrong;
        }
      }
    }
  }
  store.flush();
  std::cout << cold::cold_stats_json(store.stats()) << "\n"
            << "wrong_served " << wrong << "\n";
  return wrong == 0 ? 0 : 3;
}

std::string sub_summary(const std::string& sub) {
  if (sub == "stats")
    return "Print objects, bytes, quota and disk space of the cold-tier directory.";
  if (sub == "ls") return "List the cold-tier objects: key, size, last use (UTC).";
  if (sub == "verify")
    return "Re-check every cold-tier object (checksums, bounds, key); exit status 1 when any "
           "object is bad.";
  if (sub == "gc")
    return "Evict least-recently-used cold-tier objects: down to 90% of the quota when over it, "
           "and while the disk has less than 5% free.";
  if (sub == "stress")
    return "Hidden test tool: write synthetic objects through the writer, reading earlier ones "
           "back; exit status 3 when a read served wrong bytes.";
  return "";
}

int run_cold(int argc, char** argv) {
  if (argc < 2 || std::strcmp(argv[1], "--help") == 0 || std::strcmp(argv[1], "-h") == 0) {
    (argc < 2 ? std::cerr : std::cout) << kUsage;
    return argc < 2 ? 2 : 0;
  }
  const std::string sub = argv[1];
  std::string prog = "pagedkv cold " + sub;
  const std::string name = "cold " + sub;  // ArgParser and report_error add "pagedkv "
  ArgParser args(name, sub_summary(sub));
  args.add_option("dir", "DIR", "cold cache directory");
  if (sub == "ls") args.add_flag("long", "decode each object's header");
  if (sub == "verify") args.add_flag("prune", "remove objects that fail verification");
  if (sub == "gc") args.add_option("quota-mb", "N", "quota in MiB (default: the knob)");
  if (sub == "stress") {
    args.add_option("count", "N", "objects to write", "64");
    args.add_option("start", "N", "first object id", "0");
    args.add_option("seed", "N", "shuffle seed", "1");
    args.add_option("quota-bytes", "N", "quota in bytes (0: default)", "0");
    args.add_option("sync", "MODE", "fsync|fdatasync|none", "fsync");
  }
  std::vector<char*> sub_argv;
  sub_argv.push_back(prog.data());
  for (int i = 2; i < argc; ++i) sub_argv.push_back(argv[i]);
  if (auto rc = args.parse_or_exit_code(static_cast<int>(sub_argv.size()), sub_argv.data()))
    return *rc;
  if (sub == "stats") return cmd_stats(args);
  if (sub == "ls") return cmd_ls(args);
  if (sub == "verify") return cmd_verify(args);
  if (sub == "gc") return cmd_gc(args);
  if (sub == "stress") return cmd_stress(args);
  std::cerr << "pagedkv cold: unknown subcommand '" << sub << "'\n\n" << kUsage;
  return 2;
}

PKV_REGISTER_COMMAND("cold", "inspect, verify and garbage-collect the cold tier", run_cold);

}  // namespace
}  // namespace pagedkv::cli
