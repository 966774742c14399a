// The near-miss model directories (PyTorch .bin only, a Hugging Face cache root) are refused with
// what to do, both by the hint functions and where the loader meets them.
#include "engine/model/model_dir_hints.h"

#include <fstream>
#include <string>

#include "engine/model/model_config.h"
#include "engine/model/safetensors.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

namespace fs = std::filesystem;
using ::manyshot::testing::TempDir;
using ::testing::HasSubstr;
using ::testing::Not;

void Touch(const fs::path& path) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "x";
}

TEST(BinWeightsHintTest, SingleBinGetsTheConversionCommand) {
  TempDir dir;
  Touch(dir.path() / "config.json");
  Touch(dir.path() / "pytorch_model.bin");
  const std::string hint = BinWeightsHint(dir.path());
  EXPECT_THAT(hint, HasSubstr("PyTorch .bin weights only"));
  EXPECT_THAT(hint, HasSubstr("cd " + dir.path().string() + " && python3 -c \""));
  EXPECT_THAT(hint, HasSubstr("from safetensors.torch import save_file"));
  EXPECT_THAT(hint, HasSubstr("glob.glob('pytorch_model*.bin')"));
  EXPECT_THAT(hint, HasSubstr("'model.safetensors'"));
  // One line a user can paste.
  EXPECT_EQ(hint.find('\n'), std::string::npos);
}

TEST(BinWeightsHintTest, ShardedBinIsRecognised) {
  TempDir dir;
  Touch(dir.path() / "pytorch_model-00001-of-00002.bin");
  Touch(dir.path() / "pytorch_model.bin.index.json");
  EXPECT_THAT(BinWeightsHint(dir.path()), HasSubstr("PyTorch .bin weights only"));
}

TEST(BinWeightsHintTest, NoBinNoHint) {
  TempDir dir;
  Touch(dir.path() / "config.json");
  Touch(dir.path() / "training_args.bin");
  EXPECT_EQ(BinWeightsHint(dir.path()), "");
}

TEST(BinWeightsHintTest, ArchiveOpenCarriesTheHint) {
  TempDir dir;
  Touch(dir.path() / "pytorch_model.bin");
  auto archive = SafetensorsArchive::Open(dir.path());
  ASSERT_FALSE(archive.ok());
  EXPECT_EQ(archive.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(archive.status().message(), HasSubstr("neither model.safetensors"));
  EXPECT_THAT(archive.status().message(), HasSubstr("save_file"));
}

TEST(BinWeightsHintTest, EmptyDirectoryHasNoHint) {
  TempDir dir;
  auto archive = SafetensorsArchive::Open(dir.path());
  ASSERT_FALSE(archive.ok());
  EXPECT_THAT(archive.status().message(), Not(HasSubstr("save_file")));
}

TEST(HfCacheRootHintTest, NamesTheSnapshotRevision) {
  TempDir tmp;
  const fs::path root = tmp.path() / "models--Qwen--Qwen2.5-0.5B";
  fs::create_directories(root / "blobs");
  fs::create_directories(root / "refs");
  Touch(root / "snapshots" / "060db6499f32faf8b98477b0a26969ef7d8b9987" / "config.json");
  const std::string hint = HfCacheRootHint(root);
  EXPECT_THAT(hint, HasSubstr("Hugging Face cache root"));
  EXPECT_THAT(
      hint, HasSubstr((root / "snapshots" / "060db6499f32faf8b98477b0a26969ef7d8b9987").string()));
  EXPECT_THAT(hint, Not(HasSubstr("revisions here")));
}

TEST(HfCacheRootHintTest, ListsEveryRevision) {
  TempDir tmp;
  const fs::path root = tmp.path() / "models--Org--Name";
  fs::create_directories(root / "snapshots" / "aaa");
  fs::create_directories(root / "snapshots" / "bbb");
  EXPECT_THAT(HfCacheRootHint(root), HasSubstr("(revisions here: aaa, bbb)"));
}

TEST(HfCacheRootHintTest, EmptySnapshotsSaysDownload) {
  TempDir tmp;
  const fs::path root = tmp.path() / "models--Org--Name";
  fs::create_directories(root / "snapshots");
  EXPECT_THAT(HfCacheRootHint(root), HasSubstr("huggingface-cli download"));
}

TEST(HfCacheRootHintTest, OrdinaryDirectoryHasNoHint) {
  TempDir tmp;
  fs::create_directories(tmp.path() / "snapshots");  // a folder of that name alone is not a cache
  EXPECT_EQ(HfCacheRootHint(tmp.path()), "");
  EXPECT_EQ(HfCacheRootHint(tmp.path() / "missing"), "");
}

TEST(HfCacheRootHintTest, ParseModelConfigCarriesTheHint) {
  TempDir tmp;
  const fs::path root = tmp.path() / "models--Org--Name";
  fs::create_directories(root / "snapshots" / "abc123");
  auto config = ParseModelConfig(root / "config.json");
  ASSERT_FALSE(config.ok());
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(config.status().message(), HasSubstr((root / "snapshots" / "abc123").string()));
}

}  // namespace
}  // namespace manyshot
