// Helpers for backend tests: random host data, upload/download in any dtype, error norms.
#pragma once

#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "engine/core/backend.h"
#include "gtest/gtest.h"

namespace manyshot::testing {

// Uniform values in [-scale, scale).
inline std::vector<float> RandomValues(std::mt19937& rng, int64_t n, float scale = 1.0f) {
  std::uniform_real_distribution<float> dist(-scale, scale);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = dist(rng);
  return v;
}

// The value a float takes once stored in `dtype`.
inline float RoundTo(float x, DType dtype) {
  switch (dtype) {
    case DType::kBF16:
      return BF16ToF32(F32ToBF16(x));
    case DType::kF16:
      return F16ToF32(F32ToF16(x));
    default:
      return x;
  }
}

inline std::vector<float> RoundedTo(std::vector<float> v, DType dtype) {
  for (float& x : v) x = RoundTo(x, dtype);
  return v;
}

// A tensor of `dtype` on `backend` holding `values` (rounded to the dtype).
inline Tensor Upload(Backend& backend, const std::vector<float>& values, DType dtype,
                     std::vector<int64_t> shape) {
  auto t = backend.Allocate(dtype, std::move(shape));
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) return Tensor();
  EXPECT_EQ(t->numel(), static_cast<int64_t>(values.size()));
  if (dtype == DType::kF32) {
    backend.CopyFromHost(values.data(), *t);
  } else {
    std::vector<uint16_t> narrow(values.size());
    for (size_t i = 0; i < values.size(); ++i) {
      narrow[i] = dtype == DType::kBF16 ? F32ToBF16(values[i]) : F32ToF16(values[i]);
    }
    backend.CopyFromHost(narrow.data(), *t);
  }
  return *t;
}

inline Tensor UploadInts(Backend& backend, const std::vector<int32_t>& values) {
  auto t = backend.Allocate(DType::kI32, {static_cast<int64_t>(values.size())});
  EXPECT_TRUE(t.ok()) << t.status();
  backend.CopyFromHost(values.data(), *t);
  return *t;
}

// An uninitialised-looking tensor: every element NaN, so an element an op fails to write shows.
inline Tensor Poisoned(Backend& backend, DType dtype, std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return Upload(backend, std::vector<float>(static_cast<size_t>(n), std::nanf("")), dtype,
                std::move(shape));
}

// The tensor's values as floats (waits for the backend; fails the test on its error).
inline std::vector<float> Download(Backend& backend, const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  if (t.dtype() == DType::kF32) {
    absl::Status s = backend.CopyToHost(t, out.data());
    EXPECT_TRUE(s.ok()) << s;
    return out;
  }
  std::vector<uint16_t> narrow(out.size());
  absl::Status s = backend.CopyToHost(t, narrow.data());
  EXPECT_TRUE(s.ok()) << s;
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = t.dtype() == DType::kBF16 ? BF16ToF32(narrow[i]) : F16ToF32(narrow[i]);
  }
  return out;
}

// ||got - want|| / ||want|| (infinite when any element of `got` is NaN where `want` is not, or
// -inf / inf disagree).
inline double RelativeError(const std::vector<float>& got, const std::vector<float>& want) {
  if (got.size() != want.size()) return INFINITY;
  double diff = 0, norm = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isinf(want[i]) || std::isinf(got[i])) {
      if (got[i] != want[i]) return INFINITY;
      continue;
    }
    if (std::isnan(got[i]) != std::isnan(want[i])) return INFINITY;
    if (std::isnan(want[i])) continue;
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm == 0 ? std::sqrt(diff) : std::sqrt(diff / norm);
}

}  // namespace manyshot::testing
