// Test helpers that speak manyshot.v1 to a real server.
#pragma once

#include <string>
#include <vector>

#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::testing {

struct CreateOutcome {
  grpc::Status status;
  v1::CreateTaskResult result;
  int progress_events = 0;
};

// Streams a CreateTask: the spec in the first message, demonstrations in chunks of `chunk`.
CreateOutcome CreateTask(v1::ManyShot::Stub& stub, const std::string& task_id,
                         const v1::TaskSpec& spec,
                         const std::vector<v1::Demonstration>& demonstrations, bool replace = false,
                         size_t chunk = 4);

// A small SST-2-style task: template "Sentence: {text}\nLabel:", labels negative/positive.
v1::TaskSpec Sst2Spec(uint32_t group_length = 64);
std::vector<v1::Demonstration> Sst2Demonstrations(size_t n = 12);

v1::ClassifyRequest ClassifyRequestFor(const std::string& task_id,
                                       const std::vector<std::string>& texts);

}  // namespace manyshot::testing
