// `manyshot create --dry_run`: the prompt the server will build from a task file, printed
// without connecting, so a template can be checked before demonstrations are encoded.
#pragma once

#include <cstdio>
#include <vector>

#include "absl/status/status.h"
#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::client {

// How many demonstrations a dry run shows.
inline constexpr size_t kDryRunDemonstrations = 3;

// Writes the first demonstrations as the server renders them (input template, answer template,
// separator) and then a query (the first demonstration's input through the input template) to
// `out`. A template that cannot be filled is INVALID_ARGUMENT naming the demonstration.
absl::Status PrintDryRun(const v1::TaskSpec& spec,
                         const std::vector<v1::Demonstration>& demonstrations, std::FILE* out);

}  // namespace manyshot::client
