#include "tests/server/fake_served_model.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "cache/kv_convert.h"
#include "engine/cpu/cpu_backend.h"

namespace manyshot::testing {
namespace {

constexpr int64_t kContextTokens = 4;

class FakeContext : public CachedContext {
 public:
  FakeContext(Backend& backend, std::shared_ptr<FakeBehaviour> behaviour, int64_t demonstrations)
      : backend_(backend), behaviour_(std::move(behaviour)), demonstrations_(demonstrations) {}

  CacheKeyInputs KeyInputs(DType kv_dtype, const std::string& sharing_scope) const override {
    CacheKeyInputs in;
    in.model_fingerprint = "fake";
    in.demonstrations.assign(static_cast<size_t>(demonstrations_), {1, 2});
    in.kv_dtype = kv_dtype;
    in.sharing_scope = sharing_scope;
    return in;
  }
  size_t Bytes(DType kv_dtype) const override { return Shape(kv_dtype).PayloadBytes(); }
  absl::StatusOr<EncodedContext> Encode(const ContextProgress& progress) const override {
    ++behaviour_->encoded;
    auto ctx = AllocateContext(backend_, Shape(DType::kF32));
    if (!ctx.ok()) return ctx.status();
    const std::vector<float> zeros(static_cast<size_t>(kContextTokens * 4), 0.0f);
    for (Tensor* t : {&ctx->kv.k[0], &ctx->kv.v[0]}) backend_.CopyFromHost(zeros.data(), *t);
    if (progress) progress(1, 1, kContextTokens);
    return ctx;
  }
  absl::Status Check(const EncodedContext& context) const override {
    if (context.tokens == kContextTokens) return absl::OkStatus();
    return absl::DataLossError("not this task's context");
  }

 private:
  static KvShape Shape(DType dtype) {
    return KvShape{dtype,          /*layers=*/1,
                   kContextTokens, /*kv_heads=*/1,
                   /*head_dim=*/4,
                   /*groups=*/1,   /*group_length=*/kContextTokens + 1};
  }
  Backend& backend_;
  std::shared_ptr<FakeBehaviour> behaviour_;
  int64_t demonstrations_;
};

// Answers from the inputs' lengths: input i's query is its text's bytes, every label a candidate.
class FakeTask : public ServedTask {
 public:
  FakeTask(std::shared_ptr<FakeBehaviour> behaviour, std::vector<std::string> labels)
      : behaviour_(std::move(behaviour)), labels_(std::move(labels)) {}

  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareClassify(
      const std::vector<Example>& inputs, const QueryOverrides&) const override {
    std::vector<std::vector<std::string>> candidates(inputs.size(), labels_);
    return Prepare(inputs, candidates);
  }
  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareChoices(
      const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates,
      const QueryOverrides&) const override {
    return Prepare(inputs, candidates);
  }
  absl::StatusOr<std::vector<ClassifyResult>> ClassifyPrepared(
      const EncodedContext*, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides&) override {
    {
      std::lock_guard<std::mutex> lock(behaviour_->mutex);
      behaviour_->classify_batches.push_back(items.size());
    }
    std::vector<ClassifyResult> out;
    for (const auto& item : items) {
      ClassifyResult r;
      r.input_tokens = static_cast<int64_t>(item.query.size());
      r.prediction = r.input_tokens % static_cast<int64_t>(item.candidates.size());
      r.labels.resize(item.candidates.size());
      out.push_back(r);
    }
    return out;
  }
  absl::StatusOr<std::vector<ChoiceResult>> ScoreChoicesPrepared(
      const EncodedContext*, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides&) override {
    std::vector<ChoiceResult> out;
    for (const auto& item : items) {
      ChoiceResult r;
      r.candidates.resize(item.candidates.size());
      r.probabilities.assign(item.candidates.size(), 1.0 / item.candidates.size());
      r.best = static_cast<int64_t>(item.candidates.size()) - 1;
      out.push_back(r);
    }
    return out;
  }
  int64_t RecomputedContextTokens() const override { return behaviour_->recomputed_tokens; }
  absl::StatusOr<GenerationOutput> Generate(const EncodedContext*, const Example& input,
                                            GenerationParams params,
                                            const QueryOverrides&) override {
    if (input.text.empty()) return absl::InvalidArgumentError("input 0: is empty");
    GenerationOutput out;
    for (int i = 0; i < params.max_new_tokens; ++i) out.tokens.push_back(static_cast<int32_t>(i));
    return out;
  }

 private:
  static absl::StatusOr<std::vector<QueryWithCandidates>> Prepare(
      const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates) {
    std::vector<QueryWithCandidates> out;
    for (size_t i = 0; i < inputs.size(); ++i) {
      QueryWithCandidates q;
      q.query.assign(inputs[i].text.size(), 7);
      for (const auto& c : candidates[i]) q.candidates.push_back({static_cast<int32_t>(c.size())});
      out.push_back(std::move(q));
    }
    return out;
  }
  std::shared_ptr<FakeBehaviour> behaviour_;
  std::vector<std::string> labels_;
};

class FakeServedModel : public ServedModel {
 public:
  FakeServedModel(Backend& backend, std::shared_ptr<FakeBehaviour> behaviour)
      : ServedModel(Describe(), nullptr), backend_(backend), behaviour_(std::move(behaviour)) {}

  absl::Status CheckMode(ServedMode mode, const std::string& what) const override {
    if (mode == ServedMode::kStructured || mode == ServedMode::kParallel ||
        mode == ServedMode::kConventional) {
      return absl::OkStatus();
    }
    return absl::FailedPreconditionError(
        absl::StrCat(what, " ", ServedModeName(mode), " is not a mode of the fake model"));
  }
  absl::Status CheckTaskOptions(const ServedTaskOptions& options) const override {
    if (options.mode) return CheckMode(*options.mode, options.field_prefix + "mode");
    return absl::OkStatus();
  }
  absl::StatusOr<PreparedTask> PrepareTask(
      const ServedTaskOptions& options, const std::vector<Example>& demonstrations) const override {
    ++behaviour_->prepared;
    PreparedTask out;
    out.task = std::make_shared<FakeTask>(behaviour_, options.common.labels);
    if (behaviour_->cached_context) {
      out.context = std::make_shared<FakeContext>(backend_, behaviour_,
                                                  static_cast<int64_t>(demonstrations.size()));
    }
    out.held_bytes = behaviour_->held_bytes;
    out.held_what = "the fake task's held bytes";
    out.figures.demonstrations = demonstrations.size();
    out.figures.groups = 1;
    out.figures.context_tokens = behaviour_->recomputed_tokens > 0
                                     ? static_cast<uint64_t>(behaviour_->recomputed_tokens)
                                     : static_cast<uint64_t>(kContextTokens);
    return out;
  }

 private:
  static ModelDescription Describe() {
    ModelDescription d;
    d.model_type = "fake";
    d.fingerprint = "fake-fingerprint";
    return d;
  }
  Backend& backend_;
  std::shared_ptr<FakeBehaviour> behaviour_;
};

}  // namespace

std::unique_ptr<ServedModel> MakeFakeServedModel(Backend& backend,
                                                 std::shared_ptr<FakeBehaviour> behaviour) {
  return std::make_unique<FakeServedModel>(backend, std::move(behaviour));
}

server::LoadedModel FakeLoadedModel(std::shared_ptr<FakeBehaviour> behaviour) {
  server::LoadedModel loaded;
  loaded.backend = std::make_unique<CpuBackend>(1);
  loaded.backend_selection = "test";
  loaded.served = MakeFakeServedModel(*loaded.backend, std::move(behaviour));
  return loaded;
}

}  // namespace manyshot::testing
