// Blob headers (round trip, every damaged byte detected), chunk keys, and streaming payloads
// through chunks with dtype conversion.
#include "cache/blob_format.h"

#include "cache/kv_stream.h"
#include "gtest/gtest.h"
#include "tests/cache/support/cache_test_support.h"
#include "tests/engine/support/golden_models.h"

namespace manyshot::testing {
namespace {

BlobHeader SampleHeader() {
  BlobHeader h;
  h.format_version = 1;
  h.key = "0123456789abcdef0123456789abcdef";
  h.shape = {DType::kBF16, 2, 100, 2, 16, 3, 48};
  h.chunk_bytes = 4096;
  h.total_bytes = h.shape.PayloadBytes();  // 25600: six full chunks and a short one
  for (uint64_t i = 0; i < 7; ++i) h.chunk_checksums.push_back(0x1234567890abcdefULL * (i + 1));
  return h;
}

TEST(BlobFormatTest, HeaderRoundTrips) {
  const BlobHeader h = SampleHeader();
  auto parsed = ParseBlobHeader(SerializeBlobHeader(h));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(parsed->key, h.key);
  EXPECT_EQ(parsed->shape, h.shape);
  EXPECT_EQ(parsed->chunk_checksums, h.chunk_checksums);
  EXPECT_EQ(parsed->ChunkSize(5), 4096u);
  EXPECT_EQ(parsed->ChunkSize(6), 25600u - 6 * 4096);
}

TEST(BlobFormatTest, EveryDamagedOrMissingByteIsDetected) {
  const std::string bytes = SerializeBlobHeader(SampleHeader());
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string damaged = bytes;
    damaged[i] = static_cast<char>(damaged[i] ^ 0x01);
    EXPECT_TRUE(absl::IsDataLoss(ParseBlobHeader(damaged).status())) << "byte " << i;
  }
  for (size_t n = 0; n < bytes.size(); ++n) {
    EXPECT_TRUE(absl::IsDataLoss(ParseBlobHeader(bytes.substr(0, n)).status())) << "length " << n;
  }
}

TEST(BlobFormatTest, InconsistentFieldsAreRejectedEvenWithAValidChecksum) {
  BlobHeader h = SampleHeader();
  h.total_bytes += 2;
  EXPECT_TRUE(absl::IsDataLoss(ParseBlobHeader(SerializeBlobHeader(h)).status()));
  h = SampleHeader();
  h.chunk_checksums.pop_back();
  EXPECT_TRUE(absl::IsDataLoss(ParseBlobHeader(SerializeBlobHeader(h)).status()));
}

TEST(BlobFormatTest, ChunkKeysSortInChunkOrder) {
  EXPECT_LT(ChunkKey("k", 1), ChunkKey("k", 2));
  EXPECT_LT(ChunkKey("k", 255), ChunkKey("k", 256));
  EXPECT_EQ(ChunkKey("k", 0).size(), 9u);
}

// On the CPU, and on the CUDA backend's code on the SIMT emulator (testing/simt), whose pinned path
// copies out of page-locked buffers into device memory asynchronously.
void ExpectChunksReassembleBitExact(Backend& backend) {
  for (DType dtype : {DType::kF32, DType::kBF16, DType::kF16}) {
    const EncodedContext ctx = SyntheticContext(backend, 42, 3, 37, 2, 16, dtype);
    auto shape = ShapeOf(ctx);
    ASSERT_TRUE(shape.ok());
    for (size_t chunk_bytes : {4u, 64u, 1000u, 4096u, 1u << 20}) {
      for (bool pinned : {false, true}) {  // the GPU's path through pinned buffers, and plain
        EncodedContext out = *AllocateContext(backend, *shape);
        PayloadAssembler assembler(&out, dtype, backend, pinned);
        size_t total = 0, chunks = 0;
        ASSERT_TRUE(ForEachPayloadChunk(ctx, backend, chunk_bytes,
                                        [&](uint64_t index, std::string_view bytes) {
                                          EXPECT_EQ(index, chunks++);
                                          EXPECT_LE(bytes.size(), chunk_bytes);
                                          total += bytes.size();
                                          return assembler.Feed(bytes);
                                        })
                        .ok());
        EXPECT_EQ(total, shape->PayloadBytes());
        EXPECT_EQ(chunks, (total + chunk_bytes - 1) / chunk_bytes);
        EXPECT_TRUE(assembler.Finish().ok());  // the copies out of the pinned buffers landed
        EXPECT_EQ(CompareContexts(ctx, out, backend), "")
            << DTypeName(dtype) << " " << chunk_bytes << (pinned ? " pinned" : "");
      }
    }
  }
}

TEST(KvStreamTest, ChunksReassembleBitExactAtAnyChunkSize) {
  ExpectChunksReassembleBitExact(TestBackend());
}

TEST(KvStreamTest, ChunksReassembleBitExactOnTheEmulatedCudaBackend) {
  Backend* emulated = NamedTestBackend("simt-cuda", nullptr);
  ASSERT_NE(emulated, nullptr);
  ExpectChunksReassembleBitExact(*emulated);
}

TEST(KvStreamTest, SixteenBitStorageWidensExactlyIntoF32) {
  Backend& backend = TestBackend();
  const EncodedContext f32 = SyntheticContext(backend, 5, 2, 20, 2, 16);
  const EncodedContext bf16 = *ConvertContext(f32, DType::kBF16, backend);
  KvShape shape = *ShapeOf(bf16);
  shape.dtype = DType::kF32;
  EncodedContext widened = *AllocateContext(backend, shape);
  PayloadAssembler assembler(&widened, DType::kBF16, backend);
  ASSERT_TRUE(ForEachPayloadChunk(bf16, backend, 100, [&](uint64_t, std::string_view b) {
                return assembler.Feed(b);
              }).ok());
  EXPECT_EQ(CompareContexts(widened, *ToF32(bf16, backend), backend), "");
  // Narrowing the widened values again is exact: memory (f32) and disk (bf16) hold one value set.
  EXPECT_EQ(CompareContexts(*ConvertContext(widened, DType::kBF16, backend), bf16, backend), "");
  EXPECT_NE(CompareContexts(widened, f32, backend), "");  // bf16 did round
}

}  // namespace
}  // namespace manyshot::testing
