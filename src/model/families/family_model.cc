// The config.json bounds the families share, and their K/V numerics (see
// family_model.h).
#include "model/families/family_model.h"

#include "backend/backend.h"

namespace pagedkv::model {

Status check_positive(const ConfigReader& c, const char* field, int64_t v) {
  if (v <= 0 || v > kMaxConfigSize) return c.error(field, "must be a positive integer");
  return ok_status();
}

std::string FamilyModel::kv_numerics() const { return be_->numerics(); }

}  // namespace pagedkv::model
