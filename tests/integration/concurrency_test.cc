// Concurrency against one real server: 32 bidirectional StreamClassify streams soak for
// MANYSHOT_SOAK_SECONDS (default 30) seconds; every answer must equal the scores the same input
// got from a sequential unary Classify before the soak (label exactly, scores within kTolerance);
// the scheduler must have batched across streams; /metrics must count exactly the answers received.
// Also: tiny deadlines.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <mutex>
#include <thread>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/prometheus_text.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

constexpr int kStreams = 32;
constexpr int kDefaultSoakSeconds = 30;
constexpr char kTask[] = "sst2";
// Batched answers are not bit-identical to unbatched ones: the engine runs a batch's queries as one
// f32 forward pass, and the matrix shapes (hence the summation order of the kernels) depend on the
// batch. Measured differences are ~2e-6 in log-probabilities; the label and token counts must be
// exact, every score within this tolerance.
constexpr double kTolerance = 1e-5;
constexpr size_t kIndexFields = 2;  // label_index, input_tokens lead Numbers()

int SoakSeconds() {
  const char* env = std::getenv("MANYSHOT_SOAK_SECONDS");
  if (env == nullptr || *env == '\0') return kDefaultSoakSeconds;
  const int seconds = std::atoi(env);
  return seconds > 0 ? seconds : kDefaultSoakSeconds;
}

const std::vector<std::string>& Inputs() {
  static const std::vector<std::string> inputs = {
      "a delightful film",       "a dull mess",
      "the acting is superb",    "i wanted my money back",
      "funny , warm and wise",   "a tedious , overlong bore",
      "one of the year 's best", "nothing happens for two hours",
      "a triumph of style",      "flat characters and a silly plot",
      "beautifully shot",        "an insult to the audience",
  };
  return inputs;
}

// Every number of one input's answer, in a fixed order.
std::vector<double> Numbers(const v1::ClassifyResult& r) {
  std::vector<double> out = {static_cast<double>(r.label_index()),
                             static_cast<double>(r.input_tokens())};
  for (const auto& s : r.scores()) {
    out.push_back(s.mean_logprob());
    out.push_back(s.sum_logprob());
    out.push_back(s.probability());
    out.push_back(static_cast<double>(s.num_tokens()));
  }
  return out;
}

double ScrapeValue(const PrometheusScrape& scrape, const std::string& name,
                   const std::map<std::string, std::string>& labels = {}) {
  const PrometheusSample* s = scrape.Find(name, labels);
  return s ? s->value : -1;
}

TEST(ConcurrencyTest, StreamClassifySoakMatchesSequentialScores) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto created = CreateTask(*stub, kTask, Sst2Spec(), Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();

  // The reference: each input alone, sequentially.
  std::map<std::string, std::vector<double>> expected;
  for (const std::string& text : Inputs()) {
    grpc::ClientContext context;
    v1::ClassifyResponse response;
    grpc::Status status = stub->Classify(&context, ClassifyRequestFor(kTask, {text}), &response);
    ASSERT_TRUE(status.ok()) << status.error_message();
    ASSERT_EQ(response.results_size(), 1);
    expected[text] = Numbers(response.results(0));
  }

  const int soak_seconds = SoakSeconds();
  const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(soak_seconds);
  std::atomic<int64_t> answers{0};
  std::atomic<int64_t> mismatches{0};
  std::mutex failures_mutex;
  double max_diff = 0;  // guarded by failures_mutex
  std::vector<std::string> failures;
  auto fail = [&](std::string what) {
    std::lock_guard<std::mutex> lock(failures_mutex);
    if (failures.size() < 20) failures.push_back(std::move(what));
  };

  std::vector<std::thread> threads;
  for (int s = 0; s < kStreams; ++s) {
    threads.emplace_back([&, s] {
      grpc::ClientContext context;
      context.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(soak_seconds + 120));
      auto stream = stub->StreamClassify(&context);
      // Two requests in flight per stream: one answer read, one more request written.
      std::map<std::string, std::vector<std::string>> outstanding;
      int64_t n = 0;
      auto send = [&] {
        std::vector<std::string> texts;
        const size_t count = 1 + static_cast<size_t>((s + n) % 3);
        for (size_t k = 0; k < count; ++k) {
          texts.push_back(Inputs()[static_cast<size_t>(s * 7 + n * 5 + static_cast<int64_t>(k)) %
                                   Inputs().size()]);
        }
        auto request = ClassifyRequestFor(kTask, texts);
        request.set_request_id("s" + std::to_string(s) + "-" + std::to_string(n++));
        outstanding[request.request_id()] = texts;
        return stream->Write(request);
      };
      bool open = send() && send();
      v1::ClassifyResponse response;
      while (open && !outstanding.empty() && stream->Read(&response)) {
        auto it = outstanding.find(response.request_id());
        if (it == outstanding.end()) {
          fail("stream " + std::to_string(s) + ": unknown request_id " + response.request_id());
          break;
        }
        if (response.error().code() != 0) {
          fail(response.request_id() + ": error " + std::to_string(response.error().code()) + " " +
               response.error().message());
        } else if (response.results_size() != static_cast<int>(it->second.size())) {
          fail(response.request_id() + ": " + std::to_string(response.results_size()) + " results");
        } else {
          answers.fetch_add(1);
          for (int i = 0; i < response.results_size(); ++i) {
            const std::vector<double> got = Numbers(response.results(i));
            const std::vector<double>& want = expected[it->second[static_cast<size_t>(i)]];
            double diff = got.size() == want.size() ? 0 : 1;
            for (size_t k = 0; k < got.size() && k < want.size(); ++k) {
              diff = std::max(diff, std::abs(got[k] - want[k]));
            }
            {
              std::lock_guard<std::mutex> lock(failures_mutex);
              max_diff = std::max(max_diff, diff);
            }
            // Label index, token counts: exact (kIndexFields). Scores: within kTolerance.
            bool same = got.size() == want.size() && diff <= kTolerance;
            for (size_t k = 0; same && k < kIndexFields; ++k) same = got[k] == want[k];
            if (!same) {
              mismatches.fetch_add(1);
              std::string detail;
              for (size_t k = 0; k < got.size() && k < want.size(); ++k) {
                if (got[k] != want[k]) {
                  detail += " [" + std::to_string(k) + "] " + std::to_string(got[k] - want[k]);
                }
              }
              fail(response.request_id() + " input " + it->second[static_cast<size_t>(i)] +
                   " differs from the sequential answer:" + detail);
            }
          }
        }
        outstanding.erase(it);
        if (std::chrono::steady_clock::now() < end) open = send();
      }
      stream->WritesDone();
      while (stream->Read(&response)) {
        fail("stream " + std::to_string(s) + ": answer after the last request");
      }
      grpc::Status status = stream->Finish();
      if (!status.ok()) {
        fail("stream " + std::to_string(s) + " finished with " +
             std::to_string(status.error_code()) + " " + status.error_message());
      }
      if (!outstanding.empty()) {
        fail("stream " + std::to_string(s) + ": " + std::to_string(outstanding.size()) +
             " requests unanswered");
      }
    });
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto& t : threads) t.join();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("soak: %d streams, %d s, %lld answers in %.1f s (%.1f answers/s)\n", kStreams,
              soak_seconds, static_cast<long long>(answers.load()), elapsed,
              static_cast<double>(answers.load()) / elapsed);
  std::printf("largest difference from the sequential scores: %.3g\n", max_diff);
  for (const std::string& f : failures) ADD_FAILURE() << f;
  EXPECT_EQ(mismatches.load(), 0);
  EXPECT_GT(answers.load(), kStreams);
  ASSERT_FALSE(server.process().Wait(std::chrono::milliseconds(0)).has_value()) << server.Stderr();

  auto scrape = ParsePrometheusText(HttpGet(server.metrics_port(), "/metrics").body);
  ASSERT_TRUE(scrape.ok()) << scrape.status();
  const double batch_sum = ScrapeValue(*scrape, "manyshot_batch_inputs_sum");
  const double batch_count = ScrapeValue(*scrape, "manyshot_batch_inputs_count");
  std::printf("batches: %.0f inputs in %.0f engine batches (%.2f per batch)\n", batch_sum,
              batch_count, batch_sum / batch_count);
  EXPECT_GT(batch_count, 0);
  // Batches hold more inputs than there are batches. Requests carry 1-3 inputs, so that alone does
  // not prove batching across streams: some batch must also hold more than 4 inputs.
  EXPECT_GT(batch_sum, batch_count);
  const double up_to_2 = ScrapeValue(*scrape, "manyshot_batch_inputs_bucket", {{"le", "2"}});
  const double up_to_4 = ScrapeValue(*scrape, "manyshot_batch_inputs_bucket", {{"le", "4"}});
  EXPECT_GT(batch_count, up_to_4) << "no batch held more than 4 inputs: " << up_to_2 << " <= 2, "
                                  << up_to_4 << " <= 4";
  EXPECT_EQ(ScrapeValue(*scrape, "manyshot_stream_messages_total",
                        {{"method", "StreamClassify"}, {"code", "OK"}}),
            static_cast<double>(answers.load()));
  EXPECT_EQ(ScrapeValue(*scrape, "manyshot_requests_total",
                        {{"method", "StreamClassify"}, {"code", "OK"}}),
            kStreams);
}

// A 1 ms deadline: DEADLINE_EXCEEDED (or OK when it was fast), never a crash; the server then
// answers normally.
TEST(ConcurrencyTest, TinyDeadlinesNeverHurtTheServer) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  auto created = CreateTask(*stub, kTask, Sst2Spec(), Sst2Demonstrations());
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();

  int exceeded = 0;
  for (int i = 0; i < 50; ++i) {
    grpc::ClientContext context;
    context.set_deadline(std::chrono::system_clock::now() + std::chrono::milliseconds(1));
    v1::ClassifyResponse response;
    std::vector<std::string> texts(1 + i % 8, Inputs()[static_cast<size_t>(i) % Inputs().size()]);
    grpc::Status status = stub->Classify(&context, ClassifyRequestFor(kTask, texts), &response);
    if (status.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) {
      ++exceeded;
    } else {
      EXPECT_TRUE(status.ok()) << status.error_code() << " " << status.error_message();
    }
  }
  std::printf("tiny deadlines: %d of 50 exceeded\n", exceeded);
  // Cancelled streams too: a stream abandoned with requests in flight.
  for (int i = 0; i < 5; ++i) {
    grpc::ClientContext context;
    auto stream = stub->StreamClassify(&context);
    for (int k = 0; k < 4; ++k) stream->Write(ClassifyRequestFor(kTask, {Inputs()[0]}));
    context.TryCancel();
    stream->Finish();
  }
  grpc::ClientContext context;
  v1::ClassifyResponse response;
  grpc::Status status =
      stub->Classify(&context, ClassifyRequestFor(kTask, {"a delightful film"}), &response);
  ASSERT_TRUE(status.ok()) << status.error_message();
  EXPECT_EQ(response.results_size(), 1);
  EXPECT_FALSE(server.process().Wait(std::chrono::milliseconds(0)).has_value()) << server.Stderr();
}

}  // namespace
}  // namespace manyshot::testing
