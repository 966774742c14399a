#include "testing/harness/prometheus_text.h"

#include <cmath>
#include <cstdlib>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace manyshot::testing {
namespace {

bool IsNameStart(char c) {
  return std::isalpha(static_cast<unsigned char>(c)) || c == '_' || c == ':';
}
bool IsNameChar(char c) { return IsNameStart(c) || std::isdigit(static_cast<unsigned char>(c)); }

bool ParseValue(const std::string& s, double* out) {
  if (s == "NaN" || s == "Nan") {  // prometheus-cpp writes "Nan"; Prometheus accepts any case
    *out = std::nan("");
    return true;
  }
  if (s == "+Inf") {
    *out = INFINITY;
    return true;
  }
  if (s == "-Inf") {
    *out = -INFINITY;
    return true;
  }
  char* end = nullptr;
  *out = std::strtod(s.c_str(), &end);
  return !s.empty() && end == s.c_str() + s.size();
}

}  // namespace

const PrometheusSample* PrometheusScrape::Find(
    const std::string& name, const std::map<std::string, std::string>& labels) const {
  for (const auto& sample : samples) {
    if (sample.name != name) continue;
    bool match = true;
    for (const auto& [k, v] : labels) {
      auto it = sample.labels.find(k);
      if (it == sample.labels.end() || it->second != v) match = false;
    }
    if (match) return &sample;
  }
  return nullptr;
}

absl::StatusOr<PrometheusScrape> ParsePrometheusText(const std::string& text) {
  PrometheusScrape scrape;
  std::istringstream in(text);
  int line_no = 0;
  for (std::string line; std::getline(in, line);) {
    ++line_no;
    auto error = [&](const std::string& why) {
      return absl::InvalidArgumentError(absl::StrCat("line ", line_no, ": ", why, ": ", line));
    };
    if (line.empty()) continue;
    if (line[0] == '#') {
      std::istringstream comment(line.substr(1));
      std::string keyword, name;
      comment >> keyword >> name;
      if (keyword == "TYPE") {
        std::string type;
        comment >> type;
        static const char* kTypes[] = {"counter", "gauge", "histogram", "summary", "untyped"};
        bool known = false;
        for (const char* t : kTypes) known |= (type == t);
        if (!known) return error("unknown TYPE");
        if (scrape.types.count(name)) return error("duplicate TYPE");
        scrape.types[name] = type;
      } else if (keyword == "HELP") {
        scrape.help[name] = line;
      }
      continue;
    }
    PrometheusSample sample;
    size_t i = 0;
    if (!IsNameStart(line[0])) return error("bad metric name");
    while (i < line.size() && IsNameChar(line[i])) ++i;
    sample.name = line.substr(0, i);
    if (i < line.size() && line[i] == '{') {
      ++i;
      while (i < line.size() && line[i] != '}') {
        size_t start = i;
        while (i < line.size() && IsNameChar(line[i])) ++i;
        std::string label = line.substr(start, i - start);
        if (label.empty() || i + 1 >= line.size() || line[i] != '=' || line[i + 1] != '"') {
          return error("bad label");
        }
        i += 2;
        std::string value;
        while (i < line.size() && line[i] != '"') {
          if (line[i] == '\\' && i + 1 < line.size()) {
            char e = line[++i];
            value.push_back(e == 'n' ? '\n' : e);
          } else {
            value.push_back(line[i]);
          }
          ++i;
        }
        if (i >= line.size()) return error("unterminated label value");
        ++i;
        sample.labels[label] = value;
        if (i < line.size() && line[i] == ',') ++i;
      }
      if (i >= line.size()) return error("unterminated label set");
      ++i;
    }
    if (i >= line.size() || line[i] != ' ') return error("missing value");
    std::istringstream rest(line.substr(i + 1));
    std::string value_text, timestamp;
    rest >> value_text >> timestamp;
    if (!ParseValue(value_text, &sample.value)) return error("bad value");
    scrape.samples.push_back(std::move(sample));
  }
  if (scrape.samples.empty()) return absl::InvalidArgumentError("no samples");
  return scrape;
}

}  // namespace manyshot::testing
