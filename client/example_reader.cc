#include "client/example_reader.h"

#include <fstream>
#include <iostream>
#include <iterator>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"

namespace manyshot::client {
namespace {

absl::Status LineError(std::string_view source, int line, const std::string& message) {
  return absl::InvalidArgumentError(absl::StrCat(std::string(source), ":", line, ": ", message));
}

// Splits into lines (LF or CRLF), keeping 1-based line numbers.
std::vector<std::string_view> SplitLines(std::string_view content) {
  std::vector<std::string_view> lines;
  size_t start = 0;
  while (start < content.size()) {
    size_t end = content.find('\n', start);
    if (end == std::string_view::npos) end = content.size();
    std::string_view line = content.substr(start, end - start);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    start = end + 1;
  }
  return lines;
}

bool IsBlank(std::string_view line) {
  for (char c : line) {
    if (!absl::ascii_isspace(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Splits on every `delimiter` (this abseil's StrSplit takes absl::string_view only).
std::vector<std::string_view> Split(std::string_view text, char delimiter) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t pos; (pos = text.find(delimiter, start)) != std::string_view::npos; start = pos + 1) {
    parts.push_back(text.substr(start, pos - start));
  }
  parts.push_back(text.substr(start));
  return parts;
}

absl::StatusOr<std::vector<Record>> ParseJsonl(std::string_view content, std::string_view source) {
  std::vector<Record> records;
  std::vector<std::string_view> lines = SplitLines(content);
  for (size_t i = 0; i < lines.size(); ++i) {
    int line_number = static_cast<int>(i) + 1;
    if (IsBlank(lines[i])) continue;
    nlohmann::json value = nlohmann::json::parse(lines[i], nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded()) return LineError(source, line_number, "invalid JSON");
    if (!value.is_object()) return LineError(source, line_number, "expected a JSON object");
    records.push_back(Record{line_number, std::move(value)});
  }
  return records;
}

// One CSV record: its fields and the line it started on.
struct CsvRow {
  int line;
  std::vector<std::string> fields;
};

absl::StatusOr<std::vector<CsvRow>> ParseCsvRows(std::string_view content,
                                                 std::string_view source) {
  std::vector<CsvRow> rows;
  size_t i = 0;
  int line = 1;
  while (i < content.size()) {
    // A line that is empty (or only "\r") between records is skipped.
    if (content[i] == '\n' ||
        (content[i] == '\r' && i + 1 < content.size() && content[i + 1] == '\n')) {
      i += content[i] == '\r' ? 2 : 1;
      ++line;
      continue;
    }
    CsvRow row{line, {}};
    bool end_of_record = false;
    while (!end_of_record) {
      std::string field;
      if (i < content.size() && content[i] == '"') {
        int field_line = line;
        ++i;
        bool closed = false;
        while (i < content.size()) {
          char c = content[i];
          if (c == '"') {
            if (i + 1 < content.size() && content[i + 1] == '"') {
              field.push_back('"');
              i += 2;
              continue;
            }
            ++i;
            closed = true;
            break;
          }
          if (c == '\n') ++line;
          field.push_back(c);
          ++i;
        }
        if (!closed) return LineError(source, field_line, "unterminated quoted field");
        if (i < content.size() && content[i] == '\r' && i + 1 < content.size() &&
            content[i + 1] == '\n') {
          ++i;
        }
        if (i < content.size() && content[i] != ',' && content[i] != '\n') {
          return LineError(source, line, "unexpected character after a closing quote");
        }
      } else {
        while (i < content.size() && content[i] != ',' && content[i] != '\n') {
          if (content[i] == '"') {
            return LineError(source, line, "quote inside an unquoted field (quote the field)");
          }
          field.push_back(content[i]);
          ++i;
        }
        if (!field.empty() && field.back() == '\r') field.pop_back();
      }
      row.fields.push_back(std::move(field));
      if (i >= content.size()) {
        end_of_record = true;
      } else if (content[i] == ',') {
        ++i;
      } else {  // '\n'
        ++i;
        ++line;
        end_of_record = true;
      }
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<std::vector<CsvRow>> ParseTsvRows(std::string_view content) {
  std::vector<CsvRow> rows;
  std::vector<std::string_view> lines = SplitLines(content);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (lines[i].empty()) continue;
    CsvRow row{static_cast<int>(i) + 1, {}};
    for (std::string_view field : Split(lines[i], '\t')) row.fields.emplace_back(field);
    rows.push_back(std::move(row));
  }
  return rows;
}

absl::StatusOr<std::vector<Record>> RowsToRecords(absl::StatusOr<std::vector<CsvRow>> rows,
                                                  std::string_view source) {
  if (!rows.ok()) return rows.status();
  std::vector<Record> records;
  if (rows->empty()) return records;
  const std::vector<std::string>& header = rows->front().fields;
  for (size_t c = 0; c < header.size(); ++c) {
    if (header[c].empty()) {
      return LineError(source, rows->front().line,
                       absl::StrCat("header column ", c + 1, " has no name"));
    }
  }
  for (size_t r = 1; r < rows->size(); ++r) {
    const CsvRow& row = (*rows)[r];
    if (row.fields.size() != header.size()) {
      return LineError(
          source, row.line,
          absl::StrCat(row.fields.size(), " fields, but the header has ", header.size()));
    }
    Record record{row.line, nlohmann::json::object()};
    for (size_t c = 0; c < header.size(); ++c) record.fields[header[c]] = row.fields[c];
    records.push_back(std::move(record));
  }
  return records;
}

std::vector<Record> ParseText(std::string_view content) {
  std::vector<Record> records;
  std::vector<std::string_view> lines = SplitLines(content);
  for (size_t i = 0; i < lines.size(); ++i) {
    if (IsBlank(lines[i])) continue;
    records.push_back(Record{static_cast<int>(i) + 1, {{"text", std::string(lines[i])}}});
  }
  return records;
}

}  // namespace

absl::StatusOr<ExampleFormat> ParseExampleFormat(std::string_view name) {
  std::string lower = absl::AsciiStrToLower(std::string(name));
  if (lower == "jsonl" || lower == "json" || lower == "ndjson") return ExampleFormat::kJsonl;
  if (lower == "csv") return ExampleFormat::kCsv;
  if (lower == "tsv") return ExampleFormat::kTsv;
  if (lower == "text" || lower == "txt") return ExampleFormat::kText;
  return absl::InvalidArgumentError(
      absl::StrCat("--format=", lower, ": expected jsonl, csv, tsv or text"));
}

std::optional<ExampleFormat> ExampleFormatFromPath(std::string_view path) {
  size_t dot = path.rfind('.');
  size_t slash = path.rfind('/');
  if (dot == std::string_view::npos || (slash != std::string_view::npos && dot < slash)) {
    return std::nullopt;
  }
  absl::StatusOr<ExampleFormat> format = ParseExampleFormat(path.substr(dot + 1));
  if (!format.ok()) return std::nullopt;
  return *format;
}

absl::StatusOr<std::vector<Record>> ParseExamples(std::string_view content, ExampleFormat format,
                                                  std::string_view source) {
  // A UTF-8 byte order mark (common in spreadsheet exports) is not part of the first field.
  if (content.substr(0, 3) == "\xEF\xBB\xBF") content.remove_prefix(3);
  switch (format) {
    case ExampleFormat::kJsonl:
      return ParseJsonl(content, source);
    case ExampleFormat::kCsv:
      return RowsToRecords(ParseCsvRows(content, source), source);
    case ExampleFormat::kTsv:
      return RowsToRecords(ParseTsvRows(content), source);
    case ExampleFormat::kText:
      return ParseText(content);
  }
  return absl::InternalError("unknown format");
}

absl::StatusOr<std::vector<Record>> ReadExamples(const std::string& path, ExampleFormat format) {
  std::string content;
  if (path == "-") {
    content.assign(std::istreambuf_iterator<char>(std::cin), std::istreambuf_iterator<char>());
    return ParseExamples(content, format, "<stdin>");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::InvalidArgumentError(absl::StrCat("--file=", path, ": cannot open"));
  std::ostringstream buffer;
  buffer << in.rdbuf();
  content = buffer.str();
  return ParseExamples(content, format, path);
}

const nlohmann::json* GetJsonField(const Record& record, std::string_view path) {
  const nlohmann::json* node = &record.fields;
  // A key that contains dots itself (a CSV column "a.b") wins over the nested reading.
  if (auto it = node->find(std::string(path)); it != node->end()) return &*it;
  for (std::string_view part : Split(path, '.')) {
    if (!node->is_object()) return nullptr;
    auto it = node->find(std::string(part));
    if (it == node->end()) return nullptr;
    node = &*it;
  }
  return node;
}

std::optional<std::string> GetStringField(const Record& record, std::string_view path) {
  const nlohmann::json* value = GetJsonField(record, path);
  if (value == nullptr || value->is_null() || value->is_object() || value->is_array()) {
    return std::nullopt;
  }
  if (value->is_string()) return value->get<std::string>();
  return value->dump();
}

}  // namespace manyshot::client
