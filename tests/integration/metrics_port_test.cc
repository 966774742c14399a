// The metrics port faces whatever reaches it: Prometheus, browsers, blackbox probes, scanners.
// Every path but /metrics answers 404, malformed requests get an HTTP error or a closed
// connection, and the server keeps serving gRPC and /metrics through a stream of mutated requests.
#include <random>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"

namespace manyshot::testing {
namespace {

class MetricsPortTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerUnderTest>(dir_.path() / "data", std::vector<std::string>{});
    ASSERT_TRUE(server_->started()) << server_->Stderr();
  }

  // The server still runs, /metrics still scrapes and gRPC health still answers SERVING.
  void ExpectStillServing() {
    ASSERT_FALSE(server_->process().Wait(std::chrono::milliseconds(0)).has_value())
        << "the server exited:\n"
        << server_->Stderr();
    HttpResponse metrics = HttpGet(server_->metrics_port(), "/metrics");
    ASSERT_EQ(metrics.status, 200);
    auto scrape = ParsePrometheusText(metrics.body);
    ASSERT_TRUE(scrape.ok()) << scrape.status();
    EXPECT_NE(scrape->Find("manyshot_build_info"), nullptr);
    auto stub = grpc::health::v1::Health::NewStub(server_->Channel());
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckResponse response;
    ASSERT_TRUE(stub->Check(&context, {}, &response).ok());
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }

  TempDir dir_;
  std::unique_ptr<ServerUnderTest> server_;
};

TEST_F(MetricsPortTest, EveryOtherPathAnswers404) {
  const std::vector<std::string> paths = {
      "/",         "/healthz",        "/favicon.ico",
      "/metrics/", "/metricsx",       "/../../etc/passwd",
      "/%00",      "/index.html?x=1", "/" + std::string(6000, 'a')};
  for (const std::string& path : paths) {
    HttpResponse response = HttpGet(server_->metrics_port(), path);
    EXPECT_EQ(response.status, 404) << path.substr(0, 40);
    // A fixed answer: nothing of the request is echoed.
    EXPECT_EQ(response.body, "not found: this port serves only /metrics\n");
  }
  ExpectStillServing();
}

TEST_F(MetricsPortTest, MalformedAndOversizedRequestsGetAnErrorOrAClose) {
  const std::vector<std::string> requests = {
      "",
      "\r\n\r\n",
      "GARBAGE\r\n\r\n",
      "GET\r\n\r\n",
      "BREW /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n\r\nhello",
      "POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 99999999999\r\n\r\n",
      "GET /metrics HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
      "GET /metrics HTTP/1.1\r\n" + std::string(100000, 'X') + "\r\n\r\n",
      "GET /" + std::string(100000, 'p') + " HTTP/1.1\r\n\r\n",
      "GET /metrics HTTP/9.9\r\n\r\n",
      // Pipelined: the metrics server answers the first (HTTP pipelining is not supported).
      "GET /nothing HTTP/1.1\r\nHost: x\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
      std::string("GET /metrics\0 HTTP/1.1\r\n\r\n", 26),
  };
  for (const std::string& request : requests) {
    auto answer = HttpExchange(server_->metrics_port(), request, /*half_close=*/false);
    ASSERT_TRUE(answer.has_value()) << "no close for: " << request.substr(0, 40);
    if (!answer->empty()) {
      EXPECT_EQ(answer->rfind("HTTP/1.", 0), 0u) << answer->substr(0, 80);
    }
  }
  ExpectStillServing();
}

// Random edits of well-formed requests (a fixed seed, so a failure reproduces), each followed by
// a half-close so that an incomplete request ends at once.
TEST_F(MetricsPortTest, SurvivesAStreamOfMutatedRequests) {
  const std::vector<std::string> seeds = {
      "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAccept: */*\r\n\r\n", "GET / HTTP/1.0\r\n\r\n",
      "HEAD /favicon.ico HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\n\r\n",
      "POST /metrics HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody",
      "GET /metrics HTTP/1.1\r\nRange: bytes=0-10,20-\r\nAccept-Encoding: gzip, br\r\n\r\n"};
  std::mt19937_64 rng(20261128);
  for (int i = 0; i < 400; ++i) {
    std::string request = seeds[rng() % seeds.size()];
    for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
      const size_t at = rng() % (request.size() + 1);
      switch (rng() % 4) {
        case 0:
          if (at < request.size()) request[at] = static_cast<char>(rng());
          break;
        case 1:
          request.insert(at, std::string(1 + rng() % 64, static_cast<char>(rng())));
          break;
        case 2:
          request.erase(at, rng() % 16);
          break;
        default:
          request.insert(at, request.substr(0, rng() % (request.size() + 1)));
      }
    }
    auto answer = HttpExchange(server_->metrics_port(), request, /*half_close=*/true);
    ASSERT_TRUE(answer.has_value()) << "request " << i << " got no close";
    if (!answer->empty()) {
      EXPECT_EQ(answer->rfind("HTTP/1.", 0), 0u) << "request " << i << ": " << *answer;
    }
    // Every 50 requests, one that must be answered in full.
    if (i % 50 == 49) ExpectStillServing();
  }
  ExpectStillServing();
}

}  // namespace
}  // namespace manyshot::testing
