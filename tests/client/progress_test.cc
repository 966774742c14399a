#include "client/progress.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot::client {
namespace {

v1::CreateTaskProgress Progress(v1::CreateTaskProgress::Phase phase, uint64_t encoded,
                                uint64_t total, uint64_t tokens, double seconds) {
  v1::CreateTaskProgress p;
  p.set_phase(phase);
  p.set_demonstrations_received(1000);
  p.set_groups_encoded(encoded);
  p.set_groups_total(total);
  p.set_tokens_encoded(tokens);
  p.set_elapsed_seconds(seconds);
  return p;
}

// Runs `body` with a memory FILE and returns what it wrote.
template <typename Body>
std::string Capture(Body body) {
  char* buffer = nullptr;
  size_t size = 0;
  std::FILE* out = open_memstream(&buffer, &size);
  body(out);
  std::fclose(out);
  std::string text(buffer, size);
  std::free(buffer);
  return text;
}

TEST(ProgressTest, FormatsBarGroupsTokensAndTime) {
  EXPECT_EQ(FormatProgress(Progress(v1::CreateTaskProgress::PHASE_ENCODING, 6, 24, 12288, 3.14), 8),
            "encoding   [##------]  25% 6/24 groups 12288 tokens 3.1 s");
  EXPECT_EQ(FormatProgress(Progress(v1::CreateTaskProgress::PHASE_RECEIVING, 0, 0, 0, 0.5), 8),
            "receiving  1000 demonstrations 0.5 s");
}

TEST(ProgressTest, NonInteractivePrintsPhaseChangesAndPeriodicLines) {
  std::string text = Capture([](std::FILE* out) {
    ProgressDisplay display(out, /*interactive=*/false, /*min_interval_seconds=*/2.0);
    display.Update(Progress(v1::CreateTaskProgress::PHASE_RECEIVING, 0, 0, 0, 0), 0.0);
    display.Update(Progress(v1::CreateTaskProgress::PHASE_ENCODING, 1, 4, 100, 1), 1.0);
    display.Update(Progress(v1::CreateTaskProgress::PHASE_ENCODING, 2, 4, 200, 1.5), 1.5);  // quiet
    display.Update(Progress(v1::CreateTaskProgress::PHASE_ENCODING, 3, 4, 300, 3.5), 3.5);
    display.Update(Progress(v1::CreateTaskProgress::PHASE_ENCODING, 4, 4, 400, 4), 4.0);  // quiet
    display.Finish();  // prints the last, unprinted state
  });
  std::vector<std::string> lines;
  for (size_t start = 0, end; (end = text.find('\n', start)) != std::string::npos;
       start = end + 1) {
    lines.push_back(text.substr(start, end - start));
  }
  ASSERT_EQ(lines.size(), 4u) << text;
  EXPECT_THAT(lines[0], ::testing::StartsWith("receiving"));
  EXPECT_THAT(lines[1], ::testing::HasSubstr("1/4 groups"));
  EXPECT_THAT(lines[2], ::testing::HasSubstr("3/4 groups"));
  EXPECT_THAT(lines[3], ::testing::HasSubstr("4/4 groups 400 tokens"));
  EXPECT_EQ(text.find('\r'), std::string::npos);
}

TEST(ProgressTest, InteractiveRewritesOneLine) {
  std::string text = Capture([](std::FILE* out) {
    ProgressDisplay display(out, /*interactive=*/true);
    display.Update(Progress(v1::CreateTaskProgress::PHASE_ENCODING, 1, 2, 10, 0.1), 0.1);
    display.Update(Progress(v1::CreateTaskProgress::PHASE_ENCODING, 2, 2, 20, 0.2), 0.2);
    display.Finish();
  });
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 2);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1);
  EXPECT_EQ(text.back(), '\n');
  EXPECT_THAT(text, ::testing::HasSubstr("100% 2/2 groups"));
}

}  // namespace
}  // namespace manyshot::client
