// What the server asks of a task, whatever the model under it: render and tokenize a request off
// the engine thread (Prepare*), then answer it on the engine thread against the task's context.
// IclTask answers for decoder-only models (through IclServedTask, engine/prompting/
// icl_served_task.h) and T5Task (engine/t5/t5_task.h) for encoder-decoder ones, so the server has
// one wiring path for both.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/task/encoded_context.h"
#include "engine/task/example.h"
#include "engine/task/generation_params.h"
#include "engine/task/results.h"
#include "engine/task/task_options.h"

namespace manyshot {

class ServedTask {
 public:
  virtual ~ServedTask() = default;

  // Const and thread-safe: they need neither the context nor the weights. INVALID_ARGUMENT names
  // the input ("input 3: ..."). Of `overrides`, only `truncation` applies here.
  virtual absl::StatusOr<std::vector<QueryWithCandidates>> PrepareClassify(
      const std::vector<Example>& inputs, const QueryOverrides& overrides) const = 0;
  virtual absl::StatusOr<std::vector<QueryWithCandidates>> PrepareChoices(
      const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates,
      const QueryOverrides& overrides) const = 0;

  // `context`: the task's encoded context when it has one in the cache (decoder-only STRUCTURED
  // and PARALLEL), else null.
  virtual absl::StatusOr<std::vector<ClassifyResult>> ClassifyPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides) = 0;
  virtual absl::StatusOr<std::vector<ChoiceResult>> ScoreChoicesPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides) = 0;
  // Context tokens the model processes again for every input, which a batch does not share: 0
  // when the context is encoded once and cached (decoder-only), the demonstrations' tokens for
  // T5 (their encoder states depend on the input). The server time-slices by it.
  virtual int64_t RecomputedContextTokens() const { return 0; }

  virtual absl::StatusOr<GenerationOutput> Generate(const EncodedContext* context,
                                                    const Example& input, GenerationParams params,
                                                    const QueryOverrides& overrides) = 0;
};

}  // namespace manyshot
