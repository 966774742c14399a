#include "server/service_parts.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "server/grpc_status.h"
#include "server/logging.h"
#include "server/request_context.h"

namespace manyshot::server {
namespace {

// Client-supplied text in a log line: control characters escaped (a newline in a task id must not
// forge a second line in text logs) and the length bounded (ids are validated after logging).
std::string LogSafe(const std::string& text, size_t max_bytes) {
  std::string out;
  const size_t n = std::min(text.size(), max_bytes);
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    if (c < 0x20 || c == 0x7f) {
      absl::StrAppendFormat(&out, "\\x%02x", c);
    } else {
      out.push_back(static_cast<char>(c));
    }
  }
  if (text.size() > max_bytes) absl::StrAppend(&out, "...(", text.size(), " bytes)");
  return out;
}

}  // namespace

grpc::Status ServiceParts::Record(const char* method, const grpc::ServerContextBase* context,
                                  std::chrono::steady_clock::time_point start,
                                  const std::string& task_id, grpc::Status status) {
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const std::string code = StatusCodeName(status.error_code());
  metrics.Request(method, code, seconds);
  RequestLogLine line;
  line.request_id = LogSafe(RequestId(context), 128);
  line.method = method;
  line.tenant = LogSafe(TenantOf(tenants, context), 128);
  line.task = LogSafe(task_id, 128);
  line.code = code;
  line.seconds = seconds;
  if (!status.ok()) line.error = LogSafe(status.error_message(), 2048);
  LogRequest(line);
  return status;
}

void ServiceParts::Prepare(const std::string& tenant, std::shared_ptr<const TaskVersion> version,
                           size_t inputs, Scheduler::AbandonFlag abandoned,
                           std::function<void(absl::Status)> fail,
                           std::function<void(ServedTask&)> prepare) {
  const std::string task_id = version->task_id;
  auto work = [this, version = std::move(version), abandoned = std::move(abandoned), fail,
               prepare = std::move(prepare)] {
    if (abandoned != nullptr && abandoned->load()) {
      return fail(absl::CancelledError("cancelled while queued"));
    }
    auto task = registry.EngineTask(*version);
    if (!task.ok()) return fail(task.status());
    prepare(**task);
  };
  if (auto refused = preparation.Submit(tenant, task_id, inputs, std::move(work)); !refused.ok()) {
    fail(std::move(refused));
  }
}

}  // namespace manyshot::server
