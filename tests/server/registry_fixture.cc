#include "tests/server/registry_fixture.h"

#include <unistd.h>

namespace manyshot::testing {

RegistryFixture::RegistryFixture() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  dir_ = std::filesystem::path(MANYSHOT_BINARY_DIR) / "server_unit_tests" /
         (std::string(info->test_suite_name()) + "." + info->name() + "_" +
          std::to_string(::getpid()));
  std::filesystem::remove_all(dir_);
  std::filesystem::create_directories(dir_);
  config_.kv_dtype = "f32";
  config_.max_concurrent_creates = 1;
  model_ = FakeLoadedModel(behaviour_);
}

RegistryFixture::~RegistryFixture() {
  Close();
  model_ = server::LoadedModel();
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);
}

void RegistryFixture::Open(uint64_t memory_budget_bytes) {
  Close();
  ContextCacheOptions options;
  options.memory_budget_bytes = memory_budget_bytes;
  auto cache = ContextCache::Open(dir_ / "cache", options, *model_.backend);
  ASSERT_TRUE(cache.ok()) << cache.status();
  cache_ = *std::move(cache);
  registry_ = std::make_unique<server::TaskRegistry>(model_, *cache_, config_);
  ASSERT_TRUE(registry_->Restore().ok());
}

void RegistryFixture::Close() {
  registry_.reset();
  cache_.reset();
}

v1::TaskSpec RegistryFixture::Spec(v1::Mode mode) {
  v1::TaskSpec spec;
  spec.set_input_template("Review: {text}\nSentiment:");
  spec.add_labels("positive");
  spec.add_labels("negative");
  spec.set_mode(mode);
  return spec;
}

google::protobuf::RepeatedPtrField<v1::Demonstration> RegistryFixture::Demos(
    int n, const std::string& salt) {
  google::protobuf::RepeatedPtrField<v1::Demonstration> demos;
  for (int i = 0; i < n; ++i) {
    auto* d = demos.Add();
    d->set_text("demonstration " + std::to_string(i) + salt);
    d->set_label(i % 2 == 0 ? "positive" : "negative");
  }
  return demos;
}

absl::StatusOr<server::TaskRegistry::CreateResult> RegistryFixture::Create(
    const std::string& task_id, const v1::TaskSpec& spec, int demos, const std::string& salt,
    bool replace) {
  return registry_->Create("tenant", task_id, spec, Demos(demos, salt), replace, nullptr);
}

}  // namespace manyshot::testing
