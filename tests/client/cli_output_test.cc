// What the CLI prints for people: byte counts in binary units, and a hint at TLS when a
// connection closes during setup (what a plaintext client sees from a TLS server).
#include "client/cli_context.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot::client {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(CliOutputTest, HumanBytesUsesBinaryUnitsAndThreeDigits) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(812), "812 B");
  EXPECT_EQ(HumanBytes(1536), "1.50 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{8} << 30), "8.00 GiB");
  EXPECT_EQ(HumanBytes(2253791232), "2.10 GiB");
  EXPECT_EQ(HumanBytes(uint64_t{100} << 20), "100 MiB");
  EXPECT_EQ(HumanBytes(uint64_t{15} << 20), "15.0 MiB");
}

TEST(CliOutputTest, AConnectionClosedDuringSetupHintsAtTls) {
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(ReportRpcError("info", grpc::Status(grpc::StatusCode::UNAVAILABLE, "Socket closed")),
            1);
  const std::string closed = ::testing::internal::GetCapturedStderr();
  EXPECT_THAT(closed, HasSubstr("manyshot: info: UNAVAILABLE: Socket closed"));
  EXPECT_THAT(closed, HasSubstr("--tls_ca_file"));
  ::testing::internal::CaptureStderr();
  ReportRpcError("info", grpc::Status(grpc::StatusCode::NOT_FOUND, "no task x"));
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), Not(HasSubstr("TLS")));
}

}  // namespace
}  // namespace manyshot::client
