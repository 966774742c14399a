#include "tests/cluster/cluster_harness.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"
#include "testing/harness/loopback_port.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/subprocess.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// HAProxy's exporter answers in chunked encoding even to HTTP/1.0: the body without it.
std::string Dechunked(const std::string& body) {
  std::string out;
  size_t pos = 0;
  while (pos < body.size()) {
    const size_t eol = body.find("\r\n", pos);
    if (eol == std::string::npos) break;
    const size_t size = std::stoul(body.substr(pos, eol - pos), nullptr, 16);
    if (size == 0) break;
    out.append(body, eol + 2, size);
    pos = eol + 2 + size + 2;
  }
  return out;
}

// HAProxy's own metrics, parsed.
absl::StatusOr<PrometheusScrape> ScrapeHaproxy(int port) {
  return ParsePrometheusText(Dechunked(HttpGet(port, "/metrics").body));
}

}  // namespace

std::string HaproxyBinary() {
  if (const char* env = std::getenv("MANYSHOT_HAPROXY"); env != nullptr && *env != '\0') {
    return env;
  }
  return access("/usr/sbin/haproxy", X_OK) == 0 ? "/usr/sbin/haproxy" : "";
}

HaproxyUnderTest::HaproxyUnderTest(const fs::path& dir, const std::vector<std::string>& replicas)
    : dir_(dir) {
  fs::create_directories(dir_);
  // The ports are picked here and bound by HAProxy a moment later: try again if another process
  // took one in between.
  for (int attempt = 0; attempt < 3 && port_ == 0; ++attempt) {
    port_ = FreeLoopbackPort();
    metrics_port_ = FreeLoopbackPort();
    if (!Render(replicas) || !Start()) {
      Stop();
      port_ = 0;
      continue;
    }
    // Up once it answers a health check through to a replica.
    auto stub = grpc::health::v1::Health::NewStub(
        grpc::CreateChannel(address(), grpc::InsecureChannelCredentials()));
    bool up = false;
    for (const auto deadline = Clock::now() + std::chrono::seconds(30);
         !up && Clock::now() < deadline;) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
      grpc::health::v1::HealthCheckResponse response;
      up = stub->Check(&context, grpc::health::v1::HealthCheckRequest(), &response).ok();
      if (!up) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!up) {
      Stop();
      port_ = 0;
    }
  }
}

HaproxyUnderTest::~HaproxyUnderTest() { Stop(); }

bool HaproxyUnderTest::Render(const std::vector<std::string>& replicas) {
  std::vector<std::string> render = {
      "/bin/sh", std::string(MANYSHOT_SOURCE_DIR) + "/deploy/proxy/render-haproxy-cfg.sh",
      "--metrics", "127.0.0.1:" + std::to_string(metrics_port_),
      "127.0.0.1:" + std::to_string(port_)};
  render.insert(render.end(), replicas.begin(), replicas.end());
  CommandResult rendered = RunCommand(render, dir_);
  EXPECT_EQ(rendered.exit_status, 0) << rendered.err;
  std::ofstream(dir_ / "haproxy.cfg", std::ios::trunc) << rendered.out;
  return rendered.exit_status == 0;
}

bool HaproxyUnderTest::Start() {
  const fs::path log = dir_ / "haproxy.log";
  pid_ =
      StartDaemon({HaproxyBinary(), "-W", "-db", "-f", (dir_ / "haproxy.cfg").string()}, log, log);
  return pid_ > 0;
}

void HaproxyUnderTest::Stop() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGKILL);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

bool HaproxyUnderTest::Reload(const std::vector<std::string>& replicas) {
  if (!Render(replicas)) return false;
  return kill(pid_, SIGUSR2) == 0 && WaitForServersUp(replicas.size());
}

std::map<std::string, bool> HaproxyUnderTest::ServersUp() const {
  std::map<std::string, bool> up;
  auto scrape = ScrapeHaproxy(metrics_port_);
  if (!scrape.ok()) return up;
  for (const PrometheusSample& s : scrape->samples) {
    if (s.name != "haproxy_server_status") continue;
    auto state = s.labels.find("state");
    if (state != s.labels.end() && state->second == "UP") up[s.labels.at("server")] = s.value == 1;
  }
  return up;
}

bool HaproxyUnderTest::WaitForServersUp(size_t want, std::chrono::seconds limit) const {
  for (const auto deadline = Clock::now() + limit; Clock::now() < deadline;) {
    const auto servers = ServersUp();
    size_t up = 0;
    for (const auto& [name, is_up] : servers) up += is_up ? 1 : 0;
    if (up == want) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return false;
}

std::map<std::string, double> HaproxyUnderTest::RequestsPerServer() const {
  std::map<std::string, double> requests;
  auto scrape = ScrapeHaproxy(metrics_port_);
  if (!scrape.ok()) return requests;
  for (const PrometheusSample& s : scrape->samples) {
    if (s.name == "haproxy_server_http_responses_total") requests[s.labels.at("server")] += s.value;
  }
  return requests;
}

std::string HaproxyUnderTest::Logs() const {
  return "--- haproxy.log:\n" + ReadFile(dir_ / "haproxy.log");
}

bool Replica::Start() {
  server.reset();
  server = std::make_unique<ServerUnderTest>(data_dir, flags);
  return server->started();
}

double Replica::Metric(const std::string& name,
                       const std::map<std::string, std::string>& labels) const {
  auto scrape = ParsePrometheusText(HttpGet(server->metrics_port(), "/metrics").body);
  EXPECT_TRUE(scrape.ok()) << scrape.status();
  if (!scrape.ok()) return -1;
  const PrometheusSample* sample = scrape->Find(name, labels);
  return sample == nullptr ? 0 : sample->value;
}

std::unique_ptr<v1::ManyShot::Stub> Replica::Stub() const {
  return v1::ManyShot::NewStub(server->Channel());
}

bool Cluster::Add(const std::vector<std::string>& extra_flags) {
  Replica replica;
  replica.data_dir = root_ / ("replica" + std::to_string(replicas_.size())) / "data";
  replica.flags = {"--threads=1", "--shutdown_grace_seconds=2",
                   "--shared_dir=" + shared_dir().string()};
  if (!model_dir_.empty()) replica.flags.push_back("--model_dir=" + model_dir_);
  replica.flags.insert(replica.flags.end(), extra_flags.begin(), extra_flags.end());
  if (!replica.Start()) {
    ADD_FAILURE() << "replica " << replicas_.size() << ":\n" << replica.server->Stderr();
    return false;
  }
  if (model_dir_.empty()) {
    auto stub = replica.Stub();
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(20));
    v1::ServerInfo info;
    if (!stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok()) return false;
    model_dir_ = info.model().path();
  }
  replicas_.push_back(std::move(replica));
  return true;
}

std::vector<std::string> Cluster::Addresses() const {
  std::vector<std::string> addresses;
  for (const Replica& r : replicas_) {
    if (r.server) addresses.push_back(r.address());
  }
  return addresses;
}

double Cluster::Sum(const std::string& name) const {
  double sum = 0;
  for (const Replica& r : replicas_) {
    if (r.server) sum += r.Metric(name);
  }
  return sum;
}

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
    tsv += std::string(kRows[(row + i) % 8][0]) + "\t" + kRows[(row + i) % 8][1] + "\n";
  }
  return tsv;
}

CommandResult CreateWithCli(const std::string& server, const std::string& id, int variant,
                            const fs::path& work, bool replace) {
  fs::create_directories(work);
  const fs::path tsv = work / (id + "-" + std::to_string(variant) + ".tsv");
  std::ofstream(tsv) << DemonstrationsTsv(variant);
  std::vector<std::string> argv = {CliBinary(),
                                   "--server=" + server,
                                   "--timeout=60",
                                   "create",
                                   id,
                                   "--file=" + tsv.string(),
                                   "--template=Sentence: {text}\\nLabel:",
                                   "--labels=negative,positive",
                                   "--group_length=64",
                                   "--max_query_tokens=48",
                                   "--max_answer_tokens=8"};
  if (replace) argv.push_back("--replace");
  return RunCommand(argv, work);
}

std::shared_ptr<grpc::Channel> RetryingChannel(const std::string& address) {
  grpc::ChannelArguments args;
  args.SetServiceConfigJSON(
      ReadFile(fs::path(MANYSHOT_SOURCE_DIR) / "deploy/proxy/grpc_service_config.json"));
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

bool SameScores(const std::vector<double>& a, const std::vector<double>& b, double tolerance) {
  if (a.size() != b.size() || a.empty()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::abs(a[i] - b[i]) > tolerance) return false;
  }
  return true;
}

}  // namespace manyshot::testing
