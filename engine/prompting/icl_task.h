// A many-shot in-context-learning task on one model: options, demonstrations rendered and
// tokenized, groups, the encoded context, and the queries a task answers (classification with
// optional contextual calibration, multi-choice scoring, generation) in STRUCTURED, PARALLEL or
// CONVENTIONAL mode. The rules are docs/structured_prompting.md.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/prompting/context_encoder.h"
#include "engine/prompting/generation.h"
#include "engine/prompting/groups.h"
#include "engine/prompting/query_runner.h"
#include "engine/task/example.h"
#include "engine/task/input_truncation.h"
#include "engine/task/prompt_template.h"
#include "engine/task/results.h"
#include "engine/task/task_options.h"
#include "engine/tokenizer/tokenizer.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

class IclTask {
 public:
  // Validates the options, renders and tokenizes the demonstrations and packs the groups. Nothing
  // is encoded yet. INVALID_ARGUMENT names the field or demonstration at fault.
  static absl::StatusOr<std::unique_ptr<IclTask>> Prepare(
      const Transformer& model, const Tokenizer& tokenizer, TaskOptions options,
      const std::vector<Example>& demonstrations);

  // Encodes the groups: the STRUCTURED/PARALLEL context. The task does not keep it: the caller
  // (the cache's memory tier) owns contexts and passes one to every query call.
  absl::StatusOr<EncodedContext> EncodeContext(int64_t groups_per_pass = 4,
                                               const EncodeProgress& progress = nullptr) const;
  // OK when `context` (restored from the cache) has this task's shape; DATA_LOSS otherwise.
  absl::Status CheckContext(const EncodedContext& context) const;

  const TaskOptions& options() const { return options_; }
  const GroupLayout& layout() const { return layout_; }
  const std::vector<std::vector<int32_t>>& demonstration_tokens() const { return demo_tokens_; }
  int64_t demonstrations() const { return static_cast<int64_t>(demo_tokens_.size()); }
  // The factor used for STRUCTURED queries without an override.
  double default_factor() const;
  // Bytes of the encoded context with its K/V stored in `kv_dtype`: what the cache keeps for it
  // between queries.
  size_t ContextBytes(DType kv_dtype) const;

  // Queries. `context` is this task's encoded context (unused, and may be null, in CONVENTIONAL
  // mode, whose window the task encodes and keeps itself on first use).
  absl::StatusOr<std::vector<ClassifyResult>> Classify(const EncodedContext* context,
                                                       const std::vector<Example>& inputs,
                                                       const QueryOverrides& overrides = {});
  absl::StatusOr<std::vector<ChoiceResult>> ScoreChoices(
      const EncodedContext* context, const std::vector<Example>& inputs,
      const std::vector<std::vector<std::string>>& candidates,
      const QueryOverrides& overrides = {});

  // The same queries in two steps. Preparing renders and tokenizes (inputs, labels, candidates)
  // and needs neither the context nor the weights, so a server runs it off its engine thread;
  // it is const and thread-safe. INVALID_ARGUMENT names the input ("input 3: ...").
  // `overrides.truncation` applies here; the rest when the prepared items are answered.
  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareClassify(
      const std::vector<Example>& inputs, const QueryOverrides& overrides = {}) const;
  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareChoices(
      const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates,
      const QueryOverrides& overrides = {}) const;
  // `items` from PrepareClassify / PrepareChoices of this task.
  absl::StatusOr<std::vector<ClassifyResult>> ClassifyPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides = {});
  absl::StatusOr<std::vector<ChoiceResult>> ScoreChoicesPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides = {});
  absl::StatusOr<GenerationOutput> Generate(const EncodedContext* context, const Example& input,
                                            GenerationParams params,
                                            const QueryOverrides& overrides = {});
  // The mode a request runs in.
  PromptMode EffectiveMode(const QueryOverrides& overrides) const {
    return overrides.mode.value_or(options_.mode);
  }

  // Renders and tokenizes a query (INVALID_ARGUMENT past max_query_tokens unless `how` cuts it).
  absl::StatusOr<RenderedQuery> RenderQuery(const Example& input, InputTruncation how) const;
  absl::StatusOr<std::vector<int32_t>> QueryTokens(const Example& input, std::string* text) const;
  // Tokens a Generate of this input may produce at most: the task's room for a query and its
  // answer, less the input's tokens.
  int64_t AnswerRoomAfter(int64_t query_tokens) const {
    return options_.max_query_tokens + options_.max_answer_tokens - query_tokens;
  }
  // Continuation tokens of `answer` after `query_text` (docs: "Rendering").
  absl::StatusOr<std::vector<int32_t>> ContinuationTokens(const std::string& query_text,
                                                          const std::string& answer) const;

 private:
  IclTask(const Transformer& model, const Tokenizer& tokenizer)
      : model_(model), tokenizer_(tokenizer) {}
  // The context and placement a query uses under `overrides` (encoding the CONVENTIONAL window on
  // first use). A group context without its keys' position ids (the disk tier's KV files do not
  // keep them) comes back as a view of it with the ids of this task's layout.
  absl::StatusOr<std::pair<std::shared_ptr<const EncodedContext>, QueryPlacement>> Resolve(
      const EncodedContext* context, const QueryOverrides& overrides);
  // Every label tokenizes, as an answer, to 1..max_answer_tokens tokens: a label that cannot be
  // scored is refused when the task is prepared, not on every Classify.
  absl::Status CheckLabelsFit() const;
  // Every label rendered through the answer template, as continuation tokens after query_text.
  absl::StatusOr<std::vector<std::vector<int32_t>>> LabelContinuations(
      const std::string& query_text) const;
  absl::StatusOr<std::vector<std::vector<CandidateScore>>> Score(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides);
  absl::StatusOr<std::vector<double>> CalibrationProbabilities(const EncodedContext* context,
                                                               const QueryOverrides& overrides);

  const Transformer& model_;
  const Tokenizer& tokenizer_;
  TaskOptions options_;
  PromptTemplate input_template_;
  PromptTemplate answer_template_;
  int32_t bos_id_ = 0;
  std::vector<std::vector<int32_t>> demo_tokens_;
  GroupLayout layout_;
  std::mutex lazy_mutex_;  // guards the lazily built window, positions and calibration
  std::unique_ptr<EncodedContext> conventional_;
  Tensor context_positions_;  // kI32: ContextPositions(layout_) on the model's backend
  std::map<std::pair<int, double>, std::vector<double>> calibration_cache_;
};

}  // namespace manyshot
