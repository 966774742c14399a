// A many-shot in-context-learning task on a T5 (encoder-decoder) model: the demonstrations
// rendered by the task's templates and tokenized once, with their first-layer q|k|v
// (T5DemonstrationSet), and the queries a task answers, in one of the prompt modes of
// engine/t5/prompt_modes.h. The encoder reads the demonstrations and the test input (each a
// segment of at most S tokens, every demonstration of the task: relative position bias has no
// context length to run out of); the decoder scores each candidate by its mean log-probability
// or generates greedily. What differs from the decoder-only IclTask:
//   - the test segment is the rendered input followed by eos (T5's tokenizers end inputs so);
//     a demonstration is its rendered input, answer and separator; a candidate or label answer is
//     its tokens followed by eos (the decoder's target ends there);
//   - no encoded context lives in the cache: the demonstrations' encoder states depend on the
//     test input, so the encoder runs per query (prompt_modes.h, "What does not depend");
//   - contextual calibration and shuffle_seed are refused with a message naming them (not
//     implemented for encoder-decoder models); generation (greedy or beam search, stop strings)
//     is the decoder-only search run over T5's decoder (engine/t5/t5_generation.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/t5/prompt_modes.h"
#include "engine/t5/t5_model.h"
#include "engine/task/example.h"
#include "engine/task/input_truncation.h"
#include "engine/task/prompt_template.h"
#include "engine/task/served_task.h"
#include "engine/task/task_options.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot {

struct T5TaskOptions {
  // Templates, separator, labels and limits as for decoder-only tasks. The decoder-only fields
  // (mode, group_length, alignment, rescale_factor) are not read; calibrate and shuffle_seed must
  // be unset.
  TaskOptions common;
  T5ModeOptions mode;
  // S and the long-demonstration policy of the segments.
  T5SegmentOptions segments;
};

class T5Task : public ServedTask {
 public:
  // Validates the options, renders and tokenizes the demonstrations and computes their first-layer
  // q|k|v. INVALID_ARGUMENT names the field or demonstration at fault.
  static absl::StatusOr<std::unique_ptr<T5Task>> Prepare(
      const T5Model& model, const Tokenizer& tokenizer, T5TaskOptions options,
      const std::vector<Example>& demonstrations);

  const T5TaskOptions& options() const { return options_; }
  const T5DemonstrationSet& demonstrations() const { return demonstrations_; }

  // The test segment of an input: its rendered tokens and eos (INVALID_ARGUMENT past
  // max_query_tokens unless `how` cuts the input to fit).
  absl::StatusOr<RenderedQuery> RenderQuery(const Example& input, InputTruncation how) const;
  // RenderQuery with the task's truncation.
  absl::StatusOr<std::vector<int32_t>> QueryTokens(const Example& input) const;
  // A decoder target: the text's tokens and eos.
  absl::StatusOr<std::vector<int32_t>> TargetTokens(const std::string& text) const;
  // The mode options a request runs with: the task's, or CONVENTIONAL when the request asks for
  // it; FAILED_PRECONDITION naming STRUCTURED / PARALLEL (decoder-only modes), INVALID_ARGUMENT for
  // a rescale factor.
  absl::StatusOr<T5ModeOptions> ModeFor(const QueryOverrides& overrides) const;

  int64_t RecomputedContextTokens() const override;

  // ServedTask. `context` is unused (a T5 task has none in the cache) and may be null.
  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareClassify(
      const std::vector<Example>& inputs, const QueryOverrides& overrides) const override;
  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareChoices(
      const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates,
      const QueryOverrides& overrides) const override;
  absl::StatusOr<std::vector<ClassifyResult>> ClassifyPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides) override;
  absl::StatusOr<std::vector<ChoiceResult>> ScoreChoicesPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides) override;
  // GenerateT5Prompts (GenerateT5 on the mode's decoder input): greedy (on_token gets each token
  // with its log-probability as it is chosen) or beam search, with stop strings (decoded with the
  // task's tokenizer unless params.decode is set). params.eos_id must be the tokenizer's eos.
  // ENSEMBLE has no single decoder input: INVALID_ARGUMENT naming it.
  absl::StatusOr<GenerationOutput> Generate(const EncodedContext* context, const Example& input,
                                            GenerationParams params,
                                            const QueryOverrides& overrides) override;

 private:
  T5Task(const T5Model& model, const Tokenizer& tokenizer) : model_(model), tokenizer_(tokenizer) {}
  // Prepare's steps. Fills in the default query and answer room; refuses what a T5 task cannot
  // do (calibration, shuffled groups).
  static absl::Status CheckCommonOptions(TaskOptions& o);
  // Parses the input and answer templates (INVALID_ARGUMENT says how to write them).
  absl::Status ParseTemplates(const TaskOptions& o);
  // Refuses a label whose decoder target cannot fit max_answer_tokens.
  absl::Status CheckLabelsScorable() const;
  // Each demonstration rendered (input, answer, separator) and tokenized.
  absl::StatusOr<std::vector<std::vector<int32_t>>> TokenizeDemonstrations(
      const std::vector<Example>& demonstrations) const;
  // Each item's candidates scored against its test segment under `overrides`.
  absl::StatusOr<std::vector<std::vector<CandidateScore>>> Score(
      const std::vector<QueryWithCandidates>& items, const QueryOverrides& overrides) const;

  const T5Model& model_;
  const Tokenizer& tokenizer_;
  T5TaskOptions options_;
  PromptTemplate input_template_;
  PromptTemplate answer_template_;
  int32_t eos_id_ = 0;
  T5DemonstrationSet demonstrations_;
};

}  // namespace manyshot
