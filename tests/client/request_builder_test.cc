#include "client/request_builder.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot::client {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::Pair;
using ::testing::UnorderedElementsAre;

std::vector<Record> Parse(std::string_view content, ExampleFormat format) {
  auto records = ParseExamples(content, format, "test");
  EXPECT_TRUE(records.ok()) << records.status();
  return records.ok() ? *records : std::vector<Record>{};
}

TEST(RequestBuilderTest, UnescapesFlagValues) {
  EXPECT_EQ(UnescapeFlagValue("Sentence: {text}\\nLabel:"), "Sentence: {text}\nLabel:");
  EXPECT_EQ(UnescapeFlagValue("\\n\\n"), "\n\n");
  EXPECT_EQ(UnescapeFlagValue("a\\tb\\r"), "a\tb\r");
  EXPECT_EQ(UnescapeFlagValue("back\\\\nslash"), "back\\nslash");  // \\ then n: no newline
  EXPECT_EQ(UnescapeFlagValue("C:\\path\\x"), "C:\\path\\x");      // unknown: kept
  EXPECT_EQ(UnescapeFlagValue("trailing\\"), "trailing\\");
  EXPECT_EQ(UnescapeFlagValue(" {label}"), " {label}");
}

TEST(RequestBuilderTest, TemplatePlaceholders) {
  EXPECT_THAT(TemplatePlaceholders("Sentence: {text}\nLabel:"), ElementsAre("text"));
  EXPECT_THAT(TemplatePlaceholders("{premise} Question: {hypothesis}? {premise}"),
              ElementsAre("premise", "hypothesis"));
  EXPECT_THAT(TemplatePlaceholders("{{literal}} and {x}"), ElementsAre("x"));
  EXPECT_THAT(TemplatePlaceholders("none"), ElementsAre());
}

TEST(RequestBuilderTest, KeyValueListsAndFieldMappings) {
  auto map = ParseKeyValueList("0=negative,1=positive", "label_map");
  ASSERT_TRUE(map.ok());
  EXPECT_THAT(*map, UnorderedElementsAre(Pair("0", "negative"), Pair("1", "positive")));
  auto bad = ParseKeyValueList("0=negative,1", "label_map");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().message(), "--label_map: '1' is not KEY=VALUE");
  auto fields = ParseFieldMappings({"premise=sentence1", "hypothesis=input.h"});
  ASSERT_TRUE(fields.ok());
  EXPECT_THAT(*fields,
              UnorderedElementsAre(Pair("premise", "sentence1"), Pair("hypothesis", "input.h")));
  auto bad_field = ParseFieldMappings({"premise"});
  ASSERT_FALSE(bad_field.ok());
  EXPECT_THAT(bad_field.status().message(), HasSubstr("--field=premise: expected NAME=COLUMN"));
}

TEST(RequestBuilderTest, ParsesEnums) {
  EXPECT_EQ(*ParseAlignment("attention_mask"), v1::ALIGNMENT_ATTENTION_MASK);
  EXPECT_EQ(*ParseAlignment(""), v1::ALIGNMENT_UNSPECIFIED);
  EXPECT_FALSE(ParseAlignment("left").ok());
  EXPECT_EQ(*ParseMode("Parallel"), v1::MODE_PARALLEL);
  EXPECT_EQ(*ParseMode("SAICL"), v1::MODE_SAICL);
  EXPECT_EQ(*ParseMode("fid"), v1::MODE_FID);
  EXPECT_EQ(*ParseMode("ensemble"), v1::MODE_ENSEMBLE);
  EXPECT_EQ(*ParseMode("group_fid"), v1::MODE_GROUP_FID);
  EXPECT_EQ(ParseMode("x").status().message(),
            "--mode=x: expected structured, conventional or parallel (decoder-only models), or "
            "conventional, saicl, fid, ensemble or group_fid (encoder-decoder models)");
}

TEST(RequestBuilderTest, LabelMapMapsRawValuesToWords) {
  std::vector<Record> records = Parse("sentence\tlabel\ngreat\t1\nawful\t0\n", ExampleFormat::kTsv);
  FieldOptions options;
  options.text_field = "sentence";
  options.label_map = {{"0", "negative"}, {"1", "positive"}};
  options.labels = {"negative", "positive"};
  auto demos = BuildDemonstrations(records, options, "sst2.tsv");
  ASSERT_TRUE(demos.ok()) << demos.status();
  ASSERT_EQ(demos->size(), 2u);
  EXPECT_EQ((*demos)[0].text(), "great");
  EXPECT_EQ((*demos)[0].answer_case(), v1::Demonstration::kLabel);
  EXPECT_EQ((*demos)[0].label(), "positive");
  EXPECT_EQ((*demos)[1].label(), "negative");

  std::vector<Record> unknown = Parse("sentence\tlabel\ngreat\t1\nmeh\t2\n", ExampleFormat::kTsv);
  auto error = BuildDemonstrations(unknown, options, "sst2.tsv");
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().message(), "sst2.tsv:3: label '2' is not a key of --label_map");
}

TEST(RequestBuilderTest, IntegerLabelsSelectLabelIndexWhenLabelsAreGiven) {
  std::vector<Record> records = Parse(
      "{\"text\":\"a\",\"label\":1}\n{\"text\":\"b\",\"label\":\"negative\"}\n"
      "{\"text\":\"c\",\"label\":0}\n",
      ExampleFormat::kJsonl);
  FieldOptions options;
  options.labels = {"negative", "positive"};
  auto demos = BuildDemonstrations(records, options, "d.jsonl");
  ASSERT_TRUE(demos.ok()) << demos.status();
  ASSERT_EQ(demos->size(), 3u);
  EXPECT_EQ((*demos)[0].answer_case(), v1::Demonstration::kLabelIndex);
  EXPECT_EQ((*demos)[0].label_index(), 1u);
  EXPECT_EQ((*demos)[1].answer_case(), v1::Demonstration::kLabel);
  EXPECT_EQ((*demos)[1].label(), "negative");
  EXPECT_EQ((*demos)[2].label_index(), 0u);

  // Out of range, negative, or not a label word: an error naming the line.
  for (const char* bad : {"2", "-1", "neutral", "+1"}) {
    std::vector<Record> one =
        Parse(std::string("{\"text\":\"x\"}\n{\"text\":\"a\",\"label\":\"") + bad + "\"}\n",
              ExampleFormat::kJsonl);
    auto error = BuildDemonstrations(one, options, "d.jsonl");
    ASSERT_FALSE(error.ok()) << bad;
    // Line 1 has no label at all.
    EXPECT_EQ(error.status().message(), "d.jsonl:1: no label field 'label' (set --label_field)");
    one.erase(one.begin());
    error = BuildDemonstrations(one, options, "d.jsonl");
    ASSERT_FALSE(error.ok()) << bad;
    EXPECT_THAT(error.status().message(),
                HasSubstr(std::string("d.jsonl:2: label '") + bad + "' is not one of --labels"));
  }
}

TEST(RequestBuilderTest, WordLabelsWhenLabelsMatchNumerals) {
  // Rating tasks whose label words are numerals keep them as words.
  std::vector<Record> records = Parse("text,label\nok,3\n", ExampleFormat::kCsv);
  FieldOptions options;
  options.labels = {"1", "2", "3", "4", "5"};
  auto demos = BuildDemonstrations(records, options, "r.csv");
  ASSERT_TRUE(demos.ok());
  EXPECT_EQ((*demos)[0].label(), "3");
  // Without --labels, any raw value is the answer text.
  options.labels.clear();
  demos = BuildDemonstrations(Parse("text,label\nok,7\n", ExampleFormat::kCsv), options, "r.csv");
  ASSERT_TRUE(demos.ok());
  EXPECT_EQ((*demos)[0].label(), "7");
}

TEST(RequestBuilderTest, FieldMappingsFillNamedPlaceholders) {
  std::vector<Record> records = Parse(
      "{\"pair\":{\"p\":\"A dog runs.\",\"h\":\"An animal moves.\"},\"gold\":\"entailment\"}\n",
      ExampleFormat::kJsonl);
  FieldOptions options;
  options.label_field = "gold";
  options.fields = {{"premise", "pair.p"}, {"hypothesis", "pair.h"}};
  auto demos = BuildDemonstrations(records, options, "nli.jsonl");
  ASSERT_TRUE(demos.ok()) << demos.status();
  const v1::Demonstration& d = (*demos)[0];
  EXPECT_EQ(d.text(), "");
  EXPECT_EQ(d.fields().at("premise"), "A dog runs.");
  EXPECT_EQ(d.fields().at("hypothesis"), "An animal moves.");
  EXPECT_EQ(d.label(), "entailment");

  options.fields["extra"] = "missing";
  auto error = BuildDemonstrations(records, options, "nli.jsonl");
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.status().message(),
            "nli.jsonl:1: no field 'missing' (for --field=extra=missing)");

  auto inputs = BuildInputs(Parse("{\"pair\":{\"p\":\"x\",\"h\":\"y\"}}\n", ExampleFormat::kJsonl),
                            FieldOptions{"text", "label", {{"premise", "pair.p"}}, {}, {}}, "in");
  ASSERT_TRUE(inputs.ok()) << inputs.status();
  EXPECT_EQ((*inputs)[0].fields().at("premise"), "x");
}

TEST(RequestBuilderTest, MissingTextFieldNamesLineAndFlag) {
  std::vector<Record> records = Parse("sentence,label\nfine,1\n", ExampleFormat::kCsv);
  auto error = BuildDemonstrations(records, FieldOptions{}, "x.csv");
  ASSERT_FALSE(error.ok());
  EXPECT_THAT(error.status().message(), HasSubstr("x.csv:2: no field 'text' (set --text_field"));
}

TEST(RequestBuilderTest, TemplatePlaceholdersAreCheckedAgainstTheFilesColumns) {
  std::vector<Record> records =
      Parse("sentence,premise,label\nfine,a dog,1\n", ExampleFormat::kCsv);
  FieldOptions by_text;
  by_text.text_field = "sentence";
  // One placeholder of any name reads the text field.
  EXPECT_TRUE(CheckTemplateColumns("Review: {review}", by_text, records[0], "x.csv").ok());
  FieldOptions defaults;  // text field "text": not a column of x.csv
  absl::Status missing = CheckTemplateColumns("Review: {review}", defaults, records[0], "x.csv");
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.message(),
            "--template: placeholder {review} is filled from the text field 'text', which x.csv "
            "does not have (its columns: label, premise, sentence); name the column with "
            "--text_field=COLUMN or map it with --field=review=COLUMN");
  // Several placeholders read the columns of their names unless mapped.
  FieldOptions named = by_text;
  named.fields = {{"premise", "premise"}, {"hypothesis", "hypothesis"}};
  absl::Status unmapped =
      CheckTemplateColumns("{premise} / {hypothesis}", named, records[0], "x.csv");
  ASSERT_FALSE(unmapped.ok());
  EXPECT_THAT(unmapped.message(),
              HasSubstr("placeholder {hypothesis} reads column 'hypothesis', which x.csv does not "
                        "have (its columns: label, premise, sentence); map it with "
                        "--field=hypothesis=COLUMN"));
  named.fields["hypothesis"] = "sentence";
  EXPECT_TRUE(CheckTemplateColumns("{premise} / {hypothesis}", named, records[0], "x.csv").ok());
}

std::vector<v1::Demonstration> MakeDemonstrations(int n) {
  std::vector<v1::Demonstration> out;
  for (int i = 0; i < n; ++i) {
    v1::Demonstration d;
    d.set_text("demonstration " + std::to_string(i));
    d.set_label_index(static_cast<uint32_t>(i % 2));
    out.push_back(d);
  }
  return out;
}

TEST(RequestBuilderTest, ChunksCreateTaskRequests) {
  v1::TaskSpec spec;
  spec.set_input_template("Sentence: {text}\nLabel:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  std::vector<v1::Demonstration> demos = MakeDemonstrations(2500);
  std::vector<v1::CreateTaskRequest> requests =
      ChunkCreateTaskRequests("sst2", spec, /*replace=*/true, demos, 1000);
  ASSERT_EQ(requests.size(), 3u);
  EXPECT_EQ(requests[0].task_id(), "sst2");
  EXPECT_TRUE(requests[0].replace());
  EXPECT_TRUE(requests[0].has_spec());
  EXPECT_EQ(requests[0].spec().input_template(), "Sentence: {text}\nLabel:");
  EXPECT_EQ(requests[0].demonstrations_size(), 1000);
  EXPECT_EQ(requests[1].demonstrations_size(), 1000);
  EXPECT_EQ(requests[2].demonstrations_size(), 500);
  for (size_t i = 1; i < requests.size(); ++i) {
    // Later messages carry only demonstrations.
    EXPECT_EQ(requests[i].task_id(), "");
    EXPECT_FALSE(requests[i].has_spec());
    EXPECT_FALSE(requests[i].replace());
  }
  // Order is kept across messages.
  EXPECT_EQ(requests[0].demonstrations(0).text(), "demonstration 0");
  EXPECT_EQ(requests[1].demonstrations(0).text(), "demonstration 1000");
  EXPECT_EQ(requests[2].demonstrations(499).text(), "demonstration 2499");
  EXPECT_EQ(requests[2].demonstrations(499).label_index(), 1u);
}

TEST(RequestBuilderTest, ChunksAlsoByBytesAndAlwaysSendsOneMessage) {
  v1::TaskSpec spec;
  spec.set_input_template("{text}");
  std::vector<v1::CreateTaskRequest> empty = ChunkCreateTaskRequests("t", spec, false, {}, 10);
  ASSERT_EQ(empty.size(), 1u);
  EXPECT_EQ(empty[0].task_id(), "t");
  EXPECT_EQ(empty[0].demonstrations_size(), 0);

  std::vector<v1::Demonstration> demos = MakeDemonstrations(10);
  size_t one = demos[0].ByteSizeLong();
  // Room for three demonstrations per message by bytes, although --chunk allows 1000.
  std::vector<v1::CreateTaskRequest> requests =
      ChunkCreateTaskRequests("t", spec, false, demos, 1000, 3 * one + 1);
  ASSERT_EQ(requests.size(), 4u);
  EXPECT_EQ(requests[0].demonstrations_size(), 3);
  EXPECT_EQ(requests[3].demonstrations_size(), 1);
  // A demonstration larger than the byte budget still goes, alone.
  requests = ChunkCreateTaskRequests("t", spec, false, demos, 1000, 1);
  EXPECT_EQ(requests.size(), 10u);
  // --chunk=1: one demonstration per message.
  EXPECT_EQ(ChunkCreateTaskRequests("t", spec, false, demos, 1).size(), 10u);
  EXPECT_EQ(ChunkCreateTaskRequests("t", spec, false, demos, 0).size(), 10u);  // clamped to 1
}

TEST(RequestBuilderTest, BatchesAndOneLine) {
  std::vector<int> items = {1, 2, 3, 4, 5};
  auto batches = Batches(items, 2);
  ASSERT_EQ(batches.size(), 3u);
  EXPECT_THAT(batches[2], ElementsAre(5));
  EXPECT_TRUE(Batches(std::vector<int>{}, 3).empty());
  EXPECT_EQ(OneLine("a\tb\nc\r"), "a\\tb\\nc\\r");
}

}  // namespace
}  // namespace manyshot::client
