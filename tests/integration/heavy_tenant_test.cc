// One heavy T5 query cannot hold the engine: a SAICL task re-encodes every demonstration for each
// input, so a many-input Classify of a large task is answered over several engine turns
// (--engine_turn_tokens) and another task's one-input Classify is answered between them, instead
// of after the whole request. Ordering is observed, not timed: the light request starts once the
// heavy one is known to be running, and must finish before it. A task whose per-input encoder
// work exceeds --max_query_context_tokens is refused at creation, naming the product and the flag.
#include <atomic>
#include <chrono>
#include <map>
#include <thread>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"
#include "testing/harness/subprocess.h"
#include "tests/integration/tiny_t5_model.h"

namespace manyshot::testing {
namespace {

namespace fs = std::filesystem;

v1::TaskSpec SaiclSpec() {
  v1::TaskSpec spec;
  spec.set_input_template("{text}:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_mode(v1::MODE_SAICL);
  return spec;
}

// The count of the engine's batches so far (manyshot_batch_inputs histogram).
double BatchesRun(int metrics_port) {
  auto scrape = ParsePrometheusText(HttpGet(metrics_port, "/metrics").body);
  if (!scrape.ok()) return -1;
  const PrometheusSample* s = scrape->Find("manyshot_batch_inputs_count", {});
  return s ? s->value : -1;
}

grpc::Status ClassifyTexts(v1::ManyShot::Stub& stub, const std::string& task_id,
                           const std::vector<std::string>& texts, v1::ClassifyResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  return stub.Classify(&context, ClassifyRequestFor(task_id, texts), response);
}

class HeavyTenantTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_NO_FATAL_FAILURE(MakeTinyT5(dir_.path() / "t5")); }
  std::vector<std::string> Flags(std::vector<std::string> more) const {
    more.push_back("--model_dir=" + (dir_.path() / "t5").string());
    more.push_back("--threads=1");
    return more;
  }
  TempDir dir_;
};

TEST_F(HeavyTenantTest, AHeavyT5RequestIsAnsweredInTurnsAndALightOneGoesBetween) {
  // One input per turn for any T5 task here.
  ServerUnderTest server(dir_.path() / "data", Flags({"--engine_turn_tokens=1"}));
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto heavy = CreateTask(*stub, "heavy", SaiclSpec(), Sst2Demonstrations(600), false, 200);
  ASSERT_TRUE(heavy.status.ok()) << heavy.status.error_message();
  auto light = CreateTask(*stub, "light", SaiclSpec(), Sst2Demonstrations(4));
  ASSERT_TRUE(light.status.ok()) << light.status.error_message();
  // The same inputs alone give the reference scores (answers do not depend on the slicing).
  const std::vector<std::string> texts(24, "good movie");
  v1::ClassifyResponse alone;
  ASSERT_TRUE(ClassifyTexts(*stub, "heavy", {"good movie"}, &alone).ok());

  const double batches_before = BatchesRun(server.metrics_port());
  std::atomic<bool> heavy_done{false};
  v1::ClassifyResponse heavy_response;
  grpc::Status heavy_status;
  std::thread heavy_call([&] {
    heavy_status = ClassifyTexts(*stub, "heavy", texts, &heavy_response);
    heavy_done = true;
  });
  // Running: the engine has started the heavy request's first turn.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(2);
  while (BatchesRun(server.metrics_port()) <= batches_before && !heavy_done &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  ASSERT_FALSE(heavy_done) << "the heavy request finished before it was seen running";
  v1::ClassifyResponse light_response;
  ASSERT_TRUE(ClassifyTexts(*stub, "light", {"bad movie"}, &light_response).ok());
  const bool heavy_finished_first = heavy_done;
  heavy_call.join();
  ASSERT_TRUE(heavy_status.ok()) << heavy_status.error_message();
  EXPECT_FALSE(heavy_finished_first)
      << "the light request waited for the whole heavy request (no time-slicing)";
  ASSERT_EQ(heavy_response.results_size(), 24);
  for (const auto& result : heavy_response.results()) {
    ASSERT_EQ(result.scores_size(), alone.results(0).scores_size());
    for (int i = 0; i < result.scores_size(); ++i) {
      EXPECT_EQ(result.scores(i).mean_logprob(), alone.results(0).scores(i).mean_logprob());
    }
  }
  // 24 inputs at one per turn: at least 24 batches besides the light one.
  EXPECT_GE(BatchesRun(server.metrics_port()) - batches_before, 25);
}

TEST_F(HeavyTenantTest, AT5TaskAboveTheQueryContextBoundIsRefusedNamingTheFlag) {
  ServerUnderTest server(dir_.path() / "data", Flags({"--max_query_context_tokens=300"}));
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext context;
  v1::ServerInfo info;
  ASSERT_TRUE(stub->GetServerInfo(&context, v1::GetServerInfoRequest(), &info).ok());
  EXPECT_EQ(info.limits().max_query_context_tokens(), 300u);
  auto refused = CreateTask(*stub, "big", SaiclSpec(), Sst2Demonstrations(40));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(refused.status.error_message().find("--max_query_context_tokens 300"),
            std::string::npos)
      << refused.status.error_message();
  EXPECT_NE(refused.status.error_message().find("demonstrations"), std::string::npos);
  auto small = CreateTask(*stub, "small", SaiclSpec(), Sst2Demonstrations(2));
  EXPECT_TRUE(small.status.ok()) << small.status.error_message();
  v1::Task task;
  grpc::ClientContext gc;
  v1::GetTaskRequest get;
  get.set_task_id("big");
  EXPECT_EQ(stub->GetTask(&gc, get, &task).error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace manyshot::testing
