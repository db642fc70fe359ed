// Unit tests of kubeconfig / in-cluster loading and the token source (files in a temp dir).
#include "k8s/kube_config.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

namespace kiln {
namespace {

namespace fs = std::filesystem;

class KubeConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("kiln-kubeconfig-" + std::to_string(::getpid()) + "-" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string Write(const std::string& name, const std::string& text) {
    fs::path p = dir_ / name;
    fs::create_directories(p.parent_path());
    std::ofstream(p) << text;
    return p.string();
  }
  Status Parse(const std::string& yaml, KubeConfig* c, const std::string& context = "") {
    return LoadKubeconfig(Write("config", yaml), context, c);
  }
  fs::path dir_;
};

const char kBase[] = R"(apiVersion: v1
kind: Config
current-context: loop
contexts:
- name: loop
  context: {cluster: fake, user: kiln, namespace: loop}
- name: other
  context: {cluster: fake2, user: kiln}
clusters:
- name: fake
  cluster:
    server: https://127.0.0.1:16443
    certificate-authority: certs/ca.crt
- name: fake2
  cluster:
    server: https://10.0.0.1/
    certificate-authority-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCg==
)";

TEST_F(KubeConfigTest, TokenUserWithRelativeCaPath) {
  KubeConfig c;
  ASSERT_TRUE(
      Parse(std::string(kBase) + "users:\n- name: kiln\n  user: {token: s3cret}\n", &c).ok());
  EXPECT_EQ(c.server, "https://127.0.0.1:16443");
  EXPECT_EQ(c.namespace_, "loop");
  ASSERT_TRUE(c.tls.ca_file.has_value());
  EXPECT_EQ(*c.tls.ca_file, (dir_ / "certs/ca.crt").string());
  ASSERT_TRUE(c.token);
  std::string t;
  ASSERT_TRUE(c.token->Get(&t).ok());
  EXPECT_EQ(t, "s3cret");
  EXPECT_EQ(c.token->Describe().find("s3cret"), std::string::npos);
  EXPECT_NE(c.source.find("context \"loop\""), std::string::npos);
}

TEST_F(KubeConfigTest, ExplicitContextAndCaData) {
  KubeConfig c;
  ASSERT_TRUE(
      Parse(std::string(kBase) + "users:\n- name: kiln\n  user: {token: t}\n", &c, "other").ok());
  EXPECT_EQ(c.server, "https://10.0.0.1");  // trailing slash dropped
  EXPECT_EQ(c.namespace_, "");
  ASSERT_TRUE(c.tls.ca_pem.has_value());
  EXPECT_EQ(*c.tls.ca_pem, "-----BEGIN CERTIFICATE-----\n");
  EXPECT_FALSE(c.tls.ca_file.has_value());
}

TEST_F(KubeConfigTest, TokenFileUser) {
  Write("tok", "  file-token \n");
  KubeConfig c;
  ASSERT_TRUE(
      Parse(std::string(kBase) + "users:\n- name: kiln\n  user: {tokenFile: tok}\n", &c).ok());
  std::string t;
  ASSERT_TRUE(c.token->Get(&t).ok());
  EXPECT_EQ(t, "file-token");
  EXPECT_EQ(c.token->Describe(), "token file " + (dir_ / "tok").string());
}

TEST_F(KubeConfigTest, ClientCertificateFilesAndData) {
  KubeConfig c;
  ASSERT_TRUE(Parse(std::string(kBase) +
                        "users:\n- name: kiln\n  user:\n    client-certificate: c.crt\n"
                        "    client-key: /abs/c.key\n",
                    &c)
                  .ok());
  EXPECT_EQ(*c.tls.client_cert_file, (dir_ / "c.crt").string());
  EXPECT_EQ(*c.tls.client_key_file, "/abs/c.key");
  EXPECT_FALSE(c.token);
  ASSERT_TRUE(Parse(std::string(kBase) +
                        "users:\n- name: kiln\n  user:\n    client-certificate-data: Y2VydA==\n"
                        "    client-key-data: a2V5\n",
                    &c)
                  .ok());
  EXPECT_EQ(*c.tls.client_cert_pem, "cert");
  EXPECT_EQ(*c.tls.client_key_pem, "key");
}

TEST_F(KubeConfigTest, Refusals) {
  struct Case {
    std::string yaml, want;
  };
  const std::string users_token = "users:\n- name: kiln\n  user: {token: SECRET-TOKEN}\n";
  std::vector<Case> cases = {
      {R"(current-context: a
contexts: [{name: a, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "https://h:1", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: SECRET-TOKEN}}]
)",
       "insecure-skip-tls-verify"},
      {std::string(kBase) + "users:\n- name: kiln\n  user:\n    exec:\n      command: aws\n",
       "exec credential plugin"},
      {std::string(kBase) + "users:\n- name: kiln\n  user:\n    auth-provider:\n      name: gcp\n",
       "auth-provider plugin"},
      {std::string(kBase) + "users:\n- name: kiln\n  user: {username: a, password: SECRET-TOKEN}\n",
       "basic auth"},
      {std::string(kBase) + "users:\n- name: kiln\n  user: {client-certificate: c.crt}\n",
       "without its key"},
      {std::string(kBase) + "users:\n- name: kiln\n  user: {}\n", "has no credential"},
      {std::string(kBase) + "users:\n- name: someone-else\n  user: {token: x}\n",
       "user \"kiln\" not found"},
      {"current-context: nope\n" + std::string(kBase).substr(std::string(kBase).find("contexts:")) +
           users_token,
       "context \"nope\" not found"},
      {R"(current-context: a
contexts: [{name: a, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {server: "http://h:1"}}]
users: [{name: u, user: {token: SECRET-TOKEN}}]
)",
       "https only"},
      {R"(current-context: a
contexts: [{name: a, context: {cluster: k, user: u}}]
clusters: [{name: k, cluster: {certificate-authority: x}}]
users: [{name: u, user: {token: SECRET-TOKEN}}]
)",
       "has no server"},
      {R"(current-context: a
contexts: [{name: a, context: {cluster: missing, user: u}}]
clusters: []
)",
       "cluster \"missing\" not found"},
      {"contexts: []\n", "no current-context"},
      {"current-context: x\ncontexts: []\n", "context \"x\" not found"},
      {"{{{ not yaml", "not valid YAML"},
      {"- a list\n", "not a kubeconfig mapping"},
      {std::string(kBase).replace(std::string(kBase).find("LS0t"), 4, "L*0t") + users_token,
       "certificate-authority-data is not valid base64"},
  };
  for (const auto& tc : cases) {
    KubeConfig c;
    Status st = Parse(tc.yaml, &c,
                      tc.want == "certificate-authority-data is not valid base64" ? "other" : "");
    ASSERT_FALSE(st.ok()) << tc.want;
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << st.ToString();
    EXPECT_NE(st.message().find(tc.want), std::string::npos) << st.message();
    EXPECT_NE(st.message().find("kubeconfig " + (dir_ / "config").string()), std::string::npos);
    EXPECT_EQ(st.message().find("SECRET-TOKEN"), std::string::npos) << st.message();
  }
}

TEST_F(KubeConfigTest, MissingFileIsFailedPrecondition) {
  KubeConfig c;
  Status st = LoadKubeconfig((dir_ / "absent").string(), "", &c);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("cannot read kubeconfig"), std::string::npos);
}

TEST_F(KubeConfigTest, InCluster) {
  Write("sa/token", "tok-1\n");
  Write("sa/ca.crt", "pem");
  Write("sa/namespace", "loop\n");
  InClusterSource src{"10.96.0.1", "443", (dir_ / "sa").string()};
  KubeConfig c;
  ASSERT_TRUE(LoadInClusterConfig(src, &c).ok());
  EXPECT_EQ(c.server, "https://10.96.0.1:443");
  EXPECT_EQ(*c.tls.ca_file, (dir_ / "sa/ca.crt").string());
  EXPECT_EQ(c.namespace_, "loop");
  std::string t;
  ASSERT_TRUE(c.token->Get(&t).ok());
  EXPECT_EQ(t, "tok-1");

  src.service_host = "fd00::1";
  ASSERT_TRUE(LoadInClusterConfig(src, &c).ok());
  EXPECT_EQ(c.server, "https://[fd00::1]:443");
}

TEST_F(KubeConfigTest, InClusterRefusals) {
  KubeConfig c;
  InClusterSource src{"", "", (dir_ / "sa").string()};
  Status st = LoadInClusterConfig(src, &c);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition);
  EXPECT_NE(st.message().find("not running in a Kubernetes cluster"), std::string::npos);
  src = {"10.0.0.1", "443", (dir_ / "sa").string()};
  st = LoadInClusterConfig(src, &c);
  EXPECT_NE(st.message().find("cannot read service-account token"), std::string::npos);
  Write("sa/token", "t");
  st = LoadInClusterConfig(src, &c);
  EXPECT_NE(st.message().find("cannot read service-account CA"), std::string::npos);
  Write("sa/ca.crt", "pem");
  src.service_port = "https";
  st = LoadInClusterConfig(src, &c);
  EXPECT_NE(st.message().find("not a port number"), std::string::npos);
}

TEST_F(KubeConfigTest, TokenFileIsReReadWhenItChangesAndOnRefresh) {
  std::string path = Write("token", "aaaa");
  auto src = TokenSource::File(path);
  std::string t;
  ASSERT_TRUE(src->Get(&t).ok());
  EXPECT_EQ(t, "aaaa");
  // A changed file (size differs) is noticed without Refresh().
  Write("token", "bbbbbb");
  ASSERT_TRUE(src->Get(&t).ok());
  EXPECT_EQ(t, "bbbbbb");
  // Same size, mtime restored: invisible to stat, so the cache answers until Refresh().
  struct stat st {};
  ASSERT_EQ(::stat(path.c_str(), &st), 0);
  Write("token", "cccccc");
  struct timespec times[2] = {st.st_atim, st.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  ASSERT_TRUE(src->Get(&t).ok());
  EXPECT_EQ(t, "bbbbbb");
  EXPECT_TRUE(src->Refresh());
  ASSERT_TRUE(src->Get(&t).ok());
  EXPECT_EQ(t, "cccccc");
  // Empty and missing files are clear errors.
  Write("token", "  \n");
  Status s = src->Get(&t);
  EXPECT_NE(s.message().find("is empty"), std::string::npos);
  fs::remove(path);
  s = src->Get(&t);
  EXPECT_NE(s.message().find("cannot read token file " + path), std::string::npos);
  EXPECT_FALSE(TokenSource::Fixed("x")->Refresh());
}

TEST(Base64, DecodesWithAndWithoutPaddingAndRejectsJunk) {
  std::string out;
  ASSERT_TRUE(DecodeBase64("aGVsbG8=", &out));
  EXPECT_EQ(out, "hello");
  ASSERT_TRUE(DecodeBase64("aGVs\nbG8", &out));
  EXPECT_EQ(out, "hello");
  EXPECT_FALSE(DecodeBase64("a*b=", &out));
  EXPECT_FALSE(DecodeBase64("a", &out));
}

}  // namespace
}  // namespace kiln
