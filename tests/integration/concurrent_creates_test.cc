// CreateTask calls of different tasks encode side by side up to --max_concurrent_creates: a small
// create finishes while a large one is still encoding, instead of waiting for its whole encode;
// with one slot it does wait (the bound holds). Ordering is observed, not timed: the large create
// is known to be encoding (its stream reported PHASE_ENCODING) when the small one starts.
#include <atomic>
#include <chrono>
#include <thread>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

// About 60,000 context tokens on the default tiny model: seconds of encoding, where the small
// create below takes milliseconds.
constexpr size_t kLargeDemonstrations = 4000;

class LargeCreate {
 public:
  explicit LargeCreate(v1::ManyShot::Stub& stub) : thread_([this, &stub] { Run(stub); }) {}
  ~LargeCreate() { Join(); }

  // Waits until the server reports that it is encoding the large task.
  bool WaitUntilEncoding() {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
    while (!encoding_ && !done_ && std::chrono::steady_clock::now() < deadline) {
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
    return encoding_;
  }
  bool done() const { return done_; }
  void Join() {
    if (thread_.joinable()) thread_.join();
  }
  const grpc::Status& status() const { return status_; }

 private:
  void Run(v1::ManyShot::Stub& stub) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
    auto stream = stub.CreateTask(&context);
    v1::CreateTaskRequest request;
    request.set_task_id("large");
    *request.mutable_spec() = Sst2Spec();
    for (const auto& d : Sst2Demonstrations(kLargeDemonstrations))
      *request.add_demonstrations() = d;
    stream->Write(request);
    stream->WritesDone();
    v1::CreateTaskResponse response;
    while (stream->Read(&response)) {
      if (response.has_progress() &&
          response.progress().phase() == v1::CreateTaskProgress::PHASE_ENCODING) {
        encoding_ = true;
      }
    }
    status_ = stream->Finish();
    done_ = true;
  }

  std::atomic<bool> encoding_{false};
  std::atomic<bool> done_{false};
  grpc::Status status_;
  std::thread thread_;
};

// Starts the large create, and once it encodes, runs a small create to its end; returns whether
// the large one had finished by then.
bool LargeDoneWhenSmallEnds(const std::vector<std::string>& flags) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", flags);
  EXPECT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  bool large_done = false;
  {
    LargeCreate large(*stub);
    EXPECT_TRUE(large.WaitUntilEncoding()) << server.Stderr();
    auto small = CreateTask(*stub, "small", Sst2Spec(), Sst2Demonstrations(4));
    large_done = large.done();
    EXPECT_TRUE(small.status.ok()) << small.status.error_message();
    large.Join();
    EXPECT_TRUE(large.status().ok()) << large.status().error_message();
  }
  return large_done;
}

TEST(ConcurrentCreatesTest, ASmallCreateDoesNotWaitForALargeOnesEncode) {
  EXPECT_FALSE(LargeDoneWhenSmallEnds({"--max_concurrent_creates=2"}));
}

TEST(ConcurrentCreatesTest, OneSlotMakesCreatesTakeTurns) {
  EXPECT_TRUE(LargeDoneWhenSmallEnds({"--max_concurrent_creates=1"}));
}

}  // namespace
}  // namespace manyshot::testing
