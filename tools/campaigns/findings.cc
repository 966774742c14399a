#include "tools/campaigns/findings.h"

#include <cstdio>

namespace manyshot::campaign {

void Findings::Add(const std::string& kind, const std::string& message) {
  std::lock_guard<std::mutex> lock(mutex_);
  ++counts_[kind];
  // Printed as found (the first few of each kind), so a long campaign shows them early.
  if (counts_[kind] <= kPrintedPerKind) {
    std::fprintf(stderr, "kill-campaign: %s: %s\n", kind.c_str(), message.c_str());
  }
  if (messages_.size() < kKeptMessages) messages_.push_back(kind + ": " + message);
}

std::map<std::string, int> Findings::Counts() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return counts_;
}

std::vector<std::string> Findings::Messages() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return messages_;
}

int Findings::Total() const {
  std::lock_guard<std::mutex> lock(mutex_);
  int total = 0;
  for (const auto& [kind, n] : counts_) total += n;
  return total;
}

}  // namespace manyshot::campaign
