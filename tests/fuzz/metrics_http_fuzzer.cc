// Fuzzes the metrics port: once per process the server's real Metrics (the /metrics HTTP server
// with the build, process and a test family) starts on 127.0.0.1 in a process that links what the
// server links (OpenBLAS and its static TLS included); each input is sent as raw bytes over a new
// TCP connection, whose sending side is then closed (so an incomplete request ends at once; the
// server may then drop it unanswered).
//
// Checked: the server closes every connection within the deadline (a hang is a failure), what it
// answers is an HTTP/1.x response, and every 64 inputs a clean GET /metrics still scrapes. A crash
// of the server is a crash of this process.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "server/metrics.h"
#include "tests/fuzz/fuzz_support.h"

namespace manyshot::fuzz {
namespace {

// Far above the server's read timeout (5 s): only a server that never closes reaches it.
constexpr int kDeadlineMs = 30000;

// Sends `raw` and returns all the server said until it closed; Fail()s when it does not close.
std::string Exchange(int port, std::string_view raw, bool half_close) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    Fail("cannot connect to the metrics port (did the server stop?)");
  }
  for (size_t sent = 0; sent < raw.size();) {
    ssize_t n = send(fd, raw.data() + sent, raw.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) break;  // the server may answer and close before reading it all
    sent += static_cast<size_t>(n);
  }
  if (half_close) shutdown(fd, SHUT_WR);
  std::string answer;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kDeadlineMs);
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
                          deadline - std::chrono::steady_clock::now())
                          .count();
    pollfd p{fd, POLLIN, 0};
    if (left <= 0 || poll(&p, 1, static_cast<int>(left)) <= 0) {
      Fail("the metrics port kept a connection open past the deadline");
    }
    char buf[65536];
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) break;
    answer.append(buf, static_cast<size_t>(n));
  }
  close(fd);
  return answer;
}

class MetricsFixture {
 public:
  MetricsFixture() {
    auto metrics = server::Metrics::Start("127.0.0.1:0");
    if (!metrics.ok()) Fail(metrics.status().ToString());
    metrics_ = *std::move(metrics);
    prometheus::BuildCounter()
        .Name("fuzz_inputs_total")
        .Help("Inputs sent.")
        .Register(metrics_->registry())
        .Add({{"label", "value with \"quotes\" and \\ and \n"}});
  }
  int port() const { return metrics_->port(); }

 private:
  std::unique_ptr<server::Metrics> metrics_;
};

void CheckStillScrapes(int port) {
  const std::string answer =
      Exchange(port, "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
               /*half_close=*/false);
  if (answer.rfind("HTTP/1.1 200", 0) != 0 ||
      answer.find("manyshot_build_info") == std::string::npos) {
    Fail(absl::StrCat("GET /metrics no longer scrapes: ", answer.substr(0, 200)));
  }
}

}  // namespace
}  // namespace manyshot::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace manyshot::fuzz;
  static auto* fixture = new MetricsFixture();  // never torn down: its threads outlive inputs
  static uint64_t inputs = 0;
  const std::string answer =
      Exchange(fixture->port(), std::string_view(reinterpret_cast<const char*>(data), size),
               /*half_close=*/true);
  if (!answer.empty() && answer.rfind("HTTP/1.", 0) != 0) {
    Fail(absl::StrCat("not an HTTP response: ", answer.substr(0, 200)));
  }
  if (++inputs % 64 == 0) CheckStillScrapes(fixture->port());
  return 0;
}
