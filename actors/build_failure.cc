#include "actors/build_failure.h"

#include <algorithm>
#include <cctype>

namespace kiln {
namespace {

bool Contains(const std::string& s, const char* what) { return s.find(what) != std::string::npos; }

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

std::string Lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// A test failure rather than a compile error: go test / pytest / unittest locations.
bool LooksLikeTest(const Diagnostic& d) {
  const std::string base =
      d.file.substr(d.file.rfind('/') == std::string::npos ? 0 : d.file.rfind('/') + 1);
  return EndsWith(d.file, "_test.go") || base.rfind("test_", 0) == 0 ||
         EndsWith(base, "_test.py") || d.message.rfind("--- FAIL", 0) == 0 ||
         Contains(d.message, "FAILED ") || Contains(d.message, "AssertionError");
}

// First line of a message, bounded.
std::string FirstLine(const std::string& s, size_t max = 400) {
  std::string l = s.substr(0, s.find('\n'));
  if (l.size() > max) l = l.substr(0, max) + "...";
  return l;
}

std::string Where(const Diagnostic& d) {
  std::string w = d.file.empty() ? std::string() : d.file;
  if (!w.empty() && d.line > 0) w += ":" + std::to_string(d.line);
  if (!w.empty() && d.column > 0) w += ":" + std::to_string(d.column);
  return w;
}

std::string KindFromMessage(const std::string& msg) {
  const std::string m = Lower(msg);
  if (Contains(m, "base image")) return "base_image";
  if (Contains(m, "outputs:") || Contains(m, "output ")) return "output_missing";
  if (Contains(m, "containerfile") || Contains(m, "dockerfile")) return "containerfile";
  if (Contains(m, "limit") && (Contains(m, "tree") || Contains(m, "files")))
    return "tree_too_large";
  return "";
}

}  // namespace

std::string HostFailureIn(const std::string& output) {
  const std::string o = Lower(output);
  if (Contains(o, "no space left on device") || Contains(o, "enospc"))
    return "kiln's build host ran out of disk space (no space left on device)";
  if (Contains(o, "disk quota exceeded") || Contains(o, "edquot"))
    return "kiln's build host ran out of disk quota (disk quota exceeded)";
  if (Contains(o, "read-only file system") || Contains(o, "erofs"))
    return "a file system of kiln's build host is read-only (read-only file system)";
  if (Contains(o, "input/output error"))
    return "kiln's build host had a disk I/O error (input/output error)";
  // buildah's runtime re-executes itself from a sealed memfd; a transient EBUSY there fails the
  // step before the compiler runs (seen in CI): the host's fault, not the candidate's code.
  if (Contains(o, "sealing memfd copy"))
    return "buildah could not start the build step on kiln's build host (sealing memfd copy: "
           "device or resource busy)";
  return "";
}

std::string ScrubHostDetails(std::string text, const std::vector<std::string>& hidden) {
  std::vector<std::string> order = hidden;
  // Longest first, so that a path is replaced before a prefix of it.
  std::sort(order.begin(), order.end(),
            [](const std::string& a, const std::string& b) { return a.size() > b.size(); });
  for (const std::string& h : order) {
    if (h.size() < 2) continue;
    for (size_t at = text.find(h); at != std::string::npos; at = text.find(h, at + 6)) {
      size_t end = at + h.size();
      // The rest of the path goes with it.
      while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])) &&
             text[end] != '\'' && text[end] != '"' && text[end] != ':' && text[end] != ',' &&
             text[end] != ')')
        ++end;
      text.replace(at, end - at, "<kiln>");
    }
  }
  for (const char* scheme : {"http://", "https://"}) {
    for (size_t at = text.find(scheme); at != std::string::npos; at = text.find(scheme, at + 1)) {
      size_t end = at;
      while (end < text.size() && !std::isspace(static_cast<unsigned char>(text[end])) &&
             text[end] != '\'' && text[end] != '"' && text[end] != ')' && text[end] != ',')
        ++end;
      text.replace(at, end - at, "<internal address>");
    }
  }
  return text;
}

std::string GitPushCommand(const std::string& remote, const std::string& candidate) {
  return "git -c http.extraHeader=\"Authorization: Bearer <your token>\" push " +
         (remote.empty() ? std::string("<kiln>/git/<domain>.git") : remote) + " HEAD:refs/heads/" +
         (candidate.empty() ? std::string("<candidate>") : candidate);
}

std::string NextStepFor(const std::string& kind, const std::string& candidate,
                        const std::string& remote) {
  if (kind == "compile")
    return "fix the code at the diagnostics' locations (build_log has the full compiler output), "
           "commit, "
           "push and call build_candidate again";
  if (kind == "test")
    return "fix the failing test or the code it tests (build_log has the test output), commit, "
           "push and "
           "call build_candidate again";
  if (kind == "containerfile")
    return "fix the Containerfile (build_log shows the failing instruction and its output), "
           "commit, push "
           "and call build_candidate again";
  if (kind == "base_image")
    return "use a base image this domain allows (the error names the rule), commit, push and build "
           "again";
  if (kind == "output_missing")
    return "make the build command write every declared output inside the repository (see "
           "build_log), "
           "commit, push and build again";
  if (kind == "tree_too_large")
    return "remove the large or repeated files from the commit (the error names the limit), "
           "commit, push "
           "and build again";
  if (kind == "timeout")
    return "make the build finish within the domain's timeout (look in build_log for a step that "
           "waits "
           "or loops), then push and build again";
  if (kind == "cancelled") return "call build_candidate again when you want this candidate built";
  if (kind == "superseded")
    return "wait for the newer build (candidate_status shows it), or call build_candidate again";
  if (kind == "not_pushed")
    return "push the branch to kiln first: " + GitPushCommand(remote, candidate) +
           ", then call build_candidate again";
  if (kind == "invalid_argument")
    return "correct the arguments named in the error and call the tool again";
  return "not your code: retry later with the same call; if it keeps failing, tell the operator";
}

FailureView DescribeFailure(const FailureFacts& f) {
  FailureView v;
  const std::string msg = FirstLine(ScrubHostDetails(f.status.message(), f.hidden));
  const Status::Code code = f.status.code();
  if (code == Status::Code::kCancelled) {
    const bool superseded = f.hint == "superseded" || Contains(msg, "superseded");
    v.error_kind = superseded ? "superseded" : "cancelled";
    v.error = msg.empty() ? std::string("the build was cancelled") : msg;
  } else if (code == Status::Code::kDeadlineExceeded) {
    v.error_kind = "timeout";
    v.error = msg.empty() ? std::string("the build timed out") : msg;
  } else if (f.stage == "resolve" &&
             (code == Status::Code::kNotFound || code == Status::Code::kInvalidArgument)) {
    v.error_kind = code == Status::Code::kNotFound ? "not_pushed" : "invalid_argument";
    v.error = msg;
    // The exact push command is in next_step; the generic one in the message would only differ.
    const size_t hint = v.error.find("; push it first");
    if (v.error_kind == "not_pushed" && hint != std::string::npos && hint > 0) v.error.resize(hint);
  } else if ((f.agent_fault || f.stage == "build") &&
             !HostFailureIn(f.log_tail + "\n" + msg).empty()) {
    // A full disk during RUN is not the agent's compile failure.
    v.error_kind = "infrastructure";
    v.error = HostFailureIn(f.log_tail + "\n" + msg) + " during the build" +
              (msg.empty() ? std::string() : " (" + msg + ")");
  } else if (f.agent_fault || !f.hint.empty()) {
    v.error_kind = !f.hint.empty() ? f.hint : KindFromMessage(msg);
    size_t errors = 0;
    const Diagnostic* first = nullptr;
    bool tests = false;
    for (const Diagnostic& d : f.diagnostics) {
      if (d.severity != "error") continue;
      if (!first) first = &d;
      ++errors;
      tests = tests || LooksLikeTest(d);
    }
    if (!first && !f.diagnostics.empty()) first = &f.diagnostics.front();
    if (v.error_kind.empty()) v.error_kind = tests ? "test" : "compile";
    if (first && (v.error_kind == "compile" || v.error_kind == "test")) {
      const size_t n = errors ? errors : f.diagnostics.size();
      std::string where = Where(*first);
      // The builder's "step 3/5 (RUN go test ./...) failed with exit code 1" leads.
      const std::string step = msg.rfind("step ", 0) == 0 ? msg + ": " : std::string();
      v.error = step + std::string(v.error_kind == "test" ? "tests failed" : "the build failed") +
                " with " + std::to_string(n) + (n == 1 ? " diagnostic" : " diagnostics") +
                "; the first: " + (where.empty() ? "" : where + ": ") +
                FirstLine(first->message, 300);
    } else {
      v.error = msg.empty() ? std::string("a build step failed") : msg;
      // A failed step of another kind ("step 2/5 (RUNN ) failed") says what the builder said.
      if (first && msg.rfind("step ", 0) == 0) v.error += ": " + FirstLine(first->message, 300);
    }
  } else {
    v.error_kind = "infrastructure";
    const char* what = f.stage == "push"       ? "push the image"
                       : f.stage == "checkout" ? "check out the commit"
                       : f.stage == "resolve"  ? "read the domain's repository"
                                               : "run the build";
    v.error = std::string("kiln could not ") + what + (msg.empty() ? std::string() : ": " + msg);
  }
  v.next_step = NextStepFor(v.error_kind, f.candidate, f.remote);
  return v;
}

}  // namespace kiln
