#include "tests/engine/tokenizer/sentencepiece_fallback.h"

#include <unistd.h>

#include <fstream>
#include <string>
#include <system_error>
#include <unordered_map>

#include "absl/strings/str_cat.h"
#include "tests/engine/tokenizer/sp_processor.h"

namespace manyshot {
namespace {

namespace fs = std::filesystem;

// Llama-2's trainer settings (as recorded in its tokenizer.model), scaled down to a small
// vocabulary. One thread and no sampling or shuffling keep the result deterministic.
std::unordered_map<std::string, std::string> TrainerArgs(const fs::path& input) {
  return {
      {"input", input.string()},
      {"model_type", "bpe"},
      {"vocab_size", "4000"},
      {"character_coverage", "0.9995"},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      {"split_by_unicode_script", "true"},
      {"split_by_whitespace", "true"},
      {"allow_whitespace_only_pieces", "true"},
      {"normalization_rule_name", "identity"},
      {"remove_extra_whitespaces", "false"},
      {"add_dummy_prefix", "true"},
      {"max_sentencepiece_length", "16"},
      {"max_sentence_length", "16384"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"minloglevel", "2"},  // training is chatty; keep test output readable
  };
}

}  // namespace

absl::StatusOr<fs::path> FindOrTrainLlamaTokenizerModel(const fs::path& shared_dir,
                                                        const fs::path& work_dir,
                                                        const fs::path& training_text) {
  std::error_code ec;
  const fs::path real = shared_dir / "tokenizers" / "llama2" / "tokenizer.model";
  if (fs::is_regular_file(real, ec)) return real;
  const fs::path dir = work_dir / "llama_style_sp";
  const fs::path model = dir / "tokenizer.model";
  if (fs::is_regular_file(model, ec)) return model;
  if (!fs::is_regular_file(training_text, ec)) {
    return absl::NotFoundError(absl::StrCat("no Llama-2 model at ", real.string(),
                                            " and no training text at ", training_text.string()));
  }
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir.string(), ": ", ec.message()));
  std::string proto;
  const std::string error = SpProcessor::Train(TrainerArgs(training_text), &proto);
  if (!error.empty()) {
    return absl::InternalError(absl::StrCat("training a SentencePiece model: ", error));
  }
  // Write to a private name, then rename: concurrent test processes may train at once, and a
  // reader must never see a half-written model.
  const fs::path tmp = dir / absl::StrCat("tokenizer.model.tmp", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(proto.data(), static_cast<std::streamsize>(proto.size()));
    if (!out) return absl::InternalError(absl::StrCat(tmp.string(), ": write failed"));
  }
  fs::rename(tmp, model, ec);
  if (ec) return absl::InternalError(absl::StrCat(model.string(), ": ", ec.message()));
  return model;
}

absl::StatusOr<fs::path> FindOrTrainLlamaTokenizerModel(const fs::path& shared_dir,
                                                        const fs::path& work_dir) {
  // This file knows its source tree only through __FILE__ (an absolute path under CMake):
  // tests/engine/tokenizer/ -> tests/data/tokenizer/parity_sentences.txt.
  const fs::path sentences = fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" /
                             "tokenizer" / "parity_sentences.txt";
  return FindOrTrainLlamaTokenizerModel(shared_dir, work_dir, sentences);
}

}  // namespace manyshot
