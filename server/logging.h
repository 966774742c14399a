// spdlog setup: one process-wide logger writing text or JSON lines to stderr.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace manyshot::server {

// level: trace, debug, info, warn, error, critical, off. format: text or json. Also routes gRPC
// core's own log lines (gpr_log: "Handshake failed", ...) through the same logger, so a JSON log
// stays one JSON object per line.
absl::Status ConfigureLogging(const std::string& level, const std::string& format);

// One finished call (or StreamClassify request). Text logs show `key=value` pairs; JSON logs one
// object whose fields are these ("msg":"request", "request_id", "method", "tenant", "task",
// "code", "seconds", and "error" when not OK). Client text must already be bounded in length.
struct RequestLogLine {
  std::string request_id;
  std::string method;
  std::string tenant;
  std::string task;
  std::string code;  // "OK", "NOT_FOUND", ...
  double seconds = 0;
  std::string error;  // the status message when not OK
};
// At info for OK and for errors that are the request's own (INVALID_ARGUMENT, NOT_FOUND,
// ALREADY_EXISTS, FAILED_PRECONDITION, OUT_OF_RANGE, UNAUTHENTICATED, PERMISSION_DENIED,
// CANCELLED, ABORTED); at warn for the others, which say something about the server.
void LogRequest(const RequestLogLine& line);

}  // namespace manyshot::server
