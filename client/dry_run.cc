#include "client/dry_run.h"

#include <algorithm>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "engine/task/prompt_template.h"

namespace manyshot::client {
namespace {

// The server's defaults for a spec that leaves them unset (TaskSpec in manyshot.proto).
constexpr char kDefaultAnswerTemplate[] = " {label}";
constexpr char kDefaultSeparator[] = "\n\n";

std::map<std::string, std::string> FieldsOf(const v1::Demonstration& d) {
  return {d.fields().begin(), d.fields().end()};
}

absl::StatusOr<std::string> LabelOf(const v1::TaskSpec& spec, const v1::Demonstration& d) {
  if (d.answer_case() != v1::Demonstration::kLabelIndex) return d.label();
  if (d.label_index() >= static_cast<uint32_t>(spec.labels_size())) {
    return absl::InvalidArgumentError(
        absl::StrCat("label_index ", d.label_index(), " is not an index of the labels"));
  }
  return spec.labels(static_cast<int>(d.label_index()));
}

absl::StatusOr<std::string> RenderDemonstration(const v1::TaskSpec& spec,
                                                const PromptTemplate& input,
                                                const PromptTemplate& answer,
                                                const v1::Demonstration& d) {
  auto rendered_input = input.Render(d.text(), FieldsOf(d));
  if (!rendered_input.ok()) return rendered_input.status();
  auto label = LabelOf(spec, d);
  if (!label.ok()) return label.status();
  auto rendered_answer = answer.Render(*label, {{"label", *label}});
  if (!rendered_answer.ok()) return rendered_answer.status();
  return absl::StrCat(*rendered_input, *rendered_answer,
                      spec.has_separator() ? spec.separator() : kDefaultSeparator);
}

}  // namespace

absl::Status PrintDryRun(const v1::TaskSpec& spec,
                         const std::vector<v1::Demonstration>& demonstrations, std::FILE* out) {
  auto input = PromptTemplate::Parse(spec.input_template(), "--template");
  if (!input.ok()) return input.status();
  auto answer = PromptTemplate::Parse(
      spec.has_answer_template() ? spec.answer_template() : kDefaultAnswerTemplate,
      "--answer_template");
  if (!answer.ok()) return answer.status();
  const size_t shown = std::min(kDryRunDemonstrations, demonstrations.size());
  std::fprintf(out,
               "# dry run, nothing sent: the first %zu of %zu demonstrations as the server "
               "renders them, then a query (the first demonstration's input)\n",
               shown, demonstrations.size());
  for (size_t i = 0; i < shown; ++i) {
    auto text = RenderDemonstration(spec, *input, *answer, demonstrations[i]);
    if (!text.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("demonstration ", i, ": ", text.status().message()));
    }
    std::fputs(text->c_str(), out);
  }
  if (!demonstrations.empty()) {
    const v1::Demonstration& first = demonstrations.front();
    auto query = input->Render(first.text(), FieldsOf(first));
    if (!query.ok()) return query.status();
    std::fprintf(out, "%s\n", query->c_str());
  }
  std::fprintf(out, "# the model scores each label's answer after the query\n");
  return absl::OkStatus();
}

}  // namespace manyshot::client
