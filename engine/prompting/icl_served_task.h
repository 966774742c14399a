// IclTask as a ServedTask: every call forwarded unchanged.
#pragma once

#include <memory>
#include <utility>

#include "engine/prompting/icl_task.h"
#include "engine/task/served_task.h"

namespace manyshot {

class IclServedTask : public ServedTask {
 public:
  explicit IclServedTask(std::shared_ptr<IclTask> task) : task_(std::move(task)) {}

  IclTask& task() const { return *task_; }

  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareClassify(
      const std::vector<Example>& inputs, const QueryOverrides& overrides) const override {
    return task_->PrepareClassify(inputs, overrides);
  }
  absl::StatusOr<std::vector<QueryWithCandidates>> PrepareChoices(
      const std::vector<Example>& inputs, const std::vector<std::vector<std::string>>& candidates,
      const QueryOverrides& overrides) const override {
    return task_->PrepareChoices(inputs, candidates, overrides);
  }
  absl::StatusOr<std::vector<ClassifyResult>> ClassifyPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides) override {
    return task_->ClassifyPrepared(context, items, overrides);
  }
  absl::StatusOr<std::vector<ChoiceResult>> ScoreChoicesPrepared(
      const EncodedContext* context, const std::vector<QueryWithCandidates>& items,
      const QueryOverrides& overrides) override {
    return task_->ScoreChoicesPrepared(context, items, overrides);
  }
  absl::StatusOr<GenerationOutput> Generate(const EncodedContext* context, const Example& input,
                                            GenerationParams params,
                                            const QueryOverrides& overrides) override {
    return task_->Generate(context, input, std::move(params), overrides);
  }

 private:
  std::shared_ptr<IclTask> task_;
};

}  // namespace manyshot
