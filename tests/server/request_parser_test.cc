// ParseRequest without a server: a message decodes field for field, a string field that is not
// UTF-8 is INVALID_ARGUMENT naming the field (with reason INVALID_UTF8), and bytes that are no
// message are INVALID_ARGUMENT with reason MALFORMED_MESSAGE.
#include "server/request_parser.h"

#include <string>

#include "google/protobuf/stubs/logging.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/grpc_status.h"

namespace manyshot::server {
namespace {

grpc::ByteBuffer BufferOf(const std::string& bytes) {
  grpc::Slice slice(bytes.data(), bytes.size());
  return grpc::ByteBuffer(&slice, 1);
}

TEST(RequestParserTest, AValidMessageDecodesIntoAClearedMessage) {
  v1::CreateTaskRequest sent;
  sent.set_task_id("sst2");
  sent.add_demonstrations()->set_text("a fine film");
  v1::CreateTaskRequest received;
  received.set_replace(true);  // cleared first
  ASSERT_TRUE(ParseRequest(BufferOf(sent.SerializeAsString()), received).ok());
  EXPECT_EQ(received.task_id(), "sst2");
  ASSERT_EQ(received.demonstrations_size(), 1);
  EXPECT_EQ(received.demonstrations(0).text(), "a fine film");
  EXPECT_FALSE(received.replace());
}

TEST(RequestParserTest, InvalidUtf8IsRefusedNamingTheField) {
  v1::CreateTaskRequest sent;
  sent.set_task_id("sst2");
  sent.add_demonstrations()->set_text("fine");
  sent.add_demonstrations();
  // A valid message whose second demonstration's text is one byte that starts no UTF-8 sequence:
  // written by hand, since protobuf refuses to serialize it.
  std::string bytes = sent.SerializeAsString();
  bytes += std::string("\x22\x03\x0a\x01\xff", 5);  // demonstrations (4): text (1) = "\xff"
  v1::CreateTaskRequest received;
  const google::protobuf::LogSilencer quiet;  // protobuf logs the bad field to stderr
  const absl::Status status = ParseRequest(BufferOf(bytes), received, 0, "CreateTask message 1: ");
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(status), reason::kInvalidUtf8);
  EXPECT_EQ(status.message().rfind("CreateTask message 1: ", 0), 0u) << status;
  EXPECT_NE(status.message().find("demonstrations[2].text"), std::string::npos) << status;
}

TEST(RequestParserTest, BytesThatAreNoMessageAreMalformed) {
  v1::CreateTaskRequest received;
  const absl::Status status = ParseRequest(BufferOf(std::string("\x0a\x50short", 7)), received);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(ReasonOf(status), reason::kMalformedMessage);
}

}  // namespace
}  // namespace manyshot::server
