// Tiny random models; see tiny_model.h.
//
// Weight scales are chosen so the models behave like trained ones in the ways the engine's tests
// care about: logits with a standard deviation of about 2 (argmaxes are distinct and stable under
// f32 rounding) and peaked, position-dependent attention. Embeddings and lm_head use
// 2/sqrt(hidden) (the norms in front of them remove the scale anyway), projections 1/sqrt(fan_in),
// query/key projections 1.5/sqrt(fan_in) to sharpen attention, norm weights 1 + 0.1 N(0,1) and
// biases 0.1 N(0,1).
#include "engine/model/synthetic/tiny_model.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <functional>
#include <numeric>
#include <thread>

#include "absl/strings/str_cat.h"
#include "engine/model/arch_traits.h"
#include "engine/model/safetensors.h"
#include "engine/model/synthetic/model_directory.h"
#include "engine/model/tensor_names.h"
#include "nlohmann/json.hpp"

namespace manyshot {

uint64_t NormalRng::NextU64() {
  uint64_t z = (state_ += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

double NormalRng::NextNormal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // u1 in (0, 1] so log(u1) is finite; 53 random bits each.
  const double u1 = static_cast<double>((NextU64() >> 11) + 1) * 0x1.0p-53;
  const double u2 = static_cast<double>(NextU64() >> 11) * 0x1.0p-53;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 2.0 * M_PI * u2;
  spare_ = r * std::sin(theta);
  has_spare_ = true;
  return r * std::cos(theta);
}

namespace {

absl::Status Bad(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("tiny model spec: ", what));
}

bool IsLlamaFamily(const std::string& f) {
  return f == "llama" || f == "mistral" || f == "qwen2" || f == "phi3";
}

bool IsGemmaFamily(const std::string& f) { return f == "gemma" || f == "gemma2"; }

int64_t HeadDim(const TinyModelSpec& s) {
  return s.head_dim > 0 ? s.head_dim : s.hidden_size / s.num_heads;
}

absl::Status ValidateSpec(const TinyModelSpec& s) {
  if (!IsLlamaFamily(s.family) && !IsGemmaFamily(s.family) && s.family != "gpt2" &&
      s.family != "bloom" && s.family != "opt" && s.family != "gpt_neox") {
    return Bad(absl::StrCat(
        "unknown family \"", s.family,
        "\" (gpt2, llama, mistral, qwen2, phi3, gemma, gemma2, bloom, opt, gpt_neox)"));
  }
  if (s.head_dim != 0 && !IsGemmaFamily(s.family)) return Bad("only gemma sets head_dim");
  if (s.head_dim < 0 || s.head_dim > 1024) return Bad("head_dim must be in [0, 1024]");
  if (!s.pre_norm && s.family != "opt") return Bad("only opt has post-LN (pre_norm false) models");
  absl::Status sizes =
      CheckTinySizes("tiny model spec", {{"vocab_size", s.vocab_size},
                                         {"hidden_size", s.hidden_size},
                                         {"intermediate_size", s.intermediate_size},
                                         {"num_layers", s.num_layers},
                                         {"num_heads", s.num_heads},
                                         {"num_kv_heads", s.num_kv_heads},
                                         {"max_position_embeddings", s.max_position_embeddings}});
  if (!sizes.ok()) return sizes;
  if (s.head_dim == 0 && s.hidden_size % s.num_heads != 0) {
    return Bad("num_heads must divide hidden_size");
  }
  if (s.num_heads % s.num_kv_heads != 0) return Bad("num_kv_heads must divide num_heads");
  if (s.family == "gpt2") {
    if (s.num_kv_heads != s.num_heads) return Bad("gpt2 needs num_kv_heads == num_heads");
    if (!s.tie_word_embeddings) return Bad("gpt2 always ties word embeddings");
    if (!s.attention_bias) return Bad("gpt2 always has attention biases");
  } else if (s.family == "opt") {
    if (s.num_kv_heads != s.num_heads) return Bad("opt needs num_kv_heads == num_heads");
    if (!s.attention_bias) return Bad("opt always has attention biases");
  } else if (s.family == "bloom") {
    if (s.num_kv_heads != s.num_heads) return Bad("bloom needs num_kv_heads == num_heads");
    if (s.intermediate_size != 4 * s.hidden_size)
      return Bad("bloom needs intermediate_size 4*hidden");
    if (!s.attention_bias) return Bad("bloom always has attention biases");
  } else if (s.family == "gpt_neox") {
    if (s.num_kv_heads != s.num_heads) return Bad("gpt_neox needs num_kv_heads == num_heads");
    if ((s.hidden_size / s.num_heads) % 8 != 0) {
      return Bad("gpt_neox needs head_dim a multiple of 8 (rotary_pct 0.25, in pairs)");
    }
  } else {
    if (HeadDim(s) % 2 != 0) return Bad("head_dim must be even for RoPE");
    if (!(s.rope_theta > 0)) return Bad("rope_theta must be positive");
  }
  if (s.family == "qwen2" && !s.attention_bias) return Bad("qwen2 always has q/k/v biases");
  if (s.family == "mistral" && s.attention_bias) return Bad("mistral has no attention biases");
  if (s.family == "phi3" && s.attention_bias) return Bad("phi3 has no attention biases");
  if (IsGemmaFamily(s.family) && s.attention_bias) return Bad("gemma has no attention biases");
  if (s.shards < 1 || s.shards > 64) return Bad("shards must be in [1, 64]");
  return absl::OkStatus();
}

// Chooses (mean, std) for a tensor from its role.
std::pair<double, double> Scale(const ModelConfig& c, const ExpectedTensor& t) {
  if (t.part == TensorPart::kBias) return {0.0, 0.1};  // including LayerNorm's
  // Gemma stores w for a scale of 1 + w.
  if (IsNorm(t.role)) return {TraitsOf(c.architecture).norm_adds_one ? 0.0 : 1.0, 0.1};
  const double emb = 2.0 / std::sqrt(static_cast<double>(c.hidden_size));
  if (t.role == TensorRole::kTokenEmbd || t.role == TensorRole::kPosEmbd ||
      t.role == TensorRole::kOutput) {
    return {0.0, emb};
  }
  const bool in_out = TraitsOf(c.architecture).layout == WeightLayout::kInOut;
  const int64_t fan_in = in_out ? t.shape[0] : t.shape[1];
  double sd = 1.0 / std::sqrt(static_cast<double>(fan_in));
  if (t.role == TensorRole::kAttnQ || t.role == TensorRole::kAttnK ||
      t.role == TensorRole::kAttnQkv) {
    sd *= 1.5;
  }
  return {0.0, sd};
}

}  // namespace

absl::Status CheckTinySizes(absl::string_view spec,
                            absl::Span<const std::pair<const char*, int64_t>> sizes) {
  constexpr int64_t kMaxDim = int64_t{1} << 20;
  for (const auto& [name, v] : sizes) {
    if (v <= 0 || v > kMaxDim) {
      return absl::InvalidArgumentError(
          absl::StrCat(spec, ": ", name, " must be in [1, 2^20], got ", v));
    }
  }
  return absl::OkStatus();
}

std::vector<float> SeededNormalValues(uint64_t seed, const std::string& name,
                                      const std::vector<int64_t>& shape, double mean, double sd) {
  size_t n = 1;
  for (int64_t d : shape) n *= static_cast<size_t>(d);
  NormalRng rng(HashBytes(reinterpret_cast<const std::byte*>(name.data()), name.size(), seed));
  std::vector<float> v(n);
  for (float& x : v) x = static_cast<float>(mean + sd * rng.NextNormal());
  return v;
}

std::vector<TensorToWrite> SeededNormalTensors(uint64_t seed, DType dtype,
                                               const std::vector<SeededTensor>& tensors) {
  std::vector<TensorToWrite> out(tensors.size());
  // Largest first, so no thread is left with a big tensor at the end.
  std::vector<size_t> order(tensors.size());
  std::iota(order.begin(), order.end(), size_t{0});
  auto numel = [&](size_t i) {
    return std::accumulate(tensors[i].shape.begin(), tensors[i].shape.end(), int64_t{1},
                           std::multiplies<>());
  };
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return numel(a) > numel(b); });
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k; (k = next.fetch_add(1)) < order.size();) {
      const SeededTensor& t = tensors[order[k]];
      out[order[k]] = {t.name, dtype, t.shape,
                       SeededNormalValues(seed, t.name, t.shape, t.mean, t.sd)};
    }
  };
  const size_t threads =
      std::min<size_t>(std::max(1u, std::thread::hardware_concurrency()), tensors.size());
  std::vector<std::thread> pool;
  for (size_t i = 1; i < threads; ++i) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  return out;
}

std::string TorchDTypeName(DType stored) {
  return stored == DType::kF32 ? "float32" : stored == DType::kF16 ? "float16" : "bfloat16";
}

absl::StatusOr<ModelConfig> TinyModelConfig(const TinyModelSpec& spec) {
  absl::Status st = ValidateSpec(spec);
  if (!st.ok()) return st;
  ModelConfig c;
  c.model_type = spec.family;
  c.vocab_size = spec.vocab_size;
  c.hidden_size = spec.hidden_size;
  c.intermediate_size = spec.intermediate_size;
  c.num_layers = spec.num_layers;
  c.num_heads = spec.num_heads;
  c.num_kv_heads = spec.num_kv_heads;
  c.head_dim = HeadDim(spec);
  c.max_position_embeddings = spec.max_position_embeddings;
  c.tie_word_embeddings = spec.tie_word_embeddings;
  c.torch_dtype = TorchDTypeName(spec.dtype);
  if (spec.family == "gpt2") {
    c.architecture = Architecture::kGpt2;
    c.norm_eps = 1e-5f;
    c.hidden_act = "gelu_new";
    c.attention_bias = c.attention_out_bias = c.mlp_bias = true;
    c.rope_theta = 0;
    c.bos_token_id = 50256;
    c.eos_token_id = 50256;
  } else if (spec.family == "opt") {
    c.architecture = Architecture::kOpt;
    c.norm_eps = 1e-5f;
    c.hidden_act = "relu";
    c.attention_bias = c.attention_out_bias = c.mlp_bias = true;
    c.rope_theta = 0;
    c.pre_norm = spec.pre_norm;
    c.bos_token_id = 2;  // OPT's tokenizer: </s> 2 is both
    c.eos_token_id = 2;
  } else if (spec.family == "bloom") {
    c.architecture = Architecture::kBloom;
    c.norm_eps = 1e-5f;
    c.hidden_act = "bloom_gelu";
    c.attention_bias = c.attention_out_bias = c.mlp_bias = true;
    c.rope_theta = 0;
    c.bos_token_id = 1;  // BLOOM's tokenizer: <s> 1, </s> 2
    c.eos_token_id = 2;
  } else if (spec.family == "gpt_neox") {
    // Pythia's settings: a quarter of each head rotary, parallel residual, untied embed_out.
    c.architecture = Architecture::kGptNeox;
    c.norm_eps = 1e-5f;
    c.hidden_act = "gelu";
    c.rope_theta = spec.rope_theta;
    c.rotary_dims = c.head_dim / 4;
    c.parallel_residual = true;
    c.attention_bias = c.attention_out_bias = spec.attention_bias;
    c.mlp_bias = true;
    c.bos_token_id = 0;  // Pythia's tokenizer: <|endoftext|> 0 is both
    c.eos_token_id = 0;
  } else if (IsGemmaFamily(spec.family)) {
    // Gemma's settings; Gemma 2's caps, query scalar and window are config keys the goldens set.
    c.architecture = spec.family == "gemma2" ? Architecture::kGemma2 : Architecture::kGemma;
    c.norm_eps = 1e-6f;
    c.hidden_act = "gelu_pytorch_tanh";
    c.rope_theta = spec.rope_theta;
    c.bos_token_id = 2;  // Gemma's tokenizer: <bos> 2, <eos> 1
    c.eos_token_id = 1;
    if (spec.family == "gemma2") {
      c.attn_logit_softcap = 50.0f;
      c.final_logit_softcap = 30.0f;
      c.query_pre_attn_scalar = static_cast<float>(c.head_dim);
    }
  } else {
    c.architecture = spec.family == "phi3" ? Architecture::kPhi3 : Architecture::kLlama;
    c.norm_eps = 1e-5f;
    c.hidden_act = "silu";
    c.rope_theta = spec.rope_theta;
    c.attention_bias = spec.attention_bias;
    c.attention_out_bias = spec.family == "llama" && spec.attention_bias;  // HF llama: q,k,v,o
    c.bos_token_id = 1;
    c.eos_token_id = 2;
  }
  return c;
}

absl::StatusOr<std::vector<TensorToWrite>> TinyModelTensors(const TinyModelSpec& spec) {
  auto config = TinyModelConfig(spec);
  if (!config.ok()) return config.status();
  std::vector<SeededTensor> tensors;
  for (const ExpectedTensor& t : ExpectedTensors(*config)) {
    auto [mean, sd] = Scale(*config, t);
    tensors.push_back({t.name, t.shape, mean, sd});
  }
  return SeededNormalTensors(spec.seed, spec.dtype, tensors);
}

absl::Status WriteTinyModel(const TinyModelSpec& spec, const std::filesystem::path& tokenizer_dir,
                            const std::filesystem::path& out_dir) {
  auto config = TinyModelConfig(spec);
  if (!config.ok()) return config.status();
  auto tensors = TinyModelTensors(spec);
  if (!tensors.ok()) return tensors.status();

  nlohmann::ordered_json marker;
  marker["note"] = "manyshot tiny model: RANDOM weights for tests, not a trained model";
  marker["generator"] = "make-tiny-model";
  nlohmann::ordered_json js;
  js["family"] = spec.family;
  js["vocab_size"] = spec.vocab_size;
  js["hidden_size"] = spec.hidden_size;
  js["intermediate_size"] = spec.intermediate_size;
  js["num_layers"] = spec.num_layers;
  js["num_heads"] = spec.num_heads;
  js["num_kv_heads"] = spec.num_kv_heads;
  if (spec.head_dim != 0) js["head_dim"] = spec.head_dim;
  js["max_position_embeddings"] = spec.max_position_embeddings;
  js["tie_word_embeddings"] = spec.tie_word_embeddings;
  js["attention_bias"] = spec.attention_bias;
  js["dtype"] = std::string(DTypeName(spec.dtype));
  js["shards"] = spec.shards;
  js["seed"] = spec.seed;
  js["rope_theta"] = spec.rope_theta;
  js["pre_norm"] = spec.pre_norm;
  marker["spec"] = js;
  return WriteModelDirectory(*config, *tensors, spec.shards, "manyshot_tiny_model.json",
                             marker.dump(2) + "\n", tokenizer_dir, out_dir);
}

}  // namespace manyshot
