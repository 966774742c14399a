// Open streams are bounded against the real server binary: StreamClassify and CreateTask streams
// per tenant (--max_streams_per_tenant: the stream beyond ends at once with RESOURCE_EXHAUSTED),
// streams per connection (--max_streams_per_connection: HTTP/2 makes the client queue the rest),
// and a stream that does nothing for --stream_idle_timeout_seconds is closed with UNAVAILABLE
// (an idle upload gives back what it held) while a busy one is not.
#include <atomic>
#include <chrono>
#include <memory>
#include <thread>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/error_details.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

using Clock = std::chrono::steady_clock;
using grpc::StatusCode;
constexpr char kTask[] = "sst2";

using ClassifyStream = grpc::ClientReaderWriter<v1::ClassifyRequest, v1::ClassifyResponse>;

// A StreamClassify call with its own context.
struct OpenStream {
  explicit OpenStream(v1::ManyShot::Stub& stub) {
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
    stream = stub.StreamClassify(&context);
  }
  // Sends one request and reads its answer; false when the stream ended instead.
  bool RoundTrip(const std::string& id) {
    auto request = ClassifyRequestFor(kTask, {"a fine film"});
    request.set_request_id(id);
    v1::ClassifyResponse response;
    return stream->Write(request) && stream->Read(&response) && response.request_id() == id &&
           !response.has_error();
  }
  grpc::Status Close() {
    stream->WritesDone();
    v1::ClassifyResponse ignored;
    while (stream->Read(&ignored)) {
    }
    return stream->Finish();
  }
  grpc::ClientContext context;
  std::unique_ptr<ClassifyStream> stream;
};

class StreamBoundsTest : public ::testing::Test {
 protected:
  void Start(std::vector<std::string> flags) {
    server_ = std::make_unique<ServerUnderTest>(dir_.path() / "data", std::move(flags));
    ASSERT_TRUE(server_->started()) << server_->Stderr();
    stub_ = v1::ManyShot::NewStub(server_->Channel());
    auto created = CreateTask(*stub_, kTask, Sst2Spec(), Sst2Demonstrations());
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  }
  double Gauge(const std::string& name) {
    auto scrape = ParsePrometheusText(HttpGet(server_->metrics_port(), "/metrics").body);
    if (!scrape.ok()) return -1;
    const PrometheusSample* s = scrape->Find(name, {});
    return s ? s->value : -1;
  }
  TempDir dir_;
  std::unique_ptr<ServerUnderTest> server_;
  std::unique_ptr<v1::ManyShot::Stub> stub_;
};

TEST_F(StreamBoundsTest, StreamsPerTenantAreBoundedAndFreedWhenOneCloses) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max_streams_per_tenant=2"}));
  grpc::ClientContext ic;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&ic, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.limits().max_streams_per_tenant(), 2u);
  // Start's CreateTask stream gave its slot back before the client saw it end.
  OpenStream a(*stub_), b(*stub_);
  ASSERT_TRUE(a.RoundTrip("a1"));
  ASSERT_TRUE(b.RoundTrip("b1"));
  {
    OpenStream c(*stub_);
    EXPECT_FALSE(c.RoundTrip("c1"));
    const grpc::Status refused = c.stream->Finish();
    EXPECT_EQ(refused.error_code(), StatusCode::RESOURCE_EXHAUSTED);
    EXPECT_NE(refused.error_message().find("--max_streams_per_tenant 2"), std::string::npos)
        << refused.error_message();
    EXPECT_EQ(DetailsOf(refused).reason, "STREAMS_PER_TENANT_LIMIT");
  }
  // A CreateTask stream counts too.
  auto create = CreateTask(*stub_, "other", Sst2Spec(), Sst2Demonstrations());
  EXPECT_EQ(create.status.error_code(), StatusCode::RESOURCE_EXHAUSTED);
  // Unary calls do not.
  v1::ClassifyResponse unary;
  grpc::ClientContext uc;
  EXPECT_TRUE(stub_->Classify(&uc, ClassifyRequestFor(kTask, {"fine"}), &unary).ok());
  ASSERT_TRUE(a.Close().ok());
  // The closed stream's slot is back by the time its client has seen the end.
  OpenStream d(*stub_);
  EXPECT_TRUE(d.RoundTrip("d1"));
  EXPECT_TRUE(d.Close().ok());
  EXPECT_TRUE(b.RoundTrip("b2"));
  EXPECT_TRUE(b.Close().ok());
}

TEST_F(StreamBoundsTest, AConnectionHasAtMostItsStreamsOpenAndTheRestWait) {
  ASSERT_NO_FATAL_FAILURE(Start({"--max_streams_per_connection=1"}));
  auto channel = server_->Channel();  // one connection for both streams
  auto stub = v1::ManyShot::NewStub(channel);
  OpenStream a(*stub);
  ASSERT_TRUE(a.RoundTrip("a1"));
  std::atomic<bool> answered{false};
  std::thread waiting([&] {
    OpenStream b(*stub);
    answered = b.RoundTrip("b1");
    b.Close().IgnoreError();
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  EXPECT_FALSE(answered) << "a second stream ran beside the first on one connection";
  ASSERT_TRUE(a.Close().ok());
  waiting.join();
  EXPECT_TRUE(answered);
}

TEST_F(StreamBoundsTest, AnIdleStreamIsClosedAndABusyOneIsNot) {
  ASSERT_NO_FATAL_FAILURE(Start({"--stream_idle_timeout_seconds=2"}));
  OpenStream idle(*stub_);
  ASSERT_TRUE(idle.RoundTrip("i1"));
  const auto quiet_since = Clock::now();
  std::atomic<bool> busy_ok{true};
  std::thread busy([&] {
    OpenStream stream(*stub_);
    for (int i = 0; i < 30; ++i) {  // a request every 150 ms for about 4.5 s
      if (!stream.RoundTrip("b" + std::to_string(i))) busy_ok = false;
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
    }
    if (!stream.Close().ok()) busy_ok = false;
  });
  v1::ClassifyResponse none;
  EXPECT_FALSE(idle.stream->Read(&none));  // returns when the server closes the stream
  const double waited = std::chrono::duration<double>(Clock::now() - quiet_since).count();
  const grpc::Status closed = idle.stream->Finish();
  EXPECT_EQ(closed.error_code(), StatusCode::UNAVAILABLE) << closed.error_message();
  EXPECT_NE(closed.error_message().find("--stream_idle_timeout_seconds"), std::string::npos)
      << closed.error_message();
  EXPECT_EQ(DetailsOf(closed).reason, "STREAM_IDLE");
  EXPECT_GE(waited, 1.5);
  busy.join();
  EXPECT_TRUE(busy_ok) << "a stream with a request every 150 ms was closed as idle";
}

TEST_F(StreamBoundsTest, AnIdleUploadIsClosedAndGivesBackWhatItHeld) {
  ASSERT_NO_FATAL_FAILURE(Start({"--stream_idle_timeout_seconds=1"}));
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(2));
  auto stream = stub_->CreateTask(&context);
  v1::CreateTaskRequest first;
  first.set_task_id("stalled");
  *first.mutable_spec() = Sst2Spec();
  for (const auto& d : Sst2Demonstrations(100)) *first.add_demonstrations() = d;
  ASSERT_TRUE(stream->Write(first));
  v1::CreateTaskResponse response;
  while (stream->Read(&response)) {  // progress, then the server closes the idle upload
  }
  const grpc::Status closed = stream->Finish();
  EXPECT_EQ(closed.error_code(), StatusCode::UNAVAILABLE) << closed.error_message();
  EXPECT_NE(closed.error_message().find("--stream_idle_timeout_seconds"), std::string::npos);
  double held = -1;
  for (int i = 0; i < 200 && held != 0; ++i) {
    held = Gauge("manyshot_upload_bytes");
    if (held != 0) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(held, 0);
  grpc::ClientContext gc;
  v1::GetTaskRequest get;
  get.set_task_id("stalled");
  v1::Task task;
  EXPECT_EQ(stub_->GetTask(&gc, get, &task).error_code(), StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace manyshot::testing
