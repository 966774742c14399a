// Violations the kill campaign found, counted by kind, with the first messages kept for the
// report. Thread-safe: the serving clients add to it while the main thread checks a restart.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

namespace manyshot::campaign {

class Findings {
 public:
  // kind: lost, resurrected, wrong_version, partial, failed_after_restart, unexpected_task,
  // score_mismatch, kv_accounting, restart_failure, serve_mismatch, serve_error.
  void Add(const std::string& kind, const std::string& message);
  std::map<std::string, int> Counts() const;
  std::vector<std::string> Messages() const;
  int Total() const;

 private:
  static constexpr size_t kKeptMessages = 50;
  static constexpr int kPrintedPerKind = 5;
  mutable std::mutex mutex_;
  std::map<std::string, int> counts_;
  std::vector<std::string> messages_;
};

}  // namespace manyshot::campaign
