// safetensors writing; see safetensors_writer.h.
#include "engine/model/synthetic/safetensors_writer.h"

#include <cstring>
#include <fstream>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "nlohmann/json.hpp"

namespace manyshot {
namespace {

std::string_view DTypeTag(DType t) {
  switch (t) {
    case DType::kF32:
      return "F32";
    case DType::kF16:
      return "F16";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
  }
  return "?";
}

// Appends `values` converted to `dtype`, little-endian (the engine only targets LE hosts).
void AppendConverted(const std::vector<float>& values, DType dtype, std::string& out) {
  const size_t start = out.size();
  out.resize(start + values.size() * DTypeSize(dtype));
  char* p = out.data() + start;
  for (float v : values) {
    if (dtype == DType::kF32) {
      std::memcpy(p, &v, 4);
      p += 4;
    } else {
      uint16_t h = dtype == DType::kF16 ? F32ToF16(v) : F32ToBF16(v);
      std::memcpy(p, &h, 2);
      p += 2;
    }
  }
}

absl::Status WriteFileAtomically(const std::filesystem::path& file, const std::string& bytes) {
  std::filesystem::path tmp = file;
  tmp += ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) return absl::InternalError(absl::StrCat(tmp.string(), ": cannot create"));
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
    if (!out) return absl::InternalError(absl::StrCat(tmp.string(), ": write failed"));
  }
  std::error_code ec;
  std::filesystem::rename(tmp, file, ec);
  if (ec) return absl::InternalError(absl::StrCat(file.string(), ": rename: ", ec.message()));
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::string> SerializeSafetensors(
    absl::Span<const TensorToWrite> tensors, const std::map<std::string, std::string>& metadata) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  if (!metadata.empty()) {
    nlohmann::ordered_json meta = nlohmann::ordered_json::object();
    for (const auto& [k, v] : metadata) meta[k] = v;
    header["__metadata__"] = meta;
  }
  std::string data;
  for (const TensorToWrite& t : tensors) {
    uint64_t numel = 1;
    for (int64_t d : t.shape) {
      if (d < 0) return absl::InvalidArgumentError(absl::StrCat(t.name, ": negative dimension"));
      numel *= static_cast<uint64_t>(d);
    }
    if (numel != t.data.size()) {
      return absl::InvalidArgumentError(
          absl::StrCat(t.name, ": shape holds ", numel, " values but data has ", t.data.size()));
    }
    if (header.contains(t.name)) {
      return absl::InvalidArgumentError(absl::StrCat(t.name, ": duplicate tensor name"));
    }
    const size_t begin = data.size();
    AppendConverted(t.data, t.dtype, data);
    header[t.name] = {
        {"dtype", DTypeTag(t.dtype)}, {"shape", t.shape}, {"data_offsets", {begin, data.size()}}};
  }
  std::string h = header.dump();
  h.append((8 - h.size() % 8) % 8, ' ');
  std::string out;
  out.reserve(8 + h.size() + data.size());
  uint64_t len = h.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>((len >> (8 * i)) & 0xff));
  out += h;
  out += data;
  return out;
}

absl::Status WriteSafetensors(const std::filesystem::path& file,
                              absl::Span<const TensorToWrite> tensors,
                              const std::map<std::string, std::string>& metadata) {
  auto bytes = SerializeSafetensors(tensors, metadata);
  if (!bytes.ok()) return bytes.status();
  return WriteFileAtomically(file, *bytes);
}

absl::Status WriteModelSafetensors(const std::filesystem::path& dir,
                                   absl::Span<const TensorToWrite> tensors, int shards) {
  if (shards < 1 || static_cast<size_t>(shards) > std::max<size_t>(tensors.size(), 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("shards must be in [1, number of tensors], got ", shards));
  }
  if (shards == 1) return WriteSafetensors(dir / "model.safetensors", tensors);

  uint64_t total = 0;
  for (const TensorToWrite& t : tensors) total += t.data.size() * DTypeSize(t.dtype);
  // Greedy contiguous split: close a shard once it reaches its share of the bytes, while leaving
  // at least one tensor for every later shard.
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  size_t next = 0;
  uint64_t written = 0;
  for (int s = 0; s < shards; ++s) {
    const std::string name = absl::StrFormat("model-%05d-of-%05d.safetensors", s + 1, shards);
    const uint64_t target = total * static_cast<uint64_t>(s + 1) / static_cast<uint64_t>(shards);
    const size_t first = next;
    const size_t max_end = tensors.size() - static_cast<size_t>(shards - s - 1);
    while (next < max_end && (next == first || written < target || s == shards - 1)) {
      written += tensors[next].data.size() * DTypeSize(tensors[next].dtype);
      ++next;
    }
    for (size_t i = first; i < next; ++i) weight_map[tensors[i].name] = name;
    absl::Status st = WriteSafetensors(dir / name, tensors.subspan(first, next - first));
    if (!st.ok()) return st;
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  index["weight_map"] = weight_map;
  std::string text = index.dump(2) + "\n";
  return WriteFileAtomically(dir / "model.safetensors.index.json", text);
}

}  // namespace manyshot
