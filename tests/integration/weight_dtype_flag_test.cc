// --weight_dtype: the server holds a decoder-only model's matrix weights in bf16 when asked (the
// log, GetServerInfo's held_weight_dtype and the model fingerprint say so), refuses a dtype the
// backend cannot widen in its kernels, and refuses a name that is not a dtype, each stopping the
// start with a message naming the flag.
#include <signal.h>

#include <filesystem>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/server_under_test.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

v1::ModelInfo GetModelInfo(const ServerUnderTest& server) {
  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext context;
  v1::ServerInfo info;
  grpc::Status status = stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return info.model();
}

CommandResult RunServer(const fs::path& dir, const std::string& flag) {
  return RunCommand({ServerBinary(), "--listen_address=127.0.0.1:0",
                     "--metrics_address=127.0.0.1:0", "--data_dir=" + (dir / "data").string(),
                     std::string("--default_tokenizer_dir=") + MANYSHOT_GPT2_TOKENIZER_DIR, flag},
                    dir, std::chrono::seconds(60));
}

TEST(WeightDtypeFlagTest, Bf16WeightsAreHeldAndReported) {
  TempDir dir;
  const fs::path data = dir.path() / "data";
  std::string wide;
  {
    ServerUnderTest server(data, {"--threads=1"});
    ASSERT_TRUE(server.started()) << server.Stderr();
    const v1::ModelInfo m = GetModelInfo(server);
    wide = m.fingerprint();
    EXPECT_EQ(m.weight_dtype(), "f32");  // the default model's checkpoint is f32
    EXPECT_EQ(m.held_weight_dtype(), "f32");
    EXPECT_NE(server.Stderr().find("held as f32"), std::string::npos) << server.Stderr();
    server.StopCleanly();
  }
  ServerUnderTest narrow(data, {"--threads=1", "--weight_dtype=bf16"});
  ASSERT_TRUE(narrow.started()) << narrow.Stderr();
  EXPECT_NE(narrow.Stderr().find("held as bf16"), std::string::npos) << narrow.Stderr();
  const v1::ModelInfo m = GetModelInfo(narrow);
  // Stored f32 on disk, held as bf16 in memory: GetServerInfo says both.
  EXPECT_EQ(m.weight_dtype(), "f32");
  EXPECT_EQ(m.held_weight_dtype(), "bf16");
  // Same model, other weights in memory: the fingerprint (which keys cached KV) must differ.
  const std::string narrow_fingerprint = m.fingerprint();
  EXPECT_NE(narrow_fingerprint, wide);
  EXPECT_EQ(narrow_fingerprint.rfind(wide, 0), 0u) << narrow_fingerprint << " vs " << wide;
  narrow.StopCleanly();
}

TEST(WeightDtypeFlagTest, UnknownNameStopsTheStartNamingTheFlag) {
  TempDir dir;
  CommandResult result = RunServer(dir.path(), "--weight_dtype=int8");
  EXPECT_EQ(result.exit_status, 2) << result.err;  // a bad flag, refused before any work
  EXPECT_NE(result.err.find("--weight_dtype=int8 is not one of f32, bf16, f16"), std::string::npos)
      << result.err;
}

TEST(WeightDtypeFlagTest, DtypeTheCpuCannotWidenStopsTheStart) {
  TempDir dir;
  CommandResult result = RunServer(dir.path(), "--weight_dtype=f16");
  EXPECT_EQ(result.exit_status, 1) << result.err;
  EXPECT_NE(result.err.find("f16"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("weights"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace manyshot::testing
