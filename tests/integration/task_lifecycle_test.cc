// Task lifecycle against the real server binary: a replace killed with SIGKILL while
// it encodes keeps the acknowledged version (identical scores after restart, no orphan KV);
// Classify racing replaces that change the labels answers every request from one version; a task
// whose stored record has a flipped byte on disk is quarantined (FAILED, reason, log line, metric)
// while the others are served, and can be deleted or replaced; ENCODING and FAILED are reported.
// Nothing here waits on a timer for synchronization: each step polls a real state with a generous
// deadline, so a loaded machine only makes the tests slower.
#include <signal.h>

#include <atomic>
#include <fstream>
#include <iterator>
#include <map>
#include <thread>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"
#include "tests/cache/support/sst_damage.h"

namespace manyshot::testing {
namespace {

using Clock = std::chrono::steady_clock;

double Scrape(int port, const std::string& name,
              const std::map<std::string, std::string>& labels = {}) {
  auto scrape = ParsePrometheusText(HttpGet(port, "/metrics").body);
  if (!scrape.ok()) return -1;
  const PrometheusSample* s = scrape->Find(name, labels);
  return s ? s->value : -1;
}

grpc::Status GetTask(v1::ManyShot::Stub& stub, const std::string& id, v1::Task* task) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(60));
  v1::GetTaskRequest request;
  request.set_task_id(id);
  return stub.GetTask(&context, request, task);
}

grpc::Status Classify(v1::ManyShot::Stub& stub, const std::string& id,
                      const std::vector<std::string>& texts, v1::ClassifyResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return stub.Classify(&context, ClassifyRequestFor(id, texts), response);
}

grpc::Status DeleteTask(v1::ManyShot::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  v1::DeleteTaskRequest request;
  request.set_task_id(id);
  v1::DeleteTaskResponse response;
  return stub.DeleteTask(&context, request, &response);
}

v1::ServerInfo Info(v1::ManyShot::Stub& stub) {
  grpc::ClientContext context;
  v1::ServerInfo info;
  EXPECT_TRUE(stub.GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  return info;
}

// A task whose encode takes seconds on the tiny default model with one compute thread
// (kSlowServer): thousands of demonstrations in groups of 1000 tokens (attention cost grows with
// the group length, KV bytes do not).
const std::vector<std::string> kSlowServer = {"--threads=1"};
v1::TaskSpec LongSpec() {
  v1::TaskSpec spec = Sst2Spec(1000);
  spec.set_max_query_tokens(16);
  spec.set_max_answer_tokens(4);
  return spec;
}
std::vector<v1::Demonstration> LongDemonstrations() { return Sst2Demonstrations(2000); }

// A CreateTask stream left open for the test to watch: everything is uploaded, then progress
// events are read one by one.
class OpenCreate {
 public:
  OpenCreate(v1::ManyShot::Stub& stub, const std::string& id, const v1::TaskSpec& spec,
             const std::vector<v1::Demonstration>& demos, bool replace) {
    context_.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(600));
    stream_ = stub.CreateTask(&context_);
    for (size_t i = 0; i < demos.size() || i == 0; i += 1000) {
      v1::CreateTaskRequest message;
      if (i == 0) {
        message.set_task_id(id);
        *message.mutable_spec() = spec;
        message.set_replace(replace);
      }
      for (size_t k = i; k < demos.size() && k < i + 1000; ++k) {
        *message.add_demonstrations() = demos[k];
      }
      stream_->Write(message);
    }
    stream_->WritesDone();
  }
  // Reads until an ENCODING progress event with groups left to encode; false when the stream
  // ended first (the encode finished before it was seen).
  bool WaitUntilEncoding() {
    v1::CreateTaskResponse response;
    while (stream_->Read(&response)) {
      if (response.has_result()) result_ = response.result();
      const auto& p = response.progress();
      if (response.has_progress() && p.phase() == v1::CreateTaskProgress::PHASE_ENCODING &&
          p.groups_total() > 0 && p.groups_encoded() < p.groups_total() / 2) {
        return true;
      }
    }
    return false;
  }
  // Reads to the end.
  grpc::Status Finish() {
    v1::CreateTaskResponse response;
    while (stream_->Read(&response)) {
      if (response.has_result()) result_ = response.result();
    }
    return stream_->Finish();
  }
  void Cancel() { context_.TryCancel(); }
  const v1::CreateTaskResult& result() const { return result_; }

 private:
  grpc::ClientContext context_;
  std::unique_ptr<grpc::ClientReaderWriter<v1::CreateTaskRequest, v1::CreateTaskResponse>> stream_;
  v1::CreateTaskResult result_;
};

std::vector<double> Scores(const v1::ClassifyResponse& response) {
  std::vector<double> out;
  for (const auto& r : response.results()) {
    for (const auto& s : r.scores()) out.push_back(s.sum_logprob());
  }
  return out;
}

const std::vector<std::string> kInputs = {"a delightful film", "a dull mess"};

TEST(TaskLifecycleTest, ReplaceKilledWhileEncodingKeepsTheAcknowledgedVersion) {
  // The kill must land while the replacement encodes; when the replace wins the race (it
  // committed before the signal arrived) the attempt proves nothing and is repeated.
  bool killed_while_encoding = false;
  for (int attempt = 0; attempt < 4 && !killed_while_encoding; ++attempt) {
    TempDir dir;
    std::vector<double> before;
    std::string hash;
    uint64_t disk_bytes = 0, disk_entries = 0;
    {
      ServerUnderTest server(dir.path() / "data", kSlowServer);
      ASSERT_TRUE(server.started()) << server.Stderr();
      auto stub = v1::ManyShot::NewStub(server.Channel());
      auto created = CreateTask(*stub, "t", Sst2Spec(), Sst2Demonstrations());
      ASSERT_TRUE(created.status.ok()) << created.status.error_message();
      hash = created.result.task().content_hash();
      v1::ClassifyResponse response;
      ASSERT_TRUE(Classify(*stub, "t", kInputs, &response).ok());
      before = Scores(response);
      const v1::ServerInfo info = Info(*stub);
      disk_bytes = info.cache().disk_bytes();
      disk_entries = info.cache().disk_entries();
      ASSERT_GT(disk_bytes, 0u);

      OpenCreate replace(*stub, "t", LongSpec(), LongDemonstrations(), /*replace=*/true);
      if (!replace.WaitUntilEncoding()) {
        ASSERT_TRUE(replace.Finish().ok());
        continue;
      }
      // While the replacement encodes, the acknowledged version is the one reported and served.
      v1::Task shown;
      ASSERT_TRUE(GetTask(*stub, "t", &shown).ok());
      if (shown.content_hash() == hash) {
        EXPECT_EQ(shown.state(), v1::TASK_STATE_READY);
        EXPECT_TRUE(shown.replacing());
      }
      ASSERT_TRUE(server.process().Signal(SIGKILL));
      ASSERT_TRUE(server.process().Wait(std::chrono::seconds(60)).has_value());
      replace.Cancel();
      replace.Finish().ok();
    }
    ServerUnderTest server(dir.path() / "data", kSlowServer);  // same threads, same sums
    ASSERT_TRUE(server.started()) << server.Stderr();
    auto stub = v1::ManyShot::NewStub(server.Channel());
    v1::Task task;
    grpc::Status got = GetTask(*stub, "t", &task);
    ASSERT_TRUE(got.ok()) << "the acknowledged task was lost: " << got.error_message();
    ASSERT_EQ(task.state(), v1::TASK_STATE_READY);
    EXPECT_FALSE(task.replacing());
    if (task.content_hash() != hash) continue;  // the replace committed before the kill
    killed_while_encoding = true;
    std::printf("[ info ] the kill landed while the replace encoded (attempt %d)\n", attempt + 1);
    v1::ClassifyResponse response;
    ASSERT_TRUE(Classify(*stub, "t", kInputs, &response).ok());
    EXPECT_EQ(Scores(response), before);  // bit-identical: the same stored KV
    // Nothing of the uncommitted version is left behind.
    const v1::ServerInfo info = Info(*stub);
    EXPECT_EQ(info.cache().disk_bytes(), disk_bytes);
    EXPECT_EQ(info.cache().disk_entries(), disk_entries);
    EXPECT_EQ(info.tasks(), 1u);
    EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_cache_encodes_total"), 0);
  }
  EXPECT_TRUE(killed_while_encoding) << "every replace finished before the kill landed";
}

// The two versions a racing replace alternates between: different label sets, different scores.
v1::TaskSpec ThreeLabelSpec() {
  v1::TaskSpec spec = Sst2Spec();
  spec.clear_labels();
  spec.add_labels("awful");
  spec.add_labels("fine");
  spec.add_labels("great");
  return spec;
}

TEST(TaskLifecycleTest, ClassifyRacingLabelChangingReplacesAnswersFromOneVersion) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  struct Version {
    v1::TaskSpec spec;
    std::vector<v1::Demonstration> demos;
    std::vector<std::string> labels;
    std::vector<double> scores;
  };
  Version versions[2] = {{Sst2Spec(), Sst2Demonstrations(), {}, {}},
                         {ThreeLabelSpec(), Sst2Demonstrations(), {}, {}}};
  for (size_t i = 0; i < versions[1].demos.size(); ++i) {
    versions[1].demos[i].set_label_index(static_cast<uint32_t>(i % 3));
  }
  for (auto& v : versions) {
    v.labels.assign(v.spec.labels().begin(), v.spec.labels().end());
    auto created = CreateTask(*stub, "t", v.spec, v.demos, /*replace=*/true);
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
    v1::ClassifyResponse response;
    ASSERT_TRUE(Classify(*stub, "t", kInputs, &response).ok());
    v.scores = Scores(response);
  }
  ASSERT_NE(versions[0].scores.size(), versions[1].scores.size());

  std::atomic<bool> stop{false};
  std::atomic<int> answered{0};
  std::vector<std::thread> clients;
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      auto my_stub = v1::ManyShot::NewStub(server.Channel());
      while (!stop.load()) {
        v1::ClassifyResponse response;
        grpc::Status status = Classify(*my_stub, "t", kInputs, &response);
        std::string failure;
        if (status.error_code() == grpc::StatusCode::ABORTED) continue;  // retryable by contract
        if (!status.ok()) {
          failure = "code " + std::to_string(status.error_code()) + ": " + status.error_message();
        } else {
          // The label names and every score come from one version.
          const Version* match = nullptr;
          for (const auto& v : versions) {
            if (response.results(0).scores_size() == static_cast<int>(v.labels.size())) match = &v;
          }
          if (match == nullptr) {
            failure = "a label count of neither version";
          } else {
            const std::vector<double> got = Scores(response);
            for (const auto& r : response.results()) {
              for (int l = 0; l < r.scores_size(); ++l) {
                if (r.scores(l).label() != match->labels[l]) failure = "mixed label names";
              }
              if (r.label() != match->labels[r.label_index()]) failure = "mixed predicted label";
            }
            for (size_t i = 0; i < got.size() && failure.empty(); ++i) {
              if (std::abs(got[i] - match->scores[i]) > 1e-4)
                failure = "scores of the other version";
            }
          }
          answered.fetch_add(1);
        }
        if (!failure.empty()) {
          std::lock_guard<std::mutex> lock(failures_mutex);
          failures.push_back(failure);
        }
      }
    });
  }
  // Alternate the versions while the clients classify; each replace re-encodes.
  for (int round = 0; round < 16; ++round) {
    const Version& v = versions[round % 2];
    auto replaced = CreateTask(*stub, "t", v.spec, v.demos, /*replace=*/true);
    EXPECT_TRUE(replaced.status.ok()) << replaced.status.error_message();
  }
  // Let the clients get answers after the last replace too (polled, not timed).
  const int target = answered.load() + 8;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (answered.load() < target && Clock::now() < deadline) std::this_thread::yield();
  stop = true;
  for (auto& t : clients) t.join();
  EXPECT_TRUE(failures.empty()) << failures.size() << " bad answers, first: " << failures[0];
  EXPECT_GT(answered.load(), 8);
  EXPECT_EQ(server.Stderr().find("CHECK failed"), std::string::npos) << server.Stderr();
  ASSERT_FALSE(server.process().Wait(std::chrono::milliseconds(0)).has_value());
}

// Flips one bit inside the first occurrence of `marker` in the data directory's SST files.
bool FlipByteOnDisk(const std::filesystem::path& dir, const std::string& marker) {
  return FlipByteInDataBlockHolding(SstFilesIn(dir), marker);
}

// The SST files that hold `text` (a family's name is in its files' properties block).
std::vector<std::filesystem::path> SstFilesHolding(const std::filesystem::path& dir,
                                                   const std::string& text) {
  std::vector<std::filesystem::path> holding;
  for (const auto& file : SstFilesIn(dir)) {
    std::ifstream in(file, std::ios::binary);
    const std::string bytes(std::istreambuf_iterator<char>(in), {});
    if (bytes.find(text) != std::string::npos) holding.push_back(file);
  }
  return holding;
}

v1::TaskSpec MarkedSpec(const std::string& marker) {
  v1::TaskSpec spec = Sst2Spec();
  spec.set_input_template(marker + " Sentence: {text}\nLabel:");
  return spec;
}

TEST(TaskLifecycleTest, DamagedTaskRecordIsQuarantinedAndTheOthersAreServed) {
  TempDir dir;
  std::vector<double> good_scores;
  {
    ServerUnderTest server(dir.path() / "data", {});
    ASSERT_TRUE(server.started()) << server.Stderr();
    auto stub = v1::ManyShot::NewStub(server.Channel());
    for (const std::string id : {"good", "bad1", "bad2"}) {
      const v1::TaskSpec spec = id == "good" ? Sst2Spec() : MarkedSpec("MARKER-OF-" + id);
      auto created = CreateTask(*stub, id, spec, Sst2Demonstrations());
      ASSERT_TRUE(created.status.ok()) << created.status.error_message();
    }
    v1::ClassifyResponse response;
    ASSERT_TRUE(Classify(*stub, "good", kInputs, &response).ok());
    good_scores = Scores(response);
    ASSERT_TRUE(server.process().Signal(SIGTERM));  // a clean stop flushes the records to SSTs
    ASSERT_EQ(server.process().Wait(std::chrono::seconds(60)).value_or(-1), 0) << server.Stderr();
  }
  ASSERT_TRUE(FlipByteOnDisk(dir.path() / "data", "MARKER-OF-bad1"));
  ASSERT_TRUE(FlipByteOnDisk(dir.path() / "data", "MARKER-OF-bad2"));
  {
    ServerUnderTest server(dir.path() / "data", {});
    ASSERT_TRUE(server.started()) << "one damaged record stopped the server: " << server.Stderr();
    auto stub = v1::ManyShot::NewStub(server.Channel());
    v1::ClassifyResponse response;
    ASSERT_TRUE(Classify(*stub, "good", kInputs, &response).ok());
    EXPECT_EQ(Scores(response), good_scores);
    for (const std::string id : {"bad1", "bad2"}) {
      v1::Task task;
      ASSERT_TRUE(GetTask(*stub, id, &task).ok());
      EXPECT_EQ(task.state(), v1::TASK_STATE_FAILED);
      EXPECT_NE(task.error().find("damaged"), std::string::npos) << task.error();
      v1::ClassifyResponse refused;
      grpc::Status status = Classify(*stub, id, kInputs, &refused);
      EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
      EXPECT_NE(status.error_message().find("damaged"), std::string::npos)
          << status.error_message();
    }
    grpc::ClientContext lc;
    v1::ListTasksResponse listed;
    ASSERT_TRUE(stub->ListTasks(&lc, v1::ListTasksRequest(), &listed).ok());
    ASSERT_EQ(listed.tasks_size(), 3);
    EXPECT_NE(server.Stderr().find("task bad1 of tenant default has a damaged record"),
              std::string::npos)
        << server.Stderr();
    EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_tasks_quarantined"), 2);
    EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_tasks_by_state", {{"state", "failed"}}), 2);

    // Delete one; replace the other (without replace it is refused: it exists).
    ASSERT_TRUE(DeleteTask(*stub, "bad1").ok());
    v1::Task gone;
    EXPECT_EQ(GetTask(*stub, "bad1", &gone).error_code(), grpc::StatusCode::NOT_FOUND);
    auto refused = CreateTask(*stub, "bad2", Sst2Spec(48), Sst2Demonstrations());
    EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    auto replaced = CreateTask(*stub, "bad2", Sst2Spec(48), Sst2Demonstrations(), true);
    ASSERT_TRUE(replaced.status.ok()) << replaced.status.error_message();
    EXPECT_TRUE(replaced.result.replaced());
    EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_tasks_quarantined"), 0);
    ASSERT_TRUE(Classify(*stub, "bad2", kInputs, &response).ok());
    ASSERT_TRUE(server.process().Signal(SIGTERM));
    ASSERT_EQ(server.process().Wait(std::chrono::seconds(60)).value_or(-1), 0) << server.Stderr();
  }
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  v1::Task task;
  EXPECT_EQ(GetTask(*stub, "bad1", &task).error_code(), grpc::StatusCode::NOT_FOUND);
  ASSERT_TRUE(GetTask(*stub, "bad2", &task).ok());
  EXPECT_EQ(task.state(), v1::TASK_STATE_READY);
  EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_tasks_quarantined"), 0);
}

TEST(TaskLifecycleTest, NewTaskIsEncodingWhileItsCreateRunsAndABadOneLeavesNothing) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", kSlowServer);
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  // ENCODING: seen while the CreateTask stream reports encoding progress. The encode takes
  // seconds; when it ends before the look (a very loaded machine), the attempt is repeated.
  bool seen_encoding = false;
  for (int attempt = 0; attempt < 3 && !seen_encoding; ++attempt) {
    const std::string id = "long" + std::to_string(attempt);
    OpenCreate create(*stub, id, LongSpec(), LongDemonstrations(), /*replace=*/false);
    if (create.WaitUntilEncoding()) {
      v1::Task task;
      ASSERT_TRUE(GetTask(*stub, id, &task).ok());
      if (task.state() == v1::TASK_STATE_ENCODING) {
        seen_encoding = true;
        EXPECT_EQ(task.spec().group_length(), 1000u);
        v1::ClassifyResponse response;
        grpc::Status refused = Classify(*stub, id, kInputs, &response);
        if (!refused.ok()) {
          EXPECT_EQ(refused.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
          EXPECT_NE(refused.error_message().find("ENCODING"), std::string::npos);
        }
        // Refused while the create runs (it may have committed since the look: then it is READY
        // and the delete below removes it anyway).
        grpc::Status deleting = DeleteTask(*stub, id);
        if (!deleting.ok()) {
          EXPECT_EQ(deleting.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
        }
        grpc::ClientContext lc;
        v1::ListTasksResponse listed;
        ASSERT_TRUE(stub->ListTasks(&lc, v1::ListTasksRequest(), &listed).ok());
        bool listed_it = false;
        for (const auto& t : listed.tasks()) listed_it |= t.task_id() == id;
        EXPECT_TRUE(listed_it);
      } else {
        EXPECT_EQ(task.state(), v1::TASK_STATE_READY);
      }
    }
    grpc::Status finished = create.Finish();
    ASSERT_TRUE(finished.ok()) << finished.error_message();
    v1::Task task;
    grpc::Status got = GetTask(*stub, id, &task);
    if (got.ok()) {
      EXPECT_EQ(task.state(), v1::TASK_STATE_READY);
      EXPECT_TRUE(DeleteTask(*stub, id).ok());  // its KV is large: do not keep it around
    } else {
      EXPECT_EQ(got.error_code(), grpc::StatusCode::NOT_FOUND);  // deleted above once READY
    }
  }
  EXPECT_TRUE(seen_encoding) << "every encode finished before GetTask looked";

  // A create that fails on a bad request found while tokenizing (a demonstration longer than a
  // group) becomes visible as ENCODING, then leaves nothing behind: INVALID_ARGUMENT to the caller,
  // no FAILED task (FAILED is for failures that are not the request's; the quarantine test covers
  // FAILED tasks).
  v1::TaskSpec spec = Sst2Spec(32);
  std::vector<v1::Demonstration> demos = Sst2Demonstrations();
  std::string long_text;
  for (int i = 0; i < 60; ++i) long_text += "very ";
  demos[3].set_text(long_text);
  auto failed = CreateTask(*stub, "broken", spec, demos);
  EXPECT_EQ(failed.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  v1::Task task;
  EXPECT_EQ(GetTask(*stub, "broken", &task).error_code(), grpc::StatusCode::NOT_FOUND);
  auto fixed = CreateTask(*stub, "broken", spec, Sst2Demonstrations());
  ASSERT_TRUE(fixed.status.ok()) << fixed.status.error_message();
  v1::ClassifyResponse response;
  ASSERT_TRUE(Classify(*stub, "broken", kInputs, &response).ok());
  // A bad replace leaves the served version as it was.
  auto bad_replace = CreateTask(*stub, "broken", spec, demos, /*replace=*/true);
  EXPECT_EQ(bad_replace.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  ASSERT_TRUE(GetTask(*stub, "broken", &task).ok());
  EXPECT_EQ(task.state(), v1::TASK_STATE_READY);
  EXPECT_FALSE(task.replacing());
  EXPECT_EQ(task.content_hash(), fixed.result.task().content_hash());
}

TEST(TaskLifecycleTest, DamagedIndexBlocksOfTheStoreAreSalvagedAndEveryTaskServes) {
  TempDir dir;
  std::map<std::string, std::vector<double>> scores;
  {
    ServerUnderTest server(dir.path() / "data", {});
    ASSERT_TRUE(server.started()) << server.Stderr();
    auto stub = v1::ManyShot::NewStub(server.Channel());
    for (const std::string id : {"one", "two"}) {
      auto created = CreateTask(*stub, id, MarkedSpec("TASK-" + id), Sst2Demonstrations());
      ASSERT_TRUE(created.status.ok()) << created.status.error_message();
      v1::ClassifyResponse response;
      ASSERT_TRUE(Classify(*stub, id, kInputs, &response).ok());
      scores[id] = Scores(response);
    }
    ASSERT_TRUE(server.process().Signal(SIGTERM));  // a clean stop flushes to SST files
    ASSERT_EQ(server.process().Wait(std::chrono::seconds(60)).value_or(-1), 0) << server.Stderr();
  }
  // RocksDB refuses a table whose index block is damaged, and a paranoid open refuses the store.
  int damaged = 0;
  for (const auto& file : SstFilesHolding(dir.path() / "data", "ready/")) {
    damaged += FlipByteInIndexBlock(file);
  }
  for (const auto& file : SstFilesHolding(dir.path() / "data", "kv_meta")) {
    damaged += FlipByteInIndexBlock(file);
  }
  ASSERT_GE(damaged, 2);
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << "damaged index blocks stopped the server: " << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  for (const std::string id : {"one", "two"}) {
    v1::ClassifyResponse response;
    ASSERT_TRUE(Classify(*stub, id, kInputs, &response).ok()) << id;
    EXPECT_EQ(Scores(response), scores[id]) << id;
  }
  EXPECT_NE(server.Stderr().find("salvaging its readable entries"), std::string::npos)
      << server.Stderr();
  EXPECT_GE(Scrape(server.metrics_port(), "manyshot_cache_corruptions_total"), 2);
  EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_tasks_quarantined"), 0);
}

}  // namespace
}  // namespace manyshot::testing
