#include "server/grpc_status.h"

#include <cctype>
#include <set>

#include "absl/strings/cord.h"
#include "google/rpc/error_details.pb.h"
#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::server {
namespace {

constexpr char kFieldPayload[] = "type.manyshot.v1/field";
constexpr char kReasonPayload[] = "type.manyshot.v1/reason";

// Clients should back off at least this long: a queue or in-flight bound frees up within a batch
// or two; a draining server is gone for good, so the client should go to another replica.
constexpr int64_t kRetryDelayResourceMs = 100;
constexpr int64_t kRetryDelayUnavailableMs = 1000;

// Every field name of every message in manyshot.v1 (the first component of a field path).
const std::set<std::string, std::less<>>& FieldNames() {
  static const auto* names = [] {
    auto* set = new std::set<std::string, std::less<>>();
    const auto* file = v1::ClassifyRequest::descriptor()->file();
    std::vector<const google::protobuf::Descriptor*> todo;
    for (int i = 0; i < file->message_type_count(); ++i) todo.push_back(file->message_type(i));
    while (!todo.empty()) {
      const auto* d = todo.back();
      todo.pop_back();
      for (int i = 0; i < d->field_count(); ++i) set->insert(d->field(i)->name());
      for (int i = 0; i < d->nested_type_count(); ++i) todo.push_back(d->nested_type(i));
    }
    return set;
  }();
  return *names;
}

// The leading `name([...])?(.name([...])?)*` of `message` when it is followed by a space or the end
// and its first name is an API field name; else "".
std::string LeadingFieldPath(absl::string_view message) {
  size_t i = 0;
  size_t first_end = absl::string_view::npos;
  while (i < message.size()) {
    const size_t start = i;
    while (i < message.size() &&
           (std::islower(static_cast<unsigned char>(message[i])) ||
            std::isdigit(static_cast<unsigned char>(message[i])) || message[i] == '_')) {
      ++i;
    }
    if (i == start) return "";
    if (first_end == absl::string_view::npos) first_end = i;
    if (i < message.size() && message[i] == '[') {
      const size_t close = message.find(']', i);
      if (close == absl::string_view::npos) return "";
      i = close + 1;
    }
    if (i < message.size() && message[i] == '.') {
      ++i;
      continue;
    }
    break;
  }
  if (i < message.size() && message[i] != ' ') return "";
  if (!FieldNames().contains(std::string(message.substr(0, first_end)))) return "";
  return std::string(message.substr(0, i));
}

template <typename Detail>
void AddDetail(google::rpc::Status& status, const Detail& detail) {
  status.add_details()->PackFrom(detail);
}

}  // namespace

absl::Status WithField(absl::Status status, absl::string_view field) {
  status.SetPayload(kFieldPayload, absl::Cord(field));
  return status;
}

absl::Status WithReason(absl::Status status, absl::string_view reason) {
  status.SetPayload(kReasonPayload, absl::Cord(reason));
  return status;
}

absl::Status InvalidFieldError(absl::string_view field, absl::string_view message) {
  return WithField(absl::InvalidArgumentError(message), field);
}

std::string FieldOf(const absl::Status& status) {
  if (auto field = status.GetPayload(kFieldPayload)) return std::string(*field);
  if (status.code() != absl::StatusCode::kInvalidArgument) return "";
  return LeadingFieldPath(status.message());
}

std::string ReasonOf(const absl::Status& status) {
  if (auto reason = status.GetPayload(kReasonPayload)) return std::string(*reason);
  return absl::StatusCodeToString(status.code());
}

google::rpc::Status ToRpcStatus(const absl::Status& status) {
  google::rpc::Status out;
  out.set_code(static_cast<int32_t>(status.code()));
  if (status.ok()) return out;
  out.set_message(std::string(status.message()));
  google::rpc::ErrorInfo info;
  info.set_reason(ReasonOf(status));
  info.set_domain(kErrorDomain);
  AddDetail(out, info);
  if (status.code() == absl::StatusCode::kInvalidArgument) {
    google::rpc::BadRequest bad;
    auto* violation = bad.add_field_violations();
    violation->set_field(FieldOf(status));
    violation->set_description(std::string(status.message()));
    AddDetail(out, bad);
  }
  if (status.code() == absl::StatusCode::kResourceExhausted ||
      status.code() == absl::StatusCode::kUnavailable) {
    const int64_t ms = status.code() == absl::StatusCode::kUnavailable ? kRetryDelayUnavailableMs
                                                                       : kRetryDelayResourceMs;
    google::rpc::RetryInfo retry;
    retry.mutable_retry_delay()->set_seconds(ms / 1000);
    retry.mutable_retry_delay()->set_nanos(static_cast<int32_t>((ms % 1000) * 1000000));
    AddDetail(out, retry);
  }
  return out;
}

grpc::Status ToGrpc(const absl::Status& status) {
  if (status.ok()) return grpc::Status::OK;
  // absl and gRPC share the canonical code numbering.
  return grpc::Status(static_cast<grpc::StatusCode>(status.code()), std::string(status.message()),
                      ToRpcStatus(status).SerializeAsString());
}

grpc::Status GrpcError(grpc::StatusCode code, absl::string_view message) {
  return ToGrpc(absl::Status(static_cast<absl::StatusCode>(code), message));
}

std::string StatusCodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

}  // namespace manyshot::server
