#include "server/fair_order.h"

namespace manyshot::server {

void FairOrder::Add(const std::string& tenant, const std::string& key) {
  auto& keys = keys_[tenant];
  if (keys.empty()) tenants_.push_back(tenant);
  keys.push_back(key);
}

std::optional<std::string> FairOrder::Next() {
  if (tenants_.empty()) return std::nullopt;
  std::string tenant = std::move(tenants_.front());
  tenants_.pop_front();
  auto it = keys_.find(tenant);
  std::string key = std::move(it->second.front());
  it->second.pop_front();
  if (it->second.empty()) {
    keys_.erase(it);
  } else {
    tenants_.push_back(std::move(tenant));  // its other tasks wait for its next turn
  }
  return key;
}

}  // namespace manyshot::server
