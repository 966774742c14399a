// Fuzzes every manyshot.v1 request message through the real service: once per process, the real
// server (ServerApp, as main.cc runs it) starts in-process on 127.0.0.1 with the generated tiny
// GPT-2 model and one ready task, "fuzz-task"; each input is then sent as raw request bytes over a
// real gRPC channel, so it meets gRPC's framing, the service's parser and validation, and, when
// valid, the scheduler, the forward pass and the KV cache.
//
// Input: byte 0 picks the method (modulo 9, in proto order); the rest is the request. For the
// client-streaming methods (CreateTask, StreamClassify) the rest is split into up to 16 messages
// at each "\xC0\xC1" (two bytes that never occur in UTF-8 text).
//
// Checked: every call ends within its deadline (a hang is a failure), never with INTERNAL,
// UNKNOWN, DATA_LOSS, UNIMPLEMENTED or UNAVAILABLE (bad input must get a client-error code), and an
// OK answer parses as the method's response type. After a call that can change tasks, the state is
// put back (fuzz-task re-created, other tasks deleted) so inputs stay independent of each other.
#include <chrono>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/support/byte_buffer.h"
#include "grpcpp/support/sync_stream.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "server/logging.h"
#include "server/server_app.h"
#include "tests/fuzz/fuzz_support.h"

namespace manyshot::fuzz {
namespace {

namespace v1 = ::manyshot::v1;
constexpr char kTask[] = "fuzz-task";

struct Method {
  const char* path;
  bool client_streaming;
  const google::protobuf::Message* response;  // the type an OK answer must parse as
};

const std::vector<Method>& Methods() {
  static const auto* methods = new std::vector<Method>{
      {"/manyshot.v1.ManyShot/CreateTask", true, &v1::CreateTaskResponse::default_instance()},
      {"/manyshot.v1.ManyShot/GetTask", false, &v1::Task::default_instance()},
      {"/manyshot.v1.ManyShot/ListTasks", false, &v1::ListTasksResponse::default_instance()},
      {"/manyshot.v1.ManyShot/DeleteTask", false, &v1::DeleteTaskResponse::default_instance()},
      {"/manyshot.v1.ManyShot/Classify", false, &v1::ClassifyResponse::default_instance()},
      {"/manyshot.v1.ManyShot/StreamClassify", true, &v1::ClassifyResponse::default_instance()},
      {"/manyshot.v1.ManyShot/Score", false, &v1::ScoreResponse::default_instance()},
      {"/manyshot.v1.ManyShot/Generate", false, &v1::GenerateResponse::default_instance()},
      {"/manyshot.v1.ManyShot/GetServerInfo", false, &v1::ServerInfo::default_instance()},
  };
  return *methods;
}

grpc::ByteBuffer ToBuffer(std::string_view bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  std::string out;
  if (!buffer.Dump(&slices).ok()) Fail("cannot read a response buffer");
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// The task every valid Classify/Score/Generate names: labels negative/positive, 8 demonstrations.
v1::CreateTaskRequest SeedTaskRequest() {
  v1::CreateTaskRequest request;
  request.set_task_id(kTask);
  request.set_replace(true);
  v1::TaskSpec& spec = *request.mutable_spec();
  spec.set_input_template("Sentence: {text}\nLabel:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_group_length(64);
  spec.set_max_query_tokens(48);
  spec.set_max_answer_tokens(8);
  static const char* kDemos[][2] = {
      {"a stirring , funny and transporting film", "positive"},
      {"apparently reassembled from the cutting-room floor", "negative"},
      {"the performances are an absolute joy", "positive"},
      {"one long string of cliches .", "negative"},
      {"a gorgeous , witty , seductive movie .", "positive"},
      {"a dull , dumb and derivative horror film", "negative"},
      {"warm , funny and touching", "positive"},
      {"the plot is nothing but boilerplate cliches", "negative"}};
  for (const auto& [text, label] : kDemos) {
    v1::Demonstration& d = *request.add_demonstrations();
    d.set_text(text);
    d.set_label(label);
  }
  return request;
}

// The server and a channel to it, for the life of the process.
class Harness {
 public:
  Harness() {
    if (!server::ConfigureLogging(std::getenv("MANYSHOT_FUZZ_LOG") ? "info" : "off", "text").ok()) {
      Fail("ConfigureLogging");
    }
    server::ServerConfig config;
    config.listen_address = "127.0.0.1:0";
    config.metrics_address = "";
    config.data_dir = (ScratchDir() / "data").string();
    config.threads = 1;
    config.backend = "cpu";
    config.shutdown_grace_seconds = 1;
    config.max_message_bytes = 1 << 20;
    // Small limits keep each input's work (and the process's memory) small; the checks are the
    // same code whatever the limit.
    config.memory_budget_bytes = 64ull << 20;
    config.batch_window_ms = 0;
    config.max_demonstrations = 32;
    config.max_input_bytes = 4096;
    config.max_batch_inputs = 8;
    config.max_candidates = 8;
    config.max_labels = 16;
    config.max_new_tokens = 4;
    config.max_beam_width = 2;
    config.max_tasks = 4;
    config.max_upload_bytes = 1 << 20;
    config.default_max_query_tokens = 48;
    config.default_max_answer_tokens = 8;
    auto app = server::ServerApp::Start(config);
    if (!app.ok()) Fail(absl::StrCat("the server did not start: ", app.status().ToString()));
    app_ = *std::move(app);
    grpc::ChannelArguments args;
    args.SetMaxReceiveMessageSize(16 << 20);
    args.SetMaxSendMessageSize(16 << 20);
    channel_ = grpc::CreateCustomChannel(absl::StrCat("127.0.0.1:", app_->grpc_port()),
                                         grpc::InsecureChannelCredentials(), args);
    stub_ = v1::ManyShot::NewStub(channel_);
    ResetTasks(/*force=*/true);
  }

  // Sends `messages` to method `m`; returns the status and the raw responses.
  grpc::Status Call(const Method& m, const std::vector<std::string_view>& messages,
                    std::vector<std::string>& responses) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
    grpc::internal::RpcMethod method(m.path, grpc::internal::RpcMethod::BIDI_STREAMING);
    std::unique_ptr<grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>> stream(
        grpc::internal::ClientReaderWriterFactory<grpc::ByteBuffer, grpc::ByteBuffer>::Create(
            channel_.get(), method, &context));
    for (std::string_view message : messages) {
      if (!stream->Write(ToBuffer(message))) break;  // the server has ended the call
    }
    stream->WritesDone();
    grpc::ByteBuffer response;
    while (stream->Read(&response)) responses.push_back(FromBuffer(response));
    return stream->Finish();
  }

  // Puts fuzz-task back as created (unless still there unchanged) and deletes every other task.
  void ResetTasks(bool force) {
    v1::ListTasksResponse list;
    {
      grpc::ClientContext context;
      if (!stub_->ListTasks(&context, v1::ListTasksRequest(), &list).ok()) Fail("ListTasks");
    }
    bool seed_present = false;
    for (const v1::Task& task : list.tasks()) {
      if (task.task_id() == kTask && !seed_hash_.empty() && task.content_hash() == seed_hash_ &&
          task.state() == v1::TASK_STATE_READY) {
        seed_present = true;
        continue;
      }
      grpc::ClientContext context;
      v1::DeleteTaskRequest request;
      request.set_task_id(task.task_id());
      v1::DeleteTaskResponse deleted;
      (void)stub_->DeleteTask(&context, request, &deleted);  // may race a finishing create
    }
    if (seed_present && !force) return;
    grpc::ClientContext context;
    auto stream = stub_->CreateTask(&context);
    if (!stream->Write(SeedTaskRequest())) Fail("cannot send the seed task");
    stream->WritesDone();
    v1::CreateTaskResponse response;
    while (stream->Read(&response)) {
      if (response.has_result()) seed_hash_ = response.result().task().content_hash();
    }
    grpc::Status status = stream->Finish();
    if (!status.ok()) Fail(absl::StrCat("the seed task was refused: ", status.error_message()));
  }

 private:
  std::unique_ptr<server::ServerApp> app_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::ManyShot::Stub> stub_;
  std::string seed_hash_;
};

Harness& TheHarness() {
  // Never destroyed: libFuzzer exits from inside its loop, and a server torn down by exit-time
  // destructors while its threads run would only add noise.
  static Harness* harness = new Harness();
  return *harness;
}

std::vector<std::string_view> SplitMessages(std::string_view payload) {
  std::vector<std::string_view> messages;
  while (messages.size() < 15) {
    size_t at = payload.find("\xC0\xC1");
    if (at == std::string_view::npos) break;
    messages.push_back(payload.substr(0, at));
    payload.remove_prefix(at + 2);
  }
  messages.push_back(payload);
  return messages;
}

bool AllowedCode(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INTERNAL:
    case grpc::StatusCode::UNKNOWN:
    case grpc::StatusCode::DATA_LOSS:
    case grpc::StatusCode::UNIMPLEMENTED:
    case grpc::StatusCode::UNAVAILABLE:
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return false;
    default:
      return true;
  }
}

}  // namespace
}  // namespace manyshot::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace manyshot::fuzz;
  Harness& harness = TheHarness();
  if (size == 0) return 0;
  const Method& method = Methods()[data[0] % Methods().size()];
  std::string_view payload(reinterpret_cast<const char*>(data + 1), size - 1);
  std::vector<std::string_view> messages;
  if (method.client_streaming) {
    messages = SplitMessages(payload);
  } else {
    messages.push_back(payload);
  }
  std::vector<std::string> responses;
  grpc::Status status = harness.Call(method, messages, responses);
  if (!AllowedCode(status.error_code())) {
    Fail(absl::StrCat(method.path, " ended with code ", static_cast<int>(status.error_code()), ": ",
                      status.error_message()));
  }
  if (status.ok()) {
    for (const std::string& bytes : responses) {
      std::unique_ptr<google::protobuf::Message> parsed(method.response->New());
      if (!parsed->ParseFromString(bytes)) Fail(absl::StrCat(method.path, ": unparsable response"));
    }
    if (!method.client_streaming &&
        method.response != &manyshot::v1::GenerateResponse::default_instance() &&
        responses.size() != 1) {
      Fail(absl::StrCat(method.path, ": a unary call answered ", responses.size(), " messages"));
    }
  }
  const bool changes_tasks = data[0] % Methods().size() == 0 || data[0] % Methods().size() == 3;
  if (changes_tasks) harness.ResetTasks(/*force=*/false);
  return 0;
}
