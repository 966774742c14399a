#include "tests/fuzz/tokenizer_exercise.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "engine/tokenizer/utf8.h"
#include "tests/fuzz/fuzz_support.h"

namespace manyshot::fuzz {
namespace {

void CheckId(const Tokenizer& tokenizer, int32_t id, const char* what) {
  if (id < 0 || id >= tokenizer.vocab_size()) {
    Fail(absl::StrCat(what, " ", id, " is outside [0, ", tokenizer.vocab_size(), ")"));
  }
}

void RoundTrip(const Tokenizer& tokenizer, std::string_view text) {
  auto ids = tokenizer.Encode(text);
  // A tokenizer may be unable to encode some valid text (no unknown token, say): an error, fine.
  if (!ids.ok()) return;
  if (!ValidateUtf8(text).ok()) Fail("Encode accepted invalid UTF-8");
  for (int32_t id : *ids) CheckId(tokenizer, id, "Encode produced id");
  auto decoded = tokenizer.Decode(*ids);
  if (!decoded.ok())
    Fail(absl::StrCat("Decode of Encode's ids failed: ", decoded.status().ToString()));
  if (!ValidateUtf8(*decoded).ok()) Fail("Decode returned invalid UTF-8");
}

}  // namespace

void ExerciseTokenizer(const Tokenizer& tokenizer, std::string_view text) {
  const int64_t vocab = tokenizer.vocab_size();
  if (vocab <= 0 || vocab > (int64_t{1} << 31)) Fail("vocab_size out of range");
  for (auto id : {tokenizer.bos_id(), tokenizer.eos_id(), tokenizer.space_id()}) {
    if (id) CheckId(tokenizer, *id, "a special id");
  }
  static constexpr std::string_view kTexts[] = {"Hello world",
                                                " the quick  brown fox\n\n",
                                                "naïve café 日本語 🙂",
                                                "<s></s><unk>",
                                                "<|endoftext|>a",
                                                "\t 12345 ,.!? '",
                                                ""};
  for (std::string_view t : kTexts) RoundTrip(tokenizer, t);
  RoundTrip(tokenizer, text);

  // Every id's token in one Decode (up to 4096 ids: the seeds' vocabularies are smaller), and the
  // first and last 32 ids one by one and through IdToToken/TokenToId. Bounded so that each input
  // stays cheap enough for a million executions.
  const int32_t n = static_cast<int32_t>(std::min<int64_t>(vocab, 4096));
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) all[static_cast<size_t>(id)] = id;
  auto joined = tokenizer.Decode(all);
  if (!joined.ok()) Fail(absl::StrCat("Decode of all ids failed: ", joined.status().ToString()));
  if (!ValidateUtf8(*joined).ok()) Fail("Decode of all ids returned invalid UTF-8");
  for (int32_t id = 0; id < n; ++id) {
    if (id == 32 && n > 64) id = n - 32;
    std::string token = tokenizer.IdToToken(id);
    (void)tokenizer.TokenToId(token);
    auto one = tokenizer.Decode({&id, 1});
    if (!one.ok()) Fail(absl::StrCat("Decode of id ", id, " failed: ", one.status().ToString()));
    if (!ValidateUtf8(*one).ok()) Fail("Decode of one id returned invalid UTF-8");
  }
  if (!tokenizer.IdToToken(static_cast<int32_t>(vocab)).empty()) Fail("IdToToken(vocab_size)");
  for (int64_t bad : {int64_t{-1}, vocab}) {
    if (bad > INT32_MAX) continue;
    const int32_t id = static_cast<int32_t>(bad);
    if (tokenizer.Decode({&id, 1}).ok()) Fail("Decode accepted an id out of range");
  }
  (void)tokenizer.fingerprint();
  (void)tokenizer.kind();
}

SpecialTokenNames NamesFrom(std::string_view config) {
  if (config.empty()) return {};
  auto names = ParseSpecialTokenNames(config, "tokenizer_config.json");
  return names.ok() ? *names : SpecialTokenNames{};
}

}  // namespace manyshot::fuzz
