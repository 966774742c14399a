// What a server that is never killed answers for each variant: its content hash and the
// ClassifyResult of every check input, classified together in one request. A killed-and-restarted
// server asked the same request must answer bit-identically (the results are compared as
// serialized protobuf, so every double must match to the bit). Answers to other requests are
// compared within a tolerance: the server's scores depend on how inputs are batched (in the last
// few bits of f32: see Close()).
#pragma once

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "tools/campaigns/variants.h"

namespace manyshot::campaign {

class ReferenceScores {
 public:
  // Registers every variant on `stub` (ids "ref-<index>") and classifies the check inputs.
  static absl::StatusOr<ReferenceScores> Compute(v1::ManyShot::Stub& stub,
                                                 const std::vector<Variant>& variants);

  // The variant whose content hash this is, or nullopt.
  std::optional<int> VariantOfHash(const std::string& hash) const;
  const std::string& Hash(int variant) const { return hashes_[static_cast<size_t>(variant)]; }
  // The reference's encode time of each variant (how long a kill has to land mid-encode).
  const std::vector<double>& EncodeSeconds() const { return encode_seconds_; }

  // True when every result of `response` (for `texts`, in order) is bit-identical to the
  // variant's; otherwise false with the first difference in *diff.
  bool Matches(int variant, const std::vector<std::string>& texts,
               const v1::ClassifyResponse& response, std::string* diff) const;
  // Like Matches, but scores only need to agree to a relative 1e-5 (labels, label indices and
  // token counts exactly): an input batched with different other inputs is computed by different
  // f32 GEMM shapes, which changes the last bits; another version of a task differs far more.
  bool Close(int variant, const std::vector<std::string>& texts,
             const v1::ClassifyResponse& response, std::string* diff) const;

 private:
  bool Compare(int variant, const std::vector<std::string>& texts,
               const v1::ClassifyResponse& response, bool exact, std::string* diff) const;

  std::vector<std::string> hashes_;
  std::vector<double> encode_seconds_;
  std::vector<std::map<std::string, v1::ClassifyResult>> results_;  // [variant][text]
};

// Classify with a deadline.
grpc::Status ClassifyTexts(v1::ManyShot::Stub& stub, const std::string& task_id,
                           const std::vector<std::string>& texts, v1::ClassifyResponse* response);

}  // namespace manyshot::campaign
