// What a client asks of a task when it registers one, whatever the model under it: templates,
// labels, group packing and the room kept for a query and its answer. Decoder-only tasks read all
// of it; T5 tasks read the templates, labels and limits (engine/t5/t5_task.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/task/input_truncation.h"

namespace manyshot {

enum class PromptMode : uint8_t { kStructured = 0, kConventional = 1, kParallel = 2 };
enum class Alignment : uint8_t { kTruncate = 0, kAttentionMask = 1, kPadSpace = 2 };
enum class LongDemonstrationPolicy : uint8_t { kReject = 0, kTruncate = 1 };

struct TaskOptions {
  std::string input_template;
  std::string answer_template = " {label}";
  std::string separator = "\n\n";
  std::vector<std::string> labels;
  uint64_t shuffle_seed = 0;
  int64_t group_length = 0;  // 0: context length - max_query_tokens - max_answer_tokens
  Alignment alignment = Alignment::kTruncate;
  PromptMode mode = PromptMode::kStructured;
  double rescale_factor = 0;  // 0: M
  LongDemonstrationPolicy long_demonstrations = LongDemonstrationPolicy::kReject;
  bool calibrate = false;
  std::string calibration_text = "N/A";
  // Room after the context for a query and its answer; 0: derived from the model's context
  // length (engine/task/query_room.h).
  int64_t max_query_tokens = 128;
  int64_t max_answer_tokens = 32;
  // What a query longer than max_query_tokens gets when its request does not say.
  InputTruncation input_truncation = InputTruncation::kNone;
  // Most bytes a rendered input may have (a demonstration's or a query's input template filled
  // in), checked before rendering; the server passes --max_input_bytes.
  size_t max_rendered_bytes = 64 * 1024;
};

// Per-request overrides of the task's mode, factor and input truncation.
struct QueryOverrides {
  std::optional<PromptMode> mode;
  std::optional<double> rescale_factor;
  std::optional<InputTruncation> truncation;
};

}  // namespace manyshot
