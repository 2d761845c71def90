// The render budget: what one chat-template render may spend, so a hostile or
// broken template stops with an error instead of hanging or taking gigabytes
// (docs/limits.md).
//
// Work is counted in steps: every statement, every expression evaluated, every
// loop iteration, every list item built, every value copied or string built
// (plus one step per kBytesPerStep bytes it holds).
// Sizes are counted in bytes: the rendered output and any single value (a
// string's bytes; a list's items, each counted as sizeof(Value) plus the bytes
// of a string item) must stay under max_bytes, and operations that would make a
// larger value ('a' * n, [x] * n, center(n), indent(n), ...) are refused before
// they allocate. Exceeding either is a JinjaError of kind kLimit, which
// Template::render turns into a ResourceExhausted Status naming the limit.
//
// The budget of the render running on a thread is installed by render() for its
// duration (a thread_local pointer); outside a render (converting a request's
// JSON into values, compiling) nothing is counted or checked.
#pragma once

#include <cstdint>
#include <string>

namespace pagedkv::jinja {

struct RenderLimits {
  // PAGEDKV_CHAT_TEMPLATE_MAX_STEPS: a runaway render stops after about 0.2 s of
  // CPU on the 2-core development VM; a 200-message, 400 KB Qwen3 conversation
  // takes under 100,000 steps.
  static constexpr uint64_t kDefaultMaxSteps = 1'000'000;
  // PAGEDKV_CHAT_TEMPLATE_MAX_BYTES: the output, and any single value.
  static constexpr uint64_t kDefaultMaxBytes = 16ull << 20;
  uint64_t max_steps = kDefaultMaxSteps;
  uint64_t max_bytes = kDefaultMaxBytes;
  // The defaults with the environment's overrides applied.
  static RenderLimits from_env();
};

// Bytes that cost one step when copied or built: with the default step limit a
// render can build or copy at most 1M x 64 B = 64 MiB in all, so its memory
// stays bounded whatever it does.
inline constexpr uint64_t kBytesPerStep = 64;

class RenderBudget {
 public:
  // Installs this budget as the current thread's for its lifetime.
  explicit RenderBudget(const RenderLimits& limits);
  ~RenderBudget();
  RenderBudget(const RenderBudget&) = delete;
  RenderBudget& operator=(const RenderBudget&) = delete;

  // Counts `steps` against the current render (no-op outside one); throws
  // JinjaError(kLimit) once the step limit is passed.
  static void charge(uint64_t steps) {
    RenderBudget* b = current_;
    if (b == nullptr) return;
    b->used_ += steps;
    if (b->used_ > b->limits_.max_steps) b->over_steps();
  }
  // Charges for copying or building `bytes` bytes of a value.
  static void charge_bytes(uint64_t bytes) { charge(1 + bytes / kBytesPerStep); }
  // Throws JinjaError(kLimit) when, inside a render, a value of `bytes` bytes
  // (`what` it is, for the message) would exceed max_bytes. Call before allocating.
  static void check_bytes(uint64_t bytes, const char* what);
  // The same for `count` pieces of `each` bytes (overflow-safe).
  static void check_bytes(uint64_t count, uint64_t each, const char* what);
  // The byte limit in force (the current render's, else the default).
  static uint64_t max_bytes();

 private:
  [[noreturn]] void over_steps();
  inline static thread_local RenderBudget* current_ = nullptr;
  RenderBudget* previous_;
  RenderLimits limits_;
  uint64_t used_ = 0;
};

}  // namespace pagedkv::jinja
