// The marker file a manyshot model generator leaves beside the weights it wrote, saying what they
// are: random (the tiny models) or hand-built (the induction model).
#pragma once

#include <filesystem>
#include <string>

#include "absl/status/statusor.h"

namespace manyshot {

// The marker WriteTinyModel and WriteTinyT5Model leave in every generated model.
inline constexpr char kTinyModelMarker[] = "manyshot_tiny_model.json";

struct ModelMarker {
  std::string file;             // kTinyModelMarker or kInductionModelMarker; empty: no marker
  bool random_weights = false;  // the tiny models' weights are random, the induction model's not
  std::string note;             // the marker's "note": what the weights are
};

// Reads the marker in `model_dir`, the same way for every generator's marker (kTinyModelMarker:
// make-tiny-model, make-tiny-t5 and the default model; kInductionModelMarker:
// make-induction-model). No marker: an empty ModelMarker. A marker that is not a JSON object
// with a string "note" is an error naming the file.
absl::StatusOr<ModelMarker> ReadModelMarker(const std::filesystem::path& model_dir);

}  // namespace manyshot
