// WorkerAdmission (issue 20): whether a `kiln worker` takes one more build or push, or answers
// "worker busy" at once. Builds run on a pool of `slots` threads and pushes on another of
// `slots` threads; beyond those, up to `slots` more of each wait in line (the scheduler's
// view of a worker's free slots can lag its answers by a message, and a push follows its build
// while the next build already arrives). A request past that is refused, never queued without
// bound: the worker's threads and memory stay bounded whatever a scheduler sends.
//
// Pure state, no I/O, no clock. Not thread-safe: the worker's published actor owns it.
#pragma once

#include <string>

namespace kiln {

class WorkerAdmission {
 public:
  enum class Op { kBuild, kPush };

  /// `slots` (worker.slots, >= 1): how many of each op run at once; as many more may wait.
  explicit WorkerAdmission(int slots);

  /// Takes a place for one `op` and returns true, or returns false (full: answer busy).
  bool Admit(Op op);
  /// Gives back the place of an admitted `op` that ended.
  void Done(Op op);

  int in(Op op) const { return op == Op::kBuild ? builds_ : pushes_; }
  int limit() const { return 2 * slots_; }
  /// Why a request of `op` was refused, for its answer.
  std::string BusyMessage(Op op, const std::string& worker) const;

 private:
  int slots_;
  int builds_ = 0;
  int pushes_ = 0;
};

}  // namespace kiln
