#include "transport/git_http.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <boost/asio.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <sstream>
#include <thread>

#include "common/names.h"
#include "common/process_test_util.h"
#include "common/sha256.h"
#include "transport/fake_tool_backend.h"
#include "workspace/git_repo.h"
#include "workspace/git_test_util.h"

namespace kiln {
namespace {

namespace fs = std::filesystem;
namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using kiln::testing::ReadFile;
using kiln::testing::TempDir;
using kiln::testing::WriteFile;

// ---------------------------------------------------------------------------------------------
// Pure parts

TEST(ParseGitHttpRouteTest, AcceptsTheThreeSmartEndpoints) {
  auto d = ParseGitHttpRoute("GET", "/git/demo.git/info/refs", "service=git-upload-pack");
  ASSERT_TRUE(d.ok()) << d.message;
  EXPECT_EQ(d.route.domain, "demo");
  EXPECT_TRUE(d.route.advertisement);
  EXPECT_EQ(d.route.path_info, "/repo.git/info/refs");
  EXPECT_FALSE(d.route.is_push());

  d = ParseGitHttpRoute("GET", "/git/my-dom.1.git/info/refs", "service=git-receive-pack");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.route.domain, "my-dom.1");
  EXPECT_EQ(d.route.service, GitHttpRoute::Service::kReceivePack);
  EXPECT_FALSE(d.route.is_push());

  d = ParseGitHttpRoute("POST", "/git/demo.git/git-receive-pack", "");
  ASSERT_TRUE(d.ok());
  EXPECT_TRUE(d.route.is_push());
  EXPECT_EQ(d.route.path_info, "/repo.git/git-receive-pack");

  d = ParseGitHttpRoute("POST", "/git/demo.git/git-upload-pack", "");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d.route.service, GitHttpRoute::Service::kUploadPack);
}

TEST(ParseGitHttpRouteTest, RefusesTraversalAndEverythingElse) {
  for (const char* path : {
           "/git/../x",
           "/git/../x.git/info/refs",
           "/git/a/../../b.git/info/refs",
           "/git/%2e%2e/b.git/info/refs",
           "/git/%2E%2E%2Fb.git/info/refs",
           "/git/demo%2egit/info/refs",
           "/git/..git/info/refs",
           "/git/.git/info/refs",
           "/git/.hidden.git/info/refs",
           "/git/demo.git/../other.git/info/refs",
           "/git/demo.git/info/refs/../../x",
           "/git/demo.git//info/refs",
           "/git/demo.git/HEAD",
           "/git/demo.git/objects/info/packs",
           "/git/demo.git/config",
           "/git/demo/info/refs",
           "/git/a/b.git/info/refs",
           "/git/demo.git\\info\\refs",
           "/gitx/demo.git/info/refs",
       }) {
    auto d = ParseGitHttpRoute("GET", path, "service=git-upload-pack");
    EXPECT_EQ(d.status, 404) << path;
  }
  EXPECT_EQ(ParseGitHttpRoute("GET", "/git/demo.git/info/refs", "").status, 400);
  EXPECT_EQ(ParseGitHttpRoute("GET", "/git/demo.git/info/refs", "service=git-foo").status, 400);
  EXPECT_EQ(ParseGitHttpRoute("POST", "/git/demo.git/info/refs", "service=git-upload-pack").status,
            405);
  EXPECT_EQ(ParseGitHttpRoute("GET", "/git/demo.git/git-receive-pack", "").status, 405);
}

TEST(CgiHeaderParserTest, ParsesStatusTypeAndKeepsBodyAcrossFeeds) {
  CgiHeaderParser p;
  std::string out =
      "Status: 403 Forbidden\r\nContent-Type: text/plain\r\nContent-Length: 5\r\n"
      "Cache-Control: no-cache\r\n\r\nhello";
  EXPECT_EQ(p.Feed(out.data(), 10), CgiHeaderParser::State::kNeedMore);
  EXPECT_EQ(p.Feed(out.data() + 10, out.size() - 10 - 2), CgiHeaderParser::State::kDone);
  EXPECT_EQ(p.Feed(out.data() + out.size() - 2, 2), CgiHeaderParser::State::kDone);
  EXPECT_EQ(p.status(), 403);
  EXPECT_EQ(p.content_type(), "text/plain");
  ASSERT_EQ(p.headers().size(), 1u);  // Content-Length dropped: the server chunks the body
  EXPECT_EQ(p.headers()[0].first, "Cache-Control");
  EXPECT_EQ(p.TakeBody(), "hello");

  CgiHeaderParser lf;
  std::string s = "Content-Type: application/x-git-upload-pack-advertisement\n\n001e#";
  EXPECT_EQ(lf.Feed(s.data(), s.size()), CgiHeaderParser::State::kDone);
  EXPECT_EQ(lf.status(), 200);
  EXPECT_EQ(lf.TakeBody(), "001e#");

  // The empty line may be split between two feeds.
  CgiHeaderParser split;
  std::string a = "Status: 200 OK\r\n\r", b = "\nbody";
  EXPECT_EQ(split.Feed(a.data(), a.size()), CgiHeaderParser::State::kNeedMore);
  EXPECT_EQ(split.Feed(b.data(), b.size()), CgiHeaderParser::State::kDone);
  EXPECT_EQ(split.TakeBody(), "body");

  CgiHeaderParser bad;
  std::string g = "not a header\n\n";
  EXPECT_EQ(bad.Feed(g.data(), g.size()), CgiHeaderParser::State::kError);
  CgiHeaderParser bad_status;
  std::string st = "Status: abc\n\n";
  EXPECT_EQ(bad_status.Feed(st.data(), st.size()), CgiHeaderParser::State::kError);
}

TEST(BuildGitCgiEnvTest, BuildsTheCgiEnvironmentFromScratch) {
  ::setenv("KILN_TEST_SECRET", "leak", 1);
  GitHttpRoute route = ParseGitHttpRoute("POST", "/git/demo.git/git-receive-pack", "").route;
  HttpRequest req;
  req.method = "POST";
  req.body = "0000";
  req.headers = {{"content-type", "application/x-git-receive-pack-request"},
                 {"content-encoding", "gzip"},
                 {"git-protocol", "version=2"},
                 {"authorization", "Bearer secret-token"}};
  GitCgiSettings s{"/state/domains/demo", "/state/domains/demo/repo.git", "/state/home", 1000};
  std::vector<std::string> env = BuildGitCgiEnv(route, req, s);
  auto has = [&](const std::string& kv) {
    return std::find(env.begin(), env.end(), kv) != env.end();
  };
  EXPECT_TRUE(has("GIT_PROJECT_ROOT=/state/domains/demo"));
  EXPECT_TRUE(has("PATH_INFO=/repo.git/git-receive-pack"));
  EXPECT_TRUE(has("REQUEST_METHOD=POST"));
  EXPECT_TRUE(has("QUERY_STRING="));
  EXPECT_TRUE(has("CONTENT_LENGTH=4"));
  EXPECT_TRUE(has("CONTENT_TYPE=application/x-git-receive-pack-request"));
  EXPECT_TRUE(has("HTTP_CONTENT_ENCODING=gzip"));
  EXPECT_TRUE(has("HTTP_GIT_PROTOCOL=version=2"));
  EXPECT_TRUE(has("REMOTE_USER=demo"));
  EXPECT_TRUE(has("GIT_HTTP_EXPORT_ALL=1"));
  EXPECT_TRUE(has("GIT_CONFIG_NOSYSTEM=1"));
  EXPECT_TRUE(has("HOME=/state/home"));
  EXPECT_TRUE(has("PATH=/usr/local/bin:/usr/bin:/bin"));
  std::string joined;
  for (const auto& e : env) joined += e + "\n";
  EXPECT_NE(joined.find("=receive.fsckObjects\n"), std::string::npos);
  EXPECT_NE(joined.find("=receive.maxInputSize\n"), std::string::npos);
  EXPECT_NE(joined.find("=1000\n"), std::string::npos);
  EXPECT_EQ(joined.find("secret-token"), std::string::npos);
  EXPECT_EQ(joined.find("KILN_TEST_SECRET"), std::string::npos);

  // A hostile header value is not passed on.
  req.headers["git-protocol"] = "version=2\nGIT_DIR=/etc";
  req.headers["content-encoding"] = "gzip; x=$(id)";
  env = BuildGitCgiEnv(route, req, s);
  joined.clear();
  for (const auto& e : env) joined += e + "\n";
  EXPECT_EQ(joined.find("HTTP_GIT_PROTOCOL"), std::string::npos);
  EXPECT_EQ(joined.find("HTTP_CONTENT_ENCODING"), std::string::npos);
}

// Runs the generated hook with `stdin_data`; returns its exit code, stderr in *err.
int RunHook(const std::string& git_dir, const std::string& stdin_data, std::string* err) {
  std::string hook = git_dir + "/pre-receive";
  std::string in = git_dir + "/stdin", errf = git_dir + "/stderr";
  WriteFile(in, stdin_data);
  pid_t pid = fork();
  if (pid == 0) {
    int fd = ::open(in.c_str(), O_RDONLY);
    int efd = ::open(errf.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 0);
    dup2(efd, 2);
    ::setenv("GIT_DIR", git_dir.c_str(), 1);
    execl("/bin/sh", "sh", hook.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  *err = ReadFile(errf);
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST(PreReceiveHookTest, AcceptsExactlyTheBranchesValidateRefAccepts) {
  TempDir tmp;
  WriteFile(tmp.path() + "/pre-receive", PreReceiveHookScript(), true);
  const std::string z(40, '0'), c(40, 'a');
  std::vector<std::string> names = {
      "main",
      "feature/x",
      "a/b/c",
      "v1.2",
      "x_y-z",
      "A9",
      "9a",
      "HEAD",
      "",
      "_x",
      "-x",
      ".x",
      "x.",
      "x.lock",
      "x..y",
      "a//b",
      "a/",
      "/a",
      "a/.b",
      "a/_b",
      "feat@1",
      "a b",
      "a~1",
      "x$y",
      "a;b",
      "ok.lock.x",
      std::string(63, 'a'),
      std::string(64, 'a'),
      std::string(63, 'a') + "/" + std::string(63, 'b') + "/" + std::string(61, 'c'),
      std::string(63, 'a') + "/" + std::string(63, 'b') + "/" + std::string(62, 'c'),
      "caf\xc3\xa9"};
  for (const std::string& name : names) {
    std::string err;
    int rc = RunHook(tmp.path(), z + " " + c + " refs/heads/" + name + "\n", &err);
    bool want = ValidateRef("refs/heads/" + name).ok() && name != "HEAD";
    EXPECT_EQ(rc == 0, want) << "branch '" << name << "': " << err;
    if (!want) {
      EXPECT_NE(err.find("kiln: refusing refs/heads/"), std::string::npos) << err;
    }
  }
  std::string err;
  EXPECT_EQ(RunHook(tmp.path(), z + " " + c + " refs/tags/v1\n", &err), 1);
  EXPECT_NE(err.find("only branches"), std::string::npos);
  EXPECT_EQ(RunHook(tmp.path(), z + " " + c + " refs/notes/x\n", &err), 1);
  // Deleting: refused only for busy branches.
  EXPECT_EQ(RunHook(tmp.path(), c + " " + z + " refs/heads/main\n", &err), 0);
  WriteFile(tmp.path() + "/kiln-busy-branches", "other\nmain\n");
  EXPECT_EQ(RunHook(tmp.path(), c + " " + z + " refs/heads/main\n", &err), 1);
  EXPECT_NE(err.find("a build of it is running"), std::string::npos);
  EXPECT_EQ(RunHook(tmp.path(), c + " " + z + " refs/heads/mai\n", &err), 0);
  EXPECT_EQ(RunHook(tmp.path(), z + " " + c + " refs/heads/main\n", &err), 0);  // update is fine
}

// ---------------------------------------------------------------------------------------------
// End to end: the real git client against a real HttpServer on 127.0.0.1.

// --- issue 18: build on push ---
std::string Pkt(const std::string& payload) {
  char len[5];
  std::snprintf(len, sizeof(len), "%04zx", payload.size() + 4);
  return len + payload;
}

TEST(ParseReceivePackCommandsTest, ReadsTheRefUpdatesBeforeTheFlush) {
  const std::string a(40, 'a'), b(40, 'b'), z(40, '0');
  std::string body = Pkt(z + " " + a + " refs/heads/c1" + std::string(1, '\0') +
                         " report-status side-band-64k\n") +
                     Pkt("shallow " + b + "\n") + Pkt(a + " " + b + " refs/heads/c2\n") +
                     Pkt(b + " " + z + " refs/heads/gone\n") + Pkt("garbage line\n") + "0000" +
                     "PACK" + std::string(10, '\x01');
  auto u = ParseReceivePackCommands(body);
  ASSERT_EQ(u.size(), 3u);
  EXPECT_EQ(u[0].ref, "refs/heads/c1");
  EXPECT_EQ(u[0].old_id, z);
  EXPECT_EQ(u[0].new_id, a);
  EXPECT_EQ(u[1].ref, "refs/heads/c2");
  EXPECT_EQ(u[1].new_id, b);
  EXPECT_EQ(u[2].new_id, z);  // a deletion, listed as asked
}

TEST(ParseReceivePackCommandsTest, AnythingElseGivesNothing) {
  EXPECT_TRUE(ParseReceivePackCommands("").empty());
  EXPECT_TRUE(ParseReceivePackCommands("\x1f\x8b\x08 compressed").empty());
  EXPECT_TRUE(ParseReceivePackCommands("00ff" + std::string(10, 'x')).empty());  // cut short
  EXPECT_TRUE(ParseReceivePackCommands(Pkt("short refs/heads/x\n")).empty());
}
// --- end issue 18 ---

struct RawResponse {
  int status = 0;
  std::map<std::string, std::string> headers;
  std::string body;
};

RawResponse RawRequest(uint16_t port, http::verb method, const std::string& target,
                       std::map<std::string, std::string> headers, const std::string& body = "") {
  net::io_context ioc;
  beast::tcp_stream stream(ioc);
  stream.connect(net::ip::tcp::endpoint(net::ip::make_address("127.0.0.1"), port));
  http::request<http::string_body> req(method, target, 11);
  req.set(http::field::host, "127.0.0.1");
  for (const auto& [k, v] : headers) req.set(k, v);
  req.body() = body;
  req.prepare_payload();
  http::write(stream, req);
  beast::flat_buffer buffer;
  http::response_parser<http::string_body> parser;
  parser.body_limit(64 << 20);
  http::read(stream, buffer, parser);
  RawResponse r;
  r.status = static_cast<int>(parser.get().result_int());
  for (const auto& f : parser.get()) {
    std::string name(f.name_string());
    std::transform(name.begin(), name.end(), name.begin(), ::tolower);
    r.headers[name] = std::string(f.value());
  }
  r.body = parser.get().body();
  return r;
}

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (auto& c : s) c = static_cast<char>(rng());
  return s;
}

// A TCP proxy that forwards at most `budget` bytes from clients to the server, then stalls
// (used to interrupt a push mid-body). Closes everything on destruction.
class StallingProxy {
 public:
  StallingProxy(uint16_t upstream, size_t budget) : upstream_(upstream), budget_(budget) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    ::listen(listen_fd_, 8);
    socklen_t len = sizeof(a);
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    accept_thread_ = std::thread([this] { AcceptLoop(); });
  }
  ~StallingProxy() {
    stop_ = true;
    ::shutdown(listen_fd_, SHUT_RDWR);
    accept_thread_.join();
    for (auto& t : pumps_) t.join();
    ::close(listen_fd_);
  }
  uint16_t port() const { return port_; }
  size_t forwarded() const { return forwarded_; }

 private:
  void AcceptLoop() {
    while (!stop_) {
      int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) return;
      int s = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      a.sin_port = htons(upstream_);
      ::connect(s, reinterpret_cast<sockaddr*>(&a), sizeof(a));
      pumps_.emplace_back([this, c, s] { Pump(c, s); });
    }
  }
  void Pump(int client, int server) {
    char buf[16384];
    while (!stop_) {
      bool may_read_client = forwarded_ < budget_;
      pollfd p[2] = {{client, static_cast<short>(may_read_client ? POLLIN : 0), 0},
                     {server, POLLIN, 0}};
      if (::poll(p, 2, 50) <= 0) continue;
      if (p[0].revents & (POLLIN | POLLHUP | POLLERR)) {
        size_t want = std::min(sizeof(buf), budget_ - forwarded_);
        ssize_t n = ::read(client, buf, want);
        if (n <= 0) break;
        forwarded_ += static_cast<size_t>(n);
        if (::write(server, buf, static_cast<size_t>(n)) != n) break;
      }
      if (p[1].revents & (POLLIN | POLLHUP | POLLERR)) {
        ssize_t n = ::read(server, buf, sizeof(buf));
        if (n <= 0) break;
        if (::send(client, buf, static_cast<size_t>(n), MSG_NOSIGNAL) != n) break;
      }
    }
    ::close(client);
    ::close(server);
  }

  const uint16_t upstream_;
  const size_t budget_;
  std::atomic<size_t> forwarded_{0};
  std::atomic<bool> stop_{false};
  int listen_fd_ = -1;
  uint16_t port_ = 0;
  std::thread accept_thread_;
  std::vector<std::thread> pumps_;  // touched by the accept thread only until destruction
};

class GitHttpE2ETest : public ::testing::Test {
 protected:
  GitHttpE2ETest() {
    for (const char* name : {"demo", "other"}) {
      DomainConfig d;
      d.name = name;
      d.token_sha256 = {Sha256Hex(std::string(name) + "-token")};
      config_.domains[name] = d;
    }
    config_.operator_token_sha256 = {Sha256Hex("op-token")};
    config_.server.state_dir = tmp_.path() + "/state";
    options_.state_dir = config_.server.state_dir;
    fs::create_directories(tmp_.path() + "/client-home");
  }
  ~GitHttpE2ETest() override {
    server_.reset();  // the server stops before the handler it routes to
    handler_.reset();
  }

  void Start() {
    handler_ = std::make_unique<GitHttpHandler>(config_, options_);
    HttpServerOptions o = server_options_;
    o.listen = "127.0.0.1:0";
    server_ = std::make_unique<HttpServer>(config_, backend_, o);
    handler_->Register(*server_);
    Status s = server_->Start();
    ASSERT_TRUE(s.ok()) << s.ToString();
  }

  std::string Url(const std::string& domain = "demo", uint16_t port = 0) const {
    return "http://127.0.0.1:" + std::to_string(port ? port : server_->port()) + "/git/" + domain +
           ".git";
  }
  std::string RepoDir(const std::string& domain = "demo") const {
    return config_.server.state_dir + "/domains/" + domain + "/repo.git";
  }

  // Runs the git client; the token travels in the environment (GIT_CONFIG_*), never argv.
  GitResult Git(const std::string& cwd, std::vector<std::string> args,
                const std::string& token = "demo-token", int timeout_ms = 60000) {
    GitCommand cmd;
    cmd.args = {"-c", "user.name=Agent",      "-c", "user.email=agent@kiln.invalid",
                "-c", "commit.gpgSign=false", "-c", "init.defaultBranch=main"};
    cmd.args.insert(cmd.args.end(), args.begin(), args.end());
    cmd.cwd = cwd;
    cmd.home = tmp_.path() + "/client-home";
    cmd.timeout_ms = timeout_ms;
    cmd.env = {{"GIT_PROTOCOL_FROM_USER", "1"}};  // the benchmark's local push uses file://
    if (!token.empty()) {
      cmd.env = {{"GIT_PROTOCOL_FROM_USER", "1"},
                 {"GIT_CONFIG_COUNT", "1"},
                 {"GIT_CONFIG_KEY_0", "http.extraHeader"},
                 {"GIT_CONFIG_VALUE_0", "Authorization: Bearer " + token}};
    }
    GitResult r;
    Status s = DefaultGitRunner()->Run(cmd, &r);
    if (!s.ok()) r.err += "\n[runner: " + s.ToString() + "]";
    return r;
  }
  std::string GitOk(const std::string& cwd, std::vector<std::string> args,
                    const std::string& token = "demo-token") {
    GitResult r = Git(cwd, args, token);
    EXPECT_EQ(r.exit_code, 0) << "git " << args[0] << ": " << r.err;
    return r.out;
  }

  // A fresh clone of the demo repository in <tmp>/<name>.
  std::string Clone(const std::string& name, const std::string& token = "demo-token") {
    std::string dir = tmp_.path() + "/" + name;
    GitOk(tmp_.path(), {"clone", "-q", Url(), dir}, token);
    return dir;
  }
  std::string Commit(const std::string& dir, const std::string& file, const std::string& text) {
    WriteFile(dir + "/" + file, text);
    GitOk(dir, {"add", "-A"});
    GitOk(dir, {"commit", "-q", "-m", "change " + file});
    std::string head = GitOk(dir, {"rev-parse", "HEAD"});
    return head.substr(0, head.find('\n'));
  }

  // Branches of the bare repository on disk (empty when it does not exist).
  std::map<std::string, std::string> ServerBranches(const std::string& domain = "demo") {
    std::map<std::string, std::string> out;
    if (!fs::exists(RepoDir(domain) + "/HEAD")) return out;
    std::unique_ptr<GitRepo> repo;
    EXPECT_TRUE(GitRepo::Open(RepoDir(domain), &repo).ok());
    std::vector<std::pair<std::string, std::string>> branches;
    EXPECT_TRUE(repo->ListBranches(&branches).ok());
    for (auto& [b, c] : branches) out[b] = c;
    return out;
  }
  std::vector<std::string> ServerRefs(const std::string& domain = "demo") {
    GitResult r = Git(tmp_.path(),
                      {"--git-dir=" + RepoDir(domain), "for-each-ref", "--format=%(refname)"}, "");
    std::vector<std::string> refs;
    std::istringstream in(r.out);
    for (std::string l; std::getline(in, l);) refs.push_back(l);
    return refs;
  }
  void ExpectFsckClean(const std::string& domain = "demo") {
    GitResult r = Git(
        tmp_.path(),
        {"--git-dir=" + RepoDir(domain), "fsck", "--full", "--no-progress", "--no-dangling"}, "");
    EXPECT_EQ(r.exit_code, 0) << r.err << r.out;
    // No stale ref lock either: a later push must be able to update refs.
    for (auto& e : fs::recursive_directory_iterator(RepoDir(domain) + "/refs"))
      EXPECT_NE(e.path().extension(), ".lock") << e.path();
  }

  TempDir tmp_;
  Config config_;
  GitHttpHandler::Options options_;
  HttpServerOptions server_options_;
  FakeToolBackend backend_;
  std::unique_ptr<GitHttpHandler> handler_;
  std::unique_ptr<HttpServer> server_;
};

TEST_F(GitHttpE2ETest, CloneCommitPushAndFetchWithTheToken) {
  Start();
  std::string a = Clone("a");  // empty repository: created on first use
  std::string c1 = Commit(a, "main.go", "package main\n");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  EXPECT_EQ(ServerBranches()["main"], c1);
  EXPECT_TRUE(fs::exists(RepoDir() + "/hooks/pre-receive"));

  std::string b = Clone("b");
  EXPECT_EQ(ReadFile(b + "/main.go"), "package main\n");
  std::string c2 = Commit(b, "extra.txt", "x\n");
  GitOk(b, {"push", "-q", "origin", "main:feature/one"});
  GitOk(a, {"fetch", "-q", "origin"});
  EXPECT_NE(GitOk(a, {"rev-parse", "origin/feature/one"}).find(c2), std::string::npos);
  ExpectFsckClean();
}

TEST_F(GitHttpE2ETest, MissingOrWrongTokenIsRefusedAndNothingIsWritten) {
  Start();
  std::string work = tmp_.path() + "/w";
  fs::create_directories(work);
  GitOk(work, {"init", "-q"});
  Commit(work, "f", "1");
  for (const std::string token : {"", "wrong-token", "op-token"}) {
    GitResult r = Git(work, {"push", Url(), "HEAD:refs/heads/main"}, token);
    EXPECT_NE(r.exit_code, 0) << token;
    EXPECT_TRUE(r.err.find("401") != std::string::npos || r.err.find("403") != std::string::npos ||
                r.err.find("Authentication failed") != std::string::npos ||
                r.err.find("could not read Username") != std::string::npos)  // after a 401
        << r.err;
    GitResult c = Git(tmp_.path(), {"clone", "-q", Url(), tmp_.path() + "/nc"}, token);
    EXPECT_NE(c.exit_code, 0);
  }
  EXPECT_TRUE(ServerBranches().empty());

  auto r = RawRequest(server_->port(), http::verb::get,
                      "/git/demo.git/info/refs?service=git-receive-pack", {});
  EXPECT_EQ(r.status, 401);
  EXPECT_EQ(r.headers["www-authenticate"].rfind("Bearer", 0), 0u);
  r = RawRequest(server_->port(), http::verb::get,
                 "/git/demo.git/info/refs?service=git-receive-pack",
                 {{"Authorization", "Bearer op-token"}});
  EXPECT_EQ(r.status, 403);
}

// Issue 20: the pool workers' credential fetches any domain's commits and does nothing else.
TEST_F(GitHttpE2ETest, WorkerCredentialFetchesEveryDomainButNeverPushes) {
  config_.scheduler.worker_token_sha256 = {Sha256Hex("worker-token")};
  Start();
  for (const std::string dom : {"demo", "other"}) {
    std::string w = tmp_.path() + "/push-" + dom;
    fs::create_directories(w);
    GitOk(w, {"init", "-q"});
    std::string c = Commit(w, "f", dom);
    GitOk(w, {"push", "-q", Url(dom), "HEAD:refs/heads/main"}, dom + "-token");
    // A worker's incremental fetch into its own bare repository.
    std::string bare = tmp_.path() + "/worker-" + dom + ".git";
    GitOk(tmp_.path(), {"init", "-q", "--bare", bare});
    GitOk(bare, {"fetch", "-q", Url(dom), "+refs/heads/main:refs/heads/main"}, "worker-token");
    EXPECT_NE(GitOk(bare, {"rev-parse", "main"}).find(c), std::string::npos) << dom;
    // ... but no push, not even a new branch.
    GitResult r = Git(w, {"push", Url(dom), "HEAD:refs/heads/evil"}, "worker-token");
    EXPECT_NE(r.exit_code, 0) << dom;
    EXPECT_EQ(ServerBranches(dom).count("evil"), 0u);
  }
  auto r = RawRequest(server_->port(), http::verb::get,
                      "/git/demo.git/info/refs?service=git-receive-pack",
                      {{"Authorization", "Bearer worker-token"}});
  EXPECT_EQ(r.status, 401);
  r = RawRequest(server_->port(), http::verb::get,
                 "/git/demo.git/info/refs?service=git-upload-pack",
                 {{"Authorization", "Bearer worker-token"}});
  EXPECT_EQ(r.status, 200);
  r = RawRequest(server_->port(), http::verb::get,
                 "/git/demo.git/info/refs?service=git-upload-pack",
                 {{"Authorization", "Bearer worker-tokex"}});
  EXPECT_EQ(r.status, 401);
}

TEST_F(GitHttpE2ETest, AnotherDomainsRepositoryLooksLikeAMissingOne) {
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});

  // other's token against demo's repository: refused, demo unchanged.
  std::string o = tmp_.path() + "/o";
  fs::create_directories(o);
  GitOk(o, {"init", "-q"});
  Commit(o, "evil", "x");
  GitResult r = Git(o, {"push", Url("demo"), "HEAD:refs/heads/main"}, "other-token");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(ServerBranches()["main"], c1);
  r = Git(tmp_.path(), {"clone", "-q", Url("demo"), tmp_.path() + "/steal"}, "other-token");
  EXPECT_NE(r.exit_code, 0);
  EXPECT_FALSE(fs::exists(tmp_.path() + "/steal/f"));

  auto other = RawRequest(server_->port(), http::verb::get,
                          "/git/demo.git/info/refs?service=git-upload-pack",
                          {{"Authorization", "Bearer other-token"}});
  auto ghost = RawRequest(server_->port(), http::verb::get,
                          "/git/ghost.git/info/refs?service=git-upload-pack",
                          {{"Authorization", "Bearer other-token"}});
  EXPECT_EQ(other.status, 404);
  EXPECT_EQ(ghost.status, 404);
  EXPECT_EQ(other.body, ghost.body);
  EXPECT_FALSE(fs::exists(config_.server.state_dir + "/domains/ghost"));
  EXPECT_FALSE(fs::exists(RepoDir("other")));  // nothing ran for the refused requests
}

TEST_F(GitHttpE2ETest, PathTraversalIsRefusedWithoutRunningAnything) {
  Start();
  for (const char* target : {"/git/../x", "/git/a/../../b.git/info/refs?service=git-upload-pack",
                             "/git/%2e%2e/demo.git/info/refs?service=git-upload-pack",
                             "/git/demo.git/../../../etc/passwd",
                             "/git/demo.git/info/refs/../../config?service=git-upload-pack",
                             "/git/demo.git/HEAD", "/git/demo.git/info/refs"}) {
    auto r = RawRequest(server_->port(), http::verb::get, target,
                        {{"Authorization", "Bearer demo-token"}});
    EXPECT_TRUE(r.status == 404 || r.status == 400) << target << " -> " << r.status;
  }
  EXPECT_FALSE(fs::exists(config_.server.state_dir + "/domains"));
  // A git client asking for a traversal URL fails too.
  GitResult g = Git(tmp_.path(), {"clone", "-q",
                                  "http://127.0.0.1:" + std::to_string(server_->port()) +
                                      "/git/demo.git/../other.git",
                                  tmp_.path() + "/t"});
  EXPECT_NE(g.exit_code, 0);
  EXPECT_FALSE(fs::exists(RepoDir("other")));
}

TEST_F(GitHttpE2ETest, TwoCandidatesPushingConcurrentlyBothLand) {
  Start();
  std::string base = Clone("base");
  Commit(base, "f", "base");
  GitOk(base, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  for (int round = 0; round < 3; ++round) {
    std::string a = Clone("a" + std::to_string(round)), b = Clone("b" + std::to_string(round));
    std::string ca = Commit(a, "a.txt", "a" + std::to_string(round));
    std::string cb = Commit(b, "b.txt", "b" + std::to_string(round));
    std::string na = "cand-a" + std::to_string(round), nb = "cand-b" + std::to_string(round);
    GitResult ra, rb;
    std::thread ta([&] { ra = Git(a, {"push", "-q", "origin", "HEAD:refs/heads/" + na}); });
    std::thread tb([&] { rb = Git(b, {"push", "-q", "origin", "HEAD:refs/heads/" + nb}); });
    ta.join();
    tb.join();
    EXPECT_EQ(ra.exit_code, 0) << ra.err;
    EXPECT_EQ(rb.exit_code, 0) << rb.err;
    auto branches = ServerBranches();
    EXPECT_EQ(branches[na], ca);
    EXPECT_EQ(branches[nb], cb);
  }
  ExpectFsckClean();
}

TEST_F(GitHttpE2ETest, ForcePushRewindsABranch) {
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/cand"});
  std::string c2 = Commit(a, "f", "2");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/cand"});
  EXPECT_EQ(ServerBranches()["cand"], c2);
  GitOk(a, {"reset", "-q", "--hard", c1});
  std::string c3 = Commit(a, "g", "rewritten");
  GitResult plain = Git(a, {"push", "-q", "origin", "HEAD:refs/heads/cand"});
  EXPECT_NE(plain.exit_code, 0);  // non-fast-forward without --force: the client refuses
  GitOk(a, {"push", "-q", "--force", "origin", "HEAD:refs/heads/cand"});
  EXPECT_EQ(ServerBranches()["cand"], c3);
  GitOk(a, {"push", "-q", "--force", "origin", c1 + ":refs/heads/cand"});
  EXPECT_EQ(ServerBranches()["cand"], c1);

  // The rewound tree is what a build resolves now.
  std::unique_ptr<GitRepo> repo;
  ASSERT_TRUE(GitRepo::Open(RepoDir(), &repo).ok());
  ResolvedSource src;
  ASSERT_TRUE(repo->Resolve(std::string("cand"), std::nullopt, "cand", &src).ok());
  EXPECT_EQ(src.commit, c1);
  ExpectFsckClean();
}

TEST_F(GitHttpE2ETest, RefsOutsideHeadsAndInvalidBranchNamesAreRefusedWithGitsMessage) {
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  GitOk(a, {"tag", "v1"});

  GitResult r = Git(a, {"push", "origin", "v1"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("remote: kiln: refusing refs/tags/v1: only branches"), std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("pre-receive hook declined"), std::string::npos) << r.err;

  for (const std::string ref :
       {"refs/notes/x", "refs/kiln/x", "refs/heads/_bad", "refs/heads/feat@1", "refs/heads/HEAD"}) {
    r = Git(a, {"push", "origin", "HEAD:" + ref});
    EXPECT_NE(r.exit_code, 0) << ref;
    EXPECT_NE(r.err.find("remote: kiln: refusing " + ref), std::string::npos) << r.err;
  }
  // One bad ref refuses the whole push (pre-receive is all-or-nothing).
  std::string c2 = Commit(a, "f", "2");
  r = Git(a, {"push", "origin", "HEAD:refs/heads/main", "HEAD:refs/tags/v2"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_EQ(ServerRefs(), std::vector<std::string>{"refs/heads/main"});
  EXPECT_EQ(ServerBranches()["main"], c1);
  ExpectFsckClean();
}

TEST_F(GitHttpE2ETest, DeletingABusyBranchIsRefused) {
  Start();
  std::string a = Clone("a");
  Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/cand", "HEAD:refs/heads/idle"});
  ASSERT_TRUE(handler_->SetBusyBranches("demo", {"cand"}).ok());
  EXPECT_EQ(handler_->SetBusyBranches("demo", {"bad..name"}).code(),
            Status::Code::kInvalidArgument);
  EXPECT_EQ(handler_->SetBusyBranches("ghost", {}).code(), Status::Code::kNotFound);

  GitResult r = Git(a, {"push", "origin", "--delete", "cand"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("remote: kiln: refusing to delete refs/heads/cand: a build of it is "
                       "running"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(ServerBranches().count("cand"), 1u);
  GitOk(a, {"push", "-q", "origin", "--delete", "idle"});  // not busy
  EXPECT_EQ(ServerBranches().count("idle"), 0u);

  ASSERT_TRUE(handler_->SetBusyBranches("demo", {}).ok());
  GitOk(a, {"push", "-q", "origin", "--delete", "cand"});
  EXPECT_TRUE(ServerBranches().empty());
}

TEST_F(GitHttpE2ETest, BusyBranchesCallbackIsAskedBeforeEachPush) {
  std::atomic<int> asked{0};
  options_.busy_branches = [&](const std::string& domain) {
    ++asked;
    return domain == "demo" ? std::set<std::string>{"cand"} : std::set<std::string>{};
  };
  Start();
  std::string a = Clone("a");
  Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/cand"});
  GitResult r = Git(a, {"push", "origin", "--delete", "cand"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("a build of it is running"), std::string::npos) << r.err;
  EXPECT_GE(asked.load(), 2);
}

// Issue 18: the landed updates are told before the push's response ends, in push order; refused
// updates and deletions are not.
TEST_F(GitHttpE2ETest, LandedRefUpdatesAreToldBeforeThePushReturns) {
  std::mutex mu;
  std::vector<std::pair<std::string, std::string>> told;
  options_.refs_updated = [&](const std::string& domain,
                              const std::vector<std::pair<std::string, std::string>>& refs) {
    std::lock_guard<std::mutex> l(mu);
    EXPECT_EQ(domain, "demo");
    for (const auto& r : refs) told.push_back(r);
  };
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/c1"});
  {
    std::lock_guard<std::mutex> l(mu);  // told before `git push` returned
    ASSERT_EQ(told.size(), 1u);
    EXPECT_EQ(told[0], std::make_pair(std::string("refs/heads/c1"), c1));
    told.clear();
  }
  std::string c2 = Commit(a, "g", "2");
  GitOk(a,
        {"push", "-q", "origin", "HEAD:refs/heads/zz", "HEAD:refs/heads/c2", "HEAD:refs/heads/c1"});
  {
    std::lock_guard<std::mutex> l(mu);
    ASSERT_EQ(told.size(), 3u);
    for (const auto& [ref, commit] : told) EXPECT_EQ(commit, c2) << ref;
    told.clear();
  }
  // Refused by the pre-receive hook (not a branch): nothing is told.
  GitResult r = Git(a, {"push", "origin", "HEAD:refs/tags/v1"});
  EXPECT_NE(r.exit_code, 0);
  GitOk(a, {"push", "-q", "origin", "--delete", "zz"});
  std::lock_guard<std::mutex> l(mu);
  EXPECT_TRUE(told.empty()) << told[0].first;
}

TEST_F(GitHttpE2ETest, PushesOverTheSizeLimitAreRefused) {
  options_.max_push_bytes = 1 << 20;
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});

  // Over receive.maxInputSize but within the HTTP limit: git's own message.
  Commit(a, "big.bin", RandomBytes(1500 * 1024, 1));
  GitResult r = Git(a, {"push", "origin", "HEAD:refs/heads/main"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("pack exceeds maximum allowed size"), std::string::npos) << r.err;
  EXPECT_EQ(ServerBranches()["main"], c1);

  // Far over: refused by the HTTP server (413) before git runs.
  Commit(a, "huge.bin", RandomBytes(4 << 20, 2));
  r = Git(a, {"push", "origin", "HEAD:refs/heads/main"});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_NE(r.err.find("413"), std::string::npos) << r.err;
  EXPECT_EQ(ServerBranches()["main"], c1);
  ExpectFsckClean();
}

TEST_F(GitHttpE2ETest, InterruptedPushLeavesTheRepositoryConsistent) {
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "1");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  Commit(a, "big.bin", RandomBytes(8 << 20, 3));
  {
    // The proxy lets the first 512 KiB through, then stalls; the client is killed (SIGKILL to
    // its process group) while the server is still receiving the pack.
    StallingProxy proxy(server_->port(), 512 * 1024);
    std::string url = Url("demo", proxy.port());
    GitResult r = Git(a, {"push", url, "HEAD:refs/heads/main"}, "demo-token", 4000);
    EXPECT_NE(r.exit_code, 0);
    EXPECT_GE(proxy.forwarded(), 512u * 1024u);
  }
  ASSERT_TRUE(handler_->WaitIdle(std::chrono::seconds(10)));
  EXPECT_EQ(ServerBranches()["main"], c1);
  ExpectFsckClean();

  // A truncated pack that does reach receive-pack: refused, nothing changes.
  std::string c2 = Commit(a, "g", "2");
  std::string cmd = "0000000000000000000000000000000000000000 " + c2 + " refs/heads/cut" +
                    std::string(1, '\0') + " report-status\n";
  char len[5];
  std::snprintf(len, sizeof(len), "%04zx", cmd.size() + 4);
  std::string body = std::string(len) + cmd + "0000" + "PACK" + std::string("\0\0\0\2\0\0\0\3", 8) +
                     RandomBytes(100, 4);
  auto resp = RawRequest(server_->port(), http::verb::post, "/git/demo.git/git-receive-pack",
                         {{"Authorization", "Bearer demo-token"},
                          {"Content-Type", "application/x-git-receive-pack-request"}},
                         body);
  EXPECT_EQ(resp.status, 200);
  EXPECT_NE(resp.body.find("unpack "), std::string::npos);
  EXPECT_EQ(resp.body.find("unpack ok"), std::string::npos);
  EXPECT_EQ(ServerBranches().count("cut"), 0u);
  EXPECT_EQ(ServerBranches()["main"], c1);
  ExpectFsckClean();

  // And the repository still takes the push afterwards.
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  EXPECT_EQ(ServerBranches()["main"], c2);
  ExpectFsckClean();
}

std::string Gzip(const std::string& in) {
  z_stream z{};
  EXPECT_EQ(deflateInit2(&z, Z_DEFAULT_COMPRESSION, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY),
            Z_OK);
  std::string out(deflateBound(&z, in.size()) + 64, '\0');
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  EXPECT_EQ(deflate(&z, Z_FINISH), Z_STREAM_END);
  out.resize(z.total_out);
  deflateEnd(&z);
  return out;
}

std::string PktLine(const std::string& payload) {
  char len[5];
  std::snprintf(len, sizeof(len), "%04zx", payload.size() + 4);
  return len + payload;
}

TEST_F(GitHttpE2ETest, GzipRequestBodiesFromGitClientsAreInflated) {
  Start();
  std::string a = Clone("a");
  std::string c1 = Commit(a, "f", "hello");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  std::string request =
      PktLine("want " + c1 + " side-band-64k no-progress\n") + "0000" + PktLine("done\n");
  std::map<std::string, std::string> headers = {
      {"Authorization", "Bearer demo-token"},
      {"Content-Type", "application/x-git-upload-pack-request"}};
  auto plain = RawRequest(server_->port(), http::verb::post, "/git/demo.git/git-upload-pack",
                          headers, request);
  headers["Content-Encoding"] = "gzip";
  auto gz = RawRequest(server_->port(), http::verb::post, "/git/demo.git/git-upload-pack", headers,
                       Gzip(request));
  for (const auto* r : {&plain, &gz}) {
    EXPECT_EQ(r->status, 200);
    EXPECT_EQ(r->headers.at("content-type"), "application/x-git-upload-pack-result");
    EXPECT_EQ(r->body.rfind("0008NAK\n", 0), 0u) << r->body.substr(0, 40);
    EXPECT_NE(r->body.find("PACK"), std::string::npos);
  }
  // Garbage claiming to be gzip is an error, not a crash or a hang.
  auto bad = RawRequest(server_->port(), http::verb::post, "/git/demo.git/git-upload-pack", headers,
                        "not gzip at all");
  EXPECT_EQ(bad.body.find("PACK"), std::string::npos);
}

size_t CountPacks(const std::string& repo) {
  size_t n = 0;
  for (auto& e : fs::directory_iterator(repo + "/objects/pack"))
    if (e.path().extension() == ".pack") ++n;
  return n;
}

TEST_F(GitHttpE2ETest, UpkeepRepacksAfterPushesButNeverWhileAPushHoldsTheLock) {
  options_.upkeep_every_pushes = 1;
  options_.gc_auto_pack_limit = 2;
  Start();
  std::string a = Clone("a");
  Commit(a, "f", "0");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  ASSERT_TRUE(handler_->WaitIdle(std::chrono::seconds(30)));
  // Every push becomes its own pack.
  GitOk(tmp_.path(), {"--git-dir=" + RepoDir(), "config", "receive.unpackLimit", "1"}, "");
  int runs_before = handler_->upkeep_runs();

  // A push in flight elsewhere (another kiln process) holds the lock shared: no gc.
  std::string lock_path = config_.server.state_dir + "/domains/demo/repo.lock";
  int fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::flock(fd, LOCK_SH), 0);
  for (int i = 1; i <= 4; ++i) {
    Commit(a, "f", std::to_string(i));
    GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  }
  ASSERT_TRUE(handler_->WaitIdle(std::chrono::seconds(30)));
  EXPECT_EQ(handler_->upkeep_runs(), runs_before);
  EXPECT_GE(CountPacks(RepoDir()), 4u);
  ::close(fd);

  Commit(a, "f", "5");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  ASSERT_TRUE(handler_->WaitIdle(std::chrono::seconds(60)));
  EXPECT_EQ(handler_->upkeep_runs(), runs_before + 1);
  EXPECT_EQ(CountPacks(RepoDir()), 1u);
  ExpectFsckClean();
  std::string b = Clone("b");
  EXPECT_EQ(ReadFile(b + "/f"), "5");
}

TEST_F(GitHttpE2ETest, BenchmarkPushOfAOneFileChange) {
  Start();
  std::string a = Clone("a");
  for (int i = 0; i < 20; ++i)
    WriteFile(a + "/src/file" + std::to_string(i) + ".go", "package x\n");
  Commit(a, "main.go", "package main\n");
  GitOk(a, {"push", "-q", "origin", "HEAD:refs/heads/main"});
  // The same push to a local bare repository (file://, no HTTP, no hook) as the floor.
  std::string local = tmp_.path() + "/local.git";
  GitOk(tmp_.path(), {"init", "-q", "--bare", local}, "");
  GitOk(a, {"push", "-q", local, "HEAD:refs/heads/main"}, "");
  auto measure = [&](const std::string& remote, int tag) {
    std::vector<double> ms;
    for (int i = 0; i < 15; ++i) {
      Commit(a, "main.go", "package main // " + std::to_string(tag * 100 + i) + "\n");
      auto t0 = std::chrono::steady_clock::now();
      GitOk(a, {"push", "-q", remote, "HEAD:refs/heads/main"});
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    }
    std::sort(ms.begin(), ms.end());
    return ms;
  };
  std::vector<double> ms = measure("origin", 0);
  std::vector<double> floor = measure("file://" + local, 1);
  std::printf(
      "[bench] git push of a one-file change over loopback HTTP: median %.1f ms, min %.1f ms, "
      "max %.1f ms (n=%zu); same push to a file:// repository: median %.1f ms\n",
      ms[ms.size() / 2], ms.front(), ms.back(), ms.size(), floor[floor.size() / 2]);
  EXPECT_LT(ms[ms.size() / 2], 2000.0);
}

// ---------------------------------------------------------------------------------------------
// HTTP transport caps (issue 15)

template <typename Pred>
bool WaitFor(Pred pred, std::chrono::milliseconds limit) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (!pred()) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return true;
}

// Sends `head` (no body) on a fresh connection; returns what the server sends until it closes
// (10 s receive timeout so that a bug hangs no test).
std::string HeadersOnly(uint16_t port, const std::string& head, bool* closed) {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  timeval tv{10, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(port);
  std::string out;
  *closed = false;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0 &&
      ::send(fd, head.data(), head.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(head.size())) {
    char buf[4096];
    for (;;) {
      ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
      if (n > 0) {
        out.append(buf, static_cast<size_t>(n));
        continue;
      }
      *closed = n == 0 || errno == ECONNRESET;
      break;
    }
  }
  ::close(fd);
  return out;
}

TEST_F(GitHttpE2ETest, PushesAreRefusedFromTheHeadersBeforeTheBody) {
  Start();
  struct Case {
    std::string target;
    std::string token;
    int status;
  };
  std::vector<Case> cases = {
      {"/git/demo.git/git-receive-pack", "", 401},
      {"/git/demo.git/git-receive-pack", "wrong", 401},
      {"/git/other.git/git-receive-pack", "demo-token", 404},   // another domain's
      {"/git/nosuch.git/git-receive-pack", "demo-token", 404},  // no such domain
      {"/git/demo.git/git-receive-pack", "op-token", 403},
      {"/git/demo.git/../x.git/git-receive-pack", "demo-token", 404},
  };
  for (const Case& c : cases) {
    std::string head = "POST " + c.target +
                       " HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                       "Content-Type: application/x-git-receive-pack-request\r\n"
                       "Content-Length: 66060288\r\n";
    if (!c.token.empty()) head += "Authorization: Bearer " + c.token + "\r\n";
    head += "\r\n";
    bool closed = false;
    std::string answer = HeadersOnly(server_->port(), head, &closed);
    EXPECT_EQ(answer.rfind("HTTP/1.1 " + std::to_string(c.status) + " ", 0), 0u)
        << c.target << " " << c.token << ":\n"
        << answer;
    EXPECT_TRUE(closed) << c.target;
    EXPECT_NE(answer.find("Connection: close"), std::string::npos);
    EXPECT_EQ(answer.find("other"), std::string::npos) << answer;  // names no other domain
  }
  EXPECT_FALSE(fs::exists(RepoDir()));  // nothing ran
}

TEST_F(GitHttpE2ETest, ADomainAtItsGitSlotCapGets503AndOtherDomainsGoOn) {
  // A stand-in for git-http-backend that holds its slot until the test releases it.
  std::string dir = tmp_.path();
  std::string script = dir + "/slow-backend";
  WriteFile(
      script,
      "#!/bin/sh\n: > " + dir + "/started-$$\nwhile [ ! -e " + dir +
          "/release ]; do sleep 0.02; done\nprintf 'Content-Type: text/plain\\r\\n\\r\\nok'\n",
      true);
  options_.http_backend = script;
  options_.max_concurrent_per_domain = 1;
  options_.max_concurrent = 3;
  Start();
  auto started = [&] {
    size_t n = 0;
    for (auto& e : fs::directory_iterator(dir))
      n += e.path().filename().string().rfind("started-", 0) == 0 ? 1 : 0;
    return n;
  };
  auto get = [&](const std::string& domain) {
    return RawRequest(server_->port(), http::verb::get,
                      "/git/" + domain + ".git/info/refs?service=git-upload-pack",
                      {{"Authorization", "Bearer " + domain + "-token"}});
  };
  auto first = std::async(std::launch::async, [&] { return get("demo"); });
  ASSERT_TRUE(WaitFor([&] { return started() == 1; }, std::chrono::milliseconds(10000)));
  RawResponse refused = get("demo");
  EXPECT_EQ(refused.status, 503);
  EXPECT_EQ(refused.headers["retry-after"], "1");
  EXPECT_NE(refused.body.find("server.git_slots_per_domain"), std::string::npos) << refused.body;
  // The other domain still has its slot.
  auto second = std::async(std::launch::async, [&] { return get("other"); });
  ASSERT_TRUE(WaitFor([&] { return started() == 2; }, std::chrono::milliseconds(10000)));
  WriteFile(dir + "/release", "");
  EXPECT_EQ(first.get().status, 200);
  EXPECT_EQ(second.get().status, 200);
  EXPECT_EQ(
      server_->metrics().Value("kiln_git_refusals_total", {{"reason", "git_slots_per_domain"}}), 1);
  ASSERT_TRUE(handler_->WaitIdle(std::chrono::milliseconds(10000)));
  EXPECT_EQ(get("demo").status, 200);  // the slot is free again
}

TEST_F(GitHttpE2ETest, AClientThatStopsReadingLosesItsCgiAndTheSlotIsFreed) {
  // A backend with far more output than any buffer: 1 GiB, then a marker file.
  std::string dir = tmp_.path();
  std::string script = dir + "/big-backend";
  WriteFile(script,
            "#!/bin/sh\n: > " + dir +
                "/started\nprintf 'Content-Type: application/octet-stream\\r\\n\\r\\n'\n"
                "head -c 1073741824 /dev/zero && : > " +
                dir + "/all-written\n",
            true);
  options_.http_backend = script;
  options_.write_stall_timeout = std::chrono::seconds(2);
  server_options_.write_timeout = std::chrono::seconds(2);
  Start();
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int small = 64 << 10;
  ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &small, sizeof(small));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  a.sin_port = htons(server_->port());
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  std::string req =
      "GET /git/demo.git/info/refs?service=git-upload-pack HTTP/1.1\r\nHost: 127.0.0.1\r\n"
      "Authorization: Bearer demo-token\r\n\r\n";
  ASSERT_EQ(::send(fd, req.data(), req.size(), MSG_NOSIGNAL), static_cast<ssize_t>(req.size()));
  ASSERT_TRUE(
      WaitFor([&] { return fs::exists(dir + "/started"); }, std::chrono::milliseconds(10000)));
  // The client reads nothing: the worker is blocked, then the CGI is killed and the slot freed.
  ASSERT_TRUE(handler_->WaitIdle(std::chrono::milliseconds(60000)));
  EXPECT_FALSE(fs::exists(dir + "/all-written"));
  EXPECT_GE(server_->metrics().Value("kiln_git_refusals_total", {{"reason", "write_stall"}}) +
                server_->metrics().Value("kiln_http_refusals_total", {{"reason", "write_timeout"}}),
            1);
  ::close(fd);
}

// ---------------------------------------------------------------------------------------------
// The CGI's supervision (SupervisedProcess, common/process_supervisor.h)

// A pid a backend script wrote to `path` (0 if it did not within 10 s).
pid_t PidFromFile(const std::string& path) {
  pid_t pid = 0;
  WaitFor(
      [&] {
        std::ifstream in(path);
        return static_cast<bool>(in >> pid);
      },
      std::chrono::milliseconds(10000));
  return pid;
}

TEST_F(GitHttpE2ETest, ABackendOverTheCgiTimeoutIsStoppedWithItsChildren) {
  std::string dir = tmp_.path();
  WriteFile(dir + "/slow-backend",
            "#!/bin/sh\nsleep 100 &\necho $! > " + dir + "/bg.tmp && mv " + dir + "/bg.tmp " + dir +
                "/bg\nsleep 100\n",
            true);
  options_.http_backend = dir + "/slow-backend";
  options_.cgi_timeout = std::chrono::seconds(1);
  Start();
  auto t0 = std::chrono::steady_clock::now();
  auto r = RawRequest(server_->port(), http::verb::get,
                      "/git/demo.git/info/refs?service=git-upload-pack",
                      {{"Authorization", "Bearer demo-token"}});
  auto took = std::chrono::steady_clock::now() - t0;
  EXPECT_EQ(r.status, 502);
  EXPECT_NE(r.body.find("git backend failed"), std::string::npos) << r.body;
  EXPECT_GE(took, std::chrono::milliseconds(900));
  EXPECT_LT(took, std::chrono::milliseconds(4000));  // SIGTERM at 1 s, not SIGKILL at 1 s + 5 s
  pid_t bg = PidFromFile(dir + "/bg");
  ASSERT_GT(bg, 1);
  EXPECT_TRUE(GoneWithin(bg, std::chrono::milliseconds(2000)));  // the whole group was stopped
}

TEST_F(GitHttpE2ETest, MalformedCgiHeadersAnswer502AndStopTheBackend) {
  std::string dir = tmp_.path();
  WriteFile(dir + "/bad-backend",
            "#!/bin/sh\necho $$ > " + dir + "/pid.tmp && mv " + dir + "/pid.tmp " + dir +
                "/pid\nprintf 'no colon in this header\\n\\nbody'\nexec sleep 100\n",
            true);
  options_.http_backend = dir + "/bad-backend";
  Start();
  auto t0 = std::chrono::steady_clock::now();
  auto r = RawRequest(server_->port(), http::verb::get,
                      "/git/demo.git/info/refs?service=git-upload-pack",
                      {{"Authorization", "Bearer demo-token"}});
  EXPECT_EQ(r.status, 502);
  EXPECT_NE(r.body.find("malformed headers"), std::string::npos) << r.body;
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(4000));
  pid_t pid = PidFromFile(dir + "/pid");
  ASSERT_GT(pid, 1);
  EXPECT_TRUE(GoneWithin(pid, std::chrono::milliseconds(2000)));
}

TEST_F(GitHttpE2ETest, DestroyingTheHandlerStopsARunningCgi) {
  std::string dir = tmp_.path();
  WriteFile(dir + "/hanging-backend",
            "#!/bin/sh\necho $$ > " + dir + "/pid.tmp && mv " + dir + "/pid.tmp " + dir +
                "/pid\nexec sleep 100\n",
            true);
  options_.http_backend = dir + "/hanging-backend";
  Start();
  auto client = std::async(std::launch::async, [&] {
    try {
      RawRequest(server_->port(), http::verb::get,
                 "/git/demo.git/info/refs?service=git-upload-pack",
                 {{"Authorization", "Bearer demo-token"}});
    } catch (const std::exception&) {  // the server went away mid-request
    }
  });
  pid_t pid = PidFromFile(dir + "/pid");
  ASSERT_GT(pid, 1);
  server_->Stop();
  auto t0 = std::chrono::steady_clock::now();
  handler_.reset();  // SIGTERM to the CGI's group, then joins its worker
  EXPECT_LT(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(3000));
  EXPECT_TRUE(GoneWithin(pid, std::chrono::milliseconds(2000)));
  client.wait();
}

}  // namespace
}  // namespace kiln
