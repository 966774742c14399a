#include "server/service_parts.h"

#include "server/grpc_status.h"
#include "server/request_context.h"
#include "spdlog/spdlog.h"

namespace manyshot::server {

grpc::Status ServiceParts::Record(const char* method, const grpc::ServerContextBase* context,
                                  std::chrono::steady_clock::time_point start,
                                  const std::string& task_id, grpc::Status status) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string code = StatusCodeName(status.error_code());
  metrics.Request(method, code, seconds);
  const std::string id = RequestId(context);
  if (status.ok()) {
    spdlog::info("request_id={} method={} task={} code=OK seconds={:.6f}", id, method, task_id,
                 seconds);
  } else {
    spdlog::warn("request_id={} method={} task={} code={} seconds={:.6f} error={}", id, method,
                 task_id, code, seconds, status.error_message());
  }
  return status;
}

}  // namespace manyshot::server
