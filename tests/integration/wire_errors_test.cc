// Messages the server cannot decode, against the real server binary: invalid UTF-8 in a string
// field of every kind of request (unary, server-streaming, inside client streams) and malformed
// bytes must fail with INVALID_ARGUMENT naming the field, never INTERNAL with an empty message;
// inside a stream they fail the whole call and store nothing. Every error carries the
// google.rpc details (ErrorInfo, BadRequest, RetryInfo), in the trailer and in-band.
#include <fstream>
#include <future>
#include <map>

#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/error_details.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

using grpc::StatusCode;

constexpr char kTask[] = "sst2";
constexpr char kBad[] = "bad \xff\xfe bytes";  // 0xFF never occurs in UTF-8

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

class WireErrorsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new ServerUnderTest(dir_->path() / "data", {"--max_input_bytes=512"});
    ASSERT_TRUE(server_->started()) << server_->Stderr();
    auto stub = v1::ManyShot::NewStub(server_->Channel());
    auto created = CreateTask(*stub, kTask, Sst2Spec(), Sst2Demonstrations());
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  }
  static void TearDownTestSuite() {
    delete server_;
    delete dir_;
  }
  void SetUp() override {
    ASSERT_TRUE(server_->started());
    stub_ = v1::ManyShot::NewStub(server_->Channel());
  }
  void TearDown() override {
    EXPECT_FALSE(server_->process().Wait(std::chrono::milliseconds(0)).has_value())
        << "the server died\n"
        << server_->Stderr();
  }

  static TempDir* dir_;
  static ServerUnderTest* server_;
  std::unique_ptr<v1::ManyShot::Stub> stub_;
};

TempDir* WireErrorsTest::dir_ = nullptr;
ServerUnderTest* WireErrorsTest::server_ = nullptr;

// INVALID_ARGUMENT naming `field` in the message and in the details, with reason `reason`.
void ExpectInvalidField(const grpc::Status& status, const std::string& field,
                        const std::string& reason, const std::string& message) {
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT)
      << status.error_code() << " " << status.error_message();
  EXPECT_NE(status.error_message().find(message), std::string::npos)
      << "\"" << status.error_message() << "\" lacks \"" << message << "\"";
  const ErrorDetails d = DetailsOf(status);
  ASSERT_TRUE(d.present) << status.error_message();
  EXPECT_EQ(d.code, static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(d.reason, reason);
  EXPECT_EQ(d.domain, "manyshot.v1");
  EXPECT_EQ(d.fields, std::vector<std::string>{field});
}

void ExpectInvalidUtf8(const grpc::Status& status, const std::string& field) {
  ExpectInvalidField(status, field, "INVALID_UTF8", field + " is not valid UTF-8");
}

TEST_F(WireErrorsTest, InvalidUtf8InAnyStringFieldOfAUnaryOrServerStreamingCallNamesTheField) {
  struct Case {
    std::string field;
    std::function<grpc::Status()> call;
  };
  auto classify = [this](v1::ClassifyRequest request) {
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ClassifyResponse response;
    return stub_->Classify(&context, request, &response);
  };
  auto generate = [this](const std::function<void(v1::GenerateRequest&)>& edit) {
    v1::GenerateRequest request;
    request.set_task_id(kTask);
    request.mutable_input()->set_text("a fine film");
    request.mutable_options()->set_max_new_tokens(2);
    edit(request);
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
    }
    return reader->Finish();
  };
  std::vector<Case> cases;
  cases.push_back({"inputs[1].text", [&] {
                     return classify(ClassifyRequestFor(kTask, {"fine", kBad}));
                   }});
  cases.push_back({"inputs[0].fields[premise]", [&] {
                     auto r = ClassifyRequestFor(kTask, {"fine"});
                     (*r.mutable_inputs(0)->mutable_fields())["premise"] = kBad;
                     return classify(r);
                   }});
  cases.push_back({"inputs[0].fields (a key)", [&] {
                     auto r = ClassifyRequestFor(kTask, {"fine"});
                     (*r.mutable_inputs(0)->mutable_fields())[kBad] = "fine";
                     return classify(r);
                   }});
  cases.push_back({"request_id", [&] {
                     auto r = ClassifyRequestFor(kTask, {"fine"});
                     r.set_request_id(kBad);
                     return classify(r);
                   }});
  cases.push_back({"task_id", [&] { return classify(ClassifyRequestFor(kBad, {"fine"})); }});
  cases.push_back({"task_id", [&] {
                     grpc::ClientContext context;
                     v1::GetTaskRequest request;
                     request.set_task_id(kBad);
                     v1::Task task;
                     return stub_->GetTask(&context, request, &task);
                   }});
  cases.push_back({"task_id", [&] {
                     grpc::ClientContext context;
                     v1::DeleteTaskRequest request;
                     request.set_task_id(kBad);
                     v1::DeleteTaskResponse response;
                     return stub_->DeleteTask(&context, request, &response);
                   }});
  cases.push_back({"page_token", [&] {
                     grpc::ClientContext context;
                     v1::ListTasksRequest request;
                     request.set_page_token(kBad);
                     v1::ListTasksResponse response;
                     return stub_->ListTasks(&context, request, &response);
                   }});
  cases.push_back({"items[0].candidates[1]", [&] {
                     grpc::ClientContext context;
                     v1::ScoreRequest request;
                     request.set_task_id(kTask);
                     auto* item = request.add_items();
                     item->mutable_input()->set_text("the cast");
                     item->add_candidates(" weak");
                     item->add_candidates(kBad);
                     v1::ScoreResponse response;
                     return stub_->Score(&context, request, &response);
                   }});
  cases.push_back(
      {"input.text", [&] { return generate([](auto& r) { r.mutable_input()->set_text(kBad); }); }});
  cases.push_back({"options.stop[1]", [&] {
                     return generate([](auto& r) {
                       r.mutable_options()->add_stop(".");
                       r.mutable_options()->add_stop(kBad);
                     });
                   }});
  for (const Case& c : cases) {
    SCOPED_TRACE(c.field);
    ExpectInvalidUtf8(c.call(), c.field);
  }
}

TEST_F(WireErrorsTest, MalformedBytesAreInvalidArgumentNamingTheMessageType) {
  grpc::GenericStub generic(server_->Channel());
  // Field 2 (inputs), length-delimited, claims 5 bytes but carries 2.
  const std::string truncated = "\x12\x05\x0a\x01";
  grpc::Slice slice(truncated);
  grpc::ByteBuffer request(&slice, 1);
  grpc::ByteBuffer response;
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  std::promise<grpc::Status> done;
  generic.UnaryCall(&context, "/manyshot.v1.ManyShot/Classify", grpc::StubOptions(), &request,
                    &response, [&done](grpc::Status s) { done.set_value(std::move(s)); });
  const grpc::Status status = done.get_future().get();
  EXPECT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT) << status.error_message();
  EXPECT_NE(status.error_message().find("not a valid manyshot.v1.ClassifyRequest"),
            std::string::npos)
      << status.error_message();
  EXPECT_EQ(DetailsOf(status).reason, "MALFORMED_MESSAGE");
}

TEST_F(WireErrorsTest, CreateTaskWithAnUndecodableLaterChunkFailsAndStoresNothing) {
  auto demos = Sst2Demonstrations(12);
  demos[6].set_text(kBad);  // in the second message of 4-demonstration chunks
  auto outcome = CreateTask(*stub_, "chunked", Sst2Spec(), demos, false, 4);
  ExpectInvalidUtf8(outcome.status, "demonstrations[6].text");
  EXPECT_NE(outcome.status.error_message().find("CreateTask message 2"), std::string::npos)
      << outcome.status.error_message();
  EXPECT_FALSE(outcome.result.has_task());

  grpc::ClientContext context;
  v1::GetTaskRequest get;
  get.set_task_id("chunked");
  v1::Task task;
  EXPECT_EQ(stub_->GetTask(&context, get, &task).error_code(), StatusCode::NOT_FOUND);

  // The same upload without the bad bytes is then created from scratch.
  demos[6].set_text("a fine film");
  auto retried = CreateTask(*stub_, "chunked", Sst2Spec(), demos, false, 4);
  ASSERT_TRUE(retried.status.ok()) << retried.status.error_message();
  EXPECT_TRUE(retried.result.created());
  EXPECT_EQ(retried.result.task().stats().demonstrations(), 12u);
}

TEST_F(WireErrorsTest, StreamClassifyWithAnUndecodableMessageFailsTheCall) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = stub_->StreamClassify(&context);
  auto first = ClassifyRequestFor(kTask, {"a delightful film"});
  first.set_request_id("r1");
  ASSERT_TRUE(stream->Write(first));
  v1::ClassifyResponse response;
  ASSERT_TRUE(stream->Read(&response));
  EXPECT_EQ(response.request_id(), "r1");
  EXPECT_EQ(response.results_size(), 1);
  EXPECT_FALSE(response.has_error());

  auto bad = ClassifyRequestFor(kTask, {kBad});
  bad.set_request_id("r2");
  stream->Write(bad);
  auto after = ClassifyRequestFor(kTask, {"fine"});
  after.set_request_id("r3");
  stream->Write(after);  // may already fail: the server ends the call at r2
  stream->WritesDone();
  while (stream->Read(&response)) {
    ADD_FAILURE() << "no answer expected after the bad message, got " << response.request_id();
  }
  const grpc::Status status = stream->Finish();
  ExpectInvalidUtf8(status, "inputs[0].text");
  EXPECT_NE(status.error_message().find("StreamClassify message 2"), std::string::npos)
      << status.error_message();
}

TEST_F(WireErrorsTest, StreamClassifyAnswersAFailedRequestInBandWithAGoogleRpcStatus) {
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = stub_->StreamClassify(&context);
  auto missing = ClassifyRequestFor("nope", {"fine"});
  missing.set_request_id("missing");
  auto empty = ClassifyRequestFor(kTask, {});
  empty.set_request_id("empty");
  auto good = ClassifyRequestFor(kTask, {"fine"});
  good.set_request_id("good");
  ASSERT_TRUE(stream->Write(missing));
  ASSERT_TRUE(stream->Write(empty));
  ASSERT_TRUE(stream->Write(good));
  stream->WritesDone();
  std::map<std::string, v1::ClassifyResponse> answers;
  v1::ClassifyResponse response;
  while (stream->Read(&response)) answers[response.request_id()] = response;
  ASSERT_TRUE(stream->Finish().ok());
  ASSERT_EQ(answers.size(), 3u);

  const auto& nf = answers["missing"];
  EXPECT_EQ(nf.error().code(), static_cast<int>(StatusCode::NOT_FOUND));
  EXPECT_NE(nf.error().message().find("\"nope\""), std::string::npos) << nf.error().message();
  EXPECT_EQ(DetailsOf(nf.error()).reason, "NOT_FOUND");
  EXPECT_EQ(DetailsOf(nf.error()).domain, "manyshot.v1");
  EXPECT_EQ(nf.results_size(), 0);

  const auto& ia = answers["empty"];
  EXPECT_EQ(ia.error().code(), static_cast<int>(StatusCode::INVALID_ARGUMENT));
  EXPECT_EQ(DetailsOf(ia.error()).fields, std::vector<std::string>{"inputs"});

  EXPECT_EQ(answers["good"].error().code(), 0);
  EXPECT_EQ(answers["good"].results_size(), 1);
}

TEST_F(WireErrorsTest, TheCliPrintsTheFieldAndReasonOfAnError) {
  TempDir work;
  {
    std::ofstream out(work.path() / "in.txt");
    out << std::string(600, 'a') << "\n";
  }
  // Unary (the trailer's details) and streamed (the in-band google.rpc.Status).
  for (const char* mode : {"--stream=false", "--stream=true"}) {
    SCOPED_TRACE(mode);
    auto result = RunCommand({CliBinary(), "--server=" + server_->address(), "classify", kTask,
                              "--file=" + (work.path() / "in.txt").string(), mode},
                             work.path());
    EXPECT_EQ(result.exit_status, 1) << result.err;
    EXPECT_NE(result.err.find("INVALID_ARGUMENT: inputs[0].text has 600 bytes"), std::string::npos)
        << result.err;
    EXPECT_NE(result.err.find("(reason INVALID_ARGUMENT; field inputs[0].text)"), std::string::npos)
        << result.err;
  }
}

}  // namespace
}  // namespace manyshot::testing
