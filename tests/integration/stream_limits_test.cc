// The bounds on what one client can make the server hold, against the real server binary:
// StreamClassify requests being answered per stream (--max_stream_inflight) and over all streams
// (--max_server_inflight), and the bytes one CreateTask upload buffers (--max_upload_bytes). Each
// is RESOURCE_EXHAUSTED naming the limit, with RetryInfo.
//
// Deterministic without sleeps: with --batch_window_ms far beyond the test's length, queued
// single-input requests stay in flight until a batch of --max_batch_size (32) inputs forms, which
// the test triggers itself with one 30-input Classify.
#include <cstdio>
#include <fstream>
#include <set>
#include <thread>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/error_details.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

using grpc::StatusCode;

constexpr char kTask[] = "sst2";

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(120);
}

v1::ClassifyRequest Request(const std::string& id) {
  auto r = ClassifyRequestFor(kTask, {"a fine film"});
  r.set_request_id(id);
  return r;
}

void ExpectRefused(const v1::ClassifyResponse& r, const std::string& limit,
                   const std::string& reason) {
  EXPECT_EQ(r.error().code(), static_cast<int>(StatusCode::RESOURCE_EXHAUSTED))
      << r.error().message();
  EXPECT_NE(r.error().message().find(limit), std::string::npos) << r.error().message();
  const ErrorDetails d = DetailsOf(r.error());
  EXPECT_EQ(d.reason, reason);
  ASSERT_TRUE(d.retry_seconds.has_value());
  EXPECT_GT(*d.retry_seconds, 0.0);
  EXPECT_EQ(r.results_size(), 0);
}

TEST(StreamLimitsTest, InflightStreamClassifyRequestsAreBoundedPerStreamAndPerServer) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data",
                         {"--batch_window_ms=3600000", "--max_batch_size=32",
                          "--max_stream_inflight=2", "--max_server_inflight=2"});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto created = CreateTask(*stub, kTask, Sst2Spec(), Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();

  // Stream 1: a and b stay queued (a batch of 2 < 32 inputs waits); c is one too many.
  grpc::ClientContext c1;
  c1.set_deadline(Deadline());
  auto s1 = stub->StreamClassify(&c1);
  ASSERT_TRUE(s1->Write(Request("a")));
  ASSERT_TRUE(s1->Write(Request("b")));
  ASSERT_TRUE(s1->Write(Request("c")));
  v1::ClassifyResponse response;
  ASSERT_TRUE(s1->Read(&response));
  EXPECT_EQ(response.request_id(), "c");
  ExpectRefused(response, "--max_stream_inflight 2", "STREAM_INFLIGHT_LIMIT");

  // Stream 2: the server as a whole has its 2 in flight (stream 1's a and b).
  grpc::ClientContext c2;
  c2.set_deadline(Deadline());
  auto s2 = stub->StreamClassify(&c2);
  ASSERT_TRUE(s2->Write(Request("d")));
  ASSERT_TRUE(s2->Read(&response));
  EXPECT_EQ(response.request_id(), "d");
  ExpectRefused(response, "--max_server_inflight 2", "SERVER_INFLIGHT_LIMIT");

  // 30 more inputs make the batch of 32: a and b are answered, and the bounds free up.
  {
    std::vector<std::string> texts(30, "a dull film");
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ClassifyResponse classified;
    auto status = stub->Classify(&context, ClassifyRequestFor(kTask, texts), &classified);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(classified.results_size(), 30);
  }
  std::set<std::string> answered;
  for (int i = 0; i < 2; ++i) {
    ASSERT_TRUE(s1->Read(&response));
    EXPECT_EQ(response.error().code(), 0) << response.error().message();
    EXPECT_EQ(response.results_size(), 1);
    answered.insert(response.request_id());
  }
  EXPECT_EQ(answered, (std::set<std::string>{"a", "b"}));
  s1->WritesDone();
  EXPECT_FALSE(s1->Read(&response));
  EXPECT_TRUE(s1->Finish().ok());
  s2->WritesDone();
  EXPECT_FALSE(s2->Read(&response));
  EXPECT_TRUE(s2->Finish().ok());
  EXPECT_FALSE(server.process().Wait(std::chrono::milliseconds(0)).has_value()) << server.Stderr();
}

// The server's thread count from /proc (0 when unreadable).
int Threads(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("Threads:", 0) == 0) return std::stoi(line.substr(8));
  }
  return 0;
}

TEST(StreamLimitsTest, PipelinedStreamClassifyRequestsTakeNoThreadEach) {
  constexpr int kStreams = 8;
  constexpr int kPerStream = 16;  // 128 requests in flight; the old server started a thread each
  TempDir dir;
  ServerUnderTest server(dir.path() / "data",
                         {"--batch_window_ms=3600000", "--max_batch_size=256"});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto created = CreateTask(*stub, kTask, Sst2Spec(), Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  const int before = Threads(server.process().pid());
  ASSERT_GT(before, 0);

  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::ClientReaderWriter<v1::ClassifyRequest, v1::ClassifyResponse>>>
      streams;
  v1::ClassifyResponse response;
  for (int s = 0; s < kStreams; ++s) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    contexts.back()->set_deadline(Deadline());
    streams.push_back(stub->StreamClassify(contexts.back().get()));
    for (int r = 0; r < kPerStream; ++r) {
      ASSERT_TRUE(streams.back()->Write(Request(std::to_string(s) + "-" + std::to_string(r))));
    }
    // A request that fails validation is answered at once; messages are read in order, so its
    // answer proves the server has taken every request before it.
    auto marker = ClassifyRequestFor(kTask, {});
    marker.set_request_id("marker");
    ASSERT_TRUE(streams.back()->Write(marker));
    ASSERT_TRUE(streams.back()->Read(&response));
    ASSERT_EQ(response.request_id(), "marker");
  }
  const int during = Threads(server.process().pid());
  std::printf("server threads: %d idle, %d with %d requests in flight\n", before, during,
              kStreams * kPerStream);
  EXPECT_LT(during - before, 16) << before << " threads before, " << during << " with "
                                 << kStreams * kPerStream << " requests in flight";

  // Release the batch: 128 queued + 128 more inputs = --max_batch_size.
  {
    std::vector<std::string> texts(256 - kStreams * kPerStream, "a dull film");
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ClassifyResponse classified;
    auto status = stub->Classify(&context, ClassifyRequestFor(kTask, texts), &classified);
    ASSERT_TRUE(status.ok()) << status.error_message();
  }
  for (auto& stream : streams) {
    for (int r = 0; r < kPerStream; ++r) {
      ASSERT_TRUE(stream->Read(&response));
      EXPECT_EQ(response.error().code(), 0) << response.error().message();
    }
    stream->WritesDone();
    EXPECT_FALSE(stream->Read(&response));
    EXPECT_TRUE(stream->Finish().ok());
  }
}

TEST(StreamLimitsTest, OneCreateTaskUploadBuffersAtMostMaxUploadBytes) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", {"--max_upload_bytes=65536"});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  // 300 demonstrations of ~400 bytes in messages of 20: about 8 KB a message, 120 KB in all.
  auto demos = Sst2Demonstrations(300);
  for (auto& d : demos) d.set_text(std::string(400, 'x'));
  auto outcome = CreateTask(*stub, "big", Sst2Spec(), demos, false, 20);
  EXPECT_EQ(outcome.status.error_code(), StatusCode::RESOURCE_EXHAUSTED)
      << outcome.status.error_message();
  EXPECT_NE(outcome.status.error_message().find("--max_upload_bytes 65536"), std::string::npos)
      << outcome.status.error_message();
  const ErrorDetails d = DetailsOf(outcome.status);
  EXPECT_EQ(d.reason, "UPLOAD_TOO_LARGE");
  EXPECT_EQ(d.domain, "manyshot.v1");
  EXPECT_TRUE(d.retry_seconds.has_value());

  grpc::ClientContext context;
  v1::GetTaskRequest get;
  get.set_task_id("big");
  v1::Task task;
  EXPECT_EQ(stub->GetTask(&context, get, &task).error_code(), StatusCode::NOT_FOUND);
  EXPECT_FALSE(server.process().Wait(std::chrono::milliseconds(0)).has_value()) << server.Stderr();
}

// All uploads together hold at most --max_total_upload_bytes: with one upload holding most of it,
// another that would go beyond fails with UPLOADS_IN_FLIGHT_LIMIT; once the first call ends, its
// bytes are given back (manyshot_upload_bytes returns to 0) and the same upload succeeds.
TEST(StreamLimitsTest, AllUploadsTogetherHoldAtMostMaxTotalUploadBytes) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data",
                         {"--max_upload_bytes=100000", "--max_total_upload_bytes=150000"});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto held_bytes = [&] {
    auto scrape = ParsePrometheusText(HttpGet(server.metrics_port(), "/metrics").body);
    const PrometheusSample* s = scrape.ok() ? scrape->Find("manyshot_upload_bytes") : nullptr;
    return s ? s->value : -1.0;
  };
  // Upload 1: about 90 KB received, the call kept open (no half-close yet).
  grpc::ClientContext first_context;
  first_context.set_deadline(Deadline());
  auto first = stub->CreateTask(&first_context);
  v1::CreateTaskRequest head;
  head.set_task_id("first");
  *head.mutable_spec() = Sst2Spec();
  ASSERT_TRUE(first->Write(head));
  const auto demos = Sst2Demonstrations(1800);
  for (size_t i = 0; i < demos.size(); i += 100) {
    v1::CreateTaskRequest more;
    for (size_t k = i; k < i + 100; ++k) *more.add_demonstrations() = demos[k];
    ASSERT_TRUE(first->Write(more));
  }
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (held_bytes() < 70000 && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_GE(held_bytes(), 70000);

  // Upload 2: within --max_upload_bytes alone, beyond the total with upload 1.
  auto second = CreateTask(*stub, "second", Sst2Spec(), Sst2Demonstrations(1800), false, 100);
  EXPECT_EQ(second.status.error_code(), StatusCode::RESOURCE_EXHAUSTED)
      << second.status.error_message();
  EXPECT_NE(second.status.error_message().find("--max_total_upload_bytes 150000"),
            std::string::npos)
      << second.status.error_message();
  EXPECT_EQ(DetailsOf(second.status).reason, "UPLOADS_IN_FLIGHT_LIMIT");
  {
    grpc::ClientContext context;
    v1::ServerInfo info;
    ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
    EXPECT_EQ(info.limits().max_total_upload_bytes(), 150000u);
    EXPECT_EQ(info.limits().max_request_id_bytes(), 128u);
  }

  first->WritesDone();
  v1::CreateTaskResponse response;
  while (first->Read(&response)) {
  }
  EXPECT_TRUE(first->Finish().ok());
  const auto released = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (held_bytes() != 0 && std::chrono::steady_clock::now() < released) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_EQ(held_bytes(), 0);
  auto again = CreateTask(*stub, "second", Sst2Spec(), Sst2Demonstrations(1800), false, 100);
  EXPECT_TRUE(again.status.ok()) << again.status.error_message();
}

// A request_id is an identifier the answer echoes: a long one is refused at once (never held while
// queued, never echoed), on StreamClassify and on Classify, and the stream goes on.
TEST(StreamLimitsTest, LongRequestIdsAreRefusedNotHeld) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto created = CreateTask(*stub, kTask, Sst2Spec(), Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  const std::string longest(128, 'i');
  const std::string too_long(512 * 1024, 'x');

  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = stub->StreamClassify(&context);
  ASSERT_TRUE(stream->Write(Request(too_long)));
  v1::ClassifyResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.error().code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_NE(response.error().message().find("request_id has 524288 bytes, more than 128"),
            std::string::npos)
      << response.error().message().substr(0, 200);
  EXPECT_EQ(DetailsOf(response.error()).fields, std::vector<std::string>{"request_id"});
  EXPECT_TRUE(response.request_id().empty());
  EXPECT_LT(response.ByteSizeLong(), 4096u);
  ASSERT_TRUE(stream->Write(Request(longest)));
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), longest);
  EXPECT_EQ(response.error().code(), 0) << response.error().message();
  EXPECT_EQ(response.results_size(), 1);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());

  grpc::ClientContext unary;
  v1::ClassifyResponse out;
  grpc::Status status = stub->Classify(&unary, Request(too_long), &out);
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("request_id has"), std::string::npos);
}

}  // namespace
}  // namespace manyshot::testing
