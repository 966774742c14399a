// The order in which keyed queues are served so that no tenant and no task starves another:
// tenants take turns, and within a tenant its keys (tasks) take turns. A tenant with ten busy
// tasks gets the same share as a tenant with one; each of its tasks gets a tenth of that share.
// Used by the preparation pool and the engine queue; not thread-safe (callers hold their lock).
#pragma once

#include <deque>
#include <map>
#include <optional>
#include <string>

namespace manyshot::server {

class FairOrder {
 public:
  // `key` (of `tenant`) has work waiting. A key must not be added again before Next() returns it.
  void Add(const std::string& tenant, const std::string& key);
  // The key whose turn it is, removed from the order: Add it again if it still has work.
  std::optional<std::string> Next();
  bool empty() const { return tenants_.empty(); }

 private:
  std::deque<std::string> tenants_;                      // tenants with work, in turn order
  std::map<std::string, std::deque<std::string>> keys_;  // each such tenant's keys, in turn order
};

}  // namespace manyshot::server
