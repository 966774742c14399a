#include "tools/campaigns/serving_load.h"

#include <algorithm>
#include <map>

#include "absl/strings/str_cat.h"
#include "testing/harness/service_client.h"

namespace manyshot::campaign {
namespace {

constexpr int kStreamRequests = 3;  // pipelined per StreamClassify call

// A random non-empty subset of the check inputs in random order.
std::vector<std::string> RandomTexts(std::mt19937_64& rng) {
  std::vector<std::string> texts = CheckInputs();
  std::shuffle(texts.begin(), texts.end(), rng);
  texts.resize(1 + rng() % texts.size());
  return texts;
}

std::chrono::system_clock::time_point Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(60);
}

}  // namespace

ServingLoad::ServingLoad(std::shared_ptr<grpc::Channel> channel, const ExpectedState& state,
                         const ReferenceScores& reference, Findings& findings,
                         const std::atomic<bool>& killed)
    : channel_(std::move(channel)),
      state_(state),
      reference_(reference),
      findings_(findings),
      killed_(killed) {}

ServingLoad::~ServingLoad() { Stop(); }

void ServingLoad::Start(int clients, uint64_t seed) {
  for (int c = 0; c < clients; ++c) {
    threads_.emplace_back([this, seed, c] { Client(seed * 1000 + static_cast<uint64_t>(c)); });
  }
}

void ServingLoad::StartNoisy(std::shared_ptr<grpc::Channel> channel, const Variant& variant,
                             int variant_index) {
  threads_.emplace_back([this, channel = std::move(channel), &variant, variant_index] {
    Noisy(channel, variant, variant_index);
  });
}

void ServingLoad::Noisy(std::shared_ptr<grpc::Channel> channel, const Variant& variant,
                        int variant_index) {
  auto stub = v1::ManyShot::NewStub(channel);
  auto created = testing::CreateTask(*stub, kNoisyTask, variant.spec, variant.demos,
                                     /*replace=*/true, 100);
  if (!created.status.ok()) {
    if (!killed_.load()) {
      findings_.Add("serve_error",
                    "the noisy tenant's CreateTask failed: " + created.status.error_message());
    }
    return;
  }
  // A stream that sends and never reads: its answers pile up until flow control holds it.
  grpc::ClientContext stalled_context;
  stalled_context.set_deadline(Deadline());
  auto stalled = stub->StreamClassify(&stalled_context);
  std::vector<std::string> flood;  // every check input 32 times: 128 inputs in one request
  for (int copy = 0; copy < 32; ++copy) {
    flood.insert(flood.end(), CheckInputs().begin(), CheckInputs().end());
  }
  int unread = 0;
  while (!stop_.load() && !killed_.load()) {
    // Fewer than --max_stream_inflight, so the writes themselves never block this client.
    if (unread < 40 && stalled->Write(testing::ClassifyRequestFor(kNoisyTask, CheckInputs()))) {
      ++unread;
    }
    grpc::ClientContext context;
    context.set_deadline(Deadline());
    v1::ClassifyResponse response;
    grpc::Status s =
        stub->Classify(&context, testing::ClassifyRequestFor(kNoisyTask, flood), &response);
    ++noisy_requests_;
    CheckNoisyAnswer(variant_index, flood, s, response);
  }
  stalled_context.TryCancel();
  stalled->Finish().IgnoreError();
}

void ServingLoad::CheckNoisyAnswer(int variant_index, const std::vector<std::string>& texts,
                                   const grpc::Status& status,
                                   const v1::ClassifyResponse& response) {
  if (!status.ok()) {
    if (killed_.load() || status.error_code() == grpc::StatusCode::RESOURCE_EXHAUSTED) return;
    findings_.Add("serve_error", absl::StrCat("the noisy tenant's Classify failed with code ",
                                              status.error_code(), ": ", status.error_message()));
    return;
  }
  std::string diff;
  if (reference_.Matches(variant_index, texts, response, &diff)) {
    ++answers_identical_;
  } else if (reference_.Close(variant_index, texts, response, &diff)) {
    ++answers_close_;
  } else {
    findings_.Add("serve_mismatch", "the noisy tenant's task: " + diff);
  }
}

void ServingLoad::Stop() {
  stop_ = true;
  for (auto& t : threads_) t.join();
  threads_.clear();
}

void ServingLoad::Client(uint64_t seed) {
  std::mt19937_64 rng(seed);
  // After the kill each call fails at once; one more round is enough to see that.
  while (!stop_.load() && !killed_.load()) {
    if (rng() % 2 == 0) {
      Unary(rng);
    } else {
      Stream(rng);
    }
  }
}

void ServingLoad::Unary(std::mt19937_64& rng) {
  const std::string& id = state_.ids()[rng() % state_.ids().size()];
  const std::vector<std::string> texts = RandomTexts(rng);
  const std::set<Version> before = state_.Acceptable(id);
  auto stub = v1::ManyShot::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  v1::ClassifyResponse response;
  ++in_flight_;
  grpc::Status s = stub->Classify(&context, testing::ClassifyRequestFor(id, texts), &response);
  --in_flight_;
  CheckAnswer(id, texts, before, s, &response);
}

void ServingLoad::Stream(std::mt19937_64& rng) {
  struct Sent {
    std::string id;
    std::vector<std::string> texts;
    std::set<Version> before;
  };
  std::map<std::string, Sent> sent;  // by request_id
  auto stub = v1::ManyShot::NewStub(channel_);
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  auto stream = stub->StreamClassify(&context);
  in_flight_ += kStreamRequests;
  for (int r = 0; r < kStreamRequests; ++r) {
    Sent s{state_.ids()[rng() % state_.ids().size()], RandomTexts(rng), {}};
    s.before = state_.Acceptable(s.id);
    v1::ClassifyRequest request = testing::ClassifyRequestFor(s.id, s.texts);
    request.set_request_id(absl::StrCat("r", r));
    sent[request.request_id()] = s;
    if (!stream->Write(request)) break;
  }
  stream->WritesDone();
  v1::ClassifyResponse response;
  while (stream->Read(&response)) {
    auto it = sent.find(response.request_id());
    if (it == sent.end()) {
      findings_.Add("serve_error",
                    "StreamClassify answered unknown request_id \"" + response.request_id() + "\"");
      continue;
    }
    --in_flight_;
    const grpc::Status in_band =
        response.has_error() && response.error().code() != 0
            ? grpc::Status(static_cast<grpc::StatusCode>(response.error().code()),
                           response.error().message())
            : grpc::Status::OK;
    CheckAnswer(it->second.id, it->second.texts, it->second.before, in_band, &response);
    sent.erase(it);
  }
  grpc::Status status = stream->Finish();
  in_flight_ -= static_cast<int>(sent.size());
  // Requests never answered: the call's status is their answer.
  if (!sent.empty()) {
    const Sent& first = sent.begin()->second;
    CheckAnswer(first.id, first.texts, first.before,
                status.ok() ? grpc::Status(grpc::StatusCode::INTERNAL,
                                           "StreamClassify ended OK with requests unanswered")
                            : status,
                nullptr);
  }
}

void ServingLoad::CheckAnswer(const std::string& id, const std::vector<std::string>& texts,
                              const std::set<Version>& before, const grpc::Status& status,
                              const v1::ClassifyResponse* response) {
  std::set<Version> acceptable = before;
  for (Version v : state_.Acceptable(id)) acceptable.insert(v);
  if (!status.ok()) {
    if (killed_.load()) return;  // the server is gone: any failure is expected
    const bool may_be_absent = acceptable.count(std::nullopt) > 0;
    if (may_be_absent && (status.error_code() == grpc::StatusCode::NOT_FOUND ||
                          status.error_code() == grpc::StatusCode::FAILED_PRECONDITION)) {
      return;
    }
    findings_.Add("serve_error", absl::StrCat("Classify of ", id, " failed with code ",
                                              status.error_code(), ": ", status.error_message()));
    return;
  }
  // Bit-identical when the server batched it as the reference did; else within the tolerance.
  std::string first_diff;
  for (bool exact : {true, false}) {
    for (Version v : acceptable) {
      if (!v) continue;
      std::string diff;
      const bool same = exact ? reference_.Matches(*v, texts, *response, &diff)
                              : reference_.Close(*v, texts, *response, &diff);
      if (same) {
        ++(exact ? answers_identical_ : answers_close_);
        return;
      }
      if (first_diff.empty()) first_diff = absl::StrCat("variant ", *v, ": ", diff);
    }
  }
  findings_.Add("serve_mismatch",
                absl::StrCat(id, ": an answer matches no version it could have had; ",
                             first_diff.empty() ? "it should not exist" : first_diff));
}

}  // namespace manyshot::campaign
