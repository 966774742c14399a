// Fuzz-style robustness: truncated, bit-flipped and random tokenizer files must give an error or
// a working tokenizer, never a crash; random bytes into Encode must give ids or InvalidArgument.
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

// Exercises a loaded tokenizer a little, so that a "successful" load of garbage is also safe.
void Exercise(const Tokenizer& tok) {
  for (const char* text : {"Hello world, it's 2024!", " \t\n", "\xE4\xBD\xA0\xE5\xA5\xBD <s>"}) {
    auto ids = tok.Encode(text);
    if (!ids.ok()) continue;
    auto back = tok.Decode(*ids);
    (void)back;
  }
  (void)tok.Decode(std::vector<int32_t>{0, 1, 2});
}

// Mutations of `original`: truncations at spread-out offsets, byte flips, and random bytes.
std::vector<std::string> Mutations(const std::string& original, int count, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::string> out;
  for (int i = 0; i < count; ++i) {
    std::string m = original;
    switch (i % 3) {
      case 0:  // truncate
        m.resize(original.empty() ? 0 : rng() % original.size());
        break;
      case 1:  // flip a few bytes
        for (int k = 0; k < 1 + i % 4 && !m.empty(); ++k) {
          // Every other case flips to printable ASCII, which often keeps JSON well formed and
          // so reaches the loaders' checks behind the parser.
          m[rng() % m.size()] = static_cast<char>(i % 2 ? 0x20 + rng() % 95 : rng());
        }
        break;
      case 2: {  // random bytes spliced in
        const size_t at = m.empty() ? 0 : rng() % m.size();
        std::string junk(1 + rng() % 16, '\0');
        for (char& c : junk) c = static_cast<char>(rng());
        m.replace(at, std::min<size_t>(junk.size(), m.size() - at), junk);
        break;
      }
    }
    out.push_back(std::move(m));
  }
  return out;
}

void FuzzFile(const fs::path& src_dir, const std::vector<std::string>& files,
              const std::string& target, int count, uint32_t seed) {
  const fs::path dir = ScratchDir() / ("fuzz_" + target);
  fs::create_directories(dir);
  for (const auto& f : files) {
    fs::copy_file(src_dir / f, dir / f, fs::copy_options::overwrite_existing);
  }
  const std::string original = ReadFileOrDie(src_dir / target);
  int ok = 0, errors = 0;
  for (const std::string& m : Mutations(original, count, seed)) {
    WriteFile(dir / target, m);
    auto tok = LoadTokenizer(dir);
    if (tok.ok()) {
      ++ok;
      Exercise(**tok);
    } else {
      ++errors;
      EXPECT_FALSE(tok.status().message().empty());
    }
  }
  std::printf("[fuzz %s] %d loaded, %d rejected\n", target.c_str(), ok, errors);
}

TEST(FuzzTest, TokenizerJson) {
  // The small SentencePiece-style file keeps hundreds of loads fast.
  FuzzFile(LlamaTokenizerJsonDir(), {"tokenizer.json", "tokenizer_config.json"}, "tokenizer.json",
           60, 1);
}

TEST(FuzzTest, TokenizerConfigJson) {
  FuzzFile(LlamaTokenizerJsonDir(), {"tokenizer.json", "tokenizer_config.json"},
           "tokenizer_config.json", 60, 2);
}

TEST(FuzzTest, VocabJson) {
  FuzzFile(Gpt2Dir(), {"vocab.json", "merges.txt"}, "vocab.json", 40, 3);
}

TEST(FuzzTest, MergesTxt) {
  FuzzFile(Gpt2Dir(), {"vocab.json", "merges.txt"}, "merges.txt", 40, 4);
}

TEST(FuzzTest, TokenizerModel) {
  FuzzFile(LlamaModelDir(), {"tokenizer.model"}, "tokenizer.model", 150, 5);
}

TEST(FuzzTest, RandomBytesIntoEncode) {
  std::mt19937 rng(6);
  for (const fs::path& dir :
       {Gpt2Dir(), Gpt2TokenizerJsonDir(), LlamaModelDir(), LlamaTokenizerJsonDir()}) {
    const Tokenizer& tok = Cached(dir);
    int valid = 0;
    for (int i = 0; i < 300; ++i) {
      std::string s(rng() % 64, '\0');
      // Half the cases bias towards valid multi-byte UTF-8 lead/continuation bytes.
      for (char& c : s)
        c = static_cast<char>(i % 2 ? (rng() % 2 ? 0x80 | rng() % 64 : 0xC2 + rng() % 51) : rng());
      auto ids = tok.Encode(s);
      if (ids.ok()) {
        ++valid;
        auto back = tok.Decode(*ids);
        ASSERT_TRUE(back.ok());
      } else {
        EXPECT_EQ(ids.status().code(), absl::StatusCode::kInvalidArgument);
      }
    }
    EXPECT_GT(valid, 0) << dir;
  }
}

}  // namespace
}  // namespace manyshot::tokenizer_test
