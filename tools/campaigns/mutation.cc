#include "tools/campaigns/mutation.h"

#include <signal.h>

namespace manyshot::campaign {
namespace {

constexpr size_t kDemosPerMessage = 100;

Stage StageOf(v1::CreateTaskProgress::Phase phase) {
  switch (phase) {
    case v1::CreateTaskProgress::PHASE_TOKENIZING:
      return Stage::kTokenizing;
    case v1::CreateTaskProgress::PHASE_ENCODING:
      return Stage::kEncoding;
    case v1::CreateTaskProgress::PHASE_STORING:
      return Stage::kStoring;
    default:
      return Stage::kReceiving;
  }
}

// A definitive answer: the server looked at the request and refused it (it changed nothing).
// Anything else after a kill may or may not have been applied.
bool Definitive(const grpc::Status& s, const Killer* killer) {
  if (s.ok()) return true;
  if (killer && killer->killed()) return false;
  return s.error_code() != grpc::StatusCode::UNAVAILABLE &&
         s.error_code() != grpc::StatusCode::CANCELLED &&
         s.error_code() != grpc::StatusCode::DEADLINE_EXCEEDED &&
         s.error_code() != grpc::StatusCode::UNKNOWN &&
         s.error_code() != grpc::StatusCode::INTERNAL;
}

// Records how a mutation ended: acknowledged (it must survive), refused for certain (it changed
// nothing), or neither (a kill interrupted it: either outcome is allowed).
void Settle(bool acked, const Killer* killer, const std::string& id, ExpectedState& state,
            std::atomic<Stage>& stage, MutationResult& result) {
  if (acked) {
    stage = Stage::kAcked;
    result.acked = true;
    state.Ack(id);
  } else if (Definitive(result.status, killer)) {
    stage = Stage::kRejected;
    result.rejected = true;
    state.Abort(id);
  }
}

}  // namespace

void Killer::Kill(const std::string& label) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (killed_.load()) return;
  label_ = label;
  killed_ = true;  // before the signal: every failure seen after this is expected
  ::kill(pid_, SIGKILL);
}

std::string Killer::label() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return label_;
}

const char* StageName(Stage stage) {
  switch (stage) {
    case Stage::kSending:
      return "sending";
    case Stage::kReceiving:
      return "receiving";
    case Stage::kTokenizing:
      return "tokenizing";
    case Stage::kEncoding:
      return "encoding";
    case Stage::kStoring:
      return "storing";
    case Stage::kAcked:
      return "acked";
    case Stage::kRejected:
      return "rejected";
  }
  return "?";
}

MutationResult RunCreate(v1::ManyShot::Stub& stub, const std::string& id, const Variant& variant,
                         int variant_index, bool replace, const CreateTrigger& trigger,
                         Killer* killer, ExpectedState& state, std::atomic<Stage>& stage) {
  const std::string label_prefix = replace ? "replace/" : "create/";
  auto kill = [&](Stage at) {
    if (killer) killer->Kill(label_prefix + StageName(at));
  };
  MutationResult result;
  const auto start = std::chrono::steady_clock::now();
  stage = Stage::kSending;
  state.Begin(id, variant_index);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(300));
  auto stream = stub.CreateTask(&context);
  int messages = 0;
  for (size_t i = 0; i < variant.demos.size() || i == 0; i += kDemosPerMessage) {
    v1::CreateTaskRequest message;
    if (i == 0) {
      message.set_task_id(id);
      *message.mutable_spec() = variant.spec;
      message.set_replace(replace);
    }
    for (size_t k = i; k < variant.demos.size() && k < i + kDemosPerMessage; ++k) {
      *message.add_demonstrations() = variant.demos[k];
    }
    if (!stream->Write(message)) break;
    if (trigger.kind == CreateTrigger::kUpload && ++messages >= trigger.upload_messages) {
      kill(Stage::kSending);
    }
  }
  stream->WritesDone();
  stage = Stage::kReceiving;
  v1::CreateTaskResponse response;
  bool got_result = false;
  while (stream->Read(&response)) {
    if (response.has_result()) {
      // The result is sent once the task has committed: it is the acknowledgement, even if the
      // call's status is lost to a kill that follows.
      got_result = true;
      stage = Stage::kAcked;
      continue;
    }
    const auto& p = response.progress();
    stage = StageOf(p.phase());
    const bool fire = (trigger.kind == CreateTrigger::kTokenizing && stage == Stage::kTokenizing) ||
                      (trigger.kind == CreateTrigger::kStoring && stage == Stage::kStoring) ||
                      (trigger.kind == CreateTrigger::kEncodingFraction &&
                       stage == Stage::kEncoding && p.groups_total() > 0 &&
                       static_cast<double>(p.groups_encoded()) >=
                           trigger.fraction * static_cast<double>(p.groups_total()));
    if (fire) kill(stage);
  }
  result.status = stream->Finish();
  result.latency = std::chrono::steady_clock::now() - start;
  Settle(got_result, killer, id, state, stage, result);
  return result;
}

MutationResult RunDelete(v1::ManyShot::Stub& stub, const std::string& id, const Killer* killer,
                         ExpectedState& state, std::atomic<Stage>& stage) {
  MutationResult result;
  stage = Stage::kSending;
  state.Begin(id, std::nullopt);
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::DeleteTaskRequest request;
  request.set_task_id(id);
  v1::DeleteTaskResponse response;
  const auto start = std::chrono::steady_clock::now();
  result.status = stub.DeleteTask(&context, request, &response);
  result.latency = std::chrono::steady_clock::now() - start;
  Settle(result.status.ok(), killer, id, state, stage, result);
  return result;
}

}  // namespace manyshot::campaign
