// The hand-written induction model; induction_model.h explains the circuit.
#include "engine/model/synthetic/induction_model.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "engine/model/synthetic/model_directory.h"
#include "engine/model/synthetic/tiny_model.h"
#include "engine/model/tensor_names.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("induction model spec: ", what));
}

absl::Status ValidateSpec(const InductionModelSpec& s) {
  if (s.code_dims < 4 || s.code_dims > 4096 || s.code_dims % 4 != 0) {
    return Bad(absl::StrCat("code_dims must be a multiple of 4 in [4, 4096], got ", s.code_dims));
  }
  if (s.vocab_size < 1) return Bad("vocab_size must be positive");
  // The kernel is checked (numerically, at rope_theta 1e12) up to 2^17 positions.
  if (s.max_position_embeddings < 2 || s.max_position_embeddings > (int64_t{1} << 17)) {
    return Bad(absl::StrCat("max_position_embeddings must be in [2, 131072], got ",
                            s.max_position_embeddings));
  }
  // The slowest pair that carries codes turns by 1/sqrt(rope_theta) per position; over the whole
  // context it must stay small (0.13 rad at 2^17 positions and 1e12), or matches blur.
  const double drift =
      static_cast<double>(s.max_position_embeddings) / std::sqrt(static_cast<double>(s.rope_theta));
  if (!(drift <= 0.15)) {
    return Bad(absl::StrCat("rope_theta ", s.rope_theta, " is too small for a context of ",
                            s.max_position_embeddings,
                            " positions: the code pairs would turn by more than 0.15 rad "
                            "(need max_position_embeddings / sqrt(rope_theta) <= 0.15)"));
  }
  for (int64_t id : {s.bos_token_id, s.eos_token_id}) {
    if (id < 0 || id >= s.vocab_size) {
      return Bad(
          absl::StrCat("bos/eos id ", id, " is outside the vocabulary [0, ", s.vocab_size, ")"));
    }
  }
  for (double v : {s.previous_token_gap, s.match_logit, s.answer_gain, s.answer_logit}) {
    if (!(v > 0 && v < 1e6)) return Bad("gaps, logits and the gain must be in (0, 1e6)");
  }
  return absl::OkStatus();
}

// The layout both heads and the residual stream share (m = code_dims):
// - residual dims [0, m): the current token's code; [m, 2m): the previous token's code;
// - head dims: rotary pair f is (f, f + m). Pairs [0, m/2) turn fast and carry the previous-token
//   head's positional q/k; pairs [m/2, m) turn slowest and carry codes (ContentDim).
struct Layout {
  int64_t m;
  int64_t hidden() const { return 2 * m; }
  int64_t CurrentDim(int64_t i) const { return i; }
  int64_t PreviousDim(int64_t i) const { return m + i; }
  // The head dim that carries code coordinate i: the slow pairs' first halves, then second halves.
  int64_t ContentDim(int64_t i) const { return i < m / 2 ? m / 2 + i : m + i; }
};

// Unit vectors, one per token: the rows of the (tied) embedding before scaling.
std::vector<float> TokenCodes(const InductionModelSpec& spec) {
  const int64_t m = spec.code_dims;
  std::vector<float> codes(static_cast<size_t>(spec.vocab_size * m));
  NormalRng rng(spec.seed ^ 0x1d0c7105ull);
  std::vector<double> row(static_cast<size_t>(m));
  for (int64_t t = 0; t < spec.vocab_size; ++t) {
    double norm2 = 0;
    for (double& x : row) {
      x = rng.NextNormal();
      norm2 += x * x;
    }
    const double inv = 1.0 / std::sqrt(norm2);
    for (int64_t i = 0; i < m; ++i) codes[static_cast<size_t>(t * m + i)] = float(row[i] * inv);
  }
  return codes;
}

// Rotary angle per position of pair f, computed as the engine does (the float theta, in double).
double PairFrequency(const InductionModelSpec& spec, int64_t f) {
  const double dim = static_cast<double>(2 * spec.code_dims);
  return std::pow(static_cast<double>(spec.rope_theta), -2.0 * static_cast<double>(f) / dim);
}

// The per-pair weight of the previous-token kernel: its score at distance 0 (the nearest rival:
// every other distance is lower) is sum_f w (1 - cos theta_f) below the peak.
double PreviousTokenPairWeight(const InductionModelSpec& spec) {
  double gap_per_weight = 0;
  for (int64_t f = 0; f < spec.code_dims / 2; ++f) {
    gap_per_weight += 1 - std::cos(PairFrequency(spec, f));
  }
  return spec.previous_token_gap / gap_per_weight;
}

// Parses the layer index out of "model.layers.N.…"; -1 for global tensors.
int64_t LayerOf(const std::string& name) {
  constexpr absl::string_view kPrefix = "model.layers.";
  if (!absl::StartsWith(name, kPrefix)) return -1;
  const size_t end = name.find('.', kPrefix.size());
  int64_t layer = -1;
  if (!absl::SimpleAtoi(name.substr(kPrefix.size(), end - kPrefix.size()), &layer)) return -1;
  return layer;
}

class Writer {
 public:
  explicit Writer(const InductionModelSpec& spec) : spec_(spec), l_{spec.code_dims} {
    const double hidden = static_cast<double>(l_.hidden());
    // The embedding row of t is sqrt(2m) u_t, so every row has RMS 1 over the stream and the
    // first norm divides by ~1 (eps 1e-5 is negligible).
    embed_scale_ = std::sqrt(hidden);
    // Layer 1's input holds two unit codes, each scaled by sqrt(2m): its norm divides by sqrt(2),
    // so a code arrives as sqrt(m) u. q = s * that, k = s * that; score = s^2 m (u.u') / sqrt(2m).
    const double arriving = std::sqrt(hidden / 2);
    qk_scale_ = std::sqrt(spec.match_logit * std::sqrt(hidden)) / arriving;
    layer1_value_scale_ = embed_scale_ / arriving;
    // The final stream is sqrt(2m) (u_cur + g u_copied | u_prev); its norm divides by
    // sqrt(2 + g^2) (codes roughly orthogonal); the tied head multiplies by sqrt(2m) u_t.
    const double g = spec.answer_gain;
    final_norm_weight_ = spec.answer_logit * std::sqrt(2 + g * g) / (hidden * g);
    prev_pair_amplitude_ = std::sqrt(PreviousTokenPairWeight(spec) * std::sqrt(hidden));
  }

  void Fill(const std::string& name, std::vector<float>& data) const {
    const int64_t m = l_.m, H = l_.hidden();
    const int64_t layer = LayerOf(name);
    auto at = [&](int64_t row, int64_t col) -> float& {
      return data[static_cast<size_t>(row * H + col)];  // [out, in]
    };
    if (absl::EndsWith(name, "embed_tokens.weight")) {
      const std::vector<float> codes = TokenCodes(spec_);
      for (int64_t t = 0; t < spec_.vocab_size; ++t) {
        for (int64_t i = 0; i < m; ++i) {
          data[static_cast<size_t>(t * H + l_.CurrentDim(i))] =
              static_cast<float>(embed_scale_ * codes[static_cast<size_t>(t * m + i)]);
        }
      }
    } else if (name == "model.norm.weight") {
      std::fill(data.begin(), data.end(), static_cast<float>(final_norm_weight_));
    } else if (absl::EndsWith(name, "layernorm.weight")) {
      std::fill(data.begin(), data.end(), 1.0f);
    } else if (layer == 0 && absl::EndsWith(name, "q_proj.bias")) {
      for (int64_t f = 0; f < m / 2; ++f) data[f] = static_cast<float>(prev_pair_amplitude_);
    } else if (layer == 0 && absl::EndsWith(name, "k_proj.bias")) {
      // k = q turned forward by one position: the score peaks where the key is one behind.
      for (int64_t f = 0; f < m / 2; ++f) {
        const double theta = PairFrequency(spec_, f);
        data[f] = static_cast<float>(prev_pair_amplitude_ * std::cos(theta));
        data[f + m] = static_cast<float>(prev_pair_amplitude_ * std::sin(theta));
      }
    } else if (layer == 0 && absl::EndsWith(name, "v_proj.weight")) {
      for (int64_t i = 0; i < m; ++i) at(l_.ContentDim(i), l_.CurrentDim(i)) = 1.0f;
    } else if (layer == 0 && absl::EndsWith(name, "o_proj.weight")) {
      for (int64_t i = 0; i < m; ++i) at(l_.PreviousDim(i), l_.ContentDim(i)) = 1.0f;
    } else if (layer == 1 && absl::EndsWith(name, "q_proj.weight")) {
      for (int64_t i = 0; i < m; ++i) {
        at(l_.ContentDim(i), l_.CurrentDim(i)) = static_cast<float>(qk_scale_);
      }
    } else if (layer == 1 && absl::EndsWith(name, "k_proj.weight")) {
      for (int64_t i = 0; i < m; ++i) {
        at(l_.ContentDim(i), l_.PreviousDim(i)) = static_cast<float>(qk_scale_);
      }
    } else if (layer == 1 && absl::EndsWith(name, "v_proj.weight")) {
      for (int64_t i = 0; i < m; ++i) {
        at(l_.ContentDim(i), l_.CurrentDim(i)) = static_cast<float>(layer1_value_scale_);
      }
    } else if (layer == 1 && absl::EndsWith(name, "o_proj.weight")) {
      for (int64_t i = 0; i < m; ++i) {
        at(l_.CurrentDim(i), l_.ContentDim(i)) = static_cast<float>(spec_.answer_gain);
      }
    }
    // Everything else stays zero: the other projections and biases, and the MLPs (a zero
    // down-projection adds nothing to the stream).
  }

 private:
  const InductionModelSpec& spec_;
  Layout l_;
  double embed_scale_ = 0, qk_scale_ = 0, layer1_value_scale_ = 0, final_norm_weight_ = 0;
  double prev_pair_amplitude_ = 0;
};

}  // namespace

absl::StatusOr<ModelConfig> InductionModelConfig(const InductionModelSpec& spec) {
  if (absl::Status st = ValidateSpec(spec); !st.ok()) return st;
  TinyModelSpec shape;
  shape.family = "llama";
  shape.vocab_size = spec.vocab_size;
  shape.hidden_size = 2 * spec.code_dims;
  shape.intermediate_size = 4;  // the MLPs are zero; the smallest width that is still a model
  shape.num_layers = 2;
  shape.num_heads = 1;
  shape.num_kv_heads = 1;
  shape.max_position_embeddings = spec.max_position_embeddings;
  shape.tie_word_embeddings = true;
  shape.attention_bias = true;
  shape.dtype = spec.dtype;
  shape.rope_theta = spec.rope_theta;
  auto config = TinyModelConfig(shape);
  if (!config.ok()) return config.status();
  config->bos_token_id = spec.bos_token_id;
  config->eos_token_id = spec.eos_token_id;
  return config;
}

absl::StatusOr<std::vector<TensorToWrite>> InductionModelTensors(const InductionModelSpec& spec) {
  auto config = InductionModelConfig(spec);
  if (!config.ok()) return config.status();
  const Writer writer(spec);
  std::vector<TensorToWrite> out;
  for (const ExpectedTensor& t : ExpectedTensors(*config)) {
    size_t n = 1;
    for (int64_t d : t.shape) n *= static_cast<size_t>(d);
    std::vector<float> data(n, 0.0f);
    writer.Fill(t.name, data);
    out.push_back({t.name, spec.dtype, t.shape, std::move(data)});
  }
  return out;
}

absl::Status WriteInductionModel(const InductionModelSpec& spec,
                                 const std::filesystem::path& tokenizer_dir,
                                 const std::filesystem::path& out_dir) {
  auto config = InductionModelConfig(spec);
  if (!config.ok()) return config.status();
  auto tensors = InductionModelTensors(spec);
  if (!tensors.ok()) return tensors.status();
  nlohmann::ordered_json marker;
  marker["note"] =
      "manyshot induction model: weights written by hand for one behaviour (induction: after "
      "'... A B ... A' it predicts 'B'); a circuit for tests and evaluation, not a trained "
      "language model (engine/model/synthetic/induction_model.h)";
  marker["generator"] = "make-induction-model";
  nlohmann::ordered_json js;
  js["vocab_size"] = spec.vocab_size;
  js["bos_token_id"] = spec.bos_token_id;
  js["eos_token_id"] = spec.eos_token_id;
  js["code_dims"] = spec.code_dims;
  js["max_position_embeddings"] = spec.max_position_embeddings;
  js["rope_theta"] = spec.rope_theta;
  js["previous_token_gap"] = spec.previous_token_gap;
  js["match_logit"] = spec.match_logit;
  js["answer_gain"] = spec.answer_gain;
  js["answer_logit"] = spec.answer_logit;
  js["seed"] = spec.seed;
  js["dtype"] = std::string(DTypeName(spec.dtype));
  marker["spec"] = js;
  return WriteModelDirectory(*config, *tensors, /*shards=*/1, kInductionModelMarker,
                             marker.dump(2) + "\n", tokenizer_dir, out_dir);
}

}  // namespace manyshot
