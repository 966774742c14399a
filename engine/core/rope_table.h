// What rotate-half RoPE needs besides the positions: one inverse frequency per pair of dimensions
// and a factor on cos/sin (YaRN's attention factor). The model computes it once at load
// (engine/model/rope_scaling.h, per the config's rope_scaling); every backend's Rope reads it.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

namespace manyshot {

struct RopeTable {
  // head_dim / 2 values; the angle of pair i at position p is p * inv_freq[i]. Doubles so that
  // the unscaled table keeps the precision the engine always had (theta^(-2i/d) in double);
  // scaled tables hold the float32 values Hugging Face computes, widened exactly.
  std::vector<double> inv_freq;
  // cos and sin are multiplied by it (HF's attention_scaling; 1 for every type but YaRN).
  double attention_factor = 1.0;
};

// Plain RoPE: inv_freq[i] = theta^(-2i/head_dim) in double (the engine's behaviour before
// rope_scaling existed, kept bit for bit).
inline RopeTable DefaultRopeTable(double theta, int64_t head_dim) {
  RopeTable t;
  t.inv_freq.resize(static_cast<size_t>(head_dim / 2));
  for (int64_t i = 0; i < head_dim / 2; ++i) {
    t.inv_freq[i] = std::pow(theta, -2.0 * static_cast<double>(i) / static_cast<double>(head_dim));
  }
  return t;
}

}  // namespace manyshot
