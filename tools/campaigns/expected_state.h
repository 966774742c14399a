// What the kill campaign knows about each task id: the version the server acknowledged last and,
// while a mutation of that id is unacknowledged, the version the mutation would leave. A SIGKILL
// makes an unacknowledged mutation ambiguous (it may or may not have committed), so after a
// restart either outcome is correct, and nothing else is.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

namespace manyshot::campaign {

// A task's content: an index into the variant pool (campaign_variants.h), or nullopt = absent.
using Version = std::optional<int>;

class ExpectedState {
 public:
  explicit ExpectedState(std::vector<std::string> ids);

  const std::vector<std::string>& ids() const { return ids_; }

  // The version acknowledged last.
  Version Acked(const std::string& id) const;
  // A mutation that would leave `result` has been sent (create/replace: a variant; delete:
  // nullopt). Until Ack or Abort, both the acknowledged version and `result` are acceptable.
  void Begin(const std::string& id, Version result);
  // The server acknowledged the mutation begun last: its result is now the only correct state.
  void Ack(const std::string& id);
  // The server answered the mutation with an error: it changed nothing.
  void Abort(const std::string& id);
  // Every version the server may show for `id` now: the acknowledged one, and the pending one.
  std::set<Version> Acceptable(const std::string& id) const;
  bool Pending(const std::string& id) const;
  // After a restart: the version found (already checked to be acceptable) becomes the
  // acknowledged one, and nothing is pending any more.
  void Resolve(const std::string& id, Version found);

  std::vector<std::string> PresentIds() const;
  std::vector<std::string> AbsentIds() const;

 private:
  struct Entry {
    Version acked;
    std::optional<Version> pending;
  };
  std::vector<std::string> ids_;
  mutable std::mutex mutex_;
  std::map<std::string, Entry> entries_;
};

}  // namespace manyshot::campaign
