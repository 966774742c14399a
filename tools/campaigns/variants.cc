#include "tools/campaigns/variants.h"

#include "testing/harness/service_client.h"

namespace manyshot::campaign {
namespace {

// Sst2Demonstrations' sentences with label indices spread over `labels` labels.
std::vector<v1::Demonstration> Demos(size_t n, uint32_t labels) {
  auto demos = testing::Sst2Demonstrations(n);
  if (labels != 2) {
    for (size_t i = 0; i < demos.size(); ++i) demos[i].set_label_index(i % labels);
  }
  return demos;
}

v1::TaskSpec Spec(uint32_t group_length, std::vector<std::string> labels) {
  v1::TaskSpec spec = testing::Sst2Spec(group_length);
  spec.clear_labels();
  for (auto& l : labels) spec.add_labels(l);
  // Room for the check inputs (under 16 tokens) with groups up to 1000 tokens in GPT-2's 1024.
  spec.set_max_query_tokens(16);
  spec.set_max_answer_tokens(4);
  return spec;
}

}  // namespace

std::vector<Variant> MakeVariants() {
  std::vector<Variant> v;
  v.push_back({"light-2", Spec(64, {"negative", "positive"}), Demos(12, 2), false});
  {
    Variant x{"light-2-shuffled", Spec(128, {"bad", "good"}), Demos(24, 2), false};
    x.spec.set_shuffle_seed(7);
    v.push_back(x);
  }
  {
    Variant x{"light-3-calibrated", Spec(96, {"awful", "fine", "great"}), Demos(18, 3), false};
    x.spec.set_calibrate(true);
    v.push_back(x);
  }
  v.push_back({"medium-2", Spec(256, {"negative", "positive"}), Demos(96, 2), false});
  // Long groups: encode cost grows with the group length, so these take a while on one thread.
  v.push_back({"heavy-2", Spec(1000, {"negative", "positive"}), Demos(2400, 2), true});
  {
    Variant x{"heavy-3-calibrated", Spec(1000, {"awful", "fine", "great"}), Demos(1800, 3), true};
    x.spec.set_calibrate(true);
    v.push_back(x);
  }
  return v;
}

const std::vector<std::string>& CheckInputs() {
  static const std::vector<std::string> inputs = {"a delightful film", "a dull mess",
                                                  "the acting is wooden", "a triumph of style"};
  return inputs;
}

}  // namespace manyshot::campaign
