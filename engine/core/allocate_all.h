// Allocating every activation of a forward pass in one call, shared by the model code
// (Transformer, T5Model): up front, so that out-of-memory fails before any work is queued.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/types/span.h"
#include "engine/core/backend.h"
#include "engine/core/tensor.h"

namespace manyshot {

// One tensor to allocate: *tensor becomes a new device tensor of `dtype` and `shape`.
struct TensorAllocation {
  Tensor* tensor;
  DType dtype;
  std::vector<int64_t> shape;
};

// Allocates each tensor in order; the first failure (RESOURCE_EXHAUSTED when the device is out of
// memory) is returned and the tensors after it are left as they were.
absl::Status AllocateAll(Backend& backend, absl::Span<const TensorAllocation> tensors);

}  // namespace manyshot
