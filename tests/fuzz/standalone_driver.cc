// main() for the fuzz targets in the normal (GCC, no libFuzzer) build, so that every ctest run
// replays the committed seed corpus and a bounded, deterministic number of mutations of it:
//
//   <target> CORPUS_DIR_OR_FILE... [--mutations=N] [--seed=S] [--max_len=BYTES]
//
// Mutations are the simple libFuzzer-like ones (bit flips, byte sets, inserts, erases, repeated
// and spliced chunks, interesting integers) from a fixed PRNG seed, so a failure reproduces with
// the same command. A target reports a bug by crashing (Fail() aborts), which fails the test. An
// empty corpus is an error too: a missing seed directory must not pass silently.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "tests/fuzz/fuzz_support.h"

namespace {

std::string ReadAll(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

void Run(const std::string& input) {
  // An exact-size heap copy, so that AddressSanitizer (when on) catches reads past the end.
  std::vector<uint8_t> copy(input.begin(), input.end());
  LLVMFuzzerTestOneInput(copy.data(), copy.size());
}

// One random edit of `s`; `other` is another seed to splice from.
void Mutate(std::string& s, const std::string& other, std::mt19937_64& rng, size_t max_len) {
  auto below = [&](size_t n) { return n == 0 ? size_t{0} : static_cast<size_t>(rng() % n); };
  static constexpr uint64_t kInteresting[] = {0,
                                              1,
                                              0x7f,
                                              0x80,
                                              0xff,
                                              0x7fff,
                                              0xffff,
                                              0x7fffffff,
                                              0xffffffff,
                                              ~uint64_t{0},
                                              uint64_t{1} << 63};
  switch (rng() % 8) {
    case 0:  // flip one bit
      if (!s.empty()) s[below(s.size())] ^= static_cast<char>(1u << below(8));
      break;
    case 1:  // set one byte
      if (!s.empty()) s[below(s.size())] = static_cast<char>(rng());
      break;
    case 2:  // insert a few random bytes
      s.insert(below(s.size() + 1), std::string(1 + below(4), static_cast<char>(rng())));
      break;
    case 3:  // erase a chunk
      if (!s.empty()) {
        size_t at = below(s.size());
        s.erase(at, 1 + below(std::min<size_t>(16, s.size() - at)));
      }
      break;
    case 4:  // repeat a chunk
      if (!s.empty()) {
        size_t at = below(s.size());
        std::string chunk = s.substr(at, 1 + below(32));
        s.insert(below(s.size() + 1), chunk);
      }
      break;
    case 5:  // splice in a chunk of another seed
      if (!other.empty()) {
        size_t at = below(other.size());
        s.insert(below(s.size() + 1), other.substr(at, 1 + below(64)));
      }
      break;
    case 6: {  // overwrite with an interesting little-endian integer
      uint64_t v = kInteresting[below(std::size(kInteresting))];
      size_t width = size_t{1} << below(4);
      if (s.size() >= width) {
        size_t at = below(s.size() - width + 1);
        for (size_t i = 0; i < width; ++i) s[at + i] = static_cast<char>(v >> (8 * i));
      }
      break;
    }
    default:  // truncate
      s.resize(below(s.size() + 1));
      break;
  }
  if (s.size() > max_len) s.resize(max_len);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::filesystem::path> inputs;
  long mutations = 0;
  unsigned long long seed = 1;
  size_t max_len = 1 << 20;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg.rfind("--mutations=", 0) == 0) {
      mutations = std::stol(arg.substr(12));
    } else if (arg.rfind("--seed=", 0) == 0) {
      seed = std::stoull(arg.substr(7));
    } else if (arg.rfind("--max_len=", 0) == 0) {
      max_len = std::stoul(arg.substr(10));
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) inputs.push_back(entry.path());
      }
    } else if (std::filesystem::is_regular_file(arg)) {
      inputs.emplace_back(arg);
    } else {
      std::fprintf(stderr, "not a corpus directory, input file or option: %s\n", arg.c_str());
      return 2;
    }
  }
  if (inputs.empty()) {
    std::fprintf(stderr, "no inputs: give the seed corpus directory\n");
    return 2;
  }
  std::sort(inputs.begin(), inputs.end());  // directory order is not deterministic
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::string> seeds;
  for (const auto& path : inputs) {
    seeds.push_back(ReadAll(path));
    Run(seeds.back());
  }
  std::mt19937_64 rng(seed);
  for (long i = 0; i < mutations; ++i) {
    std::string s = seeds[rng() % seeds.size()];
    const std::string& other = seeds[rng() % seeds.size()];
    for (int edits = 1 + static_cast<int>(rng() % 4); edits > 0; --edits) {
      Mutate(s, other, rng, max_len);
    }
    Run(s);
  }
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("%zu seed inputs and %ld mutations ran without a failure in %.2f s\n", seeds.size(),
              mutations, seconds);
  return 0;
}
