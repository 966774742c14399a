#include "engine/model/safetensors.h"

#include <cmath>
#include <string>
#include <vector>

#include "engine/model/synthetic/safetensors_writer.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::ReadFile;
using testing::TempDir;
using testing::WriteFile;

std::vector<float> Iota(size_t n, float scale) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = scale * (static_cast<float>(i) - 3.25f);
  return v;
}

std::vector<TensorToWrite> SampleTensors(DType dtype) {
  return {
      {"a.weight", dtype, {3, 4}, Iota(12, 0.5f)},
      {"b.bias", dtype, {5}, Iota(5, -1.0f)},
      {"scalar", dtype, {}, {7.0f}},
      {"empty", dtype, {0, 3}, {}},
  };
}

float Rounded(float v, DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return v;
    case DType::kF16:
      return F16ToF32(F32ToF16(v));
    case DType::kBF16:
      return BF16ToF32(F32ToBF16(v));
    case DType::kI32:
      break;
  }
  return v;
}

class SafetensorsRoundTrip : public ::testing::TestWithParam<DType> {};

TEST_P(SafetensorsRoundTrip, WriteThenRead) {
  TempDir dir;
  const DType dtype = GetParam();
  const auto tensors = SampleTensors(dtype);
  ASSERT_TRUE(WriteModelSafetensors(dir.path(), tensors, 1).ok());
  const std::string bytes = ReadFile(dir.path() / "model.safetensors");
  // HF pads the header with spaces so the data starts 8-byte aligned.
  uint64_t header_len = 0;
  for (int i = 7; i >= 0; --i) header_len = (header_len << 8) | static_cast<uint8_t>(bytes[i]);
  EXPECT_EQ(header_len % 8, 0u);

  auto archive = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(archive.ok()) << archive.status();
  EXPECT_THAT(archive->Names(), ElementsAre("a.weight", "b.bias", "empty", "scalar"));
  for (const TensorToWrite& t : tensors) {
    const TensorInfo* info = archive->Find(t.name);
    ASSERT_NE(info, nullptr) << t.name;
    EXPECT_EQ(info->dtype, dtype);
    EXPECT_EQ(info->shape, t.shape);
    EXPECT_EQ(info->nbytes, t.data.size() * DTypeSize(dtype));
    std::vector<float> got(t.data.size() + 1, -99.0f);
    ASSERT_TRUE(archive->ReadF32(t.name, t.shape, got.data()).ok());
    for (size_t i = 0; i < t.data.size(); ++i) {
      EXPECT_EQ(got[i], Rounded(t.data[i], dtype)) << t.name << "[" << i << "]";
    }
    EXPECT_EQ(got.back(), -99.0f);  // nothing written past the tensor
  }
  EXPECT_EQ(archive->Find("missing"), nullptr);
}

INSTANTIATE_TEST_SUITE_P(AllDTypes, SafetensorsRoundTrip,
                         ::testing::Values(DType::kF32, DType::kF16, DType::kBF16));

TEST(SafetensorsTest, ReadF32Errors) {
  TempDir dir;
  ASSERT_TRUE(WriteModelSafetensors(dir.path(), SampleTensors(DType::kF32), 1).ok());
  auto archive = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(archive.ok());
  std::vector<float> buf(64);
  absl::Status s = archive->ReadF32("nope", {3, 4}, buf.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(), HasSubstr("nope"));
  s = archive->ReadF32("a.weight", {4, 3}, buf.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("a.weight"));
  EXPECT_THAT(s.message(), HasSubstr("[3, 4]"));
  EXPECT_THAT(s.message(), HasSubstr("[4, 3]"));
  EXPECT_THAT(s.message(), HasSubstr("model.safetensors"));
  s = archive->ReadF32("a.weight", {12}, buf.data());
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
}

TEST(SafetensorsTest, Sharded) {
  TempDir dir;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 10; ++i) {
    tensors.push_back({"t" + std::to_string(i),
                       i % 2 ? DType::kBF16 : DType::kF32,
                       {i + 1, 2},
                       Iota(static_cast<size_t>(2 * (i + 1)), 0.25f)});
  }
  ASSERT_TRUE(WriteModelSafetensors(dir.path(), tensors, 3).ok());
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "model.safetensors"));
  for (const char* shard : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                            "model-00003-of-00003.safetensors"}) {
    EXPECT_TRUE(std::filesystem::exists(dir.path() / shard)) << shard;
  }
  auto index = nlohmann::json::parse(ReadFile(dir.path() / "model.safetensors.index.json"));
  EXPECT_EQ(index["weight_map"].size(), 10u);
  uint64_t total = 0;
  for (const auto& t : tensors) total += t.data.size() * DTypeSize(t.dtype);
  EXPECT_EQ(index["metadata"]["total_size"].get<uint64_t>(), total);

  auto archive = SafetensorsArchive::Open(dir.path());
  ASSERT_TRUE(archive.ok()) << archive.status();
  EXPECT_EQ(archive->size(), 10u);
  std::set<std::string> files;
  for (const auto& t : tensors) {
    const TensorInfo* info = archive->Find(t.name);
    ASSERT_NE(info, nullptr);
    files.insert(info->file.filename().string());
    std::vector<float> got(t.data.size());
    ASSERT_TRUE(archive->ReadF32(t.name, t.shape, got.data()).ok());
    for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], Rounded(t.data[i], t.dtype));
  }
  EXPECT_EQ(files.size(), 3u);

  // Moving the archive keeps tensor pointers valid (the mappings are heap-held).
  const std::byte* before = archive->Find("t5")->data;
  SafetensorsArchive moved = *std::move(archive);
  EXPECT_EQ(moved.Find("t5")->data, before);
}

TEST(SafetensorsTest, MissingShardIsNotFound) {
  TempDir dir;
  std::vector<TensorToWrite> tensors = SampleTensors(DType::kF32);
  ASSERT_TRUE(WriteModelSafetensors(dir.path(), tensors, 2).ok());
  std::filesystem::remove(dir.path() / "model-00002-of-00002.safetensors");
  auto archive = SafetensorsArchive::Open(dir.path());
  EXPECT_EQ(archive.status().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(archive.status().message(), HasSubstr("model-00002-of-00002.safetensors"));
}

TEST(SafetensorsTest, BadIndexFiles) {
  const char* bad_indexes[] = {
      "",
      "[]",
      "{}",
      R"({"weight_map": 3})",
      R"({"weight_map": {"a": 5}})",
      R"({"weight_map": {"a": "/etc/passwd"}})",
      R"({"weight_map": {"a": "../x.safetensors"}})",
      R"({"weight_map": {"a": ""}})",
      R"({"weight_map": {"not_there": "model-00001-of-00002.safetensors"}})",
  };
  for (const char* text : bad_indexes) {
    TempDir dir;
    ASSERT_TRUE(WriteModelSafetensors(dir.path(), SampleTensors(DType::kF32), 2).ok());
    WriteFile(dir.path() / "model.safetensors.index.json", text);
    auto archive = SafetensorsArchive::Open(dir.path());
    EXPECT_FALSE(archive.ok()) << text;
    EXPECT_THAT(archive.status().message(), HasSubstr("model.safetensors.index.json")) << text;
  }
}

TEST(SafetensorsTest, EmptyDirectory) {
  TempDir dir;
  auto archive = SafetensorsArchive::Open(dir.path());
  EXPECT_EQ(archive.status().code(), absl::StatusCode::kNotFound);
}

TEST(SafetensorsTest, UnsupportedDTypeIsUnimplemented) {
  TempDir dir;
  std::string header = R"({"x.weight":{"dtype":"I64","shape":[2],"data_offsets":[0,16]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header + std::string(16, '\0');
  WriteFile(dir.path() / "model.safetensors", bytes);
  auto archive = SafetensorsArchive::Open(dir.path());
  EXPECT_EQ(archive.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_THAT(archive.status().message(), HasSubstr("I64"));
  EXPECT_THAT(archive.status().message(), HasSubstr("x.weight"));
}

TEST(SafetensorsTest, MetadataAndUnalignedHeaderAccepted) {
  // Unpadded header (length 75, not a multiple of 8): readers must not assume alignment.
  std::string header =
      R"({"__metadata__":{"format":"pt"},"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
  std::string bytes(8, '\0');
  bytes[0] = static_cast<char>(header.size());
  bytes += header;
  const float values[2] = {1.5f, -2.0f};
  bytes.append(reinterpret_cast<const char*>(values), 8);
  auto tensors =
      ParseSafetensorsBuffer(reinterpret_cast<const std::byte*>(bytes.data()), bytes.size(), "mem");
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  ASSERT_EQ(tensors->size(), 1u);
  EXPECT_EQ((*tensors)[0].name, "x");
}

TEST(SafetensorsTest, FingerprintStableAndSensitive) {
  TempDir a, b, c;
  const auto tensors = SampleTensors(DType::kF32);
  ASSERT_TRUE(WriteModelSafetensors(a.path(), tensors, 1).ok());
  ASSERT_TRUE(WriteModelSafetensors(b.path(), tensors, 1).ok());
  auto changed = tensors;
  changed[1].data[2] += 1e-3f;
  ASSERT_TRUE(WriteModelSafetensors(c.path(), changed, 1).ok());
  auto fa = SafetensorsArchive::Open(a.path());
  auto fb = SafetensorsArchive::Open(b.path());
  auto fc = SafetensorsArchive::Open(c.path());
  ASSERT_TRUE(fa.ok() && fb.ok() && fc.ok());
  EXPECT_EQ(fa->fingerprint().size(), 16u);
  EXPECT_EQ(fa->fingerprint(), fa->fingerprint());
  EXPECT_EQ(fa->fingerprint(), fb->fingerprint());
  EXPECT_NE(fa->fingerprint(), fc->fingerprint());
}

TEST(SafetensorsTest, HashBytesIsFixedAndSensitive) {
  // Pinned values: the tiny models' weights (and so the goldens) derive from this hash.
  std::string s = "manyshot fingerprint test vector, longer than 32 bytes.";
  const auto* p = reinterpret_cast<const std::byte*>(s.data());
  EXPECT_EQ(HashBytes(p, s.size(), 0), 0x4916a31f8b91d1f9ull);
  EXPECT_NE(HashBytes(p, s.size(), 0), HashBytes(p, s.size(), 1));
  EXPECT_NE(HashBytes(p, s.size(), 0), HashBytes(p, s.size() - 1, 0));
  for (size_t i = 0; i < s.size(); ++i) {
    std::string t = s;
    t[i] ^= 1;
    EXPECT_NE(HashBytes(reinterpret_cast<const std::byte*>(t.data()), t.size(), 0),
              HashBytes(p, s.size(), 0))
        << i;
  }
  EXPECT_EQ(HashBytes(nullptr, 0, 0), HashBytes(nullptr, 0, 0));
}

}  // namespace
}  // namespace manyshot
