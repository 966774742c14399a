#include "bench/bench_server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>
#include <thread>

#include "manyshot/v1/manyshot.grpc.pb.h"

extern char** environ;

namespace manyshot::bench {

namespace fs = std::filesystem;

fs::path DefaultServerBinary() {
  std::error_code ec;
  fs::path self = fs::read_symlink("/proc/self/exe", ec);
  return (self.parent_path() / ".." / "server" / "manyshot-server").lexically_normal();
}

absl::StatusOr<BenchServer> StartBenchServer(const fs::path& binary, const fs::path& dir,
                                             int threads,
                                             const std::vector<std::string>& extra_flags) {
  const fs::path port_file = dir / "ports";
  fs::remove(port_file);
  std::vector<std::string> args = {binary.string(),
                                   "--listen_address=127.0.0.1:0",
                                   "--metrics_address=127.0.0.1:0",
                                   "--port_file=" + port_file.string(),
                                   "--data_dir=" + (dir / "data").string(),
                                   "--default_tokenizer_dir=/usr/local/share/manyshot/gpt2",
                                   "--threads=" + std::to_string(threads),
                                   "--log_level=warn"};
  args.insert(args.end(), extra_flags.begin(), extra_flags.end());
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  BenchServer server;
  if (posix_spawn(&server.pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
    return absl::InternalError("cannot start " + binary.string());
  }
  for (int i = 0; i < 1800; ++i) {
    std::ifstream in(port_file);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("grpc=", 0) == 0) server.grpc_port = std::stoi(line.substr(5));
      if (line.rfind("metrics=", 0) == 0) server.metrics_port = std::stoi(line.substr(8));
    }
    if (server.grpc_port > 0) return server;
    int status = 0;
    if (waitpid(server.pid, &status, WNOHANG) == server.pid) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  kill(server.pid, SIGKILL);
  waitpid(server.pid, nullptr, 0);
  return absl::InternalError("the server did not start (no port file)");
}

v1::TaskSpec Sst2GrpcSpec(uint32_t group_length) {
  v1::TaskSpec spec;
  spec.set_input_template("Sentence: {text}\nLabel:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_group_length(group_length);
  return spec;
}

absl::Status RegisterTask(const std::shared_ptr<grpc::Channel>& channel, const std::string& task_id,
                          const v1::TaskSpec& spec, const std::vector<Example>& examples) {
  auto stub = v1::ManyShot::NewStub(channel);
  grpc::ClientContext context;
  auto stream = stub->CreateTask(&context);
  v1::CreateTaskRequest request;
  request.set_task_id(task_id);
  *request.mutable_spec() = spec;
  for (const Example& e : examples) {
    auto* d = request.add_demonstrations();
    d->set_text(e.text);
    d->set_label(e.label);
  }
  stream->Write(request);
  stream->WritesDone();
  v1::CreateTaskResponse response;
  bool created = false;
  while (stream->Read(&response)) created |= response.has_result();
  grpc::Status status = stream->Finish();
  if (!status.ok() || !created) {
    return absl::InternalError("CreateTask: " + status.error_message());
  }
  return absl::OkStatus();
}

bool StopBenchServer(const BenchServer& server) {
  kill(server.pid, SIGTERM);
  int wstatus = 0;
  waitpid(server.pid, &wstatus, 0);
  return WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0;
}

std::string ScrapeMetrics(int port) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string body;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    const std::string request = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (write(fd, request.data(), request.size()) == static_cast<ssize_t>(request.size())) {
      char buffer[65536];
      for (ssize_t n; (n = read(fd, buffer, sizeof(buffer))) > 0;) body.append(buffer, n);
    }
  }
  close(fd);
  return body;
}

double MetricValue(const std::string& body, const std::string& name) {
  std::istringstream lines(body);
  const std::string prefix = name + " ";
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind(prefix, 0) == 0) return std::stod(line.substr(prefix.size()));
  }
  return -1;
}

}  // namespace manyshot::bench
