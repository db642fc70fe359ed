#include "deploy/rootfs_rules.h"

#include <gtest/gtest.h>

#include <map>

namespace kiln {
namespace {

std::string Clean(const std::string& in, bool* hostile = nullptr) {
  std::string out;
  EXPECT_TRUE(CleanEntryPath(in, &out, hostile).ok()) << in;
  return out;
}

TEST(CleanEntryPath, NormalizesOrdinaryNames) {
  bool hostile = true;
  EXPECT_EQ(Clean("./bin/busybox", &hostile), "bin/busybox");
  EXPECT_FALSE(hostile);
  EXPECT_EQ(Clean("usr//lib/./x/"), "usr/lib/x");
  EXPECT_EQ(Clean("./"), "");
  EXPECT_EQ(Clean("a/b/../c", &hostile), "a/c");
  EXPECT_FALSE(hostile);  // stays inside the root
}

TEST(CleanEntryPath, NeutralizesEscapes) {
  bool hostile = false;
  EXPECT_EQ(Clean("../escape", &hostile), "escape");
  EXPECT_TRUE(hostile);
  hostile = false;
  EXPECT_EQ(Clean("/etc/passwd", &hostile), "etc/passwd");
  EXPECT_TRUE(hostile);
  hostile = false;
  EXPECT_EQ(Clean("a/../../../../x", &hostile), "x");
  EXPECT_TRUE(hostile);
  EXPECT_EQ(Clean("/.."), "");
}

TEST(CleanEntryPath, RejectsNulAndHugeNames) {
  std::string out;
  EXPECT_EQ(CleanEntryPath(std::string("a\0b", 3), &out).code(), Status::Code::kInvalidArgument);
  EXPECT_EQ(CleanEntryPath(std::string(5000, 'a'), &out).code(), Status::Code::kInvalidArgument);
}

TEST(ClassifyWhiteout, FileOpaqueAndIgnored) {
  Whiteout w = ClassifyWhiteout("etc/.wh.hosts");
  EXPECT_EQ(w.kind, Whiteout::Kind::kFile);
  EXPECT_EQ(w.target, "etc/hosts");
  w = ClassifyWhiteout(".wh.top");
  EXPECT_EQ(w.kind, Whiteout::Kind::kFile);
  EXPECT_EQ(w.target, "top");
  w = ClassifyWhiteout("var/lib/.wh..wh..opq");
  EXPECT_EQ(w.kind, Whiteout::Kind::kOpaque);
  EXPECT_EQ(w.target, "var/lib");
  w = ClassifyWhiteout(".wh..wh..opq");
  EXPECT_EQ(w.kind, Whiteout::Kind::kOpaque);
  EXPECT_EQ(w.target, "");
  EXPECT_EQ(ClassifyWhiteout("a/.wh..wh.plnk").kind, Whiteout::Kind::kIgnore);
  EXPECT_EQ(ClassifyWhiteout("a/.wh..").kind, Whiteout::Kind::kIgnore);
  EXPECT_EQ(ClassifyWhiteout("a/.wh.").kind, Whiteout::Kind::kIgnore);
  EXPECT_EQ(ClassifyWhiteout("a/x.wh.y").kind, Whiteout::Kind::kNone);
  EXPECT_EQ(ClassifyWhiteout("a/b").kind, Whiteout::Kind::kNone);
}

// A fake tree: path -> symlink target.
SymlinkLookup Links(std::map<std::string, std::string> links) {
  return [links](const std::string& rel) -> std::optional<std::string> {
    auto it = links.find(rel);
    if (it == links.end()) return std::nullopt;
    return it->second;
  };
}

std::string Resolve(const std::string& rel, bool follow_last, const SymlinkLookup& l) {
  std::string out;
  Status st = ResolveInRoot(rel, follow_last, l, &out);
  EXPECT_TRUE(st.ok()) << st.ToString();
  return out;
}

TEST(ResolveInRoot, AbsoluteLinksRestartAtTheRoot) {
  auto l = Links({{"evil", "/etc"}, {"up", "../../../../tmp"}, {"bin", "usr/bin"}});
  EXPECT_EQ(Resolve("evil/passwd", false, l), "etc/passwd");
  EXPECT_EQ(Resolve("up/x", false, l), "tmp/x");
  EXPECT_EQ(Resolve("bin/sh", false, l), "usr/bin/sh");
  EXPECT_EQ(Resolve("plain/file", false, l), "plain/file");
}

TEST(ResolveInRoot, LastSegmentFollowedOnlyWhenAsked) {
  auto l = Links({{"link", "/target"}});
  EXPECT_EQ(Resolve("link", false, l), "link");
  EXPECT_EQ(Resolve("link", true, l), "target");
}

TEST(ResolveInRoot, ChainsAndRelativeTargets) {
  auto l = Links({{"a", "b"}, {"b", "c/d"}, {"c/d", "../e"}});
  EXPECT_EQ(Resolve("a/f", false, l), "e/f");
}

TEST(ResolveInRoot, LoopIsAnError) {
  auto l = Links({{"x", "y"}, {"y", "x"}});
  std::string out;
  EXPECT_EQ(ResolveInRoot("x/z", false, l, &out).code(), Status::Code::kInvalidArgument);
}

TEST(EntryRules, ActionsAndModes) {
  EXPECT_EQ(ActionFor('0'), EntryAction::kFile);
  EXPECT_EQ(ActionFor('\0'), EntryAction::kFile);
  EXPECT_EQ(ActionFor('5'), EntryAction::kDir);
  EXPECT_EQ(ActionFor('2'), EntryAction::kSymlink);
  EXPECT_EQ(ActionFor('1'), EntryAction::kHardlink);
  EXPECT_EQ(ActionFor('3'), EntryAction::kSkip);
  EXPECT_EQ(ActionFor('4'), EntryAction::kSkip);
  EXPECT_EQ(ActionFor('6'), EntryAction::kSkip);
  EXPECT_EQ(ActionFor('Z'), EntryAction::kSkip);
  EXPECT_EQ(SanitizeMode(04755), 0755u);
  EXPECT_EQ(SanitizeMode(02755), 0755u);
  EXPECT_EQ(SanitizeMode(01777), 01777u);
  EXPECT_EQ(SanitizeMode(0100644), 0644u);
}

}  // namespace
}  // namespace kiln
