// kill-campaign: SIGKILLs the real manyshot-server again and again while it creates, replaces and
// deletes tasks and serves Classify/StreamClassify, restarting it on the same data directory each
// time, and checks after every restart that no acknowledged task was lost, nothing is partial and
// every score is bit-identical to a server that was never killed.
//
//   kill-campaign --cycles=100 --seed=1 --json
//
// One cycle: start the server on the campaign's data directory; check it (restart_check.h); do a
// few acknowledged mutations; start serving clients (serving_load.h); start the cycle's target
// mutation (a create, a replace or a delete) or none (serving only) and SIGKILL the server at a
// random moment of it: at a stage the client sees (the upload, tokenizing, a random fraction of
// the encode, storing), after a random delay, or right after the acknowledgement. The reference
// server runs first on its own data directory with the same flags and answers every variant once.
// Two more kinds of cycle harden the rest: a full disk (the server starts with
// --min_free_disk_bytes just under the disk's free space, so creates run into it and must be
// refused with RESOURCE_EXHAUSTED and leave nothing behind) and a noisy tenant (requests of 128
// inputs back to back and a stream that never reads) as another tenant with its own task, beside
// the checked clients. Both servers run with bearer-token auth: the campaign's tenant and the
// noisy one.
// Exit status: 0 when nothing was found, 1 when something was, 2 when the campaign could not run.
#include <signal.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <fstream>
#include <map>
#include <optional>
#include <random>
#include <thread>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "nlohmann/json.hpp"
#include "testing/harness/auth_channel.h"
#include "testing/harness/server_under_test.h"
#include "tools/campaigns/expected_state.h"
#include "tools/campaigns/findings.h"
#include "tools/campaigns/mutation.h"
#include "tools/campaigns/reference_scores.h"
#include "tools/campaigns/restart_check.h"
#include "tools/campaigns/serving_load.h"
#include "tools/campaigns/variants.h"

ABSL_FLAG(int, cycles, 100, "kill/restart cycles");
ABSL_FLAG(uint64_t, seed, 1,
          "seed of every random choice (the kill moments also depend on timing)");
ABSL_FLAG(bool, json, false, "print the summary as one JSON object");
ABSL_FLAG(int, threads, 1, "the servers' --threads (the same for the reference: equal sums)");
ABSL_FLAG(int, clients, 2, "serving clients during each cycle");
ABSL_FLAG(int, task_ids, 5, "task ids the mutations pick from");
ABSL_FLAG(bool, inject_lost_task, false,
          "testing the campaign itself: in the first cycle, delete an acknowledged task behind "
          "its back; the next check must report it lost (and the serving clients an error)");
ABSL_FLAG(std::string, only, "",
          "comma-separated cycle kinds to draw from (create, replace, delete, serve, full_disk, "
          "noisy); empty: all, in the default proportions");
ABSL_FLAG(std::string, work_dir, "",
          "where the data directories go (kept); empty: a temporary directory, removed at exit");

namespace manyshot::campaign {
namespace {

using Clock = std::chrono::steady_clock;
using testing::ServerUnderTest;

enum class Target { kCreate, kReplace, kDelete, kServe, kFullDisk, kNoisy };

// Default proportions, in tenths: create 3, replace 2, delete 2, serving only 1, a full disk 1,
// a noisy tenant 1.
constexpr std::pair<Target, const char*> kTargetNames[] = {
    {Target::kCreate, "create"}, {Target::kReplace, "replace"},    {Target::kDelete, "delete"},
    {Target::kServe, "serve"},   {Target::kFullDisk, "full_disk"}, {Target::kNoisy, "noisy"}};
constexpr int kTargetWeights[] = {3, 2, 2, 1, 1, 1};
// What a full-disk cycle's server may still write: records and logs, not a variant's KV file.
constexpr uint64_t kFullDiskRoom = uint64_t{1} << 20;

// The kinds --only allows (all when empty); nullopt names an unknown one.
std::optional<std::vector<Target>> AllowedTargets(const std::string& only) {
  std::vector<Target> allowed;
  for (const auto& [target, name] : kTargetNames) {
    if (only.empty()) allowed.push_back(target);
  }
  if (only.empty()) return allowed;
  for (absl::string_view part : absl::StrSplit(only, ',')) {
    bool known = false;
    for (const auto& [target, name] : kTargetNames) {
      if (part == name) {
        allowed.push_back(target);
        known = true;
      }
    }
    if (!known) return std::nullopt;
  }
  return allowed;
}

struct Figures {
  int cycles = 0;
  int restarts = 0;
  std::map<std::string, int> kills;  // where each kill landed, e.g. "replace/encoding"
  int tasks_checked = 0;
  int tasks_present = 0;
  int scores_checked = 0;
  int served_answers_identical = 0;  // bit-identical to the reference
  int served_answers_close = 0;      // within ReferenceScores::Close (batched differently)
  int acked_mutations = 0;
  int ambiguous_mutations = 0;        // interrupted before an answer: either outcome was acceptable
  int interrupted_kept_previous = 0;  // of them, the restart showed the state before
  int interrupted_took_effect = 0;    // of them, the restart showed the mutation committed
  int full_disk_refusals = 0;         // creates refused with RESOURCE_EXHAUSTED on a full disk
  int noisy_requests = 0;             // the noisy tenant's requests
};

// Per variant (and for deletes, index -1): the latest latency of an acknowledged mutation, so
// delays can be drawn over the whole span of one.
class Latencies {
 public:
  void Record(int key, Clock::duration d) { latest_[key] = d; }
  Clock::duration Get(int key, Clock::duration fallback) const {
    auto it = latest_.find(key);
    return it == latest_.end() ? fallback : it->second;
  }

 private:
  std::map<int, Clock::duration> latest_;
};

class Campaign {
 public:
  Campaign(std::filesystem::path work, uint64_t seed)
      : work_(std::move(work)),
        rng_(seed),
        variants_(MakeVariants()),
        state_(MakeIds(absl::GetFlag(FLAGS_task_ids))) {}

  // 0: nothing found; 1: findings; 2: the campaign could not run.
  int Run(int cycles);
  void PrintSummary(bool json, double seconds, int exit_code) const;

 private:
  static std::vector<std::string> MakeIds(int n) {
    std::vector<std::string> ids;
    for (int i = 0; i < n; ++i) ids.push_back(absl::StrCat("task-", i));
    return ids;
  }
  std::vector<std::string> ServerFlags() const;
  bool ComputeReference();
  // `full_disk`: with a free-space reserve just under what the disk has free.
  std::unique_ptr<ServerUnderTest> StartVictim(bool full_disk);
  Target PickTarget(const std::vector<Target>& allowed);
  // The noisy tenant's KV entries (its task, once a noisy cycle created it).
  uint64_t NoisyKvEntries(const ServerUnderTest& server);
  void Mutate(v1::ManyShot::Stub& stub, Target target, bool heavy_allowed);
  void Prepare(v1::ManyShot::Stub& stub, Target target);
  int PickVariant(bool heavy, std::optional<int> other_than);
  void KillCycle(ServerUnderTest& server, Target target);
  void InjectLostTask(v1::ManyShot::Stub& stub);

  std::filesystem::path work_;
  std::mt19937_64 rng_;
  std::vector<Variant> variants_;
  ExpectedState state_;
  std::optional<ReferenceScores> reference_;
  std::filesystem::path model_dir_;
  std::string model_fingerprint_;
  Findings findings_;
  Figures figures_;
  Latencies latencies_;
  std::string last_kill_;
  std::string fatal_;
};

std::vector<std::string> Campaign::ServerFlags() const {
  return {absl::StrCat("--threads=", absl::GetFlag(FLAGS_threads)), "--log_level=warn",
          "--auth_tokens_file=" + (work_ / "tokens").string()};
}

// The campaign's own tenant, and the noisy one of the noisy cycles.
constexpr char kCampaignAuth[] = "Bearer campaign-token";
constexpr char kNoisyAuth[] = "Bearer noisy-token";

std::shared_ptr<grpc::Channel> CampaignChannel(const ServerUnderTest& server) {
  return testing::ChannelWithAuth(server.address(), kCampaignAuth);
}

void WriteTokens(const std::filesystem::path& path) {
  std::ofstream(path) << "campaign-token campaign\nnoisy-token noisy\n";
  std::filesystem::permissions(
      path, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

bool Campaign::ComputeReference() {
  ServerUnderTest ref(work_ / "reference" / "data", ServerFlags(), std::chrono::seconds(300));
  if (!ref.started()) {
    fatal_ = "the reference server did not start: " + ref.Stderr();
    return false;
  }
  auto stub = v1::ManyShot::NewStub(CampaignChannel(ref));
  auto computed = ReferenceScores::Compute(*stub, variants_);
  if (!computed.ok()) {
    fatal_ = computed.status().ToString();
    return false;
  }
  reference_ = *std::move(computed);
  grpc::ClientContext context;
  v1::ServerInfo info;
  if (!stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok()) {
    fatal_ = "GetServerInfo on the reference failed";
    return false;
  }
  model_fingerprint_ = info.model().fingerprint();
  // The killed server serves the very model files the reference generated.
  model_dir_ = work_ / "reference" / "data" / "models" / "default-gpt2-tiny";
  ref.process().Signal(SIGTERM);
  ref.process().Wait(std::chrono::seconds(60));
  return true;
}

uint64_t Campaign::NoisyKvEntries(const ServerUnderTest& server) {
  auto stub = v1::ManyShot::NewStub(testing::ChannelWithAuth(server.address(), kNoisyAuth));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::ServerInfo info;
  if (!stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok()) return 0;
  return info.cache().disk_entries();
}

Target Campaign::PickTarget(const std::vector<Target>& allowed) {
  int total = 0;
  for (Target t : allowed) total += kTargetWeights[static_cast<int>(t)];
  int pick = static_cast<int>(rng_() % static_cast<uint64_t>(total));
  for (Target t : allowed) {
    pick -= kTargetWeights[static_cast<int>(t)];
    if (pick < 0) return t;
  }
  return allowed.back();
}

std::unique_ptr<ServerUnderTest> Campaign::StartVictim(bool full_disk) {
  std::vector<std::string> flags = ServerFlags();
  flags.push_back("--model_dir=" + model_dir_.string());
  std::unique_ptr<ServerUnderTest> server;
  // Other processes on the disk move its free space: a start refused for the reserve (exit 1
  // naming it) is tried again with the reserve taken anew, and is no finding. Each retry leaves
  // twice the room (up to 64 MiB), so a neighbour that keeps writing (a build beside the tests)
  // cannot fill the room between the measurement and the server's own check every time.
  for (int attempt = 0; attempt < 10; ++attempt) {
    std::vector<std::string> these = flags;
    if (full_disk) {
      // Room for task records and RocksDB's log, not for a variant's KV file.
      std::filesystem::create_directories(work_ / "victim");
      const uint64_t free = std::filesystem::space(work_ / "victim").available;
      const uint64_t room = kFullDiskRoom << std::min(attempt, 6);
      these.push_back(
          absl::StrCat("--min_free_disk_bytes=", free - std::min<uint64_t>(free, room)));
    }
    server = std::make_unique<ServerUnderTest>(work_ / "victim" / "data", these,
                                               std::chrono::seconds(300));
    ++figures_.restarts;
    if (server->started() || !full_disk ||
        server->Stderr().find("less than --min_free_disk_bytes") == std::string::npos) {
      break;
    }
  }
  if (!server->started()) {
    findings_.Add("restart_failure",
                  "the server did not start on the killed data directory: " + server->Stderr());
    return nullptr;
  }
  if (model_fingerprint_.empty()) return server;
  auto stub = v1::ManyShot::NewStub(CampaignChannel(*server));
  grpc::ClientContext context;
  v1::ServerInfo info;
  stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
  if (info.model().fingerprint() != model_fingerprint_) {
    fatal_ = "the killed server serves another model than the reference";
    return nullptr;
  }
  return server;
}

int Campaign::PickVariant(bool heavy, std::optional<int> other_than) {
  std::vector<int> pool;
  for (size_t i = 0; i < variants_.size(); ++i) {
    const int v = static_cast<int>(i);
    if (variants_[i].heavy == heavy && v != other_than) pool.push_back(v);
  }
  return pool[rng_() % pool.size()];
}

// One acknowledged mutation of the kind `target` (light variants: quick), without a kill.
void Campaign::Mutate(v1::ManyShot::Stub& stub, Target target, bool heavy_allowed) {
  std::atomic<Stage> stage{Stage::kSending};
  const auto present = state_.PresentIds();
  const auto absent = state_.AbsentIds();
  if (target == Target::kDelete && !present.empty()) {
    const std::string& id = present[rng_() % present.size()];
    MutationResult r = RunDelete(stub, id, nullptr, state_, stage);
    if (r.acked) latencies_.Record(-1, r.latency);
  } else if ((target == Target::kCreate && !absent.empty()) ||
             (target == Target::kReplace && !present.empty())) {
    const bool replace = target == Target::kReplace;
    const std::string& id =
        replace ? present[rng_() % present.size()] : absent[rng_() % absent.size()];
    const int v = PickVariant(heavy_allowed && rng_() % 4 == 0, state_.Acked(id));
    MutationResult r = RunCreate(stub, id, variants_[static_cast<size_t>(v)], v, replace, {},
                                 nullptr, state_, stage);
    if (r.acked) latencies_.Record(v, r.latency);
  } else {
    return;
  }
  ++figures_.acked_mutations;
}

// Makes the target mutation possible (an absent id to create, a present one to replace or
// delete) and varies the state with up to two more acknowledged mutations.
void Campaign::Prepare(v1::ManyShot::Stub& stub, Target target) {
  const int extra = static_cast<int>(rng_() % 3);
  for (int i = 0; i < extra; ++i) {
    Mutate(stub, static_cast<Target>(rng_() % 3), /*heavy_allowed=*/false);
  }
  if (target == Target::kCreate && state_.AbsentIds().empty()) Mutate(stub, Target::kDelete, false);
  if ((target == Target::kReplace || target == Target::kDelete) && state_.PresentIds().empty()) {
    Mutate(stub, Target::kCreate, false);
  }
}

// Serving clients, the target mutation and one SIGKILL at a random moment of it.
void Campaign::KillCycle(ServerUnderTest& server, Target target) {
  auto stub = v1::ManyShot::NewStub(CampaignChannel(server));
  Killer killer(server.process().pid());
  ServingLoad load(CampaignChannel(server), state_, *reference_, findings_, killer.flag());
  load.Start(absl::GetFlag(FLAGS_clients), rng_());
  if (target == Target::kNoisy) {
    const int v = PickVariant(/*heavy=*/false, std::nullopt);
    load.StartNoisy(testing::ChannelWithAuth(server.address(), kNoisyAuth),
                    variants_[static_cast<size_t>(v)], v);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20 + rng_() % 130));

  std::atomic<Stage> stage{Stage::kSending};
  std::mutex done_mutex;
  std::condition_variable done_cv;
  bool done = false;
  std::string op;                        // "create", "replace", "delete" or "serve"
  std::optional<Clock::duration> delay;  // a timer kills after this long, when set
  std::optional<MutationResult> result;
  std::thread mutation;
  if (target == Target::kServe || target == Target::kNoisy) {
    op = target == Target::kServe ? "serve" : "noisy";
    delay = std::chrono::milliseconds(50 + rng_() % (target == Target::kServe ? 350 : 1500));
  } else if (target == Target::kFullDisk) {
    op = "full_disk";
    const auto absent = state_.AbsentIds();
    const std::string id = absent.empty() ? state_.PresentIds().front() : absent.front();
    const bool replace = absent.empty();
    const int v = PickVariant(rng_() % 2 == 0, state_.Acked(id));
    // Refused before anything is written, or acknowledged; killed right after the answer or at a
    // random moment of it.
    delay = std::chrono::milliseconds(rng_() % 400);
    mutation = std::thread([&, id, v, replace] {
      result = RunCreate(*stub, id, variants_[static_cast<size_t>(v)], v, replace, {}, &killer,
                         state_, stage);
      std::lock_guard<std::mutex> lock(done_mutex);
      done = true;
      done_cv.notify_all();
    });
  } else if (target == Target::kDelete) {
    op = "delete";
    const auto present = state_.PresentIds();
    const std::string id = present[rng_() % present.size()];
    // Over 1.5 times the last acknowledged delete: sometimes before it lands, sometimes after.
    const auto span = latencies_.Get(-1, std::chrono::milliseconds(5)) * 3 / 2;
    delay = Clock::duration(static_cast<Clock::rep>(rng_() % (span.count() + 1)));
    mutation = std::thread([&, id] {
      result = RunDelete(*stub, id, &killer, state_, stage);
      std::lock_guard<std::mutex> lock(done_mutex);
      done = true;
      done_cv.notify_all();
    });
  } else {
    const bool replace = target == Target::kReplace;
    op = replace ? "replace" : "create";
    const auto candidates = replace ? state_.PresentIds() : state_.AbsentIds();
    const std::string id = candidates[rng_() % candidates.size()];
    // Mostly heavy variants, whose encode is long enough to be hit in the middle.
    const int v = PickVariant(rng_() % 10 < 7, state_.Acked(id));
    const Variant& variant = variants_[static_cast<size_t>(v)];
    CreateTrigger trigger;
    // Where to kill, in eighths: the upload 1, tokenizing 1, a random point of the encode 3 (the
    // longest stage, where a replace used to lose the task), storing 1, a random delay 2.
    const uint64_t pick = rng_() % 8;
    if (pick == 0) {
      const int messages = static_cast<int>((variant.demos.size() + 99) / 100);
      trigger.kind = CreateTrigger::kUpload;
      trigger.upload_messages = 1 + static_cast<int>(rng_() % static_cast<uint64_t>(messages));
    } else if (pick == 1) {
      trigger.kind = CreateTrigger::kTokenizing;
    } else if (pick <= 4) {
      trigger.kind = CreateTrigger::kEncodingFraction;
      trigger.fraction = std::uniform_real_distribution<double>(0, 1)(rng_);
    } else if (pick == 5) {
      trigger.kind = CreateTrigger::kStoring;
    } else {
      // A random moment over 1.2 times the last acknowledged create of this variant.
      const auto span = latencies_.Get(v, std::chrono::seconds(1)) * 6 / 5;
      delay = Clock::duration(static_cast<Clock::rep>(rng_() % (span.count() + 1)));
    }
    mutation = std::thread([&, id, v, replace, trigger] {
      result = RunCreate(*stub, id, variants_[static_cast<size_t>(v)], v, replace, trigger, &killer,
                         state_, stage);
      if (result->acked) latencies_.Record(v, result->latency);
      std::lock_guard<std::mutex> lock(done_mutex);
      done = true;
      done_cv.notify_all();
    });
  }
  auto label = [&] {
    const Stage s = stage.load();
    if (op == "delete" && s == Stage::kSending) return op + "/in_flight";
    return op + "/" + StageName(s);
  };
  if (delay) {
    std::unique_lock<std::mutex> lock(done_mutex);
    if (!done_cv.wait_for(lock, *delay, [&] { return done; })) {
      lock.unlock();
      killer.Kill(target == Target::kServe || target == Target::kNoisy ? op : label());
    }
  }
  if (mutation.joinable()) mutation.join();
  // The mutation ended before any trigger fired: kill right after its answer.
  killer.Kill(label());
  if (!server.process().Wait(std::chrono::seconds(60))) {
    fatal_ = "the server did not die after SIGKILL";
  }
  load.Stop();
  figures_.noisy_requests += load.noisy_requests();
  if (target == Target::kFullDisk && result && result->rejected) {
    // A definitive refusal (seen before the kill): on a full disk it must be RESOURCE_EXHAUSTED,
    // never INTERNAL.
    if (result->status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) {
      ++figures_.full_disk_refusals;
    } else {
      findings_.Add("full_disk_error", absl::StrCat("a create on a full disk failed with code ",
                                                    result->status.error_code(), ": ",
                                                    result->status.error_message()));
    }
  }
  figures_.served_answers_identical += load.answers_identical();
  figures_.served_answers_close += load.answers_close();
  last_kill_ = killer.label();
  ++figures_.kills[last_kill_];
  if (result) {
    if (result->acked) ++figures_.acked_mutations;
    if (!result->acked && !result->rejected) ++figures_.ambiguous_mutations;
  }
}

// Deletes an acknowledged task without telling the expected state: a loss the checks must find.
void Campaign::InjectLostTask(v1::ManyShot::Stub& stub) {
  if (state_.PresentIds().empty()) Mutate(stub, Target::kCreate, false);
  const std::string id = state_.PresentIds().front();
  grpc::ClientContext context;
  v1::DeleteTaskRequest request;
  request.set_task_id(id);
  v1::DeleteTaskResponse response;
  if (!stub.DeleteTask(&context, request, &response).ok()) fatal_ = "--inject_lost_task failed";
}

int Campaign::Run(int cycles) {
  // Both servers start from empty data directories (a --work_dir may hold an earlier campaign's).
  std::filesystem::remove_all(work_ / "reference");
  std::filesystem::remove_all(work_ / "victim");
  const auto allowed = AllowedTargets(absl::GetFlag(FLAGS_only));
  if (!allowed || allowed->empty()) {
    fatal_ = "--only names an unknown kind of cycle: " + absl::GetFlag(FLAGS_only);
    return 2;
  }
  WriteTokens(work_ / "tokens");
  if (!ComputeReference()) return 2;
  Target target = PickTarget(*allowed);
  for (int cycle = 0; cycle <= cycles; ++cycle) {
    // The check at the start of a cycle runs on the server that will take its target mutation:
    // a full-disk cycle's server starts with the reserve (the check only reads).
    auto server = StartVictim(cycle < cycles && target == Target::kFullDisk);
    if (!server) return fatal_.empty() ? 1 : 2;
    auto stub = v1::ManyShot::NewStub(CampaignChannel(*server));
    const CheckFigures check = CheckAfterRestart(*stub, state_, *reference_, findings_,
                                                 work_ / "victim" / "data" / "cache" / "kv_files",
                                                 NoisyKvEntries(*server));
    figures_.tasks_checked += check.tasks_checked;
    figures_.tasks_present += check.tasks_present;
    figures_.scores_checked += check.scores_checked;
    figures_.interrupted_kept_previous += check.interrupted_kept_previous;
    figures_.interrupted_took_effect += check.interrupted_took_effect;
    if (cycle == cycles) break;  // the last start only checks the last kill
    Prepare(*stub, target);
    if (cycle == 0 && absl::GetFlag(FLAGS_inject_lost_task)) {
      InjectLostTask(*stub);
      target = Target::kServe;  // no mutation may touch the task behind the state's back
    }
    KillCycle(*server, target);
    if (!fatal_.empty()) return 2;
    ++figures_.cycles;
    target = PickTarget(*allowed);
    if (!absl::GetFlag(FLAGS_json)) {
      std::fprintf(stderr, "cycle %d/%d: kill at %s, %d findings so far\n", cycle + 1, cycles,
                   last_kill_.c_str(), findings_.Total());
    }
  }
  return findings_.Total() == 0 ? 0 : 1;
}

void Campaign::PrintSummary(bool json, double seconds, int exit_code) const {
  nlohmann::ordered_json j;
  j["cycles"] = figures_.cycles;
  j["restarts"] = figures_.restarts;
  j["seed"] = absl::GetFlag(FLAGS_seed);
  j["kills_by_phase"] = figures_.kills;
  j["tasks_checked"] = figures_.tasks_checked;
  j["tasks_present_checked"] = figures_.tasks_present;
  j["scores_checked"] = figures_.scores_checked;
  j["served_answers_identical"] = figures_.served_answers_identical;
  j["served_answers_within_tolerance"] = figures_.served_answers_close;
  j["acked_mutations"] = figures_.acked_mutations;
  j["ambiguous_mutations"] = figures_.ambiguous_mutations;
  j["interrupted_kept_previous"] = figures_.interrupted_kept_previous;
  j["interrupted_took_effect"] = figures_.interrupted_took_effect;
  j["full_disk_refusals"] = figures_.full_disk_refusals;
  j["noisy_requests"] = figures_.noisy_requests;
  j["findings_by_kind"] = findings_.Counts();
  j["mismatches"] = findings_.Total();
  j["findings"] = findings_.Messages();
  if (reference_) {
    nlohmann::ordered_json encode;
    for (size_t i = 0; i < variants_.size(); ++i) {
      encode[variants_[i].name] = reference_->EncodeSeconds()[i];
    }
    j["reference_encode_seconds"] = encode;
  }
  j["seconds"] = seconds;
  if (!fatal_.empty()) j["error"] = fatal_;
  j["ok"] = exit_code == 0;
  if (json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%s\n", j.dump(2).c_str());
  }
}

}  // namespace
}  // namespace manyshot::campaign

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  const auto start = std::chrono::steady_clock::now();
  std::optional<manyshot::testing::TempDir> temp;
  std::filesystem::path work = absl::GetFlag(FLAGS_work_dir);
  if (work.empty()) {
    temp.emplace();
    work = temp->path();
  }
  std::filesystem::create_directories(work);
  manyshot::campaign::Campaign campaign(work, absl::GetFlag(FLAGS_seed));
  const int code = campaign.Run(absl::GetFlag(FLAGS_cycles));
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  campaign.PrintSummary(absl::GetFlag(FLAGS_json), seconds, code);
  return code;
}
