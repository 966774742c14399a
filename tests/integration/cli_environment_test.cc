// The manyshot CLI against the real server: MANYSHOT_SERVER names the server when --server is not
// given (and --server wins over it), and `info` shows cache sizes in binary units.
#include <filesystem>
#include <fstream>
#include <regex>
#include <string>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/subprocess.h"

namespace manyshot::testing {
namespace {

TEST(CliEnvironmentTest, ManyshotServerNamesTheServerAndInfoShowsReadableSizes) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  // env(1) sets the variable for the CLI alone.
  CommandResult info = RunCommand(
      {"/usr/bin/env", "MANYSHOT_SERVER=" + server.address(), CliBinary(), "info"}, dir.path());
  ASSERT_EQ(info.exit_status, 0) << info.err;
  EXPECT_TRUE(
      std::regex_search(info.out, std::regex(R"(cache +memory [0-9.]+ [KMGT]?i?B of 8\.00 GiB)")))
      << info.out;
  // --server wins over the variable (nothing listens on port 9 of loopback).
  CommandResult overridden =
      RunCommand({"/usr/bin/env", "MANYSHOT_SERVER=" + server.address(), CliBinary(),
                  "--server=127.0.0.1:9", "--timeout=5", "info"},
                 dir.path());
  EXPECT_EQ(overridden.exit_status, 1) << overridden.out;
  EXPECT_NE(overridden.err.find("UNAVAILABLE"), std::string::npos) << overridden.err;
}

// `eval --preset=list` says where it looks and which presets have their files there.
TEST(CliEnvironmentTest, PresetListShowsWhichPresetsHaveTheirFiles) {
  TempDir dir;
  const std::filesystem::path datasets = dir.path() / "datasets";
  std::filesystem::create_directories(datasets / "sst2_cbu");
  std::ofstream(datasets / "sst2_cbu" / "stsa.binary.train") << "1 a fine film\n";
  CommandResult listed = RunCommand({"/usr/bin/env", "MANYSHOT_DATASETS=" + datasets.string(),
                                     CliBinary(), "eval", "--preset=list"},
                                    dir.path());
  ASSERT_EQ(listed.exit_status, 0) << listed.err;
  EXPECT_NE(listed.out.find("datasets directory: " + datasets.string()), std::string::npos)
      << listed.out;
  EXPECT_TRUE(std::regex_search(listed.out, std::regex(R"(\nsst2_cbu +yes )"))) << listed.out;
  EXPECT_TRUE(std::regex_search(listed.out, std::regex(R"(\ntrec_cbu +no )"))) << listed.out;
  CommandResult empty = RunCommand(
      {CliBinary(), "eval", "--preset=list", "--datasets_dir=" + dir.path().string()}, dir.path());
  ASSERT_EQ(empty.exit_status, 0) << empty.err;
  EXPECT_NE(empty.out.find("no preset has its files here"), std::string::npos) << empty.out;
}

// `manyshot COMMAND --help` shows that command's usage and flags (with their help and defaults);
// `manyshot --help` lists the CLI's flags.
TEST(CliEnvironmentTest, EveryCommandHasItsOwnHelp) {
  TempDir dir;
  const std::vector<std::pair<std::string, std::vector<std::string>>> expected = {
      {"create", {"usage: manyshot create TASK_ID", "--template", "--label_map", "--chunk"}},
      {"classify", {"usage: manyshot classify TASK_ID", "--input", "--stream", "--batch"}},
      {"generate", {"usage: manyshot generate", "--max_new_tokens", "--stop"}},
      {"eval", {"usage: manyshot eval", "--preset", "--datasets_dir", "--shots"}},
      {"info", {"usage: manyshot info"}}};
  for (const auto& [command, needles] : expected) {
    CommandResult help = RunCommand({CliBinary(), command, "--help"}, dir.path());
    EXPECT_EQ(help.exit_status, 0) << command << ": " << help.err;
    for (const std::string& needle : needles) {
      EXPECT_NE(help.out.find(needle), std::string::npos) << command << " --help:\n" << help.out;
    }
  }
  CommandResult global = RunCommand({CliBinary(), "--help"}, dir.path());
  const std::string all = global.out + global.err;
  EXPECT_EQ(all.find("No flags matched"), std::string::npos) << all;
  EXPECT_NE(all.find("--server"), std::string::npos) << all;
}

}  // namespace
}  // namespace manyshot::testing
