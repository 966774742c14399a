// GeGlu and Relu on the CPU (T5's and Gemma's feed-forward activations) and Scale, beside the other
// elementwise ops in cpu_backend.cc; the same row partitioning and vectorisable math
// (vector_math.h).
#include <algorithm>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_util.h"
#include "engine/cpu/vector_math.h"

namespace manyshot {

using cpu_internal::ParallelRows;
using cpu_internal::RequireF32;

absl::Status CpuBackend::GeGluImpl(const Tensor& gate_up, const Tensor& out) {
  if (auto st = RequireF32("GeGlu", {&gate_up}); !st.ok()) return st;
  const int64_t rows = gate_up.dim(0);
  const int64_t inter = out.dim(1);
  ParallelRows(*pool_, rows, inter, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) {
      const float* g = gate_up.data<float>() + r * 2 * inter;
      const float* u = g + inter;
      float* o = out.data<float>() + r * inter;
      for (int64_t i = 0; i < inter; ++i) o[i] = vmath::GeluTanh(g[i]) * u[i];
    }
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::ReluImpl(const Tensor& x) {
  if (auto st = RequireF32("Relu", {&x}); !st.ok()) return st;
  const int64_t n = x.numel();
  float* p = x.data<float>();
  ParallelRows(*pool_, n / 1024 + 1, 1024, [&](int64_t b, int64_t e) {
    const int64_t end = std::min(n, e * 1024);
    for (int64_t i = b * 1024; i < end; ++i) p[i] = std::max(p[i], 0.0f);
  });
  return absl::OkStatus();
}

absl::Status CpuBackend::ScaleImpl(const Tensor& x, float factor) {
  if (auto st = RequireF32("Scale", {&x}); !st.ok()) return st;
  const int64_t n = x.numel();
  float* p = x.data<float>();
  ParallelRows(*pool_, n / 1024 + 1, 1024, [&](int64_t b, int64_t e) {
    const int64_t end = std::min(n, e * 1024);
    for (int64_t i = b * 1024; i < end; ++i) p[i] *= factor;
  });
  return absl::OkStatus();
}

}  // namespace manyshot
