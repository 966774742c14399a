// deploy/proxy/nginx.conf.template with a real nginx in front of three real manyshot-server
// replicas on loopback: tasks created and classified through the proxy (the manyshot CLI and a gRPC
// client, both sending x-manyshot-task) each live on exactly one replica and all their calls land
// there, tasks spread over several replicas; a replica stopped with SIGTERM answers UNAVAILABLE for
// its tasks (never NOT_FOUND from another replica, never a hang) while other tasks keep working;
// restarted on its data directory, its tasks answer with identical scores and nothing re-encoded.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/loopback_port.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/subprocess.h"
#include "tests/cluster/task_classify.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// nginx: $MANYSHOT_NGINX, else /usr/sbin/nginx, else the first on PATH; "" when there is none.
std::string NginxBinary() {
  if (const char* env = std::getenv("MANYSHOT_NGINX"); env != nullptr && *env != '\0') return env;
  std::vector<std::string> candidates = {"/usr/sbin/nginx"};
  if (const char* path = std::getenv("PATH"); path != nullptr) {
    std::string dirs = path;
    for (size_t start = 0; start <= dirs.size();) {
      size_t end = dirs.find(':', start);
      if (end == std::string::npos) end = dirs.size();
      if (end > start) candidates.push_back(dirs.substr(start, end - start) + "/nginx");
      start = end + 1;
    }
  }
  for (const std::string& candidate : candidates) {
    if (access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  return "";
}

// A real nginx running deploy/proxy/nginx.conf.template (rendered by render-nginx-conf.sh, as its
// header says) with a prefix directory of its own, in its own process group so that master and
// workers always go.
class NginxUnderTest {
 public:
  NginxUnderTest(const fs::path& prefix, const std::vector<std::string>& replicas)
      : prefix_(prefix) {
    fs::create_directories(prefix_);
    // The port is picked here and bound by nginx a moment later: try again if another process
    // took it in between.
    for (int attempt = 0; attempt < 3 && port_ == 0; ++attempt) {
      const int port = FreeLoopbackPort();
      std::vector<std::string> render = {
          "/bin/sh", std::string(MANYSHOT_SOURCE_DIR) + "/deploy/proxy/render-nginx-conf.sh",
          "127.0.0.1:" + std::to_string(port)};
      render.insert(render.end(), replicas.begin(), replicas.end());
      CommandResult rendered = RunCommand(render, prefix_);
      EXPECT_EQ(rendered.exit_status, 0) << rendered.err;
      EXPECT_EQ(rendered.out.find("${"), std::string::npos) << "an unrendered placeholder";
      for (const std::string& replica : replicas) {
        EXPECT_NE(rendered.out.find("server " + replica + " max_fails=0;"), std::string::npos);
      }
      std::ofstream(prefix_ / "nginx.conf", std::ios::trunc) << rendered.out;
      if (Start() && WaitUntilListening(port)) {
        port_ = port;
      } else {
        Stop();
      }
    }
  }
  ~NginxUnderTest() { Stop(); }
  NginxUnderTest(const NginxUnderTest&) = delete;
  NginxUnderTest& operator=(const NginxUnderTest&) = delete;

  bool started() const { return port_ > 0; }
  std::string address() const { return "127.0.0.1:" + std::to_string(port_); }
  std::string Logs() const {
    return "--- nginx stderr:\n" + ReadFile(prefix_ / "stderr.log") + "--- error.log:\n" +
           ReadFile(prefix_ / "error.log") + "--- access.log:\n" + ReadFile(prefix_ / "access.log");
  }

 private:
  bool Start() {
    const std::string nginx = NginxBinary();
    std::vector<std::string> argv = {nginx,
                                     "-p",
                                     prefix_.string() + "/",
                                     "-c",
                                     (prefix_ / "nginx.conf").string(),
                                     "-e",
                                     (prefix_ / "startup-error.log").string()};
    pid_ = StartDaemon(argv, prefix_ / "stdout.log", prefix_ / "stderr.log");
    return pid_ > 0;
  }

  // Until the proxy answers a health check (through to a replica); false when nginx exited.
  bool WaitUntilListening(int port) {
    auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(port),
                                       grpc::InsecureChannelCredentials());
    auto stub = grpc::health::v1::Health::NewStub(channel);
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        return false;
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      grpc::health::v1::HealthCheckResponse response;
      if (stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok()) {
        return true;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }

  // SIGQUIT (graceful), then SIGKILL to the whole process group.
  void Stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGQUIT);
    const auto deadline = Clock::now() + std::chrono::seconds(5);
    int status = 0;
    bool reaped = false;
    while (Clock::now() < deadline) {
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        reaped = true;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    kill(-pid_, SIGKILL);  // workers that outlived the master, or everything on timeout
    if (!reaped) waitpid(pid_, &status, 0);
    pid_ = -1;
  }

  fs::path prefix_;
  pid_t pid_ = -1;
  int port_ = 0;
};

// One manyshot-server replica with its own data directory; restartable on the same port.
struct Replica {
  fs::path data_dir;
  std::vector<std::string> flags;
  std::unique_ptr<ServerUnderTest> server;
  int port = 0;

  void Start() {
    std::vector<std::string> all = flags;
    // ServerUnderTest asks for port 0; a later --listen_address wins (absl: last one counts).
    if (port > 0) all.push_back("--listen_address=127.0.0.1:" + std::to_string(port));
    server.reset();
    server = std::make_unique<ServerUnderTest>(data_dir, all);
    if (server->started()) port = server->grpc_port();
  }
  std::string address() const { return "127.0.0.1:" + std::to_string(port); }
};

double Metric(const Replica& replica, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  auto scrape = ParsePrometheusText(HttpGet(replica.server->metrics_port(), "/metrics").body);
  EXPECT_TRUE(scrape.ok()) << scrape.status();
  if (!scrape.ok()) return -1;
  const PrometheusSample* sample = scrape->Find(name, labels);
  return sample == nullptr ? 0 : sample->value;
}

double Requests(const Replica& replica, const std::string& method, const std::string& code) {
  return Metric(replica, "manyshot_requests_total", {{"method", method}, {"code", code}});
}

std::set<std::string> TasksOn(const Replica& replica) {
  auto stub = v1::ManyShot::NewStub(replica.server->Channel());
  std::set<std::string> tasks;
  v1::ListTasksRequest request;
  do {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::ListTasksResponse page;
    grpc::Status status = stub->ListTasks(&context, request, &page);
    EXPECT_TRUE(status.ok()) << status.error_message();
    if (!status.ok()) break;
    for (const v1::Task& task : page.tasks()) tasks.insert(task.task_id());
    request.set_page_token(page.next_page_token());
  } while (!request.page_token().empty());
  return tasks;
}

// The demonstrations of task number i: a different count per task, so tasks differ in content.
std::string DemonstrationsTsv(int i) {
  static const char* kRows[][2] = {{"a stirring , funny and finally transporting film", "1"},
                                   {"apparently reassembled from the cutting-room floor", "0"},
                                   {"the performances are an absolute joy", "1"},
                                   {"one long string of cliches .", "0"},
                                   {"a gorgeous , witty , seductive movie .", "1"},
                                   {"the plot is nothing but boilerplate cliches", "0"},
                                   {"warm , funny and touching", "1"},
                                   {"a dull , dumb and derivative horror film", "0"}};
  std::string tsv = "text\tlabel\n";
  for (int row = 0; row < 4 + i % 5; ++row) {
    tsv += std::string(kRows[row % 8][0]) + "\t" + kRows[row % 8][1] + "\n";
  }
  return tsv;
}

TEST(ProxyAffinityTest, TasksStayOnTheirReplicaThroughFailureAndRestart) {
  const auto test_start = Clock::now();
  ASSERT_FALSE(NginxBinary().empty())
      << "nginx is needed for the proxy test (scripts/setup.sh installs it)";
  TempDir dir;

  // Three replicas. The first generates the default model into its data directory; the others
  // serve that same model directory, so all three answer identically.
  std::vector<Replica> replicas(3);
  for (size_t r = 0; r < replicas.size(); ++r) {
    Replica& replica = replicas[r];
    replica.data_dir = dir.path() / ("replica" + std::to_string(r)) / "data";
    replica.flags = {"--threads=1", "--shutdown_grace_seconds=2"};
    if (r > 0) {
      auto stub = v1::ManyShot::NewStub(replicas[0].server->Channel());
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
      v1::ServerInfo info;
      ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
      ASSERT_FALSE(info.model().path().empty());
      replica.flags.push_back("--model_dir=" + info.model().path());
    }
    replica.Start();
    ASSERT_TRUE(replica.server->started()) << "replica " << r << ":\n" << replica.server->Stderr();
  }
  std::vector<std::string> addresses;
  for (const Replica& replica : replicas) addresses.push_back(replica.address());

  NginxUnderTest nginx(dir.path() / "nginx", addresses);
  ASSERT_TRUE(nginx.started()) << nginx.Logs();
  auto proxy = grpc::CreateChannel(nginx.address(), grpc::InsecureChannelCredentials());
  auto stub = v1::ManyShot::NewStub(proxy);

  // A per-task call without x-manyshot-task is refused by the proxy, not sent to some replica.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ClassifyRequest request;
    request.set_task_id("task-0");
    request.add_inputs()->set_text("x");
    v1::ClassifyResponse response;
    grpc::Status status = stub->Classify(&context, request, &response);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << status.error_message();
    EXPECT_NE(status.error_message().find("x-manyshot-task"), std::string::npos)
        << status.error_message();
  }

  // Calls that name no task go to any replica; ListTasks, which would list one replica's tasks
  // only, is refused.
  {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ServerInfo info;
    grpc::Status status = stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
    EXPECT_TRUE(status.ok()) << status.error_message();
    grpc::ClientContext list_context;
    list_context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    v1::ListTasksResponse listed;
    status = stub->ListTasks(&list_context, v1::ListTasksRequest(), &listed);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION) << status.error_message();
  }

  // Tasks created through the proxy with the CLI (which sends x-manyshot-task), until they sit on
  // at least two replicas (the ring depends on the replicas' ports; 12 tasks nearly always do).
  const fs::path work = dir.path() / "cli";
  fs::create_directories(work);
  std::vector<std::string> tasks;
  std::map<std::string, size_t> home;  // task -> replica index
  for (int i = 0; i < 40; ++i) {
    const std::string task = "task-" + std::to_string(i);
    const fs::path tsv = work / (task + ".tsv");
    std::ofstream(tsv) << DemonstrationsTsv(i);
    CommandResult created =
        RunCommand({CliBinary(), "--server=" + nginx.address(), "--timeout=60", "create", task,
                    "--file=" + tsv.string(),
                    "--template=Sentence: {text}\\nLabel:", "--labels=negative,positive",
                    "--group_length=64", "--max_query_tokens=48", "--max_answer_tokens=8"},
                   work);
    ASSERT_EQ(created.exit_status, 0) << created.err << nginx.Logs();
    EXPECT_NE(created.out.find("created " + task), std::string::npos) << created.out;
    tasks.push_back(task);
    if (tasks.size() < 12) continue;
    std::set<size_t> used;
    home.clear();
    for (size_t r = 0; r < replicas.size(); ++r) {
      for (const std::string& t : TasksOn(replicas[r])) {
        EXPECT_EQ(home.count(t), 0u) << t << " exists on two replicas";
        home[t] = r;
        used.insert(r);
      }
    }
    if (used.size() >= 2) break;
  }
  // Every task exists on exactly one replica, and the tasks spread over more than one.
  ASSERT_EQ(home.size(), tasks.size());
  std::vector<size_t> per_replica(replicas.size(), 0);
  for (const auto& [task, r] : home) ++per_replica[r];
  size_t used_replicas = 0;
  for (size_t n : per_replica) used_replicas += n > 0 ? 1 : 0;
  ASSERT_GE(used_replicas, 2u);

  // Classify every task three times through the proxy; once more with the CLI for one task.
  constexpr int kRounds = 3;
  std::map<std::string, std::vector<double>> scores;
  for (int round = 0; round < kRounds; ++round) {
    for (const std::string& task : tasks) {
      std::vector<double> got;
      grpc::Status status = Classify(*stub, task, &got);
      ASSERT_TRUE(status.ok()) << task << ": " << status.error_message() << nginx.Logs();
      ASSERT_EQ(got.size(), ClassifyInputs().size() * 4);
      if (round == 0) {
        scores[task] = got;
      } else {
        EXPECT_EQ(got, scores[task]) << task;
      }
    }
  }
  std::ofstream(work / "inputs.txt") << ClassifyInputs()[0] << "\n" << ClassifyInputs()[1] << "\n";
  CommandResult cli_classify = RunCommand({CliBinary(), "--server=" + nginx.address(), "classify",
                                           tasks[0], "--file=" + (work / "inputs.txt").string()},
                                          work);
  EXPECT_EQ(cli_classify.exit_status, 0) << cli_classify.err;
  EXPECT_EQ(std::count(cli_classify.out.begin(), cli_classify.out.end(), '\n'), 2)
      << cli_classify.out;

  // Each replica served exactly its own tasks' calls: per-replica counts match the placement, and
  // no call reached a replica that lacks the task (which would answer NOT_FOUND).
  for (size_t r = 0; r < replicas.size(); ++r) {
    const double cli_calls = home[tasks[0]] == r ? 1 : 0;
    EXPECT_EQ(Requests(replicas[r], "CreateTask", "OK"), static_cast<double>(per_replica[r]))
        << "replica " << r;
    EXPECT_EQ(Requests(replicas[r], "Classify", "OK"),
              static_cast<double>(kRounds * per_replica[r]) + cli_calls)
        << "replica " << r;
    EXPECT_EQ(Requests(replicas[r], "Classify", "NOT_FOUND"), 0) << "replica " << r;
  }

  // Stop the replica with the most tasks.
  size_t victim = 0;
  for (size_t r = 1; r < replicas.size(); ++r) {
    if (per_replica[r] > per_replica[victim]) victim = r;
  }
  std::vector<std::string> lost, kept;
  for (const std::string& task : tasks) (home[task] == victim ? lost : kept).push_back(task);
  ASSERT_FALSE(lost.empty());
  ASSERT_FALSE(kept.empty());
  std::map<size_t, double> ok_before;
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (r != victim) ok_before[r] = Requests(replicas[r], "Classify", "OK");
  }
  ASSERT_TRUE(replicas[victim].server->process().Signal(SIGTERM));
  ASSERT_EQ(replicas[victim].server->process().Wait(std::chrono::seconds(30)).value_or(-1), 0)
      << replicas[victim].server->Stderr();

  // Its tasks: UNAVAILABLE (retryable), promptly. The other tasks: the same answers as before.
  for (const std::string& task : lost) {
    const auto start = Clock::now();
    grpc::Status status = Classify(*stub, task, nullptr, 20);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAVAILABLE)
        << task << ": " << status.error_message() << nginx.Logs();
    // The proxy's own answer (a gRPC status, not an HTTP error page mapped by the client).
    EXPECT_NE(
        status.error_message().find("manyshot proxy: the replica for this call is unavailable"),
        std::string::npos)
        << status.error_message();
    EXPECT_LT(Clock::now() - start, std::chrono::seconds(10)) << task;
  }
  for (const std::string& task : kept) {
    std::vector<double> got;
    grpc::Status status = Classify(*stub, task, &got);
    ASSERT_TRUE(status.ok()) << task << ": " << status.error_message() << nginx.Logs();
    EXPECT_EQ(got, scores[task]) << task;
  }
  CommandResult cli_down =
      RunCommand({CliBinary(), "--server=" + nginx.address(), "--timeout=20", "classify", lost[0],
                  "--file=" + (work / "inputs.txt").string()},
                 work);
  EXPECT_EQ(cli_down.exit_status, 1) << cli_down.out << cli_down.err;
  EXPECT_NE(cli_down.err.find("manyshot: classify: UNAVAILABLE"), std::string::npos)
      << cli_down.err;
  // The lost tasks' calls went nowhere else: the other replicas served only their own.
  for (size_t r = 0; r < replicas.size(); ++r) {
    if (r == victim) continue;
    size_t own = 0;
    for (const std::string& task : kept) own += home[task] == r ? 1 : 0;
    EXPECT_EQ(Requests(replicas[r], "Classify", "OK"), ok_before[r] + static_cast<double>(own))
        << "replica " << r;
    EXPECT_EQ(Requests(replicas[r], "Classify", "NOT_FOUND"), 0) << "replica " << r;
    EXPECT_EQ(Requests(replicas[r], "CreateTask", "OK"), static_cast<double>(per_replica[r]));
  }

  // Restart it on its data directory and port: its tasks come back, with identical scores and
  // nothing encoded again.
  replicas[victim].Start();
  ASSERT_TRUE(replicas[victim].server->started()) << replicas[victim].server->Stderr();
  ASSERT_EQ(replicas[victim].address(), addresses[victim]);
  {
    grpc::Status status;
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    do {
      status = Classify(*stub, lost[0], nullptr, 10);
      if (status.ok()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    } while (Clock::now() < deadline);
    ASSERT_TRUE(status.ok()) << status.error_message() << nginx.Logs();
  }
  std::set<std::string> back = TasksOn(replicas[victim]);
  EXPECT_EQ(back, std::set<std::string>(lost.begin(), lost.end()));
  for (const std::string& task : tasks) {
    std::vector<double> got;
    grpc::Status status = Classify(*stub, task, &got);
    ASSERT_TRUE(status.ok()) << task << ": " << status.error_message();
    EXPECT_EQ(got, scores[task]) << task;
  }
  EXPECT_EQ(Metric(replicas[victim], "manyshot_cache_encodes_total", {}), 0);
  EXPECT_EQ(Requests(replicas[victim], "Classify", "NOT_FOUND"), 0);

  std::cout << "proxy test: " << tasks.size() << " tasks on replicas [" << per_replica[0] << ", "
            << per_replica[1] << ", " << per_replica[2] << "], stopped replica " << victim
            << ", took " << std::chrono::duration<double>(Clock::now() - test_start).count()
            << " s\n";
}

}  // namespace
}  // namespace manyshot::testing
