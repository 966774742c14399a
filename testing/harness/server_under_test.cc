#include "testing/harness/server_under_test.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <thread>

#include "absl/strings/str_cat.h"
#include "grpcpp/create_channel.h"
#include "gtest/gtest.h"

namespace manyshot::testing {

namespace {

// MANYSHOT_TEST_BIN_DIR/name where the environment sets it (a bundle's bin/, tools/gpu), else the
// build tree's path.
std::string TestBinary(const char* build_path, const char* name) {
  if (const char* dir = std::getenv("MANYSHOT_TEST_BIN_DIR"); dir != nullptr && *dir != 0) {
    return std::string(dir) + "/" + name;
  }
  return std::string(MANYSHOT_BINARY_DIR) + "/" + build_path;
}

}  // namespace

std::string ServerBinary() { return TestBinary("server/manyshot-server", "manyshot-server"); }
std::string CliBinary() { return TestBinary("client/manyshot", "manyshot"); }

ServerUnderTest::ServerUnderTest(const std::filesystem::path& data_dir,
                                 const std::vector<std::string>& extra_flags,
                                 std::chrono::seconds startup_timeout) {
  std::filesystem::create_directories(data_dir);
  auto port_file = data_dir.parent_path() / (data_dir.filename().string() + ".ports");
  std::filesystem::remove(port_file);
  stderr_path_ = data_dir.parent_path() / (data_dir.filename().string() + ".stderr");
  std::vector<std::string> argv = {
      ServerBinary(), "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
      "--data_dir=" + data_dir.string(), "--port_file=" + port_file.string(),
      // The GPT-2 files the default model is generated from (extra_flags may override it).
      std::string("--default_tokenizer_dir=") + MANYSHOT_GPT2_TOKENIZER_DIR};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  process_ =
      std::make_unique<Subprocess>(argv, data_dir.parent_path() / "server.stdout", stderr_path_);
  auto deadline = std::chrono::steady_clock::now() + startup_timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (std::filesystem::exists(port_file)) {
      std::istringstream in(ReadFile(port_file));
      for (std::string line; std::getline(in, line);) {
        if (line.rfind("grpc=", 0) == 0) grpc_port_ = std::stoi(line.substr(5));
        if (line.rfind("metrics=", 0) == 0) metrics_port_ = std::stoi(line.substr(8));
      }
      return;
    }
    if (process_->Wait(std::chrono::milliseconds(0))) return;  // exited early: not started
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

std::shared_ptr<grpc::Channel> ServerUnderTest::Channel() const {
  return grpc::CreateChannel(address(), grpc::InsecureChannelCredentials());
}

namespace {

// connect() that a signal does not break (libFuzzer's timers interrupt it with EINTR, after which
// the connection completes on its own): waits for it, then takes its outcome.
bool ConnectThroughSignals(int fd, const sockaddr_in& addr) {
  if (connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0) return true;
  if (errno != EINTR) return false;
  for (;;) {
    pollfd p{fd, POLLOUT, 0};
    const int ready = poll(&p, 1, -1);
    if (ready < 0 && errno == EINTR) continue;
    if (ready < 0) return false;
    int error = 0;
    socklen_t size = sizeof(error);
    if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) != 0) return false;
    errno = error;
    return error == 0;
  }
}

}  // namespace

std::optional<std::string> HttpExchange(int port, std::string_view raw, bool half_close,
                                        std::chrono::milliseconds limit, std::string* why) {
  auto fail = [&](const std::string& what) -> std::optional<std::string> {
    if (why != nullptr) *why = what;
    return std::nullopt;
  };
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || !ConnectThroughSignals(fd, addr)) {
    const std::string error = std::strerror(errno);
    if (fd >= 0) close(fd);
    return fail("cannot connect: " + error);
  }
  // The server may answer and close before reading everything (a refused body): a failed write
  // is not an error, and MSG_NOSIGNAL keeps a reset connection from raising SIGPIPE.
  for (size_t sent = 0; sent < raw.size();) {
    ssize_t n = send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    sent += static_cast<size_t>(n);
  }
  if (half_close) shutdown(fd, SHUT_WR);
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    pollfd p{fd, POLLIN, 0};
    const int ready = left.count() <= 0 ? 0 : poll(&p, 1, static_cast<int>(left.count()));
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) {
      close(fd);
      return fail(absl::StrCat("not closed after ", limit.count(), " ms (", answer.size(),
                               " bytes answered)"));
    }
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;  // closed (or reset)
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

HttpResponse HttpGet(int port, const std::string& path) {
  HttpResponse response;
  auto raw = HttpExchange(port, "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n",
                          /*half_close=*/false);
  if (!raw) return response;
  auto header_end = raw->find("\r\n\r\n");
  if (header_end == std::string::npos) return response;
  std::istringstream headers(raw->substr(0, header_end));
  std::string http_version;
  headers >> http_version >> response.status;
  for (std::string line; std::getline(headers, line);) {
    if (line.rfind("Content-Type:", 0) == 0) response.content_type = line.substr(14);
  }
  response.body = raw->substr(header_end + 4);
  return response;
}

void ServerUnderTest::StopCleanly() {
  ASSERT_TRUE(process_->Signal(SIGTERM));
  auto status = process_->Wait(kExitLimit);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 0) << Stderr();
}

}  // namespace manyshot::testing
