// The shape of an encoded context and conversions of its K/V between dtypes (f32 <-> bf16/f16).
// All tensor memory goes through a Backend (Allocate / CopyToHost / CopyFromHost), so the same code
// serves a CUDA backend whose tensors live in GPU memory.
#pragma once

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "engine/core/backend.h"
#include "engine/task/encoded_context.h"

namespace manyshot {

struct KvShape {
  DType dtype = DType::kF32;
  int64_t layers = 0;
  int64_t tokens = 0;
  int64_t kv_heads = 0;
  int64_t head_dim = 0;
  int64_t groups = 0;
  int64_t group_length = 0;

  // Exact K/V bytes: 2 * layers * tokens * kv_heads * head_dim * sizeof(dtype).
  size_t PayloadBytes() const;
  bool operator==(const KvShape&) const = default;
};

// The shape (and dtype) of `ctx`; INVALID_ARGUMENT when its tensors disagree with each other.
absl::StatusOr<KvShape> ShapeOf(const EncodedContext& ctx);

// A context of `shape` with uninitialized K/V allocated on `backend` (at least one row per tensor,
// like the encoder, so an empty context still has defined tensors).
absl::StatusOr<EncodedContext> AllocateContext(Backend& backend, const KvShape& shape);

// Converts n elements between dtypes on the host (round to nearest even when narrowing).
void ConvertElements(const void* src, DType from, void* dst, DType to, size_t n);

// A copy of `ctx` with K/V in `dtype` (shares the tensors when the dtype already matches:
// contexts are immutable once encoded).
absl::StatusOr<EncodedContext> ConvertContext(const EncodedContext& ctx, DType dtype,
                                              Backend& backend);

// The f32 context the engine consumes today (16-bit K/V widened exactly).
absl::StatusOr<EncodedContext> ToF32(const EncodedContext& ctx, Backend& backend);

}  // namespace manyshot
