#include "engine/serving/served_model.h"

#include "absl/strings/str_cat.h"
#include "engine/model/t5_config.h"
#include "engine/serving/decoder_only_model.h"
#include "engine/serving/encoder_decoder_model.h"

namespace manyshot {

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const std::filesystem::path& dir,
                                                               Backend& backend,
                                                               const ServedModelOptions& options) {
  // The one place that decides the architecture: an encoder-decoder (T5) directory loads as
  // T5Model; every other model_type as a Transformer, whose loader names what it does not support.
  auto marker = ReadModelMarker(dir);
  if (!marker.ok()) return marker.status();
  auto model_type = ConfigModelType(dir / "config.json");
  const bool encoder_decoder = model_type.ok() && *model_type == "t5";
  if (encoder_decoder && options.weights.has_value()) {
    return absl::InvalidArgumentError(
        absl::StrCat(options.weights_name, " applies to decoder-only models; the T5 model in ",
                     dir.string(), " holds its weights in the compute dtype"));
  }
  TransformerOptions dtypes;
  dtypes.compute = options.compute;
  dtypes.weights = options.weights;
  dtypes.graphs = options.graphs;
  auto model = encoder_decoder ? LoadEncoderDecoderModel(dir, backend, dtypes)
                               : LoadDecoderOnlyModel(dir, backend, dtypes);
  if (!model.ok()) return model.status();
  (*model)->description_.path = dir;
  (*model)->description_.marker = *std::move(marker);
  return model;
}

}  // namespace manyshot
