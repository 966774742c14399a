// safetensors reading: mmap, strict header validation, index (sharded) support, f32 conversion.
#include "engine/model/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "engine/core/stable_hash.h"
#include "engine/model/model_dir_hints.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

using Json = nlohmann::json;

absl::Status Invalid(const std::filesystem::path& file, absl::string_view msg) {
  return absl::InvalidArgumentError(absl::StrCat(file.string(), ": ", msg));
}

// Known safetensors dtype strings; only the first three are supported.
absl::StatusOr<DType> ParseDType(const std::string& s, const std::filesystem::path& file,
                                 const std::string& tensor) {
  if (s == "F32") return DType::kF32;
  if (s == "F16") return DType::kF16;
  if (s == "BF16") return DType::kBF16;
  return absl::UnimplementedError(absl::StrCat(file.string(), ": tensor \"", tensor,
                                               "\" has unsupported dtype \"", s,
                                               "\" (supported: F32, F16, BF16)"));
}

// A JSON number that is a non-negative integer fitting in uint64 (floats are rejected).
bool AsU64(const Json& v, uint64_t& out) {
  if (v.is_number_unsigned()) {
    out = v.get<uint64_t>();
    return true;
  }
  if (v.is_number_integer() && v.get<int64_t>() >= 0) {
    out = static_cast<uint64_t>(v.get<int64_t>());
    return true;
  }
  return false;
}

uint64_t ReadLE64(const std::byte* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(p[i]);
  return v;
}

absl::StatusOr<std::string> ReadSmallFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path.string(), ": cannot open"));
  std::stringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

}  // namespace

std::string ShapeString(absl::Span<const int64_t> shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

absl::StatusOr<std::unique_ptr<MappedFile>> MappedFile::Open(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::NotFoundError(
        absl::StrCat(path.string(), ": cannot open: ", std::strerror(errno)));
  }
  struct stat st;
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return absl::InvalidArgumentError(absl::StrCat(path.string(), ": not a regular file"));
  }
  size_t size = static_cast<size_t>(st.st_size);
  const std::byte* data = nullptr;
  if (size > 0) {  // mmap of length 0 fails; an empty file is rejected by the parser instead
    void* p = ::mmap(nullptr, size, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return absl::InternalError(absl::StrCat(path.string(), ": mmap: ", std::strerror(err)));
    }
    data = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping stays valid after close
  return std::unique_ptr<MappedFile>(new MappedFile(path, data, size));
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

absl::StatusOr<std::vector<TensorInfo>> ParseSafetensorsBuffer(const std::byte* bytes, size_t size,
                                                               const std::filesystem::path& file) {
  if (size < 8)
    return Invalid(file, absl::StrCat("file too short (", size, " bytes) for a header"));
  const uint64_t header_len = ReadLE64(bytes);
  if (header_len > size - 8) {
    return Invalid(file, absl::StrCat("header length ", header_len, " exceeds file size ", size));
  }
  const char* hbegin = reinterpret_cast<const char*>(bytes + 8);
  Json header = Json::parse(hbegin, hbegin + header_len, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded()) return Invalid(file, "header is not valid JSON");
  if (!header.is_object()) return Invalid(file, "header is not a JSON object");

  const std::byte* data_region = bytes + 8 + header_len;
  const uint64_t data_size = size - 8 - header_len;
  std::vector<TensorInfo> tensors;
  std::vector<std::pair<uint64_t, uint64_t>> ranges;  // [begin, end) for the overlap check
  for (const auto& item : header.items()) {
    // Named references, not a structured binding: clang 14 (the fuzzing build) cannot capture
    // structured bindings in the lambda below.
    const std::string& name = item.key();
    const auto& desc = item.value();
    if (name == "__metadata__") {
      if (!desc.is_object()) return Invalid(file, "\"__metadata__\" is not an object");
      continue;
    }
    auto bad = [&](absl::string_view what) {
      return Invalid(file, absl::StrCat("tensor \"", name, "\": ", what));
    };
    if (!desc.is_object()) return bad("description is not an object");
    auto dt = desc.find("dtype");
    auto sh = desc.find("shape");
    auto off = desc.find("data_offsets");
    if (dt == desc.end() || !dt->is_string()) return bad("missing string \"dtype\"");
    if (sh == desc.end() || !sh->is_array()) return bad("missing array \"shape\"");
    if (off == desc.end() || !off->is_array() || off->size() != 2) {
      return bad("\"data_offsets\" must be [begin, end]");
    }
    TensorInfo t;
    t.name = name;
    t.file = file;
    auto dtype = ParseDType(dt->get<std::string>(), file, name);
    if (!dtype.ok()) return dtype.status();
    t.dtype = *dtype;
    uint64_t numel = 1;
    for (const Json& d : *sh) {
      uint64_t dim = 0;
      if (!AsU64(d, dim) || dim > static_cast<uint64_t>(INT64_MAX)) {
        return bad("shape entries must be non-negative integers");
      }
      if (__builtin_mul_overflow(numel, dim, &numel)) return bad("shape product overflows");
      t.shape.push_back(static_cast<int64_t>(dim));
    }
    uint64_t nbytes = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(DTypeSize(t.dtype)), &nbytes)) {
      return bad("byte size overflows");
    }
    uint64_t begin = 0, end = 0;
    if (!AsU64((*off)[0], begin) || !AsU64((*off)[1], end)) {
      return bad("data_offsets must be non-negative integers");
    }
    if (begin > end || end > data_size) {
      return bad(absl::StrCat("data_offsets [", begin, ", ", end, "] outside the data region of ",
                              data_size, " bytes"));
    }
    if (end - begin != nbytes) {
      return bad(absl::StrCat("data_offsets span ", end - begin, " bytes but dtype ",
                              dt->get<std::string>(), " and shape ", ShapeString(t.shape), " need ",
                              nbytes));
    }
    t.data = data_region + begin;
    t.nbytes = static_cast<size_t>(nbytes);
    ranges.emplace_back(begin, end);
    tensors.push_back(std::move(t));
  }
  // Tensors must not share bytes: overlapping data is a corrupt or hostile file.
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    if (ranges[i].first < ranges[i - 1].second) {
      return Invalid(file, absl::StrCat("tensor data ranges overlap at offset ", ranges[i].first));
    }
  }
  return tensors;
}

absl::Status SafetensorsArchive::AddFile(std::unique_ptr<MappedFile> file) {
  auto tensors = ParseSafetensorsBuffer(file->data(), file->size(), file->path());
  if (!tensors.ok()) return tensors.status();
  for (TensorInfo& t : *tensors) {
    if (tensors_.count(t.name) != 0) {
      return Invalid(file->path(), absl::StrCat("tensor \"", t.name, "\" also appears in ",
                                                tensors_.find(t.name)->second.file.string()));
    }
    std::string key = t.name;
    tensors_.emplace(std::move(key), std::move(t));
  }
  files_.push_back(std::move(file));
  return absl::OkStatus();
}

absl::StatusOr<SafetensorsArchive> SafetensorsArchive::OpenFile(const std::filesystem::path& path) {
  auto mapped = MappedFile::Open(path);
  if (!mapped.ok()) return mapped.status();
  SafetensorsArchive archive;
  absl::Status s = archive.AddFile(*std::move(mapped));
  if (!s.ok()) return s;
  return archive;
}

absl::StatusOr<SafetensorsArchive> SafetensorsArchive::Open(
    const std::filesystem::path& model_dir) {
  const std::filesystem::path single = model_dir / "model.safetensors";
  const std::filesystem::path index_path = model_dir / "model.safetensors.index.json";
  std::error_code ec;
  if (std::filesystem::exists(single, ec)) return OpenFile(single);
  if (!std::filesystem::exists(index_path, ec)) {
    const std::string hint = BinWeightsHint(model_dir);
    return absl::NotFoundError(absl::StrCat(
        model_dir.string(), ": neither model.safetensors nor model.safetensors.index.json exists",
        hint.empty() ? "" : "; ", hint));
  }
  auto text = ReadSmallFile(index_path);
  if (!text.ok()) return text.status();
  Json index = Json::parse(*text, nullptr, /*allow_exceptions=*/false);
  if (index.is_discarded() || !index.is_object()) return Invalid(index_path, "not a JSON object");
  auto wm = index.find("weight_map");
  if (wm == index.end() || !wm->is_object()) {
    return Invalid(index_path, "key \"weight_map\" is missing or not an object");
  }
  std::set<std::string> shards;
  for (const auto& [name, shard] : wm->items()) {
    if (!shard.is_string()) {
      return Invalid(index_path, absl::StrCat("weight_map[\"", name, "\"] is not a string"));
    }
    std::string s = shard.get<std::string>();
    // Shards live next to the index; refuse paths that escape the model directory.
    std::filesystem::path p(s);
    if (s.empty() || p.is_absolute() || s.find("..") != std::string::npos) {
      return Invalid(index_path,
                     absl::StrCat("weight_map[\"", name, "\"] names bad shard \"", s, "\""));
    }
    shards.insert(std::move(s));
  }
  SafetensorsArchive archive;
  for (const std::string& shard : shards) {
    const std::filesystem::path shard_path = model_dir / shard;
    if (!std::filesystem::exists(shard_path, ec)) {
      return absl::NotFoundError(absl::StrCat(index_path.string(), ": shard \"", shard,
                                              "\" does not exist (", shard_path.string(), ")"));
    }
    auto mapped = MappedFile::Open(shard_path);
    if (!mapped.ok()) return mapped.status();
    absl::Status s = archive.AddFile(*std::move(mapped));
    if (!s.ok()) return s;
  }
  // The index must agree with the shards' own headers.
  for (const auto& [name, shard] : wm->items()) {
    const TensorInfo* t = archive.Find(name);
    if (t == nullptr || t->file.filename() != std::filesystem::path(shard.get<std::string>())) {
      return absl::NotFoundError(absl::StrCat(index_path.string(), ": tensor \"", name,
                                              "\" is not in shard \"", shard.get<std::string>(),
                                              "\""));
    }
  }
  return archive;
}

const TensorInfo* SafetensorsArchive::Find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

std::vector<std::string> SafetensorsArchive::Names() const {
  std::vector<std::string> names;
  names.reserve(tensors_.size());
  for (const auto& [name, t] : tensors_) names.push_back(name);
  return names;
}

absl::Status SafetensorsArchive::ReadF32(std::string_view name,
                                         absl::Span<const int64_t> expected_shape,
                                         float* dst) const {
  const TensorInfo* t = Find(name);
  const std::string name_str(name);  // absl::StrCat takes absl::string_view, not std's
  if (t == nullptr) {
    std::string where = files_.empty() ? std::string("(empty archive)")
                                       : files_.front()->path().parent_path().string();
    return absl::NotFoundError(absl::StrCat(where, ": tensor \"", name_str,
                                            "\" not found (expected ", ShapeString(expected_shape),
                                            ")"));
  }
  if (!std::equal(t->shape.begin(), t->shape.end(), expected_shape.begin(), expected_shape.end())) {
    return absl::InvalidArgumentError(absl::StrCat(t->file.string(), ": tensor \"", name_str,
                                                   "\" has shape ", ShapeString(t->shape),
                                                   ", expected ", ShapeString(expected_shape)));
  }
  const size_t n = t->nbytes / DTypeSize(t->dtype);
  switch (t->dtype) {
    case DType::kF32:
      std::memcpy(dst, t->data, t->nbytes);
      break;
    case DType::kF16:
    case DType::kBF16: {
      const bool f16 = t->dtype == DType::kF16;
      for (size_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, t->data + 2 * i, 2);  // unaligned-safe; the file is little-endian
        dst[i] = f16 ? F16ToF32(h) : BF16ToF32(h);
      }
      break;
    }
    case DType::kI32:  // ParseDType never yields it for a weight
      return absl::InternalError(
          absl::StrCat(t->file.string(), ": tensor \"", name_str, "\" is an integer tensor"));
  }
  return absl::OkStatus();
}

uint64_t HashBytes(const std::byte* data, size_t size, uint64_t seed) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  constexpr uint64_t kOffset = 0xcbf29ce484222325ull;
  // Four lanes hashed independently let the multiplies overlap; lanes are then folded in order.
  uint64_t lane[4] = {kOffset ^ seed, kOffset ^ (seed + 1), kOffset ^ (seed + 2),
                      kOffset ^ (seed + 3)};
  size_t i = 0;
  for (; i + 32 <= size; i += 32) {
    for (int k = 0; k < 4; ++k) {
      uint64_t w;
      std::memcpy(&w, data + i + 8 * k, 8);
      lane[k] = (lane[k] ^ w) * kPrime;
    }
  }
  uint64_t h = kOffset ^ seed ^ static_cast<uint64_t>(size);
  for (uint64_t l : lane) h = (h ^ l) * kPrime;
  for (; i < size; ++i) h = (h ^ static_cast<uint8_t>(data[i])) * kPrime;
  // Final avalanche (splitmix64's finaliser) so that nearby inputs give unrelated hex strings.
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

std::string SafetensorsArchive::fingerprint() const {
  std::vector<const MappedFile*> files;
  for (const auto& f : files_) files.push_back(f.get());
  std::sort(files.begin(), files.end(), [](const MappedFile* a, const MappedFile* b) {
    return a->path().filename() < b->path().filename();
  });
  StableHash hash;
  for (const MappedFile* f : files) {
    hash.UpdateFile(f->path().filename().string(),
                    std::string_view(reinterpret_cast<const char*>(f->data()), f->size()));
  }
  return hash.Hex();
}

}  // namespace manyshot
