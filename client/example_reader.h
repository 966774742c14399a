// Reading examples (demonstrations, test inputs) from JSONL, CSV, TSV or plain-text files.
//
// Every format yields records: one JSON object per example, with the physical line it started on.
// - jsonl: one JSON object per line; blank lines are skipped. Values may be nested objects, reached
//   with dotted paths ("input.premise"); non-string scalars read as their JSON text (0, true).
// - csv:   RFC 4180. The first record is the header naming the columns. Fields may be quoted with
//   '"'; a quoted field may contain commas, CR/LF line breaks and doubled quotes (""). Every record
//   must have as many fields as the header. CRLF and LF line endings are both accepted.
// - tsv:   The first line is the header; fields are separated by tabs, no quoting (quotes are
//   literal), one record per line, every line with as many fields as the header.
// - text:  One example per line as {"text": LINE}; blank lines are skipped.
// Errors name the source and the line: "data.csv:7: 3 fields, but the header has 2".
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"

namespace manyshot::client {

enum class ExampleFormat { kJsonl, kCsv, kTsv, kText };

// "jsonl" (also "json", "ndjson"), "csv", "tsv", "text" (also "txt").
absl::StatusOr<ExampleFormat> ParseExampleFormat(std::string_view name);
// From the file name's extension (.jsonl .ndjson .json .csv .tsv .txt); nullopt when unknown.
std::optional<ExampleFormat> ExampleFormatFromPath(std::string_view path);

struct Record {
  int line = 0;           // 1-based physical line where the record starts
  nlohmann::json fields;  // a JSON object
};

// Parses `content`; `source` names it in error messages (a path or "<stdin>").
absl::StatusOr<std::vector<Record>> ParseExamples(std::string_view content, ExampleFormat format,
                                                  std::string_view source);

// Reads a file ("-" is stdin) and parses it.
absl::StatusOr<std::vector<Record>> ReadExamples(const std::string& path, ExampleFormat format);

// The value at a dotted path ("text", "input.premise"); strings as-is, other scalars as their JSON
// text; nullopt when absent, null, or an object/array.
std::optional<std::string> GetStringField(const Record& record, std::string_view path);
// The JSON value at a dotted path, or nullptr when absent.
const nlohmann::json* GetJsonField(const Record& record, std::string_view path);

}  // namespace manyshot::client
