#include "client/example_reader.h"

#include <filesystem>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"

namespace manyshot::client {
namespace {

using ::testing::HasSubstr;

std::vector<Record> MustParse(std::string_view content, ExampleFormat format) {
  auto records = ParseExamples(content, format, "test");
  EXPECT_TRUE(records.ok()) << records.status();
  return records.ok() ? *records : std::vector<Record>{};
}

std::string Field(const Record& record, std::string_view path) {
  return GetStringField(record, path).value_or("<absent>");
}

TEST(ExampleReaderTest, CsvQuotedFieldsWithCommasNewlinesAndQuotes) {
  std::string csv =
      "text,label\n"
      "plain,0\n"
      "\"a, b, and c\",1\n"
      "\"she said \"\"hi\"\"\",0\n"
      "\"two\nlines\",1\n"
      "after,0\n";
  std::vector<Record> records = MustParse(csv, ExampleFormat::kCsv);
  ASSERT_EQ(records.size(), 5u);
  EXPECT_EQ(Field(records[0], "text"), "plain");
  EXPECT_EQ(Field(records[0], "label"), "0");
  EXPECT_EQ(records[0].line, 2);
  EXPECT_EQ(Field(records[1], "text"), "a, b, and c");
  EXPECT_EQ(Field(records[2], "text"), "she said \"hi\"");
  EXPECT_EQ(Field(records[3], "text"), "two\nlines");
  EXPECT_EQ(records[3].line, 5);
  // The record after a multi-line field starts on the right physical line.
  EXPECT_EQ(Field(records[4], "text"), "after");
  EXPECT_EQ(records[4].line, 7);
}

TEST(ExampleReaderTest, CsvCrlfEmptyFieldsNoTrailingNewlineAndBom) {
  std::string csv = "\xEF\xBB\xBFtext,label,extra\r\n\"x\",1,\r\ny,,z";
  std::vector<Record> records = MustParse(csv, ExampleFormat::kCsv);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(Field(records[0], "text"), "x");
  EXPECT_EQ(Field(records[0], "label"), "1");
  EXPECT_EQ(Field(records[0], "extra"), "");
  EXPECT_EQ(Field(records[1], "text"), "y");
  EXPECT_EQ(Field(records[1], "label"), "");
  EXPECT_EQ(Field(records[1], "extra"), "z");
}

TEST(ExampleReaderTest, CsvWrongColumnCountNamesTheLine) {
  auto records = ParseExamples("text,label\nok,1\n\"multi\nline\",0\nbad,1,extra\n",
                               ExampleFormat::kCsv, "sst2.csv");
  ASSERT_FALSE(records.ok());
  EXPECT_EQ(records.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(records.status().message(), "sst2.csv:5: 3 fields, but the header has 2");
}

TEST(ExampleReaderTest, CsvQuoteErrorsNameTheLine) {
  auto unterminated =
      ParseExamples("text,label\nok,1\n\"never closed,1\n", ExampleFormat::kCsv, "f.csv");
  ASSERT_FALSE(unterminated.ok());
  EXPECT_EQ(unterminated.status().message(), "f.csv:3: unterminated quoted field");
  auto stray = ParseExamples("text,label\nab\"c,1\n", ExampleFormat::kCsv, "f.csv");
  ASSERT_FALSE(stray.ok());
  EXPECT_THAT(stray.status().message(), HasSubstr("f.csv:2: quote inside an unquoted field"));
  auto after = ParseExamples("text,label\n\"ab\"c,1\n", ExampleFormat::kCsv, "f.csv");
  ASSERT_FALSE(after.ok());
  EXPECT_THAT(after.status().message(), HasSubstr("f.csv:2: unexpected character after"));
}

TEST(ExampleReaderTest, TsvHasNoQuotingAndChecksColumns) {
  std::string tsv = "sentence\tlabel\r\nit 's \"great\", really\t1\n\nbad movie\t0\n";
  std::vector<Record> records = MustParse(tsv, ExampleFormat::kTsv);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(Field(records[0], "sentence"), "it 's \"great\", really");
  EXPECT_EQ(Field(records[0], "label"), "1");
  EXPECT_EQ(Field(records[1], "sentence"), "bad movie");
  EXPECT_EQ(records[1].line, 4);
  auto bad = ParseExamples("a\tb\nx\ty\nonly-one\n", ExampleFormat::kTsv, "t.tsv");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "t.tsv:3: 1 fields, but the header has 2");
}

TEST(ExampleReaderTest, JsonlNestedFieldsAndScalars) {
  std::string jsonl =
      "{\"input\": {\"premise\": \"A man sleeps.\", \"hypothesis\": \"He rests.\"}, \"label\": 0}\n"
      "\n"
      "{\"text\": \"t\", \"label\": true, \"score\": 1.5, \"a.b\": \"dotted key\"}\n";
  std::vector<Record> records = MustParse(jsonl, ExampleFormat::kJsonl);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(Field(records[0], "input.premise"), "A man sleeps.");
  EXPECT_EQ(Field(records[0], "input.hypothesis"), "He rests.");
  EXPECT_EQ(Field(records[0], "label"), "0");
  EXPECT_EQ(Field(records[0], "input"), "<absent>");  // an object is not a string
  EXPECT_EQ(Field(records[0], "input.missing"), "<absent>");
  EXPECT_EQ(records[1].line, 3);
  EXPECT_EQ(Field(records[1], "label"), "true");
  EXPECT_EQ(Field(records[1], "score"), "1.5");
  EXPECT_EQ(Field(records[1], "a.b"), "dotted key");
}

TEST(ExampleReaderTest, JsonlErrorsNameTheLine) {
  auto bad =
      ParseExamples("{\"text\": \"ok\"}\n{\"text\": oops}\n", ExampleFormat::kJsonl, "d.jsonl");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "d.jsonl:2: invalid JSON");
  auto array = ParseExamples("\n\n[1, 2]\n", ExampleFormat::kJsonl, "d.jsonl");
  ASSERT_FALSE(array.ok());
  EXPECT_EQ(array.status().message(), "d.jsonl:3: expected a JSON object");
}

TEST(ExampleReaderTest, PlainTextOneInputPerLine) {
  std::vector<Record> records =
      MustParse("first input\n\n  \nsecond, with comma\r\n", ExampleFormat::kText);
  ASSERT_EQ(records.size(), 2u);
  EXPECT_EQ(Field(records[0], "text"), "first input");
  EXPECT_EQ(Field(records[1], "text"), "second, with comma");
  EXPECT_EQ(records[1].line, 4);
}

TEST(ExampleReaderTest, FormatsFromNamesAndExtensions) {
  EXPECT_EQ(*ParseExampleFormat("JSONL"), ExampleFormat::kJsonl);
  EXPECT_EQ(*ParseExampleFormat("tsv"), ExampleFormat::kTsv);
  EXPECT_FALSE(ParseExampleFormat("xml").ok());
  EXPECT_EQ(ExampleFormatFromPath("data/sst2.train.csv"), ExampleFormat::kCsv);
  EXPECT_EQ(ExampleFormatFromPath("x.ndjson"), ExampleFormat::kJsonl);
  EXPECT_EQ(ExampleFormatFromPath("dev.tsv"), ExampleFormat::kTsv);
  EXPECT_EQ(ExampleFormatFromPath("a.dir/noext"), std::nullopt);
  EXPECT_EQ(ExampleFormatFromPath("x.parquet"), std::nullopt);
}

TEST(ExampleReaderTest, ReadsFilesAndNamesMissingOnes) {
  const manyshot::testing::TempDir dir("manyshot_example_reader_");
  const auto path = dir.path() / "examples.tsv";
  manyshot::testing::WriteFile(path, "text\tlabel\nhello\tpositive\n");
  auto records = ReadExamples(path.string(), ExampleFormat::kTsv);
  ASSERT_TRUE(records.ok()) << records.status();
  ASSERT_EQ(records->size(), 1u);
  EXPECT_EQ(Field((*records)[0], "label"), "positive");
  auto missing = ReadExamples("/nonexistent/x.tsv", ExampleFormat::kTsv);
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().message(), "--file=/nonexistent/x.tsv: cannot open");
}

}  // namespace
}  // namespace manyshot::client
