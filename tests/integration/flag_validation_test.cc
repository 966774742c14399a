// Every flag is checked before the server does any work: a bad value exits 2 with a message that
// names the flag and what it accepts, and leaves no data directory (no model was generated, no
// store opened, no port bound).
#include <filesystem>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/subprocess.h"

namespace manyshot::testing {
namespace {

struct BadFlag {
  std::string flag;      // as passed
  std::string expected;  // what the message must say
};

void PrintTo(const BadFlag& bad, std::ostream* os) { *os << bad.flag; }

class FlagValidationTest : public ::testing::TestWithParam<BadFlag> {};

TEST_P(FlagValidationTest, ExitsTwoNamingTheFlagBeforeAnyWork) {
  TempDir dir;
  const std::filesystem::path data = dir.path() / "data";
  CommandResult result =
      RunCommand({ServerBinary(), "--data_dir=" + data.string(), "--listen_address=127.0.0.1:0",
                  "--metrics_address=127.0.0.1:0", GetParam().flag},
                 dir.path());
  EXPECT_EQ(result.exit_status, 2) << result.err;
  EXPECT_NE(result.err.find(GetParam().flag), std::string::npos) << result.err;
  EXPECT_NE(result.err.find(GetParam().expected), std::string::npos) << result.err;
  EXPECT_FALSE(std::filesystem::exists(data)) << "work was done before the flags were checked";
}

INSTANTIATE_TEST_SUITE_P(
    Flags, FlagValidationTest,
    ::testing::Values(BadFlag{"--max_batch_size=-1", "must be from 1 to"},
                      BadFlag{"--kv_dtype=f8", "is not one of f32, bf16, f16"},
                      BadFlag{"--gpu_pool_release_threshold_bytes=-2", "must be -1 (keep all"},
                      BadFlag{"--compute_dtype=fp32", "is not one of f32, bf16, f16"},
                      BadFlag{"--backend=tpu", "must be cpu, cuda or empty"},
                      BadFlag{"--threads=-1", "must be from 0 to"},
                      BadFlag{"--batch_window_ms=-5", "must be from 0 to"},
                      BadFlag{"--max_queue_inputs=0", "must be at least 1"},
                      BadFlag{"--max_labels=0", "must be at least 1"},
                      BadFlag{"--max_message_bytes=0", "must be from 4096 to"},
                      BadFlag{"--max_message_bytes=4294967296", "must be from 4096 to"},
                      BadFlag{"--shutdown_grace_seconds=-1", "must be from 0 to"},
                      BadFlag{"--shutdown_notice_seconds=-1", "must be from 0 to 3600"},
                      BadFlag{"--shutdown_notice_seconds=3601", "must be from 0 to 3600"},
                      BadFlag{"--listen_address=localhost", "expected host:port"},
                      BadFlag{"--metrics_address=127.0.0.1:99999", "expected host:port"},
                      BadFlag{"--metrics_address=::1:9464", "expected host:port"},
                      BadFlag{"--stream_idle_timeout_seconds=0", "must be from 1 to"},
                      BadFlag{"--max_streams_per_tenant=0", "must be at least 1"},
                      BadFlag{"--engine_turn_tokens=0", "must be at least 1"},
                      BadFlag{"--max_query_context_tokens=0", "must be at least 1"}),
    [](const ::testing::TestParamInfo<BadFlag>& param) {
      std::string name;
      for (char c : param.param.flag) name += std::isalnum(static_cast<unsigned char>(c)) ? c : '_';
      return name;
    });

// --help lists the server's own flags with their help (absl's default matched no file).
TEST(ServerHelpTest, HelpListsTheServersFlags) {
  TempDir dir;
  CommandResult result = RunCommand({ServerBinary(), "--help"}, dir.path());
  EXPECT_EQ(result.err.find("No flags matched"), std::string::npos) << result.err;
  const std::string all = result.out + result.err;
  for (const char* flag : {"--listen_address", "--data_dir", "--model_dir", "--max_batch_size",
                           "--stream_idle_timeout_seconds"}) {
    EXPECT_NE(all.find(flag), std::string::npos) << flag << " missing from --help:\n" << all;
  }
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "manyshot-data"));
}

}  // namespace
}  // namespace manyshot::testing
