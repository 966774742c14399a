// SentencePiece models for the tokenizer tests. A Llama-style one: the real Llama-2 tokenizer.model
// when the shared data directory has it, else a small BPE model with byte fallback trained
// deterministically on the committed parity sentences (so tests run on a fresh machine too).
// Training needs libsentencepiece (through sp_processor.h), which only test binaries link.
#ifndef MANYSHOT_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_FALLBACK_H_
#define MANYSHOT_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_FALLBACK_H_

#include <filesystem>

#include "absl/status/statusor.h"

namespace manyshot {

// shared_dir/tokenizers/llama2/tokenizer.model if it exists. Otherwise trains (once; a later
// call reuses work_dir/llama_style_sp/tokenizer.model) a BPE model with Llama-2's settings
// (identity normalization, dummy prefix, no whitespace folding, digits split, byte fallback,
// <unk>=0 <s>=1 </s>=2) and a vocabulary of about 4000 on training_text, a file of sentences.
absl::StatusOr<std::filesystem::path> FindOrTrainLlamaTokenizerModel(
    const std::filesystem::path& shared_dir, const std::filesystem::path& work_dir,
    const std::filesystem::path& training_text);

// The same, with training_text = <source_dir>/tests/data/tokenizer/parity_sentences.txt.
absl::StatusOr<std::filesystem::path> FindOrTrainLlamaTokenizerModel(
    const std::filesystem::path& shared_dir, const std::filesystem::path& work_dir);

// A T5-style SentencePiece Unigram model (nmt_nfkc rules, 4000 pieces), trained once into
// work_dir (a later call reuses it) on real text: ../shared's AG News test set when shared_dir has
// it, else the parity sentences. With byte_fallback it also has a user-defined piece ("http") and
// a control piece ("<extra_id_0>").
absl::StatusOr<std::filesystem::path> TrainT5StyleUnigramModel(
    const std::filesystem::path& shared_dir, const std::filesystem::path& work_dir,
    bool byte_fallback);

// A Gemma-style SentencePiece BPE model (tokenizer.model as Gemma ships it: byte fallback, no
// dummy prefix, <pad>=0 <eos>=1 <bos>=2 <unk>=3, "<start_of_turn>" / "<end_of_turn>" user-defined
// pieces), trained once into work_dir on training_text, a file of sentences.
absl::StatusOr<std::filesystem::path> TrainGemmaStyleBpeModel(
    const std::filesystem::path& work_dir, const std::filesystem::path& training_text);

}  // namespace manyshot

#endif  // MANYSHOT_TESTS_ENGINE_TOKENIZER_SENTENCEPIECE_FALLBACK_H_
