#include "tests/integration/tiny_t5_model.h"

#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/harness/subprocess.h"
#include "tests/engine/support/unigram_tokenizer_json.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

// T5's special ids (pad 0, eos 1, unk 2), "▁", letters and a few words.
void WriteUnigramTokenizer(const fs::path& dir) {
  nlohmann::json vocab = nlohmann::json::array();
  for (const char* special : {"<pad>", "</s>", "<unk>"}) vocab.push_back({special, 0.0});
  vocab.push_back({"\u2581", -2.0});
  for (char c = 'a'; c <= 'z'; ++c) vocab.push_back({std::string(1, c), -4.0});
  for (char c = 'A'; c <= 'Z'; ++c) vocab.push_back({std::string(1, c), -5.0});
  vocab.push_back({":", -3.0});
  for (const char* w : {"good", "bad", "movie", "fun", "dull", "positive", "negative"}) {
    vocab.push_back({std::string("\u2581") + w, -1.0});
  }
  WriteUnigramTokenizerJson(dir, vocab, R"({"eos_token": "</s>"})");
}

}  // namespace

void MakeTinyT5(const fs::path& model) {
  CommandResult made = RunCommand(
      {(fs::path(MANYSHOT_BINARY_DIR) / "tools/make-tiny-t5").string(), "--out=" + model.string()},
      model.parent_path());
  ASSERT_EQ(made.exit_status, 0) << made.err;
  WriteUnigramTokenizer(model);
}

}  // namespace manyshot::testing
