// The server's dtype flags (--compute_dtype, --kv_dtype, --weight_dtype) read one way, so that
// each accepts the same names and refuses a bad value in the same words.
#pragma once

#include <optional>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "engine/core/dtype.h"

namespace manyshot {

// "f32", "bf16" or "f16" as a DType; "" as nullopt (the flag's default applies). Anything else is
// INVALID_ARGUMENT "--<flag>=<value> is not one of f32, bf16, f16".
absl::StatusOr<std::optional<DType>> ParseDTypeFlag(absl::string_view flag,
                                                    absl::string_view value);

}  // namespace manyshot
