// The real server on --backend=cuda, end to end through gRPC, against the CPU server: the plugin
// loads, GetServerInfo, the startup log and the metrics report the CUDA backend and a "gpu" memory
// tier, a task evicted from the GPU budget comes back from the pinned host tier and, after a
// restart, from disk through pinned staging, and every score equals the CPU server's (f32 compute
// and K/V on both sides). Two instantiations:
//   SimtCuda/  testing/simt's build of the CUDA plugin (MANYSHOT_CUDA_SIMT_PLUGIN): the same
//              cuda_backend.cc, kernels and plugin entry point as libmanyshot_cuda.so on the SIMT
//              emulator, a stand-in CUDA runtime and cuBLASLt, with deferred streams. Runs on
//              every machine.
//   Cuda/      the real plugin on a real GPU (label gpu; SKIPPED with the reason where none can be
//              used). tools/gpu/run_checks.sh runs it from a bundle, where MANYSHOT_TEST_BIN_DIR
//              says where the server binary is.
#include <signal.h>
#include <stdlib.h>

#include <cstdio>

#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "engine/backends/backend_factory.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

const std::vector<std::string> kTexts = {"a delightful film", "a dull mess", "not bad at all",
                                         "the plot is thin"};

std::vector<std::string> CommonFlags() {
  return {"--threads=1", "--compute_dtype=f32", "--kv_dtype=f32", "--weight_dtype=f32"};
}

std::vector<std::string> CudaFlags(uint64_t gpu_budget) {
  std::vector<std::string> flags = CommonFlags();
  flags.push_back("--backend=cuda");
  flags.push_back("--gpu_memory_budget_bytes=" + std::to_string(gpu_budget));
  flags.push_back("--host_memory_budget_bytes=" + std::to_string(64 << 20));
  return flags;
}

// Sum log-probabilities of every label of every text, classified against `task`.
std::vector<double> Scores(const ServerUnderTest& server, const std::string& task) {
  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext context;
  v1::ClassifyResponse response;
  const grpc::Status status = stub->Classify(&context, ClassifyRequestFor(task, kTexts), &response);
  EXPECT_TRUE(status.ok()) << status.error_message();
  std::vector<double> out;
  for (const auto& r : response.results()) {
    for (const auto& s : r.scores()) out.push_back(s.sum_logprob());
  }
  EXPECT_EQ(out.size(), kTexts.size() * 2);
  return out;
}

void CreateTasks(const ServerUnderTest& server) {
  auto stub = v1::ManyShot::NewStub(server.Channel());
  for (const char* id : {"a", "b"}) {
    // Different demonstrations per task: two contexts of about the same size.
    const size_t n = id[0] == 'a' ? 12 : 11;
    auto created = CreateTask(*stub, id, Sst2Spec(), Sst2Demonstrations(n));
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  }
}

double Metric(const ServerUnderTest& server, const std::string& name,
              const std::map<std::string, std::string>& labels) {
  auto scrape = ParsePrometheusText(HttpGet(server.metrics_port(), "/metrics").body);
  EXPECT_TRUE(scrape.ok()) << scrape.status();
  if (!scrape.ok()) return -1;
  const PrometheusSample* sample = scrape->Find(name, labels);
  EXPECT_NE(sample, nullptr) << name;
  return sample != nullptr ? sample->value : -1;
}

void ExpectSameScores(const std::vector<double>& got, const std::vector<double>& want,
                      const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    // f32 on both sides; the GEMMs sum in another order (OpenBLAS vs the emulated cuBLASLt).
    EXPECT_NEAR(got[i], want[i], 1e-3 * std::max(1.0, std::abs(want[i]))) << what << " " << i;
  }
}

// The parameter: "simt-cuda" (the emulated plugin) or "cuda" (the plugin the factory finds: a real
// GPU; MANYSHOT_CUDA_PLUGIN, when the environment sets it, as for the server).
// Each test skips where its device cannot run: no CUDA backend in this build, or (for "cuda") no
// usable GPU, asked through the factory the server uses before any server starts. The emulator
// runs each stream's work only when the server waits for it, as a GPU may
// (testing/simt/include/cuda_runtime.h): a missing wait shows as wrong scores.
class GpuServerTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
#if !MANYSHOT_CUDA_ENABLED
    GTEST_SKIP() << "this build has no CUDA backend (no nvcc at configure time): nothing loads a "
                    "CUDA plugin";
#else
    if (emulated()) {
      emulation_.emplace(MANYSHOT_CUDA_SIMT_PLUGIN);
      return;
    }
    auto devices = CudaDevicesAvailable();
    if (!devices.ok() || *devices == 0) {
      GTEST_SKIP() << "no usable GPU: "
                   << (devices.ok() ? "no CUDA device" : devices.status().ToString());
    }
#endif
  }
  bool emulated() const { return GetParam() == "simt-cuda"; }

 private:
  std::optional<ScopedEmulatedCudaPlugin> emulation_;
};

TEST_P(GpuServerTest, ServesOnCudaThroughGpuHostAndDiskTiersAsTheCpuServerDoes) {
  TempDir dir;
  std::vector<double> cpu_a, cpu_b;
  {
    ServerUnderTest cpu(dir.path() / "cpu", CommonFlags());
    ASSERT_TRUE(cpu.started()) << cpu.Stderr();
    CreateTasks(cpu);
    cpu_a = Scores(cpu, "a");
    cpu_b = Scores(cpu, "b");
    cpu.StopCleanly();
  }

  const fs::path data = dir.path() / "cuda";
  uint64_t one_task = 0;
  {
    // First a budget for everything, to learn what one task holds.
    ServerUnderTest gpu(data, CudaFlags(uint64_t{1} << 30));
    ASSERT_TRUE(gpu.started()) << gpu.Stderr();
    auto stub = v1::ManyShot::NewStub(gpu.Channel());
    grpc::ClientContext context;
    v1::ServerInfo info;
    ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
    EXPECT_EQ(info.backend().name(), "cuda");
    EXPECT_TRUE(info.backend().cuda_built());
    EXPECT_EQ(info.backend().compute_dtype(), "f32");
    // The log and GetServerInfo name the same device: the emulator, or the GPU (its name, sm_XY).
    const std::string& description = info.backend().description();
    EXPECT_NE(gpu.Stderr().find("backend cuda (--backend=cuda): " + description), std::string::npos)
        << gpu.Stderr();
    if (emulated()) {
      EXPECT_NE(description.find("SIMT emulator"), std::string::npos) << description;
    } else if (std::getenv("MANYSHOT_CUDA_PLUGIN") == nullptr) {
      EXPECT_EQ(description.find("SIMT emulator"), std::string::npos) << description;
      EXPECT_NE(description.find(", sm_"), std::string::npos) << description;
    }
    std::printf("GPU server backend: %s\n", description.c_str());
    auto created = CreateTask(*stub, "a", Sst2Spec(), Sst2Demonstrations(12));
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
    one_task = static_cast<uint64_t>(Metric(gpu, "manyshot_cache_bytes", {{"tier", "gpu"}}));
    EXPECT_GT(one_task, 0u);
    EXPECT_EQ(Metric(gpu, "manyshot_backend_info", {{"backend", "cuda"}}), 1.0);
    ExpectSameScores(Scores(gpu, "a"), cpu_a, "task a on the GPU tier");
    gpu.StopCleanly();
  }
  {
    // Room for one task on the GPU: creating b evicts a into the pinned host tier.
    ServerUnderTest gpu(data, CudaFlags(one_task + one_task / 2));
    ASSERT_TRUE(gpu.started()) << gpu.Stderr();
    auto stub = v1::ManyShot::NewStub(gpu.Channel());
    auto created = CreateTask(*stub, "b", Sst2Spec(), Sst2Demonstrations(11));
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
    ExpectSameScores(Scores(gpu, "b"), cpu_b, "task b");
    // a was stored by the first run: it comes from disk (pinned staging into device memory).
    const double disk_before = Metric(gpu, "manyshot_cache_hits_total", {{"tier", "disk"}});
    ExpectSameScores(Scores(gpu, "a"), cpu_a, "task a restored from disk");
    EXPECT_GT(Metric(gpu, "manyshot_cache_hits_total", {{"tier", "disk"}}), disk_before);
    // b went to the host tier to make room for a; asking for it again is a host-tier hit.
    const double host_before = Metric(gpu, "manyshot_cache_hits_total", {{"tier", "host"}});
    ExpectSameScores(Scores(gpu, "b"), cpu_b, "task b from the host tier");
    EXPECT_GT(Metric(gpu, "manyshot_cache_hits_total", {{"tier", "host"}}), host_before);
    EXPECT_LE(Metric(gpu, "manyshot_cache_bytes", {{"tier", "gpu"}}),
              static_cast<double>(one_task + one_task / 2));
    gpu.StopCleanly();
  }
}

// With no dtype flags the GPU stores K/V as bf16 (server/kv_dtype_default.h), the CPU f32, the
// startup log names the attention kernel (the default model's head_dim, 32, is not one the flash
// kernel is built for: the generic kernel, as the log says; 64, 80 and 128 run the flash kernel),
// and the scores stay within bf16's rounding of the CPU's f32 ones.
TEST_P(GpuServerTest, ByDefaultStoresBf16KvAndLogsTheAttentionKernel) {
  TempDir dir;
  std::vector<double> cpu_scores;
  {
    ServerUnderTest cpu(dir.path() / "cpu", {"--threads=1", "--backend=cpu"});
    ASSERT_TRUE(cpu.started()) << cpu.Stderr();
    auto stub = v1::ManyShot::NewStub(cpu.Channel());
    ASSERT_TRUE(CreateTask(*stub, "a", Sst2Spec(), Sst2Demonstrations(12)).status.ok());
    cpu_scores = Scores(cpu, "a");
    cpu.StopCleanly();  // the log is complete once the server has exited
    EXPECT_NE(cpu.Stderr().find("attention: cpu attention (f32 K/V"), std::string::npos)
        << cpu.Stderr();
  }
  ServerUnderTest gpu(dir.path() / "gpu", {"--threads=1", "--backend=cuda"});
  ASSERT_TRUE(gpu.started()) << gpu.Stderr();
  auto stub = v1::ManyShot::NewStub(gpu.Channel());
  // A spec may name the server's K/V dtype, and only that one: bf16 is accepted here.
  v1::TaskSpec bf16_spec = Sst2Spec();
  bf16_spec.set_kv_dtype(v1::KV_DTYPE_BF16);
  auto created = CreateTask(*stub, "a", bf16_spec, Sst2Demonstrations(12));
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  const std::vector<double> gpu_scores = Scores(gpu, "a");
  ASSERT_EQ(gpu_scores.size(), cpu_scores.size());
  for (size_t i = 0; i < gpu_scores.size(); ++i) {
    // bf16 compute, weights and K/V against f32: a few bf16 ulps of the summed log-probability.
    EXPECT_NEAR(gpu_scores[i], cpu_scores[i], 0.1 * std::max(1.0, std::abs(cpu_scores[i]))) << i;
  }
  gpu.StopCleanly();
  EXPECT_NE(gpu.Stderr().find("attention: cuda generic kernel (bf16 K/V, head_dim 32"),
            std::string::npos)
      << gpu.Stderr();
}

// The test names say which (tests/CMakeLists.txt gives Cuda* the label gpu).
INSTANTIATE_TEST_SUITE_P(SimtCuda, GpuServerTest, ::testing::Values("simt-cuda"),
                         [](const auto&) { return "Emulated"; });
INSTANTIATE_TEST_SUITE_P(Cuda, GpuServerTest, ::testing::Values("cuda"),
                         [](const auto&) { return "Gpu"; });

}  // namespace
}  // namespace manyshot::testing
