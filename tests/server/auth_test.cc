// Bearer-token auth without a server: the tokens file parser, the tenant directory every call's
// tenant comes from (an explicit object: two servers in one process keep their own tokens), and
// the metadata processor gRPC runs before a call reaches the service.
#include "server/auth.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <string>

#include "gtest/gtest.h"
#include "server/request_context.h"

namespace manyshot::server {
namespace {

namespace fs = std::filesystem;

class TokensFile {
 public:
  explicit TokensFile(const std::string& text) {
    path_ = fs::path(MANYSHOT_BINARY_DIR) /
            ("auth_test_tokens_" + std::to_string(::getpid()) + "_" + std::to_string(counter_++));
    std::ofstream(path_) << text;
    fs::permissions(path_, fs::perms::owner_read | fs::perms::owner_write);
  }
  ~TokensFile() {
    std::error_code ec;
    fs::remove(path_, ec);
  }
  std::string path() const { return path_.string(); }

 private:
  static inline int counter_ = 0;
  fs::path path_;
};

TEST(LoadTokensFileTest, ReadsTokenTenantLinesSkippingCommentsAndBlankLines) {
  TokensFile file("# tokens\n\nalpha-token tenant-a\n  beta-token\ttenant-b  \n");
  auto tokens = LoadTokensFile(file.path());
  ASSERT_TRUE(tokens.ok()) << tokens.status();
  EXPECT_EQ(tokens->size(), 2u);
  EXPECT_EQ(tokens->Find("alpha-token"), "tenant-a");
  EXPECT_EQ(tokens->Find("beta-token"), "tenant-b");
  EXPECT_EQ(tokens->Find("gamma-token"), std::nullopt);
}

TEST(LoadTokensFileTest, BadFilesAreErrorsNamingTheLineOrTheProblem) {
  {
    TokensFile file("good tenant\nonly-one-field\n");
    auto tokens = LoadTokensFile(file.path());
    EXPECT_EQ(tokens.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(tokens.status().message().find("line 2"), std::string::npos) << tokens.status();
  }
  {
    TokensFile file("same a\nsame b\n");
    auto tokens = LoadTokensFile(file.path());
    EXPECT_NE(tokens.status().message().find("duplicate token"), std::string::npos)
        << tokens.status();
  }
  {
    TokensFile file("# nothing\n");
    auto tokens = LoadTokensFile(file.path());
    EXPECT_NE(tokens.status().message().find("holds no"), std::string::npos) << tokens.status();
  }
  auto missing = LoadTokensFile("/nonexistent/tokens");
  EXPECT_NE(missing.status().message().find("cannot read"), std::string::npos) << missing.status();
}

TEST(TenantDirectoryTest, OffMeansTheDefaultTenantForEveryCall) {
  const TenantDirectory off;
  EXPECT_FALSE(off.enabled());
  EXPECT_EQ(off.TenantForAuthorization("Bearer anything"), std::nullopt);
  EXPECT_EQ(TenantOf(off, nullptr), "default");
}

TEST(TenantDirectoryTest, TwoDirectoriesKeepTheirOwnTokens) {
  TokenTable a_tokens;
  ASSERT_TRUE(a_tokens.Add("token-a", "tenant-a"));
  TokenTable b_tokens;
  ASSERT_TRUE(b_tokens.Add("token-b", "tenant-b"));
  const TenantDirectory a(std::move(a_tokens));
  const TenantDirectory b(std::move(b_tokens));
  EXPECT_TRUE(a.enabled());
  EXPECT_EQ(a.TenantForAuthorization("Bearer token-a"), "tenant-a");
  EXPECT_EQ(a.TenantForAuthorization("Bearer  token-a "), "tenant-a");
  EXPECT_EQ(a.TenantForAuthorization("Bearer token-b"), std::nullopt);
  EXPECT_EQ(b.TenantForAuthorization("Bearer token-b"), "tenant-b");
  EXPECT_EQ(a.TenantForAuthorization("Basic token-a"), std::nullopt);
  EXPECT_EQ(a.TenantForAuthorization("Bearer "), std::nullopt);
  // With auth on, a call without a context or token matches no tenant's tasks.
  EXPECT_EQ(TenantOf(a, nullptr), "");
}

class ProcessorTest : public ::testing::Test {
 protected:
  ProcessorTest() {
    TokenTable tokens;
    EXPECT_TRUE(tokens.Add("secret", "tenant"));
    tenants_ = TenantDirectory(std::move(tokens));
  }
  grpc::Status Process(const std::string& path, const std::string* authorization) {
    BearerTokenAuthProcessor processor(tenants_.tokens());
    std::multimap<grpc::string_ref, grpc::string_ref> metadata;
    metadata.emplace(":path", path);
    if (authorization != nullptr) metadata.emplace("authorization", *authorization);
    std::multimap<std::string, std::string> consumed, response;
    return processor.Process(metadata, nullptr, &consumed, &response);
  }
  TenantDirectory tenants_;
};

TEST_F(ProcessorTest, HealthNeedsNoTokenEverythingElseAKnownOne) {
  EXPECT_TRUE(Process("/grpc.health.v1.Health/Check", nullptr).ok());
  const std::string good = "Bearer secret", bad = "Bearer guess", basic = "Basic secret";
  EXPECT_TRUE(Process("/manyshot.v1.ManyShot/Classify", &good).ok());
  for (const std::string* auth : {static_cast<const std::string*>(nullptr), &bad, &basic}) {
    const grpc::Status status = Process("/manyshot.v1.ManyShot/Classify", auth);
    EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED) << status.error_message();
  }
}

}  // namespace
}  // namespace manyshot::server
