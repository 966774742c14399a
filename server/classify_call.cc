#include "server/classify_call.h"

#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"
#include "server/api_to_engine.h"

namespace manyshot::server {
namespace {

absl::StatusOr<v1::ClassifyResponse> ToResponse(const v1::TaskSpec& spec,
                                                const std::string& request_id,
                                                const std::vector<ClassifyResult>& results) {
  v1::ClassifyResponse response;
  response.set_request_id(request_id);
  const bool calibrated = spec.calibrate();
  for (const ClassifyResult& r : results) {
    // The engine scored this same version: a mismatch is a bug, never a mislabelled answer.
    if (r.labels.size() != static_cast<size_t>(spec.labels_size()) || r.prediction < 0 ||
        static_cast<size_t>(r.prediction) >= r.labels.size()) {
      return absl::InternalError(absl::StrCat("the engine scored ", r.labels.size(),
                                              " labels for a task with ", spec.labels_size()));
    }
    auto* out = response.add_results();
    out->set_label(spec.labels(static_cast<int>(r.prediction)));
    out->set_label_index(static_cast<uint32_t>(r.prediction));
    out->set_raw_label_index(static_cast<uint32_t>(r.raw_prediction));
    out->set_input_tokens(static_cast<uint32_t>(r.input_tokens));
    out->set_truncated_tokens(static_cast<uint32_t>(r.truncated_tokens));
    for (size_t l = 0; l < r.labels.size(); ++l) {
      auto* s = out->add_scores();
      s->set_label(spec.labels(static_cast<int>(l)));
      s->set_mean_logprob(r.labels[l].score.mean_logprob);
      s->set_sum_logprob(r.labels[l].score.sum_logprob);
      s->set_num_tokens(static_cast<uint32_t>(r.labels[l].score.tokens));
      s->set_probability(r.labels[l].probability);
      if (calibrated) s->set_calibrated_probability(r.labels[l].calibrated_probability);
    }
  }
  return response;
}

}  // namespace

absl::Status CheckRequestId(const std::string& request_id) {
  if (request_id.size() <= kMaxRequestIdBytes) return absl::OkStatus();
  return InvalidFieldError("request_id", absl::StrCat("request_id has ", request_id.size(),
                                                      " bytes, more than ", kMaxRequestIdBytes,
                                                      "; use a short identifier such as a "
                                                      "UUID"));
}

void StartClassify(ServiceParts& parts, const std::string& tenant,
                   const v1::ClassifyRequest& request, Scheduler::AbandonFlag abandoned,
                   ClassifyCallDone done) {
  const ServerConfig& config = parts.config;
  if (auto s = CheckRequestId(request.request_id()); !s.ok()) return done(s);
  if (request.inputs_size() == 0) return done(absl::InvalidArgumentError("inputs is empty"));
  if (static_cast<uint32_t>(request.inputs_size()) > config.max_batch_inputs) {
    return done(absl::InvalidArgumentError(absl::StrCat("inputs has ", request.inputs_size(),
                                                        " entries, more than --max_batch_inputs ",
                                                        config.max_batch_inputs)));
  }
  std::vector<Example> inputs;
  inputs.reserve(static_cast<size_t>(request.inputs_size()));
  for (int i = 0; i < request.inputs_size(); ++i) {
    auto e = ToExample(request.inputs(i), config, absl::StrCat("inputs[", i, "]"));
    if (!e.ok()) return done(e.status());
    inputs.push_back(*std::move(e));
  }
  auto overrides = ToOverrides(request.options());
  if (!overrides.ok()) return done(overrides.status());
  // One version of the task answers the whole request: its labels name the scores the engine
  // computes for that same version, even when a replace commits while the request waits.
  auto version = parts.registry.Resolve(tenant, request.task_id());
  if (!version.ok()) return done(version.status());
  if ((*version)->stored.spec().labels_size() == 0) {
    return done(absl::FailedPreconditionError("the task has no labels; use Score with candidates"));
  }
  // Rendering and tokenizing run on the preparation pool, never on the engine's worker; the
  // prepared request then joins the engine queue.
  std::shared_ptr<const TaskVersion> held = *std::move(version);
  auto shared_done = std::make_shared<ClassifyCallDone>(std::move(done));
  ServiceMetrics& metrics = parts.metrics;
  parts.Prepare(
      tenant, held, static_cast<size_t>(request.inputs_size()), abandoned,
      [shared_done](absl::Status s) { (*shared_done)(std::move(s)); },
      [&parts, &metrics, held, inputs = std::move(inputs), overrides = *overrides, abandoned,
       request_id = request.request_id(), shared_done](ServedTask& task) {
        auto items = task.PrepareClassify(inputs, overrides);
        if (!items.ok()) return (*shared_done)(InRequestTerms(items.status()));
        parts.scheduler.Classify(
            held, *std::move(items), task.RecomputedContextTokens(), overrides, abandoned,
            [&metrics, held, request_id,
             done = std::move(*shared_done)](absl::StatusOr<std::vector<ClassifyResult>> results) {
              if (!results.ok()) return done(results.status());
              metrics.InputsClassified(results->size());
              auto response = ToResponse(held->stored.spec(), request_id, *results);
              if (!response.ok()) return done(response.status());
              done(*std::move(response));
            });
      });
}

}  // namespace manyshot::server
