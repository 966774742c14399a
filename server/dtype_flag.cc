#include "server/dtype_flag.h"

#include "absl/strings/str_cat.h"

namespace manyshot {

absl::StatusOr<std::optional<DType>> ParseDTypeFlag(absl::string_view flag,
                                                    absl::string_view value) {
  if (value.empty()) return std::optional<DType>();
  for (DType t : {DType::kF32, DType::kBF16, DType::kF16}) {
    if (value == absl::string_view(DTypeName(t).data(), DTypeName(t).size()))
      return std::optional<DType>(t);
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, "=", value, " is not one of f32, bf16, f16"));
}

}  // namespace manyshot
