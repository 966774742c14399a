// Read-only access to Hugging Face safetensors checkpoints (single file or sharded), via mmap.
//
// The format: 8-byte little-endian header length N, N bytes of JSON mapping tensor name ->
// {"dtype", "shape", "data_offsets": [begin, end]} (offsets relative to the byte after the
// header), then the raw little-endian tensor data. Every header is validated strictly at Open, so
// callers can trust TensorInfo without further checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "engine/core/dtype.h"

namespace manyshot {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::filesystem::path file;       // the file holding the data
  const std::byte* data = nullptr;  // into the mapping; not necessarily aligned
  size_t nbytes = 0;
};

// A read-only memory mapping of one whole file. Unmaps on destruction.
class MappedFile {
 public:
  static absl::StatusOr<std::unique_ptr<MappedFile>> Open(const std::filesystem::path& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const std::byte* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  MappedFile(std::filesystem::path path, const std::byte* data, size_t size)
      : path_(std::move(path)), data_(data), size_(size) {}
  std::filesystem::path path_;
  const std::byte* data_;
  size_t size_;
};

// Parses one safetensors buffer's header; tensors point into `bytes`. `file` is used in errors
// and recorded in each TensorInfo. Exposed for tests and fuzzing on in-memory buffers.
absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsBuffer(const std::byte* bytes, size_t size,
                                                               const std::filesystem::path& file);

class SafetensorsArchive {
 public:
  // model_dir holds model.safetensors, or model.safetensors.index.json + shards (the single file
  // wins when both exist, as in transformers).
  static absl::StatusOr<SafetensorsArchive> Open(const std::filesystem::path& model_dir);
  // Opens exactly one .safetensors file.
  static absl::StatusOr<SafetensorsArchive> OpenFile(const std::filesystem::path& file);

  SafetensorsArchive(SafetensorsArchive&&) = default;
  SafetensorsArchive& operator=(SafetensorsArchive&&) = default;

  const TensorInfo* Find(std::string_view name) const;  // nullptr if absent
  std::vector<std::string> Names() const;               // sorted
  size_t size() const { return tensors_.size(); }

  // Converts to f32 into dst (must hold product(expected_shape) floats). NotFound when the
  // tensor is absent, InvalidArgument when the shape differs; both name file, tensor and shapes.
  absl::Status ReadF32(std::string_view name, absl::Span<const int64_t> expected_shape,
                       float* dst) const;

  // XXH3 (StableHash) over the name, size and bytes of every file, sorted by file name: identifies
  // the weights independently of config.json. Fixed across runs, machines and builds.
  std::string fingerprint() const;

 private:
  SafetensorsArchive() = default;
  absl::Status AddFile(std::unique_ptr<MappedFile> file);

  std::vector<std::unique_ptr<MappedFile>> files_;  // heap-held so moves keep data pointers valid
  std::map<std::string, TensorInfo, std::less<>> tensors_;
};

// Mixes bytes 64 bits at a time (FNV-1a style over words, four independent lanes) with a seed.
// The tiny-model writer derives its per-tensor PRNG seeds from it, so the tiny models (and the
// goldens computed from them) pin its output. Not the archive fingerprint: that is StableHash.
uint64_t HashBytes(const std::byte* data, size_t size, uint64_t seed);

std::string ShapeString(absl::Span<const int64_t> shape);

}  // namespace manyshot
