#include "common/json_text.h"

#include <utility>
#include <vector>

namespace kiln {
namespace {

constexpr char kReplacement[] = "\xEF\xBF\xBD";

// Decodes the sequence at s[i]. Returns the length of a well-formed sequence (>= 1), or
// 0 with `*bad` set to the length of the maximal ill-formed subpart (>= 1) to replace.
// `*incomplete` is set when the sequence is a valid prefix cut short by the end of `s`.
size_t SeqLen(std::string_view s, size_t i, size_t* bad, bool* incomplete) {
  *incomplete = false;
  unsigned char c = static_cast<unsigned char>(s[i]);
  if (c < 0x80) return 1;
  size_t need;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    need = 1;
  } else if (c >= 0xE0 && c <= 0xEF) {
    need = 2;
    if (c == 0xE0) lo = 0xA0;  // overlong
    if (c == 0xED) hi = 0x9F;  // surrogates
  } else if (c >= 0xF0 && c <= 0xF4) {
    need = 3;
    if (c == 0xF0) lo = 0x90;  // overlong
    if (c == 0xF4) hi = 0x8F;  // above U+10FFFF
  } else {
    *bad = 1;  // continuation byte, C0, C1, F5..FF
    return 0;
  }
  size_t k = 1;
  for (; k <= need; ++k) {
    if (i + k >= s.size()) {
      *incomplete = true;
      *bad = k;
      return 0;
    }
    unsigned char cc = static_cast<unsigned char>(s[i + k]);
    unsigned char l = k == 1 ? lo : 0x80, h = k == 1 ? hi : 0xBF;
    if (cc < l || cc > h) {
      *bad = k;
      return 0;
    }
  }
  return need + 1;
}

}  // namespace

bool IsValidUtf8(std::string_view s) {
  size_t bad;
  bool incomplete;
  for (size_t i = 0; i < s.size();) {
    size_t n = SeqLen(s, i, &bad, &incomplete);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string ToValidUtf8(std::string_view s) {
  size_t bad;
  bool incomplete;
  size_t i = 0;
  // Fast path: most logs are valid.
  while (i < s.size()) {
    size_t n = SeqLen(s, i, &bad, &incomplete);
    if (n == 0) break;
    i += n;
  }
  if (i == s.size()) return std::string(s);
  std::string out;
  out.reserve(s.size() + 16);
  out.append(s.data(), i);
  while (i < s.size()) {
    size_t n = SeqLen(s, i, &bad, &incomplete);
    if (n) {
      out.append(s.data() + i, n);
      i += n;
    } else {
      out.append(kReplacement);
      i += bad;
    }
  }
  return out;
}

size_t Utf8SafePrefix(std::string_view s) {
  // A sequence is at most 4 bytes: only the last 3 bytes can start an incomplete one.
  size_t from = s.size() > 3 ? s.size() - 3 : 0;
  for (size_t i = from; i < s.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c < 0xC2 || c > 0xF4) continue;  // not a lead byte
    size_t bad;
    bool incomplete;
    if (SeqLen(s, i, &bad, &incomplete) == 0 && incomplete) return i;
  }
  return s.size();
}

Utf8Unit Utf8UnitAt(std::string_view s) {
  Utf8Unit u;
  if (s.empty()) return u;
  size_t bad = 0;
  u.length = SeqLen(s, 0, &bad, &u.incomplete);
  u.valid = u.length > 0;
  if (!u.valid) u.length = bad;
  return u;
}

void MakeValidUtf8(nlohmann::json* j) {
  if (j->is_string()) {
    auto& str = j->get_ref<std::string&>();
    if (!IsValidUtf8(str)) str = ToValidUtf8(str);
  } else if (j->is_array()) {
    for (auto& e : *j) MakeValidUtf8(&e);
  } else if (j->is_object()) {
    std::vector<std::string> bad_keys;
    for (auto it = j->begin(); it != j->end(); ++it) {
      MakeValidUtf8(&it.value());
      if (!IsValidUtf8(it.key())) bad_keys.push_back(it.key());
    }
    for (const auto& k : bad_keys) {
      nlohmann::json v = std::move((*j)[k]);
      j->erase(k);
      (*j)[ToValidUtf8(k)] = std::move(v);
    }
  }
}

std::string DumpJson(const nlohmann::json& j, int indent) {
  return j.dump(indent, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string JsonErrorBody(const std::string& message) {
  return DumpJson(nlohmann::json{{"error", message}});
}

}  // namespace kiln
