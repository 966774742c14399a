// absl::Status (engine, cache) to grpc::Status (the API), code for code.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "grpcpp/support/status.h"

namespace manyshot::server {

grpc::Status ToGrpc(const absl::Status& status);
// "OK", "INVALID_ARGUMENT", ... (the metric label and log field).
std::string StatusCodeName(grpc::StatusCode code);

}  // namespace manyshot::server
