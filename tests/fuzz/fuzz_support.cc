#include "tests/fuzz/fuzz_support.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <system_error>

namespace manyshot::fuzz {

void Fail(std::string_view what) {
  std::fprintf(stderr, "fuzz invariant violated: %.*s\n", static_cast<int>(what.size()),
               what.data());
  std::abort();
}

namespace {

// Owns the scratch directory; a static so that it is removed when the process exits normally.
class Scratch {
 public:
  Scratch() {
    // In memory (/dev/shm) where there is one: targets rewrite their scratch files on every
    // input, and on a busy disk that, not parsing, would dominate the time of each input.
    std::error_code ec;
    const std::filesystem::path base = std::filesystem::is_directory("/dev/shm", ec)
                                           ? std::filesystem::path("/dev/shm")
                                           : std::filesystem::temp_directory_path();
    std::string tmpl = (base / "manyshot_fuzz_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) Fail("mkdtemp failed");
    path_ = tmpl;
  }
  ~Scratch() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

}  // namespace

const std::filesystem::path& ScratchDir() {
  static const Scratch scratch;
  return scratch.path();
}

std::filesystem::path WriteScratchFile(std::string_view name, std::string_view bytes) {
  std::filesystem::path path = ScratchDir() / name;
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  out.close();
  if (!out) Fail("cannot write a scratch file");
  return path;
}

std::pair<std::string_view, std::string_view> SplitAtNul(std::string_view input) {
  size_t nul = input.find('\0');
  if (nul == std::string_view::npos) return {input, {}};
  return {input.substr(0, nul), input.substr(nul + 1)};
}

void Report(const absl::Status& status) {
  static const bool verbose = std::getenv("MANYSHOT_FUZZ_VERBOSE") != nullptr;
  if (verbose) std::fprintf(stderr, "%s\n", status.ToString().c_str());
}

}  // namespace manyshot::fuzz
