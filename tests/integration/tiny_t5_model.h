// A tiny random T5 model directory for server tests: make-tiny-t5's weights and config plus a
// Unigram tokenizer.json (T5's special ids, "▁", letters, ':' and a few words).
#pragma once

#include <filesystem>

namespace manyshot::testing {

// Writes the model into `model` (its parent must exist); a gtest failure if make-tiny-t5 fails.
void MakeTinyT5(const std::filesystem::path& model);

}  // namespace manyshot::testing
