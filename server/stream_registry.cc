#include "server/stream_registry.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "server/grpc_status.h"

namespace manyshot::server {

absl::Status StreamIdleError(std::chrono::seconds limit) {
  return WithReason(absl::UnavailableError(absl::StrCat(
                        "this stream did nothing for ", limit.count(),
                        " s (--stream_idle_timeout_seconds) and was closed; open a new one when "
                        "there is more to send")),
                    reason::kStreamIdle);
}

StreamRegistry::StreamRegistry(uint32_t max_per_tenant, std::chrono::seconds idle_limit)
    : max_per_tenant_(max_per_tenant), idle_limit_(idle_limit) {
  watchdog_ = std::thread([this] { Watch(); });
}

StreamRegistry::~StreamRegistry() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  watchdog_.join();
}

absl::Status StreamRegistry::Admit(const std::string& tenant, Stream* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& streams = open_[tenant];
  if (streams.size() >= max_per_tenant_) {
    return WithReason(absl::ResourceExhaustedError(absl::StrCat(
                          "this tenant already has ", streams.size(),
                          " streams open (--max_streams_per_tenant ", max_per_tenant_,
                          "); close a StreamClassify or CreateTask stream, or send more "
                          "requests on one")),
                      reason::kStreamsPerTenantLimit);
  }
  streams.insert(stream);
  return absl::OkStatus();
}

void StreamRegistry::Remove(const std::string& tenant, Stream* stream) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = open_.find(tenant);
  if (it == open_.end()) return;
  it->second.erase(stream);
  if (it->second.empty()) open_.erase(it);
}

size_t StreamRegistry::open() const {
  std::lock_guard<std::mutex> lock(mutex_);
  size_t n = 0;
  for (const auto& [tenant, streams] : open_) n += streams.size();
  return n;
}

void StreamRegistry::Watch() {
  // Checked a few times per limit, at most once a second: an idle stream ends within about a
  // quarter of the limit after it.
  const auto tick = std::clamp<std::chrono::milliseconds>(
      std::chrono::duration_cast<std::chrono::milliseconds>(idle_limit_) / 4,
      std::chrono::milliseconds(50), std::chrono::milliseconds(1000));
  std::unique_lock<std::mutex> lock(mutex_);
  while (!wake_.wait_for(lock, tick, [&] { return stop_; })) {
    std::vector<Stream*> held;
    for (const auto& [tenant, streams] : open_) {
      for (Stream* s : streams) {
        if (s->TryRef()) held.push_back(s);
      }
    }
    lock.unlock();  // a stream's last Unref removes it from the registry
    const auto since = std::chrono::steady_clock::now() - idle_limit_;
    for (Stream* s : held) {
      s->EndIfIdleSince(since, idle_limit_);
      s->Unref();
    }
    lock.lock();
  }
}

}  // namespace manyshot::server
