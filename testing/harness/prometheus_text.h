// A strict parser of the Prometheus text exposition format (version 0.0.4), for tests that scrape
// /metrics: it rejects what Prometheus itself would reject.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot::testing {

struct PrometheusSample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

struct PrometheusScrape {
  std::map<std::string, std::string> types;  // family name -> counter/gauge/histogram/...
  std::map<std::string, std::string> help;
  std::vector<PrometheusSample> samples;

  // The first sample called `name` whose labels include `labels`, or nullptr.
  const PrometheusSample* Find(const std::string& name,
                               const std::map<std::string, std::string>& labels = {}) const;
};

absl::StatusOr<PrometheusScrape> ParsePrometheusText(const std::string& text);

}  // namespace manyshot::testing
