// Writing an evaluation's results: a text table for people, JSON for programs (deterministic:
// the same plan against the same server and model gives byte-identical JSON), and the
// accuracy-vs-shots plot (plot.h).
#pragma once

#include <string>

#include "client/eval/runner.h"
#include "nlohmann/json.hpp"

namespace manyshot::client {

// A header naming model, dataset and protocol, then one row per (mode, shots):
//   mode          shots   used  accuracy     std  per sample
// where `used` is the demonstrations the mode attended to (CONVENTIONAL: those that fit one
// window, mean over samples).
std::string FormatEvalTable(const EvalReport& report);

nlohmann::json EvalReportJson(const EvalReport& report);

}  // namespace manyshot::client
