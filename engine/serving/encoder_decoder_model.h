// The encoder-decoder architecture behind ServedModel: a T5Model and T5Task, whose demonstrations'
// encoder states depend on the test input, so nothing is kept in the KV cache.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/serving/served_model.h"
#include "engine/t5/t5_task.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

absl::StatusOr<std::unique_ptr<ServedModel>> LoadEncoderDecoderModel(
    const std::filesystem::path& dir, Backend& backend, const TransformerOptions& options);

// The T5 task options of `options`: the mode (unset: CONVENTIONAL), G, S and the group attention.
// Expects options that CheckTaskOptions accepted on an encoder-decoder model.
T5TaskOptions ToT5TaskOptions(const ServedTaskOptions& options);

}  // namespace manyshot
