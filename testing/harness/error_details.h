// The machine-readable details of a service error (google.rpc.Status in the
// grpc-status-details-bin trailer, or in-band in ClassifyResponse.error), decoded for assertions.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "google/rpc/status.pb.h"
#include "grpcpp/support/status.h"

namespace manyshot::testing {

struct ErrorDetails {
  bool present = false;  // a google.rpc.Status was attached
  int code = 0;
  std::string reason;  // ErrorInfo
  std::string domain;
  std::vector<std::string> fields;      // BadRequest field violations
  std::optional<double> retry_seconds;  // RetryInfo
};

ErrorDetails DetailsOf(const google::rpc::Status& status);
ErrorDetails DetailsOf(const grpc::Status& status);

// ErrorInfo's reason rule: UPPER_SNAKE_CASE, 1-63 characters.
bool IsUpperSnake(const std::string& reason);

}  // namespace manyshot::testing
