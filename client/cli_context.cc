#include "client/cli_context.h"

#include <chrono>
#include <cstdio>
#include <iterator>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "google/protobuf/util/json_util.h"
#include "google/rpc/error_details.pb.h"

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

std::string HumanBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
  double value = static_cast<double>(bytes);
  size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(kUnits)) {
    value /= 1024;
    ++unit;
  }
  if (unit == 0) return absl::StrCat(bytes, " B");
  return absl::StrFormat(value >= 100  ? "%.0f %s"
                         : value >= 10 ? "%.1f %s"
                                       : "%.2f %s",
                         value, kUnits[unit]);
}

// A plaintext client talking to a TLS server sees only the connection closing during setup.
static void HintAtTls(const grpc::Status& status) {
  if (status.error_code() != grpc::StatusCode::UNAVAILABLE) return;
  const std::string& m = status.error_message();
  if (m.find("Socket closed") == std::string::npos &&
      m.find("Connection reset") == std::string::npos &&
      m.find("failed to connect to all addresses") == std::string::npos) {
    return;
  }
  std::fprintf(stderr,
               "manyshot: hint: is the server up at that address, and does it use TLS? With TLS "
               "pass --tls_ca_file=CA.pem (and --tls_cert_file/--tls_key_file for mutual TLS)\n");
}

int ReportRpcError(const std::string& command, const grpc::Status& status) {
  HintAtTls(status);
  google::rpc::Status details;
  if (!status.error_details().empty() && details.ParseFromString(status.error_details())) {
    details.set_code(static_cast<int32_t>(status.error_code()));
    details.set_message(status.error_message());
    return ReportErrorStatus(command, details);
  }
  std::fprintf(stderr, "manyshot: %s: %s: %s\n", command.c_str(), CodeName(status.error_code()),
               status.error_message().c_str());
  return 1;
}

int ReportErrorStatus(const std::string& command, const google::rpc::Status& status) {
  std::fprintf(stderr, "manyshot: %s: %s: %s\n", command.c_str(),
               CodeName(static_cast<grpc::StatusCode>(status.code())), status.message().c_str());
  // The machine-readable details, one line: what a script would branch on.
  std::string facts;
  auto add = [&facts](const std::string& fact) { facts += (facts.empty() ? "" : "; ") + fact; };
  for (const auto& any : status.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::BadRequest bad;
    google::rpc::RetryInfo retry;
    if (any.UnpackTo(&info)) {
      add("reason " + info.reason());
    } else if (any.UnpackTo(&bad)) {
      for (const auto& v : bad.field_violations()) {
        if (!v.field().empty()) add("field " + v.field());
      }
    } else if (any.UnpackTo(&retry)) {
      char delay[64];
      std::snprintf(
          delay, sizeof(delay), "retry after %.3g s",
          static_cast<double>(retry.retry_delay().seconds()) + retry.retry_delay().nanos() * 1e-9);
      add(delay);
    }
  }
  if (!facts.empty()) std::fprintf(stderr, "manyshot: %s: (%s)\n", command.c_str(), facts.c_str());
  return 1;
}

}  // namespace manyshot::client
