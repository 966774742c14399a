// A synthetic classification task whose answer is decidable from the demonstrations alone: every
// key word has one fixed label word, chosen at random, and nothing about the word tells which.
// A demonstration is "key label\n"; a query is the key, and its label can be known only by seeing
// a demonstration with the same key. With K keys and n demonstrations drawn at random, a query's
// key is among them with probability 1 - (1 - 1/K)^n, so accuracy rises with the shots from
// chance (1 / labels) to 1 for a model that copies (engine/model/synthetic/induction_model.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "engine/prompting/icl_task.h"
#include "engine/tokenizer/tokenizer.h"

namespace manyshot {

struct InductionTaskSpec {
  int64_t keys = 256;
  std::vector<std::string> labels = {"red", "green", "blue", "yellow"};
  int64_t train_per_key = 4;  // each key's demonstrations in the training split
  int64_t test_size = 256;    // test inputs: keys in random order, each about equally often
  uint64_t seed = 1;
};

struct InductionTaskData {
  std::vector<std::string> keys;  // in the order chosen
  std::vector<Example> train;     // shuffled; label = the label word
  std::vector<Example> test;
};

// The task's prompt: input "{text}", answer " {label}", separator "\n" (so the query's last token
// is the key itself, the token whose earlier successor an induction head copies).
TaskOptions InductionTaskOptions(const std::vector<std::string>& labels);

// Chooses `spec.keys` key words from the tokenizer's vocabulary (lowercase ASCII words of 4 to 10
// letters that encode to one token on their own and also exist as a word token after a space, so
// they read as words), assigns labels (balanced, at random) and draws the splits. Deterministic
// for a tokenizer and spec. INVALID_ARGUMENT when a label is not one token after a space, or the
// vocabulary has too few such words.
absl::StatusOr<InductionTaskData> MakeInductionTask(const Tokenizer& tokenizer,
                                                    const InductionTaskSpec& spec);

}  // namespace manyshot
