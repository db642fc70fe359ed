#include "registry/www_authenticate.h"

#include <cctype>

namespace kiln {
namespace {

constexpr size_t kMaxHeader = 16 * 1024;

bool IsTokenChar(char c) {
  if (std::isalnum(static_cast<unsigned char>(c))) return true;
  switch (c) {
    case '!':
    case '#':
    case '$':
    case '%':
    case '&':
    case '\'':
    case '*':
    case '+':
    case '-':
    case '.':
    case '^':
    case '_':
    case '`':
    case '|':
    case '~':
      return true;
    default:
      return false;
  }
}

bool IsToken68Char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.' || c == '_' ||
         c == '~' || c == '+' || c == '/';
}

std::string Lower(std::string_view s) {
  std::string r(s);
  for (char& c : r) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return r;
}

// A cursor over the header; every method stays within bounds.
class Parser {
 public:
  explicit Parser(std::string_view s) : s_(s) {}

  Status Run(std::vector<Challenge>* out) {
    for (;;) {
      SkipSpacesAndCommas();
      if (AtEnd()) break;
      Challenge c;
      std::string_view scheme = Token();
      if (scheme.empty()) return Error("expected an auth scheme");
      c.scheme = Lower(scheme);
      if (!AtEnd() && s_[pos_] != ' ' && s_[pos_] != '\t' && s_[pos_] != ',')
        return Error("unexpected character after auth scheme");
      Status st = Params(&c);
      if (!st.ok()) return st;
      out->push_back(std::move(c));
    }
    if (out->empty()) return Status::InvalidArgument("WWW-Authenticate: no challenge");
    return Status::Ok();
  }

 private:
  bool AtEnd() const { return pos_ >= s_.size(); }
  void SkipSpaces() {
    while (!AtEnd() && (s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
  }
  void SkipSpacesAndCommas() {
    while (!AtEnd() && (s_[pos_] == ' ' || s_[pos_] == '\t' || s_[pos_] == ',')) ++pos_;
  }
  std::string_view Token() {
    size_t start = pos_;
    while (!AtEnd() && IsTokenChar(s_[pos_])) ++pos_;
    return s_.substr(start, pos_ - start);
  }
  Status Error(const std::string& what) const {
    return Status::InvalidArgument("WWW-Authenticate: " + what + " at offset " +
                                   std::to_string(pos_));
  }

  // Tries "token68" right after the scheme: token68 chars, then '='*, then end or ','.
  bool TryToken68(Challenge* c) {
    size_t p = pos_;
    while (p < s_.size() && IsToken68Char(s_[p])) ++p;
    if (p == pos_) return false;
    size_t q = p;
    while (q < s_.size() && s_[q] == '=') ++q;
    size_t r = q;
    while (r < s_.size() && (s_[r] == ' ' || s_[r] == '\t')) ++r;
    if (r < s_.size() && s_[r] != ',') return false;
    c->params["token68"] = std::string(s_.substr(pos_, q - pos_));
    pos_ = r;
    return true;
  }

  Status QuotedString(std::string* value) {
    ++pos_;  // opening quote
    for (;;) {
      if (AtEnd()) return Error("unterminated quoted string");
      char ch = s_[pos_];
      if (ch == '"') {
        ++pos_;
        return Status::Ok();
      }
      if (ch == '\\') {
        ++pos_;
        if (AtEnd()) return Error("unterminated escape in quoted string");
        ch = s_[pos_];
      }
      if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7f)
        return Error("control character in quoted string");
      value->push_back(ch);
      ++pos_;
    }
  }

  // Parses the auth-params of one challenge, stopping before the next challenge's scheme.
  Status Params(Challenge* c) {
    SkipSpaces();
    if (AtEnd() || s_[pos_] == ',') return Status::Ok();
    // A token68 is only possible as the first thing after the scheme and when no '=' follows
    // a token immediately with a value after it.
    {
      size_t save = pos_;
      std::string_view name = Token();
      SkipSpaces();
      bool looks_param = !name.empty() && !AtEnd() && s_[pos_] == '=' && pos_ + 1 < s_.size() &&
                         s_[pos_ + 1] != '=' && s_[pos_ + 1] != ',';
      pos_ = save;
      if (!looks_param && TryToken68(c)) return Status::Ok();
    }
    bool first = true;
    for (;;) {
      size_t item_start = pos_;
      SkipSpaces();
      if (AtEnd()) return Status::Ok();
      std::string_view name = Token();
      if (name.empty()) return Error("expected a parameter name");
      SkipSpaces();
      if (AtEnd() || s_[pos_] != '=') {
        if (first) return Error("expected '=' after parameter name");
        pos_ = item_start;  // a new challenge starts here
        return Status::Ok();
      }
      ++pos_;  // '='
      SkipSpaces();
      std::string value;
      if (AtEnd()) return Error("missing parameter value");
      if (s_[pos_] == '"') {
        Status st = QuotedString(&value);
        if (!st.ok()) return st;
      } else {
        std::string_view v = Token();
        if (v.empty()) return Error("missing parameter value");
        value = std::string(v);
      }
      std::string key = Lower(name);
      if (c->params.count(key)) return Error("duplicate parameter '" + key + "'");
      c->params.emplace(std::move(key), std::move(value));
      first = false;
      SkipSpaces();
      if (AtEnd()) return Status::Ok();
      if (s_[pos_] != ',') return Error("expected ',' between parameters");
      while (!AtEnd() && (s_[pos_] == ',' || s_[pos_] == ' ' || s_[pos_] == '\t')) ++pos_;
    }
  }

  std::string_view s_;
  size_t pos_ = 0;
};

}  // namespace

std::string Challenge::Param(const std::string& name) const {
  auto it = params.find(name);
  return it == params.end() ? std::string() : it->second;
}

Status ParseWwwAuthenticate(std::string_view header, std::vector<Challenge>* out) {
  out->clear();
  if (header.size() > kMaxHeader)
    return Status::InvalidArgument("WWW-Authenticate: header longer than 16 KiB");
  for (char ch : header) {
    if ((static_cast<unsigned char>(ch) < 0x20 && ch != '\t') || ch == 0x7f)
      return Status::InvalidArgument("WWW-Authenticate: control character in header");
  }
  Parser p(header);
  Status st = p.Run(out);
  if (!st.ok()) out->clear();
  return st;
}

}  // namespace kiln
