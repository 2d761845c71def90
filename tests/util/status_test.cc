// Tests for Status/StatusOr and the propagation macros.
#include "pagedkv/status.h"

#include <gtest/gtest.h>

#include <memory>

namespace pagedkv {
namespace {

StatusOr<int> half(int x) {
  if (x % 2 != 0) return invalid_argument("x=" + std::to_string(x) + " is odd");
  return x / 2;
}

StatusOr<int> quarter(int x) {
  PKV_ASSIGN_OR_RETURN(int h, half(x));
  PKV_ASSIGN_OR_RETURN(int q, half(h));
  return q;
}

Status check_even(int x) {
  PKV_RETURN_IF_ERROR(half(x).status());
  return ok_status();
}

TEST(StatusTest, OkAndErrors) {
  EXPECT_TRUE(ok_status().ok());
  EXPECT_EQ(ok_status().to_string(), "OK");
  Status s = not_found("block 7");
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_EQ(s.to_string(), "NotFound: block 7");
  EXPECT_EQ(s.with_context("lookup").message(), "lookup: block 7");
}

TEST(StatusTest, StatusOrPropagates) {
  EXPECT_EQ(*quarter(8), 2);
  auto bad = quarter(6);
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "x=3 is odd");
  EXPECT_TRUE(check_even(4).ok());
  EXPECT_EQ(check_even(5).code(), StatusCode::kInvalidArgument);
}

TEST(StatusTest, StatusOrHoldsMoveOnly) {
  StatusOr<std::unique_ptr<int>> v = std::make_unique<int>(5);
  ASSERT_TRUE(v.ok());
  std::unique_ptr<int> p = std::move(v).value();
  EXPECT_EQ(*p, 5);
}

}  // namespace
}  // namespace pagedkv
