// WorkerAdmission: a worker takes `slots` running plus `slots` waiting of each op, refuses
// the next, and takes one again once one ended; builds and pushes are counted apart.
#include "pool/worker_admission.h"

#include <gtest/gtest.h>

namespace kiln {
namespace {

using Op = WorkerAdmission::Op;

TEST(WorkerAdmission, TakesTwiceTheSlotsThenRefuses) {
  WorkerAdmission a(2);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(a.Admit(Op::kBuild)) << i;
  EXPECT_FALSE(a.Admit(Op::kBuild));
  EXPECT_EQ(a.in(Op::kBuild), 4);
  a.Done(Op::kBuild);
  EXPECT_TRUE(a.Admit(Op::kBuild));
  EXPECT_FALSE(a.Admit(Op::kBuild));
}

TEST(WorkerAdmission, PushesAreCountedApartFromBuilds) {
  WorkerAdmission a(1);
  EXPECT_TRUE(a.Admit(Op::kBuild));
  EXPECT_TRUE(a.Admit(Op::kBuild));
  EXPECT_FALSE(a.Admit(Op::kBuild));
  // A full build line does not stop the push of a build that ended.
  EXPECT_TRUE(a.Admit(Op::kPush));
  EXPECT_TRUE(a.Admit(Op::kPush));
  EXPECT_FALSE(a.Admit(Op::kPush));
  a.Done(Op::kPush);
  EXPECT_EQ(a.in(Op::kPush), 1);
  EXPECT_EQ(a.in(Op::kBuild), 2);
}

TEST(WorkerAdmission, DoneNeverGoesBelowZeroAndSlotsAtLeastOne) {
  WorkerAdmission a(0);
  EXPECT_EQ(a.limit(), 2);
  a.Done(Op::kBuild);
  EXPECT_EQ(a.in(Op::kBuild), 0);
  EXPECT_TRUE(a.Admit(Op::kBuild));
  EXPECT_TRUE(a.Admit(Op::kBuild));
  EXPECT_FALSE(a.Admit(Op::kBuild));
  EXPECT_NE(a.BusyMessage(Op::kBuild, "w1").find("worker w1 busy: 2 builds"), std::string::npos)
      << a.BusyMessage(Op::kBuild, "w1");
}

}  // namespace
}  // namespace kiln
