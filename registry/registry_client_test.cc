#include "registry/registry_client.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "common/sha256.h"
#include "registry/fake_http_server.h"
#include "registry/www_authenticate.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;
using testing::FakeServer;
using testing::Reply;

// ---------------------------------------------------------------- WWW-Authenticate parser

TEST(WwwAuthenticate, ParsesBearerChallenge) {
  std::vector<Challenge> c;
  ASSERT_TRUE(
      ParseWwwAuthenticate(
          R"(Bearer realm="https://auth.example.com/token",service="registry.example.com",scope="repository:a/b:pull,push")",
          &c)
          .ok());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].scheme, "bearer");
  EXPECT_EQ(c[0].Param("realm"), "https://auth.example.com/token");
  EXPECT_EQ(c[0].Param("service"), "registry.example.com");
  EXPECT_EQ(c[0].Param("scope"), "repository:a/b:pull,push");  // comma inside quotes
}

TEST(WwwAuthenticate, ParsesBasicAndCaseInsensitiveNames) {
  std::vector<Challenge> c;
  ASSERT_TRUE(ParseWwwAuthenticate(R"(BASIC Realm="kiln-registry")", &c).ok());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].scheme, "basic");
  EXPECT_EQ(c[0].Param("realm"), "kiln-registry");
}

TEST(WwwAuthenticate, ParsesMultipleChallengesAndTokenValues) {
  std::vector<Challenge> c;
  ASSERT_TRUE(
      ParseWwwAuthenticate(
          R"(Basic realm="a, b", Bearer realm="http://h/t", service=svc ,  error=insufficient_scope)",
          &c)
          .ok());
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].scheme, "basic");
  EXPECT_EQ(c[0].Param("realm"), "a, b");
  EXPECT_EQ(c[1].scheme, "bearer");
  EXPECT_EQ(c[1].Param("realm"), "http://h/t");
  EXPECT_EQ(c[1].Param("service"), "svc");
  EXPECT_EQ(c[1].Param("error"), "insufficient_scope");
}

TEST(WwwAuthenticate, UnescapesQuotedPairs) {
  std::vector<Challenge> c;
  ASSERT_TRUE(ParseWwwAuthenticate(R"(Bearer realm="a\"b\\c\,d")", &c).ok());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].Param("realm"), "a\"b\\c,d");
}

TEST(WwwAuthenticate, SchemeWithoutParamsAndToken68) {
  std::vector<Challenge> c;
  ASSERT_TRUE(ParseWwwAuthenticate("Negotiate abc+/12==, Basic", &c).ok());
  ASSERT_EQ(c.size(), 2u);
  EXPECT_EQ(c[0].scheme, "negotiate");
  EXPECT_EQ(c[0].Param("token68"), "abc+/12==");
  EXPECT_EQ(c[1].scheme, "basic");
  EXPECT_TRUE(c[1].params.empty());
}

TEST(WwwAuthenticate, ToleratesExtraWhitespaceAndCommas) {
  std::vector<Challenge> c;
  ASSERT_TRUE(ParseWwwAuthenticate(" ,  Bearer   realm = \"r\" ,, service=\"s\" , ", &c).ok());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].Param("realm"), "r");
  EXPECT_EQ(c[0].Param("service"), "s");
}

TEST(WwwAuthenticate, RejectsMalformedInput) {
  const std::vector<std::string> bad = {
      "",
      "   ",
      ",,,",
      "Bearer realm=\"unterminated",
      "Bearer realm=\"ends with backslash\\",
      "Bearer realm=\"a\" service=\"b\"",
      "Bearer realm=\"a\", realm=\"b\"",
      "=\"x\"",
      "\"quoted\" realm=x",
      "Bearer realm=\"a\x01\"",
      std::string("Bearer realm=\"a\0b\"", 17),
      "Bearer realm=a=b",
      "Bearer ;",
      "Bearer, =x",
      "Bearer realm=\"x\", , =",
      std::string(20000, 'a'),
  };
  for (const auto& h : bad) {
    std::vector<Challenge> c;
    Status st = ParseWwwAuthenticate(h, &c);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << "input: " << h.substr(0, 60);
    EXPECT_TRUE(c.empty()) << "input: " << h.substr(0, 60);
    EXPECT_NE(st.message().find("WWW-Authenticate"), std::string::npos);
  }
}

TEST(WwwAuthenticate, EmptyValueReadsAsToken68NotRealm) {
  // RFC 7235: "realm=" after a scheme is a token68, so no realm parameter is set.
  std::vector<Challenge> c;
  ASSERT_TRUE(ParseWwwAuthenticate("Bearer realm=", &c).ok());
  ASSERT_EQ(c.size(), 1u);
  EXPECT_EQ(c[0].Param("realm"), "");
  EXPECT_EQ(c[0].Param("token68"), "realm=");
  ASSERT_TRUE(ParseWwwAuthenticate("Bearer realm=\"a\",", &c).ok());  // trailing comma
  EXPECT_EQ(c[0].Param("realm"), "a");
}

TEST(WwwAuthenticate, NeverCrashesOnRandomBytes) {
  std::mt19937 rng(42);
  const std::string alphabet = "Bearer realm=\"\\,= \t";
  for (int i = 0; i < 20000; ++i) {
    std::string s;
    int n = rng() % 40;
    for (int j = 0; j < n; ++j) {
      s.push_back(rng() % 3 == 0 ? static_cast<char>(rng() % 256)
                                 : alphabet[rng() % alphabet.size()]);
    }
    std::vector<Challenge> c;
    Status st = ParseWwwAuthenticate(s, &c);
    if (st.ok()) {
      EXPECT_FALSE(c.empty());
      for (const auto& ch : c) EXPECT_FALSE(ch.scheme.empty());
    }
  }
}

// ---------------------------------------------------------------- helpers

int FreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = 0;
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  int port = ntohs(a.sin_port);
  close(fd);
  return port;
}

std::string ReadFile(const std::string& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::string Digest(const std::string& data) { return "sha256:" + Sha256Hex(data); }

// ---------------------------------------------------------------- fake-server tests

TEST(RegistryClientFake, BearerTokenFlowFetchesOnceAndCaches) {
  const std::string secret_pass = "s3cr3t-pass-777";
  const std::string basic = "a2lsbjpzM2NyM3QtcGFzcy03Nzc=";  // base64("kiln:s3cr3t-pass-777")
  std::atomic<int> token_requests{0};
  std::string seen_scope;
  std::mutex mu;
  int port = 0;
  FakeServer server([&](const http::request<http::string_body>& req) {
    std::string target(req.target());
    std::string auth(req[http::field::authorization]);
    if (target.rfind("/token", 0) == 0) {
      if (auth != "Basic " + basic) return Reply(401);
      ++token_requests;
      std::lock_guard<std::mutex> l(mu);
      seen_scope = target;
      return Reply(200, R"({"access_token":"tok123","expires_in":300})");
    }
    if (auth != "Bearer tok123") {
      auto r =
          Reply(401, R"({"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]})");
      r.set(http::field::www_authenticate,
            "Bearer realm=\"http://127.0.0.1:" + std::to_string(port) +
                "/token\",service=\"fake registry\",scope=\"repository:team/app:pull,push\"");
      return r;
    }
    return Reply(200);
  });
  port = server.port();
  fs::path dir = fs::temp_directory_path() / ("kiln-regfake-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string auth_file = (dir / "auth.json").string();
  std::ofstream(auth_file) << R"({"auths":{"127.0.0.1:)" << port << R"(":{"auth":")" << basic
                           << R"("}}})";
  RegistryClient client({server.url(), auth_file, std::nullopt});
  const std::string d = Digest("x");
  for (int i = 0; i < 3; ++i) {
    bool exists = false;
    Status st = client.BlobExists("team/app", d, &exists);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(exists);
  }
  EXPECT_EQ(token_requests.load(), 1);
  {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_NE(seen_scope.find("service=fake%20registry"), std::string::npos) << seen_scope;
    EXPECT_NE(seen_scope.find("scope=repository%3Ateam%2Fapp%3Apull%2Cpush"), std::string::npos)
        << seen_scope;
  }
  fs::remove_all(dir);
}

TEST(RegistryClientFake, TokenEndpointRejectionIsClearAndSecretFree) {
  int port = 0;
  FakeServer server([&](const http::request<http::string_body>& req) {
    std::string target(req.target());
    if (target.rfind("/token", 0) == 0) return Reply(401);
    auto r = Reply(401);
    r.set(http::field::www_authenticate,
          "Bearer realm=\"http://127.0.0.1:" + std::to_string(port) + "/token\",service=\"x\"");
    return r;
  });
  port = server.port();
  fs::path dir = fs::temp_directory_path() / ("kiln-regfake2-" + std::to_string(getpid()));
  fs::create_directories(dir);
  std::string auth_file = (dir / "auth.json").string();
  // base64("kiln:hunter2-topsecret")
  std::ofstream(auth_file) << R"({"auths":{"127.0.0.1:)" << port
                           << R"(":{"username":"kiln","password":"hunter2-topsecret"}}})";
  RegistryClient client({server.url(), auth_file, std::nullopt});
  bool exists = false;
  Status st = client.BlobExists("app", Digest("x"), &exists);
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("rejected the credential (401)"), std::string::npos);
  EXPECT_EQ(st.ToString().find("hunter2"), std::string::npos);
  EXPECT_EQ(st.ToString().find("a2lsbjpodW50ZXIy"), std::string::npos);
  fs::remove_all(dir);
}

TEST(RegistryClientFake, RetriesServerErrorsThenSucceeds) {
  std::atomic<int> calls{0};
  FakeServer server([&](const http::request<http::string_body>&) {
    return ++calls <= 2 ? Reply(503) : Reply(200);
  });
  RegistryClientOptions opts;
  opts.backoff_base = std::chrono::milliseconds(10);
  RegistryClient client({server.url(), std::nullopt, std::nullopt}, opts);
  Status st = client.Ping();
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(calls.load(), 3);
}

TEST(RegistryClientFake, GivesUpAfterAttemptsOn429) {
  std::atomic<int> calls{0};
  FakeServer server([&](const http::request<http::string_body>&) {
    ++calls;
    return Reply(429);
  });
  RegistryClientOptions opts;
  opts.backoff_base = std::chrono::milliseconds(5);
  RegistryClient client({server.url(), std::nullopt, std::nullopt}, opts);
  Status st = client.Ping();
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_NE(st.message().find("429"), std::string::npos) << st.message();
  EXPECT_EQ(calls.load(), 3);
}

TEST(RegistryClientFake, OversizedManifestIsResourceExhausted) {
  FakeServer server(
      [&](const http::request<http::string_body>&) { return Reply(200, std::string(5000, 'x')); });
  RegistryClientOptions opts;
  opts.max_manifest_bytes = 4096;
  RegistryClient client({server.url(), std::nullopt, std::nullopt}, opts);
  std::string body, mt, d;
  Status st = client.GetManifest("app", "latest", &body, &mt, &d);
  EXPECT_EQ(st.code(), Status::Code::kResourceExhausted) << st.ToString();
}

TEST(RegistryClientFake, ForbiddenIsPermissionDenied) {
  FakeServer server([&](const http::request<http::string_body>&) {
    return Reply(
        403,
        R"({"errors":[{"code":"DENIED","message":"requested access to the resource is denied"}]})");
  });
  RegistryClient client({server.url(), std::nullopt, std::nullopt});
  std::string d;
  Status st = client.PutManifest("app", "v1", kOciManifestType, "{}", &d);
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("denied (403)"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("DENIED"), std::string::npos) << st.message();
}

TEST(RegistryClientFake, GarbageChallengeIsClearError) {
  FakeServer server([&](const http::request<http::string_body>&) {
    auto r = Reply(401);
    r.set(http::field::www_authenticate, "Bearer realm=\"unterminated");
    return r;
  });
  RegistryClient client({server.url(), std::nullopt, std::nullopt});
  bool exists;
  Status st = client.BlobExists("app", Digest("x"), &exists);
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("bad 401 challenge"), std::string::npos);
}

TEST(RegistryClientFake, RelativeAndAbsoluteUploadLocations) {
  for (bool absolute : {false, true}) {
    int port = 0;
    std::string put_target;
    std::string put_body;
    FakeServer server([&](const http::request<http::string_body>& req) {
      if (req.method() == http::verb::post) {
        auto r = Reply(202);
        std::string loc = "/v2/app/blobs/uploads/abc?_state=xyz";
        if (absolute) loc = "http://127.0.0.1:" + std::to_string(port) + loc;
        r.set(http::field::location, loc);
        return r;
      }
      put_target = std::string(req.target());
      put_body = req.body();
      return Reply(201);
    });
    port = server.port();
    RegistryClient client({server.url(), std::nullopt, std::nullopt});
    Status st = client.PutBlob("app", Digest("hello"), "hello");
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_EQ(put_target,
              "/v2/app/blobs/uploads/abc?_state=xyz&digest=sha256%3A" + Sha256Hex("hello"));
    EXPECT_EQ(put_body, "hello");
  }
}

TEST(RegistryClient, RejectsBadInputsBeforeNetwork) {
  RegistryClient client({"http://127.0.0.1:1", std::nullopt, std::nullopt});
  bool exists;
  EXPECT_EQ(client.BlobExists("Bad/Repo", Digest("x"), &exists).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(client.BlobExists("app", "sha256:zz", &exists).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(client.PutBlob("app", Digest("x"), "y").code(), Status::Code::kInvalidArgument);
  std::string d;
  EXPECT_EQ(client.PutManifest("app", Digest("x"), kOciManifestType, "{}", &d).code(),
            Status::Code::kInvalidArgument);
  RegistryClient bad_url({"ftp://x", std::nullopt, std::nullopt});
  EXPECT_EQ(bad_url.Ping().code(), Status::Code::kInvalidArgument);
  RegistryClient bad_auth(
      {"http://127.0.0.1:1", std::string("/nonexistent/auth.json"), std::nullopt});
  EXPECT_EQ(bad_auth.Ping().code(), Status::Code::kFailedPrecondition);
}

TEST(RegistryClient, ClosedPortIsUnavailableUnreachable) {
  RegistryClientOptions opts;
  opts.backoff_base = std::chrono::milliseconds(5);
  int port = FreePort();
  RegistryClient client({"http://127.0.0.1:" + std::to_string(port), std::nullopt, std::nullopt},
                        opts);
  Status st = client.Ping();
  EXPECT_EQ(st.code(), Status::Code::kUnavailable);
  EXPECT_EQ(st.message(),
            "registry 127.0.0.1:" + std::to_string(port) + " unreachable: connection refused");
}

// ---------------------------------------------------------------- real docker-registry

struct RegistryProc {
  std::string dir, url, auth_file, ca_file;
  bool Start(bool tls) {
    dir = (fs::temp_directory_path() /
           ("kiln-registry-test-" + std::to_string(getpid()) + (tls ? "-tls" : "")))
              .string();
    fs::remove_all(dir);
    std::string cmd = std::string(KILN_REGISTRY_SCRIPT) + " start --dir " + dir + " --port " +
                      std::to_string(FreePort()) + (tls ? " --tls" : "") + " 2>&1";
    FILE* p = popen(cmd.c_str(), "r");
    if (!p) return false;
    char line[1024];
    std::map<std::string, std::string> kv;
    while (fgets(line, sizeof line, p)) {
      std::string l(line);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      auto eq = l.find('=');
      if (eq != std::string::npos) kv[l.substr(0, eq)] = l.substr(eq + 1);
    }
    int rc = pclose(p);
    url = kv["url"];
    auth_file = kv["auth_file"];
    ca_file = kv["ca_file"];
    return rc == 0 && !url.empty();
  }
  void Stop() {
    if (dir.empty()) return;
    std::string cmd = std::string(KILN_REGISTRY_SCRIPT) + " stop --dir " + dir + " >/dev/null 2>&1";
    (void)std::system(cmd.c_str());
    fs::remove_all(dir);
  }
};

class RealRegistry : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    plain_ = new RegistryProc;
    tls_ = new RegistryProc;
    ASSERT_TRUE(plain_->Start(false));
    ASSERT_TRUE(tls_->Start(true));
  }
  static void TearDownTestSuite() {
    plain_->Stop();
    tls_->Stop();
    delete plain_;
    delete tls_;
  }
  static RegistryProc* plain_;
  static RegistryProc* tls_;
};
RegistryProc* RealRegistry::plain_ = nullptr;
RegistryProc* RealRegistry::tls_ = nullptr;

// Pushes config + layer + manifest to `repo:tag`; returns the manifest digest.
std::string PushImage(RegistryClient& c, const std::string& repo, const std::string& tag,
                      const std::string& layer, std::string* manifest_out = nullptr) {
  const std::string config =
      R"({"architecture":"amd64","os":"linux","rootfs":{"type":"layers","diff_ids":[]},"config":{}})";
  bool exists = true;
  EXPECT_TRUE(c.BlobExists(repo, Digest(layer), &exists).ok());
  EXPECT_FALSE(exists);
  Status st = c.PutBlob(repo, Digest(layer), layer);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(c.BlobExists(repo, Digest(layer), &exists).ok());
  EXPECT_TRUE(exists);
  st = c.PutBlob(repo, Digest(config), config);
  EXPECT_TRUE(st.ok()) << st.ToString();
  std::string manifest =
      std::string(R"({"schemaVersion":2,"mediaType":")") + kOciManifestType +
      R"(","config":{"mediaType":"application/vnd.oci.image.config.v1+json","digest":")" +
      Digest(config) + R"(","size":)" + std::to_string(config.size()) +
      R"(},"layers":[{"mediaType":"application/vnd.oci.image.layer.v1.tar+gzip","digest":")" +
      Digest(layer) + R"(","size":)" + std::to_string(layer.size()) + "}]}";
  std::string digest;
  st = c.PutManifest(repo, tag, kOciManifestType, manifest, &digest);
  EXPECT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(digest, Digest(manifest));
  if (manifest_out) *manifest_out = manifest;
  return digest;
}

TEST_F(RealRegistry, PushPullRoundTrip) {
  RegistryClient c({plain_->url, plain_->auth_file, std::nullopt});
  ASSERT_TRUE(c.Ping().ok());
  std::string layer = "layer bytes " + std::to_string(getpid()) + std::string(100000, 'z');
  std::string manifest;
  std::string digest = PushImage(c, "kiln/app", "cand-1", layer, &manifest);

  std::string body, mt, got_digest;
  Status st = c.GetManifest("kiln/app", "cand-1", &body, &mt, &got_digest);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got_digest, digest);
  EXPECT_EQ(body, manifest);
  EXPECT_EQ(mt, kOciManifestType);
  st = c.GetManifest("kiln/app", digest, &body, &mt, &got_digest);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got_digest, digest);

  std::string data;
  st = c.GetBlob("kiln/app", Digest(layer), &data);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(data, layer);

  st = c.GetManifest("kiln/app", "no-such-tag", &body, &mt, &got_digest);
  EXPECT_EQ(st.code(), Status::Code::kNotFound);
  EXPECT_NE(st.message().find("manifest unknown (404)"), std::string::npos) << st.message();
  st = c.GetBlob("kiln/app", Digest("absent"), &data);
  EXPECT_EQ(st.code(), Status::Code::kNotFound) << st.ToString();

  // The real password never shows up in messages.
  std::string password = ReadFile(plain_->dir + "/password");
  while (!password.empty() && password.back() == '\n') password.pop_back();
  ASSERT_FALSE(password.empty());
  EXPECT_EQ(st.ToString().find(password), std::string::npos);
}

TEST_F(RealRegistry, MountBlobAcrossRepos) {
  RegistryClient c({plain_->url, plain_->auth_file, std::nullopt});
  std::string layer = "mount me " + std::to_string(getpid());
  ASSERT_TRUE(c.PutBlob("kiln/src", Digest(layer), layer).ok());
  bool mounted = false;
  Status st = c.MountBlob("kiln/dst", Digest(layer), "kiln/src", &mounted);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(mounted);
  bool exists = false;
  ASSERT_TRUE(c.BlobExists("kiln/dst", Digest(layer), &exists).ok());
  EXPECT_TRUE(exists);
  st = c.MountBlob("kiln/dst2", Digest("never pushed"), "kiln/src", &mounted);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(mounted);
}

TEST_F(RealRegistry, ConcurrentPushesFromManyThreads) {
  RegistryClient c({plain_->url, plain_->auth_file, std::nullopt});
  std::vector<std::thread> threads;
  std::atomic<int> ok{0};
  for (int i = 0; i < 8; ++i) {
    threads.emplace_back([&, i] {
      std::string blob = "blob " + std::to_string(i) + " " + std::to_string(getpid());
      if (c.PutBlob("kiln/par", Digest(blob), blob).ok()) ++ok;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ok.load(), 8);
}

TEST_F(RealRegistry, WrongPasswordIsPermissionDeniedWithoutSecret) {
  const std::string wrong = "WrongPassword-9f8e7d";
  std::string auth_file = plain_->dir + "/wrong.json";
  std::string host = plain_->url.substr(strlen("http://"));
  std::ofstream(auth_file) << R"({"auths":{")" << host << R"(":{"username":"kiln","password":")"
                           << wrong << R"("}}})";
  RegistryClient c({plain_->url, auth_file, std::nullopt});
  bool exists;
  Status st = c.BlobExists("kiln/app", Digest("x"), &exists);
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied) << st.ToString();
  EXPECT_NE(st.message().find("rejected the credential (401) for kiln/app"), std::string::npos)
      << st.message();
  EXPECT_EQ(st.ToString().find(wrong), std::string::npos);
  EXPECT_EQ(st.ToString().find("V3JvbmdQYXNzd29yZC05ZjhlN2Q"), std::string::npos);

  RegistryClient anon({plain_->url, std::nullopt, std::nullopt});
  st = anon.BlobExists("kiln/app", Digest("x"), &exists);
  EXPECT_EQ(st.code(), Status::Code::kPermissionDenied);
  EXPECT_NE(st.message().find("none is configured"), std::string::npos) << st.message();
}

TEST_F(RealRegistry, HttpsWithCaWorksAndWithoutCaFailsVerification) {
  RegistryClient c({tls_->url, tls_->auth_file, tls_->ca_file});
  Status st = c.Ping();
  ASSERT_TRUE(st.ok()) << st.ToString();
  std::string layer = "tls layer " + std::to_string(getpid());
  std::string digest = PushImage(c, "kiln/tls", "t1", layer);
  std::string body, mt, got;
  st = c.GetManifest("kiln/tls", "t1", &body, &mt, &got);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_EQ(got, digest);

  RegistryClient no_ca({tls_->url, tls_->auth_file, std::nullopt});
  st = no_ca.Ping();
  EXPECT_EQ(st.code(), Status::Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("TLS handshake failed"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("certificate"), std::string::npos) << st.message();

  // Plain HTTP against the TLS port is a clear failure, not a hang.
  std::string http_url = "http://" + tls_->url.substr(strlen("https://"));
  RegistryClientOptions opts;
  opts.backoff_base = std::chrono::milliseconds(5);
  RegistryClient wrong_scheme({http_url, std::nullopt, std::nullopt}, opts);
  st = wrong_scheme.Ping();
  EXPECT_FALSE(st.ok());
}

// Two config entries for one registry with different credentials get different clients (and
// token caches); the same entry always gets the same client.
TEST(RegistryClientsTest, OneClientPerEndpointNotPerUrl) {
  RegistryClients clients;
  RegistryEndpoint right{"http://127.0.0.1:5000", std::string("/a/auth.json"), std::nullopt};
  RegistryEndpoint wrong{"http://127.0.0.1:5000", std::string("/b/auth.json"), std::nullopt};
  RegistryEndpoint other_ca{"http://127.0.0.1:5000", std::string("/a/auth.json"),
                            std::string("/ca.pem")};
  RegistryClient* a = clients.Get(right);
  EXPECT_EQ(clients.Get(right), a);
  EXPECT_NE(clients.Get(wrong), a);
  EXPECT_NE(clients.Get(other_ca), a);
  EXPECT_NE(clients.Get(RegistryEndpoint{"http://127.0.0.1:5000", std::nullopt, std::nullopt}), a);
}

}  // namespace
}  // namespace kiln
