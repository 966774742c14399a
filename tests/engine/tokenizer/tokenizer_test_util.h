// Shared helpers for the tokenizer tests: where the real files are, subprocesses, and the
// tokenizer directories that several tests need (built once per test binary).
#ifndef MANYSHOT_TESTS_ENGINE_TOKENIZER_TOKENIZER_TEST_UTIL_H_
#define MANYSHOT_TESTS_ENGINE_TOKENIZER_TOKENIZER_TEST_UTIL_H_

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "engine/tokenizer/tokenizer.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/tokenizer/sentencepiece_fallback.h"

namespace manyshot::tokenizer_test {

namespace fs = std::filesystem;

inline fs::path SourceDir() { return MANYSHOT_SOURCE_DIR; }
inline fs::path Gpt2Dir() { return MANYSHOT_GPT2_TOKENIZER_DIR; }
inline fs::path NpmDir() { return MANYSHOT_NPM_DIR; }
inline fs::path SharedDir() { return MANYSHOT_SHARED_DIR; }
inline fs::path ToolsDir() { return SourceDir() / "tools" / "tokenizer_parity"; }
inline fs::path SentencesFile() {
  return SourceDir() / "tests" / "data" / "tokenizer" / "parity_sentences.txt";
}

// A directory private to this test process, removed at exit.
inline const fs::path& ScratchDir() {
  static const fs::path* dir = [] {
    auto* p = new fs::path(fs::temp_directory_path() /
                           ("manyshot_tokenizer_tests_" + std::to_string(::getpid())));
    fs::create_directories(*p);
    std::atexit([] {
      std::error_code ec;
      fs::remove_all(ScratchDir(), ec);
    });
    return p;
  }();
  return *dir;
}

inline std::string ReadFileOrDie(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.good()) << p;
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void WriteFile(const fs::path& p, std::string_view bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

inline std::vector<std::string> ReadLines(const fs::path& p) {
  std::vector<std::string> lines;
  std::istringstream in(ReadFileOrDie(p));
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

// Runs a shell command; returns its stdout, or nullopt-like empty + failure via *ok.
inline std::string RunCapture(const std::string& cmd, bool* ok) {
  std::string out;
  FILE* f = ::popen(cmd.c_str(), "r");
  if (f == nullptr) {
    *ok = false;
    return out;
  }
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) out.append(buf, n);
  *ok = ::pclose(f) == 0;
  return out;
}

inline std::string Quote(const fs::path& p) { return "'" + p.string() + "'"; }

// tokenizer.json for GPT-2, written by our converter into the scratch dir (once).
inline fs::path Gpt2TokenizerJsonDir() {
  static const fs::path dir = [] {
    const fs::path d = ScratchDir() / "gpt2_json";
    const std::string cmd = "/usr/bin/python3 " + Quote(ToolsDir() / "gpt2_tokenizer_json.py") +
                            " " + Quote(Gpt2Dir()) + " " + Quote(d);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return d;
  }();
  return dir;
}

// A Llama-style tokenizer.model: the real Llama-2 one if ../shared has it, else one trained on
// the parity sentences (cached in the build tree across runs).
inline fs::path LlamaModelPath() {
  static const fs::path path = [] {
    auto p = FindOrTrainLlamaTokenizerModel(SharedDir(),
                                            fs::path(MANYSHOT_BINARY_DIR) / "tokenizer_test_work");
    EXPECT_TRUE(p.ok()) << p.status();
    return p.ok() ? *p : fs::path();
  }();
  return path;
}

// A model dir with just the Llama-style tokenizer.model.
inline fs::path LlamaModelDir() {
  static const fs::path dir = [] {
    const fs::path d = ScratchDir() / "llama_model";
    fs::create_directories(d);
    fs::copy_file(LlamaModelPath(), d / "tokenizer.model", fs::copy_options::overwrite_existing);
    return d;
  }();
  return dir;
}

// tokenizer.json (+ tokenizer_config.json) converted from LlamaModelPath() by our script.
inline fs::path LlamaTokenizerJsonDir() {
  static const fs::path dir = [] {
    const fs::path d = ScratchDir() / "llama_json";
    const std::string cmd = "/usr/bin/python3 " +
                            Quote(ToolsDir() / "sp_model_to_tokenizer_json.py") + " " +
                            Quote(LlamaModelPath()) + " " + Quote(d);
    EXPECT_EQ(std::system(cmd.c_str()), 0) << cmd;
    return d;
  }();
  return dir;
}

// Loads once per directory for the lifetime of the test binary (loading GPT-2 takes ~100 ms).
inline const Tokenizer& Cached(const fs::path& dir) {
  static auto* cache = new std::vector<std::pair<fs::path, std::unique_ptr<Tokenizer>>>();
  for (const auto& [d, t] : *cache) {
    if (d == dir) return *t;
  }
  auto t = LoadTokenizer(dir);
  EXPECT_TRUE(t.ok()) << t.status();
  if (!t.ok()) std::abort();
  cache->emplace_back(dir, std::move(*t));
  return *cache->back().second;
}

// Parses one JSON array of ints per line.
inline std::vector<std::vector<int32_t>> ParseIdLines(const std::string& text) {
  std::vector<std::vector<int32_t>> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    out.push_back(nlohmann::json::parse(line).get<std::vector<int32_t>>());
  }
  return out;
}

}  // namespace manyshot::tokenizer_test

#endif  // MANYSHOT_TESTS_ENGINE_TOKENIZER_TOKENIZER_TEST_UTIL_H_
