#include "server/manyshot_service.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/backends/backend_factory.h"
#include "engine/core/dtype.h"
#include "engine/cpu/cpu_backend.h"
#include "server/build_info.h"
#include "server/grpc_status.h"
#include "server/request_context.h"
#include "server/task_spec.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {
namespace {

// The CPU's model name from /proc/cpuinfo, else "host CPU".
std::string CpuModelName() {
  std::ifstream in("/proc/cpuinfo");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("model name", 0) != 0) continue;
    auto colon = line.find(':');
    if (colon != std::string::npos && colon + 2 <= line.size()) return line.substr(colon + 2);
  }
  return "host CPU";
}

}  // namespace

ManyShotService::ManyShotService(const ServerConfig& config,
                                 std::shared_ptr<const LoadedModel> model, TaskRegistry& registry,
                                 Scheduler& scheduler, ContextCache& cache, ServiceMetrics& metrics)
    : config_(config),
      model_(std::move(model)),
      registry_(registry),
      scheduler_(scheduler),
      cache_(cache),
      metrics_(metrics),
      start_time_(std::chrono::system_clock::now()) {}

grpc::Status ManyShotService::Finish(const char* method, grpc::ServerContext* context,
                                     std::chrono::steady_clock::time_point start,
                                     const std::string& task_id, grpc::Status status) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string code = StatusCodeName(status.error_code());
  metrics_.Request(method, code, seconds);
  const std::string id = RequestId(context);
  if (status.ok()) {
    spdlog::info("request_id={} method={} task={} code=OK seconds={:.6f}", id, method, task_id,
                 seconds);
  } else {
    spdlog::warn("request_id={} method={} task={} code={} seconds={:.6f} error={}", id, method,
                 task_id, code, seconds, status.error_message());
  }
  return status;
}

grpc::Status ManyShotService::CreateTask(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::CreateTaskResponse, v1::CreateTaskRequest>* stream) {
  const auto start = std::chrono::steady_clock::now();
  const auto tenant = TenantOf(context);
  v1::CreateTaskRequest first;
  if (!stream->Read(&first)) {
    return Finish("CreateTask", context, start, "",
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "CreateTask needs at least one message with task_id and spec"));
  }
  const std::string task_id = first.task_id();
  if (auto s = ValidateTaskId(task_id); !s.ok()) {
    return Finish("CreateTask", context, start, task_id, ToGrpc(s));
  }
  if (!first.has_spec()) {
    return Finish("CreateTask", context, start, task_id,
                  grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "the first CreateTask message must carry spec"));
  }
  google::protobuf::RepeatedPtrField<v1::Demonstration> demos = first.demonstrations();
  v1::CreateTaskRequest more;
  auto last_progress = std::chrono::steady_clock::now();
  auto send_progress = [&](v1::CreateTaskProgress::Phase phase, int64_t done, int64_t total,
                           int64_t tokens) {
    v1::CreateTaskResponse r;
    auto* p = r.mutable_progress();
    p->set_phase(phase);
    p->set_demonstrations_received(static_cast<uint64_t>(demos.size()));
    p->set_groups_encoded(static_cast<uint64_t>(done));
    p->set_groups_total(static_cast<uint64_t>(total));
    p->set_tokens_encoded(static_cast<uint64_t>(tokens));
    p->set_elapsed_seconds(
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    stream->Write(r);
  };
  while (stream->Read(&more)) {
    if (!more.task_id().empty() && more.task_id() != task_id) {
      return Finish("CreateTask", context, start, task_id,
                    grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 "every CreateTask message must carry the same task_id (or none)"));
    }
    if (static_cast<uint64_t>(demos.size() + more.demonstrations_size()) >
        config_.max_demonstrations) {
      return Finish("CreateTask", context, start, task_id,
                    grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                                 absl::StrCat("more than --max_demonstrations ",
                                              config_.max_demonstrations, " demonstrations")));
    }
    for (auto& d : *more.mutable_demonstrations()) demos.Add(std::move(d));
    if (std::chrono::steady_clock::now() - last_progress > std::chrono::milliseconds(500)) {
      send_progress(v1::CreateTaskProgress::PHASE_RECEIVING, 0, 0, 0);
      last_progress = std::chrono::steady_clock::now();
    }
  }
  if (context->IsCancelled()) {
    return Finish("CreateTask", context, start, task_id,
                  grpc::Status(grpc::StatusCode::CANCELLED, "cancelled during upload"));
  }
  auto result =
      registry_.Create(tenant, task_id, first.spec(), demos, first.replace(), send_progress);
  if (!result.ok()) return Finish("CreateTask", context, start, task_id, ToGrpc(result.status()));
  if (result->created) metrics_.TokensEncoded(result->task.stats().context_tokens());
  v1::CreateTaskResponse done;
  *done.mutable_result()->mutable_task() = result->task;
  done.mutable_result()->set_created(result->created);
  done.mutable_result()->set_replaced(result->replaced);
  stream->Write(done);
  return Finish("CreateTask", context, start, task_id, grpc::Status::OK);
}

grpc::Status ManyShotService::GetTask(grpc::ServerContext* context,
                                      const v1::GetTaskRequest* request, v1::Task* response) {
  const auto start = std::chrono::steady_clock::now();
  auto task = registry_.Get(TenantOf(context), request->task_id());
  if (!task.ok())
    return Finish("GetTask", context, start, request->task_id(), ToGrpc(task.status()));
  *response = *std::move(task);
  return Finish("GetTask", context, start, request->task_id(), grpc::Status::OK);
}

grpc::Status ManyShotService::ListTasks(grpc::ServerContext* context,
                                        const v1::ListTasksRequest* request,
                                        v1::ListTasksResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  size_t limit = request->page_size() == 0 ? 50 : std::min<size_t>(request->page_size(), 1000);
  bool more = false;
  auto tasks = registry_.List(TenantOf(context), request->page_token(), limit, &more);
  for (auto& t : tasks) *response->add_tasks() = std::move(t);
  // The page token is the last task id of this page: listing resumes after it.
  if (more && !tasks.empty()) response->set_next_page_token(response->tasks().rbegin()->task_id());
  return Finish("ListTasks", context, start, "", grpc::Status::OK);
}

grpc::Status ManyShotService::DeleteTask(grpc::ServerContext* context,
                                         const v1::DeleteTaskRequest* request,
                                         v1::DeleteTaskResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  auto freed = registry_.Delete(TenantOf(context), request->task_id());
  if (!freed.ok()) {
    return Finish("DeleteTask", context, start, request->task_id(), ToGrpc(freed.status()));
  }
  response->set_freed_bytes(*freed);
  return Finish("DeleteTask", context, start, request->task_id(), grpc::Status::OK);
}

grpc::Status ManyShotService::DoClassify(grpc::ServerContext* context,
                                         const v1::ClassifyRequest& request,
                                         v1::ClassifyResponse* response) {
  response->set_request_id(request.request_id());
  if (request.inputs_size() == 0) {
    return grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "inputs is empty");
  }
  if (static_cast<uint32_t>(request.inputs_size()) > config_.max_batch_inputs) {
    return grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("inputs has ", request.inputs_size(),
                     " entries, more than --max_batch_inputs ", config_.max_batch_inputs));
  }
  std::vector<Example> inputs;
  for (int i = 0; i < request.inputs_size(); ++i) {
    auto e = ToExample(request.inputs(i), config_, absl::StrCat("inputs[", i, "]"));
    if (!e.ok()) return ToGrpc(e.status());
    inputs.push_back(*std::move(e));
  }
  auto overrides = ToOverrides(request.options());
  if (!overrides.ok()) return ToGrpc(overrides.status());
  // One version of the task answers the whole request: its labels name the scores the engine
  // computes for that same version, even when a replace commits while the request waits.
  auto version = registry_.Resolve(TenantOf(context), request.task_id());
  if (!version.ok()) return ToGrpc(version.status());
  const v1::TaskSpec& spec = (*version)->stored.spec();
  if (spec.labels_size() == 0) {
    return grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                        "the task has no labels; use Score with candidates");
  }
  auto results = scheduler_.Classify(*version, std::move(inputs), *overrides, context);
  if (!results.ok()) return ToGrpc(results.status());
  metrics_.InputsClassified(results->size());
  const bool calibrated = spec.calibrate();
  for (const ClassifyResult& r : *results) {
    if (r.labels.size() != static_cast<size_t>(spec.labels_size()) || r.prediction < 0 ||
        static_cast<size_t>(r.prediction) >= r.labels.size()) {
      return grpc::Status(grpc::StatusCode::INTERNAL,
                          absl::StrCat("the engine scored ", r.labels.size(),
                                       " labels for a task with ", spec.labels_size()));
    }
    auto* out = response->add_results();
    out->set_label(spec.labels(static_cast<int>(r.prediction)));
    out->set_label_index(static_cast<uint32_t>(r.prediction));
    out->set_raw_label_index(static_cast<uint32_t>(r.raw_prediction));
    out->set_input_tokens(static_cast<uint32_t>(r.input_tokens));
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
  return grpc::Status::OK;
}

grpc::Status ManyShotService::Classify(grpc::ServerContext* context,
                                       const v1::ClassifyRequest* request,
                                       v1::ClassifyResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  return Finish("Classify", context, start, request->task_id(),
                DoClassify(context, *request, response));
}

grpc::Status ManyShotService::StreamClassify(
    grpc::ServerContext* context,
    grpc::ServerReaderWriter<v1::ClassifyResponse, v1::ClassifyRequest>* stream) {
  const auto start = std::chrono::steady_clock::now();
  // Each request is answered as it completes: requests run concurrently (and batch with other
  // clients' requests in the scheduler), so answers may come out of request order.
  std::mutex write_mutex;
  std::vector<std::thread> inflight;
  v1::ClassifyRequest request;
  while (stream->Read(&request)) {
    inflight.emplace_back([this, context, stream, &write_mutex, request] {
      const auto one_start = std::chrono::steady_clock::now();
      v1::ClassifyResponse response;
      grpc::Status status = DoClassify(context, request, &response);
      metrics_.Request(
          "StreamClassify.request", StatusCodeName(status.error_code()),
          std::chrono::duration<double>(std::chrono::steady_clock::now() - one_start).count());
      if (!status.ok()) {
        response.Clear();
        response.set_request_id(request.request_id());
        response.set_error_code(static_cast<int32_t>(status.error_code()));
        response.set_error_message(status.error_message());
      }
      std::lock_guard<std::mutex> lock(write_mutex);
      stream->Write(response);
    });
    // Keep the number of threads bounded: join finished ones once many are outstanding.
    if (inflight.size() >= 64) {
      for (auto& t : inflight) t.join();
      inflight.clear();
    }
  }
  for (auto& t : inflight) t.join();
  return Finish("StreamClassify", context, start, "", grpc::Status::OK);
}

grpc::Status ManyShotService::Score(grpc::ServerContext* context, const v1::ScoreRequest* request,
                                    v1::ScoreResponse* response) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](grpc::Status s) {
    return Finish("Score", context, start, request->task_id(), s);
  };
  if (request->items_size() == 0) {
    return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT, "items is empty"));
  }
  if (static_cast<uint32_t>(request->items_size()) > config_.max_batch_inputs) {
    return fail(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("items has ", request->items_size(), " entries, more than --max_batch_inputs ",
                     config_.max_batch_inputs)));
  }
  std::vector<Example> inputs;
  std::vector<std::vector<std::string>> candidates;
  for (int i = 0; i < request->items_size(); ++i) {
    const auto& item = request->items(i);
    auto e = ToExample(item.input(), config_, absl::StrCat("items[", i, "].input"));
    if (!e.ok()) return fail(ToGrpc(e.status()));
    if (item.candidates_size() == 0 ||
        static_cast<uint32_t>(item.candidates_size()) > config_.max_candidates) {
      return fail(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat("items[", i, "].candidates must have 1 to ",
                                    "--max_candidates ", config_.max_candidates, " entries")));
    }
    inputs.push_back(*std::move(e));
    candidates.emplace_back(item.candidates().begin(), item.candidates().end());
  }
  auto overrides = ToOverrides(request->options());
  if (!overrides.ok()) return fail(ToGrpc(overrides.status()));
  auto version = registry_.Resolve(TenantOf(context), request->task_id());
  if (!version.ok()) return fail(ToGrpc(version.status()));
  std::vector<ChoiceResult> results;
  auto status = scheduler_.Run(
      *version, inputs.size(),
      [&](TaskRegistry::Handle& handle) -> absl::Status {
        auto r = handle.task->ScoreChoices(handle.get(), inputs, candidates, *overrides);
        if (!r.ok()) return r.status();
        results = *std::move(r);
        return absl::OkStatus();
      },
      context);
  if (!status.ok()) return fail(ToGrpc(status));
  for (size_t i = 0; i < results.size(); ++i) {
    auto* out = response->add_results();
    out->set_best_index(static_cast<uint32_t>(results[i].best));
    for (size_t c = 0; c < results[i].candidates.size(); ++c) {
      auto* s = out->add_candidates();
      s->set_candidate(candidates[i][c]);
      s->set_mean_logprob(results[i].candidates[c].mean_logprob);
      s->set_sum_logprob(results[i].candidates[c].sum_logprob);
      s->set_num_tokens(static_cast<uint32_t>(results[i].candidates[c].tokens));
      s->set_probability(results[i].probabilities[c]);
    }
  }
  return fail(grpc::Status::OK);
}

grpc::Status ManyShotService::Generate(grpc::ServerContext* context,
                                       const v1::GenerateRequest* request,
                                       grpc::ServerWriter<v1::GenerateResponse>* writer) {
  const auto start = std::chrono::steady_clock::now();
  auto fail = [&](grpc::Status s) {
    return Finish("Generate", context, start, request->task_id(), s);
  };
  auto input = ToExample(request->input(), config_, "input");
  if (!input.ok()) return fail(ToGrpc(input.status()));
  const auto& o = request->options();
  GenerationParams params;
  params.beam_search = o.strategy() == v1::DECODING_STRATEGY_BEAM;
  params.beam_width = o.beam_width() ? static_cast<int>(o.beam_width()) : 3;
  params.length_penalty = o.has_length_penalty() ? o.length_penalty() : 0.6;
  params.max_new_tokens = o.max_new_tokens() ? static_cast<int>(o.max_new_tokens()) : 30;
  if (params.max_new_tokens > static_cast<int>(config_.max_new_tokens)) {
    return fail(
        grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                     absl::StrCat("options.max_new_tokens ", params.max_new_tokens,
                                  " is more than --max_new_tokens ", config_.max_new_tokens)));
  }
  if (params.beam_search &&
      (params.beam_width < 1 || params.beam_width > static_cast<int>(config_.max_beam_width))) {
    return fail(grpc::Status(
        grpc::StatusCode::INVALID_ARGUMENT,
        absl::StrCat("options.beam_width must be 1 to --max_beam_width ", config_.max_beam_width)));
  }
  if (!std::isfinite(params.length_penalty)) {
    return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                             "options.length_penalty must be a finite number"));
  }
  for (const auto& s : o.stop()) {
    if (s.empty()) {
      return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "options.stop has an empty "
                               "string"));
    }
    params.stop.push_back(s);
  }
  if (!o.has_stop_at_eos() || o.stop_at_eos()) params.eos_id = model_->tokenizer->eos_id();
  auto overrides = ToOverrides(o.query());
  if (!overrides.ok()) return fail(ToGrpc(overrides.status()));
  const Tokenizer& tokenizer = *model_->tokenizer;
  std::vector<int32_t> emitted;
  std::string emitted_text;
  // Streams a token with the text it adds (empty while a multi-byte character is incomplete).
  auto emit = [&](int32_t token, double logprob) {
    emitted.push_back(token);
    auto text = tokenizer.Decode(emitted);
    std::string full = text.ok() ? *text : std::string();
    v1::GenerateResponse r;
    r.mutable_token()->set_token_id(token);
    r.mutable_token()->set_logprob(logprob);
    if (full.size() >= emitted_text.size() &&
        full.compare(0, emitted_text.size(), emitted_text) == 0 &&
        full.find("\xEF\xBF\xBD", emitted_text.size()) == std::string::npos) {
      r.mutable_token()->set_text(full.substr(emitted_text.size()));
      emitted_text = full;
    }
    writer->Write(r);
  };
  if (!params.beam_search) params.on_token = emit;
  params.cancelled = [context] { return context->IsCancelled(); };
  auto version = registry_.Resolve(TenantOf(context), request->task_id());
  if (!version.ok()) return fail(ToGrpc(version.status()));
  GenerationOutput output;
  auto status = scheduler_.Run(
      *version, 1,
      [&](TaskRegistry::Handle& handle) -> absl::Status {
        auto out = handle.task->Generate(handle.get(), *input, params, *overrides);
        if (!out.ok()) return out.status();
        output = *std::move(out);
        return absl::OkStatus();
      },
      context);
  if (!status.ok()) return fail(ToGrpc(status));
  if (params.beam_search) {
    for (int32_t t : output.tokens) emit(t, 0.0);
  }
  metrics_.TokensGenerated(output.tokens.size());
  auto text = tokenizer.Decode(output.tokens);
  std::string full = text.ok() ? *text : std::string();
  if (output.reason == FinishReason::kStopString && !output.stop_string.empty() &&
      full.size() >= output.stop_string.size()) {
    full.resize(full.size() - output.stop_string.size());
  }
  v1::GenerateResponse last;
  auto* result = last.mutable_result();
  result->set_text(full);
  for (int32_t t : output.tokens) result->add_token_ids(t);
  result->set_finish_reason(output.reason == FinishReason::kEos ? v1::FINISH_REASON_EOS
                            : output.reason == FinishReason::kStopString
                                ? v1::FINISH_REASON_STOP_STRING
                                : v1::FINISH_REASON_MAX_TOKENS);
  result->set_sum_logprob(output.sum_logprob);
  result->set_score(output.score);
  writer->Write(last);
  return fail(grpc::Status::OK);
}

grpc::Status ManyShotService::GetServerInfo(grpc::ServerContext* context,
                                            const v1::GetServerInfoRequest*,
                                            v1::ServerInfo* response) {
  const auto start = std::chrono::steady_clock::now();
  response->set_version(kVersion);
  const ModelConfig& c = model_->transformer->config();
  auto* model = response->mutable_model();
  model->set_path(model_->path.string());
  model->set_model_type(c.model_type);
  model->set_layers(static_cast<uint32_t>(c.num_layers));
  model->set_hidden_size(static_cast<uint32_t>(c.hidden_size));
  model->set_heads(static_cast<uint32_t>(c.num_heads));
  model->set_kv_heads(static_cast<uint32_t>(c.num_kv_heads));
  model->set_head_dim(static_cast<uint32_t>(c.head_dim));
  model->set_vocab_size(static_cast<uint32_t>(c.vocab_size));
  model->set_context_length(static_cast<uint32_t>(c.max_position_embeddings));
  model->set_fingerprint(model_->transformer->fingerprint());
  model->set_random_weights(model_->random_weights);
  model->set_tokenizer_kind(model_->tokenizer->kind());
  model->set_tokenizer_fingerprint(model_->tokenizer->fingerprint());
  model->set_weight_dtype(std::string(DTypeName(model_->transformer->stored_dtype())));

  auto* backend = response->mutable_backend();
  backend->set_name(model_->backend->name());
  static const std::string cpu_name = CpuModelName();
  const bool on_gpu = model_->backend->device() == Device::kCUDA;
  backend->set_device(on_gpu ? model_->backend->description() : cpu_name);
  backend->set_threads(static_cast<uint32_t>(model_->backend->threads()));
  if (!on_gpu) backend->set_blas_kernel(BlasKernelName());
  backend->set_description(model_->backend->description());
  backend->set_selection(model_->backend_selection);
  backend->set_compute_dtype(std::string(DTypeName(model_->transformer->compute_dtype())));
  backend->set_kv_dtype(std::string(DTypeName(model_->transformer->kv_dtype())));
  backend->set_cuda_built(CudaBuilt());
  backend->set_device_index(static_cast<uint32_t>(model_->backend->device_index()));
  auto* limits = response->mutable_limits();
  limits->set_max_message_bytes(config_.max_message_bytes);
  limits->set_max_demonstrations(config_.max_demonstrations);
  limits->set_max_input_bytes(config_.max_input_bytes);
  limits->set_max_batch_inputs(config_.max_batch_inputs);
  limits->set_max_candidates(config_.max_candidates);
  limits->set_max_new_tokens(config_.max_new_tokens);
  limits->set_max_beam_width(config_.max_beam_width);
  limits->set_max_tasks(config_.max_tasks);
  const CacheStats stats = cache_.Stats();
  auto* cache = response->mutable_cache();
  cache->set_memory_bytes(stats.memory_bytes);
  cache->set_memory_budget_bytes(stats.memory_budget_bytes);
  cache->set_memory_entries(stats.memory_entries);
  cache->set_disk_bytes(stats.disk_bytes);
  cache->set_disk_budget_bytes(stats.disk_budget_bytes);
  cache->set_disk_entries(stats.disk_entries);
  cache->set_kv_dtype(std::string(DTypeName(cache_.storage_dtype())));
  response->set_tasks(registry_.size());
  auto since_epoch = start_time_.time_since_epoch();
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  response->mutable_start_time()->set_seconds(seconds.count());
  response->mutable_start_time()->set_nanos(static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count()));
  return Finish("GetServerInfo", context, start, "", grpc::Status::OK);
}

}  // namespace manyshot::server
