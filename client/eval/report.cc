#include "client/eval/report.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "client/request_builder.h"

namespace manyshot::client {
namespace {

double MeanUsed(const EvalCell& cell) {
  double total = 0;
  for (int64_t u : cell.used) total += static_cast<double>(u);
  return cell.used.empty() ? 0 : total / static_cast<double>(cell.used.size());
}

}  // namespace

std::string FormatEvalTable(const EvalReport& report) {
  std::string out;
  absl::StrAppend(&out, "model    ", report.model,
                  report.random_weights ? " (random weights: answers are meaningless)" : "",
                  ", context ", report.context_length, " tokens, group length ",
                  report.group_length, "\n");
  absl::StrAppend(&out, "dataset  ", report.dataset, ": ", report.train_examples,
                  " training examples, ", report.test_examples, " of ", report.test_available,
                  " test inputs\n");
  absl::StrAppend(&out, "template ", OneLine(report.input_template), "\n");
  absl::StrAppend(&out,
                  report.generation
                      ? "metric   exact match (Generate, greedy)\n"
                      : absl::StrFormat("labels   %s (majority class: %.4f of the inputs)\n",
                                        absl::StrJoin(report.labels, " / "), report.majority_rate));
  absl::StrAppend(&out, "samples  ", report.seeds.size(), " (seeds ",
                  absl::StrJoin(report.seeds, ","), ")\n\n");
  absl::StrAppend(&out,
                  absl::StrFormat("%-13s %6s %7s %9s %7s  %s\n", "mode", "shots", "used",
                                  report.generation ? "exact" : "accuracy", "std", "per sample"));
  for (const EvalCell& cell : report.cells) {
    std::vector<std::string> each;
    for (double a : cell.accuracy) each.push_back(absl::StrFormat("%.4f", a));
    absl::StrAppend(
        &out, absl::StrFormat("%-13s %6d %7.1f %9.4f %7.4f  %s\n", ModeName(cell.mode), cell.shots,
                              MeanUsed(cell), cell.mean, cell.std, absl::StrJoin(each, " ")));
  }
  return out;
}

nlohmann::json EvalReportJson(const EvalReport& report) {
  nlohmann::json json;
  json["model"] = {{"name", report.model},
                   {"random_weights", report.random_weights},
                   {"context_length", report.context_length}};
  json["dataset"] = {{"name", report.dataset},
                     {"template", report.input_template},
                     {"labels", report.labels},
                     {"metric", report.generation ? "exact_match" : "accuracy"},
                     {"train_examples", report.train_examples},
                     {"test_examples", report.test_examples},
                     {"test_available", report.test_available},
                     {"majority_rate", report.majority_rate}};
  json["seeds"] = report.seeds;
  json["shots"] = report.shots;
  json["group_length"] = report.group_length;
  nlohmann::json modes = nlohmann::json::array();
  for (v1::Mode mode : report.modes) modes.push_back(ModeName(mode));
  json["modes"] = modes;
  nlohmann::json results = nlohmann::json::array();
  for (const EvalCell& cell : report.cells) {
    results.push_back({{"mode", ModeName(cell.mode)},
                       {"shots", cell.shots},
                       {"demonstrations_used", cell.used},
                       {"accuracy", cell.accuracy},
                       {"mean", cell.mean},
                       {"std", cell.std}});
  }
  json["results"] = results;
  return json;
}

}  // namespace manyshot::client
