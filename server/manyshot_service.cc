#include "server/manyshot_service.h"

#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/backends/backend_factory.h"
#include "engine/core/dtype.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/cpu_target.h"
#include "server/api_to_engine.h"
#include "server/build_info.h"
#include "server/classify_call.h"
#include "server/create_task_reactor.h"
#include "server/generate_reactor.h"
#include "server/grpc_status.h"
#include "server/request_context.h"
#include "server/request_parser.h"
#include "server/stream_classify_reactor.h"

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

// A unary call whose work is queued on the scheduler: a call cancelled while queued is dropped.
class QueuedUnaryReactor final : public grpc::ServerUnaryReactor {
 public:
  const Scheduler::AbandonFlag abandoned = Scheduler::NewAbandonFlag();
  void OnCancel() override { abandoned->store(true); }
  void OnDone() override { delete this; }
};

// Finishes a unary call answered on the spot: the response (or the error), counted and logged.
template <typename Response>
grpc::ServerUnaryReactor* Answer(ServiceParts& parts, grpc::CallbackServerContext* context,
                                 const char* method, std::chrono::steady_clock::time_point start,
                                 const std::string& task_id,
                                 const absl::StatusOr<Response>& response, grpc::ByteBuffer* out) {
  if (response.ok()) *out = SerializeResponse(*response);
  auto* reactor = context->DefaultReactor();
  reactor->Finish(parts.Record(method, context, start, task_id, ToGrpc(response.status())));
  return reactor;
}

}  // namespace

ManyShotService::ManyShotService(const ServerConfig& config, const TenantDirectory& tenants,
                                 std::shared_ptr<const LoadedModel> model, TaskRegistry& registry,
                                 PreparationPool& preparation, Scheduler& scheduler,
                                 ContextCache& cache, ServiceMetrics& metrics)
    : parts_{config, tenants, std::move(model), registry, preparation, scheduler, cache, metrics} {}

ManyShotService::Bidi* ManyShotService::CreateTask(Context* context) {
  return new CreateTaskReactor(parts_, jobs_, context);
}

ManyShotService::Bidi* ManyShotService::StreamClassify(Context* context) {
  return new StreamClassifyReactor(parts_, context);
}

grpc::ServerWriteReactor<grpc::ByteBuffer>* ManyShotService::Generate(Context* context,
                                                                      const Bytes* request) {
  return new GenerateReactor(parts_, context, *request);
}

ManyShotService::Unary* ManyShotService::GetTask(Context* context, const Bytes* request,
                                                 Bytes* response) {
  const auto start = std::chrono::steady_clock::now();
  v1::GetTaskRequest r;
  absl::StatusOr<v1::Task> task;
  if (auto s = ParseRequest(*request, r); !s.ok()) {
    task = s;
  } else {
    task = parts_.registry.Get(TenantOf(parts_.tenants, context), r.task_id());
  }
  return Answer(parts_, context, "GetTask", start, r.task_id(), task, response);
}

ManyShotService::Unary* ManyShotService::ListTasks(Context* context, const Bytes* request,
                                                   Bytes* response) {
  const auto start = std::chrono::steady_clock::now();
  v1::ListTasksRequest r;
  absl::StatusOr<v1::ListTasksResponse> out;
  if (auto s = ParseRequest(*request, r); !s.ok()) {
    out = s;
  } else {
    out.emplace();
    size_t limit = r.page_size() == 0 ? 50 : std::min<size_t>(r.page_size(), 1000);
    bool more = false;
    auto tasks =
        parts_.registry.List(TenantOf(parts_.tenants, context), r.page_token(), limit, &more);
    for (auto& t : tasks) *out->add_tasks() = std::move(t);
    // The page token is the last task id of this page: listing resumes after it.
    if (more && !tasks.empty()) out->set_next_page_token(out->tasks().rbegin()->task_id());
  }
  return Answer(parts_, context, "ListTasks", start, "", out, response);
}

ManyShotService::Unary* ManyShotService::DeleteTask(Context* context, const Bytes* request,
                                                    Bytes* response) {
  const auto start = std::chrono::steady_clock::now();
  v1::DeleteTaskRequest r;
  absl::StatusOr<v1::DeleteTaskResponse> out;
  if (auto s = ParseRequest(*request, r); !s.ok()) {
    out = s;
  } else {
    auto freed = parts_.registry.Delete(TenantOf(parts_.tenants, context), r.task_id());
    if (freed.ok()) {
      out.emplace().set_freed_bytes(*freed);
    } else {
      out = freed.status();
    }
  }
  return Answer(parts_, context, "DeleteTask", start, r.task_id(), out, response);
}

ManyShotService::Unary* ManyShotService::Classify(Context* context, const Bytes* request,
                                                  Bytes* response) {
  const auto start = std::chrono::steady_clock::now();
  auto* reactor = new QueuedUnaryReactor();
  v1::ClassifyRequest r;
  if (auto s = ParseRequest(*request, r); !s.ok()) {
    reactor->Finish(parts_.Record("Classify", context, start, "", ToGrpc(s)));
    return reactor;
  }
  StartClassify(
      parts_, TenantOf(parts_.tenants, context), r, reactor->abandoned,
      [this, context, reactor, response, start,
       task_id = r.task_id()](absl::StatusOr<v1::ClassifyResponse> out) {
        if (out.ok()) *response = SerializeResponse(*out);
        reactor->Finish(parts_.Record("Classify", context, start, task_id, ToGrpc(out.status())));
      });
  return reactor;
}

ManyShotService::Unary* ManyShotService::Score(Context* context, const Bytes* request,
                                               Bytes* response) {
  const auto start = std::chrono::steady_clock::now();
  auto* reactor = new QueuedUnaryReactor();
  v1::ScoreRequest r;
  auto fail = [&](const absl::Status& s) {
    reactor->Finish(parts_.Record("Score", context, start, r.task_id(), ToGrpc(s)));
    return reactor;
  };
  if (auto s = ParseRequest(*request, r); !s.ok()) return fail(s);
  const ServerConfig& config = parts_.config;
  if (r.items_size() == 0) return fail(absl::InvalidArgumentError("items is empty"));
  if (static_cast<uint32_t>(r.items_size()) > config.max_batch_inputs) {
    return fail(absl::InvalidArgumentError(absl::StrCat("items has ", r.items_size(),
                                                        " entries, more than --max_batch_inputs ",
                                                        config.max_batch_inputs)));
  }
  std::vector<Example> inputs;
  auto candidates = std::make_shared<std::vector<std::vector<std::string>>>();
  for (int i = 0; i < r.items_size(); ++i) {
    const auto& item = r.items(i);
    auto e = ToExample(item.input(), config, absl::StrCat("items[", i, "].input"));
    if (!e.ok()) return fail(e.status());
    if (item.candidates_size() == 0 ||
        static_cast<uint32_t>(item.candidates_size()) > config.max_candidates) {
      return fail(
          InvalidFieldError(absl::StrCat("items[", i, "].candidates"),
                            absl::StrCat("items[", i, "].candidates must have 1 to ",
                                         "--max_candidates ", config.max_candidates, " entries")));
    }
    inputs.push_back(*std::move(e));
    candidates->emplace_back(item.candidates().begin(), item.candidates().end());
  }
  auto overrides = ToOverrides(r.options());
  if (!overrides.ok()) return fail(overrides.status());
  auto version = parts_.registry.Resolve(TenantOf(parts_.tenants, context), r.task_id());
  if (!version.ok()) return fail(version.status());
  auto finish = [this, context, reactor, response, start, candidates,
                 task_id = r.task_id()](absl::StatusOr<std::vector<ChoiceResult>> results) {
    if (results.ok()) {
      v1::ScoreResponse out;
      for (size_t i = 0; i < results->size(); ++i) {
        const ChoiceResult& result = (*results)[i];
        auto* o = out.add_results();
        o->set_best_index(static_cast<uint32_t>(result.best));
        o->set_truncated_tokens(static_cast<uint32_t>(result.truncated_tokens));
        for (size_t c = 0; c < result.candidates.size(); ++c) {
          auto* s = o->add_candidates();
          s->set_candidate((*candidates)[i][c]);
          s->set_mean_logprob(result.candidates[c].mean_logprob);
          s->set_sum_logprob(result.candidates[c].sum_logprob);
          s->set_num_tokens(static_cast<uint32_t>(result.candidates[c].tokens));
          s->set_probability(result.probabilities[c]);
        }
      }
      *response = SerializeResponse(out);
    }
    reactor->Finish(parts_.Record("Score", context, start, task_id, ToGrpc(results.status())));
  };
  // Rendering and tokenizing (every candidate) run on the preparation pool, never on the
  // engine's worker; the prepared items then join the engine queue.
  const size_t items = inputs.size();
  parts_.Prepare(
      TenantOf(parts_.tenants, context), *version, items, reactor->abandoned,
      [finish](absl::Status status) { finish(std::move(status)); },
      [this, held = *version, inputs = std::move(inputs), candidates, overrides = *overrides,
       abandoned = reactor->abandoned, finish](ServedTask& task) {
        auto prepared = task.PrepareChoices(inputs, *candidates, overrides);
        if (!prepared.ok()) return finish(InRequestTerms(prepared.status()));
        parts_.scheduler.Score(held, *std::move(prepared), overrides, abandoned, finish);
      });
  return reactor;
}

ManyShotService::Unary* ManyShotService::GetServerInfo(Context* context, const Bytes* request,
                                                       Bytes* response) {
  const auto start = std::chrono::steady_clock::now();
  v1::GetServerInfoRequest r;
  absl::StatusOr<v1::ServerInfo> out;
  if (auto s = ParseRequest(*request, r); !s.ok()) {
    out = s;
    return Answer(parts_, context, "GetServerInfo", start, "", out, response);
  }
  v1::ServerInfo& info = out.emplace();
  info.set_version(kVersion);
  auto* model = info.mutable_model();
  const ModelDescription& d = parts_.model->description();
  model->set_path(d.path.string());
  model->set_model_type(d.model_type);
  model->set_encoder_decoder(d.encoder_decoder);
  model->set_layers(d.layers);
  model->set_hidden_size(d.hidden_size);
  model->set_heads(d.heads);
  model->set_kv_heads(d.kv_heads);
  model->set_head_dim(d.head_dim);
  model->set_vocab_size(d.vocab_size);
  model->set_context_length(d.context_length);
  model->set_weight_dtype(d.weight_dtype);
  model->set_held_weight_dtype(d.held_weight_dtype);
  model->set_fingerprint(d.fingerprint);
  model->set_random_weights(d.marker.random_weights);
  model->set_weights_note(d.marker.note);
  model->set_tokenizer_kind(parts_.model->tokenizer().kind());
  model->set_tokenizer_fingerprint(parts_.model->tokenizer().fingerprint());

  auto* backend = info.mutable_backend();
  backend->set_name(parts_.model->backend->name());
  static const std::string cpu_name = CpuModelName();
  const bool on_gpu = parts_.model->backend->device() == Device::kCUDA;
  backend->set_device(on_gpu ? parts_.model->backend->description() : cpu_name);
  backend->set_threads(static_cast<uint32_t>(parts_.model->backend->threads()));
  if (!on_gpu) backend->set_blas_kernel(BlasKernelName());
  if (!on_gpu) backend->set_cpu_target(CpuTargetName());
  backend->set_description(parts_.model->backend->description());
  backend->set_selection(parts_.model->backend_selection);
  backend->set_compute_dtype(std::string(DTypeName(d.compute_dtype)));
  backend->set_kv_dtype(std::string(DTypeName(d.kv_dtype)));
  backend->set_cuda_built(CudaBuilt());
  backend->set_device_index(static_cast<uint32_t>(parts_.model->backend->device_index()));
  auto* limits = info.mutable_limits();
  limits->set_max_message_bytes(parts_.config.max_message_bytes);
  limits->set_max_demonstrations(parts_.config.max_demonstrations);
  limits->set_max_input_bytes(parts_.config.max_input_bytes);
  limits->set_max_batch_inputs(parts_.config.max_batch_inputs);
  limits->set_max_candidates(parts_.config.max_candidates);
  limits->set_max_new_tokens(parts_.config.max_new_tokens);
  limits->set_max_beam_width(parts_.config.max_beam_width);
  limits->set_max_tasks(parts_.config.max_tasks);
  limits->set_max_stream_inflight(parts_.config.max_stream_inflight);
  limits->set_max_server_inflight(parts_.config.max_server_inflight);
  limits->set_max_upload_bytes(parts_.config.max_upload_bytes);
  limits->set_max_query_context_tokens(parts_.config.max_query_context_tokens);
  limits->set_max_streams_per_tenant(parts_.config.max_streams_per_tenant);
  limits->set_max_streams_per_connection(parts_.config.max_streams_per_connection);
  limits->set_stream_idle_timeout_seconds(
      static_cast<uint32_t>(parts_.config.stream_idle_timeout_seconds));
  limits->set_max_total_upload_bytes(parts_.config.max_total_upload_bytes);
  limits->set_max_request_id_bytes(static_cast<uint32_t>(kMaxRequestIdBytes));
  const CacheStats stats = parts_.cache.Stats();
  auto* cache = info.mutable_cache();
  cache->set_memory_bytes(stats.memory_bytes);
  cache->set_memory_budget_bytes(stats.memory_budget_bytes);
  cache->set_memory_entries(stats.memory_entries);
  cache->set_disk_bytes(stats.disk_bytes);
  cache->set_disk_budget_bytes(stats.disk_budget_bytes);
  cache->set_disk_entries(stats.disk_entries);
  cache->set_kv_dtype(std::string(DTypeName(parts_.cache.storage_dtype())));
  info.set_tasks(parts_.registry.size());
  // Under bearer tokens a tenant sees its own tasks and bytes, not other tenants' (budgets and
  // the dtype are the server's).
  if (!parts_.config.auth_tokens_file.empty()) {
    const TaskRegistry::TenantFigures own =
        parts_.registry.FiguresOf(TenantOf(parts_.tenants, context));
    info.set_tasks(own.tasks);
    cache->set_memory_bytes(own.memory_bytes);
    cache->set_memory_entries(own.memory_entries);
    cache->set_disk_bytes(own.disk_bytes);
    cache->set_disk_entries(own.disk_entries);
  }
  auto since_epoch = parts_.start_time.time_since_epoch();
  auto seconds = std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
  info.mutable_start_time()->set_seconds(seconds.count());
  info.mutable_start_time()->set_nanos(static_cast<int32_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count()));
  return Answer(parts_, context, "GetServerInfo", start, "", out, response);
}

}  // namespace manyshot::server
