// The paged-attention launchers' shared argument checks (see attention_check.h).
#include "backend/cuda/attention_check.h"

#include <cmath>
#include <string>

namespace pagedkv::backend::cuda {

Status check_paged_attention_params(const PagedAttentionParams& p, int max_group, const char* who) {
  auto bad = [who](const std::string& what) {
    return invalid_argument(std::string(who) + ": " + what);
  };
  if (p.num_tokens < 0) return bad("num_tokens < 0");
  if (p.num_tokens == 0) return ok_status();
  if (p.num_kv_heads < 1 || p.num_heads < 1 || p.num_heads % p.num_kv_heads != 0)
    return bad("num_heads " + std::to_string(p.num_heads) + " must be a positive multiple of " +
               "num_kv_heads " + std::to_string(p.num_kv_heads));
  if (p.num_heads / p.num_kv_heads > max_group)
    return bad("GQA group " + std::to_string(p.num_heads / p.num_kv_heads) + " exceeds " +
               std::to_string(max_group));
  if (p.block_size < 1) return bad("block_size must be ≥ 1");
  if (p.max_position < 0) return bad("max_position < 0");
  if (!(p.scale > 0.0f) || !std::isfinite(p.scale))
    return bad("scale " + std::to_string(p.scale) + " must be a positive finite number");
  if (p.q == nullptr || p.out == nullptr || p.positions == nullptr || p.workspace == nullptr)
    return bad("q, out, positions and workspace must be set");
  if (p.layout == KvLayout::kBlockTable && (p.block_tables == nullptr || p.max_blocks_per_seq < 1))
    return bad("block layout needs block_tables and max_blocks_per_seq");
  if (p.layout == KvLayout::kContiguous && p.seq_capacity < 1) return bad("seq_capacity < 1");
  if (p.layout == KvLayout::kTilePointers && (p.k_tiles == nullptr || p.v_tiles == nullptr))
    return bad("tile layout needs k_tiles and v_tiles");
  if (p.layout != KvLayout::kTilePointers && (p.k_cache == nullptr || p.v_cache == nullptr))
    return bad("k_cache and v_cache must be set");
  return ok_status();
}

}  // namespace pagedkv::backend::cuda
