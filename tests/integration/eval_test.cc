// `manyshot eval` end to end: the real CLI against a real server (the random default model) on
// loopback, on a slice of the real SST-2 files. Accuracies of a random model are near chance, so
// they are checked for shape, range and determinism only; the tasks the harness creates must be
// gone afterwards, also after a server error and after Ctrl-C.
#include <cairo.h>

#include <csignal>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <thread>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/harness/server_under_test.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

const fs::path kSst2 = fs::path(MANYSHOT_SHARED_DIR) / "datasets/sst2_cbu";

// The first `lines` lines of `from` into `to`.
void CopyHead(const fs::path& from, const fs::path& to, int lines) {
  std::ifstream in(from);
  std::ofstream out(to);
  std::string line;
  for (int i = 0; i < lines && std::getline(in, line); ++i) out << line << "\n";
}

class EvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new ServerUnderTest(dir_->path() / "data", {"--threads=2"});
    // A dataset folder in the sst2_cbu layout: 300 training sentences, 100 dev sentences.
    fs::create_directories(dir_->path() / "datasets/sst2_cbu");
    if (fs::is_directory(kSst2)) {
      CopyHead(kSst2 / "stsa.binary.train", dir_->path() / "datasets/sst2_cbu/stsa.binary.train",
               300);
      CopyHead(kSst2 / "stsa.binary.dev", dir_->path() / "datasets/sst2_cbu/stsa.binary.dev", 100);
    }
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->started()) << server_->Stderr();
    if (!fs::is_directory(kSst2)) GTEST_SKIP() << "no " << kSst2 << " here";
  }

  static std::string Datasets() { return (dir_->path() / "datasets").string(); }

  CommandResult Cli(std::vector<std::string> args) {
    args.insert(args.begin(), {CliBinary(), "--server=" + server_->address()});
    return RunCommand(args, dir_->path(), std::chrono::seconds(120));
  }

  // The task ids named in the progress lines.
  static std::set<std::string> TaskIds(const std::string& progress) {
    std::set<std::string> ids;
    std::regex task("encoding task (eval-[A-Za-z0-9-]+)");
    for (auto it = std::sregex_iterator(progress.begin(), progress.end(), task);
         it != std::sregex_iterator(); ++it) {
      ids.insert((*it)[1]);
    }
    return ids;
  }

  // No task is left on the server, and each of `ids` is NOT_FOUND.
  void ExpectNoTasks(const std::set<std::string>& ids) {
    CommandResult list = Cli({"--json", "list"});
    ASSERT_EQ(list.exit_status, 0) << list.err;
    nlohmann::json tasks = nlohmann::json::parse(list.out);
    EXPECT_TRUE(!tasks.contains("tasks") || tasks["tasks"].empty()) << list.out;
    for (const std::string& id : ids) {
      CommandResult get = Cli({"get", id});
      EXPECT_EQ(get.exit_status, 1) << id;
      EXPECT_THAT(get.err, HasSubstr("NOT_FOUND")) << id;
    }
  }

  static TempDir* dir_;
  static ServerUnderTest* server_;
};

TempDir* EvalTest::dir_ = nullptr;
ServerUnderTest* EvalTest::server_ = nullptr;

TEST_F(EvalTest, TwoModesTwoShotCountsTwoSeedsTableJsonPlotDeterministicAndCleanedUp) {
  const std::vector<std::string> args = {"eval",
                                         "--preset=sst2_cbu",
                                         "--datasets_dir=" + Datasets(),
                                         "--shots=4,32",
                                         "--modes=structured,conventional",
                                         "--samples=2",
                                         "--test_limit=24"};
  std::vector<std::string> json_args = args;
  json_args.insert(json_args.begin(), "--json");
  CommandResult first = Cli(json_args);
  ASSERT_EQ(first.exit_status, 0) << first.err;
  nlohmann::json report = nlohmann::json::parse(first.out);
  EXPECT_EQ(report["dataset"]["name"], "sst2_cbu");
  EXPECT_EQ(report["dataset"]["train_examples"], 300);
  EXPECT_EQ(report["dataset"]["test_examples"], 24);
  EXPECT_EQ(report["dataset"]["labels"], (nlohmann::json{"Negative", "Positive"}));
  EXPECT_EQ(report["model"]["random_weights"], true);
  EXPECT_EQ(report["seeds"], (nlohmann::json{1, 2}));
  // Two labels: the majority class holds at least half of the 24 inputs, a whole number of them.
  const double majority = report["dataset"]["majority_rate"].get<double>();
  EXPECT_GE(majority, 0.5);
  EXPECT_LE(majority, 1.0);
  EXPECT_NEAR(majority * 24, std::round(majority * 24), 1e-9);
  ASSERT_EQ(report["results"].size(), 4u);
  const std::vector<std::pair<std::string, int>> expected = {
      {"structured", 4}, {"structured", 32}, {"conventional", 4}, {"conventional", 32}};
  for (size_t i = 0; i < expected.size(); ++i) {
    const nlohmann::json& cell = report["results"][i];
    SCOPED_TRACE(cell.dump());
    EXPECT_EQ(cell["mode"], expected[i].first);
    EXPECT_EQ(cell["shots"], expected[i].second);
    ASSERT_EQ(cell["accuracy"].size(), 2u);
    double sum = 0;
    for (const nlohmann::json& a : cell["accuracy"]) {
      EXPECT_GE(a.get<double>(), 0.0);
      EXPECT_LE(a.get<double>(), 1.0);
      // 24 inputs: every accuracy is a whole number of correct answers.
      EXPECT_NEAR(a.get<double>() * 24, std::round(a.get<double>() * 24), 1e-9);
      sum += a.get<double>();
    }
    EXPECT_NEAR(cell["mean"].get<double>(), sum / 2, 1e-12);
    EXPECT_GE(cell["std"].get<double>(), 0.0);
    ASSERT_EQ(cell["demonstrations_used"].size(), 2u);
    for (const nlohmann::json& used : cell["demonstrations_used"]) {
      EXPECT_GE(used.get<int>(), 1);
      EXPECT_LE(used.get<int>(), expected[i].second);
      if (expected[i].first == "structured") {
        EXPECT_EQ(used.get<int>(), expected[i].second);
      }
    }
  }
  std::set<std::string> ids = TaskIds(first.err);
  EXPECT_EQ(ids.size(), 4u) << first.err;  // 2 samples x 2 shot counts
  ExpectNoTasks(ids);

  // The same plan again: byte-identical JSON.
  CommandResult second = Cli(json_args);
  ASSERT_EQ(second.exit_status, 0) << second.err;
  EXPECT_EQ(second.out, first.out);

  // Text table and plot.
  std::vector<std::string> plot_args = args;
  const fs::path png = dir_->path() / "plot.png";
  plot_args.push_back("--plot=" + png.string());
  CommandResult text = Cli(plot_args);
  ASSERT_EQ(text.exit_status, 0) << text.err;
  EXPECT_THAT(text.out, HasSubstr("dataset  sst2_cbu: 300 training examples, 24 of 100"));
  EXPECT_THAT(text.out, HasSubstr("random weights"));
  EXPECT_THAT(text.out,
              ::testing::ContainsRegex("structured +4 +4\\.0 +0\\.[0-9]{4} +0\\.[0-9]{4}"));
  EXPECT_THAT(text.out, ::testing::ContainsRegex("conventional +32 "));
  cairo_surface_t* surface = cairo_image_surface_create_from_png(png.string().c_str());
  EXPECT_EQ(cairo_surface_status(surface), CAIRO_STATUS_SUCCESS);
  EXPECT_EQ(cairo_image_surface_get_width(surface), 900);
  EXPECT_EQ(cairo_image_surface_get_height(surface), 560);
  cairo_surface_destroy(surface);
  ExpectNoTasks(TaskIds(text.err));
}

TEST_F(EvalTest, BadInputsAreUsageErrorsNamingTheProblem) {
  CommandResult missing =
      Cli({"eval", "--dataset=" + (dir_->path() / "nowhere/sst2_cbu").string()});
  EXPECT_EQ(missing.exit_status, 2);
  EXPECT_THAT(missing.err, HasSubstr("no folder"));
  EXPECT_THAT(missing.err, HasSubstr("nowhere/sst2_cbu"));

  CommandResult unknown = Cli({"eval", "--preset=sst7", "--datasets_dir=" + Datasets()});
  EXPECT_EQ(unknown.exit_status, 2);
  EXPECT_THAT(unknown.err, HasSubstr("unknown preset 'sst7'"));
  EXPECT_THAT(unknown.err, HasSubstr("sst2_cbu"));

  CommandResult too_many =
      Cli({"eval", "--preset=sst2_cbu", "--datasets_dir=" + Datasets(), "--shots=16,1000"});
  EXPECT_EQ(too_many.exit_status, 2);
  EXPECT_THAT(too_many.err,
              HasSubstr("1000 demonstrations, but the training split of sst2_cbu has 300"));

  const fs::path train = dir_->path() / "odd_labels.jsonl";
  std::ofstream(train) << "{\"text\": \"fine\", \"label\": \"good\"}\n"
                          "{\"text\": \"awful\", \"label\": \"terrible\"}\n";
  CommandResult label = Cli({"eval", "--train_file=" + train.string(),
                             "--template=Review: {text}\\nSentiment:", "--labels=bad,good"});
  EXPECT_EQ(label.exit_status, 2);
  EXPECT_THAT(label.err, HasSubstr("odd_labels.jsonl:2"));
  EXPECT_THAT(label.err, HasSubstr("'terrible' is not one of --labels"));

  CommandResult mode = Cli(
      {"eval", "--preset=sst2_cbu", "--datasets_dir=" + Datasets(), "--modes=structured,sideways"});
  EXPECT_EQ(mode.exit_status, 2);
  EXPECT_THAT(mode.err, HasSubstr("'sideways'"));
  ExpectNoTasks({});
}

// The SAICL paper's modes need an encoder-decoder model: refused, naming the model, before any
// task is created (tests/integration/t5_server_test.cc runs them on T5).
TEST_F(EvalTest, T5ModesOnADecoderOnlyModelAreRefusedBeforeAnyTask) {
  CommandResult run = Cli({"eval", "--preset=sst2_cbu", "--datasets_dir=" + Datasets(),
                           "--modes=conventional,fid", "--shots=1", "--samples=1"});
  EXPECT_EQ(run.exit_status, 1);
  EXPECT_THAT(run.err, HasSubstr("FAILED_PRECONDITION"));
  EXPECT_THAT(run.err, HasSubstr("fid is an encoder-decoder (T5) mode"));
  EXPECT_THAT(run.err, HasSubstr("decoder-only"));
  EXPECT_THAT(run.err, ::testing::Not(HasSubstr("encoding task")));
  ExpectNoTasks({});
}

TEST_F(EvalTest, WithoutLabelWordsItScoresGreedyGenerationsByExactMatch) {
  const fs::path train = dir_->path() / "capitals.jsonl";
  {
    std::ofstream out(train);
    for (int i = 0; i < 30; ++i) {
      out << "{\"text\": \"country " << i << "\", \"label\": \"city " << i << "\"}\n";
    }
  }
  CommandResult run = Cli({"--json", "eval", "--train_file=" + train.string(),
                           "--template=Q: capital of {text}?\\nA:", "--shots=2,8", "--samples=2",
                           "--modes=structured,conventional", "--test_limit=3"});
  ASSERT_EQ(run.exit_status, 0) << run.err;
  nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["dataset"]["metric"], "exact_match");
  EXPECT_TRUE(report["dataset"]["labels"].empty());
  EXPECT_EQ(report["dataset"]["train_examples"], 27);  // every tenth example is held out
  EXPECT_EQ(report["dataset"]["test_examples"], 3);
  ASSERT_EQ(report["results"].size(), 4u);
  for (const nlohmann::json& cell : report["results"]) {
    ASSERT_EQ(cell["accuracy"].size(), 2u);
    for (const nlohmann::json& a : cell["accuracy"]) {
      EXPECT_GE(a.get<double>(), 0.0);
      EXPECT_LE(a.get<double>(), 1.0);
    }
  }
  ExpectNoTasks(TaskIds(run.err));
}

TEST_F(EvalTest, AServerErrorMidRunStillDeletesTheTasks) {
  // A test input far past the default max_query_tokens (128): the task is created, then
  // StreamClassify refuses the input.
  const fs::path train = dir_->path() / "train.jsonl";
  const fs::path test = dir_->path() / "test.jsonl";
  {
    std::ofstream out(train);
    for (int i = 0; i < 20; ++i) {
      out << "{\"text\": \"review " << i << "\", \"label\": \"" << (i % 2 ? "good" : "bad")
          << "\"}\n";
    }
    std::string long_text;
    for (int i = 0; i < 400; ++i) long_text += "very ";
    std::ofstream(test) << "{\"text\": \"" << long_text << "long\", \"label\": \"good\"}\n";
  }
  CommandResult run = Cli({"eval", "--train_file=" + train.string(), "--test_file=" + test.string(),
                           "--template=Review: {text}\\nSentiment:", "--labels=bad,good",
                           "--shots=4", "--samples=1", "--modes=structured"});
  EXPECT_EQ(run.exit_status, 1) << run.out;
  EXPECT_THAT(run.err, HasSubstr("INVALID_ARGUMENT"));
  EXPECT_THAT(run.err, HasSubstr("max_query_tokens"));
  std::set<std::string> ids = TaskIds(run.err);
  EXPECT_EQ(ids.size(), 1u) << run.err;
  ExpectNoTasks(ids);
}

TEST_F(EvalTest, CtrlCCancelsAndDeletesTheTasks) {
  // Enough samples to run for minutes; interrupted once the first task is being encoded.
  const fs::path out = dir_->path() / "interrupted.out";
  const fs::path err = dir_->path() / "interrupted.err";
  Subprocess eval(
      {CliBinary(), "--server=" + server_->address(), "eval", "--preset=sst2_cbu",
       "--datasets_dir=" + Datasets(), "--shots=8,64", "--samples=500", "--test_limit=50"},
      out, err);
  auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (ReadFile(err).find("encoding task") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_NE(ReadFile(err).find("encoding task"), std::string::npos) << ReadFile(err);
  ASSERT_TRUE(eval.Signal(SIGINT));
  std::optional<int> status = eval.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(status.has_value()) << "eval did not exit after SIGINT";
  EXPECT_EQ(*status, 130) << ReadFile(err);
  EXPECT_THAT(ReadFile(err), HasSubstr("interrupted"));
  std::set<std::string> ids = TaskIds(ReadFile(err));
  EXPECT_GE(ids.size(), 1u);
  ExpectNoTasks(ids);
}

}  // namespace
}  // namespace manyshot::testing
