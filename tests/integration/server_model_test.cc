// The served model: on its defaults the server generates a tiny GPT-2-style model with random
// weights into its data directory (once; a restart reuses it), reports it in GetServerInfo, and a
// model that cannot be loaded stops the start with exit status 1 and a message naming the file.
#include <signal.h>

#include <filesystem>
#include <fstream>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/server_under_test.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

v1::ServerInfo GetInfo(const ServerUnderTest& server) {
  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext context;
  v1::ServerInfo info;
  grpc::Status status = stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
  EXPECT_TRUE(status.ok()) << status.error_message();
  return info;
}

// Runs the server to completion with ephemeral ports (it is expected to fail at startup).
CommandResult RunServer(const fs::path& dir, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {
      ServerBinary(), "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
      "--data_dir=" + (dir / "data").string(),
      std::string("--default_tokenizer_dir=") + MANYSHOT_GPT2_TOKENIZER_DIR};
  argv.insert(argv.end(), flags.begin(), flags.end());
  return RunCommand(argv, dir, std::chrono::seconds(30));
}

// The default model a server generates on first start in dir/data, copied to dir/copy (the copy
// is returned; empty, with a test failure, if the server did not start).
fs::path CopyOfTheDefaultModel(const fs::path& dir) {
  const fs::path data = dir / "data";
  {
    ServerUnderTest server(data, {});
    EXPECT_TRUE(server.started()) << server.Stderr();
    if (!server.started()) return {};
    server.StopCleanly();
  }
  const fs::path copy = dir / "copy";
  fs::copy(data / "models" / "default-gpt2-tiny", copy);
  return copy;
}

TEST(ServerModelTest, DefaultModelIsGeneratedOnceAndReported) {
  TempDir dir;
  const fs::path data = dir.path() / "data";
  const fs::path model_dir = data / "models" / "default-gpt2-tiny";
  std::string fingerprint;
  fs::file_time_type dir_mtime, weights_mtime;
  {
    ServerUnderTest server(data, {"--threads=1"});
    ASSERT_TRUE(server.started()) << server.Stderr();
    v1::ServerInfo info = GetInfo(server);
    const v1::ModelInfo& m = info.model();
    EXPECT_EQ(m.model_type(), "gpt2");
    EXPECT_EQ(m.vocab_size(), 50257u);
    EXPECT_TRUE(m.random_weights());
    EXPECT_EQ(m.weights_note(),
              "manyshot tiny model: RANDOM weights for tests, not a trained model");
    EXPECT_EQ(m.layers(), 4u);
    EXPECT_EQ(m.hidden_size(), 128u);
    EXPECT_EQ(m.heads(), 4u);
    EXPECT_EQ(m.kv_heads(), 4u);
    EXPECT_EQ(m.head_dim(), 32u);
    EXPECT_EQ(m.context_length(), 1024u);
    EXPECT_EQ(m.weight_dtype(), "f32");
    EXPECT_EQ(m.tokenizer_kind(), "bpe-bytelevel");
    EXPECT_EQ(m.tokenizer_fingerprint().size(), 16u);
    EXPECT_FALSE(m.fingerprint().empty());
    EXPECT_EQ(fs::path(m.path()), fs::absolute(model_dir).lexically_normal());
    EXPECT_EQ(info.backend().name(), "cpu");
    EXPECT_EQ(info.backend().threads(), 1u);
    EXPECT_FALSE(info.backend().blas_kernel().empty());
    // The kernels' instruction set, as the start-up log line names it.
    EXPECT_FALSE(info.backend().cpu_target().empty());
    EXPECT_NE(server.Stderr().find("kernels " + info.backend().cpu_target() + ","),
              std::string::npos)
        << server.Stderr();
    EXPECT_FALSE(info.backend().device().empty());
    fingerprint = m.fingerprint();

    // The CLI says plainly that the answers are meaningless.
    CommandResult cli =
        RunCommand({CliBinary(), "--server=" + server.address(), "info"}, dir.path());
    EXPECT_EQ(cli.exit_status, 0) << cli.err;
    EXPECT_NE(cli.out.find("RANDOM WEIGHTS"), std::string::npos) << cli.out;
    // And what the weights are, as stored and as held.
    EXPECT_NE(cli.out.find("weights     manyshot tiny model: RANDOM weights for tests, not a "
                           "trained model; stored f32, held f32\n"),
              std::string::npos)
        << cli.out;
    EXPECT_NE(server.Stderr().find("RANDOM weights"), std::string::npos) << server.Stderr();
    server.StopCleanly();
  }
  ASSERT_TRUE(fs::is_regular_file(model_dir / "model.safetensors"));
  ASSERT_TRUE(fs::is_regular_file(model_dir / "manyshot_tiny_model.json"));
  ASSERT_TRUE(fs::is_regular_file(model_dir / "vocab.json"));
  // Nothing temporary is left beside it.
  for (const auto& entry : fs::directory_iterator(data / "models")) {
    EXPECT_EQ(entry.path().filename(), "default-gpt2-tiny");
  }
  dir_mtime = fs::last_write_time(model_dir);
  weights_mtime = fs::last_write_time(model_dir / "model.safetensors");

  ServerUnderTest again(data, {});
  ASSERT_TRUE(again.started()) << again.Stderr();
  EXPECT_EQ(GetInfo(again).model().fingerprint(), fingerprint);
  EXPECT_EQ(fs::last_write_time(model_dir), dir_mtime);
  EXPECT_EQ(fs::last_write_time(model_dir / "model.safetensors"), weights_mtime);
  EXPECT_NE(again.Stderr().find("reusing the default model"), std::string::npos) << again.Stderr();
  again.StopCleanly();
}

// The hand-built induction model (make-induction-model) has config.json model_type "llama": the
// server reports what its marker says it is, not a Llama model, and not random weights.
TEST(ServerModelTest, InductionModelIsReportedAsHandBuilt) {
  TempDir dir;
  const fs::path model_dir = dir.path() / "induction";
  CommandResult written =
      RunCommand({(fs::path(MANYSHOT_BINARY_DIR) / "tools/make-induction-model").string(),
                  "--out=" + model_dir.string(), "--tokenizer_dir=" MANYSHOT_GPT2_TOKENIZER_DIR,
                  "--max_position_embeddings=256"},
                 dir.path(), std::chrono::seconds(120));
  ASSERT_EQ(written.exit_status, 0) << written.err;
  ASSERT_TRUE(fs::is_regular_file(model_dir / "manyshot_induction_model.json"));
  ServerUnderTest server(dir.path() / "data", {"--threads=1", "--model_dir=" + model_dir.string()});
  ASSERT_TRUE(server.started()) << server.Stderr();
  const v1::ModelInfo m = GetInfo(server).model();
  EXPECT_EQ(m.model_type(), "llama");  // the architecture of config.json
  EXPECT_FALSE(m.random_weights());
  EXPECT_EQ(m.weights_note().rfind("manyshot induction model: weights written by hand", 0), 0u)
      << m.weights_note();
  EXPECT_NE(m.weights_note().find("not a trained language model"), std::string::npos)
      << m.weights_note();
  EXPECT_NE(server.Stderr().find("was written by a manyshot tool (manyshot_induction_model.json): "
                                 "manyshot induction model"),
            std::string::npos)
      << server.Stderr();
  EXPECT_EQ(server.Stderr().find("RANDOM weights"), std::string::npos) << server.Stderr();
  server.StopCleanly();
}

// A marker that does not say what the model is stops the start, naming the file.
TEST(ServerModelTest, UnreadableMarkerExitsOneNamingIt) {
  TempDir dir;
  const fs::path copy = CopyOfTheDefaultModel(dir.path());
  ASSERT_FALSE(copy.empty());
  std::ofstream(copy / "manyshot_tiny_model.json", std::ios::trunc) << "{\"spec\": 1";
  CommandResult result = RunServer(dir.path(), {"--model_dir=" + copy.string()});
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find((copy / "manyshot_tiny_model.json").string()), std::string::npos)
      << result.err;
}

TEST(ServerModelTest, MissingModelDirExitsOneNamingIt) {
  TempDir dir;
  const std::string missing = (dir.path() / "nonexistent").string();
  CommandResult result = RunServer(dir.path(), {"--model_dir=" + missing});
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find("--model_dir=" + missing), std::string::npos) << result.err;
}

TEST(ServerModelTest, MissingDefaultTokenizerSaysWhatToDo) {
  TempDir dir;
  CommandResult result =
      RunServer(dir.path(), {"--default_tokenizer_dir=" + (dir.path() / "no-gpt2").string()});
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find("scripts/setup.sh"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("--model_dir"), std::string::npos) << result.err;
  EXPECT_FALSE(fs::exists(dir.path() / "data" / "models" / "default-gpt2-tiny"));
}

TEST(ServerModelTest, GivenModelDirAndTruncatedWeights) {
  TempDir dir;
  // A copy of the generated model served through --model_dir: still marked random.
  const fs::path copy = CopyOfTheDefaultModel(dir.path());
  ASSERT_FALSE(copy.empty());
  {
    ServerUnderTest server(dir.path() / "data2", {"--model_dir=" + copy.string()});
    ASSERT_TRUE(server.started()) << server.Stderr();
    v1::ModelInfo m = GetInfo(server).model();
    EXPECT_TRUE(m.random_weights());
    EXPECT_EQ(fs::path(m.path()), copy);
    EXPECT_FALSE(fs::exists(dir.path() / "data2" / "models"));
    server.StopCleanly();
  }
  const fs::path weights = copy / "model.safetensors";
  fs::resize_file(weights, fs::file_size(weights) / 2);
  CommandResult result = RunServer(dir.path(), {"--model_dir=" + copy.string()});
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find(weights.string()), std::string::npos) << result.err;
}

// The near misses a new user brings get what to do, not only what is wrong.
TEST(ServerModelTest, PytorchBinOnlyDirectoryGetsTheConversionCommand) {
  TempDir dir;
  const fs::path copy = CopyOfTheDefaultModel(dir.path());
  ASSERT_FALSE(copy.empty());
  fs::remove(copy / "model.safetensors");
  std::ofstream(copy / "pytorch_model.bin") << "not read";
  CommandResult result = RunServer(dir.path(), {"--model_dir=" + copy.string()});
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find("PyTorch .bin weights only"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("from safetensors.torch import save_file"), std::string::npos)
      << result.err;
}

TEST(ServerModelTest, HuggingFaceCacheRootPointsAtTheSnapshot) {
  TempDir dir;
  const fs::path root = dir.path() / "models--Org--Name";
  const fs::path snapshot = root / "snapshots" / "0123abcd";
  fs::create_directories(snapshot);
  fs::create_directories(root / "blobs");
  CommandResult result = RunServer(dir.path(), {"--model_dir=" + root.string()});
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find("Hugging Face cache root"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find(snapshot.string()), std::string::npos) << result.err;
}

}  // namespace
}  // namespace manyshot::testing
