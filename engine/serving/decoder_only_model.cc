#include "engine/serving/decoder_only_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/prompting/icl_cache_key.h"
#include "engine/prompting/icl_served_task.h"
#include "engine/prompting/icl_task.h"
#include "engine/serving/load_steps.h"

namespace manyshot {
namespace {

// An IclTask's context: encoded once, kept in the KV cache.
class IclCachedContext : public CachedContext {
 public:
  IclCachedContext(const Transformer& model, const Tokenizer& tokenizer,
                   std::shared_ptr<const IclTask> task)
      : model_(model), tokenizer_(tokenizer), task_(std::move(task)) {}

  CacheKeyInputs KeyInputs(DType kv_dtype, const std::string& sharing_scope) const override {
    return KeyInputsForTask(model_, tokenizer_, *task_, kv_dtype, sharing_scope);
  }
  size_t Bytes(DType kv_dtype) const override { return task_->ContextBytes(kv_dtype); }
  absl::StatusOr<EncodedContext> Encode(const ContextProgress& progress) const override {
    return task_->EncodeContext(kGroupsPerPass, progress);
  }
  absl::Status Check(const EncodedContext& context) const override {
    return task_->CheckContext(context);
  }

 private:
  // Groups encoded in one forward pass.
  static constexpr int64_t kGroupsPerPass = 4;
  const Transformer& model_;
  const Tokenizer& tokenizer_;
  std::shared_ptr<const IclTask> task_;
};

TaskFigures FiguresOf(const IclTask& task) {
  const GroupLayout& layout = task.layout();
  TaskFigures f;
  f.demonstrations = static_cast<uint64_t>(task.demonstrations());
  f.groups = static_cast<uint64_t>(layout.groups());
  f.context_tokens = static_cast<uint64_t>(layout.context_tokens);
  f.group_length = static_cast<uint32_t>(layout.group_length);
  for (int32_t n : layout.demonstrations_per_group) {
    f.demonstrations_per_group.push_back(static_cast<uint32_t>(n));
  }
  f.truncated_demonstrations = static_cast<uint64_t>(layout.truncated_demonstrations);
  f.effective_rescale_factor = task.default_factor();
  f.max_query_tokens = static_cast<uint32_t>(task.options().max_query_tokens);
  f.max_answer_tokens = static_cast<uint32_t>(task.options().max_answer_tokens);
  return f;
}

PromptMode DecoderOnlyMode(const std::optional<ServedMode>& mode) {
  if (mode == ServedMode::kConventional) return PromptMode::kConventional;
  if (mode == ServedMode::kParallel) return PromptMode::kParallel;
  return PromptMode::kStructured;
}

class DecoderOnlyModel : public ServedModel {
 public:
  DecoderOnlyModel(ModelDescription description, std::unique_ptr<Tokenizer> tokenizer,
                   std::unique_ptr<Transformer> transformer)
      : ServedModel(std::move(description), std::move(tokenizer)),
        transformer_(std::move(transformer)) {}

  absl::Status CheckMode(ServedMode mode, const std::string& what) const override {
    if (mode == ServedMode::kStructured || mode == ServedMode::kParallel ||
        mode == ServedMode::kConventional) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(absl::StrCat(
        what, " ", ServedModeName(mode), " needs an encoder-decoder model; this server's model is ",
        description().model_type, " (decoder-only): use STRUCTURED, PARALLEL or CONVENTIONAL"));
  }

  absl::Status CheckTaskOptions(const ServedTaskOptions& options) const override {
    const std::string& p = options.field_prefix;
    if (options.mode) {
      if (auto s = CheckMode(*options.mode, p + "mode"); !s.ok()) return s;
    }
    if (options.groups != 0 || options.segment_length != 0 || options.group_attention) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, "groups, ", p, "segment_length and ", p,
                       "group_attention apply to encoder-decoder models; this server's model is ",
                       description().model_type, " (decoder-only)"));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<PreparedTask> PrepareTask(
      const ServedTaskOptions& options, const std::vector<Example>& demonstrations) const override {
    TaskOptions icl_options = options.common;
    icl_options.mode = DecoderOnlyMode(options.mode);
    auto prepared = IclTask::Prepare(*transformer_, tokenizer(), icl_options, demonstrations);
    if (!prepared.ok()) return prepared.status();
    std::shared_ptr<IclTask> task = *std::move(prepared);
    PreparedTask out;
    out.figures = FiguresOf(*task);
    out.context = std::make_shared<IclCachedContext>(*transformer_, tokenizer(), task);
    out.task = std::make_shared<IclServedTask>(std::move(task));
    return out;
  }

 private:
  std::unique_ptr<Transformer> transformer_;
};

ModelDescription Describe(const Transformer& transformer) {
  const ModelConfig& c = transformer.config();
  ModelDescription d;
  d.model_type = c.model_type;
  d.encoder_decoder = false;
  d.layers = static_cast<uint32_t>(c.num_layers);
  d.hidden_size = static_cast<uint32_t>(c.hidden_size);
  d.heads = static_cast<uint32_t>(c.num_heads);
  d.kv_heads = static_cast<uint32_t>(c.num_kv_heads);
  d.head_dim = static_cast<uint32_t>(c.head_dim);
  d.vocab_size = static_cast<uint32_t>(c.vocab_size);
  d.context_length = static_cast<uint32_t>(ContextLength(c));
  d.weight_dtype = std::string(DTypeName(transformer.stored_dtype()));
  d.held_weight_dtype = std::string(DTypeName(transformer.weight_dtype()));
  d.compute_dtype = transformer.compute_dtype();
  d.kv_dtype = transformer.kv_dtype();
  d.fingerprint = transformer.fingerprint();
  d.context_head_dim = c.head_dim;
  d.summary = absl::StrFormat(
      "%s, decoder-only, %d layers, hidden %d, %d heads / %d kv, vocab %d, context %d, weights "
      "stored as %s held as %s computed in %s, KV %s, fingerprint %s",
      c.model_type, c.num_layers, c.hidden_size, c.num_heads, c.num_kv_heads, c.vocab_size,
      c.max_position_embeddings, d.weight_dtype, d.held_weight_dtype,
      std::string(DTypeName(d.compute_dtype)), std::string(DTypeName(d.kv_dtype)), d.fingerprint);
  return d;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServedModel>> LoadDecoderOnlyModel(
    const std::filesystem::path& dir, Backend& backend, const TransformerOptions& options) {
  auto transformer = Transformer::Load(dir, backend, options);
  if (!transformer.ok()) return ModelLoadError(dir, transformer.status());
  auto tokenizer = LoadTokenizerIn(dir);
  if (!tokenizer.ok()) return tokenizer.status();
  ModelDescription description = Describe(**transformer);
  description.warning = VocabularyWarning(**tokenizer, (*transformer)->config().vocab_size);
  return std::make_unique<DecoderOnlyModel>(std::move(description), *std::move(tokenizer),
                                            *std::move(transformer));
}

}  // namespace manyshot
