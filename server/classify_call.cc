#include "server/classify_call.h"

#include "absl/strings/str_cat.h"
#include "server/task_spec.h"

namespace manyshot::server {
namespace {

v1::ClassifyResponse ToResponse(const v1::Task& task, const std::string& request_id,
                                const std::vector<ClassifyResult>& results) {
  v1::ClassifyResponse response;
  response.set_request_id(request_id);
  const bool calibrated = task.spec().calibrate();
  for (const ClassifyResult& r : results) {
    auto* out = response.add_results();
    out->set_label(task.spec().labels(static_cast<int>(r.prediction)));
    out->set_label_index(static_cast<uint32_t>(r.prediction));
    out->set_raw_label_index(static_cast<uint32_t>(r.raw_prediction));
    out->set_input_tokens(static_cast<uint32_t>(r.input_tokens));
    for (size_t l = 0; l < r.labels.size(); ++l) {
      auto* s = out->add_scores();
      s->set_label(task.spec().labels(static_cast<int>(l)));
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

void StartClassify(ServiceParts& parts, const std::string& tenant,
                   const v1::ClassifyRequest& request, Scheduler::AbandonFlag abandoned,
                   ClassifyCallDone done) {
  const ServerConfig& config = parts.config;
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
  auto task = parts.registry.Get(tenant, request.task_id());
  if (!task.ok()) return done(task.status());
  if (task->spec().labels_size() == 0) {
    return done(absl::FailedPreconditionError("the task has no labels; use Score with candidates"));
  }
  ServiceMetrics& metrics = parts.metrics;
  parts.scheduler.Classify(
      tenant, request.task_id(), std::move(inputs), *overrides, std::move(abandoned),
      [&metrics, task = *std::move(task), request_id = request.request_id(),
       done = std::move(done)](absl::StatusOr<std::vector<ClassifyResult>> results) {
        if (!results.ok()) return done(results.status());
        metrics.InputsClassified(results->size());
        done(ToResponse(task, request_id, *results));
      });
}

}  // namespace manyshot::server
