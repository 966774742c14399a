#include "engine/task/generation_search.h"

#include <algorithm>
#include <cmath>

#include "engine/tokenizer/tokenizer.h"

namespace manyshot {
namespace generation_internal {

double Score(double sum, size_t length, double penalty) {
  return sum / std::pow(static_cast<double>(std::max<size_t>(length, 1)), penalty);
}

std::optional<std::string> EndsWithStop(const GenerationParams& params,
                                        const std::vector<int32_t>& tokens) {
  if (params.stop.empty() || !params.decode) return std::nullopt;
  std::string text = params.decode(tokens);
  for (const auto& s : params.stop) {
    if (!s.empty() && text.size() >= s.size() &&
        text.compare(text.size() - s.size(), s.size(), s) == 0) {
      return s;
    }
  }
  return std::nullopt;
}

absl::Status CheckCancelled(const GenerationParams& params) {
  if (params.cancelled && params.cancelled()) {
    return absl::CancelledError("generation cancelled by the caller");
  }
  return absl::OkStatus();
}

namespace {

// a ranks after b: a lower sum, then a higher beam index, then a higher token id.
bool RanksAfter(const BeamExtension& a, const BeamExtension& b) {
  if (a.sum != b.sum) return a.sum < b.sum;
  if (a.beam != b.beam) return a.beam > b.beam;
  return a.token > b.token;
}

// Heap order with the worst-ranked extension at the front.
bool WorstFirst(const BeamExtension& x, const BeamExtension& y) { return RanksAfter(y, x); }

}  // namespace

std::vector<BeamExtension> BestExtensions(const std::vector<double>& sums,
                                          const std::vector<const std::vector<double>*>& logprobs,
                                          size_t want) {
  std::vector<BeamExtension> best;
  for (size_t b = 0; b < sums.size(); ++b) {
    const std::vector<double>& lp = *logprobs[b];
    for (size_t t = 0; t < lp.size(); ++t) {
      const BeamExtension p{sums[b] + lp[t], b, static_cast<int32_t>(t)};
      if (best.size() < want) {
        best.push_back(p);
        std::push_heap(best.begin(), best.end(), WorstFirst);
      } else if (RanksAfter(best.front(), p)) {
        std::pop_heap(best.begin(), best.end(), WorstFirst);
        best.back() = p;
        std::push_heap(best.begin(), best.end(), WorstFirst);
      }
    }
  }
  std::sort(best.begin(), best.end(),
            [](const BeamExtension& a, const BeamExtension& b) { return RanksAfter(b, a); });
  return best;
}

std::optional<GenerationOutput> FinishedBy(const GenerationParams& params,
                                           std::vector<int32_t>& tokens, const BeamExtension& p) {
  GenerationOutput done;
  done.sum_logprob = p.sum;
  if (params.eos_id && p.token == *params.eos_id) {
    done.tokens = tokens;  // eos is counted in the length, not kept in the tokens
    done.score = Score(p.sum, tokens.size() + 1, params.length_penalty);
    done.reason = FinishReason::kEos;
    return done;
  }
  tokens.push_back(p.token);
  if (auto stop = EndsWithStop(params, tokens)) {
    done.tokens = tokens;
    done.score = Score(p.sum, tokens.size(), params.length_penalty);
    done.reason = FinishReason::kStopString;
    done.stop_string = *stop;
    return done;
  }
  return std::nullopt;
}

GenerationOutput BestScored(std::vector<GenerationOutput> finished) {
  size_t best_index = 0;
  for (size_t i = 1; i < finished.size(); ++i) {
    if (finished[i].score > finished[best_index].score) best_index = i;
  }
  return std::move(finished[best_index]);
}

}  // namespace generation_internal

void DecodeStopStringsWith(const Tokenizer& tokenizer, GenerationParams& params) {
  if (params.decode) return;
  params.decode = [&tokenizer](const std::vector<int32_t>& ids) {
    auto text = tokenizer.Decode(ids);
    return text.ok() ? *text : std::string();
  };
}

}  // namespace manyshot
