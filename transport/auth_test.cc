#include "transport/auth.h"

#include <gtest/gtest.h>

#include "common/sha256.h"

namespace kiln {
namespace {

Config MakeConfig() {
  Config c;
  c.server.allowed_origins = {"https://console.example.com"};
  DomainConfig a;
  a.name = "alpha";
  a.token_sha256 = {Sha256Hex("alpha-token"), Sha256Hex("alpha-token-2")};
  DomainConfig b;
  b.name = "beta";
  b.token_sha256 = {Sha256Hex("beta-token")};
  c.domains["alpha"] = a;
  c.domains["beta"] = b;
  c.operator_token_sha256 = {Sha256Hex("op-token")};
  return c;
}

TEST(AuthenticatorTest, ResolvesDomainsAndOperator) {
  Authenticator auth(MakeConfig(), true);
  AuthDecision d = auth.Authenticate("Bearer alpha-token-2");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.principal->kind, Principal::Kind::kDomain);
  EXPECT_EQ(d.principal->domain, "alpha");
  d = auth.Authenticate("bearer beta-token");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.principal->domain, "beta");
  d = auth.Authenticate("Bearer op-token");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.principal->kind, Principal::Kind::kOperator);
}

TEST(AuthenticatorTest, MissingAndWrongTokensAre401) {
  Authenticator auth(MakeConfig(), true);
  AuthDecision d = auth.Authenticate("");
  EXPECT_EQ(d.status, 401);
  EXPECT_EQ(d.www_authenticate.rfind("Bearer", 0), 0u);
  EXPECT_EQ(d.www_authenticate.find("invalid_token"), std::string::npos);
  d = auth.Authenticate("Bearer wrong");
  EXPECT_EQ(d.status, 401);
  EXPECT_NE(d.www_authenticate.find("error=\"invalid_token\""), std::string::npos);
  EXPECT_EQ(d.message.find("wrong"), std::string::npos);  // never echo the token
  EXPECT_EQ(auth.Authenticate("Basic YWxwaGEtdG9rZW4=").status, 401);
  EXPECT_EQ(auth.Authenticate("Bearer ").status, 401);
  // A configured hash presented as the token does not authenticate.
  EXPECT_EQ(auth.Authenticate("Bearer " + Sha256Hex("alpha-token")).status, 401);
}

TEST(AuthenticatorTest, OriginPolicy) {
  Authenticator auth(MakeConfig(), true);
  EXPECT_TRUE(auth.CheckOrigin("", false, "127.0.0.1:8700").ok());
  EXPECT_TRUE(auth.CheckOrigin("https://console.example.com", true, "localhost:8700").ok());
  EXPECT_TRUE(auth.CheckOrigin("HTTPS://Console.Example.com", true, "localhost").ok());
  EXPECT_TRUE(auth.CheckOrigin("http://127.0.0.1:5173", true, "127.0.0.1:8700").ok());
  EXPECT_TRUE(auth.CheckOrigin("http://localhost", true, "[::1]:8700").ok());
  EXPECT_EQ(auth.CheckOrigin("http://evil.example.com", true, "127.0.0.1:8700").status, 403);
  EXPECT_EQ(auth.CheckOrigin("null", true, "127.0.0.1:8700").status, 403);
  EXPECT_EQ(auth.CheckOrigin("http://127.0.0.1.evil.com", true, "127.0.0.1").status, 403);
  EXPECT_EQ(auth.CheckOrigin("http://localhost:80/x", true, "127.0.0.1").status, 403);
  // DNS rebinding: a foreign Host is refused while listening on loopback.
  EXPECT_EQ(auth.CheckOrigin("", false, "evil.example.com").status, 403);
  EXPECT_EQ(auth.CheckOrigin("", false, "localhost:abc").status, 403);
  Authenticator open(MakeConfig(), false);
  EXPECT_TRUE(open.CheckOrigin("", false, "kiln.svc.cluster.local:8700").ok());
  EXPECT_EQ(open.CheckOrigin("http://evil.example.com", true, "kiln:8700").status, 403);
}

}  // namespace
}  // namespace kiln
