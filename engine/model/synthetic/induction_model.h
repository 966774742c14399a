// A tiny Llama-family model whose weights are written by hand so that it provably does one kind of
// in-context learning: induction ("... A B ... A" -> "B"). It is a circuit, not a trained language
// model: it knows no language and predicts nothing useful outside that behaviour. Tests and the
// evaluation harness use it because its right answer is decidable from the demonstrations alone,
// so accuracy must rise as more of them are in the context.
//
// The circuit (hidden size = head dim = 2m, one head per layer, MLPs zero, embeddings tied):
// - Every token t has a code u_t, a random unit vector in R^m (deterministic from the seed). The
//   embedding writes sqrt(2m) * u_t into the first half of the residual stream ("current token").
// - Layer 0, previous-token head: q and k are constant (biases only) and live in the rotary pairs
//   that turn fast; k is q turned by one position's angle, so the score sum_f w cos((i-j-1)
//   theta_f) peaks at j = i - 1 (a Dirichlet-like kernel) and is lower by at least
//   `previous_token_gap` at every other distance (the nearest rivals are distances 0 and 2;
//   checked numerically at rope_theta 1e12 for code_dims 16..256 below 2^17 positions, the
//   longest context the spec allows). The value is the current-token code; the
//   output goes to the second half of the stream ("previous token").
// - Layer 1, induction head: q reads the current-token half, k the previous-token half, both in
//   the rotary pairs that (with rope_theta 1e12) barely turn over the whole window, so the score is
//   `match_logit` * (u_query . u_prev(key)): content, not position. A key whose previous token is
//   the query's current token wins by about `match_logit`; its value (its own code) is added,
//   `answer_gain` times stronger than the current token, to the current-token half.
// - The tied unembedding then scores every token t by u_t . (u_current + gain * u_copied): the
//   token that followed an earlier occurrence of the current token gets `answer_logit`.
// With m = 128, random codes overlap by about 1/sqrt(128) ~ 0.09, so unrelated keys score about
// +-5 against a match's 60; both heads work inside a structured-prompting group and across
// groups, because the previous-token head is relative and the induction head content-based.
#pragma once

#include <cstdint>
#include <filesystem>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "engine/core/dtype.h"
#include "engine/model/model_config.h"
#include "engine/model/synthetic/safetensors_writer.h"

namespace manyshot {

struct InductionModelSpec {
  int64_t vocab_size = 50257;    // GPT-2's; the tokenizer's must not be larger
  int64_t bos_token_id = 50256;  // GPT-2's <|endoftext|>
  int64_t eos_token_id = 50256;
  int64_t code_dims = 128;                 // m: hidden size and head dim are 2m; even
  int64_t max_position_embeddings = 2048;  // at most 2^17
  float rope_theta = 1e12f;                // at least 1e9
  double previous_token_gap = 16;          // layer 0: score of the previous token minus any other's
  double match_logit = 60;                 // layer 1: score of a key whose previous token matches
  double answer_gain = 3;                  // copied token vs current token in the output
  double answer_logit = 15;                // output logit of the copied token
  uint64_t seed = 0;
  DType dtype = DType::kF32;
};

// The config.json contents (Llama, 2 layers, 1 head, tied embeddings, q/k/v/o biases).
absl::StatusOr<ModelConfig> InductionModelConfig(const InductionModelSpec& spec);

// The tensors, named and shaped as ExpectedTensors(InductionModelConfig(spec)) says.
absl::StatusOr<std::vector<TensorToWrite>> InductionModelTensors(const InductionModelSpec& spec);

// The marker file WriteInductionModel leaves in the model directory: JSON whose "note" says what
// the model is (the server reports it: engine/serving/model_marker.h, ReadModelMarker).
inline constexpr char kInductionModelMarker[] = "manyshot_induction_model.json";

// Writes the model directory (config, weights, tokenizer files copied from tokenizer_dir, and the
// marker kInductionModelMarker saying what the model is). Deterministic: the same spec
// gives byte-identical files.
absl::Status WriteInductionModel(const InductionModelSpec& spec,
                                 const std::filesystem::path& tokenizer_dir,
                                 const std::filesystem::path& out_dir);

}  // namespace manyshot
