// Helpers shared by the CPU backend's source files.
#pragma once

#include <algorithm>
#include <cstdint>
#include <initializer_list>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "engine/core/tensor.h"
#include "engine/cpu/thread_pool.h"

namespace manyshot::cpu_internal {

// Rows per parallel chunk for row-wise elementwise ops: small ops stay on one thread.
inline int64_t MinRowsPerThread(int64_t row_elems) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(1, row_elems));
}

template <typename Fn>
void ParallelRows(ThreadPool& pool, int64_t rows, int64_t row_elems, Fn&& fn) {
  if (rows <= MinRowsPerThread(row_elems)) {
    fn(0, rows);
  } else {
    pool.ParallelFor(rows, fn);
  }
}

// The CPU computes in f32 only (16-bit K/V are widened inside attention; Convert and the byte
// copies take any dtype).
inline absl::Status RequireF32(const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined() && t->dtype() != DType::kF32) {
      return absl::UnimplementedError(absl::StrCat(op, ": the CPU backend computes in f32, got ",
                                                   std::string(DTypeName(t->dtype()))));
    }
  }
  return absl::OkStatus();
}

}  // namespace manyshot::cpu_internal
