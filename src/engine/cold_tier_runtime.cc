// ColdTierRuntime (see cold_tier_runtime.h).
#include "engine/cold_tier_runtime.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/kv_cache_factory.h"
#include "util/file_system.h"
#include "util/knobs.h"
#include "util/logging.h"
#include "util/sha256.h"

namespace pagedkv::engine {
namespace {

constexpr uint64_t kWholeFileLimit = 256ull << 20;
constexpr uint64_t kSampleBytes = 64ull << 10;
constexpr uint64_t kSampleStride = 16ull << 20;

// config.json fields the tier reads; absent or malformed fields are unset.
cold::ColdConfig read_cold_config(const std::string& model_dir) {
  cold::ColdConfig c;
  std::ifstream in(join_path(model_dir, "config.json"));
  if (!in) return c;
  try {
    auto j = nlohmann::json::parse(in);
    if (j.contains("persist_paged_cache") && j["persist_paged_cache"].is_boolean()) {
      c.persist_paged_cache = j["persist_paged_cache"].get<bool>();
    }
    if (j.contains("cold_cache_dir") && j["cold_cache_dir"].is_string()) {
      c.cold_cache_dir = j["cold_cache_dir"].get<std::string>();
    }
    if (j.contains("cold_cache_quota_mb") && j["cold_cache_quota_mb"].is_number_unsigned()) {
      c.cold_cache_quota_mb = j["cold_cache_quota_mb"].get<uint64_t>();
    }
  } catch (const nlohmann::json::exception& e) {
    PKV_LOG(kWarn) << "cold tier: ignoring config.json cold fields: " << e.what();
  }
  return c;
}

}  // namespace

StatusOr<std::string> weight_identity(const std::string& model_dir) {
  FileSystem& fs = FileSystem::posix();
  PKV_ASSIGN_OR_RETURN(std::vector<std::string> names, fs.list_dir(model_dir));
  std::sort(names.begin(), names.end());
  Sha256 h;
  h.update("pagedkv-weight-identity-v1");
  for (const std::string& name : names) {
    const bool config = name == "config.json";
    const bool weights =
        name.size() > 12 && name.compare(name.size() - 12, 12, ".safetensors") == 0;
    if (!config && !weights) continue;
    const std::string path = join_path(model_dir, name);
    std::ifstream in(path, std::ios::binary);
    if (!in) return io_error("weight identity: cannot read '" + path + "'");
    in.seekg(0, std::ios::end);
    const uint64_t size = static_cast<uint64_t>(in.tellg());
    h.update(name);
    h.update(&size, sizeof(size));
    std::vector<char> buf;
    auto take = [&](uint64_t off, uint64_t n) {
      buf.resize(n);
      in.seekg(static_cast<std::streamoff>(off));
      in.read(buf.data(), static_cast<std::streamsize>(n));
      h.update(buf.data(), static_cast<size_t>(in.gcount()));
    };
    if (size <= kWholeFileLimit) {
      take(0, size);
    } else {
      for (uint64_t off = 0; off < size; off += kSampleStride) {
        take(off, std::min(kSampleBytes, size - off));
      }
      take(size - std::min(kSampleBytes, size), std::min(kSampleBytes, size));
    }
  }
  return to_hex(h.finish());
}

bool ColdTierRuntime::persist_requested(const std::string& model_dir,
                                        const ColdTierOptions& options) {
  if (options.persist) return *options.persist;
  if (auto e = env_bool("PAGEDKV_PERSIST_PAGED_CACHE")) return *e;
  return !model_dir.empty() && read_cold_config(model_dir).persist_paged_cache.value_or(false);
}

StatusOr<std::unique_ptr<ColdTierRuntime>> ColdTierRuntime::open_if_enabled(
    const model::Model& model, const std::string& model_dir, const ColdTierOptions& options,
    Status* open_error) {
  cold::ColdConfig config = read_cold_config(model_dir);
  if (options.dir) config.cold_cache_dir = options.dir;
  if (options.quota_mb) config.cold_cache_quota_mb = options.quota_mb;
  const std::string& type = model.config().model_type;
  if (!cold::resolve_persist_cold(type, config.persist_paged_cache, options.persist)) {
    if ((options.persist && *options.persist) && !cold::cold_restore_supported(type)) {
      PKV_LOG(kWarn) << "cold tier: family '" << type
                     << "' is not in COLD_RESTORE_FAMILIES; persistence stays off";
    }
    return std::unique_ptr<ColdTierRuntime>();
  }
  std::unique_ptr<ColdTierRuntime> s(new ColdTierRuntime());
  // The tier is an optimisation: a directory that cannot be opened (mode 000, a
  // file in the way, a full disk) or a model directory whose files cannot be read
  // degrades this process to uncached with one warning and a counted error
  // (*open_error); the answer is the same either way.
  auto degrade = [&](const Status& st) {
    PKV_LOG(kWarn) << "cold tier: disabled for this process, continuing uncached: "
                   << st.to_string();
    if (open_error != nullptr) *open_error = st;
    return std::unique_ptr<ColdTierRuntime>();
  };
  auto store = cold::ColdStore::open(cold::resolve_cold_store_options(config));
  if (!store.ok()) return degrade(store.status());
  s->store_ = std::move(store).value();
  auto wid_or = weight_identity(model_dir);
  if (!wid_or.ok()) return degrade(wid_or.status());
  const std::string wid = std::move(wid_or).value();
  const kv::KVGeometry pool = pool_geometry(model.kv_geometry());
  cold::ColdModelIdentity id;
  id.model_type = type;
  id.weight_identity = wid;  // covers config.json (RoPE, window, ...) and the weights
  // A device pool's K/V are the device's bits ("cuda:0" -> "cuda"; any ordinal).
  if (auto st = kv_storage_for(model); !st->host_accessible()) {
    const std::string name(st->name());
    id.device = name.substr(0, name.find(':'));
  }
  id.numerics = model.kv_numerics();
  const cold::ModelFingerprint fp = cold::fingerprint_for(id, pool);
  // Which objects this process can read: a store written by another build, device
  // or numerics (docs/cold-tier.md) shows another fingerprint in `pagedkv cold ls`.
  PKV_LOG(kInfo) << "cold tier: " << s->store_->root() << ", model fingerprint "
                 << to_hex(fp.digest()).substr(0, 16) << " (" << fp.cache_layout << ")";
  s->walk_ = std::make_unique<cold::ColdTierWalk>(s->store_.get(), fp);
  auto trace = cold::ColdTraceWriter::open(options.metrics_dir);
  if (trace.ok()) {
    s->trace_ = std::move(trace).value();
  } else {
    PKV_LOG(kWarn) << "cold tier: no per-turn trace: " << trace.status().to_string();
  }
  s->turn_start_ = s->store_->stats();
  return s;
}

cold::RestoreResult ColdTierRuntime::restore(kv::PagedKVCacheAdapter& adapter,
                                             std::span<const int32_t> prompt) {
  cold::RestoreResult r = walk_->restore_extend(adapter, prompt);
  PKV_LOG(kDebug) << "[trace] paged cold_restore hot_blocks=" << r.hot_blocks
                  << " candidates=" << r.candidates << " restored=" << r.restored
                  << " stop=" << r.stop;
  return r;
}

cold::CaptureResult ColdTierRuntime::capture_and_end_turn(kv::PagedKVCacheAdapter& adapter,
                                                          int64_t restored_tokens,
                                                          cold::CaptureContinuation* rest,
                                                          int32_t rest_limit) {
  cold::CaptureResult capture = walk_->capture_chain(adapter, rest, rest_limit);
  ++turn_;
  if (trace_) {
    std::ostringstream extra;
    extra << "\"restoredTokens\":" << restored_tokens << ",\"captureBlocks\":" << capture.walked
          << ",\"captureEnqueued\":" << capture.enqueued << ",\"captureStop\":\"" << capture.stop
          << "\",\"captureElapsedMs\":" << capture.elapsed_ms;
    const cold::ColdCacheStats now = store_->stats();
    Status st = trace_->append_turn(turn_, turn_start_, now, extra.str());
    if (!st.ok()) {
      PKV_LOG(kDebug) << "cold tier trace: " << st.to_string();
    }
  }
  turn_start_ = store_->stats();
  return capture;
}

uint64_t ColdTierRuntime::continue_capture(cold::CaptureContinuation rest) {
  std::lock_guard<std::mutex> lk(mu_);
  const uint64_t id = next_job_++;
  cancel_.store(false, std::memory_order_release);
  jobs_.emplace_back(id, std::move(rest));
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  cv_.notify_all();
  return id;
}

void ColdTierRuntime::worker_loop() {
  std::unique_lock<std::mutex> lk(mu_);
  for (;;) {
    cv_.wait(lk, [&] { return stop_ || !jobs_.empty(); });
    if (jobs_.empty()) return;  // stop_ and drained
    auto job = std::move(jobs_.front());
    jobs_.pop_front();
    busy_ = true;
    lk.unlock();
    const int32_t n = walk_->continue_capture(job.second, &cancel_);
    continued_blocks_.fetch_add(static_cast<uint64_t>(n));
    job.second = cold::CaptureContinuation();  // drop the generation view now
    lk.lock();
    busy_ = false;
    finished_.push_back(job.first);
    cv_.notify_all();
  }
}

std::vector<uint64_t> ColdTierRuntime::take_finished() {
  std::lock_guard<std::mutex> lk(mu_);
  std::vector<uint64_t> out;
  out.swap(finished_);
  return out;
}

void ColdTierRuntime::cancel_continuations() { cancel_.store(true, std::memory_order_release); }

void ColdTierRuntime::flush() {
  {
    std::unique_lock<std::mutex> lk(mu_);
    cv_.wait(lk, [&] { return jobs_.empty() && !busy_; });
  }
  store_->flush();
}

ColdTierRuntime::~ColdTierRuntime() {
  {
    std::lock_guard<std::mutex> lk(mu_);
    stop_ = true;
  }
  cancel_.store(true, std::memory_order_release);
  cv_.notify_all();
  if (worker_.joinable()) worker_.join();
}

}  // namespace pagedkv::engine
