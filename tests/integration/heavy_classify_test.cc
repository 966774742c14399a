// A Classify within every limit must not take the server down however its labels multiply: 100
// labels of about 30 tokens each and 4 inputs, with the server's address space capped at its size
// once the task is ready plus 1.5 GiB. Scoring every label token of every input in one pass held a
// vocabulary-sized logits row for each (about 2.3 GB here) and died with std::bad_alloc; the
// scorer's passes are bounded, so the call is answered and the server keeps serving.
#include <sys/resource.h>

#include <fstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "manyshot/v1/manyshot.grpc.pb.h"
#include "testing/harness/server_under_test.h"
#include "testing/harness/service_client.h"

namespace manyshot::testing {
namespace {

// VmSize of a process, in bytes (0 when unreadable).
uint64_t AddressSpaceBytes(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("VmSize:", 0) == 0) return std::stoull(line.substr(7)) * 1024;
  }
  return 0;
}

TEST(HeavyClassifyTest, ManyLongLabelsAreScoredWithinBoundedMemory) {
  TempDir dir;
  ServerUnderTest server(dir.path() / "data", {});
  ASSERT_TRUE(server.started()) << server.Stderr();
  auto stub = v1::ManyShot::NewStub(server.Channel());
  v1::TaskSpec spec = Sst2Spec();
  spec.clear_labels();
  spec.set_max_answer_tokens(32);
  std::string tail;
  for (int t = 0; t < 27; ++t) tail += " a";
  for (int l = 0; l < 100; ++l) spec.add_labels("w" + std::to_string(l) + tail);
  std::vector<v1::Demonstration> demonstrations;
  for (int i = 0; i < 12; ++i) {
    v1::Demonstration d;
    d.set_text("sentence number " + std::to_string(i));
    d.set_label_index(static_cast<uint32_t>(i % 100));
    demonstrations.push_back(d);
  }
  auto created = CreateTask(*stub, "many-labels", spec, demonstrations);
  ASSERT_TRUE(created.status.ok()) << created.status.error_message();

  const uint64_t size = AddressSpaceBytes(server.process().pid());
  ASSERT_GT(size, 0u);
  const rlimit cap{size + (uint64_t{3} << 29), size + (uint64_t{3} << 29)};
  ASSERT_EQ(prlimit(server.process().pid(), RLIMIT_AS, &cap, nullptr), 0);

  grpc::ClientContext context;
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::minutes(5));
  v1::ClassifyResponse response;
  grpc::Status status = stub->Classify(
      &context,
      ClassifyRequestFor("many-labels", {"a fine film", "a dull film", "not bad", "too long"}),
      &response);
  ASSERT_TRUE(status.ok()) << status.error_message() << "\n" << server.Stderr();
  ASSERT_EQ(response.results_size(), 4);
  for (const auto& result : response.results()) {
    ASSERT_EQ(result.scores_size(), 100);
    EXPECT_GE(result.scores(0).num_tokens(), 28u);
  }
  EXPECT_FALSE(server.process().Wait(std::chrono::milliseconds(0)).has_value()) << server.Stderr();
}

}  // namespace
}  // namespace manyshot::testing
