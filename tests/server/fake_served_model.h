// A ServedModel with no weights, for unit tests of the server's wiring (task registry, scheduler):
// its tasks answer from their inputs' lengths, count the engine calls they get, and keep what the
// test asks for between queries (a small cached context, bytes held in memory, context tokens
// recomputed per input).
#pragma once

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "cache/context_cache.h"
#include "engine/core/backend.h"
#include "engine/serving/served_model.h"
#include "server/model_loader.h"

namespace manyshot::testing {

// What the fake model's tasks do; shared by every task it prepares.
struct FakeBehaviour {
  bool cached_context = true;     // a one-layer context in the KV cache
  size_t held_bytes = 0;          // kept in memory between queries
  int64_t recomputed_tokens = 0;  // ServedTask::RecomputedContextTokens
  std::atomic<int> prepared{0};   // PrepareTask calls
  std::atomic<int> encoded{0};    // contexts encoded
  std::mutex mutex;
  std::vector<size_t> classify_batches;  // items per ClassifyPrepared call, in call order
};

// STRUCTURED, PARALLEL and CONVENTIONAL, like a decoder-only model; anything else is
// FAILED_PRECONDITION naming the mode and "fake".
std::unique_ptr<ServedModel> MakeFakeServedModel(Backend& backend,
                                                 std::shared_ptr<FakeBehaviour> behaviour);

// A LoadedModel on a CPU backend around the fake model.
server::LoadedModel FakeLoadedModel(std::shared_ptr<FakeBehaviour> behaviour);

}  // namespace manyshot::testing
