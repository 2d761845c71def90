// RequestHandle: the thread-safe meeting point between a caller and the step
// thread for one request — a token queue, the final result and the cancel flag
// (see include/pagedkv/engine.h).
#include <utility>

#include "pagedkv/engine.h"

namespace pagedkv::engine {

std::string_view finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone:
      return "none";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kLength:
      return "length";
    case FinishReason::kCancelled:
      return "cancelled";
    case FinishReason::kError:
      return "error";
  }
  return "unknown";
}

std::optional<int32_t> RequestHandle::next_token() {
  std::unique_lock<std::mutex> lk(mu_);
  token_cv_.wait(lk, [&] { return !queue_.empty() || finished_; });
  if (queue_.empty()) return std::nullopt;
  const int32_t t = queue_.front();
  queue_.pop_front();
  return t;
}

std::optional<int32_t> RequestHandle::try_next_token() {
  std::lock_guard<std::mutex> lk(mu_);
  if (queue_.empty()) return std::nullopt;
  const int32_t t = queue_.front();
  queue_.pop_front();
  return t;
}

const RequestResult& RequestHandle::wait() {
  std::unique_lock<std::mutex> lk(mu_);
  cv_.wait(lk, [&] { return finished_; });
  return result_;
}

bool RequestHandle::wait_for(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lk(mu_);
  return cv_.wait_for(lk, timeout, [&] { return finished_; });
}

bool RequestHandle::done() const {
  std::lock_guard<std::mutex> lk(mu_);
  return finished_;
}

void RequestHandle::cancel() {
  if (done()) return;
  cancel_.store(true, std::memory_order_release);
  if (wake_) wake_();
}

// A token wakes only a streaming reader (next_token); a caller blocked in
// wait() sleeps until the finish — one wake-up per request, not per token.
void RequestHandle::push_token(int32_t token) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    queue_.push_back(token);
  }
  token_cv_.notify_all();
}

void RequestHandle::finish(RequestResult result) {
  {
    std::lock_guard<std::mutex> lk(mu_);
    if (finished_) return;
    result_ = std::move(result);
    finished_ = true;
  }
  cv_.notify_all();
  token_cv_.notify_all();
}

}  // namespace pagedkv::engine
