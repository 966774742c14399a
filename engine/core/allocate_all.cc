// See allocate_all.h.
#include "engine/core/allocate_all.h"

namespace manyshot {

absl::Status AllocateAll(Backend& backend, absl::Span<const TensorAllocation> tensors) {
  for (const TensorAllocation& t : tensors) {
    auto allocated = backend.Allocate(t.dtype, t.shape);
    if (!allocated.ok()) return allocated.status();
    *t.tensor = *std::move(allocated);
  }
  return absl::OkStatus();
}

}  // namespace manyshot
