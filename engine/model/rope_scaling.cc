// RoPE scaling: parsing, writing, and the tables, after transformers' modeling_rope_utils.py.
//
// HF computes inv_freq with float32 torch ops. The scaled tables below repeat those ops one at a
// time, each evaluated in double and rounded to float (F), so the values match HF's to the last
// bit or so (torch's float pow may differ by an ulp); they are then widened exactly into the
// table's doubles. Python scalars that meet a float32 tensor are rounded to float first, as torch
// does with a wrapped scalar; HF's scalar-only arithmetic (YaRN's correction range, the attention
// factor) stays in double, as Python's.
#include "engine/model/rope_scaling.h"

#include <algorithm>
#include <cmath>
#include <numbers>
#include <vector>

#include "engine/core/status_macros.h"

namespace manyshot {
namespace {

using config_keys::KeyReader;

double F(double x) { return static_cast<double>(static_cast<float>(x)); }

absl::StatusOr<RopeType> ParseRopeType(const KeyReader& r) {
  std::string name;
  if (r.Has("rope_type")) {
    MANYSHOT_ASSIGN_OR_RETURN(name, r.String("rope_type", std::nullopt));
  } else if (r.Has("type")) {  // the legacy key HF still reads
    MANYSHOT_ASSIGN_OR_RETURN(name, r.String("type", std::nullopt));
  } else {
    return r.Error("rope_type", "is missing (nor is the legacy key \"type\" set)");
  }
  for (RopeType t : {RopeType::kDefault, RopeType::kLinear, RopeType::kDynamic, RopeType::kLlama3,
                     RopeType::kYarn}) {
    if (name == RopeTypeName(t)) return t;
  }
  return absl::UnimplementedError(
      absl::StrCat(r.file(), ": rope_type \"", name,
                   "\" is not supported (supported: ", SupportedRopeTypes(), ")"));
}

absl::StatusOr<std::optional<double>> OptionalNumber(const KeyReader& r, const char* key) {
  if (!r.Has(key)) return std::optional<double>();
  double v = 0;
  MANYSHOT_ASSIGN_OR_RETURN(v, r.PositiveNumber(key, std::nullopt));
  return std::optional<double>(v);
}

absl::Status ParseLlama3(const KeyReader& r, RopeScaling& s) {
  MANYSHOT_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                            r.PositiveInt("original_max_position_embeddings"));
  MANYSHOT_ASSIGN_OR_RETURN(s.low_freq_factor, r.PositiveNumber("low_freq_factor", std::nullopt));
  MANYSHOT_ASSIGN_OR_RETURN(s.high_freq_factor, r.PositiveNumber("high_freq_factor", std::nullopt));
  // HF only warns here, then divides by zero (or flips the ramp): refuse instead.
  if (s.high_freq_factor <= s.low_freq_factor) {
    return r.Error("high_freq_factor", "must exceed low_freq_factor");
  }
  return absl::OkStatus();
}

absl::Status ParseYarn(const KeyReader& r, RopeScaling& s) {
  if (r.Has("original_max_position_embeddings")) {
    MANYSHOT_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                              r.PositiveInt("original_max_position_embeddings"));
  }
  MANYSHOT_ASSIGN_OR_RETURN(s.attention_factor, OptionalNumber(r, "attention_factor"));
  MANYSHOT_ASSIGN_OR_RETURN(s.beta_fast, OptionalNumber(r, "beta_fast"));
  MANYSHOT_ASSIGN_OR_RETURN(s.beta_slow, OptionalNumber(r, "beta_slow"));
  MANYSHOT_ASSIGN_OR_RETURN(s.mscale, OptionalNumber(r, "mscale"));
  MANYSHOT_ASSIGN_OR_RETURN(s.mscale_all_dim, OptionalNumber(r, "mscale_all_dim"));
  if (r.Has("truncate")) {
    bool truncate = true;
    MANYSHOT_ASSIGN_OR_RETURN(truncate, r.Bool("truncate", true));
    s.truncate = truncate;
  }
  return absl::OkStatus();
}

// HF's float32 plain table: 1 / base^(float(2i) / dim).
std::vector<double> HfDefaultInvFreq(double theta, int64_t dim) {
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double exponent = F(F(2.0 * static_cast<double>(i)) / F(static_cast<double>(dim)));
    inv[i] = F(1.0 / F(std::pow(F(theta), exponent)));
  }
  return inv;
}

// Llama 3.1: long wavelengths divided by factor, short ones kept, a smooth ramp between.
std::vector<double> Llama3InvFreq(const RopeScaling& s, double theta, int64_t dim) {
  std::vector<double> inv = HfDefaultInvFreq(theta, dim);
  const double old_len = static_cast<double>(*s.original_max_position_embeddings);
  const double low_wavelen = F(old_len / s.low_freq_factor);
  const double high_wavelen = F(old_len / s.high_freq_factor);
  for (double& f : inv) {
    const double wavelen = F(F(2 * std::numbers::pi) / f);
    const double scaled = wavelen > low_wavelen ? F(f / F(s.factor)) : f;
    const double smooth = F(F(F(F(old_len) / wavelen) - F(s.low_freq_factor)) /
                            F(s.high_freq_factor - s.low_freq_factor));
    const double smoothed = F(F(F(F(1 - smooth) * scaled) / F(s.factor)) + F(smooth * scaled));
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : scaled;
  }
  return inv;
}

double YarnMscale(double scale, double mscale) {
  return scale <= 1 ? 1.0 : 0.1 * mscale * std::log(scale) + 1.0;
}

// HF reads the factor from original_max_position_embeddings when the config gives it.
double YarnFactor(const RopeScaling& s, int64_t max_position_embeddings) {
  if (!s.original_max_position_embeddings) return s.factor;
  return static_cast<double>(max_position_embeddings) /
         static_cast<double>(*s.original_max_position_embeddings);
}

double YarnAttentionFactor(const RopeScaling& s, double factor) {
  if (s.attention_factor) return *s.attention_factor;
  if (s.mscale && s.mscale_all_dim) {
    return YarnMscale(factor, *s.mscale) / YarnMscale(factor, *s.mscale_all_dim);
  }
  return YarnMscale(factor, 1.0);
}

// The [low, high] range of pair indices over which YaRN ramps from interpolation to extrapolation.
std::pair<double, double> YarnCorrectionRange(const RopeScaling& s, double theta, int64_t dim,
                                              int64_t original_max) {
  auto correction_dim = [&](double rotations) {
    return static_cast<double>(dim) *
           std::log(static_cast<double>(original_max) / (rotations * 2 * std::numbers::pi)) /
           (2 * std::log(theta));
  };
  double low = correction_dim(s.beta_fast.value_or(32));
  double high = correction_dim(s.beta_slow.value_or(1));
  if (s.truncate.value_or(true)) {
    low = std::floor(low);
    high = std::ceil(high);
  }
  low = std::max(low, 0.0);
  high = std::min(high, static_cast<double>(dim - 1));
  if (low == high) high += 0.001;  // HF's guard against a zero-width ramp
  return {low, high};
}

std::vector<double> YarnInvFreq(const RopeScaling& s, double theta, int64_t dim,
                                int64_t max_position_embeddings) {
  const double factor = YarnFactor(s, max_position_embeddings);
  const int64_t original_max = s.original_max_position_embeddings.value_or(max_position_embeddings);
  const auto [low, high] = YarnCorrectionRange(s, theta, dim, original_max);
  std::vector<double> inv(static_cast<size_t>(dim / 2));
  for (int64_t i = 0; i < dim / 2; ++i) {
    const double exponent = F(F(2.0 * static_cast<double>(i)) / F(static_cast<double>(dim)));
    const double pos_freq = F(std::pow(F(theta), exponent));
    const double extrapolation = F(1.0 / pos_freq);
    const double interpolation = F(1.0 / F(F(factor) * pos_freq));
    const double ramp = std::clamp(F(F(static_cast<double>(i) - F(low)) / F(high - low)), 0.0, 1.0);
    const double extrapolation_share = F(1 - ramp);
    inv[i] =
        F(F(interpolation * F(1 - extrapolation_share)) + F(extrapolation * extrapolation_share));
  }
  return inv;
}

}  // namespace

const char* SupportedRopeTypes() { return "default, linear, dynamic, llama3, yarn"; }

const char* RopeTypeName(RopeType type) {
  switch (type) {
    case RopeType::kLinear:
      return "linear";
    case RopeType::kDynamic:
      return "dynamic";
    case RopeType::kLlama3:
      return "llama3";
    case RopeType::kYarn:
      return "yarn";
    case RopeType::kDefault:
      break;
  }
  return "default";
}

absl::StatusOr<RopeScaling> ParseRopeScaling(const KeyReader& config) {
  RopeScaling s;
  if (!config.Has("rope_scaling")) return s;
  const config_keys::Json& obj = config.Value("rope_scaling");
  if (!obj.is_object()) return config.Error("rope_scaling", "must be an object or null");
  const KeyReader r(obj, config.file() + ": rope_scaling");
  MANYSHOT_ASSIGN_OR_RETURN(s.type, ParseRopeType(r));
  if (s.type == RopeType::kDefault) return s;
  MANYSHOT_ASSIGN_OR_RETURN(s.factor, r.PositiveNumber("factor", std::nullopt));
  if (s.type == RopeType::kDynamic && r.Has("original_max_position_embeddings")) {
    // Accepted as HF accepts it, and as HF unused: see ComputeRopeTable.
    MANYSHOT_ASSIGN_OR_RETURN(s.original_max_position_embeddings,
                              r.PositiveInt("original_max_position_embeddings"));
  }
  if (s.type == RopeType::kLlama3) MANYSHOT_RETURN_IF_ERROR(ParseLlama3(r, s));
  if (s.type == RopeType::kYarn) MANYSHOT_RETURN_IF_ERROR(ParseYarn(r, s));
  return s;
}

void RopeScalingToJson(const RopeScaling& s, nlohmann::ordered_json& j) {
  if (s.type == RopeType::kDefault) {
    j["rope_scaling"] = nullptr;
    return;
  }
  nlohmann::ordered_json o;
  o["rope_type"] = RopeTypeName(s.type);
  o["factor"] = s.factor;
  if (s.original_max_position_embeddings) {
    o["original_max_position_embeddings"] = *s.original_max_position_embeddings;
  }
  if (s.type == RopeType::kLlama3) {
    o["low_freq_factor"] = s.low_freq_factor;
    o["high_freq_factor"] = s.high_freq_factor;
  }
  const std::pair<const char*, const std::optional<double>*> optional[] = {
      {"attention_factor", &s.attention_factor},
      {"beta_fast", &s.beta_fast},
      {"beta_slow", &s.beta_slow},
      {"mscale", &s.mscale},
      {"mscale_all_dim", &s.mscale_all_dim}};
  for (const auto& [key, value] : optional) {
    if (value->has_value()) o[key] = **value;
  }
  if (s.truncate) o["truncate"] = *s.truncate;
  j["rope_scaling"] = std::move(o);
}

RopeTable ComputeRopeTable(const RopeScaling& s, double theta, int64_t head_dim,
                           int64_t max_position_embeddings) {
  RopeTable t;
  switch (s.type) {
    case RopeType::kDefault:
    // Dynamic NTK: HF builds its table for seq_len = max(sequence length,
    // max_position_embeddings) and only rebuilds it once a sequence runs past
    // max_position_embeddings; at that length the NTK base is theta * 1^(d/(d-2)) = theta. Manyshot
    // never runs past max_position_embeddings (rope_scaling's original_max_position_embeddings
    // plays no part, in HF as here), so dynamic is the plain table, bit for bit.
    case RopeType::kDynamic:
      return DefaultRopeTable(theta, head_dim);
    case RopeType::kLinear:
      t.inv_freq = HfDefaultInvFreq(theta, head_dim);
      for (double& f : t.inv_freq) f = F(f / F(s.factor));
      return t;
    case RopeType::kLlama3:
      t.inv_freq = Llama3InvFreq(s, theta, head_dim);
      return t;
    case RopeType::kYarn:
      t.inv_freq = YarnInvFreq(s, theta, head_dim, max_position_embeddings);
      t.attention_factor = YarnAttentionFactor(s, YarnFactor(s, max_position_embeddings));
      return t;
  }
  return DefaultRopeTable(theta, head_dim);
}

}  // namespace manyshot
