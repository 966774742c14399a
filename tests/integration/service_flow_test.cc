// The whole API against the real server binary: create (idempotent, ALREADY_EXISTS, replace),
// classify, stream classify, score, generate, get / list (paginated) / delete, and a restart on
// the same data directory that answers identically with zero encodes.
#include <signal.h>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

double Scrape(int port, const std::string& name,
              const std::map<std::string, std::string>& labels = {}) {
  auto scrape = ParsePrometheusText(HttpGet(port, "/metrics").body);
  if (!scrape.ok()) return -1;
  const PrometheusSample* s = scrape->Find(name, labels);
  return s ? s->value : -1;
}

TEST(ServiceFlowTest, WholeFlowAndRestartWithZeroEncodes) {
  TempDir dir;
  std::vector<double> first_scores;
  {
    ServerUnderTest server(dir.path() / "data", {});
    ASSERT_TRUE(server.started()) << server.Stderr();
    auto stub = v1::ManyShot::NewStub(server.Channel());

    auto created = CreateTask(*stub, "sst2", Sst2Spec(), Sst2Demonstrations());
    ASSERT_TRUE(created.status.ok()) << created.status.error_message();
    EXPECT_TRUE(created.result.created());
    EXPECT_GT(created.progress_events, 0);
    const v1::Task& task = created.result.task();
    EXPECT_EQ(task.state(), v1::TASK_STATE_READY);
    EXPECT_EQ(task.stats().demonstrations(), 12u);
    EXPECT_GT(task.stats().groups(), 1u);
    EXPECT_EQ(task.stats().group_length(), 64u);
    // 2 * layers(4) * tokens * kv_heads(4) * head_dim(32) * 4 bytes (the default model).
    EXPECT_EQ(task.stats().cache_bytes(), 2ull * 4 * task.stats().context_tokens() * 4 * 32 * 4);

    // Idempotent re-create; different content without replace; with replace.
    auto again = CreateTask(*stub, "sst2", Sst2Spec(), Sst2Demonstrations());
    ASSERT_TRUE(again.status.ok());
    EXPECT_FALSE(again.result.created());
    auto different = CreateTask(*stub, "sst2", Sst2Spec(), Sst2Demonstrations(10));
    EXPECT_EQ(different.status.error_code(), grpc::StatusCode::ALREADY_EXISTS);
    auto other = CreateTask(*stub, "other", Sst2Spec(48), Sst2Demonstrations(10));
    ASSERT_TRUE(other.status.ok()) << other.status.error_message();
    auto replaced = CreateTask(*stub, "other", Sst2Spec(40), Sst2Demonstrations(10), true);
    ASSERT_TRUE(replaced.status.ok());
    EXPECT_TRUE(replaced.result.replaced());

    grpc::ClientContext cc;
    v1::ClassifyResponse classified;
    ASSERT_TRUE(stub->Classify(&cc,
                               ClassifyRequestFor("sst2", {"a delightful film", "a dull mess"}),
                               &classified)
                    .ok());
    ASSERT_EQ(classified.results_size(), 2);
    for (const auto& r : classified.results()) {
      ASSERT_EQ(r.scores_size(), 2);
      EXPECT_NEAR(r.scores(0).probability() + r.scores(1).probability(), 1.0, 1e-9);
      EXPECT_EQ(r.label(), r.scores(static_cast<int>(r.label_index())).label());
      first_scores.push_back(r.scores(0).sum_logprob());
      first_scores.push_back(r.scores(1).sum_logprob());
    }

    // Streaming classify: answers carry the request ids.
    grpc::ClientContext sc;
    auto stream = stub->StreamClassify(&sc);
    for (int i = 0; i < 3; ++i) {
      auto req = ClassifyRequestFor("sst2", {"a delightful film"});
      req.set_request_id("r" + std::to_string(i));
      ASSERT_TRUE(stream->Write(req));
    }
    stream->WritesDone();
    std::set<std::string> ids;
    v1::ClassifyResponse sr;
    while (stream->Read(&sr)) {
      ids.insert(sr.request_id());
      ASSERT_EQ(sr.results_size(), 1);
      EXPECT_NEAR(sr.results(0).scores(0).sum_logprob(), first_scores[0], 1e-5);
    }
    EXPECT_TRUE(stream->Finish().ok());
    EXPECT_EQ(ids, (std::set<std::string>{"r0", "r1", "r2"}));

    grpc::ClientContext scc;
    v1::ScoreRequest score;
    score.set_task_id("sst2");
    auto* item = score.add_items();
    item->mutable_input()->set_text("the cast");
    item->add_candidates(" weak");
    item->add_candidates(" strong and fresh");
    v1::ScoreResponse scored;
    ASSERT_TRUE(stub->Score(&scc, score, &scored).ok());
    ASSERT_EQ(scored.results(0).candidates_size(), 2);
    EXPECT_GT(scored.results(0).candidates(1).num_tokens(), 1u);

    grpc::ClientContext gc;
    v1::GenerateRequest gen;
    gen.set_task_id("sst2");
    gen.mutable_input()->set_text("a delightful film");
    gen.mutable_options()->set_max_new_tokens(4);
    auto reader = stub->Generate(&gc, gen);
    v1::GenerateResponse gr;
    int tokens = 0;
    v1::GenerationResult result;
    while (reader->Read(&gr)) {
      if (gr.has_token()) ++tokens;
      if (gr.has_result()) result = gr.result();
    }
    ASSERT_TRUE(reader->Finish().ok());
    EXPECT_EQ(tokens, result.token_ids_size());
    EXPECT_GT(tokens, 0);

    // List with pagination, get, delete.
    grpc::ClientContext lc;
    v1::ListTasksRequest list;
    list.set_page_size(1);
    v1::ListTasksResponse page;
    ASSERT_TRUE(stub->ListTasks(&lc, list, &page).ok());
    ASSERT_EQ(page.tasks_size(), 1);
    EXPECT_EQ(page.tasks(0).task_id(), "other");
    list.set_page_token(page.next_page_token());
    grpc::ClientContext lc2;
    ASSERT_TRUE(stub->ListTasks(&lc2, list, &page).ok());
    ASSERT_EQ(page.tasks_size(), 1);
    EXPECT_EQ(page.tasks(0).task_id(), "sst2");
    EXPECT_TRUE(page.next_page_token().empty());
    grpc::ClientContext dc;
    v1::DeleteTaskRequest del;
    del.set_task_id("other");
    v1::DeleteTaskResponse deleted;
    ASSERT_TRUE(stub->DeleteTask(&dc, del, &deleted).ok());
    grpc::ClientContext gtc;
    v1::GetTaskRequest get;
    get.set_task_id("other");
    v1::Task got;
    EXPECT_EQ(stub->GetTask(&gtc, get, &got).error_code(), grpc::StatusCode::NOT_FOUND);

    EXPECT_GE(Scrape(server.metrics_port(), "manyshot_requests_total",
                     {{"method", "Classify"}, {"code", "OK"}}),
              1);
    ASSERT_TRUE(server.process().Signal(SIGTERM));
    ASSERT_EQ(server.process().Wait(kExitLimit).value_or(-1), 0) << server.Stderr();
  }
  // Restart on the same data directory: same answers, nothing encoded.
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  grpc::ClientContext cc;
  v1::ClassifyResponse classified;
  ASSERT_TRUE(stub->Classify(&cc, ClassifyRequestFor("sst2", {"a delightful film", "a dull mess"}),
                             &classified)
                  .ok());
  std::vector<double> scores;
  for (const auto& r : classified.results()) {
    scores.push_back(r.scores(0).sum_logprob());
    scores.push_back(r.scores(1).sum_logprob());
  }
  ASSERT_EQ(scores.size(), first_scores.size());
  for (size_t i = 0; i < scores.size(); ++i) EXPECT_EQ(scores[i], first_scores[i]);
  EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_cache_encodes_total"), 0);
  EXPECT_EQ(Scrape(server.metrics_port(), "manyshot_cache_restores_total"), 1);
}

}  // namespace
}  // namespace manyshot::testing
