// TruncateInput and FitQuery against a counter whose answers can be worked out by hand (one token
// per byte of the rendered input), so each cut can be checked exactly.
#include "engine/task/input_truncation.h"

#include "gtest/gtest.h"

namespace manyshot {
namespace {

// "Q: {text} | {extra}" rendered by hand: one token per byte.
std::string Rendered(const Example& e) {
  auto extra = e.fields.find("extra");
  return "Q: " + e.text + " | " + (extra == e.fields.end() ? "" : extra->second);
}

absl::StatusOr<int64_t> Bytes(const Example& e) { return static_cast<int64_t>(Rendered(e).size()); }

absl::StatusOr<RenderedQuery> Render(const Example& e) {
  const std::string text = Rendered(e);
  return RenderedQuery{std::vector<int32_t>(text.begin(), text.end()), text, 0};
}

Example Input(std::string text, std::string extra = "") {
  Example e;
  e.text = std::move(text);
  if (!extra.empty()) e.fields["extra"] = std::move(extra);
  return e;
}

TEST(InputTruncationTest, KeepStartKeepsTheLongestPrefixThatFits) {
  // "Q: " + text + " | " is 6 bytes of template: 16 tokens leave 10 for the text.
  auto cut = TruncateInput(Input("abcdefghijklmnop"), InputTruncation::kKeepStart, 16, Bytes);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->input.text, "abcdefghij");
  EXPECT_EQ(cut->tokens, 16);
  EXPECT_EQ(cut->value, "text");
}

TEST(InputTruncationTest, KeepEndKeepsTheLongestSuffixThatFits) {
  auto cut = TruncateInput(Input("abcdefghijklmnop"), InputTruncation::kKeepEnd, 16, Bytes);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->input.text, "ghijklmnop");
}

TEST(InputTruncationTest, NeverSplitsACharacter) {
  // "é" is two bytes: 11 bytes of room hold five of them, not five and a half.
  std::string accents;
  for (int i = 0; i < 10; ++i) accents += "\xC3\xA9";
  auto start = TruncateInput(Input(accents), InputTruncation::kKeepStart, 17, Bytes);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->input.text.size(), 10u);
  EXPECT_EQ(start->tokens, 16);
  auto end = TruncateInput(Input(accents), InputTruncation::kKeepEnd, 17, Bytes);
  ASSERT_TRUE(end.ok()) << end.status();
  EXPECT_EQ(end->input.text, accents.substr(10));
}

TEST(InputTruncationTest, CutsTheLongestValueAndKeepsTheOthers) {
  auto cut = TruncateInput(Input("short", "a much longer field value"), InputTruncation::kKeepStart,
                           20, Bytes);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->value, "extra");
  EXPECT_EQ(cut->input.text, "short");
  EXPECT_EQ(cut->input.fields.at("extra"), "a much lo");  // 11 bytes of template and text + 9
  EXPECT_EQ(cut->tokens, 20);
}

TEST(InputTruncationTest, SkipsAValueWhoseRemovalAloneDoesNotFit) {
  // The longest value is not rendered at all: emptying it changes nothing, so the text is cut.
  Example e = Input("0123456789");
  e.fields["unused"] = std::string(40, 'u');
  auto cut = TruncateInput(e, InputTruncation::kKeepStart, 12, Bytes);
  ASSERT_TRUE(cut.ok()) << cut.status();
  EXPECT_EQ(cut->value, "text");
  EXPECT_EQ(cut->input.text, "012345");
  EXPECT_EQ(cut->input.fields.at("unused"), std::string(40, 'u'));
}

TEST(InputTruncationTest, RefusesWhenNoValueCanMakeItFit) {
  auto cut = TruncateInput(Input("abc", "def"), InputTruncation::kKeepStart, 8, Bytes);
  ASSERT_FALSE(cut.ok());
  EXPECT_EQ(cut.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(cut.status().message().find("cannot be truncated to max_query_tokens 8"),
            std::string::npos)
      << cut.status();
}

TEST(InputTruncationTest, FitQueryRefusesUnderNoneAndReportsTheRemovedTokens) {
  auto refused = FitQuery(Input("abcdefghijklmnop"), InputTruncation::kNone, 16, Render);
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().message(),
            "the rendered input has 22 tokens, more than max_query_tokens 16");
  auto fitted = FitQuery(Input("abcdefghijklmnop"), InputTruncation::kKeepEnd, 16, Render);
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_EQ(fitted->text, "Q: ghijklmnop | ");
  EXPECT_EQ(fitted->truncated_tokens, 6);
  auto untouched = FitQuery(Input("abc"), InputTruncation::kKeepEnd, 16, Render);
  ASSERT_TRUE(untouched.ok());
  EXPECT_EQ(untouched->truncated_tokens, 0);
  EXPECT_EQ(untouched->text, "Q: abc | ");
}

}  // namespace
}  // namespace manyshot
