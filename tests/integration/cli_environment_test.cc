// The manyshot CLI against the real server: MANYSHOT_SERVER names the server when --server is not
// given (and --server wins over it), and `info` shows cache sizes in binary units.
#include <regex>

#include "gtest/gtest.h"
#include "tests/integration/server_under_test.h"
#include "tests/integration/subprocess.h"

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

}  // namespace
}  // namespace manyshot::testing
