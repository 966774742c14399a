// The connection flags (--tls_*, --token, --token_file) and the metadata every call carries
// (authorization, x-manyshot-task), checked against a fake ManyShot service on loopback TCP,
// plaintext and with mutual TLS (certificates made by the openssl CLI at test time).
#include "client/connection.h"

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "client/cli_args.h"
#include "client/commands.h"
#include "client/flags.h"
#include "gmock/gmock.h"
#include "grpcpp/security/server_credentials.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "grpcpp/support/server_interceptor.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::client {
namespace {

using ::testing::HasSubstr;

// What one call carried: its method and the two metadata keys of interest ("" when absent).
struct SeenCall {
  std::string method;
  std::string authorization;
  std::string task;
  int task_values = 0;  // how many x-manyshot-task entries (must be one for a per-task call)
};

class MetadataLog {
 public:
  void Add(SeenCall call) {
    std::lock_guard<std::mutex> lock(mu_);
    calls_.push_back(std::move(call));
  }
  std::vector<SeenCall> Take() {
    std::lock_guard<std::mutex> lock(mu_);
    return std::exchange(calls_, {});
  }

 private:
  std::mutex mu_;
  std::vector<SeenCall> calls_;
};

// Records every call's initial metadata, whatever the handler then does.
class RecordingInterceptor : public grpc::experimental::Interceptor {
 public:
  RecordingInterceptor(std::string method, MetadataLog* log)
      : method_(std::move(method)), log_(log) {}
  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::POST_RECV_INITIAL_METADATA)) {
      SeenCall call;
      call.method = method_.substr(method_.rfind('/') + 1);
      for (const auto& [key, value] : *methods->GetRecvInitialMetadata()) {
        std::string k(key.data(), key.size());
        if (k == "authorization") call.authorization.assign(value.data(), value.size());
        if (k == kTaskMetadataKey) {
          call.task.assign(value.data(), value.size());
          ++call.task_values;
        }
      }
      log_->Add(std::move(call));
    }
    methods->Proceed();
  }

 private:
  std::string method_;
  MetadataLog* log_;
};

class RecordingInterceptorFactory : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit RecordingInterceptorFactory(MetadataLog* log) : log_(log) {}
  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    return new RecordingInterceptor(info->method(), log_);
  }

 private:
  MetadataLog* log_;
};

// Answers just enough for every subcommand to succeed.
class FakeManyShot final : public v1::ManyShot::Service {
 public:
  grpc::Status CreateTask(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::CreateTaskResponse, v1::CreateTaskRequest>* stream) override {
    v1::CreateTaskRequest request;
    std::string task_id;
    while (stream->Read(&request)) {
      if (task_id.empty()) task_id = request.task_id();
    }
    v1::CreateTaskResponse result;
    result.mutable_result()->mutable_task()->set_task_id(task_id);
    result.mutable_result()->set_created(true);
    stream->Write(result);
    return grpc::Status::OK;
  }
  grpc::Status GetTask(grpc::ServerContext*, const v1::GetTaskRequest* request,
                       v1::Task* task) override {
    task->set_task_id(request->task_id());
    return grpc::Status::OK;
  }
  grpc::Status ListTasks(grpc::ServerContext*, const v1::ListTasksRequest*,
                         v1::ListTasksResponse* response) override {
    response->add_tasks()->set_task_id("t");
    return grpc::Status::OK;
  }
  grpc::Status DeleteTask(grpc::ServerContext*, const v1::DeleteTaskRequest*,
                          v1::DeleteTaskResponse*) override {
    return grpc::Status::OK;
  }
  grpc::Status Classify(grpc::ServerContext*, const v1::ClassifyRequest* request,
                        v1::ClassifyResponse* response) override {
    for (int i = 0; i < request->inputs_size(); ++i) Answer(response->add_results());
    return grpc::Status::OK;
  }
  grpc::Status StreamClassify(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::ClassifyResponse, v1::ClassifyRequest>* stream) override {
    v1::ClassifyRequest request;
    while (stream->Read(&request)) {
      v1::ClassifyResponse response;
      response.set_request_id(request.request_id());
      for (int i = 0; i < request.inputs_size(); ++i) Answer(response.add_results());
      stream->Write(response);
    }
    return grpc::Status::OK;
  }
  grpc::Status Score(grpc::ServerContext*, const v1::ScoreRequest* request,
                     v1::ScoreResponse* response) override {
    for (const v1::ScoreItem& item : request->items()) {
      v1::ScoreResult* result = response->add_results();
      for (const std::string& candidate : item.candidates()) {
        result->add_candidates()->set_candidate(candidate);
      }
    }
    return grpc::Status::OK;
  }
  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest*,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    v1::GenerateResponse result;
    result.mutable_result()->set_text(" ok");
    writer->Write(result);
    return grpc::Status::OK;
  }
  grpc::Status GetServerInfo(grpc::ServerContext*, const v1::GetServerInfoRequest*,
                             v1::ServerInfo* info) override {
    info->set_version("fake");
    return grpc::Status::OK;
  }

 private:
  static void Answer(v1::ClassifyResult* result) {
    result->set_label("positive");
    result->set_label_index(0);
    result->add_scores()->set_probability(1.0);
  }
};

std::string Slurp(const std::filesystem::path& path) {
  std::ifstream in(path);
  std::ostringstream out;
  out << in.rdbuf();
  return out.str();
}

class ConnectionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           ("manyshot_connection_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    if (server_) server_->Shutdown();
    std::filesystem::remove_all(dir_);
    for (auto* flag : {&FLAGS_tls_ca_file, &FLAGS_tls_cert_file, &FLAGS_tls_key_file,
                       &FLAGS_tls_server_name, &FLAGS_token, &FLAGS_token_file, &FLAGS_file}) {
      absl::SetFlag(flag, "");
    }
    absl::SetFlag(&FLAGS_template, "");
    absl::SetFlag(&FLAGS_stream, false);
  }

  std::string Write(const std::string& name, const std::string& content) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << content;
    return path;
  }

  // Starts the fake on 127.0.0.1 (ephemeral port) with `credentials`; returns "127.0.0.1:PORT".
  std::string StartServer(std::shared_ptr<grpc::ServerCredentials> credentials) {
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", std::move(credentials), &port);
    builder.RegisterService(&service_);
    std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> factories;
    factories.push_back(std::make_unique<RecordingInterceptorFactory>(&log_));
    builder.experimental().SetInterceptorCreators(std::move(factories));
    server_ = builder.BuildAndStart();
    EXPECT_NE(server_, nullptr);
    EXPECT_GT(port, 0);
    return "127.0.0.1:" + std::to_string(port);
  }

  // Runs every subcommand once through `cli`; returns the exit codes by command.
  std::map<std::string, int> RunEveryCommand(const CliContext& base) {
    std::map<std::string, int> codes;
    CliContext cli = base;
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    cli.args = {};
    codes["info"] = RunInfo(cli);
    codes["list"] = RunList(cli);
    absl::SetFlag(&FLAGS_file, Write("train.tsv", "text\tlabel\ngood\tpositive\nbad\tnegative\n"));
    absl::SetFlag(&FLAGS_template, "Review: {text}\\nSentiment:");
    cli.args = {"task-create"};
    codes["create"] = RunCreate(cli);
    absl::SetFlag(&FLAGS_file, Write("inputs.txt", "fine\nawful\n"));
    cli.args = {"task-classify"};
    codes["classify"] = RunClassify(cli);
    absl::SetFlag(&FLAGS_stream, true);
    cli.args = {"task-stream"};
    codes["classify --stream"] = RunClassify(cli);
    absl::SetFlag(&FLAGS_stream, false);
    absl::SetFlag(&FLAGS_file, "");
    cli.repeated["input"] = {"a film"};
    cli.args = {"task-score"};
    cli.repeated["candidate"] = {" good", " bad"};
    codes["score"] = RunScore(cli);
    cli.args = {"task-generate"};
    codes["generate"] = RunGenerate(cli);
    cli.args = {"task-get"};
    codes["get"] = RunGet(cli);
    cli.args = {"task-delete"};
    codes["delete"] = RunDelete(cli);
    ::testing::internal::GetCapturedStdout();
    std::string err = ::testing::internal::GetCapturedStderr();
    for (const auto& [command, code] : codes) EXPECT_EQ(code, 0) << command << ": " << err;
    return codes;
  }

  // Checks the log against RunEveryCommand: every call carries `authorization`; per-task calls
  // carry exactly one x-manyshot-task naming their task, the others none.
  void ExpectMetadata(const std::string& authorization) {
    std::vector<SeenCall> calls = log_.Take();
    std::map<std::string, std::string> expected_task = {{"GetServerInfo", ""},
                                                        {"ListTasks", ""},
                                                        {"CreateTask", "task-create"},
                                                        {"Classify", "task-classify"},
                                                        {"StreamClassify", "task-stream"},
                                                        {"Score", "task-score"},
                                                        {"Generate", "task-generate"},
                                                        {"GetTask", "task-get"},
                                                        {"DeleteTask", "task-delete"}};
    std::map<std::string, int> seen;
    for (const SeenCall& call : calls) {
      ++seen[call.method];
      ASSERT_TRUE(expected_task.count(call.method)) << call.method;
      EXPECT_EQ(call.authorization, authorization) << call.method;
      EXPECT_EQ(call.task, expected_task[call.method]) << call.method;
      EXPECT_EQ(call.task_values, expected_task[call.method].empty() ? 0 : 1) << call.method;
    }
    for (const auto& [method, task] : expected_task) EXPECT_EQ(seen[method], 1) << method;
  }

  std::filesystem::path dir_;
  FakeManyShot service_;
  MetadataLog log_;
  std::unique_ptr<grpc::Server> server_;
};

TEST(LoopbackTest, RecognisesLoopbackTargets) {
  for (const char* server :
       {"127.0.0.1:50051", "127.3.4.5:1", "localhost:50051", "LOCALHOST:1", "[::1]:50051", "::1",
        "[::ffff:127.0.0.1]:1", "ipv4:127.0.0.1:1,127.0.0.2:2", "ipv6:[::1]:1",
        "dns:///localhost:50051", "dns://8.8.8.8/localhost:1", "dns:127.0.0.1:1",
        "unix:/tmp/manyshot.sock", "unix-abstract:manyshot"}) {
    EXPECT_TRUE(IsLoopbackServer(server)) << server;
  }
  for (const char* server :
       {"10.0.0.1:50051", "0.0.0.0:50051", "manyshot.example.com:443", "[2001:db8::1]:1",
        "ipv4:127.0.0.1:1,10.0.0.2:2", "dns:///manyshot:50051", "128.0.0.1:1", "localhost.evil:1",
        "", "ipv4:"}) {
    EXPECT_FALSE(IsLoopbackServer(server)) << server;
  }
}

TEST_F(ConnectionTest, FlagsAreKnownAndReadIntoOptions) {
  EXPECT_EQ(FindUnknownFlag({"manyshot", "--tls_ca_file=ca.pem", "--tls_cert_file=c.pem",
                             "--tls_key_file=c.key", "--tls_server_name=x", "--token=t",
                             "--token_file=f", "list"}),
            "");
  std::string error;
  for (const auto& [name, value] :
       std::vector<std::pair<std::string, std::string>>{{"tls_ca_file", "ca.pem"},
                                                        {"tls_cert_file", "c.pem"},
                                                        {"tls_key_file", "c.key"},
                                                        {"tls_server_name", "manyshot.internal"},
                                                        {"token", "s3cr3t"},
                                                        {"token_file", "/run/secrets/manyshot"}}) {
    absl::CommandLineFlag* flag = absl::FindCommandLineFlag(name);
    ASSERT_NE(flag, nullptr) << name;
    ASSERT_TRUE(flag->ParseFrom(value, &error)) << name << ": " << error;
  }
  ConnectionOptions options = ConnectionOptionsFromFlags("10.1.2.3:50051");
  EXPECT_EQ(options.server, "10.1.2.3:50051");
  EXPECT_EQ(options.tls_ca_file, "ca.pem");
  EXPECT_EQ(options.tls_cert_file, "c.pem");
  EXPECT_EQ(options.tls_key_file, "c.key");
  EXPECT_EQ(options.tls_server_name, "manyshot.internal");
  EXPECT_EQ(options.token, "s3cr3t");
  EXPECT_EQ(options.token_file, "/run/secrets/manyshot");
}

TEST_F(ConnectionTest, UsageErrorsNameTheFlag) {
  const std::string pem = Write("ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n");
  auto error = [](const ConnectionOptions& options) {
    auto resolved = ResolveConnection(options);
    EXPECT_FALSE(resolved.ok());
    return std::string(resolved.status().message());
  };
  ConnectionOptions o;
  o.server = "10.0.0.1:50051";
  o.token = "s3cr3t";
  EXPECT_THAT(error(o), HasSubstr("--token without TLS is only sent to loopback"));
  EXPECT_THAT(error(o), HasSubstr("10.0.0.1:50051"));
  o.token = "";
  o.token_file = Write("token", "  s3cr3t\n");
  EXPECT_THAT(error(o), HasSubstr("--token_file without TLS"));
  o.token = "x";
  EXPECT_THAT(error(o), HasSubstr("give --token or --token_file, not both"));

  o = ConnectionOptions();
  o.server = "127.0.0.1:1";
  o.token_file = (dir_ / "missing").string();
  EXPECT_THAT(error(o), HasSubstr("--token_file=" + (dir_ / "missing").string()));
  o.token_file = Write("empty", " \n");
  EXPECT_THAT(error(o), HasSubstr("holds no token"));
  o.token_file = "";
  o.token = "two words";
  EXPECT_THAT(error(o), HasSubstr("--token: a token is printable ASCII without spaces"));

  o = ConnectionOptions();
  o.server = "127.0.0.1:1";
  o.tls_cert_file = pem;
  EXPECT_THAT(error(o), HasSubstr("--tls_cert_file and --tls_key_file must be given together"));
  o.tls_key_file = pem;
  EXPECT_THAT(error(o), HasSubstr("--tls_cert_file needs --tls_ca_file"));
  o = ConnectionOptions();
  o.tls_server_name = "x";
  EXPECT_THAT(error(o), HasSubstr("--tls_server_name needs --tls_ca_file"));
  o = ConnectionOptions();
  o.tls_ca_file = Write("not.pem", "hello");
  EXPECT_THAT(error(o), HasSubstr("--tls_ca_file=" + o.tls_ca_file + ": not a PEM file"));
  o.tls_ca_file = (dir_ / "nope.pem").string();
  EXPECT_THAT(error(o), HasSubstr("--tls_ca_file=" + o.tls_ca_file + ": cannot read"));
}

TEST_F(ConnectionTest, ResolvesPlaintextAndTls) {
  ConnectionOptions o;
  o.server = "localhost:50051";
  o.token_file = Write("token", "\n  s3cr3t-token \n");
  auto plain = ResolveConnection(o);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_FALSE(plain->tls);
  EXPECT_EQ(plain->token, "s3cr3t-token");  // surrounding whitespace dropped

  // With TLS a token may go anywhere.
  o.server = "manyshot.example.com:443";
  o.tls_ca_file = Write("ca.pem", "-----BEGIN CERTIFICATE-----\nMIIB\n");
  auto tls = ResolveConnection(o);
  ASSERT_TRUE(tls.ok()) << tls.status();
  EXPECT_TRUE(tls->tls);
  EXPECT_EQ(tls->token, "s3cr3t-token");

  ConnectionOptions none;
  none.server = "10.0.0.1:50051";
  auto anonymous = ResolveConnection(none);
  ASSERT_TRUE(anonymous.ok());
  EXPECT_FALSE(anonymous->tls);
  EXPECT_EQ(anonymous->token, "");
}

TEST_F(ConnectionTest, EveryCallCarriesTokenAndPerTaskCallsTheTask) {
  ConnectionOptions o;
  o.server = StartServer(grpc::InsecureServerCredentials());
  o.token = "s3cr3t-token";
  CliContext cli;
  ASSERT_TRUE(Connect(o, &cli).ok());
  EXPECT_EQ(cli.server, o.server);
  RunEveryCommand(cli);
  ExpectMetadata("Bearer s3cr3t-token");
}

TEST_F(ConnectionTest, WithoutATokenNoAuthorizationIsSent) {
  ConnectionOptions o;
  o.server = StartServer(grpc::InsecureServerCredentials());
  CliContext cli;
  ASSERT_TRUE(Connect(o, &cli).ok());
  RunEveryCommand(cli);
  ExpectMetadata("");
}

TEST_F(ConnectionTest, TaskIdsThatCannotBeMetadataAreLeftOut) {
  CliContext cli;
  cli.timeout_seconds = 5;
  EXPECT_TRUE(IsValidMetadataValue("sst2-v1.2_x"));
  EXPECT_FALSE(IsValidMetadataValue(""));
  EXPECT_FALSE(IsValidMetadataValue("caf\xc3\xa9"));
  EXPECT_FALSE(IsValidMetadataValue("a\nb"));
  EXPECT_FALSE(IsValidMetadataValue(" padded"));
  // The call is still made (the server names the bad id); it just carries no task metadata.
  ConnectionOptions o;
  o.server = StartServer(grpc::InsecureServerCredentials());
  ASSERT_TRUE(Connect(o, &cli).ok());
  cli.args = {"caf\xc3\xa9"};
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunGet(cli), 0);
  ::testing::internal::GetCapturedStdout();
  std::vector<SeenCall> calls = log_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].method, "GetTask");
  EXPECT_EQ(calls[0].task_values, 0);
}

// A CA, a server certificate for localhost / 127.0.0.1 and a client certificate, all signed by
// the CA, made with the openssl CLI.
class ConnectionTlsTest : public ConnectionTest {
 protected:
  void SetUp() override {
    ConnectionTest::SetUp();
    ASSERT_EQ(std::system("command -v openssl >/dev/null"), 0)
        << "the openssl CLI is needed (scripts/setup.sh installs it)";
    ASSERT_EQ(std::system(("cd '" + dir_.string() +
                           "' && /bin/sh '" MANYSHOT_SOURCE_DIR "/tests/data/make_test_certs.sh'")
                              .c_str()),
              0);
  }
  std::string Path(const std::string& name) const { return (dir_ / name).string(); }

  // Mutual TLS: the client must present a certificate signed by the CA.
  std::shared_ptr<grpc::ServerCredentials> MutualTls() const {
    grpc::SslServerCredentialsOptions options(
        GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
    options.pem_root_certs = Slurp(Path("ca.pem"));
    options.pem_key_cert_pairs.push_back({Slurp(Path("server.key")), Slurp(Path("server.pem"))});
    return grpc::SslServerCredentials(options);
  }
};

TEST_F(ConnectionTlsTest, MutualTlsCarriesTokenAndTask) {
  ConnectionOptions o;
  o.server = StartServer(MutualTls());
  o.tls_ca_file = Path("ca.pem");
  o.tls_cert_file = Path("client.pem");
  o.tls_key_file = Path("client.key");
  o.token_file = Write("token", "tls-token\n");
  CliContext cli;
  ASSERT_TRUE(Connect(o, &cli).ok());
  RunEveryCommand(cli);
  ExpectMetadata("Bearer tls-token");
}

TEST_F(ConnectionTlsTest, ServerNameOverrideAndRefusalWithoutAClientCertificate) {
  // "localhost:PORT" checked as "localhost" (the certificate's DNS name) via the override.
  ConnectionOptions o;
  std::string address = StartServer(MutualTls());
  o.server = "localhost" + address.substr(address.find(':'));
  o.tls_ca_file = Path("ca.pem");
  o.tls_cert_file = Path("client.pem");
  o.tls_key_file = Path("client.key");
  o.tls_server_name = "localhost";
  CliContext cli;
  cli.timeout_seconds = 10;
  ASSERT_TRUE(Connect(o, &cli).ok());
  ::testing::internal::CaptureStdout();
  EXPECT_EQ(RunInfo(cli), 0);
  ::testing::internal::GetCapturedStdout();

  // No client certificate: the handshake fails and the command reports an RPC error (exit 1).
  o.tls_cert_file = "";
  o.tls_key_file = "";
  CliContext anonymous;
  anonymous.timeout_seconds = 10;
  ASSERT_TRUE(Connect(o, &anonymous).ok());
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunInfo(anonymous), 1);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("manyshot: info: UNAVAILABLE"));
  // Only the successful call reached the service.
  std::vector<SeenCall> calls = log_.Take();
  ASSERT_EQ(calls.size(), 1u);
  EXPECT_EQ(calls[0].method, "GetServerInfo");
}

}  // namespace
}  // namespace manyshot::client
