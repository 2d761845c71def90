// The render budget (see jinja_budget.h).
#include "jinja/jinja_budget.h"

#include "jinja/jinja_value.h"
#include "util/knobs.h"

namespace pagedkv::jinja {

RenderLimits RenderLimits::from_env() {
  RenderLimits l;
  if (auto v = env_u64("PAGEDKV_CHAT_TEMPLATE_MAX_STEPS"); v && *v > 0) l.max_steps = *v;
  if (auto v = env_u64("PAGEDKV_CHAT_TEMPLATE_MAX_BYTES"); v && *v > 0) l.max_bytes = *v;
  return l;
}

RenderBudget::RenderBudget(const RenderLimits& limits) : previous_(current_), limits_(limits) {
  current_ = this;
}

RenderBudget::~RenderBudget() { current_ = previous_; }

void RenderBudget::over_steps() {
  throw JinjaError(JinjaError::Kind::kLimit, "the render took more than " +
                                                 std::to_string(limits_.max_steps) +
                                                 " steps (PAGEDKV_CHAT_TEMPLATE_MAX_STEPS)");
}

uint64_t RenderBudget::max_bytes() {
  return current_ != nullptr ? current_->limits_.max_bytes : RenderLimits::kDefaultMaxBytes;
}

void RenderBudget::check_bytes(uint64_t bytes, const char* what) {
  if (current_ == nullptr) return;  // inputs converted before a render are not limited here
  const uint64_t limit = max_bytes();
  if (bytes <= limit) return;
  throw JinjaError(JinjaError::Kind::kLimit, std::string(what) + " of " + std::to_string(bytes) +
                                                 " bytes exceeds the limit of " +
                                                 std::to_string(limit) +
                                                 " bytes (PAGEDKV_CHAT_TEMPLATE_MAX_BYTES)");
}

void RenderBudget::check_bytes(uint64_t count, uint64_t each, const char* what) {
  if (current_ == nullptr) return;
  const uint64_t limit = max_bytes();
  if (each != 0 && count > limit / each) {
    throw JinjaError(JinjaError::Kind::kLimit,
                     std::string(what) + " of " + std::to_string(count) + " x " +
                         std::to_string(each) + " bytes exceeds the limit of " +
                         std::to_string(limit) + " bytes (PAGEDKV_CHAT_TEMPLATE_MAX_BYTES)");
  }
}

}  // namespace pagedkv::jinja
