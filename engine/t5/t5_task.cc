#include "engine/t5/t5_task.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/task/probabilities.h"
#include "engine/task/query_room.h"

namespace manyshot {
namespace {

int64_t ArgMax(const std::vector<double>& v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

const char* DecoderOnlyModeName(PromptMode mode) {
  switch (mode) {
    case PromptMode::kStructured:
      return "STRUCTURED";
    case PromptMode::kParallel:
      return "PARALLEL";
    case PromptMode::kConventional:
      return "CONVENTIONAL";
  }
  return "?";
}

CandidateScore ToCandidateScore(const T5CandidateScore& s) {
  return {s.sum_logprob, s.mean_logprob, s.tokens};
}

}  // namespace

absl::StatusOr<std::unique_ptr<T5Task>> T5Task::Prepare(
    const T5Model& model, const Tokenizer& tokenizer, T5TaskOptions options,
    const std::vector<Example>& demonstrations) {
  MANYSHOT_RETURN_IF_ERROR(CheckCommonOptions(options.common));
  std::unique_ptr<T5Task> task(new T5Task(model, tokenizer));
  MANYSHOT_RETURN_IF_ERROR(task->ParseTemplates(options.common));
  auto eos = tokenizer.eos_id();
  if (!eos) return absl::FailedPreconditionError("the tokenizer has no eos token");
  task->eos_id_ = *eos;
  task->options_ = std::move(options);
  MANYSHOT_RETURN_IF_ERROR(task->CheckLabelsScorable());
  std::vector<std::vector<int32_t>> tokens;
  MANYSHOT_ASSIGN_OR_RETURN(tokens, task->TokenizeDemonstrations(demonstrations));
  MANYSHOT_ASSIGN_OR_RETURN(task->demonstrations_,
                            PrepareT5Demonstrations(model, tokens, task->options_.segments));
  // EncodeT5Prompts checks G per query; a task whose every query would fail is refused here.
  const T5ModeOptions& m = task->options_.mode;
  if (m.groups < 0 || m.groups > task->demonstrations_.demonstrations()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "groups ", m.groups, " must be between ", m.mode == T5PromptMode::kGroupFid ? 1 : 0,
        " and the number of demonstrations, ", task->demonstrations_.demonstrations()));
  }
  return task;
}

absl::Status T5Task::CheckCommonOptions(TaskOptions& o) {
  if (o.max_query_tokens == 0) o.max_query_tokens = DefaultQueryRoom(kEncoderDecoderNominalContext);
  if (o.max_answer_tokens == 0) {
    o.max_answer_tokens = DefaultAnswerRoom(kEncoderDecoderNominalContext);
  }
  if (o.max_query_tokens < 1 || o.max_answer_tokens < 1) {
    return absl::InvalidArgumentError("max_query_tokens and max_answer_tokens must be at least 1");
  }
  if (o.calibrate) {
    return absl::InvalidArgumentError(
        "calibrate is not implemented for encoder-decoder (T5) models; create the task without it");
  }
  if (o.shuffle_seed != 0) {
    return absl::InvalidArgumentError(
        "shuffle_seed orders decoder-only groups; a T5 task uses the demonstrations in the order "
        "given (shuffle them before CreateTask)");
  }
  return absl::OkStatus();
}

absl::Status T5Task::ParseTemplates(const TaskOptions& o) {
  auto input = PromptTemplate::Parse(o.input_template, "input_template");
  if (!input.ok()) return input.status();
  if (input->placeholders().empty()) {
    return absl::InvalidArgumentError(
        "input_template has no placeholder; write e.g. \"Sentence: {text}\\nLabel:\"");
  }
  auto answer = PromptTemplate::Parse(o.answer_template, "answer_template");
  if (!answer.ok()) return answer.status();
  if (answer->placeholders() != std::vector<std::string>{"label"}) {
    return absl::InvalidArgumentError(
        "answer_template must have exactly one placeholder, {label}, e.g. \" {label}\"");
  }
  input_template_ = *std::move(input);
  answer_template_ = *std::move(answer);
  return absl::OkStatus();
}

absl::Status T5Task::CheckLabelsScorable() const {
  // A label that cannot be scored is refused now, not on every Classify.
  for (size_t i = 0; i < options_.common.labels.size(); ++i) {
    const std::string& label = options_.common.labels[i];
    auto rendered = answer_template_.Render(label, {{"label", label}});
    if (!rendered.ok()) return rendered.status();
    if (auto target = TargetTokens(*rendered); !target.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("labels[", i, "] ", QuoteForMessage(label), " could never be scored: ",
                       target.status().message(), "; raise max_answer_tokens or shorten it"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<int32_t>>> T5Task::TokenizeDemonstrations(
    const std::vector<Example>& demonstrations) const {
  std::vector<std::vector<int32_t>> tokens;
  tokens.reserve(demonstrations.size());
  for (size_t i = 0; i < demonstrations.size(); ++i) {
    const Example& d = demonstrations[i];
    auto rendered_input =
        input_template_.Render(d.text, d.fields, options_.common.max_rendered_bytes);
    if (!rendered_input.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("demonstration ", i, ": ", rendered_input.status().message()));
    }
    auto rendered_answer = answer_template_.Render(d.label, {{"label", d.label}});
    if (!rendered_answer.ok()) return rendered_answer.status();
    auto encoded =
        tokenizer_.Encode(*rendered_input + *rendered_answer + options_.common.separator);
    if (!encoded.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("demonstration ", i, ": ", encoded.status().message()));
    }
    tokens.push_back(*std::move(encoded));
  }
  return tokens;
}

absl::StatusOr<RenderedQuery> T5Task::RenderQuery(const Example& input, InputTruncation how) const {
  return FitQuery(input, how, options_.common.max_query_tokens,
                  [this](const Example& e) -> absl::StatusOr<RenderedQuery> {
                    auto text = input_template_.Render(e.text, e.fields,
                                                       options_.common.max_rendered_bytes);
                    if (!text.ok()) return text.status();
                    auto tokens = tokenizer_.Encode(*text);
                    if (!tokens.ok()) return tokens.status();
                    tokens->push_back(eos_id_);  // counted: the encoder reads it
                    return RenderedQuery{*std::move(tokens), *std::move(text), 0};
                  });
}

absl::StatusOr<std::vector<int32_t>> T5Task::QueryTokens(const Example& input) const {
  auto query = RenderQuery(input, options_.common.input_truncation);
  if (!query.ok()) return query.status();
  return std::move(query->tokens);
}

absl::StatusOr<std::vector<int32_t>> T5Task::TargetTokens(const std::string& text) const {
  auto tokens = tokenizer_.Encode(text);
  if (!tokens.ok()) return tokens.status();
  tokens->push_back(eos_id_);
  if (static_cast<int64_t>(tokens->size()) > options_.common.max_answer_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("the answer has ", tokens->size(),
                                                   " tokens with eos, more than max_answer_tokens ",
                                                   options_.common.max_answer_tokens));
  }
  return tokens;
}

absl::StatusOr<T5ModeOptions> T5Task::ModeFor(const QueryOverrides& overrides) const {
  if (overrides.rescale_factor) {
    return absl::InvalidArgumentError(
        "options.rescale_factor applies to decoder-only STRUCTURED mode; this task's model is t5 "
        "(encoder-decoder)");
  }
  if (!overrides.mode) return options_.mode;
  if (*overrides.mode != PromptMode::kConventional) {
    return absl::FailedPreconditionError(
        absl::StrCat("mode ", DecoderOnlyModeName(*overrides.mode),
                     " is structured prompting, which is decoder-only; this task's model is t5 "
                     "(encoder-decoder): use CONVENTIONAL, SAICL, FID, ENSEMBLE or GROUP_FID"));
  }
  T5ModeOptions conventional;
  conventional.mode = T5PromptMode::kConventional;
  return conventional;
}

int64_t T5Task::RecomputedContextTokens() const {
  int64_t tokens = 0;
  for (const auto& segment : demonstrations_.segments)
    tokens += static_cast<int64_t>(segment.size());
  return tokens;
}

absl::StatusOr<std::vector<QueryWithCandidates>> T5Task::PrepareClassify(
    const std::vector<Example>& inputs, const QueryOverrides& overrides) const {
  if (options_.common.labels.empty()) {
    return absl::FailedPreconditionError("the task has no labels; use Score with candidates");
  }
  std::vector<std::vector<int32_t>> labels;
  for (const std::string& label : options_.common.labels) {
    auto rendered = answer_template_.Render(label, {{"label", label}});
    if (!rendered.ok()) return rendered.status();
    auto target = TargetTokens(*rendered);
    if (!target.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("label \"", label, "\": ", target.status().message()));
    }
    labels.push_back(*std::move(target));
  }
  std::vector<QueryWithCandidates> items;
  items.reserve(inputs.size());
  const InputTruncation how = overrides.truncation.value_or(options_.common.input_truncation);
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto query = RenderQuery(inputs[i], how);
    if (!query.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, ": ", query.status().message()));
    }
    items.push_back({std::move(query->tokens), labels, query->truncated_tokens});
  }
  return items;
}

absl::StatusOr<std::vector<QueryWithCandidates>> T5Task::PrepareChoices(
    const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates,
    const QueryOverrides& overrides) const {
  if (inputs.size() != candidates.size()) {
    return absl::InvalidArgumentError("one candidate list per input is needed");
  }
  std::vector<QueryWithCandidates> items;
  items.reserve(inputs.size());
  const InputTruncation how = overrides.truncation.value_or(options_.common.input_truncation);
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto query = RenderQuery(inputs[i], how);
    if (!query.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, ": ", query.status().message()));
    }
    if (candidates[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, " has no candidates"));
    }
    QueryWithCandidates item{std::move(query->tokens), {}, query->truncated_tokens};
    for (size_t c = 0; c < candidates[i].size(); ++c) {
      auto target = TargetTokens(candidates[i][c]);
      if (!target.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("item ", i, " candidate ", c, ": ", target.status().message()));
      }
      item.candidates.push_back(*std::move(target));
    }
    items.push_back(std::move(item));
  }
  return items;
}

absl::StatusOr<std::vector<std::vector<CandidateScore>>> T5Task::Score(
    const std::vector<QueryWithCandidates>& items, const QueryOverrides& overrides) const {
  auto mode = ModeFor(overrides);
  if (!mode.ok()) return mode.status();
  std::vector<std::vector<CandidateScore>> scores;
  scores.reserve(items.size());
  for (const QueryWithCandidates& item : items) {
    auto encoding = EncodeT5Prompts(model_, demonstrations_, *mode, item.query);
    if (!encoding.ok()) return encoding.status();
    auto scored = ScoreT5Prompts(model_, *encoding, item.candidates);
    if (!scored.ok()) return scored.status();
    std::vector<CandidateScore>& out = scores.emplace_back();
    for (const T5CandidateScore& s : *scored) out.push_back(ToCandidateScore(s));
  }
  return scores;
}

absl::StatusOr<std::vector<ClassifyResult>> T5Task::ClassifyPrepared(
    const EncodedContext*, const std::vector<QueryWithCandidates>& items,
    const QueryOverrides& overrides) {
  for (const auto& item : items) {
    if (item.candidates.size() != options_.common.labels.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a prepared query has ", item.candidates.size(), " candidates for ",
                       options_.common.labels.size(), " labels: it was prepared by another task"));
    }
  }
  auto scores = Score(items, overrides);
  if (!scores.ok()) return scores.status();
  std::vector<ClassifyResult> results(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    ClassifyResult& r = results[i];
    r.input_tokens = static_cast<int64_t>(items[i].query.size());
    r.truncated_tokens = items[i].truncated_tokens;
    std::vector<double> means;
    for (const auto& s : (*scores)[i]) means.push_back(s.mean_logprob);
    const std::vector<double> p = Softmax(means);
    for (size_t l = 0; l < p.size(); ++l) r.labels.push_back({(*scores)[i][l], p[l], p[l]});
    r.raw_prediction = r.prediction = ArgMax(means);
  }
  return results;
}

absl::StatusOr<std::vector<ChoiceResult>> T5Task::ScoreChoicesPrepared(
    const EncodedContext*, const std::vector<QueryWithCandidates>& items,
    const QueryOverrides& overrides) {
  auto scores = Score(items, overrides);
  if (!scores.ok()) return scores.status();
  std::vector<ChoiceResult> results(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    ChoiceResult& r = results[i];
    r.candidates = (*scores)[i];
    std::vector<double> means;
    for (const auto& s : r.candidates) means.push_back(s.mean_logprob);
    r.probabilities = Softmax(means);
    r.best = ArgMax(means);
    r.truncated_tokens = items[i].truncated_tokens;
  }
  return results;
}

absl::StatusOr<GenerationOutput> T5Task::Generate(const EncodedContext*, const Example& input,
                                                  GenerationParams params,
                                                  const QueryOverrides& overrides) {
  if (!params.eos_id || *params.eos_id != eos_id_) {
    return absl::InvalidArgumentError(
        "T5 generation always stops at the tokenizer's eos; stop_at_eos cannot be turned off");
  }
  // The decoder has relative positions and no window: the caller's bound (the server's
  // --max_new_tokens) is the only one.
  if (params.max_new_tokens < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens ", params.max_new_tokens, " must be at least 1"));
  }
  auto query = RenderQuery(input, overrides.truncation.value_or(options_.common.input_truncation));
  if (!query.ok()) return query.status();
  auto mode = ModeFor(overrides);
  if (!mode.ok()) return mode.status();
  if (params.cancelled && params.cancelled()) return absl::CancelledError("generation cancelled");
  auto encoding = EncodeT5Prompts(model_, demonstrations_, *mode, query->tokens);
  if (!encoding.ok()) return encoding.status();
  DecodeStopStringsWith(tokenizer_, params);
  // The decoder-only search (greedy or beam, length penalty, stop strings; on_token as each
  // greedy token is chosen), its sums and scores counted as for decoder-only tasks; ENSEMBLE is
  // refused (no single decoder input).
  auto output = GenerateT5Prompts(model_, *encoding, params);
  if (output.ok()) output->truncated_input_tokens = query->truncated_tokens;
  return output;
}

}  // namespace manyshot
