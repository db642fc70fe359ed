#include "builder/diagnostics.h"

#include <algorithm>
#include <climits>
#include <set>
#include <tuple>

#include "common/json_text.h"

namespace kiln {
namespace {

// Work per line is bounded: longer lines are cut before parsing.
constexpr size_t kMaxLineBytes = 16 * 1024;
// Raw text gathered for one message (before the per-message bound) is bounded too.
constexpr size_t kMaxRawMessageBytes = 16 * 1024;
// Internal bound on collected diagnostics before out-of-repo filtering and the final cut.
constexpr size_t kMaxCollected = 4096;
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

// Length of the valid UTF-8 sequence starting at s[i], or 0 if invalid (common/json_text.h).
size_t Utf8SeqLen(std::string_view s, size_t i) {
  Utf8Unit u = Utf8UnitAt(s.substr(i));
  return u.valid ? u.length : 0;
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
  std::vector<const std::string*> roots;
  if (!opts.repo_root.empty()) roots.push_back(&opts.repo_root);
  for (const std::string& root : opts.source_roots) roots.push_back(&root);
  for (const std::string* rootp : roots) {
    const std::string& root = *rootp;
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

// Cuts `s` to at most `max` bytes without splitting a UTF-8 sequence. True if it cut.
bool CutUtf8(std::string* s, size_t max) {
  if (s->size() <= max) return false;
  size_t n = max;
  while (n > 0 && (static_cast<unsigned char>((*s)[n]) & 0xC0) == 0x80) --n;
  s->resize(n);
  return true;
}

bool IsAbsolute(std::string_view path) { return !path.empty() && path.front() == '/'; }

// Object files and archives name no source the agent can edit.
bool IsObjectFile(std::string_view path) {
  return path.empty() || EndsWith(path, ".o") || EndsWith(path, ".a") || EndsWith(path, ".so") ||
         EndsWith(path, ".obj") || path.find(".so.") != std::string_view::npos ||
         path.find('(') != std::string_view::npos;
}

// Accumulates results: dedupes, bounds, and keeps summary lines aside.
class Collector {
 public:
  explicit Collector(const DiagnosticsOptions& opts) : opts_(opts) {}

  void Add(std::string_view file, int line, int column, std::string severity,
           std::string_view message, std::string_view code = {}) {
    Diagnostic d;
    d.file = file.empty() ? std::string() : NormalizePath(file, opts_);
    d.line = line;
    d.column = column;
    d.severity = std::move(severity);
    d.message = Sanitize(message, kMaxRawMessageBytes);
    d.code = Sanitize(code, 64);
    if (d.message.empty()) return;
    if (d.severity == "error") saw_error_ = true;
    Push(std::move(d), &out_, &seen_);
  }

  void AddSummary(std::string_view message) {
    Diagnostic d;
    d.severity = "error";
    d.message = Sanitize(message, kMaxRawMessageBytes);
    if (d.message.empty()) return;
    Push(std::move(d), &summaries_, &summary_seen_);
  }

  bool full() const { return out_.size() >= Cap(); }

  DiagnosticsResult Finish() {
    DiagnosticsResult r;
    r.truncated = overflow_;
    if (!saw_error_) {
      for (Diagnostic& d : summaries_) Push(std::move(d), &out_, &seen_);
    }
    // Diagnostics in absolute paths outside the repository (system headers, the standard
    // library) are context: they only get the slots in-repo ones leave free.
    size_t high = 0;
    for (const Diagnostic& d : out_) high += !IsAbsolute(d.file);
    size_t high_slots = std::min(high, opts_.max_diagnostics);
    size_t low_slots = opts_.max_diagnostics - high_slots;
    size_t high_taken = 0, low_taken = 0;
    for (Diagnostic& d : out_) {
      size_t& taken = IsAbsolute(d.file) ? low_taken : high_taken;
      if (taken >= (IsAbsolute(d.file) ? low_slots : high_slots)) {
        r.truncated = true;
        continue;
      }
      ++taken;
      d.truncated = CutUtf8(&d.message, opts_.max_message_bytes);
      r.diagnostics.push_back(std::move(d));
    }
    return r;
  }

 private:
  using Key = std::tuple<std::string, int, int, std::string, std::string>;

  size_t Cap() const {
    return std::min(kMaxCollected, std::max(opts_.max_diagnostics * 2, opts_.max_diagnostics + 64));
  }

  void Push(Diagnostic d, std::vector<Diagnostic>* list, std::set<Key>* seen) {
    if (list->size() >= Cap()) {
      overflow_ = true;
      return;
    }
    if (!seen->emplace(d.file, d.line, d.column, d.severity, d.message).second) return;
    list->push_back(std::move(d));
  }

  const DiagnosticsOptions& opts_;
  std::vector<Diagnostic> out_;
  std::set<Key> seen_;
  std::vector<Diagnostic> summaries_;
  std::set<Key> summary_seen_;
  bool saw_error_ = false;
  bool overflow_ = false;
};

// "x.cc:(.text+0x1c): msg" -> msg, for linker messages that name an object section. Unless
// `anywhere`, the section must follow the line's first word. `*file` is the word before the
// section ("x.cc"), "" when that names an object file or archive member.
bool SplitSectionMessage(std::string_view s, bool anywhere, std::string_view* message,
                         std::string_view* file) {
  size_t open = s.find(":(.");
  if (open == std::string_view::npos) return false;
  std::string_view before = s.substr(0, open);
  if (!anywhere && before.find(' ') != std::string_view::npos) return false;
  size_t close = s.find("): ", open);
  if (close == std::string_view::npos) return false;
  *message = s.substr(close + 3);
  size_t space = before.rfind(' ');
  if (space != std::string_view::npos) before.remove_prefix(space + 1);
  *file = IsObjectFile(before) ? std::string_view() : before;
  return true;
}

// Matches "path:line[:col]: rest". Returns false if the line is not of that shape or a number
// overflows. With `allow_empty_rest`, "path:line:" (nothing after) matches too (rest "").
bool ParseLocation(std::string_view line, std::string_view* path, int* lineno, int* col,
                   std::string_view* rest, bool allow_empty_rest = false) {
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
    if (allow_empty_rest && k >= line.size()) {
      *path = p;
      *rest = {};
      return true;
    }
    if (k >= line.size() || line[k] != ' ') return false;
    *path = p;
    *rest = line.substr(k);
    return true;
  }
  return false;
}

// "path:line:col" exactly (rustc's " --> " target, tsc's related locations).
bool ParseBareLocation(std::string_view s, std::string_view* path, int* lineno, int* col) {
  size_t c2 = s.rfind(':');
  if (c2 == std::string_view::npos || c2 == 0) return false;
  size_t c1 = s.rfind(':', c2 - 1);
  if (c1 == std::string_view::npos || c1 == 0) return false;
  std::string_view l = s.substr(c1 + 1, c2 - c1 - 1), c = s.substr(c2 + 1);
  if (l.empty() || c.empty()) return false;
  for (char ch : l)
    if (!IsDigit(ch)) return false;
  for (char ch : c)
    if (!IsDigit(ch)) return false;
  if (!ParseInt(l, lineno) || !ParseInt(c, col)) return false;
  *path = s.substr(0, c1);
  return !path->empty() && path->find(' ') == std::string_view::npos;
}

void ParseLinkerRest(std::string_view rest, Collector* out) {
  rest = Trim(rest);
  // "/tmp/cc.o: in function `main':" only gives context for the next line.
  if (EndsWith(rest, "':") && rest.find("in function ") != std::string_view::npos) return;
  std::string_view path, message, file;
  int lineno = 0, col = 0;
  if (ParseLocation(rest, &path, &lineno, &col, &message)) {  // "/src/x.c:5: undefined ..."
    auto [severity, msg] = SplitSeverity(message, "error");
    out->Add(path, lineno, col, severity, msg);
    return;
  }
  if (SplitSectionMessage(rest, /*anywhere=*/true, &message, &file)) {
    auto [severity, msg] = SplitSeverity(message, "error");
    out->Add(file, 0, 0, severity, msg);
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

// "[1/2] STEP 3/5: ..." or "STEP 3/5: ...".
bool IsBuildahStep(std::string_view line) {
  if (StartsWith(line, "[")) {
    size_t close = line.find("] ");
    if (close == std::string_view::npos) return false;
    line.remove_prefix(close + 2);
  }
  return StartsWith(line, "STEP ");
}

bool IsIdentChar(char c) {
  return IsDigit(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_';
}

// "NameError: ...", "json.decoder.JSONDecodeError: ...", "KeyboardInterrupt": a Python
// exception line. `*type` is the dotted name.
bool IsExceptionLine(std::string_view line, std::string_view* type) {
  size_t i = 0;
  while (i < line.size() && (IsIdentChar(line[i]) || line[i] == '.')) ++i;
  if (i == 0 || IsDigit(line[0]) || line[0] == '.') return false;
  if (i != line.size() && line.substr(i, 2) != ": ") return false;
  *type = line.substr(0, i);
  // Exception class names are capitalised in their last component.
  size_t dot = type->rfind('.');
  char first = (*type)[dot == std::string_view::npos ? 0 : dot + 1];
  return first >= 'A' && first <= 'Z';
}

// "TS2322: rest" -> code "TS2322".
bool SplitTsCode(std::string_view s, std::string_view* code) {
  if (!StartsWith(s, "TS")) return false;
  size_t i = 2;
  while (i < s.size() && IsDigit(s[i])) ++i;
  if (i == 2 || s.substr(i, 1) != ":") return false;
  *code = s.substr(0, i);
  return true;
}

const char* TsSeverity(std::string_view word) {
  if (word == "error") return "error";
  if (word == "warning") return "warning";
  if (word == "message" || word == "suggestion") return "note";
  return nullptr;
}

// tsc: "src/a.ts(12,7): error TS2322: msg" or "src/a.ts:12:7 - error TS2322: msg".
bool ParseTsc(std::string_view line, Collector* out) {
  std::string_view path, after;
  int lineno = 0, col = 0;
  size_t dash = line.find(" - ");
  size_t paren = line.find('(');
  if (paren != std::string_view::npos && paren > 0 &&
      line.find("): ", paren) != std::string_view::npos) {
    size_t comma = line.find(',', paren);
    size_t close = line.find("): ", paren);
    if (comma == std::string_view::npos || comma > close) return false;
    std::string_view l = line.substr(paren + 1, comma - paren - 1);
    std::string_view c = line.substr(comma + 1, close - comma - 1);
    for (char ch : l)
      if (!IsDigit(ch)) return false;
    for (char ch : c)
      if (!IsDigit(ch)) return false;
    if (!ParseInt(l, &lineno) || !ParseInt(c, &col)) return false;
    path = line.substr(0, paren);
    after = line.substr(close + 3);
  } else if (dash != std::string_view::npos) {
    if (!ParseBareLocation(line.substr(0, dash), &path, &lineno, &col)) return false;
    after = line.substr(dash + 3);
  } else {
    return false;
  }
  size_t sp = after.find(' ');
  if (sp == std::string_view::npos) return false;
  const char* severity = TsSeverity(after.substr(0, sp));
  std::string_view msg = TrimLeft(after.substr(sp + 1)), code;
  if (severity == nullptr || !SplitTsCode(msg, &code)) return false;
  out->Add(path, lineno, col, severity, msg, code);
  return true;
}

// flake8: "E302 expected ..." -> code "E302".
bool SplitFlake8Code(std::string_view rest, std::string_view* code) {
  size_t i = 0;
  while (i < rest.size() && rest[i] >= 'A' && rest[i] <= 'Z') ++i;
  size_t letters = i;
  while (i < rest.size() && IsDigit(rest[i])) ++i;
  if (letters == 0 || letters > 3 || i == letters || i >= rest.size() || rest[i] != ' ')
    return false;
  *code = rest.substr(0, i);
  return true;
}

// mypy: "... message  [code]" -> "code".
std::string_view MypyCode(std::string_view msg) {
  if (!EndsWith(msg, "]")) return {};
  size_t open = msg.rfind("  [");
  if (open == std::string_view::npos) return {};
  std::string_view code = msg.substr(open + 3, msg.size() - open - 4);
  for (char c : code)
    if (!IsIdentChar(c) && c != '-') return {};
  return code;
}

// Line-oriented parser with the little state multi-line formats need (rustc headers, javac
// carets, Python tracebacks, pytest failure sections, go test output).
class Parser {
 public:
  Parser(const DiagnosticsOptions& opts, Collector* out) : opts_(opts), out_(out) {}

  void Line(std::string_view line) {
    if (rust_.active) {
      std::string_view t = TrimLeft(line);
      if (StartsWith(t, "--> ")) {
        FinishRust(t.substr(4));
        return;
      }
      FinishRust({});
    }
    if (java_.active) {
      if (!line.empty() && IsSpace(line.front())) {
        JavaContinuation(line);
        return;
      }
      FlushJava();
    }
    if (PythonTraceback(line)) return;
    if (GoTest(line)) return;
    if (Pytest(line)) return;
    Generic(line);
  }

  void End() {
    FinishRust({});
    FlushJava();
    FlushGoTests({});
  }

 private:
  // --- rustc / cargo -------------------------------------------------------------------------
  // "error[E0308]: msg", "warning: msg", "note: msg", "help: msg".
  bool RustHeader(std::string_view line) {
    static const std::pair<std::string_view, const char*> kWords[] = {
        {"error", "error"}, {"warning", "warning"}, {"note", "note"}, {"help", "note"}};
    for (const auto& [word, severity] : kWords) {
      if (!StartsWith(line, word)) continue;
      std::string_view rest = line.substr(word.size());
      std::string_view code;
      if (StartsWith(rest, "[")) {
        size_t close = rest.find("]: ");
        if (close == std::string_view::npos || close < 2) return false;
        code = rest.substr(1, close - 1);
        for (char c : code)
          if (!IsIdentChar(c)) return false;
        rest = rest.substr(close + 1);
      }
      if (!StartsWith(rest, ": ")) return false;
      rust_ = {};
      rust_.active = true;
      rust_.severity = severity;
      rust_.code = std::string(code);
      std::string_view text = Trim(rest.substr(2));
      rust_.message =
          code.empty() ? std::string(text) : std::string(code) + ": " + std::string(text);
      rust_.line = std::string(line);
      return true;
    }
    return false;
  }

  // `location` is the text after " --> ", or "" when the header had none.
  void FinishRust(std::string_view location) {
    if (!rust_.active) return;
    rust_.active = false;
    std::string_view path;
    int lineno = 0, col = 0;
    if (!location.empty() && ParseBareLocation(Trim(location), &path, &lineno, &col)) {
      out_->Add(path, lineno, col, rust_.severity, rust_.message, rust_.code);
    } else if (rust_.severity == "error") {
      // "error: could not compile ...", "error: aborting due to ...", tool errors.
      out_->AddSummary(rust_.line);
    }
  }

  // --- javac -----------------------------------------------------------------------------------
  void JavaContinuation(std::string_view line) {
    if (java_.lines++ == 0) {
      java_.snippet = std::string(line);
      return;
    }
    std::string_view t = Trim(line);
    if (t == "^" && java_.d.column == 0) {
      size_t caret = line.find('^');
      // javac echoes the source line as is; the caret's offset is the column (1-based).
      if (caret != std::string_view::npos && java_.snippet.find('\t') == std::string::npos &&
          caret < 100000)
        java_.d.column = static_cast<int>(caret) + 1;
      return;
    }
    if ((StartsWith(t, "symbol:") || StartsWith(t, "location:")) &&
        java_.d.message.size() < kMaxRawMessageBytes) {
      std::string detail;
      for (size_t i = 0; i < t.size(); ++i) {  // collapse javac's alignment spaces
        if (t[i] == ' ' && !detail.empty() && detail.back() == ' ') continue;
        detail += t[i];
      }
      java_.d.message += java_.details++ == 0 ? " (" : "; ";
      java_.d.message += detail;
    }
  }

  void FlushJava() {
    if (!java_.active) return;
    java_.active = false;
    if (java_.details > 0) java_.d.message += ")";
    out_->Add(java_.d.file, java_.d.line, java_.d.column, java_.d.severity, java_.d.message);
  }

  // --- CPython tracebacks ----------------------------------------------------------------------
  bool InRepo(std::string_view raw_path) const {
    if (raw_path.empty() || raw_path.front() == '<') return false;
    return !IsAbsolute(NormalizePath(raw_path, opts_));
  }

  bool PythonTraceback(std::string_view line) {
    if (line == "Traceback (most recent call last):") {
      py_ = {};
      py_.active = true;
      return true;
    }
    if (StartsWith(line, "  File \"")) {  // '  File "app/x.py", line 7, in f' or '..., line 3'
      std::string_view rest = line.substr(8);
      size_t q = rest.find("\", line ");
      if (q == std::string_view::npos) return py_.active;
      std::string_view num = rest.substr(q + 8);
      size_t n = 0;
      while (n < num.size() && IsDigit(num[n])) ++n;
      int lineno = 0;
      if (!ParseInt(num.substr(0, n), &lineno)) return py_.active;
      if (!py_.active) py_ = {};  // SyntaxError printed without a traceback header
      py_.active = true;
      py_.last = {std::string(rest.substr(0, q)), lineno};
      if (InRepo(py_.last.first)) py_.repo = py_.last;
      py_.frames++;
      return true;
    }
    if (!py_.active) return false;
    if (line.empty() || IsSpace(line.front())) return true;  // code, carets, "  |" groups
    py_.active = false;
    std::string_view type;
    if (py_.frames == 0 || !IsExceptionLine(line, &type)) return false;
    const auto& frame = py_.repo.first.empty() ? py_.last : py_.repo;
    std::string_view file = frame.first;
    if (!file.empty() && file.front() == '<') file = {};  // "<frozen runpy>", "<string>"
    out_->Add(file, file.empty() ? 0 : frame.second, 0, "error", line);
    return true;
  }

  // --- pytest ----------------------------------------------------------------------------------
  bool Pytest(std::string_view line) {
    if (StartsWith(line, "==") && (line.find(" test session starts ") != std::string_view::npos ||
                                   line.find(" FAILURES ") != std::string_view::npos ||
                                   line.find(" ERRORS ") != std::string_view::npos)) {
      pytest_.active = true;
      return true;
    }
    if (StartsWith(line, "FAILED ") || StartsWith(line, "ERROR ")) {
      std::string_view rest = line.substr(line.find(' ') + 1);
      size_t dash = rest.find(" - ");
      std::string_view nodeid = rest.substr(0, dash);
      std::string_view msg =
          dash == std::string_view::npos ? std::string_view() : rest.substr(dash + 3);
      size_t sep = nodeid.find("::");
      std::string_view file = nodeid.substr(0, sep);
      if (nodeid.find(' ') == std::string_view::npos &&
          (sep != std::string_view::npos || EndsWith(file, ".py"))) {
        std::string name;
        if (sep == std::string_view::npos) {
          name = "ERROR collecting " + std::string(nodeid);
        } else {
          std::string_view id = nodeid.substr(sep + 2);
          for (size_t i = 0; i < id.size(); ++i) {
            if (id.substr(i, 2) == "::") {
              name += '.';
              ++i;
            } else {
              name += id[i];
            }
          }
        }
        if (pytest_.reported.count(name) == 0) {
          pytest_.reported.insert(name);
          std::string text = name + (msg.empty() ? ": failed" : ": " + std::string(msg));
          out_->Add(file, 0, 0, "error", text);
        }
        return true;
      }
    }
    if (!pytest_.active) return false;
    if (StartsWith(line, "_") && EndsWith(line, "_")) {
      std::string_view name = line;
      while (!name.empty() && (name.front() == '_' || name.front() == ' ')) name.remove_prefix(1);
      while (!name.empty() && (name.back() == '_' || name.back() == ' ')) name.remove_suffix(1);
      if (!name.empty() && name.find("_ _") == std::string_view::npos) {
        pytest_.test = std::string(name);
        pytest_.e_line.clear();
        pytest_.repo_frame = {};
      }
      return true;
    }
    if (pytest_.test.empty()) return false;
    if (StartsWith(line, "E ")) {
      if (pytest_.e_line.empty()) pytest_.e_line = std::string(Trim(line.substr(1)));
      return true;
    }
    std::string_view path, rest;
    int lineno = 0, col = 0;
    if (!ParseLocation(line, &path, &lineno, &col, &rest, /*allow_empty_rest=*/true) ||
        !EndsWith(path, ".py"))
      return false;
    rest = Trim(rest);
    bool in_repo = InRepo(path);
    if (rest.empty() || StartsWith(rest, "in ")) {  // an outer frame
      if (in_repo) pytest_.repo_frame = {std::string(path), lineno};
      return true;
    }
    std::string_view type;
    if (!IsExceptionLine(rest, &type) || type.size() != rest.size()) return false;
    std::string file(path);
    if (!in_repo && !pytest_.repo_frame.first.empty()) {
      file = pytest_.repo_frame.first;
      lineno = pytest_.repo_frame.second;
    }
    std::string text = pytest_.test + ": ";
    const std::string& e = pytest_.e_line;
    if (e.empty()) {
      text += std::string(type);
    } else if (std::string_view etype; IsExceptionLine(e, &etype) && EndsWith(etype, type)) {
      text += e;  // "E   json.decoder.JSONDecodeError: ..." under "...: JSONDecodeError"
    } else {
      text += std::string(type) + ": " + e;
    }
    out_->Add(file, lineno, 0, "error", text);
    pytest_.reported.insert(pytest_.test);
    pytest_.test.clear();
    return true;
  }

  // --- go test ---------------------------------------------------------------------------------
  // "--- FAIL: TestX (0.00s)" -> "TestX".
  static bool GoTestStatus(std::string_view t, std::string_view* name, bool* failed) {
    for (std::string_view p : {std::string_view("--- FAIL: "), std::string_view("--- PASS: "),
                               std::string_view("--- SKIP: ")}) {
      if (!StartsWith(t, p)) continue;
      std::string_view rest = t.substr(p.size());
      *name = rest.substr(0, rest.find(" ("));
      *failed = p == "--- FAIL: ";
      return !name->empty();
    }
    return false;
  }

  bool GoTest(std::string_view line) {
    std::string_view t = TrimLeft(line), name;
    bool failed = false;
    if (GoTestStatus(t, &name, &failed)) {
      go_.test = std::string(name);
      if (failed) go_.failed.insert(go_.test);
      return true;
    }
    for (std::string_view p : {std::string_view("=== RUN "), std::string_view("=== CONT "),
                               std::string_view("=== NAME "), std::string_view("=== PAUSE ")}) {
      if (StartsWith(line, p)) {
        go_.test = std::string(Trim(line.substr(p.size())));
        return true;
      }
    }
    // Package result: "FAIL\texample.com/m/pkg\t0.01s", "ok  \tpkg\t0.01s", "FAIL\tpkg [build
    // failed]".
    if ((StartsWith(line, "FAIL\t") || StartsWith(line, "ok  \t")) && !go_.entries.empty()) {
      std::string_view pkg = line.substr(line.find('\t') + 1);
      size_t end = pkg.find_first_of("\t ");
      FlushGoTests(pkg.substr(0, end));
      return true;
    }
    if (line == "FAIL" || line == "PASS") return true;
    if (go_.test.empty() || line.size() < 4 || !StartsWith(line, "    ")) return false;
    std::string_view path, rest;
    int lineno = 0, col = 0;
    if (!ParseLocation(t, &path, &lineno, &col, &rest) || !EndsWith(path, "_test.go")) return false;
    if (go_.entries.size() < kMaxCollected)
      go_.entries.push_back({go_.test, std::string(path), lineno, std::string(Trim(rest))});
    return true;
  }

  // The module prefix of `pkg`: opts_.go_module if it matches, else a guess.
  std::string_view GoModuleOf(std::string_view pkg) const {
    const std::string& mod = opts_.go_module;
    if (!mod.empty()) {
      if (pkg == mod || (StartsWith(pkg, mod) && pkg.size() > mod.size() && pkg[mod.size()] == '/'))
        return pkg.substr(0, mod.size());
      return {};
    }
    size_t slash = pkg.find('/');
    std::string_view first = pkg.substr(0, slash);
    if (first.find('.') == std::string_view::npos) return first;
    if (first == "github.com" || first == "gitlab.com" || first == "bitbucket.org") {
      size_t n = 0, pos = 0;
      while (n < 3) {
        pos = pkg.find('/', pos + 1);
        if (pos == std::string_view::npos) break;
        ++n;
      }
      if (n == 2) return pkg;  // exactly host/owner/repo
      if (n == 3) return pkg.substr(0, pos);
    }
    return {};
  }

  void FlushGoTests(std::string_view pkg) {
    std::string dir;
    if (!pkg.empty()) {
      std::string_view mod = GoModuleOf(pkg);
      if (!mod.empty() && pkg.size() > mod.size())
        dir = std::string(pkg.substr(mod.size() + 1)) + "/";
      if (mod.empty()) dir = "?";  // unknown module: keep the base name only
    }
    for (const GoEntry& e : go_.entries) {
      if (go_.failed.count(e.test) == 0) continue;  // t.Log output of a passing test (-v)
      std::string file = e.file;
      if (dir != "?" && file.find('/') == std::string::npos) file = dir + file;
      out_->Add(file, e.line, 0, "error", e.test + ": " + e.message);
    }
    go_ = {};
  }

  // --- one-line formats ------------------------------------------------------------------------
  void Generic(std::string_view line) {
    if (line.empty() || IsSpace(line.front())) return;  // snippets, carets, continuations
    if (StartsWith(line, "# ")) return;                 // go package header
    if (IsBuildahStep(line)) return;
    if (StartsWith(line, "In file included from")) return;
    if (StartsWith(line, "vet: ")) line.remove_prefix(5);

    if (line.find("building at STEP \"") != std::string_view::npos &&
        (StartsWith(line, "Error: ") || StartsWith(line, "error building at STEP"))) {
      if (StartsWith(line, "Error: ")) line.remove_prefix(7);
      out_->AddSummary(line);
      return;
    }
    if (RustHeader(line)) return;
    if (StartsWith(line, "error TS")) {  // tsc without a file: "error TS18003: No inputs ..."
      std::string_view msg = line.substr(6), code;
      if (SplitTsCode(msg, &code)) out_->Add("", 0, 0, "error", msg, code);
      return;
    }

    std::string_view rest;
    std::string_view tool = ToolName(line, &rest);
    if (!tool.empty() && IsLinkerName(tool)) {
      ParseLinkerRest(rest, out_);
      return;
    }
    if (!tool.empty() && IsDriverName(tool)) {
      auto [severity, msg] = SplitSeverity(rest, "");
      if (severity.empty()) return;
      if (msg.find("ld returned") != std::string_view::npos ||
          msg.find("linker command failed") != std::string_view::npos) {
        out_->AddSummary(line);
      } else {
        out_->Add("", 0, 0, severity, msg);
      }
      return;
    }

    std::string_view message, file;
    if (SplitSectionMessage(line, /*anywhere=*/false, &message,
                            &file)) {  // "x.cc:(.text+0xa): undefined reference to ..."
      auto [severity, msg] = SplitSeverity(message, "error");
      out_->Add(file, 0, 0, severity, msg);
      return;
    }
    if (ParseTsc(line, out_)) return;

    std::string_view path;
    int lineno = 0, col = 0;
    if (!ParseLocation(line, &path, &lineno, &col, &rest)) return;
    std::string_view code;
    if (EndsWith(path, ".py") && col > 0 && SplitFlake8Code(TrimLeft(rest), &code)) {
      char c = code.front();
      out_->Add(path, lineno, col, (c == 'E' || c == 'F') ? "error" : "warning", Trim(rest), code);
      return;
    }
    auto [severity, msg] = SplitSeverity(rest, "error");
    if (msg == "too many errors") return;  // go's truncation notice, not a diagnostic
    if (EndsWith(path, ".py")) code = MypyCode(msg);
    if (EndsWith(path, ".java") && col == 0) {  // carets and details follow
      java_ = {};
      java_.active = true;
      java_.d.file = std::string(path);
      java_.d.line = lineno;
      java_.d.severity = severity;
      java_.d.message = std::string(msg.substr(0, kMaxRawMessageBytes));
      return;
    }
    out_->Add(path, lineno, col, severity, msg, code);
  }

  struct RustState {
    bool active = false;
    std::string severity, code, message, line;
  };
  struct JavaState {
    bool active = false;
    Diagnostic d;
    std::string snippet;
    int lines = 0;
    int details = 0;
  };
  struct PyState {
    bool active = false;
    int frames = 0;
    std::pair<std::string, int> last, repo;  // innermost frame; innermost in-repo frame
  };
  struct PytestState {
    bool active = false;
    std::string test, e_line;
    std::pair<std::string, int> repo_frame;
    std::set<std::string> reported;
  };
  struct GoEntry {
    std::string test, file;
    int line = 0;
    std::string message;
  };
  struct GoState {
    std::string test;
    std::set<std::string> failed;
    std::vector<GoEntry> entries;
  };

  const DiagnosticsOptions& opts_;
  Collector* out_;
  RustState rust_;
  JavaState java_;
  PyState py_;
  PytestState pytest_;
  GoState go_;
};

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

DiagnosticsResult ParseBuildDiagnostics(std::string_view build_output,
                                        const DiagnosticsOptions& opts) {
  Collector out(opts);
  Parser parser(opts, &out);
  size_t start = 0;
  while (start < build_output.size() && !out.full()) {
    size_t nl = build_output.find('\n', start);
    if (nl == std::string_view::npos) nl = build_output.size();
    std::string line = CleanLine(build_output.substr(start, nl - start));
    parser.Line(line);
    start = nl + 1;
  }
  parser.End();
  return out.Finish();
}

std::vector<Diagnostic> ParseDiagnostics(std::string_view build_output,
                                         const DiagnosticsOptions& opts) {
  return ParseBuildDiagnostics(build_output, opts).diagnostics;
}

// --- Issue 16: the failing Containerfile step ---
std::optional<FailedStep> FindFailedStep(std::string_view build_output) {
  std::optional<FailedStep> found;
  std::string last_position, last_instruction;  // the most recent "STEP i/n: ..." line
  size_t start = 0;
  while (start < build_output.size()) {
    size_t nl = build_output.find('\n', start);
    if (nl == std::string_view::npos) nl = build_output.size();
    const std::string clean = CleanLine(build_output.substr(start, nl - start));
    start = nl + 1;
    std::string_view line = clean;
    if (IsBuildahStep(line)) {
      if (StartsWith(line, "[")) line.remove_prefix(line.find("] ") + 2);
      line.remove_prefix(5);  // "STEP "
      const size_t colon = line.find(": ");
      if (colon == std::string_view::npos) continue;
      last_position = std::string(line.substr(0, colon));
      last_instruction = std::string(Trim(line.substr(colon + 2)));
      continue;
    }
    const size_t at = line.find("building at STEP \"");
    if (at == std::string_view::npos) continue;
    std::string_view rest = line.substr(at + 18);
    const size_t end = rest.rfind("\": ");
    if (end == std::string_view::npos) continue;
    FailedStep step;
    step.instruction = std::string(rest.substr(0, end));
    std::string_view tail = rest.substr(end + 3);
    const size_t es = tail.rfind("exit status ");
    if (es != std::string_view::npos) {
      std::string_view digits = tail.substr(es + 12);
      size_t n = 0;
      while (n < digits.size() && IsDigit(digits[n])) ++n;
      int code = 0;
      if (ParseInt(digits.substr(0, n), &code)) step.exit_code = code;
    }
    // buildah echoes the instruction with its arguments expanded the same way in both lines.
    // (an instruction it cannot parse is cut in the summary: "RUNN " for "RUNN echo hello").
    const std::string_view summary = Trim(step.instruction);
    if (!last_instruction.empty() && !summary.empty() && StartsWith(last_instruction, summary))
      step.position = last_position;
    found = std::move(step);
  }
  if (found) {
    std::string cut = Sanitize(found->instruction, found->instruction.size());
    if (CutUtf8(&cut, 200)) cut += "...";
    found->instruction = std::move(cut);
  }
  return found;
}

bool IsRunInstruction(std::string_view instruction) {
  instruction = TrimLeft(instruction);
  if (instruction.size() < 3) return false;
  for (size_t i = 0; i < 3; ++i)
    if ((instruction[i] & ~0x20) != "RUN"[i]) return false;
  return instruction.size() == 3 || IsSpace(instruction[3]);
}

std::string DescribeFailedStep(const FailedStep& step) {
  std::string s = "step";
  if (!step.position.empty()) s += " " + step.position;
  if (!step.instruction.empty()) s += " (" + step.instruction + ")";
  s += " failed";
  if (step.exit_code >= 0) s += " with exit code " + std::to_string(step.exit_code);
  return s;
}
std::string GoModulePath(std::string_view go_mod) {
  size_t start = 0;
  while (start < go_mod.size()) {
    size_t nl = go_mod.find('\n', start);
    if (nl == std::string_view::npos) nl = go_mod.size();
    std::string_view line = Trim(go_mod.substr(start, nl - start));
    start = nl + 1;
    if (!StartsWith(line, "module") || line.size() < 7 || !(IsSpace(line[6]) || line[6] == '"'))
      continue;
    line = Trim(line.substr(6));
    const size_t comment = line.find("//");
    if (comment != std::string_view::npos) line = Trim(line.substr(0, comment));
    if (line.size() >= 2 && (line.front() == '"' || line.front() == '`') &&
        line.back() == line.front())
      line = line.substr(1, line.size() - 2);
    if (line.empty() || line.size() > 512) return "";
    for (char c : line)
      if (IsSpace(c) || static_cast<unsigned char>(c) < 0x20) return "";
    return std::string(line);
  }
  return "";
}
// --- end issue 16 ---

}  // namespace kiln
