#include "engine/prompting/icl_task.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "engine/task/query_room.h"

namespace manyshot {
namespace {

int64_t ArgMax(const std::vector<double>& v) {
  return std::max_element(v.begin(), v.end()) - v.begin();
}

std::map<std::string, std::string> AllFields(const PromptTemplate& t, const std::string& value) {
  std::map<std::string, std::string> fields;
  for (const auto& name : t.placeholders()) fields[name] = value;
  return fields;
}

}  // namespace

absl::StatusOr<std::unique_ptr<IclTask>> IclTask::Prepare(
    const Transformer& model, const Tokenizer& tokenizer, TaskOptions options,
    const std::vector<Example>& demonstrations) {
  std::unique_ptr<IclTask> task(new IclTask(model, tokenizer));
  const int64_t context_length = ContextLength(model.config());
  if (options.max_query_tokens == 0) options.max_query_tokens = DefaultQueryRoom(context_length);
  if (options.max_answer_tokens == 0) options.max_answer_tokens = DefaultAnswerRoom(context_length);
  if (options.max_query_tokens < 1 || options.max_answer_tokens < 1) {
    return absl::InvalidArgumentError("max_query_tokens and max_answer_tokens must be at least 1");
  }
  const int64_t room = options.max_query_tokens + options.max_answer_tokens;
  if (options.group_length == 0) options.group_length = context_length - room;
  if (options.group_length < 2 || options.group_length + room > context_length) {
    return absl::InvalidArgumentError(absl::StrCat(
        "group_length ", options.group_length, " must be at least 2 and leave room for a query (",
        options.max_query_tokens, " tokens) and an answer (", options.max_answer_tokens,
        " tokens) within the model's context length ", context_length,
        model.config().sliding_window > 0 ? " (its sliding attention window)" : ""));
  }
  if (options.rescale_factor < 0 || (options.rescale_factor > 0 && options.rescale_factor < 1e-6)) {
    return absl::InvalidArgumentError(absl::StrCat("rescale_factor ", options.rescale_factor,
                                                   " must be 0 (the number of groups) or >= 1e-6"));
  }
  auto input = PromptTemplate::Parse(options.input_template, "input_template");
  if (!input.ok()) return input.status();
  if (input->placeholders().empty()) {
    return absl::InvalidArgumentError(
        "input_template has no placeholder; write e.g. \"Sentence: {text}\\nLabel:\"");
  }
  auto answer = PromptTemplate::Parse(options.answer_template, "answer_template");
  if (!answer.ok()) return answer.status();
  if (answer->placeholders() != std::vector<std::string>{"label"}) {
    return absl::InvalidArgumentError(
        "answer_template must have exactly one placeholder, {label}, e.g. \" {label}\"");
  }
  task->input_template_ = *std::move(input);
  task->answer_template_ = *std::move(answer);
  auto bos = tokenizer.bos_id();
  if (!bos) return absl::FailedPreconditionError("the tokenizer has no bos token");
  task->bos_id_ = *bos;
  if (options.calibrate && options.labels.empty()) {
    return absl::InvalidArgumentError("calibrate needs labels");
  }
  task->options_ = std::move(options);
  const TaskOptions& o = task->options_;
  if (absl::Status labels = task->CheckLabelsFit(); !labels.ok()) return labels;

  task->demo_tokens_.reserve(demonstrations.size());
  for (size_t i = 0; i < demonstrations.size(); ++i) {
    const Example& d = demonstrations[i];
    auto rendered_input =
        task->input_template_.Render(d.text, d.fields, task->options_.max_rendered_bytes);
    if (!rendered_input.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("demonstration ", i, ": ", rendered_input.status().message()));
    }
    auto rendered_answer = task->answer_template_.Render(d.label, {{"label", d.label}});
    if (!rendered_answer.ok()) return rendered_answer.status();
    auto tokens = tokenizer.Encode(*rendered_input + *rendered_answer + o.separator);
    if (!tokens.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("demonstration ", i, ": ", tokens.status().message()));
    }
    task->demo_tokens_.push_back(*std::move(tokens));
  }
  GroupOptions group_options;
  group_options.group_length = o.group_length;
  group_options.alignment = o.alignment;
  group_options.long_demonstrations = o.long_demonstrations;
  group_options.shuffle_seed = o.shuffle_seed;
  group_options.space_id = tokenizer.space_id().value_or(-1);
  auto layout = BuildGroups(task->demo_tokens_, group_options);
  if (!layout.ok()) return layout.status();
  task->layout_ = *std::move(layout);
  return task;
}

absl::StatusOr<EncodedContext> IclTask::EncodeContext(int64_t groups_per_pass,
                                                      const EncodeProgress& progress) const {
  return EncodeGroups(model_, layout_, bos_id_, groups_per_pass, progress);
}

absl::Status IclTask::CheckContext(const EncodedContext& context) const {
  const ModelConfig& c = model_.config();
  if (context.tokens != layout_.context_tokens || context.groups != layout_.groups() ||
      static_cast<int64_t>(context.kv.k.size()) != c.num_layers) {
    return absl::DataLossError(absl::StrCat(
        "restored context does not match the task: ", context.tokens, " tokens in ", context.groups,
        " groups, expected ", layout_.context_tokens, " in ", layout_.groups()));
  }
  return absl::OkStatus();
}

size_t IclTask::ContextBytes(DType kv_dtype) const {
  const ModelConfig& c = model_.config();
  return 2ull * c.num_layers * layout_.context_tokens * c.num_kv_heads * c.head_dim *
         DTypeSize(kv_dtype);
}

double IclTask::default_factor() const {
  if (options_.mode == PromptMode::kParallel) return 1.0;
  return options_.rescale_factor > 0 ? options_.rescale_factor
                                     : static_cast<double>(layout_.groups());
}

absl::StatusOr<std::pair<std::shared_ptr<const EncodedContext>, QueryPlacement>> IclTask::Resolve(
    const EncodedContext* context, const QueryOverrides& overrides) {
  // Not owned: the caller keeps `context` (and the task its window) alive for the query.
  auto view = [](const EncodedContext* c) {
    return std::shared_ptr<const EncodedContext>(std::shared_ptr<const EncodedContext>(), c);
  };
  const PromptMode mode = overrides.mode.value_or(options_.mode);
  // The proto documents the override for STRUCTURED mode; silently switching a PARALLEL or
  // CONVENTIONAL request to structured attention would answer a different question.
  if (overrides.rescale_factor && mode != PromptMode::kStructured) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.rescale_factor applies to STRUCTURED mode only; this request runs "
                     "in ",
                     mode == PromptMode::kParallel ? "PARALLEL" : "CONVENTIONAL",
                     " mode (the task's mode or options.mode): leave rescale_factor unset or set "
                     "options.mode=STRUCTURED"));
  }
  if (mode == PromptMode::kConventional) {
    std::lock_guard<std::mutex> lock(lazy_mutex_);
    if (!conventional_) {
      ConventionalWindow window =
          BuildConventionalWindow(demo_tokens_, options_.group_length, options_.shuffle_seed);
      auto encoded = EncodeWindow(model_, window.tokens, bos_id_);
      if (!encoded.ok()) return encoded.status();
      conventional_ = std::make_unique<EncodedContext>(*std::move(encoded));
    }
    return std::make_pair(view(conventional_.get()), ConventionalPlacement(conventional_->tokens));
  }
  if (context == nullptr) {
    return absl::FailedPreconditionError("the task's demonstrations are not encoded yet");
  }
  double factor = mode == PromptMode::kParallel
                      ? 1.0
                      : (options_.rescale_factor > 0 ? options_.rescale_factor
                                                     : static_cast<double>(layout_.groups()));
  if (overrides.rescale_factor) {
    if (!(*overrides.rescale_factor > 0) || !std::isfinite(*overrides.rescale_factor)) {
      return absl::InvalidArgumentError(absl::StrCat("rescale_factor ", *overrides.rescale_factor,
                                                     " must be a positive finite number"));
    }
    factor = *overrides.rescale_factor;
  }
  const QueryPlacement placement = StructuredPlacement(options_.group_length, factor);
  if (context->kv.positions.defined()) return std::make_pair(view(context), placement);
  auto with_positions = std::make_shared<EncodedContext>(*context);  // shares the K/V tensors
  {
    std::lock_guard<std::mutex> lock(lazy_mutex_);
    if (!context_positions_.defined()) {
      const std::vector<int32_t> positions = ContextPositions(layout_);
      auto t = model_.backend().Allocate(
          DType::kI32, {std::max<int64_t>(static_cast<int64_t>(positions.size()), 1)});
      if (!t.ok()) return t.status();
      model_.backend().CopyFromHost(positions.data(), *t);
      if (absl::Status s = model_.backend().Synchronize(); !s.ok()) return s;
      context_positions_ = t->Rows(0, static_cast<int64_t>(positions.size()));
    }
    with_positions->kv.positions = context_positions_;
  }
  return std::make_pair(std::shared_ptr<const EncodedContext>(std::move(with_positions)),
                        placement);
}

absl::StatusOr<RenderedQuery> IclTask::RenderQuery(const Example& input,
                                                   InputTruncation how) const {
  return FitQuery(input, how, options_.max_query_tokens,
                  [this](const Example& e) -> absl::StatusOr<RenderedQuery> {
                    auto text =
                        input_template_.Render(e.text, e.fields, options_.max_rendered_bytes);
                    if (!text.ok()) return text.status();
                    auto tokens = tokenizer_.Encode(*text);
                    if (!tokens.ok()) return tokens.status();
                    return RenderedQuery{*std::move(tokens), *std::move(text), 0};
                  });
}

absl::StatusOr<std::vector<int32_t>> IclTask::QueryTokens(const Example& input,
                                                          std::string* text) const {
  auto query = RenderQuery(input, options_.input_truncation);
  if (!query.ok()) return query.status();
  if (text != nullptr) *text = std::move(query->text);
  return std::move(query->tokens);
}

absl::StatusOr<std::vector<int32_t>> IclTask::ContinuationTokens(const std::string& query_text,
                                                                 const std::string& answer) const {
  auto joint = tokenizer_.Encode(query_text + answer);
  if (!joint.ok()) return joint.status();
  auto query = tokenizer_.Encode(query_text);
  if (!query.ok()) return query.status();
  std::vector<int32_t> continuation;
  if (joint->size() > query->size() && std::equal(query->begin(), query->end(), joint->begin())) {
    continuation.assign(joint->begin() + static_cast<int64_t>(query->size()), joint->end());
  } else {
    auto alone = tokenizer_.Encode(answer);
    if (!alone.ok()) return alone.status();
    continuation = *std::move(alone);
  }
  if (continuation.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the answer ", QuoteForMessage(answer), " has no tokens"));
  }
  if (static_cast<int64_t>(continuation.size()) > options_.max_answer_tokens) {
    return absl::InvalidArgumentError(
        absl::StrCat("the answer ", QuoteForMessage(answer), " has ", continuation.size(),
                     " tokens, more than max_answer_tokens ", options_.max_answer_tokens));
  }
  return continuation;
}

absl::Status IclTask::CheckLabelsFit() const {
  for (size_t i = 0; i < options_.labels.size(); ++i) {
    auto answer = answer_template_.Render(options_.labels[i], {{"label", options_.labels[i]}});
    if (!answer.ok()) return answer.status();
    auto tokens = tokenizer_.Encode(*answer);
    if (!tokens.ok()) return tokens.status();
    if (tokens->empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("labels[", i, "] ", QuoteForMessage(options_.labels[i]),
                       " has no tokens as an answer and could never be scored"));
    }
    if (static_cast<int64_t>(tokens->size()) > options_.max_answer_tokens) {
      return absl::InvalidArgumentError(absl::StrCat(
          "labels[", i, "] ", QuoteForMessage(options_.labels[i]), " is ", tokens->size(),
          " tokens as an answer, more than max_answer_tokens ", options_.max_answer_tokens,
          ", so it could never be scored: raise max_answer_tokens or shorten the label"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::vector<int32_t>>> IclTask::LabelContinuations(
    const std::string& query_text) const {
  std::vector<std::vector<int32_t>> continuations;
  for (const auto& label : options_.labels) {
    auto answer = answer_template_.Render(label, {{"label", label}});
    if (!answer.ok()) return answer.status();
    auto continuation = ContinuationTokens(query_text, *answer);
    if (!continuation.ok()) return continuation.status();
    continuations.push_back(*std::move(continuation));
  }
  return continuations;
}

absl::StatusOr<std::vector<std::vector<CandidateScore>>> IclTask::Score(
    const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
    const QueryOverrides& overrides) {
  auto resolved = Resolve(context, overrides);
  if (!resolved.ok()) return resolved.status();
  return ScoreCandidates(model_, resolved->first.get(), resolved->second, bos_id_, items);
}

absl::StatusOr<std::vector<double>> IclTask::CalibrationProbabilities(
    const EncodedContext* context, const QueryOverrides& overrides) {
  auto resolved = Resolve(context, overrides);
  if (!resolved.ok()) return resolved.status();
  const std::pair<int, double> key{static_cast<int>(overrides.mode.value_or(options_.mode)),
                                   resolved->second.own_log_weight};
  {
    std::lock_guard<std::mutex> lock(lazy_mutex_);
    auto it = calibration_cache_.find(key);
    if (it != calibration_cache_.end()) return it->second;
  }
  Example content_free;
  content_free.fields = AllFields(input_template_, options_.calibration_text);
  std::string text;
  auto query = QueryTokens(content_free, &text);
  if (!query.ok()) return query.status();
  QueryWithCandidates item{*query, {}};
  auto labels = LabelContinuations(text);
  if (!labels.ok()) return labels.status();
  item.candidates = *std::move(labels);
  auto scores = ScoreCandidates(model_, resolved->first.get(), resolved->second, bos_id_, {item});
  if (!scores.ok()) return scores.status();
  std::vector<double> means;
  for (const auto& s : (*scores)[0]) means.push_back(s.mean_logprob);
  std::vector<double> probabilities = Softmax(means);
  std::lock_guard<std::mutex> lock(lazy_mutex_);
  calibration_cache_[key] = probabilities;
  return probabilities;
}

absl::StatusOr<std::vector<QueryWithCandidates>> IclTask::PrepareClassify(
    const std::vector<Example>& inputs, const QueryOverrides& overrides) const {
  if (options_.labels.empty()) {
    return absl::FailedPreconditionError("the task has no labels; use Score with candidates");
  }
  std::vector<QueryWithCandidates> items;
  items.reserve(inputs.size());
  const InputTruncation how = overrides.truncation.value_or(options_.input_truncation);
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto query = RenderQuery(inputs[i], how);
    if (!query.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("input ", i, ": ", query.status().message()));
    }
    auto labels = LabelContinuations(query->text);
    if (!labels.ok()) return labels.status();
    items.push_back({std::move(query->tokens), *std::move(labels), query->truncated_tokens});
  }
  return items;
}

absl::StatusOr<std::vector<ClassifyResult>> IclTask::Classify(const EncodedContext* context,
                                                              const std::vector<Example>& inputs,
                                                              const QueryOverrides& overrides) {
  auto items = PrepareClassify(inputs, overrides);
  if (!items.ok()) return items.status();
  return ClassifyPrepared(context, *items, overrides);
}

absl::StatusOr<std::vector<ClassifyResult>> IclTask::ClassifyPrepared(
    const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
    const QueryOverrides& overrides) {
  for (const auto& item : items) {
    if (item.candidates.size() != options_.labels.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("a prepared query has ", item.candidates.size(), " candidates for ",
                       options_.labels.size(), " labels: it was prepared by another task"));
    }
  }
  auto scores = Score(context, items, overrides);
  if (!scores.ok()) return scores.status();
  std::vector<double> calibration;
  if (options_.calibrate) {
    auto p = CalibrationProbabilities(context, overrides);
    if (!p.ok()) return p.status();
    calibration = *std::move(p);
  }
  std::vector<ClassifyResult> results(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    ClassifyResult& r = results[i];
    r.input_tokens = static_cast<int64_t>(items[i].query.size());
    r.truncated_tokens = items[i].truncated_tokens;
    std::vector<double> means;
    for (const auto& s : (*scores)[i]) means.push_back(s.mean_logprob);
    std::vector<double> p = Softmax(means);
    std::vector<double> calibrated = p;
    if (!calibration.empty()) {
      double total = 0;
      for (size_t l = 0; l < p.size(); ++l) total += calibrated[l] = p[l] / calibration[l];
      for (double& v : calibrated) v /= total;
    }
    for (size_t l = 0; l < p.size(); ++l) {
      r.labels.push_back({(*scores)[i][l], p[l], calibrated[l]});
    }
    r.raw_prediction = ArgMax(means);
    r.prediction = calibration.empty() ? r.raw_prediction : ArgMax(calibrated);
  }
  return results;
}

absl::StatusOr<std::vector<QueryWithCandidates>> IclTask::PrepareChoices(
    const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates,
    const QueryOverrides& overrides) const {
  if (inputs.size() != candidates.size()) {
    return absl::InvalidArgumentError("one candidate list per input is needed");
  }
  std::vector<QueryWithCandidates> items;
  items.reserve(inputs.size());
  const InputTruncation how = overrides.truncation.value_or(options_.input_truncation);
  for (size_t i = 0; i < inputs.size(); ++i) {
    auto query = RenderQuery(inputs[i], how);
    if (!query.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, ": ", query.status().message()));
    }
    const std::string& text = query->text;
    if (candidates[i].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("item ", i, " has no candidates"));
    }
    QueryWithCandidates item{query->tokens, {}, query->truncated_tokens};
    for (size_t c = 0; c < candidates[i].size(); ++c) {
      auto continuation = ContinuationTokens(text, candidates[i][c]);
      if (!continuation.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("item ", i, " candidate ", c, ": ", continuation.status().message()));
      }
      item.candidates.push_back(*std::move(continuation));
    }
    items.push_back(std::move(item));
  }
  return items;
}

absl::StatusOr<std::vector<ChoiceResult>> IclTask::ScoreChoices(
    const EncodedContext* context, const std::vector<Example>& inputs,
    const std::vector<std::vector<std::string>>& candidates, const QueryOverrides& overrides) {
  auto items = PrepareChoices(inputs, candidates, overrides);
  if (!items.ok()) return items.status();
  return ScoreChoicesPrepared(context, *items, overrides);
}

absl::StatusOr<std::vector<ChoiceResult>> IclTask::ScoreChoicesPrepared(
    const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
    const QueryOverrides& overrides) {
  auto scores = Score(context, items, overrides);
  if (!scores.ok()) return scores.status();
  std::vector<ChoiceResult> results(items.size());
  for (size_t i = 0; i < items.size(); ++i) {
    std::vector<double> means;
    for (const auto& s : (*scores)[i]) means.push_back(s.mean_logprob);
    results[i].candidates = (*scores)[i];
    results[i].probabilities = Softmax(means);
    results[i].best = ArgMax(means);
    results[i].truncated_tokens = items[i].truncated_tokens;
  }
  return results;
}

absl::StatusOr<GenerationOutput> IclTask::Generate(const EncodedContext* context,
                                                   const Example& input, GenerationParams params,
                                                   const QueryOverrides& overrides) {
  auto query = RenderQuery(input, overrides.truncation.value_or(options_.input_truncation));
  if (!query.ok()) return query.status();
  const int64_t query_tokens = static_cast<int64_t>(query->tokens.size());
  const int64_t room = AnswerRoomAfter(query_tokens);
  if (params.shorten_to_room) {
    params.max_new_tokens = static_cast<int>(std::min<int64_t>(params.max_new_tokens, room));
  }
  if (params.max_new_tokens < 1 || params.max_new_tokens > room) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_new_tokens ", params.max_new_tokens, " must be from 1 to the ", room,
                     " tokens this input leaves for an answer (max_query_tokens ",
                     options_.max_query_tokens, " + max_answer_tokens ", options_.max_answer_tokens,
                     " - the input's ", query_tokens, " tokens)"));
  }
  auto resolved = Resolve(context, overrides);
  if (!resolved.ok()) return resolved.status();
  auto state =
      QueryState::Start(model_, resolved->first.get(), resolved->second, bos_id_, query->tokens);
  if (!state.ok()) return state.status();
  DecodeStopStringsWith(tokenizer_, params);
  auto output = manyshot::Generate(*std::move(state), params);
  if (output.ok()) output->truncated_input_tokens = query->truncated_tokens;
  return output;
}

}  // namespace manyshot
