// spdlog setup: one process-wide logger writing text or JSON lines to stderr.
#pragma once

#include <string>

#include "absl/status/status.h"

namespace manyshot::server {

// level: trace, debug, info, warn, error, critical, off. format: text or json.
absl::Status ConfigureLogging(const std::string& level, const std::string& format);

}  // namespace manyshot::server
