// ColdSession (see cold_session.h).
#include "cli/cold_session.h"

#include <algorithm>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "cli/text_format.h"
#include "model/pool_kv_store.h"
#include "util/file_system.h"
#include "util/logging.h"
#include "util/sha256.h"

namespace pagedkv::cli {
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

StatusOr<std::unique_ptr<ColdSession>> ColdSession::open_if_enabled(
    const model::Model& model, const std::string& model_dir, std::optional<bool> caller_flag) {
  const cold::ColdConfig config = read_cold_config(model_dir);
  const std::string& type = model.config().model_type;
  if (!cold::resolve_persist_cold(type, config.persist_paged_cache, caller_flag)) {
    if ((caller_flag && *caller_flag) && !cold::cold_restore_supported(type)) {
      PKV_LOG(kWarn) << "cold tier: family '" << type
                     << "' is not in COLD_RESTORE_FAMILIES; persistence stays off";
    }
    return std::unique_ptr<ColdSession>();
  }
  std::unique_ptr<ColdSession> s(new ColdSession());
  // The tier is an optimisation: a directory that cannot be opened (mode 000, a
  // file in the way, a full disk) degrades this process to uncached with one
  // warning and a counted error; the answer is the same either way.
  auto degrade = [&](const Status& st) {
    PKV_LOG(kWarn) << "cold tier: disabled for this process, continuing uncached: "
                   << st.to_string();
    s->store_.reset();
    s->open_errors_ = 1;
    s->open_error_ = st.to_string();
    return std::move(s);
  };
  auto store = cold::ColdStore::open(cold::resolve_cold_store_options(config));
  if (!store.ok()) return degrade(store.status());
  s->store_ = std::move(store).value();
  auto wid_or = weight_identity(model_dir);
  if (!wid_or.ok()) return degrade(wid_or.status());
  const std::string wid = std::move(wid_or).value();
  const kv::KVGeometry pool = model::pool_geometry(model.kv_geometry());
  cold::ColdModelIdentity id;
  id.model_type = type;
  id.weight_identity = wid;  // covers config.json (RoPE, window, ...) and the weights
  s->walk_ = std::make_unique<cold::ColdTierWalk>(s->store_.get(), cold::fingerprint_for(id, pool));
  auto trace = cold::ColdTraceWriter::open();
  if (trace.ok()) {
    s->trace_ = std::move(trace).value();
  } else {
    PKV_LOG(kWarn) << "cold tier: no per-turn trace: " << trace.status().to_string();
  }
  s->turn_start_ = s->store_->stats();
  return s;
}

int64_t ColdSession::restore(kv::PagedKVCacheAdapter& adapter, std::span<const int32_t> prompt) {
  if (!store_) return 0;
  turn_start_ = store_->stats();
  auto r = walk_->restore_extend(adapter, prompt);
  last_restored_tokens_ = static_cast<int64_t>(r.restored) * walk_->fingerprint().block_size;
  PKV_LOG(kDebug) << "[trace] paged cold_restore hot_blocks=" << r.hot_blocks
                  << " candidates=" << r.candidates << " restored=" << r.restored
                  << " stop=" << r.stop;
  return last_restored_tokens_;
}

cold::CaptureResult ColdSession::capture(kv::PagedKVCacheAdapter& adapter) {
  if (!store_) return cold::CaptureResult{};
  return walk_->capture_chain(adapter);
}

void ColdSession::end_turn(const cold::CaptureResult& capture) {
  ++turn_;
  if (!store_ || !trace_) return;
  std::ostringstream extra;
  extra << "\"restoredTokens\":" << last_restored_tokens_ << ",\"captureBlocks\":" << capture.walked
        << ",\"captureEnqueued\":" << capture.enqueued << ",\"captureStop\":\"" << capture.stop
        << "\",\"captureElapsedMs\":" << capture.elapsed_ms;
  Status st = trace_->append_turn(turn_, turn_start_, store_->stats(), extra.str());
  if (!st.ok()) {
    PKV_LOG(kDebug) << "cold tier trace: " << st.to_string();
  }
  turn_start_ = store_->stats();
}

cold::ColdCacheStats ColdSession::stats() const {
  return store_ ? store_->stats() : cold::ColdCacheStats{};
}

std::string ColdSession::stats_line() const {
  if (!store_) {
    std::ostringstream out;
    out << "[cold] enabled=false open_errors=" << open_errors_ << " error=\"" << open_error_
        << "\"";
    return out.str();
  }
  // The writer thread may still hold queued objects: wait for it, so that
  // bytes_written counts every byte this run wrote.
  store_->flush();
  const cold::ColdCacheStats s = store_->stats();
  std::ostringstream out;
  out << "[cold] root=" << s.root << " hits=" << s.hits << " misses=" << s.misses
      << " restored=" << human_bytes(s.bytes_restored) << " reads=" << s.reads
      << " enqueued=" << s.enqueued << " queue_drops=" << s.queue_drops
      << " written=" << human_bytes(s.bytes_written) << " evictions=" << s.evictions
      << " corruptions=" << s.corruptions << " write_errors=" << s.write_errors
      << " restore_declines=" << s.restore_declines << " quota=" << human_bytes(s.quota_bytes);
  return out.str();
}

}  // namespace pagedkv::cli
