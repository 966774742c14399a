// GPT-2 byte-level BPE: our ids against the npm package gpt-3-encoder (an independent
// implementation of OpenAI's encoder.py) on the committed parity sentences, through both
// vocab.json + merges.txt and our converted tokenizer.json.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/engine/tokenizer/tokenizer_test_util.h"

namespace manyshot::tokenizer_test {
namespace {

// gpt-3-encoder looks merges up by `pair.toString()` ("a,b"), so pairs whose parts contain a
// comma can collide ("a,b" + "c" vs "a" + "b,c"), and it does not treat <|endoftext|> as
// special. Lines where it could be wrong for those reasons are compared but a mismatch on them
// is reported rather than failed; every other mismatch fails.
bool ReferenceMayBeWrong(const std::string& line) {
  return line.find("<|endoftext|>") != std::string::npos ||
         (line.find(',') != std::string::npos && line.find_first_of("\"'") != std::string::npos);
}

const std::vector<std::vector<int32_t>>& ReferenceIds() {
  static const auto* ids = [] {
    bool ok = false;
    const std::string cmd = "node " + Quote(ToolsDir() / "gpt3_encoder_ids.js") + " " +
                            Quote(NpmDir()) + " " + Quote(SentencesFile());
    const std::string out = RunCapture(cmd, &ok);
    EXPECT_TRUE(ok) << cmd;
    return new std::vector<std::vector<int32_t>>(ParseIdLines(out));
  }();
  return *ids;
}

void CheckParity(const Tokenizer& tok) {
  const auto lines = ReadLines(SentencesFile());
  ASSERT_GE(lines.size(), 10000u);
  const auto& want = ReferenceIds();
  ASSERT_EQ(want.size(), lines.size());
  int compared = 0, mismatches = 0, excused = 0;
  for (size_t i = 0; i < lines.size(); ++i) {
    auto got = tok.Encode(lines[i]);
    ASSERT_TRUE(got.ok()) << got.status() << " line " << i;
    ++compared;
    if (*got == want[i]) continue;
    if (ReferenceMayBeWrong(lines[i])) {
      ++excused;
      continue;
    }
    ++mismatches;
    if (mismatches <= 5) ADD_FAILURE() << "line " << i + 1 << ": " << lines[i];
  }
  std::printf("[gpt2 parity %s] %d lines compared, %d mismatches, %d excused\n", tok.kind().c_str(),
              compared, mismatches, excused);
  EXPECT_EQ(mismatches, 0);
  EXPECT_LE(excused, 5);
}

TEST(Gpt2ParityTest, VocabMergesMatchesGpt3Encoder) { CheckParity(Cached(Gpt2Dir())); }

TEST(Gpt2ParityTest, TokenizerJsonMatchesGpt3Encoder) {
  CheckParity(Cached(Gpt2TokenizerJsonDir()));
}

TEST(Gpt2ParityTest, BothFormatsAgreeAndRoundTrip) {
  const Tokenizer& a = Cached(Gpt2Dir());
  const Tokenizer& b = Cached(Gpt2TokenizerJsonDir());
  for (const std::string& line : ReadLines(SentencesFile())) {
    auto ia = a.Encode(line);
    auto ib = b.Encode(line);
    ASSERT_TRUE(ia.ok() && ib.ok());
    ASSERT_EQ(*ia, *ib) << line;
    auto text = a.Decode(*ia);
    ASSERT_TRUE(text.ok());
    ASSERT_EQ(*text, line);
  }
}

TEST(Gpt2ParityTest, MultiLineStrings) {
  // Lines cannot hold newlines, so these are checked against known GPT-2 ids directly
  // (values from gpt-3-encoder) and for round trip.
  const Tokenizer& tok = Cached(Gpt2Dir());
  const std::vector<std::string> texts = {
      "Sentence: great movie\nLabel: positive\n\n",
      "a\n\n\nb",
      "line one\r\nline two\r\n",
      "  indented\n\tcode();\n",
      "\n",
      "trailing spaces   \n   leading",
  };
  for (const auto& t : texts) {
    auto ids = tok.Encode(t);
    ASSERT_TRUE(ids.ok());
    auto back = tok.Decode(*ids);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
  }
  auto ids = tok.Encode("Sentence: great movie\nLabel: positive\n\n");
  ASSERT_TRUE(ids.ok());
  EXPECT_EQ(*ids, (std::vector<int32_t>{31837, 594, 25, 1049, 3807, 198, 33986, 25, 3967, 628}));
}

}  // namespace
}  // namespace manyshot::tokenizer_test
