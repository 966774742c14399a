#include "engine/prompting/generation.h"

#include "engine/task/generation_search.h"

namespace manyshot {

absl::StatusOr<GenerationOutput> Generate(QueryState start, const GenerationParams& params) {
  return SearchTokens(std::move(start), params);
}

}  // namespace manyshot
