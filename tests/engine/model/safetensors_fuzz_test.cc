// Malformed safetensors input must give a clear error, never a crash or an out-of-bounds read.
// Buffers are exact-size heap copies so that AddressSanitizer catches any overread.
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/model/safetensors.h"
#include "engine/model/synthetic/safetensors_writer.h"
#include "engine/model/synthetic/tiny_model.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/engine/model/temp_dir.h"

namespace manyshot {
namespace {

using ::testing::HasSubstr;

absl::StatusOr<std::vector<TensorInfo>> ParseExact(const std::string& bytes) {
  auto copy = std::make_unique<std::byte[]>(bytes.size() + 1);  // +1: never zero-sized
  std::memcpy(copy.get(), bytes.data(), bytes.size());
  auto result = ParseSafetensorsBuffer(copy.get(), bytes.size(), "fuzz.safetensors");
  if (result.ok()) {
    // Whatever was accepted must lie inside the buffer; touch every byte so ASan would notice.
    unsigned sum = 0;
    for (const TensorInfo& t : *result) {
      EXPECT_GE(t.data, copy.get());
      EXPECT_LE(t.data + t.nbytes, copy.get() + bytes.size());
      for (size_t i = 0; i < t.nbytes; ++i) sum += static_cast<unsigned>(t.data[i]);
    }
    (void)sum;
    // Pointers refer to `copy`, which dies here: callers only look at status and names.
    for (TensorInfo& t : *result) t.data = nullptr;
  }
  return result;
}

std::string Le64(uint64_t v) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[i] = static_cast<char>((v >> (8 * i)) & 0xff);
  return s;
}

std::string WithHeader(const std::string& header, size_t data_bytes) {
  return Le64(header.size()) + header + std::string(data_bytes, '\x11');
}

std::string ValidFile() {
  std::vector<TensorToWrite> tensors = {
      {"w", DType::kF32, {4, 3}, std::vector<float>(12, 0.5f)},
      {"b", DType::kBF16, {3}, {1.0f, 2.0f, 3.0f}},
      {"h", DType::kF16, {2, 2}, {1.0f, -1.0f, 0.25f, 8.0f}},
  };
  return *SerializeSafetensors(tensors, {{"format", "pt"}});
}

TEST(SafetensorsFuzzTest, ValidBaseline) {
  auto r = ParseExact(ValidFile());
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_EQ(r->size(), 3u);
}

TEST(SafetensorsFuzzTest, EveryTruncationFails) {
  const std::string file = ValidFile();
  for (size_t len = 0; len < file.size(); ++len) {
    auto r = ParseExact(file.substr(0, len));
    EXPECT_FALSE(r.ok()) << len;
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << len;
    EXPECT_THAT(r.status().message(), HasSubstr("fuzz.safetensors"));
  }
}

TEST(SafetensorsFuzzTest, TruncatedFilesOnDisk) {
  const std::string file = ValidFile();
  testing::TempDir dir;
  for (size_t len :
       {size_t{0}, size_t{3}, size_t{8}, size_t{20}, file.size() / 2, file.size() - 1}) {
    testing::WriteFile(dir.path() / "model.safetensors", file.substr(0, len));
    auto archive = SafetensorsArchive::Open(dir.path());
    EXPECT_FALSE(archive.ok()) << len;
  }
}

TEST(SafetensorsFuzzTest, RandomByteFlipsNeverCrash) {
  const std::string file = ValidFile();
  NormalRng rng(12345);
  int accepted = 0;
  for (int iter = 0; iter < 400; ++iter) {
    std::string mutated = file;
    const int flips = 1 + static_cast<int>(rng.NextU64() % 4);
    for (int f = 0; f < flips; ++f) {
      // Bias mutations towards the header, where the parser lives.
      const size_t limit =
          (rng.NextU64() % 4 == 0) ? mutated.size() : std::min<size_t>(mutated.size(), 200);
      mutated[rng.NextU64() % limit] = static_cast<char>(rng.NextU64() & 0xff);
    }
    auto r = ParseExact(mutated);
    if (r.ok()) ++accepted;
  }
  // Data-byte flips leave a valid file; header flips almost always do not.
  EXPECT_LT(accepted, 400);
}

TEST(SafetensorsFuzzTest, RandomBuffersNeverCrash) {
  NormalRng rng(777);
  for (int iter = 0; iter < 200; ++iter) {
    std::string bytes(rng.NextU64() % 300, '\0');
    for (char& c : bytes) c = static_cast<char>(rng.NextU64() & 0xff);
    if (iter % 2 == 0 && bytes.size() >= 8) {
      // A plausible header length so the JSON parser sees the random bytes.
      std::string len = Le64(bytes.size() - 8 - rng.NextU64() % (bytes.size() - 7));
      bytes.replace(0, 8, len);
    }
    EXPECT_FALSE(ParseExact(bytes).ok()) << iter;
  }
}

TEST(SafetensorsFuzzTest, HugeHeaderLengths) {
  const std::string file = ValidFile();
  for (uint64_t len :
       {~uint64_t{0}, ~uint64_t{0} - 7, uint64_t{1} << 63, uint64_t{1} << 40,
        static_cast<uint64_t>(file.size()), static_cast<uint64_t>(file.size() - 7)}) {
    std::string bad = file;
    bad.replace(0, 8, Le64(len));
    auto r = ParseExact(bad);
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << len;
  }
}

TEST(SafetensorsFuzzTest, HandCraftedBadHeaders) {
  struct Case {
    std::string header;
    size_t data;
    const char* expect;  // substring of the message
  };
  const std::string ok_tail = R"("dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  const Case cases[] = {
      {"", 0, "JSON"},
      {"   ", 0, "JSON"},
      {"[]", 0, "object"},
      {"null", 0, "object"},
      {"{", 0, "JSON"},
      {std::string("{\"a\":{\0}}", 9), 0, "JSON"},
      {R"({"__metadata__":5})", 0, "__metadata__"},
      {R"({"x":5})", 8, "x"},
      {R"({"x":{"shape":[2],"data_offsets":[0,8]}})", 8, "dtype"},
      {R"({"x":{"dtype":5,"shape":[2],"data_offsets":[0,8]}})", 8, "dtype"},
      {R"({"x":{"dtype":"F32","data_offsets":[0,8]}})", 8, "shape"},
      {R"({"x":{"dtype":"F32","shape":2,"data_offsets":[0,8]}})", 8, "shape"},
      {R"({"x":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8, "shape"},
      {R"({"x":{"dtype":"F32","shape":[2.0],"data_offsets":[0,8]}})", 8, "shape"},
      {R"({"x":{"dtype":"F32","shape":["2"],"data_offsets":[0,8]}})", 8, "shape"},
      {R"({"x":{"dtype":"F32","shape":[2]}})", 8, "data_offsets"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0]}})", 8, "data_offsets"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8,9]}})", 8, "data_offsets"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[-8,0]}})", 8, "data_offsets"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,0]}})", 8, "data_offsets"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,16]}})", 8, "data_offsets"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}})", 8, "outside"},
      {R"({"x":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 12, "need 12"},
      {R"({"x":{"dtype":"F16","shape":[2],"data_offsets":[0,8]}})", 8, "need 4"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,18446744073709551615]}})", 8,
       "outside"},
      {R"({"x":{"dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8]}})", 8,
       "overflow"},
      {R"({"x":{"dtype":"F32","shape":[9223372036854775807,4],"data_offsets":[0,8]}})", 8,
       "overflow"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("y":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
       16, "overlap"},
      {R"({"x":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
       R"("y":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})",
       8, "overlap"},
      {R"({"x":{)" + ok_tail + "}}", 8, "JSON"},  // trailing garbage
      {R"({"x":{)" + ok_tail, 8, "JSON"},         // unterminated
  };
  for (const Case& c : cases) {
    auto r = ParseExact(WithHeader(c.header, c.data));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument) << c.header;
    EXPECT_THAT(r.status().message(), HasSubstr(c.expect)) << c.header;
  }
  // Sanity: the well-formed variant of the above is accepted.
  EXPECT_TRUE(ParseExact(WithHeader(R"({"x":{)" + ok_tail + "}", 8)).ok());
  // Zero-element tensors and trailing (unreferenced) data bytes are legal.
  EXPECT_TRUE(
      ParseExact(WithHeader(R"({"z":{"dtype":"BF16","shape":[0,5],"data_offsets":[0,0]}})", 3))
          .ok());
}

TEST(SafetensorsFuzzTest, DeeplyNestedJsonDoesNotOverflowTheStack) {
  for (const std::string& header : {std::string(200000, '['), "{\"x\":" + std::string(200000, '['),
                                    std::string(100000, '[') + std::string(100000, ']')}) {
    auto r = ParseExact(WithHeader(header, 0));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kInvalidArgument);
  }
}

TEST(SafetensorsFuzzTest, UnsupportedDTypes) {
  for (const char* dtype : {"I8", "U8", "I64", "F64", "BOOL", "F8_E4M3", "garbage", ""}) {
    auto r = ParseExact(WithHeader(
        absl::StrCat(R"({"x":{"dtype":")", dtype, R"(","shape":[2],"data_offsets":[0,8]}})"), 8));
    EXPECT_EQ(r.status().code(), absl::StatusCode::kUnimplemented) << dtype;
    EXPECT_THAT(r.status().message(), HasSubstr("\"x\""));
  }
}

}  // namespace
}  // namespace manyshot
