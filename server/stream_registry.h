// The long-lived calls (StreamClassify and CreateTask streams) that are open: at most
// --max_streams_per_tenant per tenant (a stream beyond is refused at once), and a watchdog that
// ends a stream which has done nothing for --stream_idle_timeout_seconds (no message read, nothing
// being answered), so a client that opened a stream and went quiet, or a peer that vanished
// without closing, does not hold a slot, a thread's worth of state or an upload forever.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "absl/status/status.h"

namespace manyshot::server {

// The status an idle stream ends with.
absl::Status StreamIdleError(std::chrono::seconds limit);

class StreamRegistry {
 public:
  // What a reactor exposes to the watchdog. Reactors are reference counted: the watchdog holds a
  // reference while it looks at one, so none is deleted under it.
  class Stream {
   public:
    virtual ~Stream() = default;
    // Takes a reference; false when the stream is already ending (the watchdog skips it).
    virtual bool TryRef() = 0;
    virtual void Unref() = 0;
    // When the stream did nothing since `since` (no message read, no answer written) and has no
    // work in flight, ends the call with UNAVAILABLE naming `limit`. The check and the decision
    // to end are one step under the stream's lock, and every path that reads on records its
    // activity first, so a stream never reads after it was ended.
    virtual void EndIfIdleSince(std::chrono::steady_clock::time_point since,
                                std::chrono::seconds limit) = 0;
  };

  StreamRegistry(uint32_t max_per_tenant, std::chrono::seconds idle_limit);
  ~StreamRegistry();
  StreamRegistry(const StreamRegistry&) = delete;
  StreamRegistry& operator=(const StreamRegistry&) = delete;

  // Registers `stream` for `tenant`; RESOURCE_EXHAUSTED (reason STREAMS_PER_TENANT_LIMIT) when
  // the tenant already has --max_streams_per_tenant open.
  absl::Status Admit(const std::string& tenant, Stream* stream);
  // Unregisters, giving the tenant's slot back. A reactor calls it when it ends its call (before
  // the client can see the end) and again before it is deleted; the second call does nothing.
  void Remove(const std::string& tenant, Stream* stream);
  size_t open() const;

 private:
  void Watch();

  const uint32_t max_per_tenant_;
  const std::chrono::seconds idle_limit_;
  mutable std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, std::set<Stream*>> open_;  // by tenant
  bool stop_ = false;
  std::thread watchdog_;
};

}  // namespace manyshot::server
