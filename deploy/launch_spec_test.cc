#include "deploy/launch_spec.h"

#include <gtest/gtest.h>

#include <algorithm>

namespace kiln {
namespace {

using json = nlohmann::json;
const std::string kHex(64, 'a');

TEST(ParseImageRef, AcceptsDigestReferences) {
  ImageRef r;
  ASSERT_TRUE(ParseImageRef("127.0.0.1:5110/kiln/demo@sha256:" + kHex, &r).ok());
  EXPECT_EQ(r.host, "127.0.0.1:5110");
  EXPECT_EQ(r.repository, "kiln/demo");
  EXPECT_EQ(r.digest, "sha256:" + kHex);
}

TEST(ParseImageRef, RejectsTagsAndMalformed) {
  ImageRef r;
  for (const std::string& bad : std::vector<std::string>{
           "127.0.0.1:5110/kiln/demo:latest", "kiln@sha256:" + kHex,
           "h/r@sha256:" + std::string(63, 'a'), "h/r@sha512:" + kHex, "h/../r@sha256:" + kHex,
           "/r@sha256:" + kHex, "h/r@sha256:" + std::string(64, 'A')})
    EXPECT_EQ(ParseImageRef(bad, &r).code(), Status::Code::kInvalidArgument) << bad;
}

TEST(DecideLaunch, EntrypointCmdEnvAndPort) {
  json cfg = {{"config",
               {{"Entrypoint", {"/bin/busybox", "sh", "-c"}},
                {"Cmd", {"exec httpd -p $PORT"}},
                {"Env", {"PATH=/bin", "A=1", "A=2", "PORT=1", "bad", "1X=y", "E="}},
                {"WorkingDir", "/www"}}}};
  LaunchSpec s;
  ASSERT_TRUE(DecideLaunch(cfg, 19100, &s).ok());
  EXPECT_EQ(s.argv, (std::vector<std::string>{"/bin/busybox", "sh", "-c", "exec httpd -p $PORT"}));
  EXPECT_EQ(s.env.at("PATH"), "/bin");
  EXPECT_EQ(s.env.at("A"), "2");         // later wins
  EXPECT_EQ(s.env.at("PORT"), "19100");  // kiln's port always wins
  EXPECT_EQ(s.env.at("E"), "");
  EXPECT_EQ(s.env.count("bad"), 0u);
  EXPECT_EQ(s.env.count("1X"), 0u);
  EXPECT_EQ(s.env.at("HOME"), "/");
  EXPECT_EQ(s.cwd, "/www");
  EXPECT_FALSE(s.uid.has_value());
}

TEST(DecideLaunch, DefaultsAndCmdOnly) {
  LaunchSpec s;
  ASSERT_TRUE(DecideLaunch(json{{"config", {{"Cmd", {"/app"}}}}}, 8080, &s).ok());
  EXPECT_EQ(s.argv, std::vector<std::string>{"/app"});
  EXPECT_EQ(s.env.at("PATH"), kDefaultPath);
  EXPECT_EQ(s.cwd, "/");
}

TEST(DecideLaunch, NumericUser) {
  LaunchSpec s;
  ASSERT_TRUE(
      DecideLaunch(json{{"config", {{"Cmd", {"/app"}}, {"User", "1000:2000"}}}}, 1, &s).ok());
  EXPECT_EQ(*s.uid, 1000u);
  EXPECT_EQ(*s.gid, 2000u);
  ASSERT_TRUE(DecideLaunch(json{{"config", {{"Cmd", {"/app"}}, {"User", "65534"}}}}, 1, &s).ok());
  EXPECT_EQ(*s.uid, 65534u);
  EXPECT_EQ(*s.gid, 65534u);
  ASSERT_TRUE(DecideLaunch(json{{"config", {{"Cmd", {"/app"}}, {"User", "root"}}}}, 1, &s).ok());
  EXPECT_FALSE(s.uid.has_value());
}

TEST(DecideLaunch, Rejections) {
  LaunchSpec s;
  auto bad = [&](json cfg) {
    return DecideLaunch(cfg, 1, &s).code() == Status::Code::kInvalidArgument;
  };
  EXPECT_TRUE(bad(json{{"config", json::object()}}));  // nothing to run
  EXPECT_TRUE(bad(json::array()));
  EXPECT_TRUE(bad(json{{"config", {{"Cmd", "/app"}}}}));  // not an array
  EXPECT_TRUE(bad(json{{"config", {{"Cmd", {"/app", 1}}}}}));
  EXPECT_TRUE(bad(json{{"config", {{"Cmd", {"/app"}}, {"WorkingDir", "rel"}}}}));
  EXPECT_TRUE(bad(json{{"config", {{"Cmd", {"/app"}}, {"User", "nobody:"}}}}));
  EXPECT_TRUE(bad(json{{"config", {{"Cmd", {std::string("a\0b", 3)}}}}}));
}

TEST(DecideLaunch, NamedUserResolvedFromTheImagesFiles) {
  LaunchSpec s;
  ASSERT_TRUE(DecideLaunch(json{{"config", {{"Cmd", {"/app"}}, {"User", "nobody"}}}}, 1, &s).ok());
  EXPECT_EQ(s.user_name, "nobody");
  EXPECT_FALSE(s.uid.has_value());
  const std::string passwd =
      "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65533:nobody:/:/bin/false\n";
  const std::string group = "root:x:0:\nnogroup:x:65500:\n";
  ASSERT_TRUE(ResolveUserNames(passwd, group, &s).ok());
  EXPECT_EQ(*s.uid, 65534u);
  EXPECT_EQ(*s.gid, 65533u);  // the user's primary group
  LaunchSpec g;
  ASSERT_TRUE(
      DecideLaunch(json{{"config", {{"Cmd", {"/app"}}, {"User", "nobody:nogroup"}}}}, 1, &g).ok());
  ASSERT_TRUE(ResolveUserNames(passwd, group, &g).ok());
  EXPECT_EQ(*g.gid, 65500u);
  LaunchSpec m;
  ASSERT_TRUE(DecideLaunch(json{{"config", {{"Cmd", {"/app"}}, {"User", "ghost"}}}}, 1, &m).ok());
  Status st = ResolveUserNames(passwd, group, &m);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("'ghost' is not in the image's /etc/passwd"), std::string::npos);
  EXPECT_FALSE(ResolveUserNames("", "", &m).ok());  // an image without /etc/passwd
}

TEST(LocalSandboxArgv, IsolatesEverything) {
  LaunchSpec s;
  s.argv = {"/bin/app", "--flag"};
  s.env = {{"PORT", "19100"}, {"PATH", "/bin"}};
  s.cwd = "/srv";
  std::vector<std::string> a = LocalSandboxArgv(s, "/state/rootfs/1", 3);
  auto has = [&](std::vector<std::string> seq) {
    return std::search(a.begin(), a.end(), seq.begin(), seq.end()) != a.end();
  };
  EXPECT_EQ(a.front(), "prlimit");  // the default limits wrap bwrap
  for (const char* flag : {"--unshare-all", "--unshare-user", "--disable-userns",
                           "--die-with-parent", "--new-session", "--clearenv"})
    EXPECT_TRUE(has({flag})) << flag;
  EXPECT_FALSE(has({"--share-net"}));
  EXPECT_TRUE(has({"--cap-drop", "ALL"}));
  EXPECT_TRUE(has({"--bind", "/state/rootfs/1", "/"}));
  EXPECT_TRUE(has({"--proc", "/proc"}));
  EXPECT_TRUE(has({"--dev", "/dev"}));
  EXPECT_TRUE(has({"--tmpfs", "/tmp"}));
  EXPECT_TRUE(has({"--setenv", "PORT", "19100"}));
  EXPECT_TRUE(has({"--chdir", "/srv"}));
  EXPECT_TRUE(has({"--info-fd", "3"}));
  EXPECT_TRUE(has({"--", "/bin/app", "--flag"}));
  // The root is the only host path in the argv.
  int binds = static_cast<int>(std::count(a.begin(), a.end(), "--bind")) +
              static_cast<int>(std::count(a.begin(), a.end(), "--ro-bind"));
  EXPECT_EQ(binds, 1);
  // The command is last: nothing after it can be read as a bwrap option.
  EXPECT_EQ(a[a.size() - 3], "--");
}

// Issue 15: the program never runs as root, bwrap runs as the host user, under limits.
TEST(LocalSandboxArgv, RunsUnprivilegedWithLimits) {
  LaunchSpec s;
  s.argv = {"/bin/app"};
  s.cwd = "/";
  LocalSandboxOptions o;
  o.host_user = SandboxUser{999, 995};
  o.fallback = SandboxUser{999, 995};
  o.limits = SandboxLimits{100, int64_t{512} << 20, int64_t{64} << 20};
  std::vector<std::string> a = LocalSandboxArgv(s, "/state/rootfs/1", 3, o);
  auto at = [&](const std::string& x) {
    return static_cast<size_t>(std::find(a.begin(), a.end(), x) - a.begin());
  };
  auto has = [&](std::vector<std::string> seq) {
    return std::search(a.begin(), a.end(), seq.begin(), seq.end()) != a.end();
  };
  EXPECT_EQ(a.front(), "unshare");
  EXPECT_LT(at("--nproc=100:100"), at("setpriv"));
  EXPECT_LT(at("--as=536870912:536870912"), at("setpriv"));
  EXPECT_LT(at("--fsize=67108864:67108864"), at("setpriv"));
  EXPECT_LT(at("--reuid=999"), at("bwrap"));
  EXPECT_LT(at("--regid=995"), at("bwrap"));
  EXPECT_LT(at("--clear-groups"), at("bwrap"));
  // The uid change clears the parent-death signal: setpriv sets it again.
  EXPECT_EQ(a[at("--pdeathsig") + 1], "SIGKILL");
  EXPECT_LT(at("--pdeathsig"), at("bwrap"));
  EXPECT_LT(at("bwrap"), at("--disable-userns"));
  EXPECT_TRUE(has({"--unshare-user"}));
  // No User in the image: the host user's ids, not root.
  EXPECT_TRUE(has({"--uid", "999", "--gid", "995"}));
  // bwrap binds the staged root, never the host path below the state directory.
  EXPECT_TRUE(has({"--bind", "/run/kiln-deploy/1", "/"}));
  EXPECT_FALSE(has({"--bind", "/state/rootfs/1", "/"}));
  EXPECT_NE(a[at("-c") + 1].find("mount --bind '/state/rootfs/1' '/run/kiln-deploy/1'"),
            std::string::npos);
  EXPECT_EQ(a.back(), "/bin/app");

  // A numeric non-zero User is kept; User 0 (root) falls back to the host user.
  s.uid = 1000;
  s.gid = 1001;
  a = LocalSandboxArgv(s, "/state/rootfs/1", 3, o);
  EXPECT_TRUE(has({"--uid", "1000", "--gid", "1001"}));
  s.uid = 0;
  s.gid = 0;
  a = LocalSandboxArgv(s, "/state/rootfs/1", 3, o);
  EXPECT_TRUE(has({"--uid", "999", "--gid", "995"}));
  EXPECT_FALSE(has({"--uid", "0"}));
  s.uid = 1000;
  s.gid = 0;
  SandboxUser ids = ProgramIds(s, o.fallback);
  EXPECT_EQ(ids.uid, 1000u);
  EXPECT_EQ(ids.gid, 995u);
}

}  // namespace
}  // namespace kiln
