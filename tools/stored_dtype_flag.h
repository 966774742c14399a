// The --dtype flag of the model writers (make-tiny-model, make-tiny-t5, make-induction-model):
// the dtype the weights are stored in, spelled as DTypeName spells it.
#pragma once

#include <iostream>
#include <string>

#include "engine/core/dtype.h"

namespace manyshot {

// Sets *out to the float dtype named `value` ("f32", "f16", "bf16"); otherwise says what --dtype
// takes on stderr and returns false (the tool then exits with status 2).
inline bool ParseStoredDTypeFlag(const std::string& value, DType* out) {
  for (DType dtype : {DType::kF32, DType::kF16, DType::kBF16}) {
    if (value == DTypeName(dtype)) {
      *out = dtype;
      return true;
    }
  }
  std::cerr << "--dtype must be f32, f16 or bf16, got " << value << "\n";
  return false;
}

}  // namespace manyshot
