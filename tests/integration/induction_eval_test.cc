// `manyshot eval` on a model whose answers are decidable from the demonstrations: the hand-built
// induction model and its synthetic task (both written by the real make-induction-model tool),
// served by the real server with --model_dir on loopback. Accuracy must rise with the shots from
// chance to 1 under STRUCTURED, and CONVENTIONAL must stop rising where its window is full.
#include <filesystem>
#include <map>
#include <string>
#include <utility>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "testing/harness/server_under_test.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

// 128 keys, four labels, every key four times in train.jsonl (512 examples), 64 test inputs.
// A 512-token context: the server's default group (512 - 128 - 32 = 352 tokens) holds 117
// three-token demonstrations, which is all a CONVENTIONAL window can hold.
class InductionEvalTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    written_ = RunCommand(
        {(fs::path(MANYSHOT_BINARY_DIR) / "tools/make-induction-model").string(),
         "--out=" + (dir_->path() / "model").string(),
         "--tokenizer_dir=" MANYSHOT_GPT2_TOKENIZER_DIR, "--max_position_embeddings=512",
         "--dataset_out=" + (dir_->path() / "task").string(), "--keys=128", "--test_size=64"},
        dir_->path(), std::chrono::seconds(120));
    if (written_.exit_status != 0) return;
    server_ = new ServerUnderTest(
        dir_->path() / "data", {"--threads=2", "--model_dir=" + (dir_->path() / "model").string()});
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_EQ(written_.exit_status, 0) << written_.err;
    ASSERT_TRUE(server_->started()) << server_->Stderr();
  }

  CommandResult Eval(const std::vector<std::string>& extra) {
    std::vector<std::string> args = {CliBinary(),
                                     "--server=" + server_->address(),
                                     "--json",
                                     "eval",
                                     "--train_file=" + (dir_->path() / "task/train.jsonl").string(),
                                     "--test_file=" + (dir_->path() / "task/test.jsonl").string(),
                                     "--template={text}",
                                     "--labels=red,green,blue,yellow"};
    args.insert(args.end(), extra.begin(), extra.end());
    return RunCommand(args, dir_->path(), std::chrono::seconds(300));
  }

  static TempDir* dir_;
  static CommandResult written_;
  static ServerUnderTest* server_;
};

TempDir* InductionEvalTest::dir_ = nullptr;
CommandResult InductionEvalTest::written_;
ServerUnderTest* InductionEvalTest::server_ = nullptr;

TEST_F(InductionEvalTest, AccuracyRisesWithShotsToOneAndConventionalStopsAtItsWindow) {
  CommandResult run = Eval(
      {"--shots=4,64,512", "--modes=structured,conventional", "--samples=2", "--test_limit=64"});
  ASSERT_EQ(run.exit_status, 0) << run.err;
  SCOPED_TRACE(run.out);
  nlohmann::json report = nlohmann::json::parse(run.out);
  EXPECT_EQ(report["model"]["random_weights"], false);
  EXPECT_EQ(report["dataset"]["train_examples"], 512);
  EXPECT_EQ(report["dataset"]["test_examples"], 64);
  ASSERT_EQ(report["results"].size(), 6u);
  // mean accuracy and mean demonstrations used, by mode and shots
  std::map<std::pair<std::string, int>, std::pair<double, double>> cell;
  for (const nlohmann::json& c : report["results"]) {
    double used = 0;
    for (const nlohmann::json& u : c["demonstrations_used"]) used += u.get<double>() / 2;
    cell[{c["mode"], c["shots"]}] = {c["mean"].get<double>(), used};
  }
  auto mean = [&](const std::string& mode, int shots) { return cell[{mode, shots}].first; };
  auto used = [&](const std::string& mode, int shots) { return cell[{mode, shots}].second; };
  for (const std::string mode : {"structured", "conventional"}) {
    SCOPED_TRACE(mode);
    // Four shots show at most 4 of 128 keys: the rest are guesses among four labels.
    EXPECT_LT(mean(mode, 4), 0.45);
    EXPECT_GT(mean(mode, 64), mean(mode, 4) + 0.1);
  }
  // 512 shots are the whole training split, every key four times: all of it in the groups.
  EXPECT_EQ(used("structured", 512), 512);
  EXPECT_EQ(mean("structured", 512), 1.0);
  // One window holds 117 of them, so conventional answers only the keys among those for sure.
  EXPECT_EQ(used("conventional", 512), 117);
  EXPECT_GT(mean("conventional", 512), mean("conventional", 64));
  EXPECT_LT(mean("conventional", 512), 1.0);
}

}  // namespace
}  // namespace manyshot::testing
