#include "server/manyshot_service.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "server/api_to_engine.h"
#include "server/classify_call.h"
#include "server/create_task_reactor.h"
#include "server/generate_reactor.h"
#include "server/grpc_status.h"
#include "server/request_context.h"
#include "server/request_parser.h"
#include "server/server_info.h"
#include "server/stream_classify_reactor.h"

namespace manyshot::server {
namespace {

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
  out = DescribeServer(parts_, TenantOf(parts_.tenants, context));
  return Answer(parts_, context, "GetServerInfo", start, "", out, response);
}

}  // namespace manyshot::server
