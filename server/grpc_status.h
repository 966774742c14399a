// absl::Status (engine, cache, validation) to the API's errors: grpc::Status code for code, with
// the google.rpc details every error of the service carries (proto/manyshot/v1/manyshot.proto,
// "Conventions"): ErrorInfo {reason, domain "manyshot.v1"} always, BadRequest {field} for
// INVALID_ARGUMENT, RetryInfo for RESOURCE_EXHAUSTED and UNAVAILABLE.
#pragma once

#include <string>
#include <string_view>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "google/rpc/status.pb.h"
#include "grpcpp/support/status.h"

namespace manyshot::server {

inline constexpr char kErrorDomain[] = "manyshot.v1";

// Stable ErrorInfo reasons more specific than the status code's name (the default reason). Kept in
// one place so they stay stable; README "Errors" documents them.
namespace reason {
inline constexpr char kInvalidUtf8[] = "INVALID_UTF8";
inline constexpr char kMalformedMessage[] = "MALFORMED_MESSAGE";
inline constexpr char kQueueFull[] = "QUEUE_FULL";
inline constexpr char kStreamInflightLimit[] = "STREAM_INFLIGHT_LIMIT";
inline constexpr char kServerInflightLimit[] = "SERVER_INFLIGHT_LIMIT";
inline constexpr char kUploadTooLarge[] = "UPLOAD_TOO_LARGE";
inline constexpr char kUploadsInFlightLimit[] = "UPLOADS_IN_FLIGHT_LIMIT";
inline constexpr char kShuttingDown[] = "SHUTTING_DOWN";
inline constexpr char kStreamsPerTenantLimit[] = "STREAMS_PER_TENANT_LIMIT";
inline constexpr char kStreamIdle[] = "STREAM_IDLE";
}  // namespace reason

// The request field at fault and a specific reason travel as absl::Status payloads, so the code
// that finds them (validation, the scheduler) needs no gRPC. Both return `status` with the payload.
absl::Status WithField(absl::Status status, absl::string_view field);
absl::Status WithReason(absl::Status status, absl::string_view reason);
// INVALID_ARGUMENT about `field`.
absl::Status InvalidFieldError(absl::string_view field, absl::string_view message);

// The field a status is about: its payload, else the leading field path of an INVALID_ARGUMENT
// message ("inputs[0].text has 600 bytes" -> "inputs[0].text") when its first name is a field of a
// manyshot.v1 message; else "".
std::string FieldOf(const absl::Status& status);
// The ErrorInfo reason: the payload, else the code's name ("NOT_FOUND").
std::string ReasonOf(const absl::Status& status);

// The status with its details, as sent in-band (ClassifyResponse.error) and in the trailer.
google::rpc::Status ToRpcStatus(const absl::Status& status);
grpc::Status ToGrpc(const absl::Status& status);
// A grpc::Status built by the service itself (code + message), with details.
grpc::Status GrpcError(grpc::StatusCode code, absl::string_view message);

// "OK", "INVALID_ARGUMENT", ... (the metric label and log field).
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace manyshot::server
