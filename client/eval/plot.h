// The accuracy-vs-shots plot of an evaluation as a PNG, drawn with cairo: log-scaled shots on x,
// accuracy (or exact match) on y, one line per mode with ±1 standard deviation error bars, the
// majority-class rate as a dashed line, a mark where conventional prompting's window was full,
// axis labels, a legend and a title naming dataset and model.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "client/eval/runner.h"

namespace manyshot::client {

inline constexpr int kEvalPlotWidth = 900;
inline constexpr int kEvalPlotHeight = 560;

// What the plot marks besides the modes' lines.
struct EvalPlotMarks {
  // The majority-class rate (classification only): what always answering the most frequent
  // label scores.
  std::optional<double> majority;
  // The smallest shot count at which CONVENTIONAL attended to fewer demonstrations than it was
  // given in some sample: from there on its window was full.
  std::optional<int64_t> window_full_shots;
};
EvalPlotMarks PlotMarksOf(const EvalReport& report);

// Writes the plot to `path` (kEvalPlotWidth x kEvalPlotHeight pixels); an error names the path.
absl::Status WriteEvalPlot(const EvalReport& report, const std::string& path);

}  // namespace manyshot::client
