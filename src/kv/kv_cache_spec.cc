// KVCacheSpec and CoordinatorBudget: validation, layer routes, the budget minimum
// (see kv_cache_spec.h).
#include "kv/kv_cache_spec.h"

#include <iterator>
#include <limits>
#include <numeric>

namespace pagedkv::kv {

const char* cache_group_kind_name(CacheGroupKind kind) {
  static constexpr const char* kNames[] = {"full_attention", "sliding_window", "recurrent"};
  const auto i = static_cast<size_t>(kind);
  return i < std::size(kNames) ? kNames[i] : "unknown";
}

std::string CacheGroupSpec::to_string() const {
  std::string s = cache_group_kind_name(kind);
  if (holds_blocks()) s += " block_size=" + std::to_string(block_size);
  if (kind == CacheGroupKind::kSlidingWindow) s += " window=" + std::to_string(sliding_window);
  return s;
}

KVCacheSpec KVCacheSpec::single_full_attention(int32_t block_size, int32_t num_layers) {
  KVCacheSpec spec;
  spec.groups.push_back(CacheGroupSpec{CacheGroupKind::kFullAttention, block_size, 0});
  spec.layer_group.assign(static_cast<size_t>(num_layers), 0);
  spec.layer_kv_source.assign(static_cast<size_t>(num_layers), -1);
  return spec;
}

Status KVCacheSpec::validate() const {
  if (groups.empty()) return invalid_argument("kv cache spec: no cache groups declared");
  for (size_t g = 0; g < groups.size(); ++g) {
    const CacheGroupSpec& c = groups[g];
    const std::string where =
        "kv cache spec: group " + std::to_string(g) + " (" + cache_group_kind_name(c.kind) + ")";
    if (c.kind != CacheGroupKind::kFullAttention && c.kind != CacheGroupKind::kSlidingWindow &&
        c.kind != CacheGroupKind::kRecurrent) {
      return invalid_argument(where + ": unknown group kind " +
                              std::to_string(static_cast<int>(c.kind)));
    }
    if (c.holds_blocks() && (c.block_size < 1 || c.block_size > 4096)) {
      return invalid_argument(where + ": block_size " + std::to_string(c.block_size) +
                              " outside [1, 4096]");
    }
    if (c.kind == CacheGroupKind::kSlidingWindow && c.sliding_window < 1) {
      return invalid_argument(where + ": sliding_window " + std::to_string(c.sliding_window) +
                              " must be >= 1");
    }
  }
  if (!layer_kv_source.empty() && layer_kv_source.size() != layer_group.size()) {
    return invalid_argument("kv cache spec: layer_kv_source has " +
                            std::to_string(layer_kv_source.size()) + " entries, layer_group " +
                            std::to_string(layer_group.size()));
  }
  const int32_t n = static_cast<int32_t>(layer_group.size());
  for (int32_t l = 0; l < n; ++l) {
    const int32_t g = layer_group[static_cast<size_t>(l)];
    const std::string where = "kv cache spec: layer " + std::to_string(l);
    if (g < -1 || g >= static_cast<int32_t>(groups.size())) {
      return invalid_argument(where + ": group " + std::to_string(g) + " out of range [-1, " +
                              std::to_string(groups.size()) + ")");
    }
    const int32_t src = layer_kv_source.empty() ? -1 : layer_kv_source[static_cast<size_t>(l)];
    if (src == -1) continue;
    if (src < 0 || src >= l) {
      return invalid_argument(where + ": kv source " + std::to_string(src) +
                              " must be an earlier layer");
    }
    if (layer_group[static_cast<size_t>(src)] != g || g == -1) {
      return invalid_argument(where + ": kv source layer " + std::to_string(src) + " is in group " +
                              std::to_string(layer_group[static_cast<size_t>(src)]) +
                              ", not the layer's group " + std::to_string(g));
    }
    if (layer_kv_source[static_cast<size_t>(src)] != -1) {
      return invalid_argument(where + ": kv source layer " + std::to_string(src) +
                              " is itself KV-shared (an anchor must own its storage)");
    }
  }
  return ok_status();
}

StatusOr<std::vector<LayerRoute>> KVCacheSpec::resolve_routes() const {
  PKV_RETURN_IF_ERROR(validate());
  std::vector<LayerRoute> routes(layer_group.size());
  std::vector<int32_t> next_slot(groups.size(), 0);
  for (size_t l = 0; l < layer_group.size(); ++l) {
    const int32_t g = layer_group[l];
    if (g < 0) continue;
    const int32_t src = layer_kv_source.empty() ? -1 : layer_kv_source[l];
    routes[l].group = g;
    if (src == -1) {
      routes[l].slot = next_slot[static_cast<size_t>(g)]++;
    } else {
      routes[l].anchor = src;
      routes[l].slot = routes[static_cast<size_t>(src)].slot;
    }
  }
  return routes;
}

int32_t KVCacheSpec::physical_layers(int32_t g) const {
  int32_t n = 0;
  for (size_t l = 0; l < layer_group.size(); ++l) {
    if (layer_group[l] == g && (layer_kv_source.empty() || layer_kv_source[l] == -1)) ++n;
  }
  return n;
}

int64_t KVCacheSpec::hit_granularity() const {
  int64_t g = 1;
  for (const CacheGroupSpec& c : groups) {
    if (c.holds_blocks()) g = std::lcm(g, static_cast<int64_t>(c.block_size));
  }
  return g;
}

int64_t CoordinatorBudget::minimum_blocks(const CacheGroupSpec& group, int64_t max_context_tokens,
                                          int32_t max_live_rows) {
  if (!group.holds_blocks()) return 0;
  const int64_t b = group.block_size;
  return (max_context_tokens + b - 1) / b + 1 + max_live_rows;
}

StatusOr<std::vector<CoordinatorBudget::Resolved>> CoordinatorBudget::resolve(
    const KVCacheSpec& spec) const {
  PKV_RETURN_IF_ERROR(spec.validate());
  if (max_context_tokens < 1) {
    return invalid_argument("coordinator budget: max_context_tokens " +
                            std::to_string(max_context_tokens) + " must be >= 1");
  }
  if (max_live_rows < 1) {
    return invalid_argument("coordinator budget: max_live_rows " + std::to_string(max_live_rows) +
                            " must be >= 1");
  }
  if (max_blocks.size() > spec.groups.size() || initial_blocks.size() > spec.groups.size()) {
    return invalid_argument("coordinator budget: sizes given for more groups than the spec's " +
                            std::to_string(spec.groups.size()));
  }
  std::vector<Resolved> out(spec.groups.size());
  for (size_t g = 0; g < spec.groups.size(); ++g) {
    const std::string where = "coordinator budget: group " + std::to_string(g);
    if (!spec.groups[g].holds_blocks()) continue;
    const int32_t explicit_max = g < max_blocks.size() ? max_blocks[g] : 0;
    const int32_t explicit_initial = g < initial_blocks.size() ? initial_blocks[g] : 0;
    if (explicit_max < 0 || explicit_initial < 0) {
      return invalid_argument(where + ": negative block count");
    }
    Resolved& r = out[g];
    if (explicit_max > 0) {
      if (explicit_max < 2) {
        return invalid_argument(where + ": max_blocks " + std::to_string(explicit_max) +
                                " must be >= 2 (null block + one usable)");
      }
      r.max_blocks = explicit_max;
    } else {
      const int64_t min = minimum_blocks(spec.groups[g], max_context_tokens, max_live_rows);
      if (min > std::numeric_limits<int32_t>::max()) {
        return invalid_argument(where + ": the automatic minimum of " + std::to_string(min) +
                                " blocks does not fit int32");
      }
      r.max_blocks = static_cast<int32_t>(min);
      r.automatic = true;
    }
    r.initial_blocks = explicit_initial > 0 ? explicit_initial : r.max_blocks;
    if (r.initial_blocks < 2) {
      return invalid_argument(where + ": initial_blocks " + std::to_string(r.initial_blocks) +
                              " must be >= 2");
    }
    if (r.initial_blocks > r.max_blocks)
      r.initial_blocks = r.max_blocks;  // clamped, like PoolBudget
  }
  return out;
}

}  // namespace pagedkv::kv
