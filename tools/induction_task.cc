// The synthetic induction task; see induction_task.h.
#include "tools/induction_task.h"

#include <algorithm>
#include <set>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "engine/prompting/groups.h"

namespace manyshot {
namespace {

bool IsLowercaseWord(const std::string& s) {
  if (s.size() < 4 || s.size() > 10) return false;
  for (char c : s) {
    if (!absl::ascii_islower(static_cast<unsigned char>(c))) return false;
  }
  return true;
}

// Whether `text` encodes to exactly one token (that token in *id when asked).
bool OneToken(const Tokenizer& tokenizer, const std::string& text, int32_t* id = nullptr) {
  auto tokens = tokenizer.Encode(text);
  if (!tokens.ok() || tokens->size() != 1) return false;
  if (id != nullptr) *id = (*tokens)[0];
  return true;
}

}  // namespace

TaskOptions InductionTaskOptions(const std::vector<std::string>& labels) {
  TaskOptions o;
  o.input_template = "{text}";
  o.answer_template = " {label}";
  o.separator = "\n";
  o.labels = labels;
  return o;
}

absl::StatusOr<InductionTaskData> MakeInductionTask(const Tokenizer& tokenizer,
                                                    const InductionTaskSpec& spec) {
  if (spec.keys < 1 || spec.train_per_key < 1 || spec.test_size < 0) {
    return absl::InvalidArgumentError(
        "induction task: keys and train_per_key must be at least 1, test_size at least 0");
  }
  if (spec.labels.size() < 2) {
    return absl::InvalidArgumentError("induction task: give at least two labels");
  }
  std::set<std::string> label_words;
  for (const std::string& label : spec.labels) {
    if (!OneToken(tokenizer, " " + label)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "induction task: label \"", label,
          "\" is not one token after a space; choose a common word (e.g. red, green, blue)"));
    }
    if (!label_words.insert(label).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("induction task: label \"", label, "\" is given twice"));
    }
  }

  // Candidate keys in id order, so the choice depends only on the vocabulary and the seed.
  std::vector<std::string> candidates;
  for (int64_t id = 0; id < tokenizer.vocab_size(); ++id) {
    auto text = tokenizer.Decode({static_cast<int32_t>(id)});
    if (!text.ok() || !IsLowercaseWord(*text) || label_words.count(*text) > 0) continue;
    int32_t own = -1;
    if (OneToken(tokenizer, *text, &own) && own == id && OneToken(tokenizer, " " + *text)) {
      candidates.push_back(*text);
    }
  }
  if (static_cast<int64_t>(candidates.size()) < spec.keys) {
    return absl::InvalidArgumentError(
        absl::StrCat("induction task: the vocabulary has ", candidates.size(),
                     " usable key words, fewer than the ", spec.keys, " asked for"));
  }

  InductionTaskData data;
  // Seeds of the three draws differ, so changing the test size never changes the keys.
  const std::vector<int64_t> key_order =
      ShuffledOrder(static_cast<int64_t>(candidates.size()), spec.seed * 3 + 1);
  std::vector<std::string> key_label(static_cast<size_t>(spec.keys));
  for (int64_t k = 0; k < spec.keys; ++k) {
    data.keys.push_back(candidates[static_cast<size_t>(key_order[static_cast<size_t>(k)])]);
    // Keys come in random order, so labels dealt round-robin are random and balanced.
    key_label[static_cast<size_t>(k)] = spec.labels[static_cast<size_t>(k) % spec.labels.size()];
  }
  std::vector<Example> train;
  for (int64_t r = 0; r < spec.train_per_key; ++r) {
    for (int64_t k = 0; k < spec.keys; ++k) {
      train.push_back({data.keys[static_cast<size_t>(k)], {}, key_label[static_cast<size_t>(k)]});
    }
  }
  for (int64_t i : ShuffledOrder(static_cast<int64_t>(train.size()), spec.seed * 3 + 2)) {
    data.train.push_back(train[static_cast<size_t>(i)]);
  }
  // Test keys: drawn without replacement from enough copies of the key list, so every key is
  // asked about equally often (within one) and labels stay balanced.
  const std::vector<int64_t> draws =
      ShuffledOrder(spec.keys * std::max<int64_t>(1, (spec.test_size + spec.keys - 1) / spec.keys),
                    spec.seed * 3 + 3);
  for (int64_t i = 0; i < spec.test_size; ++i) {
    const size_t k = static_cast<size_t>(draws[static_cast<size_t>(i)] % spec.keys);
    data.test.push_back({data.keys[k], {}, key_label[k]});
  }
  return data;
}

}  // namespace manyshot
