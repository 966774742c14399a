// What a caller asks of a task of any kind, in no API's terms: the options every kind shares
// (TaskOptions) and the mode and prompt shape, whose meaning depends on the served model's
// architecture. ServedModel::CheckTaskOptions says which apply to the model it serves.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "engine/task/task_options.h"

namespace manyshot {

// Every mode of every architecture: STRUCTURED and PARALLEL (decoder-only), SAICL, FID, ENSEMBLE
// and GROUP_FID (encoder-decoder), CONVENTIONAL (both).
enum class ServedMode : uint8_t {
  kStructured,
  kParallel,
  kConventional,
  kSaicl,
  kFid,
  kEnsemble,
  kGroupFid,
};

// "STRUCTURED", "SAICL", ... for messages.
const char* ServedModeName(ServedMode mode);

// How a group's demonstrations attend to each other in an encoder-decoder group prompt.
enum class GroupAttention : uint8_t { kSaicl, kFull };

struct ServedTaskOptions {
  // Templates, labels, limits and the decoder-only group packing. `common.mode` is not read: the
  // model sets it from `mode`.
  TaskOptions common;
  // Unset: the architecture's default (STRUCTURED decoder-only, CONVENTIONAL encoder-decoder).
  std::optional<ServedMode> mode;
  // The caller set the decoder-only packing (group_length, rescale_factor or alignment): an
  // encoder-decoder model refuses it rather than ignore it.
  bool sets_group_packing = false;
  // The encoder-decoder prompt shape: G, S and the group attention (unset: SAICL).
  uint32_t groups = 0;
  uint32_t segment_length = 0;
  std::optional<GroupAttention> group_attention;
  // Prepended to option names in errors ("spec." names the API's TaskSpec fields).
  std::string field_prefix;
};

}  // namespace manyshot
