// make-induction-model: writes the hand-built induction model
// (engine/model/synthetic/induction_model.h), a Hugging Face model directory with the GPT-2
// tokenizer, and optionally the synthetic induction task (tools/induction_task.h) as JSONL splits
// for `manyshot eval`.
//
//   make-induction-model --out=/tmp/induction-model --dataset_out=/tmp/induction-task
//
// The same flags always give byte-identical files.
#include <cstdint>
#include <fstream>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_split.h"
#include "engine/model/synthetic/induction_model.h"
#include "engine/tokenizer/tokenizer.h"
#include "nlohmann/json.hpp"
#include "tools/induction_task.h"
#include "tools/stored_dtype_flag.h"

ABSL_FLAG(std::string, out, "", "model directory to write (created if missing); empty: none");
ABSL_FLAG(std::string, tokenizer_dir, "/usr/local/share/manyshot/gpt2",
          "GPT-2 vocab.json + merges.txt (or tokenizer.json) copied into the model");
ABSL_FLAG(uint64_t, seed, 0, "seed of the token codes");
ABSL_FLAG(int64_t, code_dims, 128, "code dimensions m (hidden size 2m)");
ABSL_FLAG(int64_t, max_position_embeddings, 2048, "context length");
ABSL_FLAG(std::string, dtype, "f32", "stored dtype: f32, f16 or bf16");
ABSL_FLAG(std::string, dataset_out, "",
          "also write the induction task here: train.jsonl, test.jsonl ({\"text\", \"label\"}) "
          "and task.json (template and labels)");
ABSL_FLAG(int64_t, keys, 256, "dataset: key words");
ABSL_FLAG(std::string, labels, "red,green,blue,yellow", "dataset: label words, comma-separated");
ABSL_FLAG(int64_t, train_per_key, 4, "dataset: demonstrations of each key in train.jsonl");
ABSL_FLAG(int64_t, test_size, 256, "dataset: test inputs");
ABSL_FLAG(uint64_t, dataset_seed, 1, "dataset: seed of keys, labels and splits");

namespace {

bool WriteJsonl(const std::string& path, const std::vector<manyshot::Example>& examples) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  for (const manyshot::Example& e : examples) {
    out << nlohmann::ordered_json{{"text", e.text}, {"label", e.label}}.dump() << "\n";
  }
  out.flush();
  if (!out) std::cerr << "make-induction-model: cannot write " << path << "\n";
  return static_cast<bool>(out);
}

int WriteDataset(const std::string& dir) {
  auto tokenizer = manyshot::LoadTokenizer(absl::GetFlag(FLAGS_tokenizer_dir));
  if (!tokenizer.ok()) {
    std::cerr << "make-induction-model: " << tokenizer.status() << "\n";
    return 1;
  }
  manyshot::InductionTaskSpec spec;
  spec.keys = absl::GetFlag(FLAGS_keys);
  spec.labels = absl::StrSplit(absl::GetFlag(FLAGS_labels), ',');
  spec.train_per_key = absl::GetFlag(FLAGS_train_per_key);
  spec.test_size = absl::GetFlag(FLAGS_test_size);
  spec.seed = absl::GetFlag(FLAGS_dataset_seed);
  auto data = manyshot::MakeInductionTask(**tokenizer, spec);
  if (!data.ok()) {
    std::cerr << "make-induction-model: " << data.status() << "\n";
    return 1;
  }
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) {
    std::cerr << "make-induction-model: " << dir << ": " << ec.message() << "\n";
    return 1;
  }
  const manyshot::TaskOptions options = manyshot::InductionTaskOptions(spec.labels);
  nlohmann::ordered_json task;
  task["input_template"] = options.input_template;
  task["answer_template"] = options.answer_template;
  task["separator"] = options.separator;
  task["labels"] = options.labels;
  task["keys"] = data->keys;
  std::ofstream out(std::filesystem::path(dir) / "task.json", std::ios::trunc);
  out << task.dump(2) << "\n";
  out.flush();
  if (!out || !WriteJsonl(dir + "/train.jsonl", data->train) ||
      !WriteJsonl(dir + "/test.jsonl", data->test)) {
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Writes the hand-built induction model (a circuit, not a trained language model) and, "
      "with --dataset_out, the synthetic task it solves.");
  absl::ParseCommandLine(argc, argv);
  const std::string out = absl::GetFlag(FLAGS_out);
  const std::string dataset_out = absl::GetFlag(FLAGS_dataset_out);
  if (out.empty() && dataset_out.empty()) {
    std::cerr << "give --out (the model) and/or --dataset_out (the task)\n";
    return 2;
  }
  if (!out.empty()) {
    manyshot::InductionModelSpec spec;
    spec.seed = absl::GetFlag(FLAGS_seed);
    spec.code_dims = absl::GetFlag(FLAGS_code_dims);
    spec.max_position_embeddings = absl::GetFlag(FLAGS_max_position_embeddings);
    if (!manyshot::ParseStoredDTypeFlag(absl::GetFlag(FLAGS_dtype), &spec.dtype)) return 2;
    absl::Status st = manyshot::WriteInductionModel(spec, absl::GetFlag(FLAGS_tokenizer_dir), out);
    if (!st.ok()) {
      std::cerr << "make-induction-model: " << st << "\n";
      return 1;
    }
  }
  return dataset_out.empty() ? 0 : WriteDataset(dataset_out);
}
