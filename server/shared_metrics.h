// The shared tier's per-replica metrics (manyshot_shared_*). Registered on every server, so that
// dashboards and rules see zeros on a replica without --shared_dir rather than no series.
#pragma once

#include "prometheus/counter.h"
#include "prometheus/registry.h"

namespace manyshot::server {

struct SharedMetrics {
  explicit SharedMetrics(prometheus::Registry& registry);

  prometheus::Counter& restores;           // contexts restored instead of encoded
  prometheus::Counter& mapped_restores;    // of which served from the KV file's mapped pages
  prometheus::Counter& detach_failures;    // mapped contexts that could not be detached
  prometheus::Counter& read_bytes;         // KV payload bytes read and verified
  prometheus::Counter& revalidations;      // "is this version still the newest?" lookups
  prometheus::Counter& version_switches;   // versions taken from the shared catalog
  prometheus::Counter& corrupt_reencodes;  // damaged KV files re-encoded and replaced
};

}  // namespace manyshot::server
