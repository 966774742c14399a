// Early-return helpers for absl::Status / absl::StatusOr (abseil 20220623 has no public ones).
// The one definition for the engine; do not define local copies.
#pragma once

#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

// lhs = *expr, or return expr's status. `lhs` must already be declared (the macro is a statement).
#define MANYSHOT_ASSIGN_OR_RETURN(lhs, expr)                            \
  do {                                                                  \
    auto manyshot_status_or_ = (expr);                                  \
    if (!manyshot_status_or_.ok()) return manyshot_status_or_.status(); \
    lhs = *std::move(manyshot_status_or_);                              \
  } while (0)

// Returns expr's status when it is not OK.
#define MANYSHOT_RETURN_IF_ERROR(expr)                   \
  do {                                                   \
    absl::Status manyshot_status_ = (expr);              \
    if (!manyshot_status_.ok()) return manyshot_status_; \
  } while (0)
