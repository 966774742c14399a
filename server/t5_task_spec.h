// API task specs on an encoder-decoder (T5) model, and which modes each architecture has:
// STRUCTURED / PARALLEL are decoder-only, SAICL / FID / ENSEMBLE / GROUP_FID encoder-decoder only,
// CONVENTIONAL both (issue #14's API).
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "engine/t5/t5_task.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/server_config.h"

namespace manyshot::server {

// "SAICL", "STRUCTURED", ... for messages.
std::string ModeName(v1::Mode mode);

// FAILED_PRECONDITION naming `what` ("spec.mode"), the mode and the model type when the served
// model's architecture does not have the mode; OK otherwise (unknown values are left to the
// parsers, which name them INVALID_ARGUMENT).
absl::Status CheckModeForModel(v1::Mode mode, bool encoder_decoder, const std::string& model_type,
                               const std::string& what);

// A spec for a T5 task: the templates and limits as ToTaskOptions reads them, the mode (UNSPECIFIED
// is CONVENTIONAL), G, S and the group attention. INVALID_ARGUMENT names a field that has no
// meaning on an encoder-decoder model when set (group_length, rescale_factor, alignment).
absl::StatusOr<T5TaskOptions> ToT5TaskOptions(const v1::TaskSpec& spec, const ServerConfig& config);

}  // namespace manyshot::server
