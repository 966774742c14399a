#include "engine/transformer/transformer.h"

#include <cmath>
#include <initializer_list>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "engine/core/allocate_all.h"
#include "engine/core/stable_hash.h"
#include "engine/core/status_macros.h"
#include "engine/model/arch_traits.h"
#include "engine/model/safetensors.h"
#include "engine/model/tensor_names.h"
#include "engine/transformer/forward_input_checks.h"

namespace manyshot {

// Projection weights are held [out, in] (torch.nn.Linear's layout) for every family; GPT-2's
// Conv1D [in, out] checkpoints are transposed at load. Decode is bound by streaming these
// weights: on GPT-2-small's four shapes the CPU GEMV streamed [out, in] f32 and bf16 weights at
// 52-62 GB/s and [in, out] ones (several partial-sum rows updated per weight row) at 27-41 GB/s,
// with 2 threads on a machine whose plain read reached about 60 (engine/cpu/cpu_gemv.h).
struct Transformer::Layer {
  Tensor attn_norm_w, attn_norm_b;
  Tensor qkv_w, qkv_b;  // fused q | k | v
  Tensor o_w, o_b;
  Tensor mlp_norm_w, mlp_norm_b;
  Tensor up_w, up_b;  // gated (SwiGLU): fused gate | up; else the up projection alone
  Tensor down_w, down_b;
};

namespace {

// Partial rotary (ModelConfig::rotary_dims = r < head_dim D) runs on the full rotate-half RoPE of
// every backend, which pairs dimension i with i + D/2: q and k's head dimensions are held
// permuted so that the checkpoint's rotary pairs (i, i + r/2) sit at (i, i + D/2), the other
// dimensions fill the rest in order, and the table turns them by angle 0 (cos 1, sin 0: exactly
// the identity). q.k is the same sum in another order, so attention is unchanged.
// Entry p is the checkpoint dimension held at p.
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

// The RoPE table of the held layout: the rotary pairs' frequencies first, then zeros.
RopeTable HeldRopeTable(const ModelConfig& c) {
  const int64_t rotary = c.rotary_dims == 0 ? c.head_dim : c.rotary_dims;
  RopeTable table =
      ComputeRopeTable(c.rope_scaling, c.rope_theta, rotary, c.max_position_embeddings);
  table.inv_freq.resize(static_cast<size_t>(c.head_dim / 2), 0.0);
  return table;
}

// Reads tensors from a checkpoint into backend tensors, fusing several checkpoint tensors along
// the output dimension where the forward pass wants one GEMM, and holding every projection weight
// [out, in] whatever the checkpoint's layout (Transformer::Layer says why).
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

  absl::StatusOr<Tensor> Read(std::string_view name, std::vector<int64_t> shape,
                              bool transpose = false) {
    return Fuse({{std::string(name), shape}}, transpose);
  }

  // Concatenates tensors along rows (dim 0). With `transpose`, each part is a matrix [in, out_i]
  // (a Conv1D projection) and is transposed first, so the result is [sum of out_i, in].
  absl::StatusOr<Tensor> Fuse(
      const std::vector<std::pair<std::string, std::vector<int64_t>>>& parts, bool transpose) {
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

}  // namespace

Transformer::~Transformer() = default;

absl::StatusOr<std::unique_ptr<Transformer>> Transformer::Load(
    const std::filesystem::path& model_dir, Backend& backend, TransformerOptions options) {
  std::unique_ptr<Transformer> model(new Transformer());
  model->backend_ = &backend;
  model->compute_dtype_ = options.compute.value_or(backend.default_compute_dtype());
  model->kv_dtype_ = options.kv.value_or(model->compute_dtype_);
  if (!IsFloat(model->compute_dtype_) || !backend.SupportsComputeDType(model->compute_dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", backend.name(),
                                                   " backend cannot compute in ",
                                                   std::string(DTypeName(model->compute_dtype_))));
  }
  model->weight_dtype_ = options.weights.value_or(model->compute_dtype_);
  if (!backend.SupportsWeightDType(model->compute_dtype_, model->weight_dtype_)) {
    return absl::InvalidArgumentError(
        absl::StrCat("the ", backend.name(), " backend cannot hold ",
                     std::string(DTypeName(model->weight_dtype_)), " weights for ",
                     std::string(DTypeName(model->compute_dtype_)), " compute"));
  }
  if (!IsFloat(model->kv_dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV dtype ", std::string(DTypeName(model->kv_dtype_)), " is not a float type"));
  }
  auto config = ParseModelConfig(model_dir / "config.json");
  if (!config.ok()) return config.status();
  model->config_ = *config;
  if (TraitsOf(config->architecture).position == PositionKind::kRotary) {
    model->rope_ = HeldRopeTable(*config);
  }
  auto status = model->LoadWeights(model_dir);
  if (!status.ok()) return status;
  return model;
}

absl::Status Transformer::LoadWeights(const std::filesystem::path& model_dir) {
  auto archive_or = SafetensorsArchive::Open(model_dir);
  if (!archive_or.ok()) return archive_or.status();
  const SafetensorsArchive& archive = *archive_or;
  const ModelConfig& c = config_;
  const ArchTraits& traits = TraitsOf(c.architecture);
  StableHash config_hash;
  config_hash.Update(ModelConfigToJson(c));
  fingerprint_ = absl::StrCat(archive.fingerprint(), "-", config_hash.Hex());
  // Weights rounded to another dtype are other weights (their outputs and K/V differ).
  if (weight_dtype_ != compute_dtype_) {
    absl::StrAppend(&fingerprint_, "-w", std::string(DTypeName(weight_dtype_)));
  }
  WeightReader reader(archive, c.architecture, *backend_, compute_dtype_, weight_dtype_);
  // One tensor of the table into `out`; `out` stays undefined when the config has no such tensor.
  // Projection weights stored [in, out] are transposed to the held [out, in].
  auto transposed = [&](TensorRole role, TensorPart part) {
    return part == TensorPart::kWeight && IsProjection(role) &&
           traits.layout == WeightLayout::kInOut;
  };
  auto read = [&](TensorRole role, TensorPart part, int64_t layer, Tensor& out) -> absl::Status {
    if (!HasTensor(c, role, part)) return absl::OkStatus();
    MANYSHOT_ASSIGN_OR_RETURN(out, reader.Read(TensorName(c.architecture, role, part, layer),
                                               TensorShape(c, role, part), transposed(role, part)));
    return absl::OkStatus();
  };
  // Several roles concatenated along the output dimension, for one GEMM (q | k | v, gate | up).
  auto fuse = [&](std::initializer_list<TensorRole> roles, TensorPart part, int64_t layer,
                  Tensor& out) -> absl::Status {
    std::vector<std::pair<std::string, std::vector<int64_t>>> parts;
    for (TensorRole role : roles) {
      if (!HasTensor(c, role, part)) return absl::OkStatus();
      parts.push_back({TensorName(c.architecture, role, part, layer), TensorShape(c, role, part)});
    }
    MANYSHOT_ASSIGN_OR_RETURN(out, reader.Fuse(parts, transposed(*roles.begin(), part)));
    return absl::OkStatus();
  };
  using R = TensorRole;
  constexpr TensorPart W = TensorPart::kWeight, B = TensorPart::kBias;
  // kFusedPerHead: output unit (h, j, d) of the checkpoint (j = q, k, v) becomes unit (j, h, d),
  // with q and k's d in RotaryDimOrder for partial rotary.
  std::vector<int64_t> qkv_order;
  if (traits.qkv == QkvLayout::kFusedPerHead) {
    std::vector<int64_t> dims(static_cast<size_t>(c.head_dim));
    std::iota(dims.begin(), dims.end(), int64_t{0});
    const std::vector<int64_t> rotary_dims =
        c.rotary_dims == 0 ? dims : RotaryDimOrder(c.head_dim, c.rotary_dims);
    for (int64_t j = 0; j < 3; ++j) {
      for (int64_t h = 0; h < c.num_heads; ++h) {
        for (int64_t d = 0; d < c.head_dim; ++d) {
          qkv_order.push_back((h * 3 + j) * c.head_dim + (j < 2 ? rotary_dims : dims)[d]);
        }
      }
    }
  } else if (c.rotary_dims != 0) {
    return absl::UnimplementedError("partial rotary needs a per-head fused q|k|v (GPT-NeoX)");
  }
  if (traits.position == PositionKind::kAlibi) {
    const std::vector<float> slopes = AlibiSlopes(c.num_heads);
    MANYSHOT_ASSIGN_OR_RETURN(alibi_slopes_, backend_->Allocate(DType::kF32, {c.num_heads}));
    backend_->CopyFromHost(slopes.data(), alibi_slopes_);
  }
  const std::string embed_name = TensorName(c.architecture, R::kTokenEmbd, W);
  if (const TensorInfo* e = FindModelTensor(archive, c.architecture, embed_name)) {
    stored_dtype_ = e->dtype;
  }
  MANYSHOT_RETURN_IF_ERROR(read(R::kTokenEmbd, W, 0, embed_));
  if (traits.position == PositionKind::kLearned) {
    Tensor table;
    MANYSHOT_RETURN_IF_ERROR(read(R::kPosEmbd, W, 0, table));
    // Row position_offset of the checkpoint's table is position 0.
    positions_ =
        table.Rows(traits.position_offset, traits.position_offset + c.max_position_embeddings);
  }
  if (traits.embedding_norm) {
    MANYSHOT_RETURN_IF_ERROR(read(R::kTokenEmbdNorm, W, 0, embed_norm_w_));
    MANYSHOT_RETURN_IF_ERROR(read(R::kTokenEmbdNorm, B, 0, embed_norm_b_));
  }
  MANYSHOT_RETURN_IF_ERROR(read(R::kOutputNorm, W, 0, final_norm_w_));
  MANYSHOT_RETURN_IF_ERROR(read(R::kOutputNorm, B, 0, final_norm_b_));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    const std::string head = TensorName(c.architecture, R::kOutput, W);
    if (FindModelTensor(archive, c.architecture, head) == nullptr) {
      return absl::NotFoundError(absl::StrCat(model_dir.string(), ": tensor ", head,
                                              " is missing and tie_word_embeddings is false"));
    }
    MANYSHOT_RETURN_IF_ERROR(read(R::kOutput, W, 0, lm_head_));
  }
  for (int64_t l = 0; l < c.num_layers; ++l) {
    auto layer = std::make_unique<Layer>();
    Layer& w = *layer;
    MANYSHOT_RETURN_IF_ERROR(read(R::kAttnNorm, W, l, w.attn_norm_w));
    MANYSHOT_RETURN_IF_ERROR(read(R::kAttnNorm, B, l, w.attn_norm_b));
    switch (traits.qkv) {
      case QkvLayout::kSeparate:
        MANYSHOT_RETURN_IF_ERROR(fuse({R::kAttnQ, R::kAttnK, R::kAttnV}, W, l, w.qkv_w));
        MANYSHOT_RETURN_IF_ERROR(fuse({R::kAttnQ, R::kAttnK, R::kAttnV}, B, l, w.qkv_b));
        break;
      case QkvLayout::kFused:
        MANYSHOT_RETURN_IF_ERROR(read(R::kAttnQkv, W, l, w.qkv_w));
        MANYSHOT_RETURN_IF_ERROR(read(R::kAttnQkv, B, l, w.qkv_b));
        break;
      case QkvLayout::kFusedPerHead:
        for (TensorPart part : {W, B}) {
          if (!HasTensor(c, R::kAttnQkv, part)) continue;
          Tensor& out = part == W ? w.qkv_w : w.qkv_b;
          MANYSHOT_ASSIGN_OR_RETURN(
              out, reader.ReadPermutedRows(TensorName(c.architecture, R::kAttnQkv, part, l),
                                           TensorShape(c, R::kAttnQkv, part), qkv_order));
        }
        break;
    }
    MANYSHOT_RETURN_IF_ERROR(read(R::kAttnOut, W, l, w.o_w));
    MANYSHOT_RETURN_IF_ERROR(read(R::kAttnOut, B, l, w.o_b));
    MANYSHOT_RETURN_IF_ERROR(read(R::kFfnNorm, W, l, w.mlp_norm_w));
    MANYSHOT_RETURN_IF_ERROR(read(R::kFfnNorm, B, l, w.mlp_norm_b));
    if (HasTensor(c, R::kFfnGateUp, W)) {  // stored fused already (Phi-3)
      MANYSHOT_RETURN_IF_ERROR(read(R::kFfnGateUp, W, l, w.up_w));
      MANYSHOT_RETURN_IF_ERROR(read(R::kFfnGateUp, B, l, w.up_b));
    } else if (traits.activation == Activation::kSwiGlu) {
      MANYSHOT_RETURN_IF_ERROR(fuse({R::kFfnGate, R::kFfnUp}, W, l, w.up_w));
      MANYSHOT_RETURN_IF_ERROR(fuse({R::kFfnGate, R::kFfnUp}, B, l, w.up_b));
    } else {
      MANYSHOT_RETURN_IF_ERROR(read(R::kFfnUp, W, l, w.up_w));
      MANYSHOT_RETURN_IF_ERROR(read(R::kFfnUp, B, l, w.up_b));
    }
    MANYSHOT_RETURN_IF_ERROR(read(R::kFfnDown, W, l, w.down_w));
    MANYSHOT_RETURN_IF_ERROR(read(R::kFfnDown, B, l, w.down_b));
    layers_.push_back(std::move(layer));
  }
  return absl::OkStatus();
}

KvCache Transformer::NewCache(int64_t capacity) const {
  return KvCache(*backend_, config_.num_layers, config_.num_kv_heads, config_.head_dim,
                 std::max<int64_t>(1, capacity), kv_dtype_, alibi_slopes_.defined());
}

absl::StatusOr<ForwardResult> Transformer::Forward(absl::Span<const ForwardSequence> sequences,
                                                   const ContextKv* context) const {
  const ModelConfig& c = config_;
  const ArchTraits& traits = TraitsOf(c.architecture);
  const bool gated = traits.activation == Activation::kSwiGlu;
  const bool learned_positions = traits.position == PositionKind::kLearned;
  const int64_t H = c.hidden_size, D = c.head_dim, I = c.intermediate_size;
  const int64_t heads = c.num_heads, kv_heads = c.num_kv_heads;

  // Flatten the batch and validate.
  std::vector<int32_t> ids, positions;
  std::vector<int64_t> begins;
  std::vector<int32_t> logit_rows;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const ForwardSequence& seq = sequences[s];
    if (seq.cache == nullptr) return absl::InvalidArgumentError("sequence without a KV cache");
    if (seq.positions.size() != seq.tokens.size()) {
      return absl::InvalidArgumentError(absl::StrCat("sequence ", s, ": ", seq.tokens.size(),
                                                     " tokens but ", seq.positions.size(),
                                                     " positions"));
    }
    const std::string what = absl::StrCat("sequence ", s);
    if (absl::Status ids_ok = CheckTokenIds(seq.tokens, c.vocab_size, what); !ids_ok.ok()) {
      return ids_ok;
    }
    begins.push_back(static_cast<int64_t>(ids.size()));
    for (size_t i = 0; i < seq.tokens.size(); ++i) {
      const int32_t p = seq.positions[i];
      if (p < 0 || (learned_positions && p >= c.max_position_embeddings)) {
        return absl::InvalidArgumentError(
            absl::StrCat("sequence ", s, " token ", i, ": position ", p, " is outside [0, ",
                         c.max_position_embeddings, ") for this model"));
      }
      // Past the window, attention would have to hide keys: refused, never silently widened.
      if (c.sliding_window > 0 && p >= c.sliding_window) {
        return absl::InvalidArgumentError(absl::StrCat("sequence ", s, " token ", i, ": position ",
                                                       p, " is outside [0, ", c.sliding_window,
                                                       "), the model's sliding attention window"));
      }
    }
    const absl::Status rows_ok =
        CheckLogitRows(seq.logit_rows, static_cast<int64_t>(seq.tokens.size()), what);
    if (!rows_ok.ok()) return rows_ok;
    for (int64_t r : seq.logit_rows) logit_rows.push_back(static_cast<int32_t>(begins.back() + r));
    ids.insert(ids.end(), seq.tokens.begin(), seq.tokens.end());
    positions.insert(positions.end(), seq.positions.begin(), seq.positions.end());
    auto reserved = seq.cache->Reserve(static_cast<int64_t>(seq.tokens.size()));
    if (!reserved.ok()) return reserved;
  }
  const int64_t T = static_cast<int64_t>(ids.size());
  ForwardResult result;
  result.vocab_size = c.vocab_size;
  if (T == 0) return result;

  Backend& b = *backend_;
  const DType dt = compute_dtype_;
  // Every activation of the pass, allocated up front so out-of-memory fails before any work.
  Tensor x, h, qkv, q, k, v, attn, up, act, id_t, pos_t, mlp_out;
  std::vector<TensorAllocation> shapes = {{&x, dt, {T, H}},
                                          {&h, dt, {T, H}},
                                          {&qkv, dt, {T, (heads + 2 * kv_heads) * D}},
                                          {&q, dt, {T, heads, D}},
                                          {&k, dt, {T, kv_heads, D}},
                                          {&v, dt, {T, kv_heads, D}},
                                          {&attn, dt, {T, heads, D}},
                                          {&up, dt, {T, gated ? 2 * I : I}},
                                          {&id_t, DType::kI32, {T}},
                                          {&pos_t, DType::kI32, {T}}};
  if (gated) shapes.push_back({&act, dt, {T, I}});
  // Parallel residual: the MLP's input and output while h holds the attention's output.
  if (c.parallel_residual) shapes.push_back({&mlp_out, dt, {T, H}});
  if (absl::Status allocated = AllocateAll(b, shapes); !allocated.ok()) return allocated;
  if (!gated) act = up;  // the activation runs in place
  // Index arguments go to the device once per pass.
  b.CopyFromHost(ids.data(), id_t);
  b.CopyFromHost(positions.data(), pos_t);
  const WeightLayout layout = WeightLayout::kOutIn;  // as held (Layer)
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  auto norm = [&](const Tensor& in, const Tensor& weight, const Tensor& bias, const Tensor& out) {
    if (traits.norm == NormKind::kRms) {
      b.RmsNorm(in, weight, c.norm_eps, out);
    } else {
      b.LayerNorm(in, weight, bias, c.norm_eps, out);
    }
  };
  // Post-LN: the residual sum x is normed into h, which becomes the new x.
  auto post_norm = [&](const Tensor& weight, const Tensor& bias) {
    if (c.pre_norm) return;
    norm(x, weight, bias, h);
    std::swap(x, h);
  };

  b.Embedding(id_t, embed_, x, /*accumulate=*/false);
  if (learned_positions) b.Embedding(pos_t, positions_, x, /*accumulate=*/true);
  if (traits.embedding_norm) {
    norm(x, embed_norm_w_, embed_norm_b_, h);
    std::swap(x, h);
  }

  const bool alibi = alibi_slopes_.defined();
  if (alibi && context != nullptr && context->len > 0 && !context->positions.defined()) {
    return absl::FailedPreconditionError(
        "this model uses ALiBi, which needs the context keys' position ids, and the context has "
        "none (re-encode it)");
  }
  if (alibi) {  // the new keys' positions, read by every layer's attention
    for (size_t s = 0; s < sequences.size(); ++s) {
      const int64_t n = static_cast<int64_t>(sequences[s].tokens.size());
      sequences[s].cache->WritePositions(pos_t.Rows(begins[s], begins[s] + n));
    }
  }

  std::vector<AttentionSequence> attn_seqs(sequences.size());
  for (size_t l = 0; l < layers_.size(); ++l) {
    const Layer& w = *layers_[l];
    if (c.pre_norm) norm(x, w.attn_norm_w, w.attn_norm_b, h);
    b.Linear(c.pre_norm ? h : x, w.qkv_w, layout, w.qkv_b, qkv);
    b.SplitQkv(qkv, q, k, v);
    if (traits.position == PositionKind::kRotary) {
      b.Rope(q, pos_t, rope_);
      b.Rope(k, pos_t, rope_);
    }
    for (size_t s = 0; s < sequences.size(); ++s) {
      const ForwardSequence& seq = sequences[s];
      const int64_t n = static_cast<int64_t>(seq.tokens.size());
      seq.cache->Write(static_cast<int64_t>(l), k.Rows(begins[s], begins[s] + n),
                       v.Rows(begins[s], begins[s] + n));
      AttentionSequence& a = attn_seqs[s];
      a.q_begin = begins[s];
      a.q_len = n;
      a.k = &seq.cache->k(static_cast<int64_t>(l));
      a.v = &seq.cache->v(static_cast<int64_t>(l));
      a.kv_len = seq.cache->length() + n;
      a.own_log_weight = seq.own_log_weight;
      a.weighted_from = seq.weighted_from;
      a.context_from = seq.context_from;
      if (alibi) {
        a.alibi_slopes = &alibi_slopes_;
        a.positions = &seq.cache->positions();
      }
    }
    AttentionContext ctx;
    if (context != nullptr) {
      ctx.k = &context->k[l];
      ctx.v = &context->v[l];
      ctx.len = context->len;
      ctx.log_weight = context->log_weight;
      if (context->positions.defined()) ctx.positions = &context->positions;
    }
    b.Attention(q, attn_seqs, context ? &ctx : nullptr, scale, attn, Tensor());
    b.Linear(attn.Reshape({T, heads * D}), w.o_w, layout, w.o_b, h);
    auto mlp = [&](const Tensor& in, const Tensor& out) {
      b.Linear(in, w.up_w, layout, w.up_b, up);
      switch (traits.activation) {
        case Activation::kSwiGlu:
          b.SwiGlu(up, act);
          break;
        case Activation::kGeluTanh:
          b.GeluTanh(up);
          break;
        case Activation::kRelu:
          b.Relu(up);
          break;
        case Activation::kGeluErf:
          b.GeluErf(up);
          break;
      }
      b.Linear(act, w.down_w, layout, w.down_b, out);
    };
    if (c.parallel_residual) {  // both sublayers read the block's input x
      norm(x, w.mlp_norm_w, w.mlp_norm_b, mlp_out);
      mlp(mlp_out, mlp_out);  // the up projection has read its input before down writes
      b.Add(x, h);
      b.Add(x, mlp_out);
      continue;
    }
    b.Add(x, h);
    post_norm(w.attn_norm_w, w.attn_norm_b);
    if (c.pre_norm) norm(x, w.mlp_norm_w, w.mlp_norm_b, h);
    mlp(c.pre_norm ? h : x, h);
    b.Add(x, h);
    post_norm(w.mlp_norm_w, w.mlp_norm_b);
  }
  for (const ForwardSequence& seq : sequences) {
    seq.cache->Advance(static_cast<int64_t>(seq.tokens.size()));
  }
  if (logit_rows.empty()) {
    auto status = b.Synchronize();
    if (!status.ok()) return status;
    return result;
  }

  // Final norm and the vocabulary projection (f32 logits), for the requested rows only.
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  Tensor rows_t, picked, normed, logits;
  absl::Status allocated = AllocateAll(b, {{&rows_t, DType::kI32, {R}},
                                           {&picked, dt, {R, H}},
                                           {&normed, dt, {R, H}},
                                           {&logits, DType::kF32, {R, c.vocab_size}}});
  if (!allocated.ok()) return allocated;
  b.CopyFromHost(logit_rows.data(), rows_t);
  b.GatherRows(x, rows_t, picked);
  if (final_norm_w_.defined()) {
    norm(picked, final_norm_w_, final_norm_b_, normed);
  } else {  // post-LN: the last layer's output is normed already
    normed = picked;
  }
  b.Linear(normed, lm_head_, WeightLayout::kOutIn, Tensor(), logits);
  result.logits.resize(static_cast<size_t>(R * c.vocab_size));
  auto status = b.CopyToHost(logits, result.logits.data());
  if (!status.ok()) return status;
  return result;
}

}  // namespace manyshot
