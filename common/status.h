// Status: the one error type of kiln's plain (non-actor) code, after LevelDB's Status.
// A value type; copyable; thread-compatible (no shared state).
#pragma once

#include <string>
#include <utility>

namespace kiln {

class Status {
 public:
  enum class Code {
    kOk = 0,
    kInvalidArgument,  // bad input from a caller (agent, operator, config)
    kNotFound,         // no such candidate, build, ref, file
    kFailedPrecondition,
    kUnavailable,  // a dependency (registry, builder, git) cannot be reached
    kCancelled,
    kDeadlineExceeded,
    kPermissionDenied,
    kResourceExhausted,  // a limit was hit
    kInternal,
  };

  Status() = default;
  static Status Ok() { return Status(); }
  static Status InvalidArgument(std::string m) {
    return Status(Code::kInvalidArgument, std::move(m));
  }
  static Status NotFound(std::string m) { return Status(Code::kNotFound, std::move(m)); }
  static Status FailedPrecondition(std::string m) {
    return Status(Code::kFailedPrecondition, std::move(m));
  }
  static Status Unavailable(std::string m) { return Status(Code::kUnavailable, std::move(m)); }
  static Status Cancelled(std::string m) { return Status(Code::kCancelled, std::move(m)); }
  static Status DeadlineExceeded(std::string m) {
    return Status(Code::kDeadlineExceeded, std::move(m));
  }
  static Status PermissionDenied(std::string m) {
    return Status(Code::kPermissionDenied, std::move(m));
  }
  static Status ResourceExhausted(std::string m) {
    return Status(Code::kResourceExhausted, std::move(m));
  }
  static Status Internal(std::string m) { return Status(Code::kInternal, std::move(m)); }

  bool ok() const { return code_ == Code::kOk; }
  Code code() const { return code_; }
  const std::string& message() const { return message_; }
  /// "invalid argument: <message>" style text, or "ok".
  std::string ToString() const;
  static const char* CodeName(Code c);

 private:
  Status(Code c, std::string m) : code_(c), message_(std::move(m)) {}
  Code code_ = Code::kOk;
  std::string message_;
};

inline const char* Status::CodeName(Code c) {
  switch (c) {
    case Code::kOk:
      return "ok";
    case Code::kInvalidArgument:
      return "invalid argument";
    case Code::kNotFound:
      return "not found";
    case Code::kFailedPrecondition:
      return "failed precondition";
    case Code::kUnavailable:
      return "unavailable";
    case Code::kCancelled:
      return "cancelled";
    case Code::kDeadlineExceeded:
      return "deadline exceeded";
    case Code::kPermissionDenied:
      return "permission denied";
    case Code::kResourceExhausted:
      return "resource exhausted";
    case Code::kInternal:
      return "internal";
  }
  return "unknown";
}

inline std::string Status::ToString() const {
  if (ok()) return "ok";
  return std::string(CodeName(code_)) + ": " + message_;
}

}  // namespace kiln
