// Clients that keep the killed server serving while the campaign mutates tasks and kills it:
// unary Classify and pipelined StreamClassify on random task ids with random subsets of the check
// inputs. Every answer is checked: it must be the reference answer of a version the task could
// have had while the request was in flight (one version for the whole response, never a mix):
// bit-identical where the server happened to batch it like the reference, else within
// ReferenceScores::Close's tolerance. An error must be one the task's state allows (NOT_FOUND or
// FAILED_PRECONDITION only while the task may be absent or encoding; anything once the server has
// been killed).
#pragma once

#include <atomic>
#include <memory>
#include <random>
#include <thread>
#include <vector>

#include "grpcpp/channel.h"
#include "tools/campaigns/expected_state.h"
#include "tools/campaigns/findings.h"
#include "tools/campaigns/reference_scores.h"
#include "tools/campaigns/variants.h"

namespace manyshot::campaign {

class ServingLoad {
 public:
  // `killed` turns every later failure into an expected one.
  ServingLoad(std::shared_ptr<grpc::Channel> channel, const ExpectedState& state,
              const ReferenceScores& reference, Findings& findings,
              const std::atomic<bool>& killed);
  ~ServingLoad();

  void Start(int clients, uint64_t seed);
  // Adds a noisy tenant on `channel` (another tenant's token): it registers its own task
  // `kNoisyTask` with `variant` (replacing it), then sends Classify requests of 128 inputs back to
  // back (each answer checked against the reference for `variant`; RESOURCE_EXHAUSTED from a
  // full queue is allowed to it alone) and keeps a StreamClassify stream that writes without
  // reading, so the campaign's clients are served beside a flood from another tenant.
  static constexpr char kNoisyTask[] = "noisy-flood";
  void StartNoisy(std::shared_ptr<grpc::Channel> channel, const Variant& variant,
                  int variant_index);
  int noisy_requests() const { return noisy_requests_.load(); }
  void Stop();  // joins the clients

  // Answers bit-identical to the reference's, and answers within its tolerance (the server batched
  // them differently: ReferenceScores::Close).
  int answers_identical() const { return answers_identical_.load(); }
  int answers_close() const { return answers_close_.load(); }
  int requests_in_flight() const { return in_flight_.load(); }

 private:
  void Client(uint64_t seed);
  void Unary(std::mt19937_64& rng);
  void Stream(std::mt19937_64& rng);
  void Noisy(std::shared_ptr<grpc::Channel> channel, const Variant& variant, int variant_index);
  // Checks one of the noisy tenant's answers.
  void CheckNoisyAnswer(int variant_index, const std::vector<std::string>& texts,
                        const grpc::Status& status, const v1::ClassifyResponse& response);
  // Checks one answer (or in-band error) to a request for `id` with `texts`; `before` is the set of
  // acceptable versions when the request was sent.
  void CheckAnswer(const std::string& id, const std::vector<std::string>& texts,
                   const std::set<Version>& before, const grpc::Status& status,
                   const v1::ClassifyResponse* response);

  std::shared_ptr<grpc::Channel> channel_;
  const ExpectedState& state_;
  const ReferenceScores& reference_;
  Findings& findings_;
  const std::atomic<bool>& killed_;
  std::atomic<bool> stop_{false};
  std::atomic<int> answers_identical_{0};
  std::atomic<int> answers_close_{0};
  std::atomic<int> in_flight_{0};
  std::atomic<int> noisy_requests_{0};
  std::vector<std::thread> threads_;
};

}  // namespace manyshot::campaign
