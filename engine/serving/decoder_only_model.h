// The decoder-only architecture behind ServedModel: a Transformer and IclTask, whose context is
// encoded once per task and kept in the KV cache.
#pragma once

#include <memory>

#include "absl/status/statusor.h"
#include "engine/serving/served_model.h"
#include "engine/transformer/transformer.h"

namespace manyshot {

absl::StatusOr<std::unique_ptr<ServedModel>> LoadDecoderOnlyModel(
    const std::filesystem::path& dir, Backend& backend, const TransformerOptions& options);

}  // namespace manyshot
