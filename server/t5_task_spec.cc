#include "server/t5_task_spec.h"

#include "absl/strings/str_cat.h"
#include "server/task_spec.h"

namespace manyshot::server {
namespace {

bool EncoderDecoderOnly(v1::Mode mode) {
  return mode == v1::MODE_SAICL || mode == v1::MODE_FID || mode == v1::MODE_ENSEMBLE ||
         mode == v1::MODE_GROUP_FID;
}

}  // namespace

std::string ModeName(v1::Mode mode) {
  const std::string& full = v1::Mode_Name(mode);
  return full.rfind("MODE_", 0) == 0 ? full.substr(5) : absl::StrCat(static_cast<int>(mode));
}

absl::Status CheckModeForModel(v1::Mode mode, bool encoder_decoder, const std::string& model_type,
                               const std::string& what) {
  if (!encoder_decoder && EncoderDecoderOnly(mode)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", ModeName(mode),
                     " needs an encoder-decoder model; this server's "
                     "model is ",
                     model_type,
                     " (decoder-only): use STRUCTURED, PARALLEL or "
                     "CONVENTIONAL"));
  }
  if (encoder_decoder && (mode == v1::MODE_STRUCTURED || mode == v1::MODE_PARALLEL)) {
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", ModeName(mode),
                     " is structured prompting, which is decoder-only; "
                     "this server's model is ",
                     model_type,
                     " (encoder-decoder): use "
                     "CONVENTIONAL, SAICL, FID, ENSEMBLE or GROUP_FID"));
  }
  return absl::OkStatus();
}

absl::StatusOr<T5TaskOptions> ToT5TaskOptions(const v1::TaskSpec& spec,
                                              const ServerConfig& config) {
  if (spec.group_length() != 0 || spec.rescale_factor() != 0 ||
      spec.alignment() != v1::ALIGNMENT_UNSPECIFIED) {
    return absl::InvalidArgumentError(
        "spec.group_length, spec.rescale_factor and spec.alignment shape decoder-only groups; "
        "leave them unset on an encoder-decoder (t5) model (spec.segment_length and spec.groups "
        "shape its prompts)");
  }
  // The fields both architectures share, read as for a decoder-only task.
  v1::TaskSpec shared = spec;
  shared.set_mode(v1::MODE_CONVENTIONAL);
  auto common = ToTaskOptions(shared, config);
  if (!common.ok()) return common.status();
  T5TaskOptions o;
  o.common = *std::move(common);
  switch (spec.mode()) {
    case v1::MODE_UNSPECIFIED:
    case v1::MODE_CONVENTIONAL:
      o.mode.mode = T5PromptMode::kConventional;
      break;
    case v1::MODE_SAICL:
      o.mode.mode = T5PromptMode::kSaicl;
      break;
    case v1::MODE_FID:
      o.mode.mode = T5PromptMode::kFid;
      break;
    case v1::MODE_ENSEMBLE:
      o.mode.mode = T5PromptMode::kEnsemble;
      break;
    case v1::MODE_GROUP_FID:
      o.mode.mode = T5PromptMode::kGroupFid;
      break;
    default:
      if (auto s = CheckModeForModel(spec.mode(), true, "t5", "spec.mode"); !s.ok()) return s;
      return absl::InvalidArgumentError(
          absl::StrCat("spec.mode ", static_cast<int>(spec.mode()), " is not a known mode"));
  }
  o.mode.groups = spec.groups();
  switch (spec.group_attention()) {
    case v1::GROUP_ATTENTION_UNSPECIFIED:
    case v1::GROUP_ATTENTION_SAICL:
      o.mode.group_attention = T5PromptAttention::kSaicl;
      break;
    case v1::GROUP_ATTENTION_FULL:
      o.mode.group_attention = T5PromptAttention::kFull;
      break;
    default:
      return absl::InvalidArgumentError("spec.group_attention is not a known attention");
  }
  // G is checked against the mode here, before anything is tokenized; against k by the engine.
  const bool grouped =
      o.mode.mode == T5PromptMode::kGroupFid || o.mode.mode == T5PromptMode::kEnsemble;
  if (o.mode.mode == T5PromptMode::kGroupFid && spec.groups() == 0) {
    return absl::InvalidArgumentError(
        "spec.groups must be set (1 to the number of demonstrations) for mode GROUP_FID");
  }
  if (!grouped && spec.groups() != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "spec.groups applies to GROUP_FID and ENSEMBLE only; it must be 0 for mode ",
        ModeName(spec.mode() == v1::MODE_UNSPECIFIED ? v1::MODE_CONVENTIONAL : spec.mode())));
  }
  if (spec.groups() > static_cast<uint32_t>(spec.groups() == 0 ? 0 : config.max_demonstrations)) {
    return absl::InvalidArgumentError(absl::StrCat("spec.groups ", spec.groups(),
                                                   " is more than --max_demonstrations ",
                                                   config.max_demonstrations));
  }
  o.segments.segment_length = spec.segment_length();
  o.segments.long_demonstrations = o.common.long_demonstrations;
  return o;
}

}  // namespace manyshot::server
