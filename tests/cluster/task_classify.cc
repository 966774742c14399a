#include "tests/cluster/task_classify.h"

#include <chrono>

#include "grpcpp/client_context.h"

namespace manyshot::testing {

const std::vector<std::string>& ClassifyInputs() {
  static const std::vector<std::string> inputs = {"a delightful , moving film",
                                                  "a dull , lifeless mess", "the cast is fine"};
  return inputs;
}

grpc::Status Classify(v1::ManyShot::Stub& stub, const std::string& task,
                      std::vector<double>* scores, int deadline_seconds) {
  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(deadline_seconds));
  context.AddMetadata(kTaskHeader, task);
  v1::ClassifyRequest request;
  request.set_task_id(task);
  for (const std::string& text : ClassifyInputs()) request.add_inputs()->set_text(text);
  v1::ClassifyResponse response;
  grpc::Status status = stub.Classify(&context, request, &response);
  if (status.ok() && scores != nullptr) {
    scores->clear();
    for (const v1::ClassifyResult& result : response.results()) {
      for (const v1::LabelScore& score : result.scores()) {
        scores->push_back(score.sum_logprob());
        scores->push_back(score.probability());
      }
    }
  }
  return status;
}

}  // namespace manyshot::testing
