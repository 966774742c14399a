// Evaluation presets: for every dataset folder of ../shared/datasets, which files hold the
// training and test splits, how to read them, and the prompt template and label words to use.
// Templates and label words come from the structured-prompting paper's Table 6 (Hao et al. 2022,
// Appendix A) where it gives them; for CR and MPQA, which the paper does not use, from
// label_configs_lu (yaolu/ordered-prompt), and `source` says which.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"

namespace manyshot::client {

// How a dataset file is laid out.
enum class DatasetFileLayout {
  kJsonl,      // one JSON object per line
  kCsv,        // RFC 4180 with a header
  kLabelFirst  // "LABEL TEXT" per line (harvardnlp, tonyzhaozh SST-2 / TREC files)
};

struct DatasetPreset {
  std::string name;        // what --preset takes, e.g. "sst2_cbu"
  std::string folder;      // the folder under the datasets directory
  std::string train_file;  // relative to the folder
  // Relative to the folder; empty: the dataset has a single labelled file, and every tenth
  // example (the 10th, 20th, ...) of it is held out as the test split.
  std::string test_file;
  DatasetFileLayout layout = DatasetFileLayout::kJsonl;
  // kLabelFirst: the raw label ends at this character instead of the first space ("DESC:manner
  // How ..." -> "DESC" with ':'); 0: at the first space.
  char label_delimiter = 0;
  std::string text_field = "text";            // the column of a one-placeholder template
  std::map<std::string, std::string> fields;  // placeholder -> column, for several placeholders
  std::string label_field = "label";
  std::string input_template;
  std::vector<std::string> labels;      // label words, in label-index order
  std::vector<std::string> raw_labels;  // the raw value in the file of each label word
  std::string source;                   // where template and label words come from
  // Room for a test input in tokens (the task's max_query_tokens) where the server's default
  // (128) is too small for the dataset's longest test inputs; 0: the server's default.
  uint32_t max_query_tokens = 0;
};

// Every preset, in a stable order.
const std::vector<DatasetPreset>& DatasetPresets();

// The preset named `name`; NOT_FOUND listing the names otherwise.
absl::StatusOr<DatasetPreset> FindDatasetPreset(std::string_view name);

// "0=Negative,1=Positive" style raw -> word map of a preset.
std::map<std::string, std::string> PresetLabelMap(const DatasetPreset& preset);

}  // namespace manyshot::client
