// The evaluation harness without a server: presets against the real dataset files, sampling,
// shot resolution, statistics, the report and the PNG plot read back with cairo.
#include <cairo.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>

#include "client/eval/dataset.h"
#include "client/eval/plot.h"
#include "client/eval/presets.h"
#include "client/eval/report.h"
#include "client/eval/runner.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot::client {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kDatasets = fs::path(MANYSHOT_SHARED_DIR) / "datasets";

TEST(EvalPresetsTest, EveryPresetLoadsItsRealFilesWithEveryLabelResolved) {
  if (!fs::is_directory(kDatasets)) GTEST_SKIP() << "no " << kDatasets << " here";
  std::set<std::string> names;
  for (const DatasetPreset& preset : DatasetPresets()) {
    SCOPED_TRACE(preset.name);
    EXPECT_TRUE(names.insert(preset.name).second) << "duplicate preset name";
    ASSERT_EQ(preset.labels.size(), preset.raw_labels.size());
    auto dataset = LoadPresetDataset(preset, kDatasets.string());
    ASSERT_TRUE(dataset.ok()) << dataset.status();
    EXPECT_GE(dataset->train.size(), 200u);
    EXPECT_GE(dataset->test.size(), 20u);
    // Every example has a gold label among the label words, and every label word occurs.
    std::set<int> seen;
    for (const auto* split : {&dataset->train, &dataset->test}) {
      for (const v1::Demonstration& example : *split) {
        int gold = GoldLabelIndex(example, dataset->labels);
        ASSERT_GE(gold, 0) << example.label();
        seen.insert(gold);
        ASSERT_TRUE(!example.text().empty() || !example.fields().empty());
      }
    }
    EXPECT_EQ(seen.size(), preset.labels.size());
  }
  EXPECT_GE(names.size(), 20u);
}

TEST(EvalPresetsTest, UnknownPresetListsTheKnownOnes) {
  auto preset = FindDatasetPreset("sst3");
  ASSERT_FALSE(preset.ok());
  EXPECT_EQ(preset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(preset.status().message(), HasSubstr("unknown preset 'sst3'"));
  EXPECT_THAT(preset.status().message(), HasSubstr("sst2_cbu"));
}

TEST(EvalPresetsTest, MissingDatasetFolderNamesIt) {
  auto preset = FindDatasetPreset("sst2_cbu");
  ASSERT_TRUE(preset.ok());
  auto dataset = LoadPresetDataset(*preset, "/nonexistent/datasets");
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(dataset.status().message(), HasSubstr("/nonexistent/datasets/sst2_cbu"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("--datasets_dir"));
}

TEST(EvalDatasetTest, LabelFirstLinesWithAndWithoutDelimiter) {
  std::vector<Record> plain = ParseLabelFirstLines("1 a good film\n\n0\n0   dull .\r\n");
  ASSERT_EQ(plain.size(), 2u);
  EXPECT_EQ(plain[0].fields["label"], "1");
  EXPECT_EQ(plain[0].fields["text"], "a good film");
  EXPECT_EQ(plain[1].fields["text"], "dull .");
  EXPECT_EQ(plain[1].line, 4);
  std::vector<Record> latin1 = ParseLabelFirstLines(
      "1 cr\xe8"
      "me br\xfbl\xe9"
      "e\n1 caf\xc3\xa9\n");
  ASSERT_EQ(latin1.size(), 2u);
  EXPECT_EQ(latin1[0].fields["text"],
            "cr\xc3\xa8"
            "me br\xc3\xbbl\xc3\xa9"
            "e");
  EXPECT_EQ(latin1[1].fields["text"], "caf\xc3\xa9");  // valid UTF-8 stays as it is
  std::vector<Record> trec = ParseLabelFirstLines("DESC:manner How did it go ?\n", ':');
  ASSERT_EQ(trec.size(), 1u);
  EXPECT_EQ(trec[0].fields["label"], "DESC");
  EXPECT_EQ(trec[0].fields["text"], "How did it go ?");
}

TEST(EvalDatasetTest, HoldOutEveryTenth) {
  std::vector<v1::Demonstration> train(25), test;
  for (int i = 0; i < 25; ++i) train[i].set_text(std::to_string(i));
  HoldOutEveryTenth(&train, &test);
  ASSERT_EQ(test.size(), 2u);
  EXPECT_EQ(test[0].text(), "9");
  EXPECT_EQ(test[1].text(), "19");
  EXPECT_EQ(train.size(), 23u);
}

TEST(EvalDatasetTest, LabelOutsideTheLabelWordsNamesTheLine) {
  const fs::path dir = fs::temp_directory_path() / ("eval_test_" + std::to_string(getpid()));
  fs::create_directories(dir);
  {
    std::ofstream(dir / "train.jsonl") << "{\"text\": \"a\", \"label\": \"good\"}\n"
                                          "{\"text\": \"b\", \"label\": \"meh\"}\n";
  }
  EvalFiles files;
  files.train_path = (dir / "train.jsonl").string();
  files.input_template = "Review: {text}\nSentiment:";
  files.fields.labels = {"bad", "good"};
  auto dataset = LoadFileDataset(files);
  fs::remove_all(dir);
  ASSERT_FALSE(dataset.ok());
  EXPECT_EQ(dataset.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(dataset.status().message(), HasSubstr("train.jsonl:2"));
  EXPECT_THAT(dataset.status().message(), HasSubstr("'meh' is not one of --labels"));
}

TEST(EvalProtocolTest, DefaultShotsAreCappedExplicitOnesChecked) {
  EvalPlan plan;
  auto capped = ResolveShots(plan, 100, "d");
  ASSERT_TRUE(capped.ok());
  EXPECT_EQ(*capped, (std::vector<int64_t>{1, 4, 16, 64, 100}));
  plan.shots = {4, 500};
  plan.shots_explicit = true;
  auto explicit_shots = ResolveShots(plan, 100, "sst2_cbu");
  ASSERT_FALSE(explicit_shots.ok());
  EXPECT_EQ(explicit_shots.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(explicit_shots.status().message(),
              HasSubstr("500 demonstrations, but the training split of sst2_cbu has 100"));
}

TEST(EvalProtocolTest, SamplesAreSeededPermutationPrefixes) {
  std::vector<size_t> a = SampleIndices(1000, 64, 7);
  EXPECT_EQ(a, SampleIndices(1000, 64, 7));
  EXPECT_NE(a, SampleIndices(1000, 64, 8));
  EXPECT_EQ(std::set<size_t>(a.begin(), a.end()).size(), 64u);
  // A sample's smaller shot counts are prefixes of its larger ones.
  std::vector<size_t> small = SampleIndices(1000, 16, 7);
  EXPECT_TRUE(std::equal(small.begin(), small.end(), a.begin()));
  std::vector<size_t> all = SampleIndices(10, 50, 3);
  std::sort(all.begin(), all.end());
  EXPECT_EQ(all, (std::vector<size_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}));
}

TEST(EvalProtocolTest, MeanAndSampleStandardDeviation) {
  double mean = 0, std = 0;
  Summarize({0.5, 0.7, 0.9}, &mean, &std);
  EXPECT_DOUBLE_EQ(mean, 0.7);
  EXPECT_NEAR(std, 0.2, 1e-12);
  Summarize({0.25}, &mean, &std);
  EXPECT_DOUBLE_EQ(mean, 0.25);
  EXPECT_EQ(std, 0);
}

EvalReport SampleReport() {
  EvalReport report;
  report.model = "gpt2 tiny";
  report.dataset = "sst2_cbu";
  report.labels = {"Negative", "Positive"};
  report.majority_rate = 0.55;
  report.seeds = {1, 2};
  report.shots = {4, 64};
  report.modes = {v1::MODE_STRUCTURED, v1::MODE_CONVENTIONAL};
  const double accuracy[4][2] = {{0.5, 0.6}, {0.7, 0.8}, {0.4, 0.5}, {0.55, 0.65}};
  for (int c = 0; c < 4; ++c) {
    EvalCell cell;
    cell.mode = report.modes[c / 2];
    cell.shots = report.shots[c % 2];
    cell.accuracy = {accuracy[c][0], accuracy[c][1]};
    cell.used = {cell.shots, cell.shots};
    Summarize(cell.accuracy, &cell.mean, &cell.std);
    report.cells.push_back(cell);
  }
  return report;
}

TEST(EvalReportTest, TableAndJsonCarryEveryCell) {
  EvalReport report = SampleReport();
  std::string table = FormatEvalTable(report);
  EXPECT_THAT(table,
              HasSubstr("labels   Negative / Positive (majority class: 0.5500 of the inputs)"));
  EXPECT_THAT(table, HasSubstr("structured         4     4.0    0.5500  0.0707  0.5000 0.6000"));
  EXPECT_THAT(table, HasSubstr("conventional      64    64.0    0.6000  0.0707"));
  nlohmann::json json = EvalReportJson(report);
  ASSERT_EQ(json["results"].size(), 4u);
  EXPECT_EQ(json["results"][3]["mode"], "conventional");
  EXPECT_EQ(json["results"][3]["shots"], 64);
  EXPECT_DOUBLE_EQ(json["results"][3]["mean"].get<double>(), 0.6);
  EXPECT_EQ(json["dataset"]["metric"], "accuracy");
}

TEST(EvalPlotTest, WritesAPngOfTheDocumentedSizeWithTheModesDrawn) {
  const fs::path path =
      fs::temp_directory_path() / ("eval_plot_" + std::to_string(getpid()) + ".png");
  ASSERT_TRUE(WriteEvalPlot(SampleReport(), path.string()).ok());
  cairo_surface_t* surface = cairo_image_surface_create_from_png(path.string().c_str());
  fs::remove(path);
  ASSERT_EQ(cairo_surface_status(surface), CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(cairo_image_surface_get_width(surface), kEvalPlotWidth);
  EXPECT_EQ(cairo_image_surface_get_height(surface), kEvalPlotHeight);
  // Some pixels are neither white nor grey: the coloured mode lines.
  const unsigned char* data = cairo_image_surface_get_data(surface);
  const int stride = cairo_image_surface_get_stride(surface);
  int coloured = 0;
  for (int y = 0; y < kEvalPlotHeight; ++y) {
    for (int x = 0; x < kEvalPlotWidth; ++x) {
      const unsigned char* p = data + y * stride + 4 * x;  // B, G, R, A
      coloured += std::abs(int{p[0]} - int{p[2]}) > 80;
    }
  }
  cairo_surface_destroy(surface);
  EXPECT_GT(coloured, 200);
  // An unwritable path is an error naming it.
  absl::Status bad = WriteEvalPlot(SampleReport(), "/nonexistent/dir/plot.png");
  EXPECT_FALSE(bad.ok());
  EXPECT_THAT(bad.message(), HasSubstr("/nonexistent/dir/plot.png"));
}

TEST(EvalPlotTest, MarksTheMajorityClassAndWhereTheConventionalWindowFilled) {
  EvalReport report = SampleReport();
  EvalPlotMarks marks = PlotMarksOf(report);
  ASSERT_TRUE(marks.majority.has_value());
  EXPECT_DOUBLE_EQ(*marks.majority, 0.55);
  EXPECT_FALSE(marks.window_full_shots.has_value());  // conventional used every shot
  report.cells[3].used = {40, 41};                    // 64 shots, a window of about 40
  marks = PlotMarksOf(report);
  ASSERT_TRUE(marks.window_full_shots.has_value());
  EXPECT_EQ(*marks.window_full_shots, 64);
  report.generation = true;  // exact match has no majority class
  EXPECT_FALSE(PlotMarksOf(report).majority.has_value());

  // Both marks are drawn: the image differs from one without them.
  const auto png = [](const EvalReport& r) {
    const fs::path path =
        fs::temp_directory_path() / ("eval_marks_" + std::to_string(getpid()) + ".png");
    EXPECT_TRUE(WriteEvalPlot(r, path.string()).ok());
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    fs::remove(path);
    return bytes;
  };
  EvalReport plain = SampleReport();
  plain.majority_rate = 0;
  EvalReport with_majority = SampleReport();
  EvalReport with_window = plain;
  with_window.cells[3].used = {40, 41};
  EXPECT_NE(png(plain), png(with_majority));
  EXPECT_NE(png(plain), png(with_window));
}

}  // namespace
}  // namespace manyshot::client
