#include "builder/containerfile_syntax.h"

#include <sstream>

namespace kiln::containerfile {
namespace {

std::string TrimRight(std::string s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r')) s.pop_back();
  return s;
}

bool IsNameChar(char c) { return isalnum(static_cast<unsigned char>(c)) || c == '_'; }

}  // namespace

std::string Upper(std::string s) {
  for (auto& c : s) c = static_cast<char>(toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string Lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string Unquote(std::string v) {
  if (v.size() >= 2 && (v.front() == '"' || v.front() == '\'') && v.back() == v.front())
    v = v.substr(1, v.size() - 2);
  return v;
}

// Substitutes variables known in `vars`; an unknown one is kept as written (so it is refused).
std::string Substitute(const std::string& s, const Vars& vars) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '$' || i + 1 >= s.size()) {
      out += s[i];
      continue;
    }
    if (s[i + 1] == '{') {
      size_t close = s.find('}', i + 2);
      if (close == std::string::npos) {
        out += s.substr(i);
        break;
      }
      std::string body = s.substr(i + 2, close - i - 2);
      size_t n = 0;
      while (n < body.size() && IsNameChar(body[n])) ++n;
      std::string name = body.substr(0, n);
      std::string op = body.substr(n);
      auto it = vars.find(name);
      bool set = it != vars.end();
      bool nonempty = set && !it->second.empty();
      if (name.empty()) {
        out += s.substr(i, close - i + 1);
      } else if (op.empty()) {
        out += set ? it->second : s.substr(i, close - i + 1);
      } else if (op.rfind(":-", 0) == 0) {
        out += nonempty ? it->second : Substitute(op.substr(2), vars);
      } else if (op.rfind("-", 0) == 0) {
        out += set ? it->second : Substitute(op.substr(1), vars);
      } else if (op.rfind(":+", 0) == 0) {
        out += nonempty ? Substitute(op.substr(2), vars) : "";
      } else if (op.rfind("+", 0) == 0) {
        out += set ? Substitute(op.substr(1), vars) : "";
      } else {
        out += s.substr(i, close - i + 1);  // unsupported form: left unresolved
      }
      i = close;
    } else {
      size_t j = i + 1;
      while (j < s.size() && IsNameChar(s[j])) ++j;
      std::string name = s.substr(i + 1, j - i - 1);
      auto it = vars.find(name);
      if (name.empty() || it == vars.end()) {
        out += s.substr(i, j - i);
      } else {
        out += it->second;
      }
      i = j - 1;
    }
  }
  return out;
}

// Logical instructions: directives read, comments dropped, continuations joined, heredoc bodies
// skipped.
std::vector<Instruction> Instructions(const std::string& text) {
  std::vector<Instruction> out;
  std::vector<std::string> lines;
  {
    std::istringstream in(text);
    for (std::string l; std::getline(in, l);) {
      if (!l.empty() && l.back() == '\r') l.pop_back();
      lines.push_back(l);
    }
  }
  char escape = '\\';
  size_t i = 0;
  // Parser directives: `# key=value` lines at the very top.
  for (; i < lines.size(); ++i) {
    std::string l = lines[i];
    size_t f = l.find_first_not_of(" \t");
    if (f == std::string::npos || l[f] != '#') break;
    std::string d = l.substr(f + 1);
    d.erase(0, d.find_first_not_of(" \t"));
    size_t eq = d.find('=');
    if (eq == std::string::npos) break;
    std::string key = Lower(TrimRight(d.substr(0, eq)));
    std::string val = d.substr(eq + 1);
    val.erase(0, val.find_first_not_of(" \t"));
    val = TrimRight(val);
    if (key.find_first_of(" \t") != std::string::npos) break;
    if (key == "escape" && (val == "`" || val == "\\")) escape = val[0];
  }
  i = 0;
  std::string cur;
  int start = 0;
  for (; i < lines.size(); ++i) {
    const std::string& raw = lines[i];
    size_t f = raw.find_first_not_of(" \t");
    if (f == std::string::npos) continue;  // blank (also inside a continuation)
    if (raw[f] == '#') continue;           // comment (also inside a continuation)
    if (cur.empty()) start = static_cast<int>(i) + 1;
    std::string l = TrimRight(raw);
    if (!l.empty() && l.back() == escape) {
      cur += l.substr(0, l.size() - 1) + " ";
      continue;
    }
    cur += l;
    out.push_back({cur, start});
    // Heredocs: `<<[-]["']WORD["']` in the instruction; their bodies follow, up to WORD.
    std::vector<std::pair<std::string, bool>> ends;
    for (size_t p = cur.find("<<"); p != std::string::npos; p = cur.find("<<", p + 2)) {
      size_t q = p + 2;
      bool strip = q < cur.size() && cur[q] == '-';
      if (strip) ++q;
      char quote = q < cur.size() && (cur[q] == '"' || cur[q] == '\'') ? cur[q] : 0;
      if (quote) ++q;
      size_t e = q;
      while (e < cur.size() && IsNameChar(cur[e])) ++e;
      if (e == q) continue;
      if (quote && (e >= cur.size() || cur[e] != quote)) continue;
      ends.emplace_back(cur.substr(q, e - q), strip);
    }
    cur.clear();
    std::string word = Upper(out.back().text.substr(out.back().text.find_first_not_of(" \t")));
    word = word.substr(0, word.find_first_of(" \t"));
    if (word != "RUN" && word != "COPY" && word != "ADD") ends.clear();
    for (const auto& [end, strip] : ends) {
      for (++i; i < lines.size(); ++i) {
        std::string body = lines[i];
        if (strip) body.erase(0, body.find_first_not_of('\t'));
        if (body == end) break;
      }
    }
  }
  if (!cur.empty()) out.push_back({cur, start});
  return out;
}

void Declare(const std::string& word, const std::vector<std::string>& words, const Vars& args,
             const Vars& globals, Vars* vars) {
  if (word == "ENV" && words.size() >= 2 && words[0].find('=') == std::string::npos) {
    std::string v;
    for (size_t i = 1; i < words.size(); ++i) v += (i > 1 ? " " : "") + words[i];
    (*vars)[words[0]] = Substitute(Unquote(v), *vars);
    return;
  }
  for (const auto& w : words) {
    size_t eq = w.find('=');
    std::string name = w.substr(0, eq);
    if (word == "ARG") {
      auto a = args.find(name);
      auto g = globals.find(name);
      if (a != args.end()) {
        (*vars)[name] = a->second;
      } else if (eq != std::string::npos) {
        (*vars)[name] = Substitute(Unquote(w.substr(eq + 1)), *vars);
      } else if (g != globals.end()) {
        (*vars)[name] = g->second;
      }
    } else if (eq != std::string::npos) {
      (*vars)[name] = Substitute(Unquote(w.substr(eq + 1)), *vars);
    }
  }
}

std::vector<std::string> Words(const Instruction& ins, std::string* keyword) {
  std::istringstream ls(ins.text);
  ls >> *keyword;
  *keyword = Upper(*keyword);
  std::vector<std::string> words;
  for (std::string w; ls >> w;) words.push_back(w);
  return words;
}

}  // namespace kiln::containerfile
