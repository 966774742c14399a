// The keys and values every sequence of a forward pass may attend to: a task's encoded
// demonstrations. Here, beside EncodedContext, so that the cache can hold them without knowing the
// transformer that reads them.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/core/tensor.h"

namespace manyshot {

// Keys/values shared by all sequences of a pass, per layer [len, kv_heads, head_dim].
struct ContextKv {
  std::vector<Tensor> k, v;
  int64_t len = 0;
  float log_weight = 0.0f;
  // kI32 [len]: the keys' position ids. ALiBi models need them (Forward refuses a context without
  // them); the encoders (engine/prompting/context_encoder.h) always fill them.
  Tensor positions;
};

}  // namespace manyshot
