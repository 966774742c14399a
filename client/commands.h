// The `manyshot` subcommands. Each takes the shared context and returns an exit code:
// 0 ok, 1 RPC error, 2 usage error. `eval` is in client/eval/command.h.
#pragma once

#include "client/cli_context.h"

namespace manyshot::client {

int RunHealth(const CliContext& cli);  // exit 0 when SERVING
int RunInfo(const CliContext& cli);
int RunCreate(const CliContext& cli);
int RunGet(const CliContext& cli);
int RunList(const CliContext& cli);
int RunDelete(const CliContext& cli);
int RunClassify(const CliContext& cli);
int RunScore(const CliContext& cli);
int RunGenerate(const CliContext& cli);

}  // namespace manyshot::client
