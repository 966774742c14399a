// Test helpers for kernels on the SIMT emulator (simt.h): device buffers of any ElemType, the
// tolerances of the backend parity suite, and the comparison of attention outputs.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include "cuda_runtime.h"
#include "engine/core/dtype.h"
#include "engine/cuda/attention_kernels.h"  // ElemType

namespace simt {

using manyshot::cuda::ElemType;

inline size_t ElemBytes(ElemType t) { return t == ElemType::kF32 ? 4 : 2; }

// A buffer of n elements of type t in emulated device memory (it starts as 0xff bytes, so what a
// kernel never wrote is recognisable), read and written through f32.
struct Buffer {
  ElemType type = ElemType::kF32;
  int64_t n = 0;
  void* p = nullptr;
  Buffer() = default;
  Buffer(ElemType t, int64_t count, size_t misalign_bytes = 0) : type(t), n(count) {
    base = simt::DeviceAlloc(static_cast<size_t>(count) * ElemBytes(t) + misalign_bytes);
    p = static_cast<unsigned char*>(base) + misalign_bytes;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    std::swap(type, o.type);
    std::swap(n, o.n);
    std::swap(p, o.p);
    std::swap(base, o.base);
    return *this;
  }
  ~Buffer() { simt::DeviceFree(base); }

  void Set(int64_t i, float x) {
    switch (type) {
      case ElemType::kF16: {
        const uint16_t b = manyshot::F32ToF16(x);
        std::memcpy(static_cast<uint16_t*>(p) + i, &b, 2);
        break;
      }
      case ElemType::kBF16: {
        const uint16_t b = manyshot::F32ToBF16(x);
        std::memcpy(static_cast<uint16_t*>(p) + i, &b, 2);
        break;
      }
      default:
        std::memcpy(static_cast<float*>(p) + i, &x, 4);
        break;
    }
  }
  double Get(int64_t i) const {
    uint16_t b;
    switch (type) {
      case ElemType::kF16:
        std::memcpy(&b, static_cast<const uint16_t*>(p) + i, 2);
        return manyshot::F16ToF32(b);
      case ElemType::kBF16:
        std::memcpy(&b, static_cast<const uint16_t*>(p) + i, 2);
        return manyshot::BF16ToF32(b);
      default: {
        float f;
        std::memcpy(&f, static_cast<const float*>(p) + i, 4);
        return f;
      }
    }
  }
  bool Untouched(int64_t i) const {
    const auto* b = static_cast<const unsigned char*>(p) + i * ElemBytes(type);
    for (size_t k = 0; k < ElemBytes(type); ++k) {
      if (b[k] != 0xff) return false;
    }
    return true;
  }
  void Fill(std::mt19937& rng, float lo, float hi) {
    std::uniform_real_distribution<float> u(lo, hi);
    for (int64_t i = 0; i < n; ++i) Set(i, u(rng));
  }

 private:
  void* base = nullptr;
};

// Largest |o - reference| allowed, relative to values of magnitude 1, and |lse - reference|, by
// the K/V type (the tensor-core kernel rounds q and the probabilities to it): the backend parity
// suite's f32 2e-5, f16 4e-3, bf16 2e-2.
inline double OTolerance(ElemType t) {
  return t == ElemType::kBF16 ? 2e-2 : t == ElemType::kF16 ? 4e-3 : 2e-5;
}
inline double LseTolerance(ElemType t) {
  return t == ElemType::kBF16 ? 5e-2 : t == ElemType::kF16 ? 1e-2 : 1e-4;
}

// The worst errors of an attention output (o, lse) against a double-precision reference.
struct AttentionErrors {
  double o = 0.0;
  double lse = 0.0;

  // Row `off` (q row * heads + head) of o [..., dim] and of lse against ref and ref_lse (-inf for
  // a row that saw no key: then lse must be -inf too). Fails on a non-finite output.
  ::testing::AssertionResult Add(const Buffer& o_buf, const Buffer& lse_buf, int64_t off, int dim,
                                 const std::vector<double>& ref, double ref_lse) {
    for (int d = 0; d < dim; ++d) {
      const double got = o_buf.Get(off * dim + d);
      if (!std::isfinite(got)) return ::testing::AssertionFailure() << "o dim " << d << " " << got;
      o = std::max(o, std::abs(got - ref[d]));
    }
    const double got_lse = lse_buf.Get(off);
    if (std::isinf(ref_lse)) {
      if (!std::isinf(got_lse) || got_lse > 0) {
        return ::testing::AssertionFailure() << "lse " << got_lse << " for a row with no key";
      }
    } else if (!std::isfinite(got_lse)) {
      return ::testing::AssertionFailure() << "lse " << got_lse;
    } else {
      lse = std::max(lse, std::abs(got_lse - ref_lse));
    }
    return ::testing::AssertionSuccess();
  }

  void ExpectWithin(ElemType kv_type) const {
    EXPECT_LE(o, OTolerance(kv_type));
    EXPECT_LE(lse, LseTolerance(kv_type));
  }
};

}  // namespace simt
