#include "bench/bench_haproxy.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"

extern char** environ;

namespace manyshot::bench {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

std::string ReadText(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

// Two different ports free on 127.0.0.1 a moment ago: both sockets are bound at once, so the
// kernel cannot hand out the same one twice.
std::pair<int, int> TwoFreePorts() {
  int fds[2];
  int ports[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    if (bind(fds[i], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        getsockname(fds[i], reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      ports[i] = ntohs(addr.sin_port);
    }
  }
  close(fds[0]);
  close(fds[1]);
  return {ports[0], ports[1]};
}

// Reconnects within a second: a first call made before HAProxy listens must not leave the
// channel in gRPC's default backoff, which grows to minutes.
grpc::ChannelArguments FastReconnect() {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return args;
}

}  // namespace

std::shared_ptr<grpc::Channel> ProxyClientChannel(const std::string& address) {
  grpc::ChannelArguments args = FastReconnect();
  args.SetServiceConfigJSON(
      ReadText(fs::path(MANYSHOT_SOURCE_DIR) / "deploy/proxy/grpc_service_config.json"));
  args.SetInt(GRPC_ARG_ENABLE_RETRIES, 1);
  return grpc::CreateCustomChannel(address, grpc::InsecureChannelCredentials(), args);
}

absl::StatusOr<std::unique_ptr<BenchHaproxy>> BenchHaproxy::Start(
    const fs::path& dir, const std::vector<std::string>& replicas, std::chrono::seconds limit) {
  const auto deadline = Clock::now() + limit;
  std::error_code ignored;
  fs::create_directories(dir, ignored);
  absl::Status last;
  for (int attempt = 0; attempt < 3 && Clock::now() < deadline; ++attempt) {
    const auto [port, metrics_port] = TwoFreePorts();
    std::unique_ptr<BenchHaproxy> proxy(new BenchHaproxy(dir, port));
    last = proxy->Spawn(metrics_port, replicas);
    if (last.ok()) last = proxy->AwaitReady(deadline);
    if (last.ok()) return proxy;
    last = absl::Status(last.code(),
                        absl::StrCat("HAProxy on ", proxy->address(), ": ", last.message(),
                                     "\n--- haproxy.log:\n", proxy->Log()));
  }
  return last;
}

absl::Status BenchHaproxy::Spawn(int metrics_port, const std::vector<std::string>& replicas) {
  const fs::path cfg = dir_ / "haproxy.cfg";
  std::string render = absl::StrCat(
      "/bin/sh ", MANYSHOT_SOURCE_DIR,
      "/deploy/proxy/render-haproxy-cfg.sh --metrics 127.0.0.1:", metrics_port, " ", address());
  for (const std::string& r : replicas) absl::StrAppend(&render, " ", r);
  absl::StrAppend(&render, " > ", cfg.string());
  if (std::system(render.c_str()) != 0) {
    return absl::InternalError("render-haproxy-cfg.sh failed: " + render);
  }
  // Its own process group (the master and its worker stop together), default signal handling
  // and an empty signal mask: a test runner may start us with signals blocked.
  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGTERM, SIGINT, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2, SIGCHLD, SIGPIPE}) {
    sigaddset(&defaults, s);
  }
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr,
                           POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF | POSIX_SPAWN_SETPGROUP);
  posix_spawn_file_actions_t files;
  posix_spawn_file_actions_init(&files);
  const std::string log = (dir_ / "haproxy.log").string();
  posix_spawn_file_actions_addopen(&files, 0, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&files, 1, log.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
  posix_spawn_file_actions_adddup2(&files, 1, 2);
  std::vector<std::string> argv = {"/usr/sbin/haproxy", "-W", "-db", "-f", cfg.string()};
  std::vector<char*> args;
  for (std::string& a : argv) args.push_back(a.data());
  args.push_back(nullptr);
  const int error = posix_spawn(&pid_, args[0], &files, &attr, args.data(), environ);
  posix_spawn_file_actions_destroy(&files);
  posix_spawnattr_destroy(&attr);
  if (error != 0) {
    pid_ = -1;
    return absl::InternalError(absl::StrCat("cannot start /usr/sbin/haproxy: error ", error));
  }
  return absl::OkStatus();
}

absl::Status BenchHaproxy::AwaitReady(Clock::time_point deadline) {
  auto health = grpc::health::v1::Health::NewStub(
      grpc::CreateCustomChannel(address(), grpc::InsecureChannelCredentials(), FastReconnect()));
  std::string last = "no answer yet";
  while (Clock::now() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat("haproxy exited (wait status ", status, ")"));
    }
    grpc::ClientContext context;
    context.set_wait_for_ready(true);
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
    grpc::health::v1::HealthCheckResponse response;
    const grpc::Status call =
        health->Check(&context, grpc::health::v1::HealthCheckRequest(), &response);
    if (call.ok() && response.status() == grpc::health::v1::HealthCheckResponse::SERVING) {
      return absl::OkStatus();
    }
    last = call.ok() ? "a replica is not SERVING" : call.error_message();
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return absl::DeadlineExceededError("no health check went through it: " + last);
}

std::string BenchHaproxy::Log() const {
  const std::string log = ReadText(dir_ / "haproxy.log");
  constexpr size_t kTail = 4096;
  return log.size() <= kTail ? log : "..." + log.substr(log.size() - kTail);
}

void BenchHaproxy::Stop() {
  if (pid_ <= 0) return;
  kill(-pid_, SIGTERM);
  int status = 0;
  for (int i = 0; i < 50; ++i) {
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(-pid_, SIGKILL);
  waitpid(pid_, &status, 0);
  pid_ = -1;
}

BenchHaproxy::~BenchHaproxy() { Stop(); }

}  // namespace manyshot::bench
