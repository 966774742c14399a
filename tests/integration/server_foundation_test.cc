// The foundation contract: the real server binary serves health, reflection and /metrics on
// loopback, and exits 0 promptly on SIGTERM.
#include <signal.h>

#include <set>

#include "google/protobuf/descriptor.pb.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpc/reflection/v1alpha/reflection.grpc.pb.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "nlohmann/json.hpp"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"

namespace manyshot::testing {
namespace {

using grpc::reflection::v1alpha::ServerReflection;
using grpc::reflection::v1alpha::ServerReflectionRequest;
using grpc::reflection::v1alpha::ServerReflectionResponse;

class ServerFoundationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ServerUnderTest>(dir_.path() / "data", std::vector<std::string>{});
    ASSERT_TRUE(server_->started()) << server_->Stderr();
  }
  TempDir dir_;
  std::unique_ptr<ServerUnderTest> server_;
};

TEST_F(ServerFoundationTest, HealthIsServing) {
  auto stub = grpc::health::v1::Health::NewStub(server_->Channel());
  for (const std::string service : {"", "manyshot.v1.ManyShot"}) {
    grpc::ClientContext context;
    grpc::health::v1::HealthCheckRequest request;
    request.set_service(service);
    grpc::health::v1::HealthCheckResponse response;
    grpc::Status status = stub->Check(&context, request, &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    EXPECT_EQ(response.status(), grpc::health::v1::HealthCheckResponse::SERVING) << service;
  }
  grpc::ClientContext context;
  grpc::health::v1::HealthCheckRequest request;
  request.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse response;
  EXPECT_EQ(stub->Check(&context, request, &response).error_code(), grpc::StatusCode::NOT_FOUND);
}

TEST_F(ServerFoundationTest, ReflectionListsAndDescribesTheService) {
  auto stub = ServerReflection::NewStub(server_->Channel());
  grpc::ClientContext context;
  auto stream = stub->ServerReflectionInfo(&context);

  ServerReflectionRequest list;
  list.set_list_services("");
  ASSERT_TRUE(stream->Write(list));
  ServerReflectionResponse listed;
  ASSERT_TRUE(stream->Read(&listed));
  std::set<std::string> services;
  for (const auto& s : listed.list_services_response().service()) services.insert(s.name());
  EXPECT_TRUE(services.count("manyshot.v1.ManyShot"));
  EXPECT_TRUE(services.count("grpc.health.v1.Health"));

  ServerReflectionRequest describe;
  describe.set_file_containing_symbol("manyshot.v1.ManyShot");
  ASSERT_TRUE(stream->Write(describe));
  ServerReflectionResponse described;
  ASSERT_TRUE(stream->Read(&described));
  ASSERT_TRUE(described.has_file_descriptor_response())
      << described.error_response().error_message();
  std::map<std::string, std::pair<bool, bool>>
      methods;  // name -> (client streaming, server streaming)
  for (const auto& bytes : described.file_descriptor_response().file_descriptor_proto()) {
    google::protobuf::FileDescriptorProto file;
    ASSERT_TRUE(file.ParseFromString(bytes));
    for (const auto& service : file.service()) {
      if (file.package() + "." + service.name() != "manyshot.v1.ManyShot") continue;
      for (const auto& m : service.method()) {
        methods[m.name()] = {m.client_streaming(), m.server_streaming()};
      }
    }
  }
  std::map<std::string, std::pair<bool, bool>> expected = {
      {"CreateTask", {true, true}},     {"GetTask", {false, false}},
      {"ListTasks", {false, false}},    {"DeleteTask", {false, false}},
      {"Classify", {false, false}},     {"StreamClassify", {true, true}},
      {"Score", {false, false}},        {"Generate", {false, true}},
      {"GetServerInfo", {false, false}}};
  EXPECT_EQ(methods, expected);
  stream->WritesDone();
  EXPECT_TRUE(stream->Finish().ok());
}

TEST_F(ServerFoundationTest, MetricsEndpointSpeaksPrometheusText) {
  HttpResponse response = HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_EQ(response.status, 200);
  EXPECT_NE(response.content_type.find("text/plain"), std::string::npos);
  auto scrape = ParsePrometheusText(response.body);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const PrometheusSample* build = scrape->Find("manyshot_build_info");
  ASSERT_NE(build, nullptr);
  EXPECT_EQ(build->value, 1.0);
  EXPECT_EQ(build->labels.at("version"), "0.1.0");
  // What was built, and (separately) what runs: on these machines the CPU, whatever was built.
  EXPECT_EQ(build->labels.at("cuda_built"), MANYSHOT_CUDA_ENABLED ? "true" : "false");
  const PrometheusSample* backend = scrape->Find("manyshot_backend_info");
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->labels.at("backend"), "cpu");
  EXPECT_EQ(backend->labels.at("compute_dtype"), "f32");
  EXPECT_EQ(scrape->types.at("process_cpu_seconds_total"), "counter");
  ASSERT_NE(scrape->Find("process_resident_memory_bytes"), nullptr);
  EXPECT_GT(scrape->Find("process_resident_memory_bytes")->value, 1e6);
  ASSERT_NE(scrape->Find("process_start_time_seconds"), nullptr);
  EXPECT_GT(scrape->Find("process_start_time_seconds")->value, 1.7e9);
}

TEST_F(ServerFoundationTest, ServerInfoAndUnbackedMethodsAnswerClearly) {
  auto stub = v1::ManyShot::NewStub(server_->Channel());
  {
    grpc::ClientContext context;
    v1::ServerInfo info;
    ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
    EXPECT_EQ(info.version(), "0.1.0");
    EXPECT_EQ(info.backend().name(), "cpu");
    EXPECT_EQ(info.backend().cuda_built(), MANYSHOT_CUDA_ENABLED != 0);
    EXPECT_EQ(info.backend().compute_dtype(), "f32");
    // No GPU on these machines: the server says why it chose the CPU.
    EXPECT_NE(info.backend().selection().find("no usable GPU"), std::string::npos)
        << info.backend().selection();
    EXPECT_GT(info.start_time().seconds(), 0);
  }
}

TEST_F(ServerFoundationTest, CliHealthAndInfo) {
  CommandResult health =
      RunCommand({CliBinary(), "--server=" + server_->address(), "health"}, dir_.path());
  EXPECT_EQ(health.exit_status, 0) << health.err;
  EXPECT_NE(health.out.find("SERVING"), std::string::npos);
  CommandResult info =
      RunCommand({CliBinary(), "--server=" + server_->address(), "--json", "info"}, dir_.path());
  ASSERT_EQ(info.exit_status, 0) << info.err;
  auto json = nlohmann::json::parse(info.out);
  EXPECT_EQ(json["backend"]["name"], "cpu");
}

TEST_F(ServerFoundationTest, SigtermExitsZero) {
  ASSERT_TRUE(server_->process().Signal(SIGTERM));
  auto status = server_->process().Wait(kExitLimit);
  ASSERT_TRUE(status.has_value()) << "still running " << kExitLimit.count() << " s after SIGTERM";
  EXPECT_EQ(*status, 0) << server_->Stderr();
}

TEST_F(ServerFoundationTest, SecondServerOnSameDataDirFailsClearly) {
  ServerUnderTest second(dir_.path() / "data", {});
  EXPECT_FALSE(second.started());
  auto status = second.process().Wait(kExitLimit);
  ASSERT_TRUE(status.has_value());
  EXPECT_EQ(*status, 1);
  EXPECT_NE(second.Stderr().find("in use by another manyshot-server"), std::string::npos)
      << second.Stderr();
}

TEST(ServerFlagsTest, BadLogLevelIsRejected) {
  TempDir dir;
  CommandResult result =
      RunCommand({ServerBinary(), "--log_level=loud", "--data_dir=" + (dir.path() / "d").string()},
                 dir.path());
  EXPECT_EQ(result.exit_status, 2);
  EXPECT_NE(result.err.find("--log_level=loud"), std::string::npos) << result.err;
}

TEST(ServerFlagsTest, CliWithoutServerReportsUnavailable) {
  TempDir dir;
  CommandResult result =
      RunCommand({CliBinary(), "--server=127.0.0.1:1", "--timeout=2", "health"}, dir.path());
  EXPECT_EQ(result.exit_status, 1);
  EXPECT_NE(result.err.find("manyshot: health:"), std::string::npos) << result.err;
}

}  // namespace
}  // namespace manyshot::testing
