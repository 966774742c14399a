// Greedy decoding and beam search over a QueryState (docs/structured_prompting.md,
// "Generation"). Deterministic: ties break toward lower beam index, then lower token id. The
// search itself is engine/task/generation_search.h, shared with T5's decoder
// (engine/t5/t5_generation.h).
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/prompting/query_runner.h"
#include "engine/task/generation_params.h"

namespace manyshot {

absl::StatusOr<GenerationOutput> Generate(QueryState start, const GenerationParams& params);

}  // namespace manyshot
