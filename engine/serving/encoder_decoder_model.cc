#include "engine/serving/encoder_decoder_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "engine/serving/load_steps.h"
#include "engine/t5/prompt_modes.h"

namespace manyshot {
namespace {

// What a T5 task keeps between queries (TaskStats.cache_holds; README "T5").
constexpr char kT5CacheHolds[] =
    "each demonstration's token ids (cut to the segment length) and the first encoder layer's "
    "q|k|v of its tokens, in memory (counted against the memory tier's budget), rebuilt from the "
    "stored demonstrations after a restart; "
    "nothing in the KV tiers: from the first layer's attention on, a demonstration's encoder "
    "states depend on the test input, so the encoder runs per query over every demonstration in "
    "one batch (per-query encoder work linear in the number of demonstrations in SAICL, FID, "
    "ENSEMBLE and GROUP_FID)";

bool Grouped(ServedMode mode) {
  return mode == ServedMode::kGroupFid || mode == ServedMode::kEnsemble;
}

T5PromptMode ToT5PromptMode(ServedMode mode) {
  switch (mode) {
    case ServedMode::kSaicl:
      return T5PromptMode::kSaicl;
    case ServedMode::kFid:
      return T5PromptMode::kFid;
    case ServedMode::kEnsemble:
      return T5PromptMode::kEnsemble;
    case ServedMode::kGroupFid:
      return T5PromptMode::kGroupFid;
    default:
      return T5PromptMode::kConventional;
  }
}

// The figures GetTask reports; `layout` is the prompts the encoder reads per query.
TaskFigures FiguresOf(const T5Task& task, const T5PromptLayout& layout) {
  const T5DemonstrationSet& set = task.demonstrations();
  TaskFigures f;
  f.demonstrations = static_cast<uint64_t>(set.demonstrations());
  f.groups = layout.prompt_demonstrations.size();
  for (const auto& prompt : layout.prompt_demonstrations) {
    f.demonstrations_per_group.push_back(static_cast<uint32_t>(prompt.size()));
  }
  f.context_tokens = static_cast<uint64_t>(task.RecomputedContextTokens());
  f.truncated_demonstrations = static_cast<uint64_t>(set.truncated_demonstrations);
  f.segment_length = static_cast<uint32_t>(set.segment_length);
  f.max_query_tokens = static_cast<uint32_t>(task.options().common.max_query_tokens);
  f.max_answer_tokens = static_cast<uint32_t>(task.options().common.max_answer_tokens);
  f.cache_holds = kT5CacheHolds;
  return f;
}

class EncoderDecoderModel : public ServedModel {
 public:
  EncoderDecoderModel(ModelDescription description, std::unique_ptr<Tokenizer> tokenizer,
                      std::unique_ptr<T5Model> t5)
      : ServedModel(std::move(description), std::move(tokenizer)), t5_(std::move(t5)) {}

  absl::Status CheckMode(ServedMode mode, const std::string& what) const override {
    if (mode != ServedMode::kStructured && mode != ServedMode::kParallel) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", ServedModeName(mode),
                     " is structured prompting, which is decoder-only; this server's model is ",
                     description().model_type,
                     " (encoder-decoder): use CONVENTIONAL, SAICL, FID, ENSEMBLE or GROUP_FID"));
  }

  absl::Status CheckTaskOptions(const ServedTaskOptions& options) const override {
    const std::string& p = options.field_prefix;
    const ServedMode mode = options.mode.value_or(ServedMode::kConventional);
    if (auto s = CheckMode(mode, p + "mode"); !s.ok()) return s;
    if (options.sets_group_packing) {
      return absl::InvalidArgumentError(absl::StrCat(
          p, "group_length, ", p, "rescale_factor and ", p,
          "alignment shape decoder-only groups; leave them unset on an encoder-decoder (",
          description().model_type, ") model (", p, "segment_length and ", p,
          "groups shape its prompts)"));
    }
    // G is checked against the mode here, before anything is tokenized; against k by the task.
    if (mode == ServedMode::kGroupFid && options.groups == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          p, "groups must be set (1 to the number of demonstrations) for mode GROUP_FID"));
    }
    if (!Grouped(mode) && options.groups != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(p, "groups applies to GROUP_FID and ENSEMBLE only; it must be 0 for mode ",
                       ServedModeName(mode)));
    }
    return absl::OkStatus();
  }

  absl::StatusOr<PreparedTask> PrepareTask(
      const ServedTaskOptions& options, const std::vector<Example>& demonstrations) const override {
    auto prepared = T5Task::Prepare(*t5_, tokenizer(), ToT5TaskOptions(options), demonstrations);
    if (!prepared.ok()) return prepared.status();
    std::shared_ptr<T5Task> task = *std::move(prepared);
    auto layout = LayOutT5Prompts(task->options().mode, task->demonstrations().demonstrations());
    if (!layout.ok()) return layout.status();
    PreparedTask out;
    out.figures = FiguresOf(*task, *layout);
    const Tensor& qkv = task->demonstrations().first_layer.qkv;
    out.held_bytes = qkv.defined() ? qkv.bytes() : 0;
    out.held_what = "its demonstrations' first-layer q|k|v";
    out.task = std::move(task);
    return out;
  }

 private:
  std::unique_ptr<T5Model> t5_;
};

ModelDescription Describe(const T5Model& t5) {
  const T5Config& c = t5.config();
  ModelDescription d;
  d.model_type = "t5";
  d.encoder_decoder = true;
  d.layers = static_cast<uint32_t>(c.num_layers);
  d.hidden_size = static_cast<uint32_t>(c.d_model);
  d.heads = static_cast<uint32_t>(c.num_heads);
  d.kv_heads = static_cast<uint32_t>(c.num_heads);
  d.head_dim = static_cast<uint32_t>(c.d_kv);
  d.vocab_size = static_cast<uint32_t>(c.vocab_size);
  d.held_weight_dtype = std::string(DTypeName(t5.compute_dtype()));
  d.compute_dtype = t5.compute_dtype();
  d.kv_dtype = t5.kv_dtype();
  d.fingerprint = t5.fingerprint();
  d.summary = absl::StrFormat(
      "t5, encoder-decoder, %d encoder / %d decoder layers, d_model %d, %d heads of %d, vocab %d, "
      "computed in %s, fingerprint %s",
      c.num_layers, c.num_decoder_layers, c.d_model, c.num_heads, c.d_kv, c.vocab_size,
      d.held_weight_dtype, d.fingerprint);
  return d;
}

}  // namespace

T5TaskOptions ToT5TaskOptions(const ServedTaskOptions& options) {
  T5TaskOptions o;
  o.common = options.common;
  o.common.mode = PromptMode::kConventional;
  o.mode.mode = ToT5PromptMode(options.mode.value_or(ServedMode::kConventional));
  o.mode.groups = options.groups;
  o.mode.group_attention = options.group_attention == GroupAttention::kFull
                               ? T5PromptAttention::kFull
                               : T5PromptAttention::kSaicl;
  o.segments.segment_length = options.segment_length;
  o.segments.long_demonstrations = o.common.long_demonstrations;
  return o;
}

absl::StatusOr<std::unique_ptr<ServedModel>> LoadEncoderDecoderModel(
    const std::filesystem::path& dir, Backend& backend, const TransformerOptions& options) {
  auto t5 = T5Model::Load(dir, backend, options);
  if (!t5.ok()) return ModelLoadError(dir, t5.status());
  auto tokenizer = LoadTokenizerIn(dir);
  if (!tokenizer.ok()) return tokenizer.status();
  ModelDescription description = Describe(**t5);
  description.warning = VocabularyWarning(**tokenizer, (*t5)->config().vocab_size);
  return std::make_unique<EncoderDecoderModel>(std::move(description), *std::move(tokenizer),
                                               *std::move(t5));
}

}  // namespace manyshot
