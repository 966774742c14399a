// The mutations the kill campaign interrupts (CreateTask new or with replace, DeleteTask) and the
// one SIGKILL per cycle. A mutation reports where it stands (`Stage`) as the client sees it, so
// the kill can be aimed at a stage (the upload, tokenizing, a fraction of the encode, storing) and
// the report can say where each kill landed.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <string>

#include "manyshot/v1/manyshot.grpc.pb.h"
#include "tools/campaigns/expected_state.h"
#include "tools/campaigns/variants.h"

namespace manyshot::campaign {

// Sends SIGKILL to the server once; the first caller's label says where it landed.
class Killer {
 public:
  explicit Killer(pid_t pid) : pid_(pid) {}
  void Kill(const std::string& label);
  bool killed() const { return killed_.load(); }
  const std::atomic<bool>& flag() const { return killed_; }
  std::string label() const;

 private:
  pid_t pid_;
  std::atomic<bool> killed_{false};
  mutable std::mutex mutex_;
  std::string label_;
};

enum class Stage { kSending, kReceiving, kTokenizing, kEncoding, kStoring, kAcked, kRejected };
const char* StageName(Stage stage);

// Where a create/replace kills the server from its own progress (kNone: it does not; a timer or
// the end of the mutation does).
struct CreateTrigger {
  enum Kind { kNone, kUpload, kTokenizing, kEncodingFraction, kStoring } kind = kNone;
  int upload_messages = 1;  // kUpload: kill after this many request messages
  double fraction = 0;      // kEncodingFraction: kill once this fraction of groups is encoded
};

struct MutationResult {
  bool acked = false;     // the server acknowledged it (OK and, for CreateTask, a result)
  bool rejected = false;  // the server answered with an error before any kill
  grpc::Status status;
  std::chrono::steady_clock::duration latency{};
};

// CreateTask of `variant` under `id` (with `replace`), recording Begin/Ack/Abort in `state` and
// publishing its stage in `stage`.
MutationResult RunCreate(v1::ManyShot::Stub& stub, const std::string& id, const Variant& variant,
                         int variant_index, bool replace, const CreateTrigger& trigger,
                         Killer* killer, ExpectedState& state, std::atomic<Stage>& stage);

// DeleteTask of `id`; its stage is kSending while the call is in flight.
MutationResult RunDelete(v1::ManyShot::Stub& stub, const std::string& id, const Killer* killer,
                         ExpectedState& state, std::atomic<Stage>& stage);

}  // namespace manyshot::campaign
