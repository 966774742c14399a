#include "client/request_builder.h"

#include <algorithm>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace manyshot::client {
namespace {

std::vector<std::string_view> Split(std::string_view text, char delimiter) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t pos; (pos = text.find(delimiter, start)) != std::string_view::npos; start = pos + 1) {
    parts.push_back(text.substr(start, pos - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

absl::Status LineError(std::string_view source, int line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(source), ":", line, ": ", message));
}

// Fills text and fields of a Demonstration or an Input from a record.
template <typename Message>
absl::Status FillInput(const Record& record, const FieldOptions& options, std::string_view source,
                       Message* message) {
  std::optional<std::string> text = GetStringField(record, options.text_field);
  if (text.has_value()) message->set_text(*text);
  for (const auto& [name, column] : options.fields) {
    std::optional<std::string> value = GetStringField(record, column);
    if (!value.has_value()) {
      return LineError(
          source, record.line,
          absl::StrCat("no field '", column, "' (for --field=", name, "=", column, ")"));
    }
    (*message->mutable_fields())[name] = *value;
  }
  if (!text.has_value() && options.fields.empty()) {
    return LineError(source, record.line,
                     absl::StrCat("no field '", options.text_field,
                                  "' (set --text_field, or map placeholders with --field)"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string UnescapeFlagValue(std::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == '\\' && i + 1 < value.size()) {
      char next = value[i + 1];
      if (next == 'n' || next == 't' || next == 'r' || next == '\\') {
        out.push_back(next == 'n' ? '\n' : next == 't' ? '\t' : next == 'r' ? '\r' : '\\');
        ++i;
        continue;
      }
    }
    out.push_back(value[i]);
  }
  return out;
}

absl::Status CheckTemplateColumns(std::string_view input_template, const FieldOptions& options,
                                  const Record& first, std::string_view source) {
  std::vector<std::string> columns;
  if (first.fields.is_object()) {
    for (const auto& [name, value] : first.fields.items()) columns.push_back(name);
  }
  const std::string known = columns.empty() ? "none" : absl::StrJoin(columns, ", ");
  const std::vector<std::string> placeholders = TemplatePlaceholders(input_template);
  for (const std::string& name : placeholders) {
    auto mapped = options.fields.find(name);
    if (mapped != options.fields.end()) {
      if (GetStringField(first, mapped->second).has_value()) continue;
      return absl::InvalidArgumentError(
          absl::StrCat("--template: placeholder {", name, "} reads column '", mapped->second,
                       "', which ", std::string(source), " does not have (its columns: ", known,
                       "); map it with --field=", name, "=COLUMN"));
    }
    // A placeholder nobody mapped is filled from the text field (the only placeholder, or
    // {text}).
    if (GetStringField(first, options.text_field).has_value()) continue;
    return absl::InvalidArgumentError(absl::StrCat(
        "--template: placeholder {", name, "} is filled from the text field '", options.text_field,
        "', which ", std::string(source), " does not have (its columns: ", known,
        "); name the column with --text_field=COLUMN or map it with --field=", name, "=COLUMN"));
  }
  return absl::OkStatus();
}

std::vector<std::string> TemplatePlaceholders(std::string_view input_template) {
  std::vector<std::string> names;
  for (size_t i = 0; i < input_template.size(); ++i) {
    char c = input_template[i];
    if ((c == '{' || c == '}') && i + 1 < input_template.size() && input_template[i + 1] == c) {
      ++i;  // {{ or }}
      continue;
    }
    if (c != '{') continue;
    size_t close = input_template.find('}', i + 1);
    if (close == std::string_view::npos) break;
    std::string name(input_template.substr(i + 1, close - i - 1));
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
    i = close;
  }
  return names;
}

absl::StatusOr<std::map<std::string, std::string>> ParseKeyValueList(std::string_view value,
                                                                     std::string_view flag) {
  std::map<std::string, std::string> out;
  if (value.empty()) return out;
  for (std::string_view item : Split(value, ',')) {
    size_t eq = item.find('=');
    if (eq == std::string_view::npos || eq == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", std::string(flag), ": '", std::string(item), "' is not KEY=VALUE"));
    }
    out[std::string(item.substr(0, eq))] = std::string(item.substr(eq + 1));
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> ParseFieldMappings(
    const std::vector<std::string>& values) {
  std::map<std::string, std::string> out;
  for (const std::string& value : values) {
    size_t eq = value.find('=');
    if (eq == std::string::npos || eq == 0 || eq + 1 == value.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--field=", value, ": expected NAME=COLUMN (placeholder=column)"));
    }
    out[value.substr(0, eq)] = value.substr(eq + 1);
  }
  return out;
}

absl::StatusOr<v1::Alignment> ParseAlignment(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower.empty()) return v1::ALIGNMENT_UNSPECIFIED;
  if (lower == "truncate") return v1::ALIGNMENT_TRUNCATE;
  if (lower == "attention_mask") return v1::ALIGNMENT_ATTENTION_MASK;
  if (lower == "pad_space") return v1::ALIGNMENT_PAD_SPACE;
  return absl::InvalidArgumentError(
      absl::StrCat("--alignment=", lower, ": expected truncate, attention_mask or pad_space"));
}

absl::StatusOr<v1::InputTruncation> ParseTruncation(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower.empty()) return v1::INPUT_TRUNCATION_UNSPECIFIED;
  if (lower == "none") return v1::INPUT_TRUNCATION_NONE;
  if (lower == "keep_start") return v1::INPUT_TRUNCATION_KEEP_START;
  if (lower == "keep_end") return v1::INPUT_TRUNCATION_KEEP_END;
  return absl::InvalidArgumentError(
      absl::StrCat("--truncate=", lower, ": expected none, keep_start or keep_end"));
}

absl::StatusOr<v1::Mode> ParseMode(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower.empty()) return v1::MODE_UNSPECIFIED;
  if (lower == "structured") return v1::MODE_STRUCTURED;
  if (lower == "conventional") return v1::MODE_CONVENTIONAL;
  if (lower == "parallel") return v1::MODE_PARALLEL;
  // Encoder-decoder (T5) modes.
  if (lower == "saicl") return v1::MODE_SAICL;
  if (lower == "fid") return v1::MODE_FID;
  if (lower == "ensemble") return v1::MODE_ENSEMBLE;
  if (lower == "group_fid") return v1::MODE_GROUP_FID;
  return absl::InvalidArgumentError(absl::StrCat(
      "--mode=", lower,
      ": expected structured, conventional or parallel (decoder-only models), or conventional, "
      "saicl, fid, ensemble or group_fid (encoder-decoder models)"));
}

absl::StatusOr<std::vector<v1::Demonstration>> BuildDemonstrations(
    const std::vector<Record>& records, const FieldOptions& options, std::string_view source) {
  std::vector<v1::Demonstration> out;
  out.reserve(records.size());
  for (const Record& record : records) {
    v1::Demonstration demonstration;
    if (absl::Status status = FillInput(record, options, source, &demonstration); !status.ok()) {
      return status;
    }
    std::optional<std::string> raw = GetStringField(record, options.label_field);
    if (!raw.has_value()) {
      return LineError(
          source, record.line,
          absl::StrCat("no label field '", options.label_field, "' (set --label_field)"));
    }
    std::string label = *raw;
    if (!options.label_map.empty()) {
      auto it = options.label_map.find(label);
      if (it == options.label_map.end()) {
        return LineError(source, record.line,
                         absl::StrCat("label '", label, "' is not a key of --label_map"));
      }
      label = it->second;
    }
    if (options.labels.empty()) {
      demonstration.set_label(label);
    } else if (std::find(options.labels.begin(), options.labels.end(), label) !=
               options.labels.end()) {
      demonstration.set_label(label);
    } else {
      uint32_t index = 0;
      bool digits = !label.empty() && std::all_of(label.begin(), label.end(), [](char c) {
        return absl::ascii_isdigit(static_cast<unsigned char>(c));
      });
      if (options.label_map.empty() && digits && absl::SimpleAtoi(label, &index) &&
          index < options.labels.size()) {
        demonstration.set_label_index(index);
      } else {
        return LineError(source, record.line,
                         absl::StrCat("label '", label, "' is not one of --labels (",
                                      options.labels.size(), " labels; integer labels 0..",
                                      options.labels.size() - 1, " select by index)"));
      }
    }
    out.push_back(std::move(demonstration));
  }
  return out;
}

absl::StatusOr<std::vector<v1::Input>> BuildInputs(const std::vector<Record>& records,
                                                   const FieldOptions& options,
                                                   std::string_view source) {
  std::vector<v1::Input> out;
  out.reserve(records.size());
  for (const Record& record : records) {
    v1::Input input;
    if (absl::Status status = FillInput(record, options, source, &input); !status.ok()) {
      return status;
    }
    out.push_back(std::move(input));
  }
  return out;
}

std::vector<v1::CreateTaskRequest> ChunkCreateTaskRequests(
    const std::string& task_id, const v1::TaskSpec& spec, bool replace,
    const std::vector<v1::Demonstration>& demonstrations, size_t chunk, size_t max_bytes) {
  chunk = std::max<size_t>(chunk, 1);
  std::vector<v1::CreateTaskRequest> requests(1);
  requests[0].set_task_id(task_id);
  *requests[0].mutable_spec() = spec;
  requests[0].set_replace(replace);
  size_t bytes = 0;
  for (const v1::Demonstration& demonstration : demonstrations) {
    size_t size = demonstration.ByteSizeLong();
    v1::CreateTaskRequest* current = &requests.back();
    int count = current->demonstrations_size();
    if (count > 0 && (static_cast<size_t>(count) >= chunk || bytes + size > max_bytes)) {
      current = &requests.emplace_back();
      bytes = 0;
    }
    *current->add_demonstrations() = demonstration;
    bytes += size;
  }
  return requests;
}

std::string OneLine(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      out.push_back(c);
    }
  }
  return out;
}

}  // namespace manyshot::client
