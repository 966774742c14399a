#include "client/eval/dataset.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "utf8proc.h"

namespace manyshot::client {
namespace {

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  std::error_code error;
  if (!std::filesystem::is_regular_file(path, error)) {
    return absl::NotFoundError(absl::StrCat(path, ": no such file"));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::PermissionDeniedError(absl::StrCat(path, ": cannot open"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// This abseil's string functions take absl::string_view only.
std::string_view Strip(std::string_view text) {
  absl::string_view stripped =
      absl::StripAsciiWhitespace(absl::string_view(text.data(), text.size()));
  return std::string_view(stripped.data(), stripped.size());
}

bool IsUtf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const utf8proc_uint8_t*>(text.data());
  auto left = static_cast<utf8proc_ssize_t>(text.size());
  while (left > 0) {
    utf8proc_int32_t code_point = 0;
    const utf8proc_ssize_t used = utf8proc_iterate(bytes, left, &code_point);
    if (used <= 0) return false;
    bytes += used;
    left -= used;
  }
  return true;
}

// harvardnlp's MR and Subj files are Latin-1 where they are not ASCII ("cr\xe8me"): a line that is
// not valid UTF-8 is read as Latin-1, every byte one code point.
std::string Latin1IfNotUtf8(std::string_view text) {
  if (IsUtf8(text)) return std::string(text);
  std::string out;
  for (char c : text) {
    utf8proc_uint8_t encoded[4];
    const utf8proc_ssize_t size = utf8proc_encode_char(static_cast<unsigned char>(c), encoded);
    out.append(reinterpret_cast<const char*>(encoded), static_cast<size_t>(size));
  }
  return out;
}

absl::StatusOr<std::vector<Record>> ReadRecords(const std::string& path,
                                                std::optional<ExampleFormat> format) {
  if (!format.has_value()) format = ExampleFormatFromPath(path);
  if (!format.has_value() || *format == ExampleFormat::kText) {
    return absl::InvalidArgumentError(
        absl::StrCat(path, ": give --format=jsonl|csv|tsv (examples need a text and a label)"));
  }
  auto content = ReadWholeFile(path);
  if (!content.ok()) return content.status();
  return ParseExamples(*content, *format, path);
}

absl::StatusOr<std::vector<v1::Demonstration>> ToExamples(const std::vector<Record>& records,
                                                          const FieldOptions& options,
                                                          const std::string& source) {
  if (records.empty()) return absl::InvalidArgumentError(absl::StrCat(source, ": no examples"));
  return BuildDemonstrations(records, options, source);
}

// The train split read from train_file; the test split read from test_file or, without one, every
// tenth training example (HoldOutEveryTenth). `read` maps a file to its examples.
template <typename ReadExamples>
absl::Status ReadSplits(const ReadExamples& read, const std::string& train_file,
                        const std::string& test_file, EvalDataset& dataset) {
  auto train = read(train_file);
  if (!train.ok()) return train.status();
  dataset.train = std::move(*train);
  if (test_file.empty()) {
    HoldOutEveryTenth(&dataset.train, &dataset.test);
    return absl::OkStatus();
  }
  auto test = read(test_file);
  if (!test.ok()) return test.status();
  dataset.test = std::move(*test);
  return absl::OkStatus();
}

}  // namespace

void HoldOutEveryTenth(std::vector<v1::Demonstration>* train,
                       std::vector<v1::Demonstration>* test) {
  std::vector<v1::Demonstration> kept;
  for (size_t i = 0; i < train->size(); ++i) {
    ((i + 1) % 10 == 0 ? *test : kept).push_back(std::move((*train)[i]));
  }
  *train = std::move(kept);
}

std::vector<Record> ParseLabelFirstLines(std::string_view content, char label_delimiter) {
  std::vector<Record> records;
  int line_number = 0;
  size_t start = 0;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(start, end - start);
    start = end + 1;
    ++line_number;
    line = Strip(line);
    if (line.empty()) continue;
    size_t space = line.find_first_of(" \t");
    // A label without a sentence (custrev.all has some) is no example.
    if (space == std::string_view::npos) continue;
    std::string_view label = line.substr(0, space);
    if (label_delimiter != 0) label = label.substr(0, label.find(label_delimiter));
    nlohmann::json fields = nlohmann::json::object();
    fields["label"] = std::string(label);
    fields["text"] = Latin1IfNotUtf8(Strip(line.substr(space)));
    records.push_back(Record{line_number, std::move(fields)});
  }
  return records;
}

absl::StatusOr<EvalDataset> LoadPresetDataset(const DatasetPreset& preset,
                                              const std::string& datasets_dir) {
  const std::filesystem::path folder = std::filesystem::path(datasets_dir) / preset.folder;
  std::error_code error;
  if (!std::filesystem::is_directory(folder, error)) {
    return absl::NotFoundError(
        absl::StrCat("preset ", preset.name, ": no folder ", folder.string(),
                     " (set --datasets_dir or $MANYSHOT_DATASETS to the directory holding the "
                     "dataset folders; the presets read public datasets, which are not part of the "
                     "repository; manyshot eval --preset=list shows which presets have their "
                     "files, and --train_file=PATH evaluates your own labelled file)"));
  }
  FieldOptions options;
  options.text_field = preset.text_field;
  options.fields = preset.fields;
  options.label_field = preset.label_field;
  options.labels = preset.labels;
  options.label_map = PresetLabelMap(preset);
  auto read = [&](const std::string& file) -> absl::StatusOr<std::vector<v1::Demonstration>> {
    const std::string path = (folder / file).string();
    absl::StatusOr<std::vector<Record>> records;
    if (preset.layout == DatasetFileLayout::kLabelFirst) {
      auto content = ReadWholeFile(path);
      if (!content.ok()) return content.status();
      records = ParseLabelFirstLines(*content, preset.label_delimiter);
    } else {
      records = ReadRecords(path, preset.layout == DatasetFileLayout::kCsv ? ExampleFormat::kCsv
                                                                           : ExampleFormat::kJsonl);
    }
    if (!records.ok()) return records.status();
    return ToExamples(*records, options, path);
  };
  EvalDataset dataset;
  dataset.name = preset.name;
  dataset.input_template = preset.input_template;
  dataset.labels = preset.labels;
  dataset.max_query_tokens = preset.max_query_tokens;
  absl::Status read_ok = ReadSplits(read, preset.train_file, preset.test_file, dataset);
  if (!read_ok.ok()) return read_ok;
  return dataset;
}

absl::StatusOr<EvalDataset> LoadFileDataset(const EvalFiles& files) {
  if (files.input_template.empty()) {
    return absl::InvalidArgumentError("--template is required without --preset");
  }
  EvalDataset dataset;
  dataset.name = std::filesystem::path(files.train_path).filename().string();
  dataset.input_template = files.input_template;
  dataset.labels = files.fields.labels;
  auto read = [&](const std::string& path) -> absl::StatusOr<std::vector<v1::Demonstration>> {
    auto records = ReadRecords(path, files.format);
    if (!records.ok()) return records.status();
    return ToExamples(*records, files.fields, path);
  };
  absl::Status read_ok = ReadSplits(read, files.train_path, files.test_path, dataset);
  if (!read_ok.ok()) return read_ok;
  if (dataset.train.empty() || dataset.test.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        files.train_path, ": too few examples to hold out a test split (every tenth example)"));
  }
  return dataset;
}

int GoldLabelIndex(const v1::Demonstration& example, const std::vector<std::string>& labels) {
  if (example.answer_case() == v1::Demonstration::kLabelIndex) {
    return example.label_index() < labels.size() ? static_cast<int>(example.label_index()) : -1;
  }
  auto it = std::find(labels.begin(), labels.end(), example.label());
  return it == labels.end() ? -1 : static_cast<int>(it - labels.begin());
}

}  // namespace manyshot::client
