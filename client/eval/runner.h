// The evaluation protocol of the structured-prompting paper (Table 1 / Figure 2), run against a
// manyshot server through its public gRPC API:
//   for every sample s (seed first_seed + s): a seeded permutation of the training split;
//   for every shot count N: a task holding the first N examples of that permutation (so a sample's
//     16 demonstrations are among its 64), created under a unique name and deleted afterwards;
//   for every mode: every test input streamed through StreamClassify with that mode (STRUCTURED:
//     rescale factor M; PARALLEL: factor 1; CONVENTIONAL: the demonstrations that fit one window),
//     accuracy = correct / inputs. Generation tasks (no label words) use Generate (greedy, up to
//     the first line break) and exact match instead.
// On an encoder-decoder (T5) server the modes are the SAICL paper's (CONVENTIONAL, SAICL, FID,
// ENSEMBLE, GROUP_FID), which are task-level: each (sample, shots) gets one task per mode, holding
// the same demonstrations. GetServerInfo decides which modes fit before any task is created:
// STRUCTURED / PARALLEL on T5, or a T5 mode on a decoder-only model, is FAILED_PRECONDITION.
// Accuracy is reported per (mode, shots) as the mean and the sample standard deviation over the
// samples. The test split is the first `test_limit` examples of a permutation seeded with
// first_seed, the same for every sample, shot count and mode.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "client/cli_context.h"
#include "client/eval/dataset.h"
#include "manyshot/v1/manyshot.pb.h"

namespace manyshot::client {

// The default shot counts (capped at the training split's size).
inline const std::vector<int64_t> kDefaultEvalShots = {1, 4, 16, 64, 256, 1000};

struct EvalPlan {
  std::vector<int64_t> shots = kDefaultEvalShots;
  bool shots_explicit = false;  // given by the user: a count above the training split is an error
  std::vector<v1::Mode> modes = {v1::MODE_STRUCTURED, v1::MODE_PARALLEL, v1::MODE_CONVENTIONAL};
  int samples = 3;          // demonstration samples (seeds first_seed .. first_seed + samples - 1)
  uint64_t first_seed = 1;  // also orders the test split
  size_t test_limit = 200;  // most test inputs (0: all)
  uint32_t group_length = 0;  // 0: the server's default (context window - query - answer room)
  // Room for a test input in tokens; 0: the dataset's (preset's) value, else the server default.
  uint32_t max_query_tokens = 0;
  // The task's answer template and demonstration separator; unset: the server's defaults
  // (" {label}" and "\n\n").
  std::optional<std::string> answer_template;
  std::optional<std::string> separator;
  // GROUP_FID's G (T5), capped at each task's shot count; required when modes has GROUP_FID.
  uint32_t groups = 0;
  size_t batch = 16;        // inputs per StreamClassify request
  std::string task_prefix;  // unique task names start with it; empty: "eval-<pid>-<random>"
};

// The room an evaluation's tasks reserve for a test input (unless --max_query_tokens or the
// preset says otherwise) and for an answer: the same on every server, so that results do not
// depend on a server's defaults.
inline constexpr uint32_t kEvalQueryRoom = 128;
inline constexpr uint32_t kEvalAnswerRoom = 32;

// One (mode, shots) cell.
struct EvalCell {
  v1::Mode mode = v1::MODE_STRUCTURED;
  int64_t shots = 0;
  std::vector<double> accuracy;  // per sample
  std::vector<int64_t> used;     // demonstrations the mode attended to, per sample
  double mean = 0;
  double std = 0;  // sample standard deviation (0 for one sample)
};

struct EvalReport {
  std::string model;  // model_type and path as the server reports them
  bool random_weights = false;
  uint32_t context_length = 0;
  std::string dataset;
  std::string input_template;
  std::vector<std::string> labels;
  bool generation = false;  // exact match through Generate
  size_t train_examples = 0;
  size_t test_examples = 0;  // used
  size_t test_available = 0;
  // The share of the most frequent gold label among the test inputs used: what a model that has
  // not learnt the task scores by always answering it (classification only).
  double majority_rate = 0;
  std::vector<uint64_t> seeds;
  std::vector<int64_t> shots;
  std::vector<v1::Mode> modes;
  uint32_t group_length = 0;    // as the server chose it
  std::vector<EvalCell> cells;  // modes outer, shots inner, in plan order
  double seconds = 0;           // wall time (not part of the JSON, which is deterministic)
};

// What the runner reports as it goes: one human-readable line per step.
using EvalProgress = std::function<void(const std::string& line)>;

// The shot counts a plan runs on a training split of `train_size`: default counts capped at the
// split (deduplicated), explicit counts checked (INVALID_ARGUMENT naming the count and the split).
absl::StatusOr<std::vector<int64_t>> ResolveShots(const EvalPlan& plan, size_t train_size,
                                                  const std::string& dataset);

// The first `count` indices of the permutation of [0, n) seeded with `seed` (std::mt19937_64,
// whose output the C++ standard fixes, driving a Fisher-Yates shuffle: reproducible everywhere).
std::vector<size_t> SampleIndices(size_t n, size_t count, uint64_t seed);

// Mean and sample standard deviation.
void Summarize(const std::vector<double>& values, double* mean, double* std);

// "structured", "parallel", "conventional", "saicl", "fid", "ensemble", "group_fid".
std::string ModeName(v1::Mode mode);

// OK when every mode runs on the server's architecture (`encoder_decoder`, model_type as
// GetServerInfo reports them); FAILED_PRECONDITION naming the first mode that does not and the
// modes that do. GROUP_FID without plan.groups is INVALID_ARGUMENT.
absl::Status CheckModesFitModel(const EvalPlan& plan, bool encoder_decoder,
                                const std::string& model_type);

// Runs the plan. Every task it creates is deleted before it returns, also on errors and when
// `*cancelled` becomes true (then CANCELLED). Errors from the server keep their gRPC code.
// Calls go through `cli` (its channel, bearer token and --timeout rules).
absl::StatusOr<EvalReport> RunEvaluation(const CliContext& cli, const EvalDataset& dataset,
                                         const EvalPlan& plan, const EvalProgress& progress,
                                         const std::atomic<bool>* cancelled = nullptr);

}  // namespace manyshot::client
