#include "pool/worker_admission.h"

#include <algorithm>

namespace kiln {

WorkerAdmission::WorkerAdmission(int slots) : slots_(std::max(1, slots)) {}

bool WorkerAdmission::Admit(Op op) {
  int& n = op == Op::kBuild ? builds_ : pushes_;
  if (n >= limit()) return false;
  ++n;
  return true;
}

void WorkerAdmission::Done(Op op) {
  int& n = op == Op::kBuild ? builds_ : pushes_;
  if (n > 0) --n;
}

std::string WorkerAdmission::BusyMessage(Op op, const std::string& worker) const {
  const char* what = op == Op::kBuild ? "builds" : "pushes";
  return "worker " + worker + " busy: " + std::to_string(in(op)) + " " + what +
         " running or waiting (worker.slots = " + std::to_string(slots_) + " at once, as many " +
         "waiting); it did not start this one";
}

}  // namespace kiln
