// `manyshot-server --gc`: one garbage collection of the shared tier (--shared_dir), then exit. A
// Kubernetes CronJob runs it next to the serving replicas, which it never stops: the collector's
// grace period (cache/shared/garbage_collector.h) keeps whatever a replica may still be reading.
#pragma once

#include <chrono>
#include <ostream>
#include <string>

namespace manyshot::server {

struct SharedGcOptions {
  std::string shared_dir;
  std::chrono::seconds grace{std::chrono::minutes(30)};
  bool dry_run = false;
};

// Runs the collection and writes its report as one JSON line on `out` (problems, if any, also
// as lines on `err`). Returns the process exit status: 0 done, 1 the directory could not be
// collected or some of it was skipped (the report says why), 2 bad options.
int RunSharedGc(const SharedGcOptions& options, std::ostream& out, std::ostream& err);

}  // namespace manyshot::server
