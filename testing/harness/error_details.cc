#include "testing/harness/error_details.h"

#include "google/rpc/error_details.pb.h"

namespace manyshot::testing {

ErrorDetails DetailsOf(const google::rpc::Status& status) {
  ErrorDetails d;
  d.present = true;
  d.code = status.code();
  for (const auto& any : status.details()) {
    google::rpc::ErrorInfo info;
    google::rpc::BadRequest bad;
    google::rpc::RetryInfo retry;
    if (any.UnpackTo(&info)) {
      d.reason = info.reason();
      d.domain = info.domain();
    } else if (any.UnpackTo(&bad)) {
      for (const auto& v : bad.field_violations()) d.fields.push_back(v.field());
    } else if (any.UnpackTo(&retry)) {
      d.retry_seconds =
          static_cast<double>(retry.retry_delay().seconds()) + retry.retry_delay().nanos() * 1e-9;
    }
  }
  return d;
}

ErrorDetails DetailsOf(const grpc::Status& status) {
  google::rpc::Status parsed;
  if (status.error_details().empty() || !parsed.ParseFromString(status.error_details())) {
    return ErrorDetails{};
  }
  return DetailsOf(parsed);
}

bool IsUpperSnake(const std::string& reason) {
  if (reason.empty() || reason.size() > 63 || reason.front() == '_') return false;
  for (char c : reason) {
    if (!((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
  }
  return true;
}

}  // namespace manyshot::testing
