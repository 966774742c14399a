// Classify as a client of a proxied cluster makes it (the x-manyshot-task header names the task),
// on three fixed SST-2-style inputs, returning every score: shared by the cluster tests
// (tests/cluster) and the nginx affinity test (tests/deploy/proxy), which compare scores across
// replicas and proxies.
#pragma once

#include <string>
#include <vector>

#include "grpcpp/support/status.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::testing {

inline constexpr char kTaskHeader[] = "x-manyshot-task";

// The inputs every Classify below sends, in order.
const std::vector<std::string>& ClassifyInputs();

// Classify of ClassifyInputs() for `task`: every label's sum_logprob and probability, in order,
// into `scores` (when given and the call succeeded).
grpc::Status Classify(v1::ManyShot::Stub& stub, const std::string& task,
                      std::vector<double>* scores, int deadline_seconds = 30);

}  // namespace manyshot::testing
