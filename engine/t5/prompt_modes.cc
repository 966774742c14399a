#include "engine/t5/prompt_modes.h"

#include <algorithm>
#include <memory>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/t5/block_attention.h"
#include "engine/t5/t5_generation.h"

namespace manyshot {
namespace {

absl::Status CheckIds(absl::Span<const int32_t> ids, int64_t vocab, const std::string& what) {
  if (ids.empty()) return absl::InvalidArgumentError(absl::StrCat(what, " is empty"));
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      return absl::InvalidArgumentError(absl::StrCat(
          what, " token ", i, ": id ", ids[i], " is outside the vocabulary [0, ", vocab, ")"));
    }
  }
  return absl::OkStatus();
}

// `ids` cut to its last `length` tokens (the structured-prompting groups' truncation), or an
// error under kReject. Sets *truncated.
absl::StatusOr<std::vector<int32_t>> Segment(absl::Span<const int32_t> ids, int64_t length,
                                             LongDemonstrationPolicy policy,
                                             const std::string& what, bool* truncated) {
  *truncated = static_cast<int64_t>(ids.size()) > length;
  if (!*truncated) return std::vector<int32_t>(ids.begin(), ids.end());
  if (policy == LongDemonstrationPolicy::kReject) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " has ", ids.size(), " tokens, more than the segment length ", length,
                     "; raise segment_length or set long_demonstrations to TRUNCATE"));
  }
  return std::vector<int32_t>(ids.end() - length, ids.end());
}

// Demonstrations 0 .. k-1 in `groups` consecutive groups, sizes differing by at most one.
std::vector<std::vector<int64_t>> SplitIntoGroups(int64_t k, int64_t groups) {
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(groups));
  int64_t next = 0;
  for (int64_t g = 0; g < groups; ++g) {
    const int64_t size = k / groups + (g < k % groups ? 1 : 0);
    for (int64_t i = 0; i < size; ++i) out[g].push_back(next++);
  }
  return out;
}

// The blocks of one prompt: its demonstrations' segments (rows [seg_begin[i], +seg_len[i]), in
// the order of `demos`, consecutive in the batch) and its test segment (rows [test_begin, +n)).
void AddPromptBlocks(T5PromptAttention attention, const std::vector<int64_t>& demos,
                     const std::vector<int64_t>& seg_begin, const std::vector<int64_t>& seg_len,
                     int64_t test_begin, int64_t test_len, std::vector<T5AttentionBlock>& blocks) {
  const int64_t d_begin = seg_begin[demos.front()];
  const int64_t d_len = seg_begin[demos.back()] + seg_len[demos.back()] - d_begin;
  if (attention == T5PromptAttention::kFull) {
    // One sequence [demonstrations..., test]: positions run on across segments.
    blocks.push_back({d_begin, d_len, d_begin, d_len, true, 0});
    blocks.push_back({d_begin, d_len, test_begin, test_len, true, -d_len});
    blocks.push_back({test_begin, test_len, d_begin, d_len, true, d_len});
    blocks.push_back({test_begin, test_len, test_begin, test_len, true, 0});
    return;
  }
  // SAICL (Appendix B): a demonstration sees its own segment (in-segment bias) and the test
  // segment (no bias); the test segment sees every demonstration (no bias) and itself (bias).
  for (int64_t i : demos) {
    blocks.push_back({seg_begin[i], seg_len[i], seg_begin[i], seg_len[i], true, 0});
    blocks.push_back({seg_begin[i], seg_len[i], test_begin, test_len, false, 0});
  }
  blocks.push_back({test_begin, test_len, d_begin, d_len, false, 0});
  blocks.push_back({test_begin, test_len, test_begin, test_len, true, 0});
}

// `encoded`'s rows in the order `rows` lists them, regrouped into inputs of `lengths`.
absl::StatusOr<T5EncoderOutput> Reorder(const T5Model& model, const T5EncoderOutput& encoded,
                                        const std::vector<int32_t>& rows,
                                        const std::vector<int64_t>& lengths) {
  Backend& b = model.backend();
  const auto n = static_cast<int64_t>(rows.size());
  T5EncoderOutput out;
  for (int64_t len : lengths) {
    out.begins.push_back(out.begins.empty() ? 0 : out.begins.back() + out.lengths.back());
    out.lengths.push_back(len);
  }
  auto rows_t = b.Allocate(DType::kI32, {n});
  if (!rows_t.ok()) return rows_t.status();
  b.CopyFromHost(rows.data(), *rows_t);
  auto gather = [&](const Tensor& from) -> absl::StatusOr<Tensor> {
    std::vector<int64_t> shape = from.shape();
    shape[0] = n;
    auto to = b.Allocate(from.dtype(), shape);
    if (!to.ok()) return to.status();
    b.GatherRows(from, *rows_t, *to);
    return to;
  };
  auto states = gather(encoded.states);
  if (!states.ok()) return states.status();
  out.states = *std::move(states);
  for (size_t l = 0; l < encoded.cross_k.size(); ++l) {
    auto k = gather(encoded.cross_k[l]);
    if (!k.ok()) return k.status();
    auto v = gather(encoded.cross_v[l]);
    if (!v.ok()) return v.status();
    out.cross_k.push_back(*std::move(k));
    out.cross_v.push_back(*std::move(v));
  }
  auto status = b.Synchronize();
  if (!status.ok()) return status;
  return out;
}

}  // namespace

const char* T5PromptModeName(T5PromptMode mode) {
  switch (mode) {
    case T5PromptMode::kConventional:
      return "CONVENTIONAL";
    case T5PromptMode::kSaicl:
      return "SAICL";
    case T5PromptMode::kFid:
      return "FID";
    case T5PromptMode::kEnsemble:
      return "ENSEMBLE";
    case T5PromptMode::kGroupFid:
      return "GROUP_FID";
  }
  return "UNKNOWN";
}

absl::StatusOr<T5DemonstrationSet> PrepareT5Demonstrations(
    const T5Model& model, const std::vector<std::vector<int32_t>>& demonstrations,
    const T5SegmentOptions& options) {
  if (demonstrations.empty()) return absl::InvalidArgumentError("no demonstrations");
  if (options.segment_length < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("segment_length must be >= 0 (0: the default), got ", options.segment_length));
  }
  const int64_t vocab = model.config().vocab_size;
  int64_t longest = 0;
  for (size_t i = 0; i < demonstrations.size(); ++i) {
    auto status = CheckIds(demonstrations[i], vocab, absl::StrCat("demonstration ", i));
    if (!status.ok()) return status;
    longest = std::max(longest, static_cast<int64_t>(demonstrations[i].size()));
  }
  T5DemonstrationSet set;
  set.segment_length =
      options.segment_length > 0 ? options.segment_length : std::min(kMaxT5SegmentLength, longest);
  set.long_demonstrations = options.long_demonstrations;
  std::vector<int32_t> all;
  for (size_t i = 0; i < demonstrations.size(); ++i) {
    bool truncated = false;
    auto segment = Segment(demonstrations[i], set.segment_length, options.long_demonstrations,
                           absl::StrCat("demonstration ", i), &truncated);
    if (!segment.ok()) return segment.status();
    set.truncated_demonstrations += truncated ? 1 : 0;
    all.insert(all.end(), segment->begin(), segment->end());
    set.segments.push_back(*std::move(segment));
  }
  auto first = model.EncoderFirstLayerQkv(all);
  if (!first.ok()) return first.status();
  set.first_layer = *std::move(first);
  return set;
}

absl::StatusOr<T5PromptLayout> LayOutT5Prompts(const T5ModeOptions& options, int64_t k) {
  const char* mode = T5PromptModeName(options.mode);
  int64_t groups = 1;
  T5PromptAttention attention = T5PromptAttention::kFull;
  switch (options.mode) {
    case T5PromptMode::kConventional:
    case T5PromptMode::kSaicl:
    case T5PromptMode::kFid:
      if (options.groups != 0) {
        return absl::InvalidArgumentError(
            absl::StrCat("groups applies to GROUP_FID and ENSEMBLE only; ", mode, " was given ",
                         options.groups));
      }
      groups = options.mode == T5PromptMode::kFid ? k : 1;
      attention = options.mode == T5PromptMode::kSaicl ? T5PromptAttention::kSaicl
                                                       : T5PromptAttention::kFull;
      break;
    case T5PromptMode::kEnsemble:
    case T5PromptMode::kGroupFid:
      if (options.groups < 0 || options.groups > k ||
          (options.mode == T5PromptMode::kGroupFid && options.groups == 0)) {
        return absl::InvalidArgumentError(absl::StrCat(
            mode, " needs groups in [", options.mode == T5PromptMode::kGroupFid ? 1 : 0, ", ", k,
            "] (the task has ", k, " demonstrations), got ", options.groups));
      }
      groups = options.groups == 0 ? k : options.groups;
      attention = options.groups == 0 ? T5PromptAttention::kFull : options.group_attention;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown T5 prompt mode ", static_cast<int>(options.mode)));
  }
  T5PromptLayout layout;
  layout.prompt_demonstrations = SplitIntoGroups(k, groups);
  layout.attention = attention;
  return layout;
}

absl::StatusOr<T5PromptEncoding> EncodeT5Prompts(const T5Model& model,
                                                 const T5DemonstrationSet& demonstrations,
                                                 const T5ModeOptions& options,
                                                 absl::Span<const int32_t> test_input) {
  const int64_t k = demonstrations.demonstrations();
  if (k == 0) return absl::InvalidArgumentError("the demonstration set is empty");
  auto status = CheckIds(test_input, model.config().vocab_size, "the test input");
  if (!status.ok()) return status;
  auto layout = LayOutT5Prompts(options, k);
  if (!layout.ok()) return layout.status();
  const int64_t groups = static_cast<int64_t>(layout->prompt_demonstrations.size());
  const T5PromptAttention attention = layout->attention;
  T5PromptEncoding result;
  result.mode = options.mode;
  auto test = Segment(test_input, demonstrations.segment_length, demonstrations.long_demonstrations,
                      "the test input", &result.test_truncated);
  if (!test.ok()) return test.status();
  result.test_tokens = static_cast<int64_t>(test->size());
  result.prompt_demonstrations = std::move(layout->prompt_demonstrations);

  // The batch: every demonstration's segment (the cached first-layer rows), then one copy of the
  // test segment per prompt.
  std::vector<std::vector<int32_t>> inputs = demonstrations.segments;
  std::vector<int64_t> seg_begin, seg_len;
  int64_t rows = 0;
  for (const auto& s : demonstrations.segments) {
    seg_begin.push_back(rows);
    seg_len.push_back(static_cast<int64_t>(s.size()));
    rows += seg_len.back();
  }
  const int64_t n = result.test_tokens;
  std::vector<T5AttentionBlock> blocks;
  for (int64_t g = 0; g < groups; ++g) {
    inputs.push_back(*test);
    AddPromptBlocks(attention, result.prompt_demonstrations[g], seg_begin, seg_len, rows + g * n, n,
                    blocks);
  }
  const int64_t total = rows + groups * n;
  auto block_attention = T5BlockAttention::Create(model, total, std::move(blocks));
  if (!block_attention.ok()) return block_attention.status();
  result.attention_rounds = (*block_attention)->rounds();
  T5EncodeOptions encode_options;
  encode_options.attention = block_attention->get();
  encode_options.first_layer = &demonstrations.first_layer;
  auto encoded = model.Encode(inputs, encode_options);
  if (!encoded.ok()) return encoded.status();

  // Prompt order: each prompt's demonstrations, then its test copy (already so for one prompt).
  if (groups == 1) {
    result.prompts = *std::move(encoded);
    result.prompts.begins = {0};
    result.prompts.lengths = {total};
  } else {
    std::vector<int32_t> order;
    std::vector<int64_t> lengths;
    for (int64_t g = 0; g < groups; ++g) {
      const auto& demos = result.prompt_demonstrations[g];
      const auto start = static_cast<int64_t>(order.size());
      for (int64_t r = seg_begin[demos.front()];
           r < seg_begin[demos.back()] + seg_len[demos.back()]; ++r) {
        order.push_back(static_cast<int32_t>(r));
      }
      for (int64_t r = 0; r < n; ++r) order.push_back(static_cast<int32_t>(rows + g * n + r));
      lengths.push_back(static_cast<int64_t>(order.size()) - start);
    }
    auto reordered = Reorder(model, *encoded, order, lengths);
    if (!reordered.ok()) return reordered.status();
    result.prompts = *std::move(reordered);
  }
  result.decoder = result.prompts;
  if (options.mode != T5PromptMode::kEnsemble) {
    result.decoder.begins = {0};
    result.decoder.lengths = {total};
  }
  return result;
}

absl::StatusOr<std::vector<T5CandidateScore>> ScoreT5Prompts(
    const T5Model& model, const T5PromptEncoding& encoding,
    absl::Span<const std::vector<int32_t>> candidates) {
  const int64_t inputs = encoding.decoder.inputs();
  if (inputs == 0) return absl::InvalidArgumentError("the encoding has no decoder input");
  // ENSEMBLE: every prompt in one decoder pass, then the average; the other modes have one input.
  std::vector<int64_t> all(static_cast<size_t>(inputs));
  std::iota(all.begin(), all.end(), int64_t{0});
  auto scores = ScoreT5CandidatesForInputs(model, encoding.decoder, all, candidates);
  if (!scores.ok()) return scores.status();
  std::vector<T5CandidateScore> mean(candidates.size());
  for (const std::vector<T5CandidateScore>& per_prompt : *scores) {
    for (size_t c = 0; c < candidates.size(); ++c) {
      mean[c].sum_logprob += per_prompt[c].sum_logprob / static_cast<double>(inputs);
      mean[c].mean_logprob += per_prompt[c].mean_logprob / static_cast<double>(inputs);
      mean[c].tokens = per_prompt[c].tokens;
    }
  }
  return mean;
}

namespace {

// ENSEMBLE averages per-prompt scores: there is no one decoder input to generate from.
absl::Status CheckOneDecoderInput(const T5PromptEncoding& encoding) {
  if (encoding.decoder.inputs() == 1) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat(T5PromptModeName(encoding.mode),
                   " runs the decoder per prompt and only scores candidates; generate with "
                   "SAICL, FID, GROUP_FID or CONVENTIONAL"));
}

}  // namespace

absl::StatusOr<T5Generation> GenerateT5Prompts(const T5Model& model,
                                               const T5PromptEncoding& encoding,
                                               int64_t max_new_tokens) {
  if (absl::Status s = CheckOneDecoderInput(encoding); !s.ok()) return s;
  auto generated = GenerateT5Greedy(model, encoding.decoder, max_new_tokens);
  if (!generated.ok()) return generated.status();
  return std::move(generated->front());
}

absl::StatusOr<GenerationOutput> GenerateT5Prompts(const T5Model& model,
                                                   const T5PromptEncoding& encoding,
                                                   const GenerationParams& params) {
  if (absl::Status s = CheckOneDecoderInput(encoding); !s.ok()) return s;
  return GenerateT5(model, encoding.decoder, 0, params);
}

}  // namespace manyshot
