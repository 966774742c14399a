#include "client/cli_context.h"

#include <chrono>
#include <cstdio>

#include "google/protobuf/util/json_util.h"

namespace manyshot::client {
namespace {

const char* CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK:
      return "OK";
    case grpc::StatusCode::CANCELLED:
      return "CANCELLED";
    case grpc::StatusCode::UNKNOWN:
      return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND:
      return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS:
      return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED:
      return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED:
      return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE:
      return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED:
      return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL:
      return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS:
      return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    default:
      return "UNKNOWN";
  }
}

// The one place every call's ClientContext is made: deadline, bearer token, task metadata.
std::unique_ptr<grpc::ClientContext> NewContext(const CliContext& cli, std::string_view task_id,
                                                bool with_deadline) {
  auto context = std::make_unique<grpc::ClientContext>();
  if (with_deadline) {
    context->set_deadline(std::chrono::system_clock::now() +
                          std::chrono::seconds(cli.timeout_seconds));
  }
  if (!cli.token.empty()) context->AddMetadata("authorization", "Bearer " + cli.token);
  // An id that cannot be metadata is left out rather than failing the call on the client side:
  // the server rejects such an id anyway, naming the allowed characters.
  if (IsValidMetadataValue(task_id)) context->AddMetadata(kTaskMetadataKey, std::string(task_id));
  return context;
}

}  // namespace

bool IsValidMetadataValue(std::string_view value) {
  if (value.empty() || value.front() == ' ' || value.back() == ' ') return false;
  for (char c : value) {
    if (c < 0x20 || c > 0x7e) return false;
  }
  return true;
}

std::unique_ptr<grpc::ClientContext> CliContext::NewCall(std::string_view task_id) const {
  return NewContext(*this, task_id, /*with_deadline=*/true);
}

std::unique_ptr<grpc::ClientContext> CliContext::NewStreamingCall(std::string_view task_id) const {
  return NewContext(*this, task_id, /*with_deadline=*/timeout_explicit);
}

const std::vector<std::string>& CliContext::Repeated(const std::string& name) const {
  static const std::vector<std::string> kNone;
  auto it = repeated.find(name);
  return it == repeated.end() ? kNone : it->second;
}

int ReportUsageError(const std::string& command, const std::string& message) {
  std::fprintf(stderr, "manyshot: %s: %s\n", command.c_str(), message.c_str());
  return 2;
}

std::string ToJson(const google::protobuf::Message& message) {
  std::string json;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  (void)google::protobuf::util::MessageToJsonString(message, &json, options);
  return json;
}

int ReportRpcError(const std::string& command, const grpc::Status& status) {
  std::fprintf(stderr, "manyshot: %s: %s: %s\n", command.c_str(), CodeName(status.error_code()),
               status.error_message().c_str());
  return 1;
}

}  // namespace manyshot::client
