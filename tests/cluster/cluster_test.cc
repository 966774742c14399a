// Replicas sharing one directory (--shared_dir) behind a real HAProxy, on loopback: a task created
// on one replica is answered identically by every replica and the proxy with one encode in the
// whole cluster; a replica on an empty local directory encodes nothing; replace and delete are
// seen by the next request on every replica, and a request answered during a replace uses one
// version, never a mix; of two concurrent creates of one id exactly one wins;
// a damaged shared KV file is never served (one re-encode, counted, file replaced); a killed
// replica's tasks keep answering through the proxy; a replica reporting NOT_SERVING gets no more
// calls through the proxy while the others answer them; scaling 3 -> 4 -> 2 loses no task; a hot
// task spills to more than one replica.
#include <signal.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <fstream>
#include <set>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "testing/harness/subprocess.h"
#include "tests/cluster/cluster_harness.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// Calls answered in one batch with others may differ from a lone call's scores in the last bits
// (summation order); a different version or context would differ by far more.
constexpr double kBatchTolerance = 1e-4;

class ClusterTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(HaproxyBinary().empty()) << "haproxy is needed (scripts/setup.sh installs it)";
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(cluster_.Add());
  }
  std::vector<Replica>& replicas() { return cluster_.replicas(); }
  fs::path work() const { return dir_.path() / "cli"; }
  // Creates `id` (variant) on replica r with the CLI and expects success.
  void Create(size_t r, const std::string& id, int variant, bool replace = false) {
    CommandResult created = CreateWithCli(replicas()[r].address(), id, variant, work(), replace);
    ASSERT_EQ(created.exit_status, 0) << created.out << created.err;
  }
  std::vector<double> Scores(v1::ManyShot::Stub& stub, const std::string& id) {
    std::vector<double> scores;
    grpc::Status status = Classify(stub, id, &scores);
    EXPECT_TRUE(status.ok()) << id << ": " << status.error_message();
    return scores;
  }
  std::vector<fs::path> SharedKvFiles() const {
    std::vector<fs::path> files;
    for (const auto& entry : fs::directory_iterator(cluster_.shared_dir() / "kv")) {
      if (entry.path().extension() == ".kv") files.push_back(entry.path());
    }
    return files;
  }

  TempDir dir_;
  Cluster cluster_{dir_.path()};
};

TEST_F(ClusterTest, OneEncodeServesEveryReplicaAndTheProxy) {
  Create(0, "sst2", 0);
  HaproxyUnderTest proxy(dir_.path() / "haproxy", cluster_.Addresses());
  ASSERT_TRUE(proxy.started()) << proxy.Logs();
  auto via_proxy = v1::ManyShot::NewStub(RetryingChannel(proxy.address()));

  const std::vector<double> reference = Scores(*replicas()[0].Stub(), "sst2");
  ASSERT_FALSE(reference.empty());
  for (size_t r = 1; r < replicas().size(); ++r) {
    EXPECT_TRUE(SameScores(Scores(*replicas()[r].Stub(), "sst2"), reference)) << "replica " << r;
    EXPECT_EQ(replicas()[r].Metric("manyshot_shared_restores_total"), 1) << "replica " << r;
    EXPECT_EQ(replicas()[r].Metric("manyshot_shared_mapped_restores_total"), 1) << "replica " << r;
    EXPECT_GT(replicas()[r].Metric("manyshot_shared_read_bytes_total"), 0) << "replica " << r;
  }
  for (int i = 0; i < 5; ++i) EXPECT_TRUE(SameScores(Scores(*via_proxy, "sst2"), reference));
  EXPECT_EQ(cluster_.Sum("manyshot_cache_encodes_total"), 1);

  // Every replica lists the task from the shared catalog, and so does the proxy.
  for (size_t r = 0; r < replicas().size(); ++r) {
    grpc::ClientContext context;
    v1::ListTasksResponse listed;
    ASSERT_TRUE(replicas()[r].Stub()->ListTasks(&context, v1::ListTasksRequest(), &listed).ok());
    ASSERT_EQ(listed.tasks_size(), 1) << "replica " << r;
    EXPECT_EQ(listed.tasks(0).task_id(), "sst2");
  }
  grpc::ClientContext context;
  v1::ListTasksResponse listed;
  grpc::Status status = via_proxy->ListTasks(&context, v1::ListTasksRequest(), &listed);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(listed.tasks_size(), 1);
}

TEST_F(ClusterTest, AReplicaOnAnEmptyLocalDirectoryEncodesNothing) {
  Create(0, "sst2", 1);
  Create(1, "other", 2);
  const std::vector<double> reference = Scores(*replicas()[0].Stub(), "sst2");
  ASSERT_TRUE(cluster_.Add());  // a fourth replica, its local directory empty
  Replica& fresh = replicas().back();
  EXPECT_TRUE(SameScores(Scores(*fresh.Stub(), "sst2"), reference));
  EXPECT_FALSE(Scores(*fresh.Stub(), "other").empty());
  EXPECT_EQ(fresh.Metric("manyshot_cache_encodes_total"), 0);
  EXPECT_EQ(fresh.Metric("manyshot_shared_restores_total"), 2);
}

TEST_F(ClusterTest, ReplaceAndDeleteAreSeenByTheNextRequestEverywhere) {
  Create(0, "sst2", 1);
  auto b = replicas()[1].Stub();
  const std::vector<double> before = Scores(*b, "sst2");
  Create(0, "sst2", 3, /*replace=*/true);
  const std::vector<double> after = Scores(*replicas()[0].Stub(), "sst2");
  ASSERT_FALSE(SameScores(before, after)) << "the two variants must score differently";
  // B's first request after A's acknowledgement: the new version, never the old one.
  EXPECT_TRUE(SameScores(Scores(*b, "sst2"), after));
  EXPECT_GE(replicas()[1].Metric("manyshot_shared_version_switches_total"), 1);
  {
    grpc::ClientContext context;
    v1::Task task;
    v1::GetTaskRequest request;
    request.set_task_id("sst2");
    ASSERT_TRUE(replicas()[2].Stub()->GetTask(&context, request, &task).ok());
    grpc::ClientContext on_a;
    v1::Task task_a;
    ASSERT_TRUE(replicas()[0].Stub()->GetTask(&on_a, request, &task_a).ok());
    EXPECT_EQ(task.content_hash(), task_a.content_hash());
  }

  CommandResult deleted = RunCommand(
      {CliBinary(), "--server=" + replicas()[0].address(), "delete", "sst2"}, dir_.path());
  ASSERT_EQ(deleted.exit_status, 0) << deleted.err;
  for (size_t r = 1; r < replicas().size(); ++r) {
    grpc::Status status = Classify(*replicas()[r].Stub(), "sst2", nullptr);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::NOT_FOUND)
        << "replica " << r << ": " << status.error_message();
    grpc::ClientContext context;
    v1::ListTasksResponse listed;
    ASSERT_TRUE(replicas()[r].Stub()->ListTasks(&context, v1::ListTasksRequest(), &listed).ok());
    EXPECT_EQ(listed.tasks_size(), 0) << "replica " << r;
  }
  // Created again after the delete: a new version on top of the tombstone.
  Create(2, "sst2", 1);
  EXPECT_TRUE(SameScores(Scores(*b, "sst2"), before));
}

TEST_F(ClusterTest, AReplaceWhileAnotherReplicaAnswersNeverMixesVersions) {
  Create(0, "sst2", 1);
  const std::vector<double> before = Scores(*replicas()[1].Stub(), "sst2");
  ASSERT_FALSE(before.empty());
  // B answers request after request while A replaces the task.
  struct Answer {
    grpc::Status status;
    std::vector<double> scores;
    bool sent_after_ack = false;
  };
  std::vector<Answer> answers;
  std::atomic<bool> acknowledged{false}, stop{false};
  std::atomic<int> answered_after_ack{0};
  std::thread client([&] {
    auto b = replicas()[1].Stub();
    while (!stop) {
      Answer answer;
      answer.sent_after_ack = acknowledged;
      answer.status = Classify(*b, "sst2", &answer.scores);
      if (answer.sent_after_ack) ++answered_after_ack;
      answers.push_back(std::move(answer));
    }
  });
  Create(0, "sst2", 3, /*replace=*/true);
  acknowledged = true;
  const auto deadline = Clock::now() + std::chrono::seconds(120);
  while (answered_after_ack < 3 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  stop = true;
  client.join();
  const std::vector<double> after = Scores(*replicas()[0].Stub(), "sst2");
  ASSERT_FALSE(SameScores(before, after)) << "the two variants must score differently";
  ASSERT_GE(answered_after_ack, 3);
  for (size_t i = 0; i < answers.size(); ++i) {
    const Answer& answer = answers[i];
    ASSERT_TRUE(answer.status.ok()) << "answer " << i << ": " << answer.status.error_message();
    const bool old_version = SameScores(answer.scores, before, kBatchTolerance);
    const bool new_version = SameScores(answer.scores, after, kBatchTolerance);
    // One request, one version: never some inputs scored against each.
    EXPECT_TRUE(old_version || new_version) << "answer " << i << " mixes versions";
    EXPECT_TRUE(new_version || !answer.sent_after_ack) << "answer " << i << " after the ack";
  }
}

TEST_F(ClusterTest, OfTwoConcurrentCreatesOfOneIdExactlyOneWins) {
  for (int round = 0; round < 3; ++round) {
    const std::string id = "race-" + std::to_string(round);
    CommandResult results[2];
    std::thread first([&] { results[0] = CreateWithCli(replicas()[0].address(), id, 1, work()); });
    std::thread second([&] { results[1] = CreateWithCli(replicas()[1].address(), id, 2, work()); });
    first.join();
    second.join();
    const int wins = (results[0].exit_status == 0) + (results[1].exit_status == 0);
    ASSERT_EQ(wins, 1) << results[0].err << "\n" << results[1].err;
    const CommandResult& loser = results[0].exit_status == 0 ? results[1] : results[0];
    EXPECT_NE(loser.err.find("ALREADY_EXISTS"), std::string::npos) << loser.err;
    // Every replica serves the winner's version.
    std::set<std::string> hashes;
    for (Replica& r : replicas()) {
      grpc::ClientContext context;
      v1::GetTaskRequest request;
      request.set_task_id(id);
      v1::Task task;
      ASSERT_TRUE(r.Stub()->GetTask(&context, request, &task).ok());
      hashes.insert(task.content_hash());
    }
    EXPECT_EQ(hashes.size(), 1u);
    const auto s0 = Scores(*replicas()[0].Stub(), id), s1 = Scores(*replicas()[1].Stub(), id);
    EXPECT_TRUE(SameScores(s0, s1));
  }
}

TEST_F(ClusterTest, ATaskEncodingOnAnotherReplicaIsUnavailableNotNotFound) {
  // A task large enough that its CreateTask on A takes a moment.
  fs::create_directories(work());
  const fs::path tsv = work() / "slow.tsv";
  {
    std::ofstream out(tsv);
    out << "text\tlabel\n";
    for (int i = 0; i < 1500; ++i) {
      out << "sentence number " << i << (i % 2 ? " was a joy" : " was a bore") << "\t" << i % 2
          << "\n";
    }
  }
  CommandResult created;
  std::atomic<bool> done{false};
  std::thread create([&] {
    created = RunCommand({CliBinary(), "--server=" + replicas()[0].address(), "--timeout=120",
                          "create", "slow", "--file=" + tsv.string(),
                          "--template=Sentence: {text}\\nLabel:", "--labels=negative,positive",
                          "--group_length=512", "--max_query_tokens=48", "--max_answer_tokens=8"},
                         work());
    done = true;
  });
  // Once A has marked it, B answers UNAVAILABLE (retry) until A publishes it, never NOT_FOUND.
  const fs::path markers = cluster_.shared_dir() / "encoding" / "default" / "slow";
  const auto deadline = Clock::now() + std::chrono::seconds(60);
  while (!done.load() && Clock::now() < deadline &&
         (!fs::exists(markers) || fs::is_empty(markers))) {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  int unavailable = 0;
  for (grpc::Status status = Classify(*replicas()[1].Stub(), "slow", nullptr); !status.ok();
       status = Classify(*replicas()[1].Stub(), "slow", nullptr)) {
    ASSERT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE) << status.error_message();
    EXPECT_NE(status.error_message().find("being encoded"), std::string::npos);
    ++unavailable;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  create.join();
  ASSERT_EQ(created.exit_status, 0) << created.err;
  EXPECT_TRUE(fs::is_empty(markers));  // removed once published
  std::cout << "B answered UNAVAILABLE " << unavailable << " times while A encoded\n";
}

TEST_F(ClusterTest, ADamagedSharedKvFileIsNeverServed) {
  Create(0, "sst2", 1);
  const std::vector<double> reference = Scores(*replicas()[0].Stub(), "sst2");
  const std::vector<fs::path> files = SharedKvFiles();
  ASSERT_EQ(files.size(), 1u);
  {
    std::fstream file(files[0], std::ios::in | std::ios::out | std::ios::binary);
    file.seekg(0, std::ios::end);
    const std::streamoff size = file.tellg();
    file.seekp(size - 100);  // in the payload
    char byte = 0;
    file.seekg(size - 100);
    file.read(&byte, 1);
    byte = static_cast<char>(byte ^ 0x10);
    file.seekp(size - 100);
    file.write(&byte, 1);
  }
  Replica& b = replicas()[1];
  EXPECT_TRUE(SameScores(Scores(*b.Stub(), "sst2"), reference));
  EXPECT_EQ(b.Metric("manyshot_shared_corrupt_reencodes_total"), 1);
  EXPECT_EQ(b.Metric("manyshot_cache_encodes_total"), 1);
  EXPECT_EQ(b.Metric("manyshot_shared_restores_total"), 0);
  // The file was replaced with a good one: the third replica restores it, encoding nothing.
  Replica& c = replicas()[2];
  EXPECT_TRUE(SameScores(Scores(*c.Stub(), "sst2"), reference));
  EXPECT_EQ(c.Metric("manyshot_cache_encodes_total"), 0);
  EXPECT_EQ(c.Metric("manyshot_shared_restores_total"), 1);
}

// The replica the proxy sends the task to (by its request counters), after one call through it.
size_t ServingReplica(std::vector<Replica>& replicas, v1::ManyShot::Stub& proxy,
                      const std::string& id) {
  std::vector<double> before;
  for (Replica& r : replicas)
    before.push_back(r.Metric("manyshot_requests_total", {{"method", "Classify"}, {"code", "OK"}}));
  EXPECT_TRUE(Classify(proxy, id, nullptr).ok());
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (replicas[r].Metric("manyshot_requests_total", {{"method", "Classify"}, {"code", "OK"}}) >
        before[r]) {
      return r;
    }
  }
  return replicas.size();
}

TEST_F(ClusterTest, AKilledReplicasTasksKeepAnswering) {
  Create(0, "sst2", 1);
  const std::vector<double> reference = Scores(*replicas()[0].Stub(), "sst2");
  HaproxyUnderTest proxy(dir_.path() / "haproxy", cluster_.Addresses());
  ASSERT_TRUE(proxy.started()) << proxy.Logs();
  ASSERT_TRUE(proxy.WaitForServersUp(3)) << proxy.Logs();
  auto stub = v1::ManyShot::NewStub(RetryingChannel(proxy.address()));
  const size_t victim = ServingReplica(replicas(), *stub, "sst2");
  ASSERT_LT(victim, replicas().size());
  // The survivors' encodes (the victim's go with it).
  const auto survivors_encodes = [&] {
    double sum = 0;
    for (size_t r = 0; r < replicas().size(); ++r) {
      if (r != victim) sum += replicas()[r].Metric("manyshot_cache_encodes_total");
    }
    return sum;
  };
  const double encodes_before = survivors_encodes();

  // Clients stream requests through the proxy while the serving replica is killed.
  std::atomic<bool> stop{false};
  std::atomic<int> ok{0}, failed{0}, wrong{0};
  std::string first_failure;
  double worst = 0;
  std::mutex failure_mutex;
  std::vector<std::thread> clients;
  for (int c = 0; c < 4; ++c) {
    clients.emplace_back([&] {
      while (!stop.load()) {
        std::vector<double> got;
        grpc::Status status = Classify(*stub, "sst2", &got);
        if (status.ok()) {
          // Batched with other calls on one replica: the same scores up to summation order.
          const bool same = SameScores(got, reference, kBatchTolerance);
          (same ? ok : wrong)++;
          std::lock_guard<std::mutex> lock(failure_mutex);
          for (size_t i = 0; i < got.size() && i < reference.size(); ++i) {
            worst = std::max(worst, std::abs(got[i] - reference[i]));
          }
        } else {
          failed++;
          std::lock_guard<std::mutex> lock(failure_mutex);
          if (first_failure.empty()) first_failure = status.error_message();
        }
      }
    });
  }
  while (ok.load() < 20) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  ASSERT_TRUE(replicas()[victim].server->process().Signal(SIGKILL));
  replicas()[victim].server->process().Wait(std::chrono::seconds(30));
  const int ok_at_kill = ok.load();
  // Until the health checks eject it and the task answers from the others for a while.
  ASSERT_TRUE(proxy.WaitForServersUp(2)) << proxy.Logs();
  const auto deadline = Clock::now() + std::chrono::seconds(30);
  while (ok.load() < ok_at_kill + 40 && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  stop = true;
  for (std::thread& t : clients) t.join();
  EXPECT_GE(ok.load(), ok_at_kill + 40);
  EXPECT_EQ(failed.load(), 0) << first_failure << proxy.Logs();
  EXPECT_EQ(wrong.load(), 0) << "largest difference " << worst;
  EXPECT_EQ(survivors_encodes(), encodes_before);
}

// Classify of `id` without the task header: the proxy spreads such calls round-robin.
grpc::Status ClassifyAnywhere(v1::ManyShot::Stub& stub, const std::string& id) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  v1::ClassifyRequest request;
  request.set_task_id(id);
  request.add_inputs()->set_text("a delightful , moving film");
  v1::ClassifyResponse response;
  return stub.Classify(&context, request, &response);
}

TEST_F(ClusterTest, ANotServingReplicaStopsGettingCallsThroughTheProxy) {
  Create(0, "sst2", 1);
  // A fourth replica that, on SIGTERM, reports NOT_SERVING for a long while but keeps answering.
  ASSERT_TRUE(cluster_.Add({"--shutdown_notice_seconds=300"}));
  Replica& leaving = replicas().back();
  const std::string name = "r4";  // render-haproxy-cfg.sh names the replicas r1.. in order
  HaproxyUnderTest proxy(dir_.path() / "haproxy", cluster_.Addresses());
  ASSERT_TRUE(proxy.started()) << proxy.Logs();
  ASSERT_TRUE(proxy.WaitForServersUp(4)) << proxy.Logs();
  // No retry policy: every call must succeed on its own.
  auto stub = v1::ManyShot::NewStub(
      grpc::CreateChannel(proxy.address(), grpc::InsecureChannelCredentials()));
  const auto calls = [&](const std::string& when) {
    for (int i = 0; i < 16; ++i) {
      grpc::Status status = ClassifyAnywhere(*stub, "sst2");
      ASSERT_TRUE(status.ok()) << when << ": " << status.error_message() << proxy.Logs();
    }
  };
  calls("4 replicas serving");
  ASSERT_GT(proxy.RequestsPerServer()[name], 0) << "round-robin never reached " << name;

  ASSERT_TRUE(leaving.server->process().Signal(SIGTERM));
  ASSERT_TRUE(proxy.WaitForServersUp(3)) << proxy.Logs();
  // Ejected for its health status, not for being gone: it still answers, and says NOT_SERVING.
  auto health = grpc::health::v1::Health::NewStub(leaving.server->Channel());
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckResponse response;
  ASSERT_TRUE(health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok());
  EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_TRUE(ClassifyAnywhere(*leaving.Stub(), "sst2").ok());
  const double sent_before = proxy.RequestsPerServer()[name];
  calls("one replica NOT_SERVING");
  EXPECT_EQ(proxy.RequestsPerServer()[name], sent_before) << proxy.Logs();
}

TEST_F(ClusterTest, ScalingThreeToFourToTwoLosesNoTask) {
  std::map<std::string, std::vector<double>> reference;
  for (int i = 0; i < 8; ++i) {
    const std::string id = "task-" + std::to_string(i);
    Create(static_cast<size_t>(i) % 3, id, i);
    reference[id] = Scores(*replicas()[0].Stub(), id);
  }
  HaproxyUnderTest proxy(dir_.path() / "haproxy", cluster_.Addresses());
  ASSERT_TRUE(proxy.started()) << proxy.Logs();
  auto stub = v1::ManyShot::NewStub(RetryingChannel(proxy.address()));
  const auto all_answer = [&](const std::string& when) {
    for (const auto& [id, scores] : reference) {
      std::vector<double> got;
      grpc::Status status = Classify(*stub, id, &got);
      ASSERT_TRUE(status.ok()) << when << " " << id << ": " << status.error_message();
      EXPECT_TRUE(SameScores(got, scores)) << when << " " << id;
    }
  };
  all_answer("3 replicas");
  std::vector<double> encodes;  // per replica, after the creates and first answers
  for (Replica& r : replicas()) encodes.push_back(r.Metric("manyshot_cache_encodes_total"));
  ASSERT_TRUE(cluster_.Add());
  ASSERT_TRUE(proxy.Reload(cluster_.Addresses())) << proxy.Logs();
  all_answer("4 replicas");
  encodes.push_back(0);
  // Down to two: stop two replicas, then take them out of the proxy.
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(replicas()[r].Metric("manyshot_cache_encodes_total"), encodes[r]) << r;
    replicas()[r].server->StopCleanly();
    replicas()[r].server.reset();
  }
  ASSERT_TRUE(proxy.Reload(cluster_.Addresses())) << proxy.Logs();
  all_answer("2 replicas");
  for (size_t r = 2; r < replicas().size(); ++r) {
    EXPECT_EQ(replicas()[r].Metric("manyshot_cache_encodes_total"), encodes[r]) << r;
    EXPECT_EQ(replicas()[r].Metric("manyshot_requests_total",
                                   {{"method", "Classify"}, {"code", "NOT_FOUND"}}),
              0);
  }
}

TEST_F(ClusterTest, AHotTaskSpillsPastTheBalanceFactor) {
  Create(0, "hot", 1);
  HaproxyUnderTest proxy(dir_.path() / "haproxy", cluster_.Addresses());
  ASSERT_TRUE(proxy.started()) << proxy.Logs();
  // Many calls of one task in flight at once: its replica carries more than 150% of the average.
  std::vector<std::thread> clients;
  std::atomic<int> failed{0};
  for (int c = 0; c < 12; ++c) {
    clients.emplace_back([&] {
      auto stub = v1::ManyShot::NewStub(RetryingChannel(proxy.address()));
      for (int i = 0; i < 6; ++i) {
        if (!Classify(*stub, "hot", nullptr, 60).ok()) failed++;
      }
    });
  }
  for (std::thread& t : clients) t.join();
  EXPECT_EQ(failed.load(), 0);
  int serving = 0;
  for (Replica& r : replicas()) {
    serving += r.Metric("manyshot_requests_total", {{"method", "Classify"}, {"code", "OK"}}) > 0;
  }
  EXPECT_GE(serving, 2) << proxy.Logs();
  EXPECT_EQ(cluster_.Sum("manyshot_cache_encodes_total"), 1);
}

}  // namespace
}  // namespace manyshot::testing
