// Weight scales follow transformers' T5 initialisation (_init_weights: q ~ (d_model d_kv)^-1/2,
// k/v/wi ~ d_model^-1/2, o ~ inner^-1/2, wo ~ d_ff^-1/2) with q sharpened 1.5x and the relative
// position table at 1.0 (not d_model^-1/2), so that attention is peaked and position-dependent and
// a wrong bucket moves the goldens; embeddings N(0, 1) as T5's; norm weights 1 + 0.1 N(0, 1);
// an untied lm_head 2 d_model^-1/2 (logits of standard deviation about 2, as tiny_model.cc).
#include "engine/model/synthetic/tiny_t5_model.h"

#include <cmath>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "engine/model/synthetic/tiny_model.h"
#include "engine/model/t5_tensor_names.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

absl::Status Validate(const TinyT5Spec& s) {
  const T5Config& c = s.config;
  absl::Status sizes = CheckTinySizes("tiny T5 spec", {{"vocab_size", c.vocab_size},
                                                       {"d_model", c.d_model},
                                                       {"d_kv", c.d_kv},
                                                       {"d_ff", c.d_ff},
                                                       {"num_layers", c.num_layers},
                                                       {"num_decoder_layers", c.num_decoder_layers},
                                                       {"num_heads", c.num_heads}});
  if (!sizes.ok()) return sizes;
  if (c.relative_attention_num_buckets < 4 ||
      c.relative_attention_max_distance <= c.relative_attention_num_buckets / 2) {
    return absl::InvalidArgumentError(
        "tiny T5 spec: need num_buckets >= 4 and max_distance > num_buckets / 2");
  }
  if (s.shards < 1 || s.shards > 64) {
    return absl::InvalidArgumentError("tiny T5 spec: shards must be in [1, 64]");
  }
  return absl::OkStatus();
}

// (mean, standard deviation) of a tensor's values by its role.
std::pair<double, double> Scale(const T5Config& c, T5Role role) {
  const double d = static_cast<double>(c.d_model);
  switch (role) {
    case T5Role::kTokenEmbd:
      return {0.0, 1.0};
    case T5Role::kOutput:
      return {0.0, 2.0 / std::sqrt(d)};
    case T5Role::kAttnNorm:
    case T5Role::kCrossNorm:
    case T5Role::kFfnNorm:
    case T5Role::kOutputNorm:
      return {1.0, 0.1};
    case T5Role::kAttnQ:
    case T5Role::kCrossQ:
      return {0.0, 1.5 / std::sqrt(d * static_cast<double>(c.d_kv))};
    case T5Role::kAttnK:
    case T5Role::kAttnV:
    case T5Role::kCrossK:
    case T5Role::kCrossV:
    case T5Role::kFfnUp:
    case T5Role::kFfnGate:
      return {0.0, 1.0 / std::sqrt(d)};
    case T5Role::kAttnOut:
    case T5Role::kCrossOut:
      return {0.0, 1.0 / std::sqrt(static_cast<double>(c.inner_dim()))};
    case T5Role::kFfnDown:
      return {0.0, 1.0 / std::sqrt(static_cast<double>(c.d_ff))};
    case T5Role::kAttnRelBias:
      return {0.0, 1.0};
  }
  return {0.0, 1.0};
}

}  // namespace

absl::StatusOr<std::vector<TensorToWrite>> TinyT5Tensors(const TinyT5Spec& spec) {
  if (auto st = Validate(spec); !st.ok()) return st;
  std::vector<SeededTensor> tensors;
  for (const T5Tensor& t : T5ExpectedTensors(spec.config)) {
    auto [mean, sd] = Scale(spec.config, t.role);
    tensors.push_back({t.name, t.shape, mean, sd});
  }
  return SeededNormalTensors(spec.seed, spec.dtype, tensors);
}

absl::Status WriteTinyT5Model(const TinyT5Spec& spec, const std::filesystem::path& out_dir) {
  auto tensors = TinyT5Tensors(spec);
  if (!tensors.ok()) return tensors.status();
  std::error_code ec;
  std::filesystem::create_directories(out_dir, ec);
  if (ec) return absl::InternalError(absl::StrCat(out_dir.string(), ": ", ec.message()));
  T5Config config = spec.config;
  config.torch_dtype = TorchDTypeName(spec.dtype);
  nlohmann::ordered_json marker;
  marker["random_weights"] = true;
  marker["note"] =
      "tiny T5 with deterministic random weights (make-tiny-t5); outputs are meaningless";
  marker["seed"] = spec.seed;
  marker["shards"] = spec.shards;
  for (const auto& [file, text] :
       {std::pair<const char*, std::string>{"config.json", T5ConfigToJson(config)},
        {"manyshot_tiny_model.json", marker.dump(2) + "\n"}}) {
    std::ofstream f(out_dir / file, std::ios::binary | std::ios::trunc);
    f << text;
    if (!f) return absl::InternalError(absl::StrCat((out_dir / file).string(), ": write failed"));
  }
  return WriteModelSafetensors(out_dir, *tensors, spec.shards);
}

}  // namespace manyshot
