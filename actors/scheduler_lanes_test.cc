// The scheduler actor's push lanes (real CAF scheduler): a candidate actor that stops while it
// holds a place in line gives the place back, so the builds behind it still get the lane.
#include <gtest/gtest.h>

#include <caf/actor_system.hpp>
#include <caf/actor_system_config.hpp>
#include <caf/scoped_actor.hpp>
#include <optional>

#include "actors/protocol.h"
#include "actors/scheduler_actor.h"

namespace kiln {
namespace {

struct Cfg : caf::actor_system_config {
  Cfg() {
    AddMessageTypes(*this);
    set("scheduler.max-threads", size_t{2});
    set("logger.verbosity", caf::atom("quiet"));
  }
};

// Asks for `registry`'s lane for `id`; true when granted within the (failure-only) deadline.
bool Granted(caf::actor_system& sys, const SchedulerActor& sched, const std::string& registry,
             const BuildId& id) {
  caf::scoped_actor self{sys};
  bool granted = false;
  self->request(sched, std::chrono::seconds(20), push_atom::value, registry, id)
      .receive([&](granted_atom) { granted = true; }, [&](caf::error&) { granted = false; });
  return granted;
}

// Reserves `id`'s place in `registry`'s line; true when the lane was taken for it (issue 18).
std::optional<bool> Reserve(caf::scoped_actor& self, const SchedulerActor& sched,
                            const std::string& registry, const BuildId& id) {
  std::optional<bool> taken;
  self->request(sched, std::chrono::seconds(20), reserve_atom::value, registry, id)
      .receive([&](bool t) { taken = t; }, [&](caf::error&) {});
  return taken;
}

TEST(SchedulerLanes, APlaceHeldByAStoppedCandidateIsGivenBack) {
  Cfg cfg;
  caf::actor_system sys{cfg};
  auto sched = SpawnScheduler(sys, 2, {{"a", 1}}, nullptr);
  caf::scoped_actor holder{sys};
  ASSERT_EQ(Reserve(holder, sched, "reg", "zero"), true);  // the lane was free: taken
  {
    // An earlier build took its place in line (its blobs are uploading) and its candidate
    // actor stops before it asks for the lane.
    caf::scoped_actor early{sys};
    ASSERT_EQ(Reserve(early, sched, "reg", "early"), false);  // the lane is held: a place
  }
  holder->send(sched, release_atom::value, std::string("reg"), BuildId("zero"));
  EXPECT_TRUE(Granted(sys, sched, "reg", BuildId("later")));
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
}

// Issue 18: reserving takes the lane only when it is free and nobody is ahead in line; a build
// that finds it held (or another build ahead) gets a place and uploads its blobs first.
TEST(SchedulerLanes, ReserveTakesTheLaneOnlyWhenItIsFreeAndNobodyIsAhead) {
  Cfg cfg;
  caf::actor_system sys{cfg};
  auto sched = SpawnScheduler(sys, 2, {{"a", 1}}, nullptr);
  caf::scoped_actor self{sys};
  EXPECT_EQ(Reserve(self, sched, "reg", "one"), true);
  EXPECT_EQ(Reserve(self, sched, "reg", "two"), false) << "held by one";
  EXPECT_EQ(Reserve(self, sched, "other", "three"), true) << "another registry's lane";
  self->send(sched, release_atom::value, std::string("reg"), BuildId("one"));
  // The lane is free now, but "two" (still uploading its blobs) is ahead of "four".
  EXPECT_EQ(Reserve(self, sched, "reg", "four"), false);
  EXPECT_TRUE(Granted(sys, sched, "reg", BuildId("two")));
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
}

TEST(SchedulerLanes, AHolderThatStopsReleasesTheLaneToTheNextInLine) {
  Cfg cfg;
  caf::actor_system sys{cfg};
  auto sched = SpawnScheduler(sys, 2, {{"a", 1}}, nullptr);
  std::optional<caf::scoped_actor> holder;
  holder.emplace(sys);
  bool first = false;
  (*holder)
      ->request(sched, std::chrono::seconds(20), push_atom::value, std::string("reg"),
                BuildId("one"))
      .receive([&](granted_atom) { first = true; }, [](caf::error&) {});
  ASSERT_TRUE(first);
  holder.reset();  // the holder stops without a release
  EXPECT_TRUE(Granted(sys, sched, "reg", BuildId("two")));
  caf::anon_send_exit(sched, caf::exit_reason::user_shutdown);
}

}  // namespace
}  // namespace kiln
