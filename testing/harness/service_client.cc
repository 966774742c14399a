#include "testing/harness/service_client.h"

namespace manyshot::testing {

CreateOutcome CreateTask(v1::ManyShot::Stub& stub, const std::string& task_id,
                         const v1::TaskSpec& spec,
                         const std::vector<v1::Demonstration>& demonstrations, bool replace,
                         size_t chunk) {
  CreateOutcome outcome;
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(120));
  auto stream = stub.CreateTask(&context);
  v1::CreateTaskRequest first;
  first.set_task_id(task_id);
  *first.mutable_spec() = spec;
  first.set_replace(replace);
  size_t i = 0;
  for (; i < demonstrations.size() && i < chunk; ++i)
    *first.add_demonstrations() = demonstrations[i];
  stream->Write(first);
  while (i < demonstrations.size()) {
    v1::CreateTaskRequest more;
    for (size_t k = 0; k < chunk && i < demonstrations.size(); ++k, ++i) {
      *more.add_demonstrations() = demonstrations[i];
    }
    stream->Write(more);
  }
  stream->WritesDone();
  v1::CreateTaskResponse response;
  while (stream->Read(&response)) {
    if (response.has_progress()) ++outcome.progress_events;
    if (response.has_result()) outcome.result = response.result();
  }
  outcome.status = stream->Finish();
  return outcome;
}

v1::TaskSpec Sst2Spec(uint32_t group_length) {
  v1::TaskSpec spec;
  spec.set_input_template("Sentence: {text}\nLabel:");
  spec.add_labels("negative");
  spec.add_labels("positive");
  spec.set_group_length(group_length);
  spec.set_max_query_tokens(48);
  spec.set_max_answer_tokens(8);
  return spec;
}

std::vector<v1::Demonstration> Sst2Demonstrations(size_t n) {
  static const char* kSentences[][2] = {
      {"a stirring , funny and finally transporting re-imagining", "1"},
      {"apparently reassembled from the cutting-room floor", "0"},
      {"they presume their audience wo n't sit still", "0"},
      {"the performances are an absolute joy", "1"},
      {"one long string of cliches .", "0"},
      {"a gorgeous , witty , seductive movie .", "1"},
      {"it 's a bad sign when you 're rooting for the film to end", "0"},
      {"an utterly charming and hilarious film", "1"},
      {"the plot is nothing but boilerplate cliches", "0"},
      {"a masterpiece four years in the making", "1"},
      {"a dull , dumb and derivative horror film", "0"},
      {"warm , funny and touching", "1"}};
  std::vector<v1::Demonstration> demos;
  for (size_t i = 0; i < n; ++i) {
    v1::Demonstration d;
    d.set_text(kSentences[i % 12][0]);
    d.set_label_index(kSentences[i % 12][1][0] == '1' ? 1 : 0);
    demos.push_back(d);
  }
  return demos;
}

v1::ClassifyRequest ClassifyRequestFor(const std::string& task_id,
                                       const std::vector<std::string>& texts) {
  v1::ClassifyRequest request;
  request.set_task_id(task_id);
  for (const auto& t : texts) request.add_inputs()->set_text(t);
  return request;
}

}  // namespace manyshot::testing
