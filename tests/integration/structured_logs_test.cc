// --log_format=json against the real server binary: every stderr line is one JSON object (gRPC
// core's own lines too, routed through the server's logger), and a finished call is a "request"
// line whose request id, method, tenant, task, code, seconds and error are fields of their own; a
// client error (NOT_FOUND) is logged at info, not warning.
#include <stdlib.h>

#include <sstream>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

std::vector<nlohmann::json> RequestLines(const std::vector<nlohmann::json>& lines,
                                         const std::string& method) {
  std::vector<nlohmann::json> found;
  for (const auto& line : lines) {
    if (line.value("msg", "") == "request" && line.value("method", "") == method) {
      found.push_back(line);
    }
  }
  return found;
}

TEST(StructuredLogsTest, JsonLogsAreOneObjectPerLineWithRequestFields) {
  TempDir dir;
  // gRPC core's debug lines (they go to stderr in its own format unless routed).
  ::setenv("GRPC_VERBOSITY", "debug", 1);
  ServerUnderTest server(dir.path() / "data", {"--log_format=json", "--log_level=debug"});
  ::unsetenv("GRPC_VERBOSITY");
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto created = CreateTask(*stub, "sst2", Sst2Spec(), Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  v1::ClassifyResponse response;
  {
    grpc::ClientContext context;
    ASSERT_TRUE(stub->Classify(&context, ClassifyRequestFor("sst2", {"fine"}), &response).ok());
  }
  for (const auto& [task, code] : {std::pair{"nope", grpc::StatusCode::NOT_FOUND},
                                   std::pair{"bad\nforged", grpc::StatusCode::INVALID_ARGUMENT}}) {
    grpc::ClientContext context;
    EXPECT_EQ(stub->Classify(&context, ClassifyRequestFor(task, {"x"}), &response).error_code(),
              code);
  }
  ASSERT_TRUE(server.process().Signal(SIGTERM));
  ASSERT_EQ(server.process().Wait(std::chrono::seconds(60)).value_or(-1), 0) << server.Stderr();

  std::vector<nlohmann::json> lines;
  bool grpc_core_line = false;
  std::istringstream in(server.Stderr());
  for (std::string line; std::getline(in, line);) {
    auto parsed = nlohmann::json::parse(line, nullptr, /*allow_exceptions=*/false);
    ASSERT_FALSE(parsed.is_discarded()) << "not one JSON object: " << line;
    ASSERT_TRUE(parsed.is_object()) << line;
    grpc_core_line |= parsed.value("msg", "").rfind("grpc: ", 0) == 0;
    lines.push_back(std::move(parsed));
  }
  EXPECT_TRUE(grpc_core_line) << "no gRPC core line was routed through the logger";
  const auto classified = RequestLines(lines, "Classify");
  ASSERT_EQ(classified.size(), 3u) << server.Stderr();
  const nlohmann::json& ok = classified[0];
  EXPECT_EQ(ok["code"], "OK");
  EXPECT_EQ(ok["level"], "info");
  EXPECT_EQ(ok["task"], "sst2");
  EXPECT_EQ(ok["tenant"], "default");
  EXPECT_FALSE(ok["request_id"].get<std::string>().empty());
  EXPECT_TRUE(ok["seconds"].is_number());
  EXPECT_FALSE(ok.contains("error"));
  const nlohmann::json& missing = classified[1];
  EXPECT_EQ(missing["code"], "NOT_FOUND");
  EXPECT_EQ(missing["level"], "info");  // the request's own fault
  EXPECT_EQ(missing["task"], "nope");
  EXPECT_NE(missing["error"].get<std::string>().find("does not exist"), std::string::npos);
  const nlohmann::json& invalid = classified[2];
  EXPECT_EQ(invalid["code"], "INVALID_ARGUMENT");
  EXPECT_EQ(invalid["level"], "info");
  EXPECT_EQ(invalid["task"], "bad\\x0aforged");  // control characters escaped
  EXPECT_EQ(RequestLines(lines, "CreateTask").size(), 1u);
}

}  // namespace
}  // namespace manyshot::testing
