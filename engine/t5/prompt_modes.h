// Many-shot prompting on T5 as in "Scaling In-Context Demonstrations with Structured Attention"
// (SAICL; ../shared/papers/004_e0269eeed24e0d93.txt): k demonstration segments and one test
// segment, each at most S tokens, encoded in one of these ways and scored or decoded by the
// decoder:
//
//   CONVENTIONAL  the segments concatenated into one input, full attention (T5 as it is)
//   SAICL         one input, SAICL's structured attention (Appendix B's pseudo-code)
//   FID           one prompt per demonstration (the demonstration, then the test input), each
//                 encoded with full attention; the decoder reads all prompts' states at once
//   ENSEMBLE      the same prompts (or G groups of demonstrations, §5.3), the decoder run per
//                 prompt (all prompts' sequences in one decoder pass) and each candidate's
//                 log-probabilities averaged over the prompts
//   GROUP_FID     G groups of demonstrations, each group + the test input encoded (full attention
//                 or SAICL), all groups' states read by the decoder at once (Appendix D.2)
//
// Segments: a demonstration or test input longer than S keeps its last S tokens (as the
// structured-prompting groups truncate long demonstrations, engine/prompting/groups.h) under
// LongDemonstrationPolicy::kTruncate and is refused under kReject. The paper pads every segment
// to S and masks the padding; padding that is masked for every query and every key changes
// nothing, so segments here keep their own lengths and nothing is padded: the in-segment
// position bias is that of positions 0 .. length-1 either way.
//
// What does not depend on the query (T5DemonstrationSet, kept per task): each demonstration's
// segment and the first encoder layer's q|k|v of its tokens. From the first layer's attention
// on, a demonstration's states depend on the test input (it attends to the test segment in
// SAICL, to the test input in its FiD prompt), so the encoder runs per query, all demonstrations
// of all prompts in one batch. Attention cost is linear in k for SAICL, FID and single-shot
// ENSEMBLE, and for GROUP_FID / grouped ENSEMBLE with SAICL groups; with full-attention groups it
// is k^2 / G (each group quadratic in its size), as CONVENTIONAL is k^2.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/t5/t5_model.h"
#include "engine/t5/t5_scoring.h"
#include "engine/task/generation_params.h"
#include "engine/task/task_options.h"

namespace manyshot {

// The paper's cap on S (Appendix C: min(256, the longest sample of the task)).
inline constexpr int64_t kMaxT5SegmentLength = 256;

struct T5SegmentOptions {
  // S. 0: min(kMaxT5SegmentLength, the longest demonstration).
  int64_t segment_length = 0;
  LongDemonstrationPolicy long_demonstrations = LongDemonstrationPolicy::kTruncate;
};

// A task's demonstrations as these modes use them; nothing here depends on a test input.
struct T5DemonstrationSet {
  int64_t segment_length = 0;  // S
  LongDemonstrationPolicy long_demonstrations = LongDemonstrationPolicy::kTruncate;
  std::vector<std::vector<int32_t>> segments;  // each demonstration, at most S tokens
  int64_t truncated_demonstrations = 0;
  // The first encoder layer's q|k|v of all segments back to back (the encoder batch's first rows
  // in every mode): 3 * inner values per demonstration token in the compute dtype, kept so that a
  // query skips those rows' first-layer q, k and v projections (3 of the encoder's 4 * num_layers
  // attention projections).
  T5FirstLayerQkv first_layer;

  int64_t demonstrations() const { return static_cast<int64_t>(segments.size()); }
};

// Segments the demonstrations (token ids, in the order the prompts should use) and computes
// their first-layer q|k|v. INVALID_ARGUMENT for no demonstrations, an empty one, an id outside
// the vocabulary, a negative S, or (kReject) one longer than S, naming its index and length.
absl::StatusOr<T5DemonstrationSet> PrepareT5Demonstrations(
    const T5Model& model, const std::vector<std::vector<int32_t>>& demonstrations,
    const T5SegmentOptions& options);

enum class T5PromptMode : uint8_t {
  kConventional = 0,
  kSaicl = 1,
  kFid = 2,
  kEnsemble = 3,
  kGroupFid = 4,
};

// The attention inside one prompt of several demonstrations (GROUP_FID, grouped ENSEMBLE).
enum class T5PromptAttention : uint8_t { kFull = 0, kSaicl = 1 };

struct T5ModeOptions {
  T5PromptMode mode = T5PromptMode::kSaicl;
  // G. GROUP_FID: required, 1 .. k. ENSEMBLE: 0 means one prompt per demonstration (the paper's
  // single-shot ensemble), G > 0 groups of demonstrations (§5.3). Other modes: must be 0.
  int64_t groups = 0;
  // GROUP_FID and grouped ENSEMBLE: how each group's prompt is encoded.
  T5PromptAttention group_attention = T5PromptAttention::kSaicl;
};

// "CONVENTIONAL", "SAICL", "FID", "ENSEMBLE", "GROUP_FID" (messages, logs).
const char* T5PromptModeName(T5PromptMode mode);

// How a mode lays k demonstrations out in prompts; it depends on no test input (GetTask reports
// it as the task's groups).
struct T5PromptLayout {
  // Per prompt, the indices of its demonstrations: CONVENTIONAL and SAICL one prompt of all, FID
  // one per demonstration, ENSEMBLE G groups (0: one per demonstration), GROUP_FID G groups; groups
  // are consecutive, sizes differing by at most one, the larger first.
  std::vector<std::vector<int64_t>> prompt_demonstrations;
  T5PromptAttention attention = T5PromptAttention::kFull;  // inside each prompt
};

// INVALID_ARGUMENT for groups that do not fit the mode or exceed k, or an unknown mode.
absl::StatusOr<T5PromptLayout> LayOutT5Prompts(const T5ModeOptions& options, int64_t k);

// The encoder side of one query.
struct T5PromptEncoding {
  T5PromptMode mode = T5PromptMode::kSaicl;
  // One input per prompt, in prompt order, each its demonstrations' segments in order and then
  // the test segment; CONVENTIONAL and SAICL have one prompt. `decoder` is what the decoder reads:
  // `prompts` for ENSEMBLE, otherwise one input spanning every prompt's states (the same tensors).
  T5EncoderOutput prompts;
  T5EncoderOutput decoder;
  // Per prompt, the indices of its demonstrations (groups are consecutive, sizes differing by at
  // most one, the larger first).
  std::vector<std::vector<int64_t>> prompt_demonstrations;
  int64_t test_tokens = 0;  // the test segment's length
  bool test_truncated = false;
  int64_t attention_rounds = 0;  // AttendBiased calls per encoder layer
};

// Encodes the test input (token ids) with the task's demonstrations in options.mode: every prompt
// in one encoder batch, whose first rows are the demonstrations' segments (their first-layer
// q|k|v come from `demonstrations`). INVALID_ARGUMENT for an empty test input, an id outside the
// vocabulary, groups that do not fit the mode or exceed k, or (kReject) a test input longer than
// S.
absl::StatusOr<T5PromptEncoding> EncodeT5Prompts(const T5Model& model,
                                                 const T5DemonstrationSet& demonstrations,
                                                 const T5ModeOptions& options,
                                                 absl::Span<const int32_t> test_input);

// Each candidate's summed and mean log-probability (ScoreT5Candidates) given the encoding; for
// ENSEMBLE both are the averages over the prompts.
absl::StatusOr<std::vector<T5CandidateScore>> ScoreT5Prompts(
    const T5Model& model, const T5PromptEncoding& encoding,
    absl::Span<const std::vector<int32_t>> candidates);

// Greedy generation from the decoder reading `encoding.decoder`. ENSEMBLE has no single decoder
// input: INVALID_ARGUMENT naming the mode.
absl::StatusOr<T5Generation> GenerateT5Prompts(const T5Model& model,
                                               const T5PromptEncoding& encoding,
                                               int64_t max_new_tokens);

// GenerateT5 (greedy or beam search, length penalty, eos, stop strings) from the decoder reading
// `encoding.decoder`; the same INVALID_ARGUMENT for ENSEMBLE.
absl::StatusOr<GenerationOutput> GenerateT5Prompts(const T5Model& model,
                                                   const T5PromptEncoding& encoding,
                                                   const GenerationParams& params);

}  // namespace manyshot
