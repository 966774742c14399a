// A TaskRegistry over the fake served model (fake_served_model.h) and a real ContextCache in a
// fresh directory: what the registry and scheduler unit tests stand on.
#pragma once

#include <filesystem>
#include <memory>
#include <string>

#include "gtest/gtest.h"
#include "server/server_config.h"
#include "server/task_registry.h"
#include "tests/server/fake_served_model.h"

namespace manyshot::testing {

class RegistryFixture : public ::testing::Test {
 protected:
  RegistryFixture();
  ~RegistryFixture() override;

  // Opens the cache and a registry on it (Restore()d), closing any open ones first: a second
  // call is a restart over the same directory.
  void Open(uint64_t memory_budget_bytes = uint64_t{1} << 20);
  void Close();

  // A spec with two labels, in `mode`.
  static v1::TaskSpec Spec(v1::Mode mode = v1::MODE_UNSPECIFIED);
  // `n` labelled demonstrations; `salt` changes their text (and so the task's content).
  static google::protobuf::RepeatedPtrField<v1::Demonstration> Demos(int n,
                                                                     const std::string& salt = "");

  absl::StatusOr<server::TaskRegistry::CreateResult> Create(const std::string& task_id,
                                                            const v1::TaskSpec& spec, int demos = 3,
                                                            const std::string& salt = "",
                                                            bool replace = false);

  std::shared_ptr<FakeBehaviour> behaviour_ = std::make_shared<FakeBehaviour>();
  std::filesystem::path dir_;
  server::ServerConfig config_;
  server::LoadedModel model_;
  std::unique_ptr<ContextCache> cache_;
  std::unique_ptr<server::TaskRegistry> registry_;
};

}  // namespace manyshot::testing
