// The check after every restart of the killed server: each task id shows an acceptable version
// (the acknowledged one, or the result of the mutation the kill interrupted), nothing is partial
// (READY only, never ENCODING, never `replacing`, never content the campaign did not send), every
// READY task classifies bit-identically to the never-killed reference, and the KV store holds
// exactly the entries of the tasks present (no orphans of an interrupted encode or delete).
#pragma once

#include <filesystem>

#include "manyshot/v1/manyshot.grpc.pb.h"
#include "tools/campaigns/expected_state.h"
#include "tools/campaigns/findings.h"
#include "tools/campaigns/reference_scores.h"

namespace manyshot::campaign {

struct CheckFigures {
  int tasks_checked = 0;   // task ids whose state was checked
  int tasks_present = 0;   // of them, READY after the restart
  int scores_checked = 0;  // inputs whose scores were compared with the reference
  // Mutations a kill left unacknowledged, by what the restart showed: the previous state, or the
  // mutation's result (it had committed before the kill).
  int interrupted_kept_previous = 0;
  int interrupted_took_effect = 0;
};

// Also resolves `state` to what was found, so the next cycle starts from it. `kv_files` is the
// directory of the server's KV payload files (DATA_DIR/cache/kv_files): after a restart it holds
// exactly one <key>.kv per KV entry (the campaign tenant's, which `stub` sees, plus
// `other_tenants_kv_entries`), and no temporary file of an interrupted write.
CheckFigures CheckAfterRestart(v1::ManyShot::Stub& stub, ExpectedState& state,
                               const ReferenceScores& reference, Findings& findings,
                               const std::filesystem::path& kv_files,
                               uint64_t other_tenants_kv_entries = 0);

}  // namespace manyshot::campaign
