// SST-2 sentences for benchmarks, read from ../shared/datasets/sst2_cbu (lines "LABEL sentence").
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/prompting/icl_task.h"

namespace manyshot::bench {

// The first `limit` lines of a stsa.binary.* file as examples with label "negative"/"positive".
absl::StatusOr<std::vector<Example>> LoadSst2(const std::filesystem::path& file, size_t limit);

// The directory holding stsa.binary.train/test: --data_dir, else ../shared next to the source tree.
std::filesystem::path Sst2Dir(const std::filesystem::path& data_dir);

// The 1000-shot task's options: template "Sentence: {text}\nLabel:", labels negative/positive.
TaskOptions Sst2TaskOptions();

}  // namespace manyshot::bench
