// Turning API messages into engine values, validating every field on the way: task ids, task
// specs (into ServedTaskOptions, for a model of any architecture: engine/serving), demonstrations
// and inputs, and engine errors back into the API's field names. Errors are INVALID_ARGUMENT
// naming the field and the limit.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/serving/served_task_options.h"
#include "engine/task/example.h"
#include "engine/task/generation_params.h"
#include "engine/task/task_options.h"
#include "manyshot/v1/manyshot.pb.h"
#include "server/server_config.h"

namespace manyshot::server {

// 1-128 characters from [A-Za-z0-9._-].
absl::Status ValidateTaskId(const std::string& task_id);

// An engine's INVALID_ARGUMENT about one of its task options ("groups 5 must be ...") in the
// API's terms: when the message starts with the name of a TaskSpec field, the message and the
// BadRequest field name `spec.<field>` instead. Anything else is returned unchanged.
absl::Status InSpecTerms(absl::Status status);

// An engine's INVALID_ARGUMENT about a request in the API's terms: "input 3: ..." becomes
// "inputs[3]: ..." (BadRequest field inputs[3]), "max_new_tokens ..." becomes
// "options.max_new_tokens ...", and a limit the task fixed at creation (max_query_tokens,
// max_answer_tokens) is named as the task option and the CLI flag that set it.
absl::Status InRequestTerms(absl::Status status);

// "SAICL", "STRUCTURED", ... for messages.
std::string ModeName(v1::Mode mode);

// A spec's mode; unset for MODE_UNSPECIFIED (the model's default), INVALID_ARGUMENT for a value
// the API does not have.
absl::StatusOr<std::optional<ServedMode>> ToServedMode(v1::Mode mode);

// A spec as options for a model of any architecture, every field checked on its own; which fields
// and modes the served model has is ServedModel::CheckTaskOptions's to say.
absl::StatusOr<ServedTaskOptions> ToServedTaskOptions(const v1::TaskSpec& spec,
                                                      const ServerConfig& config);

// A spec for a decoder-only task (STRUCTURED, PARALLEL or CONVENTIONAL): the tools that drive
// IclTask directly use it.
absl::StatusOr<TaskOptions> ToTaskOptions(const v1::TaskSpec& spec, const ServerConfig& config);

absl::StatusOr<std::vector<Example>> ToDemonstrations(
    const google::protobuf::RepeatedPtrField<v1::Demonstration>& demonstrations,
    const v1::TaskSpec& spec, const ServerConfig& config);

// One input; `what` names it in errors ("inputs[3]").
absl::StatusOr<Example> ToExample(const v1::Input& input, const ServerConfig& config,
                                  const std::string& what);

absl::StatusOr<QueryOverrides> ToOverrides(const v1::QueryOptions& options);

// Generate's options as search parameters, checked against the server's limits (INVALID_ARGUMENT
// names the option). The caller adds what the model and the call supply: eos, on_token, cancelled.
absl::StatusOr<GenerationParams> ToGenerationParams(const v1::GenerationOptions& options,
                                                    const ServerConfig& config);

// Hex digest of spec + demonstrations (deterministic serialization): equal content, equal hash.
std::string ContentHash(const v1::TaskSpec& spec,
                        const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos);

}  // namespace manyshot::server
