// The `manyshot` subcommands. Each takes the shared context and returns an exit code.
#pragma once

#include "client/cli_context.h"

namespace manyshot::client {

int RunHealth(const CliContext& cli);  // exit 0 when SERVING
int RunInfo(const CliContext& cli);

}  // namespace manyshot::client
