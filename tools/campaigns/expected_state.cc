#include "tools/campaigns/expected_state.h"

namespace manyshot::campaign {

ExpectedState::ExpectedState(std::vector<std::string> ids) : ids_(std::move(ids)) {
  for (const auto& id : ids_) entries_[id] = Entry{};
}

Version ExpectedState::Acked(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.at(id).acked;
}

void ExpectedState::Begin(const std::string& id, Version result) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.at(id).pending = result;
}

void ExpectedState::Ack(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entries_.at(id);
  if (e.pending) e.acked = *e.pending;
  e.pending.reset();
}

void ExpectedState::Abort(const std::string& id) {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.at(id).pending.reset();
}

std::set<Version> ExpectedState::Acceptable(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  const Entry& e = entries_.at(id);
  std::set<Version> out = {e.acked};
  if (e.pending) out.insert(*e.pending);
  return out;
}

bool ExpectedState::Pending(const std::string& id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return entries_.at(id).pending.has_value();
}

void ExpectedState::Resolve(const std::string& id, Version found) {
  std::lock_guard<std::mutex> lock(mutex_);
  Entry& e = entries_.at(id);
  e.acked = found;
  e.pending.reset();
}

std::vector<std::string> ExpectedState::PresentIds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& id : ids_) {
    if (entries_.at(id).acked) out.push_back(id);
  }
  return out;
}

std::vector<std::string> ExpectedState::AbsentIds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& id : ids_) {
    if (!entries_.at(id).acked) out.push_back(id);
  }
  return out;
}

}  // namespace manyshot::campaign
