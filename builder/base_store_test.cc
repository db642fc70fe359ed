// Unit tests of the shared base-image store's pure part (builder/base_store.h): which images a
// build must still load, the names they get, the marker format.
#include "builder/base_store.h"

#include <gtest/gtest.h>
#include <sys/mount.h>

#include "builder/buildah_builder.h"

namespace kiln {
namespace {

const std::string kD1 = "sha256:" + std::string(64, '1');
const std::string kD2 = "sha256:" + std::string(64, '2');

TEST(BaseStore, PathsArePerDomainCacheAndBuildUser) {
  BaseStorePaths p = BaseStoreFor("/s/domains/a/cache", 999);
  EXPECT_EQ(p.dir, "/s/domains/a/cache/bases");
  EXPECT_EQ(p.store, "/s/domains/a/cache/bases/u999");
  EXPECT_EQ(p.marker, "/s/domains/a/cache/bases/u999.json");
  EXPECT_EQ(p.lock, "/s/domains/a/cache/bases/u999.lock");
  EXPECT_NE(BaseStoreFor("/s/domains/a/cache", 998).store, p.store);
}

TEST(BaseStore, DigestReferencesGetAPinnedTagInTheSameRepository) {
  EXPECT_EQ(BaseStoreName("r:5000/kiln/busybox:1"), "r:5000/kiln/busybox:1");
  EXPECT_EQ(BaseStoreName("r:5000/kiln/busybox@" + kD1),
            "r:5000/kiln/busybox:kiln-pinned-111111111111");
  EXPECT_EQ(BaseStoreName("r:5000/kiln/busybox:1@" + kD2),
            "r:5000/kiln/busybox:kiln-pinned-222222222222");
}

TEST(BaseStore, WarmStoreNeedsNothing) {
  std::vector<BaseWant> want = {{"r/a:1", kD1}, {"r/b@" + kD2, kD2}};
  std::map<std::string, std::string> marker = {{"r/a:1", kD1}, {"r/b@" + kD2, kD2}};
  std::set<std::string> stored = {"r/a:1", "r/b:kiln-pinned-222222222222"};
  EXPECT_TRUE(MissingBases(want, marker, stored).empty());
}

TEST(BaseStore, MovedTagMissingNameOrEmptyMarkerReloads) {
  std::vector<BaseWant> want = {{"r/a:1", kD2}, {"r/b:1", kD1}, {"r/c:1", kD1}, {"r/a:1", kD2}};
  std::map<std::string, std::string> marker = {{"r/a:1", kD1}, {"r/b:1", kD1}};
  std::set<std::string> stored = {"r/a:1", "r/c:1"};  // r/b:1 was never finished
  auto missing = MissingBases(want, marker, stored);
  ASSERT_EQ(missing.size(), 3u);         // each once
  EXPECT_EQ(missing[0].image, "r/a:1");  // the tag moved to kD2
  EXPECT_EQ(missing[0].digest, kD2);
  EXPECT_EQ(missing[1].image, "r/b:1");  // not in the store
  EXPECT_EQ(missing[2].image, "r/c:1");  // no marker entry
}

TEST(BaseStore, MarkerRoundTripsAndMalformedReadsEmpty) {
  std::map<std::string, std::string> m = {{"r/a:1", kD1}, {"r/b@" + kD2, kD2}};
  EXPECT_EQ(ParseBaseMarker(BaseMarkerText(m)), m);
  EXPECT_TRUE(ParseBaseMarker("").empty());
  EXPECT_TRUE(ParseBaseMarker("[1,2]").empty());
  EXPECT_EQ(ParseBaseMarker(R"({"r/a:1": 5, "r/b:1": ")" + kD1 + "\"}").size(), 1u);
}

TEST(BaseStore, StoredNamesFromImagesJson) {
  auto names = StoredImageNamesFromJson(
      R"([{"id":"x","names":["r/a:1","localhost/x:latest"]},{"id":"y"},{"names":[3,"r/b:2"]}])");
  EXPECT_EQ(names, (std::set<std::string>{"r/a:1", "localhost/x:latest", "r/b:2"}));
  EXPECT_TRUE(StoredImageNamesFromJson("{").empty());
  EXPECT_TRUE(StoredImageNamesFromJson("{\"names\":[]}").empty());
}

TEST(BaseStore, BuildsMountItReadOnlyAndOnlyTheLoaderWritable) {
  const std::vector<ChildMount> ro = BuildahBuilder::BaseStoreMounts("/s/cache/bases/u999", false);
  ASSERT_EQ(ro.size(), 2u);
  EXPECT_EQ(ro[0].source, "/s/cache/bases/u999");
  EXPECT_EQ(ro[0].target, "/run/kiln-build/bases");
  EXPECT_EQ(ro[0].flags, static_cast<unsigned long>(MS_BIND));
  EXPECT_TRUE(ro[0].make_target);
  EXPECT_EQ(ro[1].target, "/run/kiln-build/bases");
  EXPECT_EQ(ro[1].flags, static_cast<unsigned long>(MS_REMOUNT | MS_BIND | MS_RDONLY));
  const std::vector<ChildMount> rw = BuildahBuilder::BaseStoreMounts("/s/cache/bases/u999", true);
  ASSERT_EQ(rw.size(), 1u);
  EXPECT_EQ(rw[0].flags, static_cast<unsigned long>(MS_BIND));
}

}  // namespace
}  // namespace kiln
