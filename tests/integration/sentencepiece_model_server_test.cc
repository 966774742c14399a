// A model directory whose only tokenizer file is SentencePiece's tokenizer.model: the server reads
// it without libsentencepiece (whose bundled protobuf would crash gRPC's), serves the model and
// reports the tokenizer in GetServerInfo; an unsupported tokenizer.model stops the start with
// exit status 1 and a message naming the file.
#include <signal.h>

#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/server_under_test.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

// A tokenizer.model in dir: the real Llama-2 one when ../shared has it, else one trained here with
// the Python sentencepiece module (a separate process, so no protobuf clash) on the parity
// sentences, with Llama-2's settings and the given model type.
fs::path TokenizerModelDir(const fs::path& dir, const std::string& model_type) {
  const fs::path out = dir / ("tok_" + model_type);
  fs::create_directories(out);
  const fs::path real = fs::path(MANYSHOT_SHARED_DIR) / "tokenizers/llama2/tokenizer.model";
  if (model_type == "bpe" && fs::is_regular_file(real)) {
    fs::copy_file(real, out / "tokenizer.model");
    return out;
  }
  const std::string sentences =
      (fs::path(MANYSHOT_SOURCE_DIR) / "tests/data/tokenizer/parity_sentences.txt").string();
  const std::string code =
      "import sentencepiece as spm\n"
      "spm.SentencePieceTrainer.train(input='" +
      sentences + "', model_prefix='" + (out / "tokenizer").string() + "', model_type='" +
      model_type +
      "', vocab_size=1000, byte_fallback=True, normalization_rule_name='identity', "
      "remove_extra_whitespaces=False, split_digits=True, num_threads=1, "
      "input_sentence_size=2000, minloglevel=2)\n";
  CommandResult trained =
      RunCommand({"/usr/bin/python3", "-c", code}, out, std::chrono::minutes(2));
  EXPECT_EQ(trained.exit_status, 0) << trained.err;
  EXPECT_TRUE(fs::is_regular_file(out / "tokenizer.model"));
  fs::remove(out / "tokenizer.vocab");
  return out;
}

// make-tiny-model --family=llama with the tokenizer directory's files copied in.
fs::path TinyLlama(const fs::path& dir, const fs::path& tokenizer_dir) {
  const fs::path model = dir / "model";
  CommandResult made = RunCommand(
      {(fs::path(MANYSHOT_BINARY_DIR) / "tools/make-tiny-model").string(), "--family=llama",
       "--tokenizer_dir=" + tokenizer_dir.string(), "--out=" + model.string()},
      dir);
  EXPECT_EQ(made.exit_status, 0) << made.err;
  return model;
}

TEST(SentencePieceModelServerTest, ServesAModelWithOnlyTokenizerModel) {
  TempDir dir;
  const fs::path model = TinyLlama(dir.path(), TokenizerModelDir(dir.path(), "bpe"));
  ASSERT_TRUE(fs::is_regular_file(model / "tokenizer.model"));
  ASSERT_FALSE(fs::exists(model / "tokenizer.json"));
  ASSERT_FALSE(fs::exists(model / "vocab.json"));

  ServerUnderTest server(dir.path() / "data", {"--threads=1", "--model_dir=" + model.string()});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext context;
  v1::ServerInfo info;
  grpc::Status status = stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(info.model().model_type(), "llama");
  EXPECT_EQ(info.model().tokenizer_kind(), "sentencepiece-model");
  EXPECT_EQ(info.model().tokenizer_fingerprint().size(), 16u);
  EXPECT_EQ(fs::path(info.model().path()), model);

  ASSERT_TRUE(server.process().Signal(SIGTERM));
  auto exit_status = server.process().Wait(kExitLimit);
  ASSERT_TRUE(exit_status.has_value());
  EXPECT_EQ(*exit_status, 0) << server.Stderr();
}

// Unigram and BPE models load; a WORD model (whitespace-split words, no subword fallback) has no
// conversion, so it is the unsupported kind here.
TEST(SentencePieceModelServerTest, UnsupportedTokenizerModelStopsTheStartNamingIt) {
  TempDir dir;
  const fs::path model = TinyLlama(dir.path(), TokenizerModelDir(dir.path(), "word"));
  CommandResult result =
      RunCommand({ServerBinary(), "--listen_address=127.0.0.1:0", "--metrics_address=127.0.0.1:0",
                  "--data_dir=" + (dir.path() / "data").string(), "--model_dir=" + model.string()},
                 dir.path(), std::chrono::seconds(30));
  EXPECT_EQ(result.exit_status, 1) << result.err;
  EXPECT_NE(result.err.find("tokenizer.model"), std::string::npos) << result.err;
  EXPECT_NE(result.err.find("WORD"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace manyshot::testing
