// Fuzzes safetensors reading: the header parser on an exact-size buffer, then, for what it
// accepts, the real file path (mmap, SafetensorsArchive, f32 conversion of every tensor).
// An input that starts with '{' is a sharded checkpoint instead: model.safetensors.index.json,
// a NUL byte, then the bytes of the one shard file "model-00001.safetensors".
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "engine/model/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

namespace manyshot::fuzz {
namespace {

// Whatever an opened archive accepted must be readable in full, with the shape it declares.
void ReadEveryTensor(const SafetensorsArchive& archive) {
  for (const std::string& name : archive.Names()) {
    const TensorInfo* t = archive.Find(name);
    if (t == nullptr) Fail("a listed tensor cannot be found");
    size_t elements = 1;
    for (int64_t d : t->shape) elements *= static_cast<size_t>(d);
    if (elements * DTypeSize(t->dtype) != t->nbytes) Fail("nbytes disagrees with the shape");
    std::vector<float> out(elements + 1);
    if (!archive.ReadF32(name, t->shape, out.data()).ok()) Fail("ReadF32 of a valid tensor failed");
  }
  (void)archive.fingerprint();
}

void FuzzSingleFile(const uint8_t* data, size_t size) {
  // The exact-size copy: any read past the end is an AddressSanitizer report.
  auto copy = std::make_unique<std::byte[]>(size);
  if (size > 0) std::memcpy(copy.get(), data, size);
  auto parsed = ParseSafetensorsBuffer(copy.get(), size, "fuzz.safetensors");
  Report(parsed.status());
  if (!parsed.ok()) return;
  for (const TensorInfo& t : *parsed) {
    if (t.nbytes > 0 && (t.data < copy.get() || t.data + t.nbytes > copy.get() + size)) {
      Fail("a tensor's data lies outside the buffer");
    }
  }
  // Accepted: the same bytes through the file API must be accepted too, and readable.
  auto path = WriteScratchFile("model.safetensors", {reinterpret_cast<const char*>(data), size});
  auto archive = SafetensorsArchive::OpenFile(path);
  if (!archive.ok()) Fail("OpenFile rejected bytes that ParseSafetensorsBuffer accepted");
  if (archive->size() != parsed->size()) Fail("OpenFile and ParseSafetensorsBuffer disagree");
  ReadEveryTensor(*archive);
}

void FuzzSharded(std::string_view input) {
  auto [index, shard] = SplitAtNul(input);
  std::error_code ec;
  std::filesystem::remove(ScratchDir() / "model.safetensors", ec);  // else it wins over the index
  WriteScratchFile("model.safetensors.index.json", index);
  WriteScratchFile("model-00001.safetensors", shard);
  auto archive = SafetensorsArchive::Open(ScratchDir());
  Report(archive.status());
  if (archive.ok()) ReadEveryTensor(*archive);
}

}  // namespace
}  // namespace manyshot::fuzz

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 0 && data[0] == '{') {
    manyshot::fuzz::FuzzSharded({reinterpret_cast<const char*>(data), size});
  } else {
    manyshot::fuzz::FuzzSingleFile(data, size);
  }
  return 0;
}
