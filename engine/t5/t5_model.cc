#include "engine/t5/t5_model.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "engine/core/allocate_all.h"
#include "engine/core/stable_hash.h"
#include "engine/core/status_macros.h"
#include "engine/model/safetensors.h"
#include "engine/model/t5_tensor_names.h"
#include "engine/t5/relative_position.h"
#include "engine/transformer/forward_input_checks.h"

namespace manyshot {

struct T5Model::Block {
  Tensor attn_norm, qkv_w, o_w;  // self-attention: q | k | v fused [3 inner, d_model]
  Tensor cross_norm, cross_q_w, cross_k_w, cross_v_w, cross_o_w;  // decoder only
  Tensor ffn_norm;
  Tensor up_w;  // "relu": wi [d_ff, d_model]; "gated-gelu": wi_0 | wi_1 [2 d_ff, d_model]
  Tensor down_w;
};

namespace {

// Reads checkpoint tensors by role (T5ExpectedTensors) into host f32 and uploads them in the
// compute dtype, concatenating along rows where the forward pass wants one GEMM.
class WeightLoader {
 public:
  WeightLoader(const SafetensorsArchive& archive, const T5Config& config, Backend& backend,
               DType dtype)
      : archive_(archive), backend_(backend), dtype_(dtype) {
    for (T5Tensor& t : T5ExpectedTensors(config)) {
      const auto key = std::make_tuple(t.stack, t.role, t.block);
      expected_.emplace(key, std::move(t));
    }
  }

  absl::StatusOr<std::vector<float>> Host(T5Stack stack, T5Role role, int64_t block) const {
    const T5Tensor& t = expected_.at(std::make_tuple(stack, role, block));
    int64_t n = 1;
    for (int64_t d : t.shape) n *= d;
    std::vector<float> host(static_cast<size_t>(n));
    std::string name = t.name;
    if (role == T5Role::kTokenEmbd) {  // the first spelling the checkpoint has
      for (std::string_view alt : T5TokenEmbeddingNames()) {
        if (archive_.Find(alt) != nullptr) {
          name = std::string(alt);
          break;
        }
      }
    }
    auto status = archive_.ReadF32(name, t.shape, host.data());
    if (!status.ok()) return status;
    return host;
  }

  // The tensors of `roles` (same columns) stacked along rows, on the device.
  absl::StatusOr<Tensor> Load(T5Stack stack, std::initializer_list<T5Role> roles,
                              int64_t block = -1, float multiplier = 1.0f) const {
    std::vector<float> host;
    std::vector<int64_t> shape;
    for (T5Role role : roles) {
      std::vector<float> part;
      MANYSHOT_ASSIGN_OR_RETURN(part, Host(stack, role, block));
      const std::vector<int64_t>& s = expected_.at(std::make_tuple(stack, role, block)).shape;
      if (shape.empty()) {
        shape = s;
      } else {
        shape[0] += s[0];
      }
      host.insert(host.end(), part.begin(), part.end());
    }
    if (multiplier != 1.0f) {
      for (float& v : host) v *= multiplier;
    }
    return Upload(host, shape);
  }

  absl::StatusOr<Tensor> Upload(const std::vector<float>& host, std::vector<int64_t> shape) const {
    Tensor wide;
    MANYSHOT_ASSIGN_OR_RETURN(wide, backend_.Allocate(DType::kF32, shape));
    backend_.CopyFromHost(host.data(), wide);
    Tensor out = wide;
    if (dtype_ != DType::kF32) {  // rounded on the device by the backend's own Convert
      MANYSHOT_ASSIGN_OR_RETURN(out, backend_.Allocate(dtype_, shape));
      backend_.Convert(wide, out);
    }
    auto status = backend_.Synchronize();
    if (!status.ok()) return status;
    return out;
  }

 private:
  const SafetensorsArchive& archive_;
  Backend& backend_;
  DType dtype_;
  std::map<std::tuple<T5Stack, T5Role, int64_t>, T5Tensor> expected_;
};

// T5RelativeBias's diagonals on the device.
absl::StatusOr<Tensor> UploadBias(Backend& b, const std::vector<float>& bias, int64_t heads) {
  auto t = b.Allocate(DType::kF32, {heads, static_cast<int64_t>(bias.size()) / heads});
  if (!t.ok()) return t.status();
  b.CopyFromHost(bias.data(), *t);
  return t;
}

}  // namespace

T5Model::~T5Model() = default;

absl::StatusOr<std::unique_ptr<T5Model>> T5Model::Load(const std::filesystem::path& model_dir,
                                                       Backend& backend,
                                                       TransformerOptions options) {
  std::unique_ptr<T5Model> model(new T5Model());
  model->backend_ = &backend;
  model->compute_dtype_ = options.compute.value_or(backend.default_compute_dtype());
  model->kv_dtype_ = options.kv.value_or(model->compute_dtype_);
  if (!IsFloat(model->compute_dtype_) || !backend.SupportsComputeDType(model->compute_dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat("the ", backend.name(),
                                                   " backend cannot compute in ",
                                                   std::string(DTypeName(model->compute_dtype_))));
  }
  if (!IsFloat(model->kv_dtype_)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "KV dtype ", std::string(DTypeName(model->kv_dtype_)), " is not a float type"));
  }
  MANYSHOT_ASSIGN_OR_RETURN(model->config_, ParseT5Config(model_dir / "config.json"));
  auto status = model->LoadWeights(model_dir);
  if (!status.ok()) return status;
  return model;
}

absl::Status T5Model::LoadWeights(const std::filesystem::path& model_dir) {
  auto archive_or = SafetensorsArchive::Open(model_dir);
  if (!archive_or.ok()) return archive_or.status();
  const SafetensorsArchive& archive = *archive_or;
  const T5Config& c = config_;
  StableHash config_hash;
  config_hash.Update(T5ConfigToJson(c));
  fingerprint_ = absl::StrCat(archive.fingerprint(), "-", config_hash.Hex());
  WeightLoader w(archive, c, *backend_, compute_dtype_);
  using R = T5Role;
  using S = T5Stack;
  MANYSHOT_ASSIGN_OR_RETURN(embed_, w.Load(S::kShared, {R::kTokenEmbd}));
  if (c.tie_word_embeddings) {
    lm_head_ = embed_;
  } else {
    MANYSHOT_ASSIGN_OR_RETURN(lm_head_, w.Load(S::kShared, {R::kOutput}));
  }
  MANYSHOT_ASSIGN_OR_RETURN(encoder_final_norm_, w.Load(S::kEncoder, {R::kOutputNorm}));
  // Tied heads see the decoder output times d_model^-0.5; folded into the final norm's weight.
  const float rescale = c.tie_word_embeddings
                            ? static_cast<float>(std::pow(static_cast<double>(c.d_model), -0.5))
                            : 1.0f;
  MANYSHOT_ASSIGN_OR_RETURN(decoder_final_norm_,
                            w.Load(S::kDecoder, {R::kOutputNorm}, -1, rescale));
  MANYSHOT_ASSIGN_OR_RETURN(encoder_bias_table_, w.Host(S::kEncoder, R::kAttnRelBias, -1));
  MANYSHOT_ASSIGN_OR_RETURN(decoder_bias_table_, w.Host(S::kDecoder, R::kAttnRelBias, -1));
  const bool gated = c.feed_forward == T5FeedForward::kGatedGelu;
  for (S stack : {S::kEncoder, S::kDecoder}) {
    const int64_t blocks = stack == S::kEncoder ? c.num_layers : c.num_decoder_layers;
    for (int64_t l = 0; l < blocks; ++l) {
      auto b = std::make_unique<Block>();
      MANYSHOT_ASSIGN_OR_RETURN(b->attn_norm, w.Load(stack, {R::kAttnNorm}, l));
      MANYSHOT_ASSIGN_OR_RETURN(b->qkv_w, w.Load(stack, {R::kAttnQ, R::kAttnK, R::kAttnV}, l));
      MANYSHOT_ASSIGN_OR_RETURN(b->o_w, w.Load(stack, {R::kAttnOut}, l));
      if (stack == S::kDecoder) {
        MANYSHOT_ASSIGN_OR_RETURN(b->cross_norm, w.Load(stack, {R::kCrossNorm}, l));
        MANYSHOT_ASSIGN_OR_RETURN(b->cross_q_w, w.Load(stack, {R::kCrossQ}, l));
        MANYSHOT_ASSIGN_OR_RETURN(b->cross_k_w, w.Load(stack, {R::kCrossK}, l));
        MANYSHOT_ASSIGN_OR_RETURN(b->cross_v_w, w.Load(stack, {R::kCrossV}, l));
        MANYSHOT_ASSIGN_OR_RETURN(b->cross_o_w, w.Load(stack, {R::kCrossOut}, l));
      }
      MANYSHOT_ASSIGN_OR_RETURN(b->ffn_norm, w.Load(stack, {R::kFfnNorm}, l));
      if (gated) {
        MANYSHOT_ASSIGN_OR_RETURN(b->up_w, w.Load(stack, {R::kFfnGate, R::kFfnUp}, l));
      } else {
        MANYSHOT_ASSIGN_OR_RETURN(b->up_w, w.Load(stack, {R::kFfnUp}, l));
      }
      MANYSHOT_ASSIGN_OR_RETURN(b->down_w, w.Load(stack, {R::kFfnDown}, l));
      (stack == S::kEncoder ? encoder_ : decoder_).push_back(std::move(b));
    }
  }
  return absl::OkStatus();
}

KvCache T5Model::NewDecoderCache(int64_t capacity) const {
  return KvCache(*backend_, config_.num_decoder_layers, config_.num_heads, config_.d_kv,
                 std::max<int64_t>(1, capacity), kv_dtype_);
}

void T5Model::FeedForward(const Block& w, const Tensor& x, const Tensor& h, const Tensor& up,
                          const Tensor& act) const {
  Backend& b = *backend_;
  b.RmsNorm(x, w.ffn_norm, config_.layer_norm_epsilon, h);
  if (config_.feed_forward == T5FeedForward::kGatedGelu) {
    b.Linear(h, w.up_w, WeightLayout::kOutIn, Tensor(), up);
    b.GeGlu(up, act);
  } else {  // act is up: the ReLU runs in the GEMM where the backend can fuse it
    b.LinearActivation(h, w.up_w, WeightLayout::kOutIn, Tensor(), GemmActivation::kRelu, up);
  }
  b.Linear(act, w.down_w, WeightLayout::kOutIn, Tensor(), h);
  b.Add(x, h);
}

absl::StatusOr<T5Model::Rows> T5Model::EmbedRows(const std::vector<int32_t>& ids) const {
  const T5Config& c = config_;
  Backend& b = *backend_;
  const DType dt = compute_dtype_;
  const int64_t T = static_cast<int64_t>(ids.size());
  const int64_t d = c.d_model, inner = c.inner_dim(), heads = c.num_heads, dkv = c.d_kv;
  const bool gated = c.feed_forward == T5FeedForward::kGatedGelu;
  Rows r;
  auto status = AllocateAll(b, {{&r.x, dt, {T, d}},
                                {&r.h, dt, {T, d}},
                                {&r.qkv, dt, {T, 3 * inner}},
                                {&r.q, dt, {T, heads, dkv}},
                                {&r.k, dt, {T, heads, dkv}},
                                {&r.v, dt, {T, heads, dkv}},
                                {&r.attn, dt, {T, heads, dkv}},
                                {&r.lse, DType::kF32, {T, heads}},
                                {&r.up, dt, {T, gated ? 2 * c.d_ff : c.d_ff}},
                                {&r.ids, DType::kI32, {T}}});
  if (!status.ok()) return status;
  r.act = r.up;
  if (gated) MANYSHOT_ASSIGN_OR_RETURN(r.act, b.Allocate(dt, {T, c.d_ff}));
  b.CopyFromHost(ids.data(), r.ids);
  b.Embedding(r.ids, embed_, r.x, /*accumulate=*/false);
  return r;
}

absl::StatusOr<T5EncoderOutput> T5Model::Encode(
    absl::Span<const std::vector<int32_t>> inputs) const {
  return Encode(inputs, T5EncodeOptions{});
}

absl::StatusOr<T5FirstLayerQkv> T5Model::EncoderFirstLayerQkv(absl::Span<const int32_t> ids) const {
  const T5Config& c = config_;
  if (ids.empty()) return absl::InvalidArgumentError("no tokens for the first-layer q|k|v");
  if (absl::Status s = CheckTokenIds(ids, c.vocab_size, ""); !s.ok()) return s;
  Backend& b = *backend_;
  const auto n = static_cast<int64_t>(ids.size());
  T5FirstLayerQkv out;
  out.ids.assign(ids.begin(), ids.end());
  Tensor x, h, id_t;
  auto status = AllocateAll(b, {{&x, compute_dtype_, {n, c.d_model}},
                                {&h, compute_dtype_, {n, c.d_model}},
                                {&id_t, DType::kI32, {n}},
                                {&out.qkv, compute_dtype_, {n, 3 * c.inner_dim()}}});
  if (!status.ok()) return status;
  b.CopyFromHost(out.ids.data(), id_t);
  b.Embedding(id_t, embed_, x, /*accumulate=*/false);
  b.RmsNorm(x, encoder_[0]->attn_norm, c.layer_norm_epsilon, h);
  b.Linear(h, encoder_[0]->qkv_w, WeightLayout::kOutIn, Tensor(), out.qkv);
  status = b.Synchronize();
  if (!status.ok()) return status;
  return out;
}

absl::StatusOr<std::vector<int32_t>> T5Model::GatherEncoderBatch(
    absl::Span<const std::vector<int32_t>> inputs, T5EncoderOutput& out) const {
  std::vector<int32_t> ids;
  for (size_t s = 0; s < inputs.size(); ++s) {
    if (inputs[s].empty()) {
      return absl::InvalidArgumentError(absl::StrCat("encoder input ", s, " is empty"));
    }
    const absl::Status ids_ok =
        CheckTokenIds(inputs[s], config_.vocab_size, absl::StrCat("encoder input ", s));
    if (!ids_ok.ok()) return ids_ok;
    out.begins.push_back(static_cast<int64_t>(ids.size()));
    out.lengths.push_back(static_cast<int64_t>(inputs[s].size()));
    ids.insert(ids.end(), inputs[s].begin(), inputs[s].end());
  }
  return ids;
}

absl::StatusOr<int64_t> T5Model::CachedFirstLayerRows(const T5FirstLayerQkv* first,
                                                      const std::vector<int32_t>& ids) const {
  if (first == nullptr) return 0;
  const auto cached = static_cast<int64_t>(first->ids.size());
  const auto total = static_cast<int64_t>(ids.size());
  if (cached > total || !std::equal(first->ids.begin(), first->ids.end(), ids.begin()) ||
      !first->qkv.defined() ||
      first->qkv.shape() != std::vector<int64_t>{cached, 3 * config_.inner_dim()} ||
      first->qkv.dtype() != compute_dtype_) {
    return absl::InvalidArgumentError(
        absl::StrCat("the first-layer q|k|v given for ", cached,
                     " tokens are not those of the encoder batch's first tokens (", total,
                     " tokens) in this model's shape and compute dtype"));
  }
  return cached;
}

absl::Status T5Model::BuildEncoderSelfAttention(const T5EncoderOutput& out, const Rows& rows,
                                                EncoderSelfAttention& self) const {
  const T5Config& c = config_;
  // Bidirectional position bias, one per distinct input length (it depends on nothing else).
  const T5BiasShape shape{c.relative_attention_num_buckets, c.relative_attention_max_distance,
                          /*bidirectional=*/true, /*causal=*/false};
  for (int64_t n : out.lengths) {
    if (self.biases.count(n)) continue;
    MANYSHOT_ASSIGN_OR_RETURN(
        self.biases[n],
        UploadBias(*backend_, T5RelativeBias(encoder_bias_table_, c.num_heads, shape, 0, n, n),
                   c.num_heads));
  }
  // The sequences point into k_rows/v_rows: fill those completely first.
  for (int64_t s = 0; s < out.inputs(); ++s) {
    self.k_rows.push_back(rows.k.Rows(out.begins[s], out.begins[s] + out.lengths[s]));
    self.v_rows.push_back(rows.v.Rows(out.begins[s], out.begins[s] + out.lengths[s]));
  }
  for (int64_t s = 0; s < out.inputs(); ++s) {
    const int64_t n = out.lengths[s];
    self.sequences.push_back(
        {out.begins[s], n, &self.k_rows[s], &self.v_rows[s], n, nullptr, &self.biases.at(n)});
  }
  return absl::OkStatus();
}

absl::Status T5Model::EncoderLayers(const T5EncodeOptions& options, int64_t cached,
                                    const EncoderSelfAttention& self, const Rows& rows) const {
  const T5Config& c = config_;
  Backend& b = *backend_;
  const int64_t T = rows.x.shape()[0];
  for (const auto& w : encoder_) {
    // The first layer's cached rows are copied; the rest (and every later layer) computed.
    const int64_t from = w == encoder_.front() ? cached : 0;
    if (from > 0) b.Copy(options.first_layer->qkv, rows.qkv.Rows(0, from));
    if (from < T) {
      b.RmsNorm(rows.x.Rows(from, T), w->attn_norm, c.layer_norm_epsilon, rows.h.Rows(from, T));
      b.Linear(rows.h.Rows(from, T), w->qkv_w, WeightLayout::kOutIn, Tensor(),
               rows.qkv.Rows(from, T));
    }
    b.SplitQkv(rows.qkv, rows.q, rows.k, rows.v);
    if (options.attention != nullptr) {
      const absl::Status status =
          options.attention->Attend(rows.q, rows.k, rows.v, {rows.attn, rows.lse});
      if (!status.ok()) return status;
    } else {
      // T5 has no 1/sqrt(d_kv).
      b.AttendBiased(rows.q, self.sequences, /*scale=*/1.0f, {rows.attn, rows.lse});
    }
    b.Linear(rows.attn.Reshape({T, c.inner_dim()}), w->o_w, WeightLayout::kOutIn, Tensor(), rows.h);
    b.Add(rows.x, rows.h);
    FeedForward(*w, rows.x, rows.h, rows.up, rows.act);
  }
  return absl::OkStatus();
}

absl::Status T5Model::CrossAttentionKv(T5EncoderOutput& out) const {
  const T5Config& c = config_;
  Backend& b = *backend_;
  const int64_t T = out.states.shape()[0];
  for (const auto& w : decoder_) {
    Tensor ck, cv;
    const absl::Status status = AllocateAll(b, {{&ck, compute_dtype_, {T, c.num_heads, c.d_kv}},
                                                {&cv, compute_dtype_, {T, c.num_heads, c.d_kv}}});
    if (!status.ok()) return status;
    b.Linear(out.states, w->cross_k_w, WeightLayout::kOutIn, Tensor(),
             ck.Reshape({T, c.inner_dim()}));
    b.Linear(out.states, w->cross_v_w, WeightLayout::kOutIn, Tensor(),
             cv.Reshape({T, c.inner_dim()}));
    out.cross_k.push_back(std::move(ck));
    out.cross_v.push_back(std::move(cv));
  }
  return absl::OkStatus();
}

absl::StatusOr<T5EncoderOutput> T5Model::Encode(absl::Span<const std::vector<int32_t>> inputs,
                                                const T5EncodeOptions& options) const {
  T5EncoderOutput out;
  std::vector<int32_t> ids;
  MANYSHOT_ASSIGN_OR_RETURN(ids, GatherEncoderBatch(inputs, out));
  // Rows whose first-layer q|k|v the caller computed before.
  int64_t cached = 0;
  MANYSHOT_ASSIGN_OR_RETURN(cached, CachedFirstLayerRows(options.first_layer, ids));
  if (ids.empty()) return out;
  auto rows = EmbedRows(ids);
  if (!rows.ok()) return rows.status();
  Backend& b = *backend_;
  MANYSHOT_ASSIGN_OR_RETURN(
      out.states, b.Allocate(compute_dtype_, {static_cast<int64_t>(ids.size()), config_.d_model}));
  EncoderSelfAttention self;
  MANYSHOT_RETURN_IF_ERROR(BuildEncoderSelfAttention(out, *rows, self));
  MANYSHOT_RETURN_IF_ERROR(EncoderLayers(options, cached, self, *rows));
  b.RmsNorm(rows->x, encoder_final_norm_, config_.layer_norm_epsilon, out.states);
  // Cross-attention K/V of every decoder layer, once per encoder output.
  MANYSHOT_RETURN_IF_ERROR(CrossAttentionKv(out));
  MANYSHOT_RETURN_IF_ERROR(b.Synchronize());
  return out;
}

absl::StatusOr<T5Model::DecoderBatch> T5Model::GatherDecoderBatch(
    absl::Span<const T5DecoderSequence> sequences) const {
  const T5Config& c = config_;
  DecoderBatch batch;
  for (size_t s = 0; s < sequences.size(); ++s) {
    const T5DecoderSequence& seq = sequences[s];
    if (seq.cache == nullptr || seq.encoder == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder sequence ", s, " has no KV cache or no encoder output"));
    }
    if (seq.input < 0 || seq.input >= seq.encoder->inputs()) {
      return absl::InvalidArgumentError(absl::StrCat("decoder sequence ", s, ": input ", seq.input,
                                                     " is not one of the encoder output's ",
                                                     seq.encoder->inputs(), " inputs"));
    }
    const std::vector<Tensor>& ck = seq.encoder->cross_k;
    if (static_cast<int64_t>(ck.size()) != c.num_decoder_layers ||
        (!ck.empty() && (ck[0].dim(1) != c.num_heads || ck[0].dim(2) != c.d_kv))) {
      return absl::InvalidArgumentError(
          absl::StrCat("decoder sequence ", s, ": the encoder output is not this model's"));
    }
    const std::string what = absl::StrCat("decoder sequence ", s);
    absl::Status checked = CheckTokenIds(seq.tokens, c.vocab_size, what);
    if (checked.ok()) {
      checked = CheckLogitRows(seq.logit_rows, static_cast<int64_t>(seq.tokens.size()), what);
    }
    if (!checked.ok()) return checked;
    batch.begins.push_back(static_cast<int64_t>(batch.ids.size()));
    batch.pasts.push_back(seq.cache->length());
    for (int64_t r : seq.logit_rows) {
      batch.logit_rows.push_back(static_cast<int32_t>(batch.begins.back() + r));
    }
    batch.ids.insert(batch.ids.end(), seq.tokens.begin(), seq.tokens.end());
    auto reserved = seq.cache->Reserve(static_cast<int64_t>(seq.tokens.size()));
    if (!reserved.ok()) return reserved;
  }
  return batch;
}

void T5Model::DecoderBlock(size_t layer, absl::Span<const T5DecoderSequence> sequences,
                           const DecoderBatch& batch, const Rows& rows,
                           std::vector<BiasedAttentionSequence>& self) const {
  const T5Config& c = config_;
  Backend& b = *backend_;
  const Block& w = *decoder_[layer];
  const auto l = static_cast<int64_t>(layer);
  const int64_t T = static_cast<int64_t>(batch.ids.size()), inner = c.inner_dim();
  const auto& [x, h, qkv, q, k, v, attn, lse, up, act, id_t] = rows;
  b.RmsNorm(x, w.attn_norm, c.layer_norm_epsilon, h);
  b.Linear(h, w.qkv_w, WeightLayout::kOutIn, Tensor(), qkv);
  b.SplitQkv(qkv, q, k, v);
  for (size_t s = 0; s < sequences.size(); ++s) {
    const int64_t n = self[s].q_len, begin = batch.begins[s];
    KvCache& cache = *sequences[s].cache;
    cache.Write(l, k.Rows(begin, begin + n), v.Rows(begin, begin + n));
    self[s].k = &cache.k(l);
    self[s].v = &cache.v(l);
  }
  b.AttendBiased(q, self, /*scale=*/1.0f, {attn, lse});
  b.Linear(attn.Reshape({T, inner}), w.o_w, WeightLayout::kOutIn, Tensor(), h);
  b.Add(x, h);

  // Cross-attention: every new row against all of its input's encoder rows, no position bias.
  std::vector<BiasedAttentionSequence> cross(sequences.size());
  std::vector<Tensor> cross_k(sequences.size()), cross_v(sequences.size());
  b.RmsNorm(x, w.cross_norm, c.layer_norm_epsilon, h);
  b.Linear(h, w.cross_q_w, WeightLayout::kOutIn, Tensor(), q.Reshape({T, inner}));
  for (size_t s = 0; s < sequences.size(); ++s) {
    const T5EncoderOutput& enc = *sequences[s].encoder;
    const int64_t eb = enc.begins[sequences[s].input], en = enc.lengths[sequences[s].input];
    cross_k[s] = enc.cross_k[layer].Rows(eb, eb + en);
    cross_v[s] = enc.cross_v[layer].Rows(eb, eb + en);
    cross[s] = {batch.begins[s], self[s].q_len, &cross_k[s], &cross_v[s], en, nullptr, nullptr};
  }
  b.AttendBiased(q, cross, /*scale=*/1.0f, {attn, lse});
  b.Linear(attn.Reshape({T, inner}), w.cross_o_w, WeightLayout::kOutIn, Tensor(), h);
  b.Add(x, h);
  FeedForward(w, x, h, up, act);
}

absl::Status T5Model::DecoderLogits(const Tensor& x, const std::vector<int32_t>& logit_rows,
                                    ForwardResult& result) const {
  const T5Config& c = config_;
  Backend& b = *backend_;
  const int64_t R = static_cast<int64_t>(logit_rows.size());
  Tensor rows_t, picked, normed, logits;
  MANYSHOT_RETURN_IF_ERROR(AllocateAll(b, {{&rows_t, DType::kI32, {R}},
                                           {&picked, compute_dtype_, {R, c.d_model}},
                                           {&normed, compute_dtype_, {R, c.d_model}},
                                           {&logits, DType::kF32, {R, c.vocab_size}}}));
  b.CopyFromHost(logit_rows.data(), rows_t);
  b.GatherRows(x, rows_t, picked);
  b.RmsNorm(picked, decoder_final_norm_, c.layer_norm_epsilon, normed);
  b.Linear(normed, lm_head_, WeightLayout::kOutIn, Tensor(), logits);
  result.logits.resize(static_cast<size_t>(R * c.vocab_size));
  return b.CopyToHost(logits, result.logits.data());
}

absl::StatusOr<ForwardResult> T5Model::Decode(absl::Span<const T5DecoderSequence> sequences) const {
  const T5Config& c = config_;
  auto batch = GatherDecoderBatch(sequences);
  if (!batch.ok()) return batch.status();
  ForwardResult result;
  result.vocab_size = c.vocab_size;
  if (batch->ids.empty()) return result;
  auto rows = EmbedRows(batch->ids);
  if (!rows.ok()) return rows.status();

  // Causal relative position bias of each sequence's new rows against all its keys so far.
  Backend& b = *backend_;
  const T5BiasShape shape{c.relative_attention_num_buckets, c.relative_attention_max_distance,
                          /*bidirectional=*/false, /*causal=*/true};
  std::vector<Tensor> self_bias(sequences.size());
  std::vector<BiasedAttentionSequence> self(sequences.size());
  for (size_t s = 0; s < sequences.size(); ++s) {
    const int64_t n = static_cast<int64_t>(sequences[s].tokens.size());
    const int64_t past = batch->pasts[s], keys = past + n;
    MANYSHOT_ASSIGN_OR_RETURN(
        self_bias[s],
        UploadBias(b, T5RelativeBias(decoder_bias_table_, c.num_heads, shape, past, n, keys),
                   c.num_heads));
    self[s] = {batch->begins[s], n, nullptr, nullptr, keys, nullptr, &self_bias[s]};
  }
  for (size_t l = 0; l < decoder_.size(); ++l) DecoderBlock(l, sequences, *batch, *rows, self);
  for (const T5DecoderSequence& seq : sequences) {
    seq.cache->Advance(static_cast<int64_t>(seq.tokens.size()));
  }
  if (batch->logit_rows.empty()) {
    MANYSHOT_RETURN_IF_ERROR(b.Synchronize());
    return result;
  }
  MANYSHOT_RETURN_IF_ERROR(DecoderLogits(rows->x, batch->logit_rows, result));
  return result;
}

absl::StatusOr<std::vector<float>> T5Model::StatesToHost(const T5EncoderOutput& encoded,
                                                         int64_t i) const {
  if (i < 0 || i >= encoded.inputs()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input ", i, " is not one of the encoder output's ", encoded.inputs(), " inputs"));
  }
  const int64_t n = encoded.lengths[i];
  Tensor rows = encoded.states.Rows(encoded.begins[i], encoded.begins[i] + n);
  Tensor wide = rows;
  if (rows.dtype() != DType::kF32) {
    MANYSHOT_ASSIGN_OR_RETURN(wide, backend_->Allocate(DType::kF32, {n, config_.d_model}));
    backend_->Convert(rows, wide);
  }
  std::vector<float> host(static_cast<size_t>(n * config_.d_model));
  auto status = backend_->CopyToHost(wide, host.data());
  if (!status.ok()) return status;
  return host;
}

}  // namespace manyshot
