// Status and StatusOr: how every fallible pagedkv call reports failure.
//
// No exceptions cross a module boundary. A failing call returns a Status whose
// code says what kind of failure it was and whose message says what was wrong
// and where (the field, the file, the limit). StatusOr<T> carries either a value
// or a non-OK Status.
#pragma once

#include <cassert>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>

namespace pagedkv {

enum class StatusCode {
  kOk = 0,
  kInvalidArgument,
  kNotFound,
  kCorruption,
  kIOError,
  kResourceExhausted,
  kFailedPrecondition,
  kInternal,
  kCancelled,
};

// Short name of a code, e.g. "InvalidArgument".
std::string_view status_code_name(StatusCode code);

class [[nodiscard]] Status {
 public:
  Status() = default;  // OK
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}

  static Status ok_status() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "InvalidArgument: cache_salt must be at most 256 bytes" (or "OK").
  std::string to_string() const;

  // Returns a copy whose message is prefixed with `context: `.
  Status with_context(std::string_view context) const;

  // Marks a Status as deliberately ignored.
  void ignore_error() const {}

  bool operator==(const Status& other) const = default;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

inline Status ok_status() { return Status(); }
inline Status invalid_argument(std::string m) {
  return Status(StatusCode::kInvalidArgument, std::move(m));
}
inline Status not_found(std::string m) { return Status(StatusCode::kNotFound, std::move(m)); }
inline Status corruption(std::string m) { return Status(StatusCode::kCorruption, std::move(m)); }
inline Status io_error(std::string m) { return Status(StatusCode::kIOError, std::move(m)); }
inline Status resource_exhausted(std::string m) {
  return Status(StatusCode::kResourceExhausted, std::move(m));
}
inline Status failed_precondition(std::string m) {
  return Status(StatusCode::kFailedPrecondition, std::move(m));
}
inline Status internal_error(std::string m) { return Status(StatusCode::kInternal, std::move(m)); }
inline Status cancelled(std::string m) { return Status(StatusCode::kCancelled, std::move(m)); }

template <typename T>
class [[nodiscard]] StatusOr {
 public:
  StatusOr(const Status& status) : rep_(status) { assert(!status.ok()); }  // NOLINT
  StatusOr(Status&& status) : rep_(std::move(status)) {                    // NOLINT
    assert(!std::get<Status>(rep_).ok());
  }
  StatusOr(const T& value) : rep_(value) {}        // NOLINT
  StatusOr(T&& value) : rep_(std::move(value)) {}  // NOLINT
  template <typename U>
  requires(std::is_constructible_v<T, U&&> && !std::is_same_v<std::decay_t<U>, Status> &&
           !std::is_same_v<std::decay_t<U>, StatusOr<T>> && !std::is_same_v<std::decay_t<U>, T>)
      StatusOr(U&& value)
      : rep_(T(std::forward<U>(value))) {}  // NOLINT

  bool ok() const { return std::holds_alternative<T>(rep_); }
  const Status& status() const {
    static const Status kOk;
    return ok() ? kOk : std::get<Status>(rep_);
  }
  const T& value() const& { return std::get<T>(rep_); }
  T& value() & { return std::get<T>(rep_); }
  T&& value() && { return std::get<T>(std::move(rep_)); }
  const T& operator*() const& { return value(); }
  T& operator*() & { return value(); }
  T&& operator*() && { return std::move(*this).value(); }
  const T* operator->() const { return &value(); }
  T* operator->() { return &value(); }

 private:
  std::variant<Status, T> rep_;
};

}  // namespace pagedkv

#define PKV_STATUS_CONCAT_INNER(a, b) a##b
#define PKV_STATUS_CONCAT(a, b) PKV_STATUS_CONCAT_INNER(a, b)

// Returns from the current function when `expr` (a Status) is not OK.
#define PKV_RETURN_IF_ERROR(expr)                      \
  do {                                                 \
    ::pagedkv::Status pkv_status_tmp_ = (expr);        \
    if (!pkv_status_tmp_.ok()) return pkv_status_tmp_; \
  } while (0)

// `PKV_ASSIGN_OR_RETURN(auto x, f());` — unwraps a StatusOr or returns its Status.
#define PKV_ASSIGN_OR_RETURN(lhs, expr) \
  PKV_ASSIGN_OR_RETURN_IMPL(PKV_STATUS_CONCAT(pkv_statusor_, __LINE__), lhs, expr)
#define PKV_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return tmp.status();             \
  lhs = std::move(tmp).value()
