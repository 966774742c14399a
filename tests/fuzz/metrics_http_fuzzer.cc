// Fuzzes the metrics port: once per process the server's real Metrics (the /metrics HTTP server
// with the build, process and a test family) starts on 127.0.0.1 in a process that links what the
// server links (OpenBLAS and its static TLS included); each input is sent as raw bytes over a new
// TCP connection, whose sending side is then closed (so an incomplete request ends at once; the
// server may then drop it unanswered).
//
// Checked: the server closes every connection within the deadline (a hang is a failure), what it
// answers is an HTTP/1.x response, and every 64 inputs a clean GET /metrics still scrapes. A crash
// of the server is a crash of this process.
#include <chrono>
#include <memory>
#include <string>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "prometheus/counter.h"
#include "server/metrics.h"
#include "testing/harness/server_under_test.h"
#include "tests/fuzz/fuzz_support.h"

namespace manyshot::fuzz {
namespace {

// Far above the server's read timeout (5 s): only a server that never closes reaches it.
constexpr std::chrono::seconds kDeadline{30};

// Sends `raw` and returns all the server said until it closed; Fail()s when it does not close.
std::string Exchange(int port, std::string_view raw, bool half_close) {
  std::string why;
  auto answer = testing::HttpExchange(port, raw, half_close, kDeadline, &why);
  if (!answer) Fail(absl::StrCat("the metrics port: ", why));
  return *std::move(answer);
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
