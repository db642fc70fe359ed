#include "builder/diagnostics.h"

#include <climits>
#include <set>
#include <tuple>

namespace kiln {
namespace {

// Work per line is bounded: longer lines are cut before parsing.
constexpr size_t kMaxLineBytes = 16 * 1024;
constexpr size_t kMaxMessageBytes = 4096;
constexpr size_t kMaxFileBytes = 1024;

bool StartsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(0, p.size(), p) == 0;
}
bool EndsWith(std::string_view s, std::string_view p) {
  return s.size() >= p.size() && s.compare(s.size() - p.size(), p.size(), p) == 0;
}
bool IsDigit(char c) { return c >= '0' && c <= '9'; }
bool IsSpace(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\v' || c == '\f'; }

std::string_view TrimLeft(std::string_view s) {
  while (!s.empty() && IsSpace(s.front())) s.remove_prefix(1);
  return s;
}
std::string_view TrimRight(std::string_view s) {
  while (!s.empty() && IsSpace(s.back())) s.remove_suffix(1);
  return s;
}
std::string_view Trim(std::string_view s) { return TrimRight(TrimLeft(s)); }

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid.
size_t Utf8SeqLen(std::string_view s, size_t i) {
  auto b = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  unsigned char c = b(i);
  if (c < 0x80) return 1;
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;  // no surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (b(i + 1) < lo || b(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (b(i + k) < 0x80 || b(i + k) > 0xBF) return 0;
  }
  return n;
}

// Valid UTF-8 without control characters, at most `max_bytes` of input considered.
std::string Sanitize(std::string_view s, size_t max_bytes) {
  if (s.size() > max_bytes) s = s.substr(0, max_bytes);
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size();) {
    size_t n = Utf8SeqLen(s, i);
    if (n == 0) {
      out += "\xEF\xBF\xBD";  // U+FFFD
      ++i;
      continue;
    }
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (n == 1 && (c < 0x20 || c == 0x7F)) {
      out += ' ';
    } else {
      out.append(s.data() + i, n);
    }
    i += n;
  }
  return out;
}

// Parses a decimal int in [0, INT_MAX]; false on overflow or empty input.
bool ParseInt(std::string_view digits, int* out) {
  if (digits.empty()) return false;
  long long v = 0;
  for (char c : digits) {
    v = v * 10 + (c - '0');
    if (v > INT_MAX) return false;
  }
  *out = static_cast<int>(v);
  return true;
}

std::string NormalizePath(std::string_view path, const DiagnosticsOptions& opts) {
  for (const std::string& root : opts.source_roots) {
    if (root.empty()) continue;
    std::string r = root;
    if (r.back() != '/') r += '/';
    if (StartsWith(path, r) && path.size() > r.size()) {
      path.remove_prefix(r.size());
      break;
    }
  }
  while (StartsWith(path, "./") && path.size() > 2) path.remove_prefix(2);
  return Sanitize(path, kMaxFileBytes);
}

// Splits "error: msg" style prefixes off `rest`. Returns the severity and the message.
std::pair<std::string, std::string_view> SplitSeverity(std::string_view rest,
                                                       const char* default_severity) {
  static const std::pair<std::string_view, const char*> kPrefixes[] = {
      {"fatal error:", "error"}, {"error:", "error"}, {"warning:", "warning"},
      {"note:", "note"},         {"remark:", "note"}, {"sorry, unimplemented:", "error"},
  };
  rest = TrimLeft(rest);
  for (const auto& [prefix, severity] : kPrefixes) {
    if (StartsWith(rest, prefix)) return {severity, Trim(rest.substr(prefix.size()))};
  }
  return {default_severity, Trim(rest)};
}

// The basename of the token before the first ": ", when `line` starts with a tool name.
std::string_view ToolName(std::string_view line, std::string_view* rest) {
  size_t colon = line.find(": ");
  if (colon == std::string_view::npos || colon == 0) return {};
  std::string_view tool = line.substr(0, colon);
  if (tool.find(' ') != std::string_view::npos) return {};
  size_t slash = tool.rfind('/');
  if (slash != std::string_view::npos) tool.remove_prefix(slash + 1);
  *rest = line.substr(colon + 2);
  return tool;
}

bool IsLinkerName(std::string_view tool) {
  // ld, ld.bfd, ld.gold, ld.lld, x86_64-linux-gnu-ld, ...
  return tool == "ld" || StartsWith(tool, "ld.") || EndsWith(tool, "-ld") ||
         tool.find("-ld.") != std::string_view::npos;
}

bool IsDriverName(std::string_view tool) {
  static const std::string_view kDrivers[] = {"gcc",     "g++",      "cc",  "c++",    "clang",
                                              "clang++", "collect2", "cc1", "cc1plus"};
  // Strip a target prefix ("x86_64-linux-gnu-g++") and a version suffix ("g++-12").
  for (std::string_view d : kDrivers) {
    size_t pos = tool.find(d);
    while (pos != std::string_view::npos) {
      bool left_ok = pos == 0 || tool[pos - 1] == '-';
      size_t end = pos + d.size();
      bool right_ok = end == tool.size() ||
                      (tool[end] == '-' && end + 1 < tool.size() && IsDigit(tool[end + 1]));
      if (left_ok && right_ok) return true;
      pos = tool.find(d, pos + 1);
    }
  }
  return false;
}

// Accumulates results: dedupes, bounds, and keeps summary lines aside.
class Collector {
 public:
  explicit Collector(const DiagnosticsOptions& opts) : opts_(opts) {}

  void Add(std::string_view file, int line, int column, std::string severity,
           std::string_view message) {
    Diagnostic d;
    d.file = file.empty() ? std::string() : NormalizePath(file, opts_);
    d.line = line;
    d.column = column;
    d.severity = std::move(severity);
    d.message = Sanitize(message, kMaxMessageBytes);
    if (d.message.empty()) return;
    if (d.severity == "error") saw_error_ = true;
    Push(std::move(d), &out_, &seen_);
  }

  void AddSummary(std::string_view message) {
    Diagnostic d;
    d.severity = "error";
    d.message = Sanitize(message, kMaxMessageBytes);
    if (d.message.empty()) return;
    Push(std::move(d), &summaries_, &summary_seen_);
  }

  bool full() const { return out_.size() >= opts_.max_diagnostics; }

  std::vector<Diagnostic> Finish() {
    if (!saw_error_) {
      for (Diagnostic& d : summaries_) {
        if (full()) break;
        Push(std::move(d), &out_, &seen_);
      }
    }
    return std::move(out_);
  }

 private:
  using Key = std::tuple<std::string, int, int, std::string, std::string>;

  void Push(Diagnostic d, std::vector<Diagnostic>* list, std::set<Key>* seen) {
    if (list->size() >= opts_.max_diagnostics) return;
    if (!seen->emplace(d.file, d.line, d.column, d.severity, d.message).second) return;
    list->push_back(std::move(d));
  }

  const DiagnosticsOptions& opts_;
  std::vector<Diagnostic> out_;
  std::set<Key> seen_;
  std::vector<Diagnostic> summaries_;
  std::set<Key> summary_seen_;
  bool saw_error_ = false;
};

// "x.cc:(.text+0x1c): msg" -> msg, for linker messages that name an object section. Unless
// `anywhere`, the section must follow the line's first word.
bool SplitSectionMessage(std::string_view s, bool anywhere, std::string_view* message) {
  size_t open = s.find(":(.");
  if (open == std::string_view::npos) return false;
  if (!anywhere && s.substr(0, open).find(' ') != std::string_view::npos) return false;
  size_t close = s.find("): ", open);
  if (close == std::string_view::npos) return false;
  *message = s.substr(close + 3);
  return true;
}

void ParseLinkerRest(std::string_view rest, Collector* out) {
  rest = Trim(rest);
  // "/tmp/cc.o: in function `main':" only gives context for the next line.
  if (EndsWith(rest, "':") && rest.find("in function ") != std::string_view::npos) return;
  std::string_view message;
  if (SplitSectionMessage(rest, /*anywhere=*/true, &message)) {
    auto [severity, msg] = SplitSeverity(message, "error");
    out->Add("", 0, 0, severity, msg);
    return;
  }
  for (std::string_view sev : {std::string_view("warning: "), std::string_view("error: ")}) {
    size_t pos = rest.find(sev);
    if (pos != std::string_view::npos) {
      out->Add("", 0, 0, std::string(sev.substr(0, sev.size() - 2)), rest.substr(pos + sev.size()));
      return;
    }
  }
  out->Add("", 0, 0, "error", rest);
}

// Matches "path:line[:col]: rest". Returns false if the line is not of that shape or a number
// overflows.
bool ParseLocation(std::string_view line, std::string_view* path, int* lineno, int* col,
                   std::string_view* rest) {
  for (size_t i = 1; i + 1 < line.size(); ++i) {
    if (line[i] != ':') continue;
    if (line[i + 1] == ' ') return false;  // a "word: " before any location: not a diagnostic
    if (!IsDigit(line[i + 1])) continue;
    size_t j = i + 1;
    while (j < line.size() && IsDigit(line[j])) ++j;
    if (j >= line.size() || line[j] != ':') continue;
    std::string_view p = line.substr(0, i);
    if (p.find("://") != std::string_view::npos) return false;
    if (!ParseInt(line.substr(i + 1, j - i - 1), lineno)) return false;
    *col = 0;
    size_t k = j + 1;
    size_t m = k;
    while (m < line.size() && IsDigit(line[m])) ++m;
    if (m > k && m < line.size() && line[m] == ':') {
      if (!ParseInt(line.substr(k, m - k), col)) return false;
      k = m + 1;
    }
    if (k >= line.size() || line[k] != ' ') return false;
    *path = p;
    *rest = line.substr(k);
    return true;
  }
  return false;
}

// "[1/2] STEP 3/5: ..." or "STEP 3/5: ...".
bool IsBuildahStep(std::string_view line) {
  if (StartsWith(line, "[")) {
    size_t close = line.find("] ");
    if (close == std::string_view::npos) return false;
    line.remove_prefix(close + 2);
  }
  return StartsWith(line, "STEP ");
}

void ParseLine(std::string_view line, Collector* out) {
  if (line.empty() || IsSpace(line.front())) return;  // snippets, carets, continuations
  if (StartsWith(line, "# ")) return;                 // go package header
  if (IsBuildahStep(line)) return;
  if (StartsWith(line, "In file included from")) return;
  if (StartsWith(line, "vet: ")) line.remove_prefix(5);

  if (line.find("building at STEP \"") != std::string_view::npos &&
      (StartsWith(line, "Error: ") || StartsWith(line, "error building at STEP"))) {
    if (StartsWith(line, "Error: ")) line.remove_prefix(7);
    out->AddSummary(line);
    return;
  }

  std::string_view rest;
  std::string_view tool = ToolName(line, &rest);
  if (!tool.empty() && IsLinkerName(tool)) {
    ParseLinkerRest(rest, out);
    return;
  }
  if (!tool.empty() && IsDriverName(tool)) {
    auto [severity, msg] = SplitSeverity(rest, "");
    if (severity.empty()) return;
    if (msg.find("ld returned") != std::string_view::npos ||
        msg.find("linker command failed") != std::string_view::npos) {
      out->AddSummary(line);
    } else {
      out->Add("", 0, 0, severity, msg);
    }
    return;
  }

  std::string_view message;
  if (SplitSectionMessage(line, /*anywhere=*/false,
                          &message)) {  // "x.cc:(.text+0xa): undefined reference to ..."
    auto [severity, msg] = SplitSeverity(message, "error");
    out->Add("", 0, 0, severity, msg);
    return;
  }

  std::string_view path;
  int lineno = 0, col = 0;
  if (!ParseLocation(line, &path, &lineno, &col, &rest)) return;
  auto [severity, msg] = SplitSeverity(rest, "error");
  if (msg == "too many errors") return;  // go's truncation notice, not a diagnostic
  out->Add(path, lineno, col, severity, msg);
}

// Cleans one raw output line: cut to a bounded length, ANSI codes out, terminal "\r" overwrite
// semantics (only the text after the last '\r' is visible), trailing blanks out.
std::string CleanLine(std::string_view raw) {
  if (raw.size() > kMaxLineBytes) raw = raw.substr(0, kMaxLineBytes);
  while (!raw.empty() && raw.back() == '\r') raw.remove_suffix(1);
  std::string s = StripAnsi(raw);
  size_t cr = s.rfind('\r');
  if (cr != std::string::npos) s.erase(0, cr + 1);
  return std::string(TrimRight(s));
}

}  // namespace

std::string StripAnsi(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\x1b') {
      out += s[i];
      continue;
    }
    if (i + 1 >= s.size()) break;
    char kind = s[i + 1];
    if (kind == '[') {  // CSI: parameters and intermediates, then one final byte
      size_t j = i + 2;
      while (j < s.size() && static_cast<unsigned char>(s[j]) >= 0x20 &&
             static_cast<unsigned char>(s[j]) <= 0x3F)
        ++j;
      i = j < s.size() ? j : s.size();
    } else if (kind == ']') {  // OSC: until BEL or ESC '\'
      size_t j = i + 2;
      while (j < s.size() && s[j] != '\a' && !(s[j] == '\x1b' && j + 1 < s.size())) ++j;
      if (j < s.size() && s[j] == '\x1b') ++j;
      i = j;
    } else {
      i += 1;  // two-byte escape
    }
  }
  return out;
}

std::vector<Diagnostic> ParseDiagnostics(std::string_view build_output,
                                         const DiagnosticsOptions& opts) {
  Collector out(opts);
  size_t start = 0;
  while (start < build_output.size() && !out.full()) {
    size_t nl = build_output.find('\n', start);
    if (nl == std::string_view::npos) nl = build_output.size();
    std::string line = CleanLine(build_output.substr(start, nl - start));
    ParseLine(line, &out);
    start = nl + 1;
  }
  return out.Finish();
}

nlohmann::json ToJson(const Diagnostic& d) {
  nlohmann::json j;
  j["file"] = d.file;
  j["line"] = d.line;
  j["column"] = d.column;
  j["severity"] = d.severity;
  j["message"] = d.message;
  return j;
}

}  // namespace kiln
