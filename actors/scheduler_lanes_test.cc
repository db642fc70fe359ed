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

TEST(SchedulerLanes, APlaceHeldByAStoppedCandidateIsGivenBack) {
  Cfg cfg;
  caf::actor_system sys{cfg};
  auto sched = SpawnScheduler(sys, 2, {{"a", 1}}, nullptr);
  {
    // An earlier build took its place in line (its blobs are uploading) and its candidate
    // actor stops before it asks for the lane.
    caf::scoped_actor early{sys};
    early->send(sched, reserve_atom::value, std::string("reg"), BuildId("early"));
    // Every message of `early` before this answer has been handled: the place is taken.
    early->request(sched, std::chrono::seconds(20), stats_atom::value)
        .receive([](const SchedulerStats&) {}, [](caf::error&) {});
  }
  EXPECT_TRUE(Granted(sys, sched, "reg", BuildId("later")));
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
