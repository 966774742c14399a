#include "client/cli_args.h"

#include "absl/flags/flag.h"
#include "client/flags.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace manyshot::client {
namespace {

using ::testing::ElementsAre;

TEST(CliArgsTest, CollectsRepeatableFlagsInOrder) {
  ExtractedArgs out = ExtractRepeatedFlags(
      {"manyshot", "score", "sst2", "--candidate=good, really", "--input=x", "--candidate", "bad",
       "-stop=\\n", "--timeout=5", "--", "--candidate=positional"},
      {"candidate", "stop", "field"});
  EXPECT_THAT(out.repeated["candidate"], ElementsAre("good, really", "bad"));
  EXPECT_THAT(out.repeated["stop"], ElementsAre("\\n"));
  EXPECT_EQ(out.repeated.count("field"), 0u);
  EXPECT_THAT(out.rest, ElementsAre("manyshot", "score", "sst2", "--input=x", "--timeout=5", "--",
                                    "--candidate=positional"));
  EXPECT_TRUE(out.given.count("timeout"));
  EXPECT_TRUE(out.given.count("input"));
  EXPECT_FALSE(out.given.count("json"));
}

TEST(CliArgsTest, FindsUnknownFlags) {
  (void)absl::GetFlag(FLAGS_batch);  // links the subcommand flags into this test
  EXPECT_EQ(FindUnknownFlag({"manyshot", "classify", "t", "--batch=4", "--stream", "--nostream"}),
            "");
  EXPECT_EQ(FindUnknownFlag({"manyshot", "classify", "--batchsize=4"}), "--batchsize=4");
  EXPECT_EQ(FindUnknownFlag({"manyshot", "classify", "--nobatch=4"}), "--nobatch=4");  // not bool
  EXPECT_EQ(FindUnknownFlag({"manyshot", "--", "--whatever"}), "");
  EXPECT_EQ(FindUnknownFlag({"manyshot", "--help"}), "");
}

}  // namespace
}  // namespace manyshot::client
