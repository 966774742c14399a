// Turning flags and example records into manyshot.v1 request messages (no I/O, no RPCs), so that
// every rule here is unit-tested.
#pragma once

#include <cstddef>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "client/example_reader.h"
#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::client {

// Interprets the escapes \n, \t, \r and \\ in a flag value (shells pass them literally); any other
// backslash is kept as it is.
std::string UnescapeFlagValue(std::string_view value);

// The `{name}` placeholders of a template, in order of first appearance; `{{` and `}}` are literal
// braces and not placeholders.
std::vector<std::string> TemplatePlaceholders(std::string_view input_template);

// "0=negative,1=positive" -> {"0": "negative", "1": "positive"}. `flag` names the flag in errors.
absl::StatusOr<std::map<std::string, std::string>> ParseKeyValueList(std::string_view value,
                                                                     std::string_view flag);
// Repeated --field=NAME=COLUMN values -> {NAME: COLUMN}.
absl::StatusOr<std::map<std::string, std::string>> ParseFieldMappings(
    const std::vector<std::string>& values);

absl::StatusOr<v1::Alignment> ParseAlignment(std::string_view name);  // truncate|attention_mask|...
absl::StatusOr<v1::Mode> ParseMode(std::string_view name);  // ""|structured|conventional|parallel
// ""|none|keep_start|keep_end (--truncate).
absl::StatusOr<v1::InputTruncation> ParseTruncation(std::string_view name);

// How records become Demonstrations / Inputs.
struct FieldOptions {
  std::string text_field = "text";
  std::string label_field = "label";
  // Placeholder name -> record column (--field=NAME=COLUMN), filling Demonstration/Input.fields.
  std::map<std::string, std::string> fields;
  // Raw label value -> label word (--label_map).
  std::map<std::string, std::string> label_map;
  // The task's label words (--labels).
  std::vector<std::string> labels;
};

// Before anything is sent: every placeholder of `input_template` can be filled from `first` (the
// file's first record) under `options`, else INVALID_ARGUMENT naming the placeholder, the file's
// columns and the flag that maps it (--field=NAME=COLUMN, or --text_field for a single one).
absl::Status CheckTemplateColumns(std::string_view input_template, const FieldOptions& options,
                                  const Record& first, std::string_view source);

// Label resolution for a demonstration, in this order:
//  1. --label_map given: the raw value must be a key; the label is the mapped word.
//  2. --labels given and the value is one of the label words: that word.
//  3. --labels given and the value is a non-negative integer below the number of labels:
//     label_index (so "0"/"1" in SST-2 files select labels[0]/labels[1]).
//  4. --labels given otherwise: an error naming the line.
//  5. No --labels: the raw value is the answer text.
// The text comes from `text_field`; it may be absent only when every placeholder is mapped with
// --field. Errors name the source and line.
absl::StatusOr<std::vector<v1::Demonstration>> BuildDemonstrations(
    const std::vector<Record>& records, const FieldOptions& options, std::string_view source);

// Test inputs: text from `text_field` (or the mapped fields), labels ignored.
absl::StatusOr<std::vector<v1::Input>> BuildInputs(const std::vector<Record>& records,
                                                   const FieldOptions& options,
                                                   std::string_view source);

// Splits an upload into CreateTask messages: the first carries task_id, spec and replace; every
// message carries at most `chunk` demonstrations and, beyond its first demonstration, at most
// `max_bytes` of serialized demonstrations. An empty set still yields one message.
std::vector<v1::CreateTaskRequest> ChunkCreateTaskRequests(
    const std::string& task_id, const v1::TaskSpec& spec, bool replace,
    const std::vector<v1::Demonstration>& demonstrations, size_t chunk,
    size_t max_bytes = size_t{3} << 20);

// Splits items into batches of at most `batch` (>= 1).
template <typename T>
std::vector<std::vector<T>> Batches(const std::vector<T>& items, size_t batch) {
  std::vector<std::vector<T>> out;
  for (size_t i = 0; i < items.size(); i += batch) {
    size_t end = std::min(items.size(), i + batch);
    out.emplace_back(items.begin() + static_cast<std::ptrdiff_t>(i),
                     items.begin() + static_cast<std::ptrdiff_t>(end));
  }
  return out;
}

// One line of text for tab-separated output: tabs, CR and LF escaped as \t, \r, \n.
std::string OneLine(std::string_view text);

}  // namespace manyshot::client
