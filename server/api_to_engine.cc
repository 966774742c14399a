#include "server/api_to_engine.h"

#include <xxhash.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/task/query_room.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"
#include "server/grpc_status.h"

namespace manyshot::server {
namespace {

absl::Status CheckText(const std::string& text, const ServerConfig& config,
                       const std::string& what) {
  if (text.size() > config.max_input_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(what, " has ", text.size(),
                                                   " bytes, more than --max_input_bytes ",
                                                   config.max_input_bytes));
  }
  return absl::OkStatus();
}

absl::StatusOr<PromptMode> ToMode(v1::Mode mode, const std::string& what) {
  switch (mode) {
    case v1::MODE_UNSPECIFIED:
    case v1::MODE_STRUCTURED:
      return PromptMode::kStructured;
    case v1::MODE_CONVENTIONAL:
      return PromptMode::kConventional;
    case v1::MODE_PARALLEL:
      return PromptMode::kParallel;
    case v1::MODE_SAICL:
    case v1::MODE_FID:
    case v1::MODE_ENSEMBLE:
    case v1::MODE_GROUP_FID:
      // Task-level modes of encoder-decoder models (ToServedTaskOptions reads spec.mode for them);
      // a request overrides only to CONVENTIONAL.
      return absl::FailedPreconditionError(absl::StrCat(
          what, " ", ModeName(mode),
          " is set per task (spec.mode, on an encoder-decoder model), not per request"));
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", static_cast<int>(mode), " is not a known mode"));
  }
}

absl::StatusOr<InputTruncation> ToInputTruncation(v1::InputTruncation how,
                                                  const std::string& what) {
  switch (how) {
    case v1::INPUT_TRUNCATION_UNSPECIFIED:
    case v1::INPUT_TRUNCATION_NONE:
      return InputTruncation::kNone;
    case v1::INPUT_TRUNCATION_KEEP_START:
      return InputTruncation::kKeepStart;
    case v1::INPUT_TRUNCATION_KEEP_END:
      return InputTruncation::kKeepEnd;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat(what, " ", static_cast<int>(how),
                       " is not a known truncation (NONE, KEEP_START, KEEP_END)"));
  }
}

// The server keeps one KV storage type (--kv_dtype) for every task; a task may name it, not ask
// for another.
absl::Status CheckKvDtype(v1::KvDtype requested, const ServerConfig& config) {
  const char* name = nullptr;
  switch (requested) {
    case v1::KV_DTYPE_UNSPECIFIED:
      return absl::OkStatus();
    case v1::KV_DTYPE_F32:
      name = "f32";
      break;
    case v1::KV_DTYPE_BF16:
      name = "bf16";
      break;
    case v1::KV_DTYPE_F16:
      name = "f16";
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat("spec.kv_dtype ", static_cast<int>(requested),
                                                     " is not a known KV dtype (F32, BF16, F16)"));
  }
  if (config.kv_dtype != name) {
    return absl::InvalidArgumentError(
        absl::StrCat("spec.kv_dtype asks for ", name, " but this server stores every task's KV as ",
                     config.kv_dtype, " (--kv_dtype): leave kv_dtype unset"));
  }
  return absl::OkStatus();
}

}  // namespace

std::string ModeName(v1::Mode mode) {
  const std::string& full = v1::Mode_Name(mode);
  return full.rfind("MODE_", 0) == 0 ? full.substr(5) : absl::StrCat(static_cast<int>(mode));
}

absl::Status ValidateTaskId(const std::string& task_id) {
  // Checked before a task id is used or echoed: messages name the offending byte, never repeat
  // unbounded or control characters back (they would forge log lines or overflow metadata).
  if (task_id.empty() || task_id.size() > 128) {
    return absl::InvalidArgumentError(
        absl::StrCat("task_id must be 1 to 128 characters (got ", task_id.size(), " bytes)"));
  }
  for (size_t i = 0; i < task_id.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(task_id[i]);
    if (!std::isalnum(c) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(
          absl::StrFormat("task_id may only contain letters, digits, '.', '_' and '-' (byte 0x%02x "
                          "at offset %d)",
                          c, i));
    }
  }
  return absl::OkStatus();
}

namespace {

// The task option a request's limit error is about: an over-long input names max_query_tokens,
// a room for answers too small names max_answer_tokens (raising it leaves room for both).
const char* LimitNamedIn(const std::string& message) {
  if (message.find("more than max_query_tokens") != std::string::npos ||
      message.find("truncated to max_query_tokens") != std::string::npos) {
    return "max_query_tokens";
  }
  if (message.find("max_answer_tokens") != std::string::npos) return "max_answer_tokens";
  if (message.find("max_query_tokens") != std::string::npos) return "max_query_tokens";
  return nullptr;
}

}  // namespace

absl::Status InSpecTerms(absl::Status status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  const absl::string_view message = status.message();
  size_t end = 0;
  while (end < message.size() && (absl::ascii_islower(message[end]) || message[end] == '_')) ++end;
  if (end == 0 || (end < message.size() && message[end] != ' ')) return status;
  const std::string name(message.substr(0, end));
  if (v1::TaskSpec::descriptor()->FindFieldByName(name) == nullptr) return status;
  return InvalidFieldError("spec." + name, absl::StrCat("spec.", message));
}

absl::Status InRequestTerms(absl::Status status) {
  if (status.code() != absl::StatusCode::kInvalidArgument) return status;
  std::string message(status.message());
  std::string field;
  // "input N: ..." (the engine's wording for one input of a request).
  const size_t colon = message.find(": ");
  int index = 0;
  if (message.rfind("input ", 0) == 0 && colon != std::string::npos &&
      absl::SimpleAtoi(absl::string_view(message).substr(6, colon - 6), &index)) {
    field = absl::StrCat("inputs[", index, "]");
    message = absl::StrCat(field, message.substr(colon));
  } else if (message.rfind("max_new_tokens ", 0) == 0) {
    field = "options.max_new_tokens";
    message = "options." + message;
  }
  if (const char* limit = LimitNamedIn(message); limit != nullptr) {
    absl::StrAppend(&message, " (the task's spec.", limit,
                    ", fixed when it was created: manyshot create --", limit,
                    "=N, or CreateTask with replace");
    if (message.find("more than max_query_tokens") != std::string::npos) {
      absl::StrAppend(&message,
                      "; or cut long inputs: options.truncation per request, "
                      "spec.input_truncation per task, manyshot classify --truncate=keep_end");
    }
    absl::StrAppend(&message, ")");
  }
  if (field.empty() && message == status.message()) return status;
  return field.empty() ? absl::InvalidArgumentError(message) : InvalidFieldError(field, message);
}

namespace {

// Every field of `spec` that TaskOptions holds but the mode, which each architecture reads its own
// way.
absl::StatusOr<TaskOptions> SharedTaskOptions(const v1::TaskSpec& spec,
                                              const ServerConfig& config) {
  TaskOptions o;
  if (spec.input_template().empty()) {
    return absl::InvalidArgumentError(
        "spec.input_template is required, e.g. \"Sentence: {text}\\nLabel:\"");
  }
  if (auto s = CheckText(spec.input_template(), config, "spec.input_template"); !s.ok()) return s;
  o.input_template = spec.input_template();
  // Every string of the spec is rendered or tokenized per demonstration or per query: bounded.
  if (auto s = CheckText(spec.answer_template(), config, "spec.answer_template"); !s.ok()) return s;
  if (auto s = CheckText(spec.separator(), config, "spec.separator"); !s.ok()) return s;
  if (auto s = CheckText(spec.calibration_text(), config, "spec.calibration_text"); !s.ok()) {
    return s;
  }
  if (spec.has_answer_template()) o.answer_template = spec.answer_template();
  if (spec.has_separator()) o.separator = spec.separator();
  if (static_cast<uint32_t>(spec.labels_size()) > config.max_labels) {
    return absl::InvalidArgumentError(absl::StrCat("spec.labels has ", spec.labels_size(),
                                                   " labels, more than --max_labels ",
                                                   config.max_labels));
  }
  for (int i = 0; i < spec.labels_size(); ++i) {
    if (spec.labels(i).empty()) {
      return absl::InvalidArgumentError(absl::StrCat("spec.labels[", i, "] is empty"));
    }
    if (auto s = CheckText(spec.labels(i), config, absl::StrCat("spec.labels[", i, "]")); !s.ok()) {
      return s;
    }
    o.labels.push_back(spec.labels(i));
  }
  o.shuffle_seed = spec.shuffle_seed();
  o.group_length = spec.group_length();
  switch (spec.alignment()) {
    case v1::ALIGNMENT_UNSPECIFIED:
    case v1::ALIGNMENT_TRUNCATE:
      o.alignment = Alignment::kTruncate;
      break;
    case v1::ALIGNMENT_ATTENTION_MASK:
      o.alignment = Alignment::kAttentionMask;
      break;
    case v1::ALIGNMENT_PAD_SPACE:
      o.alignment = Alignment::kPadSpace;
      break;
    default:
      return absl::InvalidArgumentError("spec.alignment is not a known alignment");
  }
  if (!std::isfinite(spec.rescale_factor()) || spec.rescale_factor() < 0) {
    return absl::InvalidArgumentError(
        "spec.rescale_factor must be 0 (the number of groups) or "
        "a positive number");
  }
  o.rescale_factor = spec.rescale_factor();
  switch (spec.long_demonstrations()) {
    case v1::LONG_DEMONSTRATION_POLICY_UNSPECIFIED:
    case v1::LONG_DEMONSTRATION_POLICY_REJECT:
      o.long_demonstrations = LongDemonstrationPolicy::kReject;
      break;
    case v1::LONG_DEMONSTRATION_POLICY_TRUNCATE:
      o.long_demonstrations = LongDemonstrationPolicy::kTruncate;
      break;
    default:
      return absl::InvalidArgumentError("spec.long_demonstrations is not a known policy");
  }
  if (auto s = CheckKvDtype(spec.kv_dtype(), config); !s.ok()) return s;
  o.calibrate = spec.calibrate();
  if (spec.has_calibration_text()) o.calibration_text = spec.calibration_text();
  o.max_rendered_bytes = config.max_input_bytes;
  o.max_query_tokens =
      spec.max_query_tokens() ? spec.max_query_tokens() : config.default_max_query_tokens;
  o.max_answer_tokens =
      spec.max_answer_tokens() ? spec.max_answer_tokens() : config.default_max_answer_tokens;
  if (spec.input_truncation() != v1::INPUT_TRUNCATION_UNSPECIFIED) {
    auto how = ToInputTruncation(spec.input_truncation(), "spec.input_truncation");
    if (!how.ok()) return how.status();
    o.input_truncation = *how;
  }
  return o;
}

absl::StatusOr<std::optional<GroupAttention>> ToGroupAttention(v1::GroupAttention attention) {
  switch (attention) {
    case v1::GROUP_ATTENTION_UNSPECIFIED:
      return std::nullopt;
    case v1::GROUP_ATTENTION_SAICL:
      return GroupAttention::kSaicl;
    case v1::GROUP_ATTENTION_FULL:
      return GroupAttention::kFull;
    default:
      return absl::InvalidArgumentError("spec.group_attention is not a known attention");
  }
}

}  // namespace

absl::StatusOr<TaskOptions> ToTaskOptions(const v1::TaskSpec& spec, const ServerConfig& config) {
  auto o = SharedTaskOptions(spec, config);
  if (!o.ok()) return o.status();
  auto mode = ToMode(spec.mode(), "spec.mode");
  if (!mode.ok()) return mode.status();
  o->mode = *mode;
  return o;
}

absl::StatusOr<std::optional<ServedMode>> ToServedMode(v1::Mode mode) {
  switch (mode) {
    case v1::MODE_UNSPECIFIED:
      return std::nullopt;
    case v1::MODE_STRUCTURED:
      return ServedMode::kStructured;
    case v1::MODE_PARALLEL:
      return ServedMode::kParallel;
    case v1::MODE_CONVENTIONAL:
      return ServedMode::kConventional;
    case v1::MODE_SAICL:
      return ServedMode::kSaicl;
    case v1::MODE_FID:
      return ServedMode::kFid;
    case v1::MODE_ENSEMBLE:
      return ServedMode::kEnsemble;
    case v1::MODE_GROUP_FID:
      return ServedMode::kGroupFid;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("spec.mode ", static_cast<int>(mode), " is not a known mode"));
  }
}

absl::StatusOr<ServedTaskOptions> ToServedTaskOptions(const v1::TaskSpec& spec,
                                                      const ServerConfig& config) {
  ServedTaskOptions o;
  o.field_prefix = "spec.";
  auto common = SharedTaskOptions(spec, config);
  if (!common.ok()) return common.status();
  o.common = *std::move(common);
  auto mode = ToServedMode(spec.mode());
  if (!mode.ok()) return mode.status();
  o.mode = *mode;
  o.sets_group_packing = spec.group_length() != 0 || spec.rescale_factor() != 0 ||
                         spec.alignment() != v1::ALIGNMENT_UNSPECIFIED;
  auto attention = ToGroupAttention(spec.group_attention());
  if (!attention.ok()) return attention.status();
  o.group_attention = *attention;
  if (spec.groups() != 0 && spec.groups() > config.max_demonstrations) {
    return absl::InvalidArgumentError(absl::StrCat("spec.groups ", spec.groups(),
                                                   " is more than --max_demonstrations ",
                                                   config.max_demonstrations));
  }
  o.groups = spec.groups();
  o.segment_length = spec.segment_length();
  return o;
}

absl::StatusOr<std::vector<Example>> ToDemonstrations(
    const google::protobuf::RepeatedPtrField<v1::Demonstration>& demonstrations,
    const v1::TaskSpec& spec, const ServerConfig& config) {
  if (demonstrations.empty()) {
    return absl::InvalidArgumentError("a task needs at least one demonstration");
  }
  if (static_cast<uint64_t>(demonstrations.size()) > config.max_demonstrations) {
    return absl::InvalidArgumentError(absl::StrCat("the task has ", demonstrations.size(),
                                                   " demonstrations, more than "
                                                   "--max_demonstrations ",
                                                   config.max_demonstrations));
  }
  std::vector<Example> out;
  out.reserve(demonstrations.size());
  for (int i = 0; i < demonstrations.size(); ++i) {
    const v1::Demonstration& d = demonstrations[i];
    const std::string what = absl::StrCat("demonstrations[", i, "]");
    Example e;
    e.text = d.text();
    if (auto s = CheckText(e.text, config, what + ".text"); !s.ok()) return s;
    for (const auto& [k, v] : d.fields()) {
      if (auto s = CheckText(v, config, what + ".fields[" + k + "]"); !s.ok()) return s;
      e.fields[k] = v;
    }
    switch (d.answer_case()) {
      case v1::Demonstration::kLabel:
        if (auto s = CheckText(d.label(), config, what + ".label"); !s.ok()) return s;
        e.label = d.label();
        break;
      case v1::Demonstration::kLabelIndex:
        if (d.label_index() >= static_cast<uint32_t>(spec.labels_size())) {
          return absl::InvalidArgumentError(absl::StrCat(what, ".label_index ", d.label_index(),
                                                         " is not below the number of labels (",
                                                         spec.labels_size(), ")"));
        }
        e.label = spec.labels(static_cast<int>(d.label_index()));
        break;
      default:
        return absl::InvalidArgumentError(what + " has neither label nor label_index");
    }
    out.push_back(std::move(e));
  }
  return out;
}

absl::StatusOr<Example> ToExample(const v1::Input& input, const ServerConfig& config,
                                  const std::string& what) {
  Example e;
  e.text = input.text();
  if (auto s = CheckText(e.text, config, what + ".text"); !s.ok()) return s;
  for (const auto& [k, v] : input.fields()) {
    if (auto s = CheckText(v, config, what + ".fields[" + k + "]"); !s.ok()) return s;
    e.fields[k] = v;
  }
  return e;
}

absl::StatusOr<QueryOverrides> ToOverrides(const v1::QueryOptions& options) {
  QueryOverrides o;
  if (options.truncation() != v1::INPUT_TRUNCATION_UNSPECIFIED) {
    auto how = ToInputTruncation(options.truncation(), "options.truncation");
    if (!how.ok()) return how.status();
    o.truncation = *how;
  }
  if (options.mode() != v1::MODE_UNSPECIFIED) {
    auto mode = ToMode(options.mode(), "options.mode");
    if (!mode.ok()) return mode.status();
    o.mode = *mode;
  }
  if (options.has_rescale_factor()) {
    if (!(options.rescale_factor() > 0) || !std::isfinite(options.rescale_factor())) {
      return absl::InvalidArgumentError("options.rescale_factor must be a positive number");
    }
    o.rescale_factor = options.rescale_factor();
  }
  return o;
}

absl::StatusOr<GenerationParams> ToGenerationParams(const v1::GenerationOptions& o,
                                                    const ServerConfig& config) {
  if (o.strategy() != v1::DECODING_STRATEGY_UNSPECIFIED &&
      o.strategy() != v1::DECODING_STRATEGY_GREEDY && o.strategy() != v1::DECODING_STRATEGY_BEAM) {
    return absl::InvalidArgumentError(absl::StrCat("options.strategy ",
                                                   static_cast<int>(o.strategy()),
                                                   " is not a known strategy (GREEDY, BEAM)"));
  }
  GenerationParams params;
  params.beam_search = o.strategy() == v1::DECODING_STRATEGY_BEAM;
  params.beam_width = o.beam_width() ? static_cast<int>(o.beam_width()) : 3;
  params.length_penalty = o.has_length_penalty() ? o.length_penalty() : 0.6;
  // Unset: the default length, or fewer tokens where the input leaves less room (the task
  // shortens it); set: exactly that bound, refused when the input leaves less room.
  params.shorten_to_room = o.max_new_tokens() == 0;
  params.max_new_tokens =
      params.shorten_to_room
          ? std::min(kDefaultMaxNewTokens, static_cast<int>(config.max_new_tokens))
          : static_cast<int>(std::min<uint32_t>(o.max_new_tokens(), INT32_MAX));
  if (params.max_new_tokens > static_cast<int>(config.max_new_tokens)) {
    return absl::InvalidArgumentError(absl::StrCat("options.max_new_tokens ", params.max_new_tokens,
                                                   " is more than --max_new_tokens ",
                                                   config.max_new_tokens));
  }
  if (params.beam_search &&
      (params.beam_width < 1 || params.beam_width > static_cast<int>(config.max_beam_width))) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.beam_width must be 1 to --max_beam_width ", config.max_beam_width));
  }
  // sum_logprob / length^length_penalty must stay finite for every length up to
  // --max_new_tokens (a beam ranked by an infinite or zero divisor is ranked by nothing).
  if (!std::isfinite(params.length_penalty) || std::abs(params.length_penalty) > 10) {
    return absl::InvalidArgumentError(
        absl::StrCat("options.length_penalty must be a finite number from -10 to 10 (got ",
                     params.length_penalty, ")"));
  }
  for (const auto& s : o.stop()) {
    if (s.empty()) return absl::InvalidArgumentError("options.stop has an empty string");
    params.stop.push_back(s);
  }
  return params;
}

std::string ContentHash(const v1::TaskSpec& spec,
                        const google::protobuf::RepeatedPtrField<v1::Demonstration>& demos) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    spec.ByteSizeLong();  // computes the cached sizes the serializer uses
    spec.SerializeWithCachedSizes(&out);
    for (const auto& d : demos) {
      // Length-prefixed so that demonstration boundaries are part of the content.
      out.WriteVarint64(d.ByteSizeLong());
      d.SerializeWithCachedSizes(&out);
    }
  }
  XXH128_hash_t h = XXH3_128bits(bytes.data(), bytes.size());
  char hex[33];
  std::snprintf(hex, sizeof(hex), "%016llx%016llx", static_cast<unsigned long long>(h.high64),
                static_cast<unsigned long long>(h.low64));
  return hex;
}

}  // namespace manyshot::server
