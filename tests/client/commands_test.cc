// The subcommands end to end against an in-process fake ManyShot service: what they send (chunked
// CreateTask streams, batches, options) and what they print.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <mutex>

#include "absl/flags/flag.h"
#include "client/commands.h"
#include "client/flags.h"
#include "gmock/gmock.h"
#include "grpcpp/server.h"
#include "grpcpp/server_builder.h"
#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"

namespace manyshot::client {
namespace {

using ::testing::HasSubstr;

class FakeManyShot final : public v1::ManyShot::Service {
 public:
  grpc::Status CreateTask(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::CreateTaskResponse, v1::CreateTaskRequest>* stream) override {
    v1::CreateTaskRequest request;
    size_t demonstrations = 0;
    while (stream->Read(&request)) {
      std::lock_guard<std::mutex> lock(mu);
      create_requests.push_back(request);
      demonstrations += static_cast<size_t>(request.demonstrations_size());
    }
    v1::CreateTaskResponse progress;
    progress.mutable_progress()->set_phase(v1::CreateTaskProgress::PHASE_ENCODING);
    progress.mutable_progress()->set_groups_total(2);
    progress.mutable_progress()->set_groups_encoded(2);
    stream->Write(progress);
    v1::CreateTaskResponse result;
    v1::Task* task = result.mutable_result()->mutable_task();
    task->set_task_id(create_requests.front().task_id());
    task->set_state(v1::TASK_STATE_READY);
    task->mutable_stats()->set_demonstrations(demonstrations);
    result.mutable_result()->set_created(true);
    stream->Write(result);
    return grpc::Status::OK;
  }

  grpc::Status Classify(grpc::ServerContext*, const v1::ClassifyRequest* request,
                        v1::ClassifyResponse* response) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      classify_requests.push_back(*request);
    }
    if (request->task_id() == "missing") return grpc::Status(grpc::NOT_FOUND, "no task missing");
    for (const v1::Input& input : request->inputs()) {
      v1::ClassifyResult* result = response->add_results();
      bool positive = input.text().find("good") != std::string::npos;
      result->set_label(positive ? "positive" : "negative");
      result->set_label_index(positive ? 1 : 0);
      for (int i = 0; i < 2; ++i) {
        result->add_scores()->set_probability((i == 1) == positive ? 0.75 : 0.25);
      }
    }
    return grpc::Status::OK;
  }

  grpc::Status ListTasks(grpc::ServerContext*, const v1::ListTasksRequest* request,
                         v1::ListTasksResponse* response) override {
    // Three tasks, one per page.
    int page = request->page_token().empty() ? 0 : std::stoi(request->page_token());
    response->add_tasks()->set_task_id("task" + std::to_string(page));
    if (page < 2) response->set_next_page_token(std::to_string(page + 1));
    return grpc::Status::OK;
  }

  grpc::Status Generate(grpc::ServerContext*, const v1::GenerateRequest* request,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    {
      std::lock_guard<std::mutex> lock(mu);
      generate_requests.push_back(*request);
    }
    for (const char* piece : {" Hello", ",", " world"}) {
      v1::GenerateResponse token;
      token.mutable_token()->set_text(piece);
      writer->Write(token);
    }
    v1::GenerateResponse result;
    result.mutable_result()->set_text(" Hello, world");
    result.mutable_result()->set_finish_reason(v1::FINISH_REASON_EOS);
    writer->Write(result);
    return grpc::Status::OK;
  }

  std::mutex mu;
  std::vector<v1::CreateTaskRequest> create_requests;
  std::vector<v1::ClassifyRequest> classify_requests;
  std::vector<v1::GenerateRequest> generate_requests;
};

class CommandsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.RegisterService(&service_);
    server_ = builder.BuildAndStart();
    cli_.channel = server_->InProcessChannel(grpc::ChannelArguments());
    cli_.server = "in-process";
    dir_ = std::filesystem::temp_directory_path() /
           ("manyshot_commands_test_" + std::to_string(getpid()));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    server_->Shutdown();
    std::filesystem::remove_all(dir_);
    // Back to the defaults for the next test.
    absl::SetFlag(&FLAGS_file, "");
    absl::SetFlag(&FLAGS_format, "");
    absl::SetFlag(&FLAGS_text_field, "text");
    absl::SetFlag(&FLAGS_template, "");
    absl::SetFlag(&FLAGS_labels, {});
    absl::SetFlag(&FLAGS_label_map, "");
    absl::SetFlag(&FLAGS_chunk, 1000);
    absl::SetFlag(&FLAGS_batch, 32);
    absl::SetFlag(&FLAGS_beam_width, 0u);
    absl::SetFlag(&FLAGS_dry_run, false);
    absl::SetFlag(&FLAGS_truncate, "");
  }
  std::string Write(const std::string& name, const std::string& content) {
    std::string path = (dir_ / name).string();
    std::ofstream(path) << content;
    return path;
  }

  FakeManyShot service_;
  std::unique_ptr<grpc::Server> server_;
  CliContext cli_;
  std::filesystem::path dir_;
};

TEST_F(CommandsTest, CreateStreamsChunksAndPrintsTheResult) {
  std::string csv = "sentence,label\n";
  for (int i = 0; i < 25; ++i)
    csv += "\"demo, number " + std::to_string(i) + "\"," + std::to_string(i % 2) + "\n";
  absl::SetFlag(&FLAGS_file, Write("train.csv", csv));
  absl::SetFlag(&FLAGS_text_field, "sentence");
  absl::SetFlag(&FLAGS_template, "Sentence: {text}\\nLabel:");
  absl::SetFlag(&FLAGS_label_map, "0=negative,1=positive");
  absl::SetFlag(&FLAGS_labels, {"negative", "positive"});
  absl::SetFlag(&FLAGS_chunk, 10);
  cli_.args = {"sst2"};
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = RunCreate(cli_);
  std::string out = ::testing::internal::GetCapturedStdout();
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(code, 0) << err;
  ASSERT_EQ(service_.create_requests.size(), 3u);
  EXPECT_EQ(service_.create_requests[0].task_id(), "sst2");
  EXPECT_EQ(service_.create_requests[0].spec().input_template(), "Sentence: {text}\nLabel:");
  EXPECT_EQ(service_.create_requests[0].spec().labels_size(), 2);
  EXPECT_EQ(service_.create_requests[0].demonstrations_size(), 10);
  EXPECT_EQ(service_.create_requests[0].demonstrations(1).text(), "demo, number 1");
  EXPECT_EQ(service_.create_requests[0].demonstrations(1).label(), "positive");
  EXPECT_EQ(service_.create_requests[2].demonstrations_size(), 5);
  EXPECT_THAT(out, HasSubstr("created sst2 (25 demonstrations in 3 messages)"));
  EXPECT_THAT(err, HasSubstr("2/2 groups"));  // the progress display
}

TEST_F(CommandsTest, CreateDryRunPrintsThePromptAndSendsNothing) {
  absl::SetFlag(&FLAGS_file, Write("train.tsv",
                                   "text\tlabel\na good film\t1\na dull film\t0\nfine\t1\n"
                                   "fourth\t0\n"));
  absl::SetFlag(&FLAGS_template, "Review: {text}\\nSentiment:");
  absl::SetFlag(&FLAGS_label_map, "0=negative,1=positive");
  absl::SetFlag(&FLAGS_labels, {"negative", "positive"});
  absl::SetFlag(&FLAGS_dry_run, true);
  cli_.args = {"sst2"};
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = RunCreate(cli_);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(code, 0) << err;
  // The first three demonstrations (input template, " {label}", "\n\n"), then a query.
  EXPECT_THAT(out, HasSubstr("Review: a good film\nSentiment: positive\n\n"
                             "Review: a dull film\nSentiment: negative\n\n"
                             "Review: fine\nSentiment: positive\n\n"
                             "Review: a good film\nSentiment:\n"));
  EXPECT_THAT(out, HasSubstr("first 3 of 4 demonstrations"));
  EXPECT_EQ(out.find("fourth"), std::string::npos);
  EXPECT_TRUE(service_.create_requests.empty());
}

TEST_F(CommandsTest, TruncateSetsTheTaskDefaultAndTheRequestOption) {
  // Runs `command` with stdout and stderr captured; returns its exit code, stderr in `err`.
  const auto run = [this](int (*command)(const CliContext&), std::string* err) {
    ::testing::internal::CaptureStdout();
    ::testing::internal::CaptureStderr();
    const int code = command(cli_);
    ::testing::internal::GetCapturedStdout();
    *err = ::testing::internal::GetCapturedStderr();
    return code;
  };
  std::string err;
  absl::SetFlag(&FLAGS_file, Write("train.tsv", "text\tlabel\na good film\t1\n"));
  absl::SetFlag(&FLAGS_template, "{text}");
  absl::SetFlag(&FLAGS_label_map, "1=positive");
  absl::SetFlag(&FLAGS_truncate, "keep_end");
  cli_.args = {"t"};
  ASSERT_EQ(run(RunCreate, &err), 0) << err;
  ASSERT_EQ(service_.create_requests.size(), 1u);
  EXPECT_EQ(service_.create_requests[0].spec().input_truncation(), v1::INPUT_TRUNCATION_KEEP_END);

  absl::SetFlag(&FLAGS_file, "");
  cli_.repeated["input"] = {"a good film"};
  absl::SetFlag(&FLAGS_truncate, "KEEP_START");
  ASSERT_EQ(run(RunClassify, &err), 0) << err;
  ASSERT_EQ(service_.classify_requests.size(), 1u);
  EXPECT_EQ(service_.classify_requests[0].options().truncation(), v1::INPUT_TRUNCATION_KEEP_START);

  absl::SetFlag(&FLAGS_truncate, "middle");
  EXPECT_EQ(run(RunClassify, &err), 2);
  EXPECT_THAT(err, HasSubstr("--truncate=middle: expected none, keep_start or keep_end"));
}

TEST_F(CommandsTest, CreateUsageErrorsNameFileAndLine) {
  absl::SetFlag(&FLAGS_file, Write("bad.csv", "text,label\nok,1\n\"x\",1,2\n"));
  absl::SetFlag(&FLAGS_template, "{text}");
  cli_.args = {"t"};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunCreate(cli_), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(),
              HasSubstr("manyshot: create: " + (dir_ / "bad.csv").string() +
                        ":3: 3 fields, but the header has 2"));
  EXPECT_TRUE(service_.create_requests.empty());
}

TEST_F(CommandsTest, ClassifyBatchesAndPrintsOneLinePerInput) {
  absl::SetFlag(&FLAGS_file, Write("in.txt", "a good film\nbad\twith tab\nso good\n"));
  absl::SetFlag(&FLAGS_batch, 2);
  cli_.args = {"sst2"};
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  int code = RunClassify(cli_);
  std::string out = ::testing::internal::GetCapturedStdout();
  std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(code, 0) << err;
  EXPECT_EQ(out,
            "positive\t0.7500\ta good film\n"
            "negative\t0.7500\tbad\\twith tab\n"
            "positive\t0.7500\tso good\n");
  EXPECT_THAT(err, HasSubstr("3 inputs in "));
  ASSERT_EQ(service_.classify_requests.size(), 2u);
  EXPECT_EQ(service_.classify_requests[0].inputs_size(), 2);
  EXPECT_EQ(service_.classify_requests[1].inputs_size(), 1);
}

TEST_F(CommandsTest, ClassifyTakesInputsFromRepeatedInputFlags) {
  cli_.args = {"sst2"};
  cli_.repeated["input"] = {"a good film", "so\\tgood"};
  ::testing::internal::CaptureStdout();
  ::testing::internal::CaptureStderr();
  const int code = RunClassify(cli_);
  const std::string out = ::testing::internal::GetCapturedStdout();
  const std::string err = ::testing::internal::GetCapturedStderr();
  ASSERT_EQ(code, 0) << err;
  EXPECT_EQ(out, "positive\t0.7500\ta good film\npositive\t0.7500\tso\\tgood\n");
  ASSERT_EQ(service_.classify_requests.size(), 1u);
  ASSERT_EQ(service_.classify_requests[0].inputs_size(), 2);
  EXPECT_EQ(service_.classify_requests[0].inputs(1).text(), "so\tgood");  // unescaped
  // Not with --file as well.
  absl::SetFlag(&FLAGS_file, Write("in.txt", "x\n"));
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunClassify(cli_), 2);
  EXPECT_THAT(::testing::internal::GetCapturedStderr(), HasSubstr("not both"));
}

TEST_F(CommandsTest, ClassifyReportsRpcErrors) {
  absl::SetFlag(&FLAGS_file, Write("in.txt", "x\n"));
  cli_.args = {"missing"};
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(RunClassify(cli_), 1);
  EXPECT_EQ(::testing::internal::GetCapturedStderr(),
            "manyshot: classify: NOT_FOUND: no task missing\n");
}

TEST_F(CommandsTest, ListFollowsPages) {
  cli_.json = true;
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(RunList(cli_), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(),
            "{\"tasks\":[{\"task_id\":\"task0\"},{\"task_id\":\"task1\"},{\"task_id\":\"task2\"}]}"
            "\n");
}

TEST_F(CommandsTest, GenerateStreamsTokensAndSetsOptions) {
  absl::SetFlag(&FLAGS_beam_width, 4u);
  cli_.args = {"t"};
  cli_.repeated["input"] = {"Say hi:"};
  cli_.repeated["stop"] = {"\\n", "."};
  ::testing::internal::CaptureStdout();
  ASSERT_EQ(RunGenerate(cli_), 0);
  EXPECT_EQ(::testing::internal::GetCapturedStdout(), " Hello, world\n");
  ASSERT_EQ(service_.generate_requests.size(), 1u);
  const v1::GenerationOptions& options = service_.generate_requests[0].options();
  EXPECT_EQ(options.strategy(), v1::DECODING_STRATEGY_BEAM);
  EXPECT_EQ(options.beam_width(), 4u);
  ASSERT_EQ(options.stop_size(), 2);
  EXPECT_EQ(options.stop(0), "\n");
  EXPECT_FALSE(options.has_stop_at_eos());
}

}  // namespace
}  // namespace manyshot::client
