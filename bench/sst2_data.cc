#include "bench/sst2_data.h"

#include <fstream>

#include "absl/strings/str_cat.h"

namespace manyshot::bench {

absl::StatusOr<std::vector<Example>> LoadSst2(const std::filesystem::path& file, size_t limit) {
  std::ifstream in(file);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", file.string(),
                     ": the benchmark needs ../shared/datasets/sst2_cbu "
                     "(or --data_dir=DIR holding stsa.binary.train and stsa.binary.test)"));
  }
  std::vector<Example> examples;
  for (std::string line; examples.size() < limit && std::getline(in, line);) {
    if (line.size() < 3 || (line[0] != '0' && line[0] != '1') || line[1] != ' ') continue;
    examples.push_back({line.substr(2), {}, line[0] == '1' ? "positive" : "negative"});
  }
  if (examples.size() < limit) {
    return absl::OutOfRangeError(
        absl::StrCat(file.string(), " has only ", examples.size(), " usable lines"));
  }
  return examples;
}

std::filesystem::path Sst2Dir(const std::filesystem::path& data_dir) {
  if (!data_dir.empty()) return data_dir;
  return std::filesystem::path(MANYSHOT_SOURCE_DIR) / ".." / "shared" / "datasets" / "sst2_cbu";
}

TaskOptions Sst2TaskOptions() {
  TaskOptions o;
  o.input_template = "Sentence: {text}\nLabel:";
  o.answer_template = " {label}";
  o.labels = {"negative", "positive"};
  return o;
}

}  // namespace manyshot::bench
