// Helpers shared by the fuzz targets: the libFuzzer entry point's declaration (defined once per
// target, called either by libFuzzer or by standalone_driver.cc), a per-process scratch file for
// loaders that only take paths, and a hard failure that both drivers report as a crash.
#pragma once

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>
#include <string_view>

#include "absl/status/status.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace manyshot::fuzz {

// Aborts with `what` on stderr: an invariant the target checks did not hold. abort() is what
// libFuzzer records as a crash (with the input saved) and what fails the ctest run.
[[noreturn]] void Fail(std::string_view what);

// A directory private to this process (removed at exit), for loaders that read files by path.
const std::filesystem::path& ScratchDir();

// Writes `bytes` to ScratchDir()/name (replacing it) and returns the path.
std::filesystem::path WriteScratchFile(std::string_view name, std::string_view bytes);

// Splits `input` at the first NUL byte: {before, after} (after is empty when there is none).
// Text formats (JSON, merges.txt) cannot hold a raw NUL, so multi-part inputs use it as the
// separator and stay readable in the seed corpora.
std::pair<std::string_view, std::string_view> SplitAtNul(std::string_view input);

// With MANYSHOT_FUZZ_VERBOSE set, prints what a loader said about an input: to check that the
// seeds load (a seed that fails early only fuzzes the first lines of a parser).
void Report(const absl::Status& status);

}  // namespace manyshot::fuzz
