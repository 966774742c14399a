#include "engine/serving/model_marker.h"

#include <fstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "engine/model/synthetic/induction_model.h"
#include "nlohmann/json.hpp"

namespace manyshot {

absl::StatusOr<ModelMarker> ReadModelMarker(const std::filesystem::path& model_dir) {
  struct Known {
    const char* file;
    bool random_weights;
  };
  static constexpr Known kKnown[] = {{kTinyModelMarker, true}, {kInductionModelMarker, false}};
  for (const Known& known : kKnown) {
    const std::filesystem::path path = model_dir / known.file;
    std::error_code ec;
    if (!std::filesystem::exists(path, ec)) continue;
    std::ifstream in(path);
    const nlohmann::json json = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    const auto note = json.is_object() ? json.find("note") : json.end();
    if (note == json.end() || !note->is_string()) {
      return absl::FailedPreconditionError(
          absl::StrCat("the model marker ", path.string(),
                       " is not a JSON object with a string \"note\" saying what the model is"));
    }
    ModelMarker marker;
    marker.file = known.file;
    marker.random_weights = known.random_weights;
    marker.note = note->get<std::string>();
    return marker;
  }
  return ModelMarker{};
}

}  // namespace manyshot
