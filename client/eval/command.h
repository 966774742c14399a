// `manyshot eval`: the paper's accuracy-vs-shots protocol (runner.h) against a running server.
#pragma once

#include "client/cli_context.h"

namespace manyshot::client {

// Exit 0 ok, 1 RPC error, 2 usage error, 130 when interrupted.
int RunEval(const CliContext& cli);

}  // namespace manyshot::client
