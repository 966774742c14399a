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

// Trains with `args` into `model` unless it exists already.
absl::StatusOr<fs::path> TrainOnce(const std::unordered_map<std::string, std::string>& args,
                                   const fs::path& model) {
  std::error_code ec;
  if (fs::is_regular_file(model, ec)) return model;
  const fs::path training_text = args.at("input");
  if (!fs::is_regular_file(training_text, ec)) {
    return absl::NotFoundError(absl::StrCat("no training text at ", training_text.string()));
  }
  const fs::path dir = model.parent_path();
  fs::create_directories(dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(dir.string(), ": ", ec.message()));
  std::string proto;
  const std::string error = SpProcessor::Train(args, &proto);
  if (!error.empty()) {
    return absl::InternalError(absl::StrCat("training a SentencePiece model: ", error));
  }
  // Write to a private name, then rename: concurrent test processes may train at once, and a
  // reader must never see a half-written model.
  const fs::path tmp = dir / absl::StrCat(model.filename().string(), ".tmp", ::getpid());
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(proto.data(), static_cast<std::streamsize>(proto.size()));
    if (!out) return absl::InternalError(absl::StrCat(tmp.string(), ": write failed"));
  }
  fs::rename(tmp, model, ec);
  if (ec) return absl::InternalError(absl::StrCat(model.string(), ": ", ec.message()));
  return model;
}

// This file knows its source tree only through __FILE__ (an absolute path under CMake):
// tests/engine/tokenizer/ -> tests/data/tokenizer/parity_sentences.txt.
fs::path ParitySentences() {
  return fs::path(__FILE__).parent_path().parent_path().parent_path() / "data" / "tokenizer" /
         "parity_sentences.txt";
}

}  // namespace

absl::StatusOr<fs::path> FindOrTrainLlamaTokenizerModel(const fs::path& shared_dir,
                                                        const fs::path& work_dir,
                                                        const fs::path& training_text) {
  std::error_code ec;
  const fs::path real = shared_dir / "tokenizers" / "llama2" / "tokenizer.model";
  if (fs::is_regular_file(real, ec)) return real;
  return TrainOnce(TrainerArgs(training_text), work_dir / "llama_style_sp" / "tokenizer.model");
}

absl::StatusOr<fs::path> TrainT5StyleUnigramModel(const fs::path& shared_dir,
                                                  const fs::path& work_dir, bool byte_fallback) {
  // Real English news text (AG News) when ../shared has it, else the committed parity sentences;
  // each trains its own model.
  std::error_code ec;
  const fs::path news = shared_dir / "datasets" / "agnews_cbu" / "test.csv";
  const bool have_news = fs::is_regular_file(news, ec);
  const fs::path text = have_news ? news : ParitySentences();
  // T5's spiece.model settings (nmt_nfkc rules, dummy prefix, whitespace folding, <pad>=0
  // </s>=1 <unk>=2, no <s>), scaled down to 4000 pieces. One thread and no sampling or
  // shuffling keep the result deterministic.
  std::unordered_map<std::string, std::string> args = {
      {"input", text.string()},
      {"model_type", "unigram"},
      {"vocab_size", "4000"},
      {"character_coverage", "0.9995"},
      {"byte_fallback", byte_fallback ? "true" : "false"},
      {"normalization_rule_name", "nmt_nfkc"},
      {"remove_extra_whitespaces", "true"},
      {"add_dummy_prefix", "true"},
      {"max_sentence_length", "16384"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"num_threads", "1"},
      {"pad_id", "0"},
      {"eos_id", "1"},
      {"unk_id", "2"},
      {"bos_id", "-1"},
      {"minloglevel", "2"},
  };
  if (byte_fallback) {
    // A user-defined piece (matched whole, never normalized) and a control one, so that parity
    // covers those piece types too.
    args["user_defined_symbols"] = "http";
    args["control_symbols"] = "<extra_id_0>";
  }
  const std::string name = absl::StrCat("t5_style_unigram_", have_news ? "news" : "parity",
                                        byte_fallback ? "_byte_fallback" : "");
  return TrainOnce(args, work_dir / name / "spiece.model");
}

absl::StatusOr<fs::path> TrainGemmaStyleBpeModel(const fs::path& work_dir,
                                                 const fs::path& training_text) {
  // Gemma's tokenizer.model settings: BPE with byte fallback, no dummy prefix, whitespace kept
  // (runs of spaces are pieces), digits split, <pad>=0 <eos>=1 <bos>=2 <unk>=3, chat turn markers
  // as user-defined pieces.
  std::unordered_map<std::string, std::string> args = TrainerArgs(training_text);
  args["add_dummy_prefix"] = "false";
  args["pad_id"] = "0";
  args["eos_id"] = "1";
  args["bos_id"] = "2";
  args["unk_id"] = "3";
  args["pad_piece"] = "<pad>";
  args["eos_piece"] = "<eos>";
  args["bos_piece"] = "<bos>";
  args["user_defined_symbols"] = "<start_of_turn>,<end_of_turn>";
  return TrainOnce(args, work_dir / "gemma_style_sp" / "tokenizer.model");
}

absl::StatusOr<fs::path> FindOrTrainLlamaTokenizerModel(const fs::path& shared_dir,
                                                        const fs::path& work_dir) {
  return FindOrTrainLlamaTokenizerModel(shared_dir, work_dir, ParitySentences());
}

}  // namespace manyshot
