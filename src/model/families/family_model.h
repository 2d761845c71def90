// FamilyModel: the part every CPU family's Model (families/*.cc) repeated — the
// checkpoint that owns the mapped bytes the weights view, the backend, the
// ModelConfig and KVGeometry with their accessors — and the config.json bounds
// the families share (docs/limits.md). A family derives from FamilyModel, fills
// cfg_ and geom_ while it loads, and implements forward().
#pragma once

#include <cstdint>
#include <memory>

#include "model/checkpoint.h"
#include "model/config_reader.h"
#include "model/model.h"

namespace pagedkv::model {

// The longest context a config.json may declare (2^26 tokens, beyond any
// released model); docs/limits.md. The default KV pool holds one full context,
// so this also bounds what a config alone can make the engine allocate.
inline constexpr int64_t kMaxPositionEmbeddings = int64_t{1} << 26;
// The largest size field (vocab, hidden, heads, ...) a config.json may declare.
inline constexpr int64_t kMaxConfigSize = int64_t{1} << 30;

// InvalidArgument naming `field` unless 0 < v <= kMaxConfigSize.
Status check_positive(const ConfigReader& c, const char* field, int64_t v);

class FamilyModel : public Model {
 public:
  // cfg_.source_path is the checkpoint's directory. (Public so that a family's
  // inherited constructor is; FamilyModel itself is abstract.)
  FamilyModel(std::shared_ptr<const Checkpoint> ckpt, backend::Backend& be)
      : ckpt_(std::move(ckpt)), be_(&be) {
    cfg_.source_path = ckpt_->dir();
  }

  const ModelConfig& config() const override { return cfg_; }
  const KVGeometry& kv_geometry() const override { return geom_; }
  // The backend's numerics (Backend::numerics: its kernels' version, the C library).
  std::string kv_numerics() const override;

 protected:
  std::shared_ptr<const Checkpoint> ckpt_;  // owns the mapped bytes the weights view
  backend::Backend* be_;
  ModelConfig cfg_;
  KVGeometry geom_;
};

}  // namespace pagedkv::model
