// The labelled examples of an evaluation: a training split (where demonstrations are drawn
// from) and a test split (inputs with their gold label), read from a preset's files or from any
// JSONL/CSV/TSV files with text and label fields. Labels resolve exactly as `manyshot create`
// resolves them (request_builder.h: --label_map, then label words, then label indices).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/eval/presets.h"
#include "client/example_reader.h"
#include "client/request_builder.h"
#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::client {

struct EvalDataset {
  std::string name;                 // the preset, or the training file's name
  std::string input_template;       // the task template
  std::vector<std::string> labels;  // label words; empty: a generation task (exact match)
  uint32_t max_query_tokens = 0;    // the preset's room for a test input (0: server default)
  std::vector<v1::Demonstration> train;
  std::vector<v1::Demonstration> test;  // inputs with their gold answer as `label`
};

// Where the examples come from when no preset is used.
struct EvalFiles {
  std::string train_path;
  std::string test_path;  // empty: every tenth training example is held out (see below)
  std::optional<ExampleFormat> format;  // default: from each file's extension
  std::string input_template;
  FieldOptions fields;  // text/label fields, placeholder mappings, label words, label map
};

// Splits one labelled file: the 10th, 20th, ... examples are the test split, the rest train.
void HoldOutEveryTenth(std::vector<v1::Demonstration>* train, std::vector<v1::Demonstration>* test);

// "LABEL TEXT" lines as records {"label": LABEL, "text": TEXT}; the label ends at the first space
// or, with `label_delimiter`, at that character (the rest of the first word is dropped). Blank
// lines and lines holding only a label (custrev.all has a few) are skipped; a line that is not
// valid UTF-8 is read as Latin-1 (harvardnlp's MR and Subj files).
std::vector<Record> ParseLabelFirstLines(std::string_view content, char label_delimiter = 0);

// Reads a preset's files under `datasets_dir` (the folder holding sst2_cbu/, trec_lu/, ...).
// Errors name the missing file or the offending line.
absl::StatusOr<EvalDataset> LoadPresetDataset(const DatasetPreset& preset,
                                              const std::string& datasets_dir);
absl::StatusOr<EvalDataset> LoadFileDataset(const EvalFiles& files);

// The gold label index of a test example under `labels` (its label word or label_index); -1 when
// it has none of them.
int GoldLabelIndex(const v1::Demonstration& example, const std::vector<std::string>& labels);

}  // namespace manyshot::client
