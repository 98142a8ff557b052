#include <gtest/gtest.h>

#include "runtime/status.h"

namespace flick {
namespace {

TEST(Status, ExitCodesFollowTheBatchContract) {
  EXPECT_EQ(exit_code(ok_status()), 0);
  EXPECT_EQ(exit_code(usage_error("x")), 64);
  EXPECT_EQ(exit_code(invalid_input("x")), 65);
  EXPECT_EQ(exit_code(not_found("x")), 65);
  EXPECT_EQ(exit_code(io_error("x")), 75);
  EXPECT_EQ(exit_code(interrupted("x")), 75);
  EXPECT_EQ(exit_code(internal_error("x")), 1);
}

Expected<int> parse_positive(int v) {
  if (v <= 0) return invalid_input("value " + std::to_string(v) + " is not positive");
  return v;
}

Status use(int v, int* out) {
  FLICK_ASSIGN_OR_RETURN(int x, parse_positive(v));
  *out = x;
  return ok_status();
}

TEST(Status, ExpectedPropagatesWithContext) {
  int out = 0;
  EXPECT_TRUE(use(3, &out).ok());
  EXPECT_EQ(out, 3);
  Status s = use(-1, &out).with_context("job a.toml");
  EXPECT_EQ(s.code(), StatusCode::kInvalidInput);
  EXPECT_EQ(s.message(), "job a.toml: value -1 is not positive");
}

}  // namespace
}  // namespace flick
