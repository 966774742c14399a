// Branch-free float math written so that loops over it auto-vectorise (AVX2 / AVX-512). libm's
// expf/tanhf are scalar calls, and softmax + GELU would otherwise cost more than the matrix work.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

namespace manyshot::vmath {

// exp(x) with about 2 ulp error over the float range; exact 0 below -87.3 (so -inf -> 0).
inline float Exp(float x) {
  const float kMax = 88.3762626647949f;
  const float kMin = -87.3365447504f;
  bool underflow = x < kMin;
  x = x > kMax ? kMax : x;
  x = x < kMin ? kMin : x;
  float fx = x * 1.44269504088896341f + 0.5f;
  float n = std::floor(fx);
  float r = x - n * 0.693359375f + n * 2.12194440e-4f;
  float r2 = r * r;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  float y = p * r2 + r + 1.0f;
  int32_t bits = (static_cast<int32_t>(n) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, 4);
  float result = y * scale;
  return underflow ? 0.0f : result;
}

inline float Tanh(float x) {
  // 1 - 2 / (e^{2x} + 1); |x| >= 9 is +-1 to float precision.
  x = x > 9.0f ? 9.0f : (x < -9.0f ? -9.0f : x);
  return 1.0f - 2.0f / (Exp(2.0f * x) + 1.0f);
}

// GPT-2's "gelu_new": 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
inline float GeluTanh(float x) {
  const float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + Tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

// erf(x) by Abramowitz & Stegun 7.1.26 (|error| <= 1.5e-7 before float rounding), where libm's
// erff is a scalar call.
inline float Erf(float x) {
  const float a = x < 0.0f ? -x : x;
  const float t = 1.0f / (1.0f + 0.3275911f * a);
  float p = 1.061405429f;
  p = p * t - 1.453152027f;
  p = p * t + 1.421413741f;
  p = p * t - 0.284496736f;
  p = p * t + 0.254829592f;
  const float y = 1.0f - p * t * Exp(-a * a);
  return x < 0.0f ? -y : y;
}

// GPT-NeoX's "gelu" (torch's default GELU): 0.5 x (1 + erf(x / sqrt(2))).
inline float GeluErf(float x) {
  const float kInvSqrt2 = 0.7071067811865476f;
  return 0.5f * x * (1.0f + Erf(x * kInvSqrt2));
}

inline float Silu(float x) { return x / (1.0f + Exp(-x)); }

}  // namespace manyshot::vmath
