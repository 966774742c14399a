// One query row's attention output checked against exact (double-precision) softmax attention,
// within a rounding bound derived from the float computation rather than a tuned tolerance.
//
// Bound. With u = 2^-24 and gamma_n = n u / (1 - n u): each logit s_j = scale * q.k_j (+ an
// extra log-weight) carries an error of at most delta = scale * (gamma_D + u) * max_j sum_d
// |q_d k_jd| + u max_j |s_j| (a D-term dot product, the query's scaling, the added weight); exp
// adds at most 2^-21 relative. Each weight p_j is then off by a factor within e = 2 delta + 2^-21
// (the max it is shifted by moves with the logits), so the normalised output
// sum_j p_j v_j / sum_j p_j moves by at most 2 e max|v|; adding L terms in float costs at most
// gamma_L on the numerator (scaled by max|v|) and on the denominator.
//   |o - o_exact| <= (2 e + 2 gamma_L + u) max|v|
//   |lse - lse_exact| <= delta + e + gamma_L + u |lse|
// Dropping or double counting one 64-key tile of 1000 keys moves o by ~1e-2, far above it.
//
// Soft-capped logits (softcap > 0: cap * tanh(scale * q.k / cap) before the extra weight): the
// cap's slope is at most 1, so delta carries through it, and the float tanh (4 ulp), the division
// and the product by cap add at most 8 u cap.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "gtest/gtest.h"

namespace manyshot::testing {

// q [D]; key/value j at k + j * ld, v + j * ld (D values each) for j < len; extra[j] (may be
// empty) is added to logit j (after the soft cap, when softcap > 0). o [D] and lse are the output
// under test.
inline ::testing::AssertionResult MatchesExactAttention(
    const float* q, const float* k, const float* v, int64_t ld, int64_t len, int64_t D, float scale,
    const std::vector<double>& extra, const float* o, float lse, double softcap = 0.0) {
  constexpr double u = 1.0 / (1 << 24);
  auto gamma = [&](int64_t n) { return n * u / (1 - n * u); };
  std::vector<double> s(static_cast<size_t>(len)), acc(static_cast<size_t>(D), 0.0);
  double m = -INFINITY, magnitude = 0, max_s = 0, max_v = 0;
  for (int64_t j = 0; j < len; ++j) {
    double dot = 0, abs_dot = 0;
    for (int64_t d = 0; d < D; ++d) {
      dot += static_cast<double>(q[d]) * k[j * ld + d];
      abs_dot += std::fabs(static_cast<double>(q[d]) * k[j * ld + d]);
      max_v = std::max(max_v, static_cast<double>(std::fabs(v[j * ld + d])));
    }
    s[j] = scale * dot;
    if (softcap > 0) s[j] = softcap * std::tanh(s[j] / softcap);
    s[j] += extra.empty() ? 0.0 : extra[j];
    m = std::max(m, s[j]);
    magnitude = std::max(magnitude, abs_dot);
    max_s = std::max(max_s, std::fabs(s[j]));
  }
  double total = 0;
  for (int64_t j = 0; j < len; ++j) {
    const double p = std::exp(s[j] - m);
    total += p;
    for (int64_t d = 0; d < D; ++d) acc[d] += p * v[j * ld + d];
  }
  const double exact_lse = m + std::log(total);
  const double delta = scale * (gamma(D) + u) * magnitude + u * max_s + 8 * u * softcap;
  const double e = 2 * delta + std::ldexp(1.0, -21);
  const double o_bound = (2 * e + 2 * gamma(len) + u) * max_v;
  const double lse_bound = delta + e + gamma(len) + u * std::fabs(exact_lse);
  if (!(std::fabs(lse - exact_lse) <= lse_bound)) {
    return ::testing::AssertionFailure()
           << "lse " << lse << ", exact " << exact_lse << ", bound " << lse_bound;
  }
  for (int64_t d = 0; d < D; ++d) {
    if (!(std::fabs(o[d] - acc[d] / total) <= o_bound)) {
      return ::testing::AssertionFailure()
             << "o[" << d << "] " << o[d] << ", exact " << acc[d] / total << ", bound " << o_bound;
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace manyshot::testing
