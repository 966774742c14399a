// tokenize: text -> token ids with manyshot's own tokenizer library, for scripts (the NumPy
// structured-prompting reference renders demonstrations and needs their ids).
//
//   printf '"Sentence: great\\nLabel:"\n' | tokenize --tokenizer_dir=/usr/local/share/manyshot/gpt2
//
// stdin: one JSON string per line (blank lines are skipped). stdout: one JSON array of ids per
// input line, in order. No special tokens are added. Any error (bad JSON, a value that is not a
// string, text the tokenizer rejects, a missing tokenizer) prints a message naming the line to
// stderr and exits 1.
#include <cstdint>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"

ABSL_FLAG(std::string, tokenizer_dir, "", "model or tokenizer directory (required)");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Reads JSON strings, one per line, on stdin; prints a JSON array of token ids per line.");
  absl::ParseCommandLine(argc, argv);
  const std::string dir = absl::GetFlag(FLAGS_tokenizer_dir);
  if (dir.empty()) {
    std::cerr << "tokenize: --tokenizer_dir is required\n";
    return 1;
  }
  auto tokenizer = manyshot::LoadTokenizer(dir);
  if (!tokenizer.ok()) {
    std::cerr << "tokenize: " << tokenizer.status() << "\n";
    return 1;
  }
  std::string line;
  int64_t line_no = 0;
  while (std::getline(std::cin, line)) {
    ++line_no;
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    nlohmann::json value = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) {
      std::cerr << "tokenize: line " << line_no << ": not valid JSON\n";
      return 1;
    }
    if (!value.is_string()) {
      std::cerr << "tokenize: line " << line_no << ": expected a JSON string, got "
                << value.type_name() << "\n";
      return 1;
    }
    auto ids = (*tokenizer)->Encode(value.get<std::string>());
    if (!ids.ok()) {
      std::cerr << "tokenize: line " << line_no << ": " << ids.status() << "\n";
      return 1;
    }
    std::cout << nlohmann::json(*ids).dump() << "\n";
  }
  std::cout.flush();
  if (!std::cout) {
    std::cerr << "tokenize: write to stdout failed\n";
    return 1;
  }
  return 0;
}
