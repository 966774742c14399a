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

}  // namespace generation_internal

void DecodeStopStringsWith(const Tokenizer& tokenizer, GenerationParams& params) {
  if (params.decode) return;
  params.decode = [&tokenizer](const std::vector<int32_t>& ids) {
    auto text = tokenizer.Decode(ids);
    return text.ok() ? *text : std::string();
  };
}

}  // namespace manyshot
