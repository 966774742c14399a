// One classification request from validation to response, shared by Classify and StreamClassify:
// validates it, has the preparation pool render and tokenize its inputs, hands them to the
// scheduler, and builds the response when the worker calls back. Nothing waits: the caller gets the
// outcome through `done`.
#pragma once

#include <functional>
#include <string>

#include "absl/status/statusor.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/scheduler.h"
#include "server/service_parts.h"

namespace manyshot::server {

// The longest request_id a ClassifyRequest may carry: an identifier (a UUID is 36 bytes) that the
// answer echoes, so a stream of pending requests cannot make the server hold megabytes of them.
inline constexpr size_t kMaxRequestIdBytes = 128;

// OK, or INVALID_ARGUMENT naming request_id when it is longer than kMaxRequestIdBytes.
absl::Status CheckRequestId(const std::string& request_id);

using ClassifyCallDone = std::function<void(absl::StatusOr<v1::ClassifyResponse>)>;

// Calls `done` exactly once: on this thread when the request is invalid or refused, on a
// preparation thread when rendering or tokenizing fails, else on the scheduler's worker.
// `abandoned` set while queued drops it (done gets CANCELLED).
void StartClassify(ServiceParts& parts, const std::string& tenant,
                   const v1::ClassifyRequest& request, Scheduler::AbandonFlag abandoned,
                   ClassifyCallDone done);

}  // namespace manyshot::server
