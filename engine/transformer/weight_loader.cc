#include "engine/transformer/weight_loader.h"

#include <algorithm>
#include <initializer_list>
#include <numeric>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_traits.h"
#include "engine/model/tensor_names.h"

namespace manyshot {

std::vector<int64_t> RotaryDimOrder(int64_t head_dim, int64_t rotary_dims) {
  const int64_t half = head_dim / 2, rotary_half = rotary_dims / 2;
  const int64_t pass_half = half - rotary_half;  // pass-through dimensions per half
  std::vector<int64_t> order(static_cast<size_t>(head_dim));
  for (int64_t p = 0; p < half; ++p) {
    order[p] = p < rotary_half ? p : rotary_dims + (p - rotary_half);
    order[half + p] =
        p < rotary_half ? rotary_half + p : rotary_dims + pass_half + (p - rotary_half);
  }
  return order;
}

RopeTable HeldRopeTable(const ModelConfig& c) {
  const int64_t rotary = c.rotary_dims == 0 ? c.head_dim : c.rotary_dims;
  RopeTable table =
      ComputeRopeTable(c.rope_scaling, c.rope_theta, rotary, c.max_position_embeddings);
  table.inv_freq.resize(static_cast<size_t>(c.head_dim / 2), 0.0);
  return table;
}

namespace {

// Reads tensors from a checkpoint into backend tensors, fusing several checkpoint tensors along
// the output dimension where the forward pass wants one GEMM, and holding every projection weight
// [out, in] whatever the checkpoint's layout (LayerWeights says why).
class WeightReader {
 public:
  // Matrices (rank 2: Linear weights, embedding tables) are stored in `matrix_dtype`, the rest
  // (norm weights, biases) in the compute dtype `dtype`.
  WeightReader(const SafetensorsArchive& archive, Architecture arch, Backend& backend, DType dtype,
               DType matrix_dtype)
      : archive_(archive),
        arch_(arch),
        backend_(backend),
        dtype_(dtype),
        matrix_dtype_(matrix_dtype) {}

  // `add` is added to every value (Gemma's norm weights are held as 1 + w).
  absl::StatusOr<Tensor> Read(std::string_view name, std::vector<int64_t> shape,
                              bool transpose = false, float add = 0.0f) {
    return Fuse({{std::string(name), shape}}, transpose, add);
  }

  // Concatenates tensors along rows (dim 0). With `transpose`, each part is a matrix [in, out_i]
  // (a Conv1D projection) and is transposed first, so the result is [sum of out_i, in].
  absl::StatusOr<Tensor> Fuse(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts, bool transpose,
      float add = 0.0f) {
    std::vector<int64_t> shape = parts.front().second;
    if (transpose) std::swap(shape[0], shape[1]);
    shape[0] = 0;
    for (const auto& [name, s] : parts) shape[0] += transpose ? s[1] : s[0];
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> host(numel), stored;
    int64_t offset = 0;
    for (const auto& [name, s] : parts) {
      int64_t n = 1;
      for (int64_t d : s) n *= d;
      if (!transpose) {
        MANYSHOT_RETURN_IF_ERROR(
            ReadModelTensorF32(archive_, arch_, name, s, host.data() + offset));
      } else {
        stored.resize(static_cast<size_t>(n));
        MANYSHOT_RETURN_IF_ERROR(ReadModelTensorF32(archive_, arch_, name, s, stored.data()));
        const int64_t in = s[0], out = s[1];
        float* dst = host.data() + offset;
        for (int64_t i = 0; i < in; ++i) {
          for (int64_t o = 0; o < out; ++o) dst[o * in + i] = stored[i * out + o];
        }
      }
      offset += n;
    }
    if (add != 0.0f) {
      for (float& value : host) value += add;
    }
    return Upload(host, shape);
  }

  // A tensor whose rows (dim 0) are reordered: row i of the result is row order[i] of the
  // checkpoint's (BLOOM's per-head q|k|v units into q | k | v).
  absl::StatusOr<Tensor> ReadPermutedRows(std::string_view name, std::vector<int64_t> shape,
                                          const std::vector<int64_t>& order) {
    int64_t numel = 1;
    for (int64_t d : shape) numel *= d;
    std::vector<float> stored(numel), host(numel);
    auto status = ReadModelTensorF32(archive_, arch_, name, shape, stored.data());
    if (!status.ok()) return status;
    const int64_t width = numel / shape[0];
    for (int64_t i = 0; i < shape[0]; ++i) {
      std::copy(stored.begin() + order[i] * width, stored.begin() + (order[i] + 1) * width,
                host.begin() + i * width);
    }
    return Upload(host, shape);
  }

 private:
  // Host f32 values to a backend tensor: matrices in the matrix dtype, the rest in the compute
  // dtype.
  absl::StatusOr<Tensor> Upload(const std::vector<float>& host, const std::vector<int64_t>& shape) {
    const DType dtype = shape.size() == 2 ? matrix_dtype_ : dtype_;
    auto t = backend_.Allocate(dtype, shape);
    if (!t.ok()) return t.status();
    if (dtype == DType::kF32) {
      backend_.CopyFromHost(host.data(), *t);
    } else {  // rounded on the host: the device never holds the f32 copy
      std::vector<uint16_t> narrow(host.size());
      for (size_t i = 0; i < host.size(); ++i) {
        narrow[i] = dtype == DType::kBF16 ? F32ToBF16(host[i]) : F32ToF16(host[i]);
      }
      backend_.CopyFromHost(narrow.data(), *t);
    }
    auto status = backend_.Synchronize();
    if (!status.ok()) return status;
    return t;
  }

  const SafetensorsArchive& archive_;
  Architecture arch_;
  Backend& backend_;
  DType dtype_;
  DType matrix_dtype_;
};

// The table's tensors of one config by role, into held tensors (WeightReader's layouts). A role
// the config lacks (HasTensor) leaves its tensor undefined.
class RoleReader {
 public:
  RoleReader(const SafetensorsArchive& archive, const ModelConfig& config, Backend& backend,
             DType compute_dtype, DType matrix_dtype)
      : config_(config),
        traits_(TraitsOf(config.architecture)),
        reader_(archive, config.architecture, backend, compute_dtype, matrix_dtype) {}

  absl::Status Read(TensorRole role, TensorPart part, int64_t layer, Tensor& out) {
    if (!HasTensor(config_, role, part)) return absl::OkStatus();
    MANYSHOT_ASSIGN_OR_RETURN(out, reader_.Read(TensorName(config_.architecture, role, part, layer),
                                                TensorShape(config_, role, part),
                                                Transposed(role, part), NormOffset(role, part)));
    return absl::OkStatus();
  }

  // Several roles concatenated along the output dimension, for one GEMM (q | k | v, gate | up).
  absl::Status Fuse(std::initializer_list<TensorRole> roles, TensorPart part, int64_t layer,
                    Tensor& out) {
    std::vector<std::pair<std::string, std::vector<int64_t>>> parts;
    for (TensorRole role : roles) {
      if (!HasTensor(config_, role, part)) return absl::OkStatus();
      parts.push_back(
          {TensorName(config_.architecture, role, part, layer), TensorShape(config_, role, part)});
    }
    MANYSHOT_ASSIGN_OR_RETURN(out, reader_.Fuse(parts, Transposed(*roles.begin(), part)));
    return absl::OkStatus();
  }

  // A tensor whose output units are reordered (WeightReader::ReadPermutedRows).
  absl::Status ReadPermuted(TensorRole role, TensorPart part, int64_t layer,
                            const std::vector<int64_t>& order, Tensor& out) {
    if (!HasTensor(config_, role, part)) return absl::OkStatus();
    MANYSHOT_ASSIGN_OR_RETURN(
        out, reader_.ReadPermutedRows(TensorName(config_.architecture, role, part, layer),
                                      TensorShape(config_, role, part), order));
    return absl::OkStatus();
  }

 private:
  // Projection weights stored [in, out] are transposed to the held [out, in].
  bool Transposed(TensorRole role, TensorPart part) const {
    return part == TensorPart::kWeight && IsProjection(role) &&
           traits_.layout == WeightLayout::kInOut;
  }

  // Gemma's RMSNorm scales by (1 + w): held as such, the backends' RmsNorm is Llama's.
  float NormOffset(TensorRole role, TensorPart part) const {
    return traits_.norm_adds_one && IsNorm(role) && part == TensorPart::kWeight ? 1.0f : 0.0f;
  }

  const ModelConfig& config_;
  const ArchTraits& traits_;
  WeightReader reader_;
};

using R = TensorRole;
constexpr TensorPart W = TensorPart::kWeight, B = TensorPart::kBias;

// kFusedPerHead: output unit (h, j, d) of the checkpoint (j = q, k, v) becomes unit (j, h, d),
// with q and k's d in RotaryDimOrder for partial rotary.
std::vector<int64_t> PerHeadQkvOrder(const ModelConfig& c) {
  std::vector<int64_t> dims(static_cast<size_t>(c.head_dim));
  std::iota(dims.begin(), dims.end(), int64_t{0});
  const std::vector<int64_t> rotary_dims =
      c.rotary_dims == 0 ? dims : RotaryDimOrder(c.head_dim, c.rotary_dims);
  std::vector<int64_t> order;
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t h = 0; h < c.num_heads; ++h) {
      for (int64_t d = 0; d < c.head_dim; ++d) {
        order.push_back((h * 3 + j) * c.head_dim + (j < 2 ? rotary_dims : dims)[d]);
      }
    }
  }
  return order;
}

// Embeddings, learned positions, the embedding norm, the final norm and the lm head.
absl::Status LoadGlobals(const std::filesystem::path& model_dir, const SafetensorsArchive& archive,
                         const ModelConfig& c, RoleReader& reader, ModelWeights& w) {
  const ArchTraits& traits = TraitsOf(c.architecture);
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kTokenEmbd, W, 0, w.embed));
  if (traits.position == PositionKind::kLearned) {
    Tensor table;
    MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kPosEmbd, W, 0, table));
    // Row position_offset of the checkpoint's table is position 0.
    w.positions =
        table.Rows(traits.position_offset, traits.position_offset + c.max_position_embeddings);
  }
  if (traits.embedding_norm) {
    MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kTokenEmbdNorm, W, 0, w.embed_norm_w));
    MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kTokenEmbdNorm, B, 0, w.embed_norm_b));
  }
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kOutputNorm, W, 0, w.final_norm_w));
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kOutputNorm, B, 0, w.final_norm_b));
  if (c.tie_word_embeddings) {
    w.lm_head = w.embed;
    return absl::OkStatus();
  }
  const std::string head = TensorName(c.architecture, R::kOutput, W);
  if (FindModelTensor(archive, c.architecture, head) == nullptr) {
    return absl::NotFoundError(absl::StrCat(model_dir.string(), ": tensor ", head,
                                            " is missing and tie_word_embeddings is false"));
  }
  return reader.Read(R::kOutput, W, 0, w.lm_head);
}

// The attention sublayer's norm and projections of layer l, q | k | v fused (ArchTraits::qkv).
absl::Status LoadAttention(const ModelConfig& c, const std::vector<int64_t>& qkv_order, int64_t l,
                           RoleReader& reader, LayerWeights& w) {
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kAttnNorm, W, l, w.attn_norm_w));
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kAttnNorm, B, l, w.attn_norm_b));
  switch (TraitsOf(c.architecture).qkv) {
    case QkvLayout::kSeparate:
      MANYSHOT_RETURN_IF_ERROR(reader.Fuse({R::kAttnQ, R::kAttnK, R::kAttnV}, W, l, w.qkv_w));
      MANYSHOT_RETURN_IF_ERROR(reader.Fuse({R::kAttnQ, R::kAttnK, R::kAttnV}, B, l, w.qkv_b));
      break;
    case QkvLayout::kFused:
      MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kAttnQkv, W, l, w.qkv_w));
      MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kAttnQkv, B, l, w.qkv_b));
      break;
    case QkvLayout::kFusedPerHead:
      MANYSHOT_RETURN_IF_ERROR(reader.ReadPermuted(R::kAttnQkv, W, l, qkv_order, w.qkv_w));
      MANYSHOT_RETURN_IF_ERROR(reader.ReadPermuted(R::kAttnQkv, B, l, qkv_order, w.qkv_b));
      break;
  }
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kAttnOut, W, l, w.o_w));
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kAttnOut, B, l, w.o_b));
  return reader.Read(R::kAttnPostNorm, W, l, w.attn_post_norm_w);
}

// The MLP sublayer's norm and projections of layer l, gate | up fused for gated activations.
absl::Status LoadFfn(const ModelConfig& c, int64_t l, RoleReader& reader, LayerWeights& w) {
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnNorm, W, l, w.mlp_norm_w));
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnNorm, B, l, w.mlp_norm_b));
  if (HasTensor(c, R::kFfnGateUp, W)) {  // stored fused already (Phi-3)
    MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnGateUp, W, l, w.up_w));
    MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnGateUp, B, l, w.up_b));
  } else if (IsGated(TraitsOf(c.architecture).activation)) {
    MANYSHOT_RETURN_IF_ERROR(reader.Fuse({R::kFfnGate, R::kFfnUp}, W, l, w.up_w));
    MANYSHOT_RETURN_IF_ERROR(reader.Fuse({R::kFfnGate, R::kFfnUp}, B, l, w.up_b));
  } else {
    MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnUp, W, l, w.up_w));
    MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnUp, B, l, w.up_b));
  }
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnDown, W, l, w.down_w));
  MANYSHOT_RETURN_IF_ERROR(reader.Read(R::kFfnDown, B, l, w.down_b));
  return reader.Read(R::kFfnPostNorm, W, l, w.ffn_post_norm_w);
}

}  // namespace

absl::StatusOr<ModelWeights> LoadModelWeights(const std::filesystem::path& model_dir,
                                              const SafetensorsArchive& archive,
                                              const ModelConfig& c, Backend& backend,
                                              DType compute_dtype, DType matrix_dtype) {
  const ArchTraits& traits = TraitsOf(c.architecture);
  if (traits.qkv != QkvLayout::kFusedPerHead && c.rotary_dims != 0) {
    return absl::UnimplementedError("partial rotary needs a per-head fused q|k|v (GPT-NeoX)");
  }
  ModelWeights w;
  if (traits.position == PositionKind::kRotary) w.rope = HeldRopeTable(c);
  if (traits.position == PositionKind::kAlibi) {
    const std::vector<float> slopes = AlibiSlopes(c.num_heads);
    MANYSHOT_ASSIGN_OR_RETURN(w.alibi_slopes, backend.Allocate(DType::kF32, {c.num_heads}));
    backend.CopyFromHost(slopes.data(), w.alibi_slopes);
  }
  RoleReader reader(archive, c, backend, compute_dtype, matrix_dtype);
  MANYSHOT_RETURN_IF_ERROR(LoadGlobals(model_dir, archive, c, reader, w));
  const std::vector<int64_t> qkv_order =
      traits.qkv == QkvLayout::kFusedPerHead ? PerHeadQkvOrder(c) : std::vector<int64_t>();
  w.layers.resize(static_cast<size_t>(c.num_layers));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    LayerWeights& layer = w.layers[static_cast<size_t>(l)];
    MANYSHOT_RETURN_IF_ERROR(LoadAttention(c, qkv_order, l, reader, layer));
    MANYSHOT_RETURN_IF_ERROR(LoadFfn(c, l, reader, layer));
  }
  return w;
}

}  // namespace manyshot
