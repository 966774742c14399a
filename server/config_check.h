// Every server setting checked before the server does any work: a bad flag value stops the start
// with a message naming the flag and what it accepts, before a data directory is made, a model is
// generated or a port is bound.
#pragma once

#include "absl/status/status.h"
#include "server/server_config.h"

namespace manyshot::server {

// OK, or INVALID_ARGUMENT "--<flag>=<value>: <what it must be>" for the first bad setting.
absl::Status ValidateServerConfig(const ServerConfig& config);

}  // namespace manyshot::server
