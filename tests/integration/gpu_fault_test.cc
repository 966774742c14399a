// A GPU fault stops the replica instead of poisoning it, on testing/simt's emulated CUDA plugin:
// a kernel that faults (an injected illegal address: SIMT_FAULT_FILE, testing/simt/README.md) kills
// the emulated context as it kills a real one, the call that hit it fails INTERNAL naming the
// error, gRPC health turns NOT_SERVING, the log says why, and the server drains and exits with
// status 3 (server/device_watch.h), so an orchestrator restarts it; the restarted replica serves
// the same task again from its store. An out-of-memory in the middle of a batch is not a fault:
// that request fails RESOURCE_EXHAUSTED and the replica keeps serving.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "grpc/health/v1/health.grpc.pb.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;
using grpc::health::v1::HealthCheckResponse;

std::vector<std::string> EmulatedGpuFlags() {
  return {"--threads=1", "--backend=cuda", "--compute_dtype=f32", "--kv_dtype=f32",
          "--weight_dtype=f32"};
}

grpc::Status Classify(const ServerUnderTest& server, v1::ClassifyResponse* response) {
  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext context;
  return stub->Classify(&context, ClassifyRequestFor("a", {"a delightful film"}), response);
}

// Both tests run a server on the emulated CUDA plugin: a build without the CUDA backend skips them.
class GpuFaultTest : public ::testing::Test {
 protected:
  void SetUp() override {
#if !MANYSHOT_CUDA_ENABLED
    GTEST_SKIP() << "this build has no CUDA backend (no nvcc at configure time): nothing loads a "
                    "CUDA plugin";
#endif
  }
};

TEST_F(GpuFaultTest, AStickyFaultTurnsHealthNotServingAndTheServerExitsNonZero) {
  TempDir dir;
  const fs::path fault_file = dir.path() / "fault";
  ScopedEmulatedCudaPlugin emulation(MANYSHOT_CUDA_SIMT_PLUGIN);
  ScopedEnv inject("SIMT_FAULT_FILE", fault_file.c_str());
  const fs::path data = dir.path() / "data";
  double served_before = 0;
  {
    ServerUnderTest gpu(data, EmulatedGpuFlags());
    ASSERT_TRUE(gpu.started()) << gpu.Stderr();
    auto stub = v1::ManyShot::NewStub(gpu.Channel());
    auto created = CreateTask(*stub, "a", Sst2Spec(), Sst2Demonstrations(4));
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
    v1::ClassifyResponse before;
    ASSERT_TRUE(Classify(gpu, &before).ok());
    served_before = before.results(0).scores(0).sum_logprob();

    // Health is watched from before the fault, so its change is seen whatever comes after.
    auto health = grpc::health::v1::Health::NewStub(gpu.Channel());
    grpc::ClientContext watch_context;
    auto watch = health->Watch(&watch_context, grpc::health::v1::HealthCheckRequest());
    HealthCheckResponse status;
    ASSERT_TRUE(watch->Read(&status));
    EXPECT_EQ(status.status(), HealthCheckResponse::SERVING);

    std::ofstream(fault_file) << "fault\n";  // every kernel launched from now on faults
    v1::ClassifyResponse after;
    const grpc::Status failed = Classify(gpu, &after);
    EXPECT_EQ(failed.error_code(), grpc::StatusCode::INTERNAL) << failed.error_message();
    EXPECT_NE(failed.error_message().find("illegal memory access"), std::string::npos)
        << failed.error_message();

    bool not_serving = false;
    while (!not_serving && watch->Read(&status)) {
      not_serving = status.status() == HealthCheckResponse::NOT_SERVING;
    }
    EXPECT_TRUE(not_serving) << gpu.Stderr();
    watch_context.TryCancel();
    (void)watch->Finish();

    const std::optional<int> exit_status = gpu.process().Wait(kExitLimit);
    ASSERT_TRUE(exit_status.has_value()) << "the server did not exit after the fault\n"
                                         << gpu.Stderr();
    EXPECT_EQ(*exit_status, 3) << gpu.Stderr();
    const std::string log = gpu.Stderr();
    EXPECT_NE(log.find("device fault: the CUDA context is lost after a device fault in"),
              std::string::npos)
        << log;
    EXPECT_NE(log.find("health is NOT_SERVING"), std::string::npos) << log;
  }
  // The restart an orchestrator makes: a fresh process (and context) serves the task again.
  fs::remove(fault_file);
  ServerUnderTest restarted(data, EmulatedGpuFlags());
  ASSERT_TRUE(restarted.started()) << restarted.Stderr();
  v1::ClassifyResponse again;
  const grpc::Status served = Classify(restarted, &again);
  ASSERT_TRUE(served.ok()) << served.error_message();
  EXPECT_NEAR(again.results(0).scores(0).sum_logprob(), served_before, 1e-6);
  restarted.StopCleanly();
}

TEST_F(GpuFaultTest, AnOutOfMemoryFailsTheRequestAndTheReplicaKeepsServing) {
  TempDir dir;
  const fs::path oom_file = dir.path() / "oom";
  ScopedEmulatedCudaPlugin emulation(MANYSHOT_CUDA_SIMT_PLUGIN);
  ScopedEnv inject("SIMT_OOM_FILE", oom_file.c_str());
  // Work runs when its stream is waited for, and freed memory stays inaccessible: a failure that
  // left work queued over tensors another thread frees would crash the server.
  ScopedEnv deferred("SIMT_DEFERRED_STREAMS", "1");
  std::vector<std::string> flags = EmulatedGpuFlags();
  flags.push_back("--gpu_pool_release_threshold_bytes=1048576");  // a GPU shared with others
  ServerUnderTest gpu(dir.path() / "data", flags);
  ASSERT_TRUE(gpu.started()) << gpu.Stderr();
  auto stub = v1::ManyShot::NewStub(gpu.Channel());
  auto created = CreateTask(*stub, "a", Sst2Spec(), Sst2Demonstrations(4));
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  v1::ClassifyResponse before;
  ASSERT_TRUE(Classify(gpu, &before).ok());

  // Full from the request's first allocation, then from the middle of its forward pass.
  for (const char* when : {"full\n", "after 6\n"}) {
    SCOPED_TRACE(when);
    std::ofstream(oom_file) << when;
    v1::ClassifyResponse during;
    const grpc::Status failed = Classify(gpu, &during);
    EXPECT_EQ(failed.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << failed.error_message();
    EXPECT_NE(failed.error_message().find("out of device memory"), std::string::npos)
        << failed.error_message();
    fs::remove(oom_file);
  }

  v1::ClassifyResponse after;
  const grpc::Status served = Classify(gpu, &after);
  ASSERT_TRUE(served.ok()) << served.error_message();
  EXPECT_EQ(after.results(0).scores(0).sum_logprob(), before.results(0).scores(0).sum_logprob());
  auto health = grpc::health::v1::Health::NewStub(gpu.Channel());
  grpc::ClientContext context;
  HealthCheckResponse status;
  ASSERT_TRUE(health->Check(&context, grpc::health::v1::HealthCheckRequest(), &status).ok());
  EXPECT_EQ(status.status(), HealthCheckResponse::SERVING);
  gpu.StopCleanly();
  EXPECT_EQ(gpu.Stderr().find("device fault"), std::string::npos) << gpu.Stderr();
  EXPECT_NE(gpu.Stderr().find("cuda: the memory pool keeps at most 1048576 freed bytes"),
            std::string::npos)
      << gpu.Stderr();
}

}  // namespace
}  // namespace manyshot::testing
