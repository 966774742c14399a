// Limits that fit ordinary inputs, through the API of a real server on its default model: the
// room for a query and an answer derived from the model's context, opt-in truncation of long
// inputs (per task and per request; the result equals a Classify of the cut input found through
// the API itself), and an answer length set per request within what the input leaves.
#include <algorithm>
#include <string>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/error_details.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"
#include "testing/harness/subprocess.h"

namespace manyshot::testing {
namespace {

using grpc::StatusCode;

constexpr uint32_t kQueryRoom = 48;  // Sst2Spec's max_query_tokens
constexpr uint32_t kAnswerRoom = 8;  // and max_answer_tokens

std::string Words(int n, const std::string& word) {
  std::string text;
  for (int i = 0; i < n; ++i) text += (i ? " " : "") + word;
  return text;
}

class InputLimitsTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    dir_ = new TempDir();
    server_ = new ServerUnderTest(dir_->path() / "data", {});
    ASSERT_TRUE(server_->started()) << server_->Stderr();
    stub_ = v1::ManyShot::NewStub(server_->Channel()).release();
    auto created = CreateTask(*stub_, "sst2", Sst2Spec(), Sst2Demonstrations());
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  }
  static void TearDownTestSuite() {
    delete stub_;
    server_->StopCleanly();
    delete server_;
    delete dir_;
  }

  static grpc::Status Classify(const std::string& text, v1::InputTruncation how,
                               v1::ClassifyResult* result, const std::string& task = "sst2") {
    v1::ClassifyRequest request = ClassifyRequestFor(task, {text});
    request.mutable_options()->set_truncation(how);
    grpc::ClientContext context;
    v1::ClassifyResponse response;
    grpc::Status status = stub_->Classify(&context, request, &response);
    if (status.ok() && result != nullptr) *result = response.results(0);
    return status;
  }

  static grpc::Status Generate(const std::string& text, uint32_t max_new_tokens,
                               v1::GenerationResult* result) {
    v1::GenerateRequest request;
    request.set_task_id("sst2");
    request.mutable_input()->set_text(text);
    request.mutable_options()->set_max_new_tokens(max_new_tokens);
    request.mutable_options()->set_stop_at_eos(false);
    grpc::ClientContext context;
    auto reader = stub_->Generate(&context, request);
    v1::GenerateResponse response;
    while (reader->Read(&response)) {
      if (response.has_result()) *result = response.result();
    }
    return reader->Finish();
  }

  // The longest prefix (keep_start) or suffix (keep_end) of `text`, in characters (ASCII here),
  // that the task accepts without truncation: found by asking the server itself.
  static std::string LongestAccepted(const std::string& text, bool keep_start) {
    size_t lo = 0;
    size_t hi = text.size();
    while (hi - lo > 1) {
      const size_t mid = (lo + hi) / 2;
      const std::string cut = keep_start ? text.substr(0, mid) : text.substr(text.size() - mid);
      if (Classify(cut, v1::INPUT_TRUNCATION_NONE, nullptr).ok()) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    return keep_start ? text.substr(0, lo) : text.substr(text.size() - lo);
  }

  static TempDir* dir_;
  static ServerUnderTest* server_;
  static v1::ManyShot::Stub* stub_;
};

TempDir* InputLimitsTest::dir_ = nullptr;
ServerUnderTest* InputLimitsTest::server_ = nullptr;
v1::ManyShot::Stub* InputLimitsTest::stub_ = nullptr;

TEST_F(InputLimitsTest, TheDefaultRoomComesFromTheModelsContext) {
  grpc::ClientContext info_context;
  v1::ServerInfo info;
  ASSERT_TRUE(stub_->GetServerInfo(&info_context, {}, &info).ok());
  const uint32_t context = info.model().context_length();
  ASSERT_GT(context, 0u);
  v1::TaskSpec spec = Sst2Spec(0);
  spec.clear_max_query_tokens();
  spec.clear_max_answer_tokens();
  auto created = CreateTask(*stub_, "defaults", spec, Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  const v1::TaskStats& stats = created.result.task().stats();
  const uint32_t query = std::clamp(context / 4, 128u, 4096u);
  const uint32_t answer = std::clamp(context / 16, 32u, 256u);
  EXPECT_EQ(stats.max_query_tokens(), query);
  EXPECT_EQ(stats.max_answer_tokens(), answer);
  EXPECT_EQ(stats.group_length(), context - query - answer);
  // A 200-token input fits the default model's room without any option (1024 / 4 = 256).
  v1::ClassifyResult result;
  ASSERT_TRUE(
      Classify(Words(200, "fine"), v1::INPUT_TRUNCATION_UNSPECIFIED, &result, "defaults").ok());
  EXPECT_EQ(result.truncated_tokens(), 0u);
  // The explicit room of a task is reported as set.
  grpc::ClientContext get_context;
  v1::GetTaskRequest get;
  get.set_task_id("sst2");
  v1::Task task;
  ASSERT_TRUE(stub_->GetTask(&get_context, get, &task).ok());
  EXPECT_EQ(task.stats().max_query_tokens(), kQueryRoom);
  EXPECT_EQ(task.stats().max_answer_tokens(), kAnswerRoom);
}

TEST_F(InputLimitsTest, ALongInputIsRefusedWithItsPathAndTheWaysToChangeIt) {
  v1::ClassifyRequest request = ClassifyRequestFor("sst2", {"fine", Words(80, "word")});
  grpc::ClientContext context;
  v1::ClassifyResponse response;
  const grpc::Status status = stub_->Classify(&context, request, &response);
  ASSERT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("inputs[1]: the rendered input has ", 0), 0u)
      << status.error_message();
  for (const char* hint : {"more than max_query_tokens 48", "manyshot create --max_query_tokens=N",
                           "options.truncation", "spec.input_truncation", "--truncate=keep_end"}) {
    EXPECT_NE(status.error_message().find(hint), std::string::npos)
        << hint << " in " << status.error_message();
  }
  EXPECT_EQ(DetailsOf(status).fields, std::vector<std::string>{"inputs[1]"});
}

TEST_F(InputLimitsTest, TruncationCutsExactlyWhatTheRoomCannotHold) {
  const std::string text =
      "the opening is wonderful and warm " + Words(60, "filler") + " but the ending is dreadful";
  for (const bool keep_start : {true, false}) {
    SCOPED_TRACE(keep_start ? "keep_start" : "keep_end");
    v1::ClassifyResult cut;
    ASSERT_TRUE(
        Classify(text, keep_start ? v1::INPUT_TRUNCATION_KEEP_START : v1::INPUT_TRUNCATION_KEEP_END,
                 &cut)
            .ok());
    EXPECT_GT(cut.truncated_tokens(), 0u);
    EXPECT_LE(cut.input_tokens(), kQueryRoom);
    // The same answer as the longest accepted prefix (suffix) sent as it is.
    const std::string accepted = LongestAccepted(text, keep_start);
    ASSERT_FALSE(accepted.empty());
    v1::ClassifyResult whole;
    ASSERT_TRUE(Classify(accepted, v1::INPUT_TRUNCATION_NONE, &whole).ok());
    EXPECT_EQ(cut.input_tokens(), whole.input_tokens());
    ASSERT_EQ(cut.scores_size(), whole.scores_size());
    for (int l = 0; l < cut.scores_size(); ++l) {
      EXPECT_EQ(cut.scores(l).sum_logprob(), whole.scores(l).sum_logprob()) << l;
    }
  }
}

TEST_F(InputLimitsTest, ATaskDefaultTruncationAppliesUnlessARequestOverridesIt) {
  v1::TaskSpec spec = Sst2Spec();
  spec.set_input_truncation(v1::INPUT_TRUNCATION_KEEP_END);
  auto created = CreateTask(*stub_, "keeps-end", spec, Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();
  v1::ClassifyResult result;
  ASSERT_TRUE(
      Classify(Words(80, "word"), v1::INPUT_TRUNCATION_UNSPECIFIED, &result, "keeps-end").ok());
  EXPECT_GT(result.truncated_tokens(), 0u);
  EXPECT_EQ(
      Classify(Words(80, "word"), v1::INPUT_TRUNCATION_NONE, nullptr, "keeps-end").error_code(),
      StatusCode::INVALID_ARGUMENT);
  // Score and Generate cut the same way and say so.
  v1::ScoreRequest score;
  score.set_task_id("keeps-end");
  auto* item = score.add_items();
  item->mutable_input()->set_text(Words(80, "word"));
  item->add_candidates(" yes");
  item->add_candidates(" no");
  grpc::ClientContext context;
  v1::ScoreResponse scored;
  ASSERT_TRUE(stub_->Score(&context, score, &scored).ok());
  EXPECT_EQ(scored.results(0).truncated_tokens(), result.truncated_tokens());
}

TEST_F(InputLimitsTest, AnAnswerMayUseTheRoomItsInputLeaves) {
  // 48 + 8 tokens of room: a 3-token input leaves 53 for an answer, more than max_answer_tokens.
  v1::GenerationResult result;
  ASSERT_TRUE(Generate("a fine film", 40, &result).ok());
  EXPECT_EQ(result.token_ids_size(), 40);
  EXPECT_EQ(result.finish_reason(), v1::FINISH_REASON_MAX_TOKENS);
  // Past the room: refused, naming the request field and the task option.
  const grpc::Status status = Generate("a fine film", 60, &result);
  ASSERT_EQ(status.error_code(), StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(status.error_message().find("options.max_new_tokens 60 must be from 1 to the "),
            std::string::npos)
      << status.error_message();
  EXPECT_NE(status.error_message().find("manyshot create --max_answer_tokens=N"), std::string::npos)
      << status.error_message();
  EXPECT_EQ(DetailsOf(status).fields, std::vector<std::string>{"options.max_new_tokens"});
  // Unset: 30 tokens, or fewer where a long input leaves less room.
  ASSERT_TRUE(Generate("a fine film", 0, &result).ok());
  EXPECT_EQ(result.token_ids_size(), 30);
  v1::ClassifyResult long_input;
  ASSERT_TRUE(Classify(Words(40, "word"), v1::INPUT_TRUNCATION_NONE, &long_input).ok());
  const int left = static_cast<int>(kQueryRoom + kAnswerRoom - long_input.input_tokens());
  ASSERT_LT(left, 30);
  ASSERT_TRUE(Generate(Words(40, "word"), 0, &result).ok());
  EXPECT_EQ(result.token_ids_size(), left) << "the room less the input's tokens";
}

}  // namespace
}  // namespace manyshot::testing
