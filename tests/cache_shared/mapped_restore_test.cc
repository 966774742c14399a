// Restoring shared KV files on the CPU: the tensors are views of the mapped file, bit for bit what
// was written and what a copying read gives; once detached they no longer depend on the file (it
// can be truncated and removed), while a context that was not detached dies with SIGBUS when the
// file is cut under it, which is why the server detaches every mapped restore. A detach verifies
// what it copied, so a file changed in place since the restore fails it. Every damaged byte
// is refused before a tensor is returned, the bytes between header and payload included, and
// files of the unaligned layout that earlier servers wrote are still read, by copying.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "cache/byte_codec.h"
#include "cache/kv_convert.h"
#include "cache/kv_stream.h"
#include "cache/shared/shared_context.h"
#include "cache/shared/shared_directory.h"
#include "cache/shared/shared_kv.h"
#include "engine/cpu/cpu_backend.h"
#include "gtest/gtest.h"

namespace manyshot::shared {
namespace {

constexpr char kKey[] = "00112233445566778899aabbccddeeff";
constexpr uint64_t kChunkBytes = 1024;

class MappedRestoreTest : public ::testing::TestWithParam<DType> {
 protected:
  void SetUp() override {
    root_ = std::filesystem::path(::testing::TempDir()) / absl::StrCat("mapped_", getpid());
    std::filesystem::remove_all(root_);
    auto dir = SharedDirectory::Open(root_, "replica-a");
    ASSERT_TRUE(dir.ok()) << dir.status();
    dir_ = std::make_unique<SharedDirectory>(*std::move(dir));
    files_ = std::make_unique<SharedKvFiles>(dir_.get());
    written_ = RandomContext();
    ASSERT_TRUE(WriteSharedContext(*files_, kKey, written_, GetParam(), backend_, kChunkBytes,
                                   WriteMode::kKeepExisting)
                    .ok());
    expected_ = PayloadOf(*ConvertContext(written_, GetParam(), backend_));
  }
  void TearDown() override { std::filesystem::remove_all(root_); }

  // Three layers of 37 tokens, 2 heads of 16: a payload that spans many chunks and ends mid-chunk.
  EncodedContext RandomContext() {
    const KvShape shape{DType::kF32, 3, 37, 2, 16, 2, 19};
    auto ctx = AllocateContext(backend_, shape);
    EXPECT_TRUE(ctx.ok()) << ctx.status();
    std::mt19937 rng(7);
    std::normal_distribution<float> normal;
    for (const Tensor& t : PayloadSegments(*ctx)) {
      for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = normal(rng);
    }
    return *std::move(ctx);
  }

  // The context's payload bytes, in file order.
  static std::string PayloadOf(const EncodedContext& ctx) {
    std::string bytes;
    for (const Tensor& t : PayloadSegments(ctx)) {
      bytes.append(static_cast<const char*>(t.raw()), t.bytes());
    }
    return bytes;
  }

  static bool Detached(const std::weak_ptr<MappedFile>& mapping) {
    const std::shared_ptr<MappedFile> mapped = mapping.lock();
    return mapped != nullptr && mapped->detached();
  }

  std::filesystem::path File() const { return files_->PathOf(kKey); }

  CpuBackend backend_{1};
  std::filesystem::path root_;
  std::unique_ptr<SharedDirectory> dir_;
  std::unique_ptr<SharedKvFiles> files_;
  EncodedContext written_;
  std::string expected_;
};

TEST_P(MappedRestoreTest, AMappedRestoreIsTheWrittenContextBitForBit) {
  auto mapped = ReadSharedContext(*files_, kKey, backend_);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_FALSE(mapped->mapping.expired()) << "a host restore of an aligned file is mapped";
  EXPECT_EQ(mapped->bytes, expected_.size());
  EXPECT_EQ(mapped->context.tokens, 37);
  EXPECT_EQ(mapped->context.groups, 2);
  EXPECT_EQ(mapped->context.group_length, 19);
  ASSERT_EQ(mapped->context.kv.k.size(), 3u);
  EXPECT_EQ(mapped->context.kv.k[2].ShapeString(), written_.kv.k[2].ShapeString());
  EXPECT_EQ(mapped->context.kv.k[0].dtype(), GetParam());
  EXPECT_TRUE(PayloadOf(mapped->context) == expected_);

  auto copied = ReadSharedContext(*files_, kKey, backend_, ReadMode::kCopy);
  ASSERT_TRUE(copied.ok()) << copied.status();
  EXPECT_TRUE(copied->mapping.expired());
  EXPECT_TRUE(PayloadOf(copied->context) == expected_);
}

TEST_P(MappedRestoreTest, ADetachedContextOutlivesItsFile) {
  auto mapped = ReadSharedContext(*files_, kKey, backend_);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const void* const k0 = mapped->context.kv.k[0].raw();
  // At a huge-page boundary, so that the detached copy can keep its huge pages there.
  EXPECT_EQ(reinterpret_cast<uintptr_t>(mapped->mapping.lock()->data()) % (uintptr_t{2} << 20), 0u);
  ASSERT_TRUE(DetachFromFile(mapped->mapping).ok());
  EXPECT_TRUE(Detached(mapped->mapping));
  EXPECT_EQ(mapped->context.kv.k[0].raw(), k0) << "the tensors keep their addresses";
  std::filesystem::resize_file(File(), 0);
  std::filesystem::remove(File());
  EXPECT_TRUE(PayloadOf(mapped->context) == expected_);
}

TEST_P(MappedRestoreTest, AContextNotDetachedDiesWhenItsFileIsCut) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        auto mapped = ReadSharedContext(*files_, kKey, backend_);
        if (!mapped.ok() || mapped->mapping.expired()) _exit(2);
        std::filesystem::resize_file(File(), 0);
        const std::string bytes = PayloadOf(mapped->context);  // faults on a page past the end
        _exit(bytes.empty() ? 3 : 4);
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

TEST_P(MappedRestoreTest, AFileChangedInPlaceAfterTheRestoreFailsTheDetach) {
  auto mapped = ReadSharedContext(*files_, kKey, backend_);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  const int fd = open(File().c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  const char byte = 0x5a;
  ASSERT_EQ(pwrite(fd, &byte, 1, static_cast<off_t>(std::filesystem::file_size(File()) - 3)), 1);
  close(fd);
  const absl::Status detach = DetachFromFile(mapped->mapping);
  EXPECT_TRUE(absl::IsDataLoss(detach)) << detach;
  EXPECT_FALSE(Detached(mapped->mapping));
}

TEST_P(MappedRestoreTest, ADetachStopsWhenAskedAndCanBeResumed) {
  auto mapped = ReadSharedContext(*files_, kKey, backend_);
  ASSERT_TRUE(mapped.ok()) << mapped.status();
  EXPECT_TRUE(absl::IsCancelled(DetachFromFile(mapped->mapping, [] { return false; })));
  EXPECT_FALSE(Detached(mapped->mapping));
  EXPECT_TRUE(DetachFromFile(mapped->mapping, [] { return true; }).ok());
  EXPECT_TRUE(Detached(mapped->mapping));
  // A context that nobody holds any more needs no detaching.
  const std::weak_ptr<MappedFile> mapping = mapped->mapping;
  mapped->context = EncodedContext();
  EXPECT_TRUE(mapping.expired());
  EXPECT_TRUE(DetachFromFile(mapping).ok());
}

TEST_P(MappedRestoreTest, EveryDamagedByteIsRefusedBeforeATensorIsReturned) {
  const std::string good = *SharedDirectory::ReadWhole(File());
  ASSERT_EQ(good.size() % kKvPayloadAlignment, expected_.size() % kKvPayloadAlignment)
      << "the payload starts at an aligned offset";
  for (size_t i = 0; i < good.size(); i += 61) {
    std::string damaged = good;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x10);
    std::ofstream(File(), std::ios::binary | std::ios::trunc) << damaged;
    for (ReadMode mode : {ReadMode::kMapWhenPossible, ReadMode::kCopy}) {
      auto read = ReadSharedContext(*files_, kKey, backend_, mode);
      EXPECT_TRUE(absl::IsDataLoss(read.status())) << "byte " << i << ": " << read.status();
    }
  }
}

TEST_P(MappedRestoreTest, AFileOfTheUnalignedLayoutIsReadByCopying) {
  // The layout earlier servers wrote: "MSKVSHR1", the header's length, the header, the payload.
  const std::string good = *SharedDirectory::ReadWhole(File());
  uint64_t header_size = 0;
  codec::Reader in(std::string_view(good).substr(8, 8));
  ASSERT_TRUE(in.U64(&header_size));
  const std::string unaligned =
      "MSKVSHR1" + good.substr(8, 8 + header_size) + good.substr(good.size() - expected_.size());
  std::ofstream(File(), std::ios::binary | std::ios::trunc) << unaligned;
  auto read = ReadSharedContext(*files_, kKey, backend_);
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_TRUE(read->mapping.expired());
  EXPECT_TRUE(PayloadOf(read->context) == expected_);
}

INSTANTIATE_TEST_SUITE_P(Dtypes, MappedRestoreTest, ::testing::Values(DType::kF32, DType::kBF16),
                         [](const auto& test) { return std::string(DTypeName(test.param)); });

}  // namespace
}  // namespace manyshot::shared
