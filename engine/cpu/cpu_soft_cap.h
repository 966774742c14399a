// Soft-capping of attention logits for the CPU backend's tiled attention path (Gemma 2's
// attn_logit_softcapping), vectorised and dispatched at run time (cpu_target.h): that path is
// compiled for the baseline instruction set, where a scalar tanh per logit cost about as much as
// the softmax's own exp.
#pragma once

#include <cstdint>

namespace manyshot::cpu_internal {

// s[j] = cap * tanh(s[j] / cap) for j < n; cap > 0.
void SoftCapScores(float* s, int64_t n, float cap);

}  // namespace manyshot::cpu_internal
