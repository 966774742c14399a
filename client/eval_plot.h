// The accuracy-vs-shots plot of an evaluation as a PNG, drawn with cairo: log-scaled shots on x,
// accuracy (or exact match) on y, one line per mode with ±1 standard deviation error bars, axis
// labels, a legend and a title naming dataset and model.
#pragma once

#include <string>

#include "absl/status/status.h"
#include "client/eval_runner.h"

namespace manyshot::client {

inline constexpr int kEvalPlotWidth = 900;
inline constexpr int kEvalPlotHeight = 560;

// Writes the plot to `path` (kEvalPlotWidth x kEvalPlotHeight pixels); an error names the path.
absl::Status WriteEvalPlot(const EvalReport& report, const std::string& path);

}  // namespace manyshot::client
