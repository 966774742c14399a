#include "tools/campaigns/reference_scores.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "testing/harness/service_client.h"

namespace manyshot::campaign {

grpc::Status ClassifyTexts(v1::ManyShot::Stub& stub, const std::string& task_id,
                           const std::vector<std::string>& texts, v1::ClassifyResponse* response) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  return stub.Classify(&context, testing::ClassifyRequestFor(task_id, texts), response);
}

absl::StatusOr<ReferenceScores> ReferenceScores::Compute(v1::ManyShot::Stub& stub,
                                                         const std::vector<Variant>& variants) {
  ReferenceScores ref;
  const auto& texts = CheckInputs();
  for (size_t i = 0; i < variants.size(); ++i) {
    const std::string id = absl::StrCat("ref-", i);
    auto created = testing::CreateTask(stub, id, variants[i].spec, variants[i].demos,
                                       /*replace=*/false, /*chunk=*/100);
    if (!created.status.ok()) {
      return absl::InternalError(absl::StrCat("reference CreateTask of ", variants[i].name, ": ",
                                              created.status.error_message()));
    }
    ref.hashes_.push_back(created.result.task().content_hash());
    ref.encode_seconds_.push_back(created.result.task().stats().encode_seconds());
    v1::ClassifyResponse response;
    grpc::Status s = ClassifyTexts(stub, id, texts, &response);
    if (!s.ok() || static_cast<size_t>(response.results_size()) != texts.size()) {
      return absl::InternalError(
          absl::StrCat("reference Classify of ", variants[i].name, ": ", s.error_message()));
    }
    std::map<std::string, v1::ClassifyResult> results;
    for (size_t k = 0; k < texts.size(); ++k) {
      results[texts[k]] = response.results(static_cast<int>(k));
    }
    ref.results_.push_back(std::move(results));
  }
  for (size_t i = 0; i < ref.hashes_.size(); ++i) {
    for (size_t j = 0; j < i; ++j) {
      if (ref.hashes_[i] == ref.hashes_[j]) {
        return absl::InternalError("two variants have the same content hash");
      }
    }
  }
  return ref;
}

std::optional<int> ReferenceScores::VariantOfHash(const std::string& hash) const {
  for (size_t i = 0; i < hashes_.size(); ++i) {
    if (hashes_[i] == hash) return static_cast<int>(i);
  }
  return std::nullopt;
}

namespace {

bool Near(double a, double b) { return std::fabs(a - b) <= 1e-5 * (1 + std::fabs(b)); }

bool CloseResult(const v1::ClassifyResult& a, const v1::ClassifyResult& b) {
  if (a.label() != b.label() || a.label_index() != b.label_index() ||
      a.raw_label_index() != b.raw_label_index() || a.input_tokens() != b.input_tokens() ||
      a.scores_size() != b.scores_size()) {
    return false;
  }
  for (int i = 0; i < a.scores_size(); ++i) {
    const v1::LabelScore& x = a.scores(i);
    const v1::LabelScore& y = b.scores(i);
    if (x.label() != y.label() || x.num_tokens() != y.num_tokens() ||
        !Near(x.mean_logprob(), y.mean_logprob()) || !Near(x.sum_logprob(), y.sum_logprob()) ||
        !Near(x.probability(), y.probability()) ||
        !Near(x.calibrated_probability(), y.calibrated_probability())) {
      return false;
    }
  }
  return true;
}

}  // namespace

bool ReferenceScores::Matches(int variant, const std::vector<std::string>& texts,
                              const v1::ClassifyResponse& response, std::string* diff) const {
  return Compare(variant, texts, response, /*exact=*/true, diff);
}

bool ReferenceScores::Close(int variant, const std::vector<std::string>& texts,
                            const v1::ClassifyResponse& response, std::string* diff) const {
  return Compare(variant, texts, response, /*exact=*/false, diff);
}

bool ReferenceScores::Compare(int variant, const std::vector<std::string>& texts,
                              const v1::ClassifyResponse& response, bool exact,
                              std::string* diff) const {
  const auto& expected = results_[static_cast<size_t>(variant)];
  if (static_cast<size_t>(response.results_size()) != texts.size()) {
    *diff = absl::StrCat(response.results_size(), " results for ", texts.size(), " inputs");
    return false;
  }
  for (size_t k = 0; k < texts.size(); ++k) {
    const v1::ClassifyResult& got = response.results(static_cast<int>(k));
    const v1::ClassifyResult& want = expected.at(texts[k]);
    const bool same =
        exact ? got.SerializeAsString() == want.SerializeAsString() : CloseResult(got, want);
    if (!same) {
      *diff = absl::StrCat("input \"", texts[k], "\": got {", got.ShortDebugString(),
                           "}, the never-killed server answered {", want.ShortDebugString(), "}");
      return false;
    }
  }
  return true;
}

}  // namespace manyshot::campaign
