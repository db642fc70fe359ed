#include "core/diagnostic.h"

namespace kiln {

nlohmann::json ToJson(const Diagnostic& d) {
  nlohmann::json j;
  j["file"] = d.file;
  j["line"] = d.line;
  j["column"] = d.column;
  j["severity"] = d.severity;
  j["message"] = d.message;
  if (!d.code.empty()) j["code"] = d.code;
  if (d.truncated) j["truncated"] = true;
  return j;
}

Diagnostic DiagnosticFromJson(const nlohmann::json& j) {
  Diagnostic d;
  if (!j.is_object()) return d;
  auto str = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
  };
  auto num = [&](const char* k) {
    auto it = j.find(k);
    return it != j.end() && it->is_number_integer() ? it->get<int>() : 0;
  };
  d.file = str("file");
  d.line = num("line");
  d.column = num("column");
  d.severity = str("severity");
  d.message = str("message");
  d.code = str("code");
  auto t = j.find("truncated");
  d.truncated = t != j.end() && t->is_boolean() && t->get<bool>();
  return d;
}

nlohmann::json DiagnosticsToJson(const std::vector<Diagnostic>& ds) {
  nlohmann::json a = nlohmann::json::array();
  for (const Diagnostic& d : ds) a.push_back(ToJson(d));
  return a;
}

std::vector<Diagnostic> DiagnosticsFromJson(const nlohmann::json& a) {
  std::vector<Diagnostic> out;
  if (!a.is_array()) return out;
  for (const auto& j : a)
    if (j.is_object()) out.push_back(DiagnosticFromJson(j));
  return out;
}

}  // namespace kiln
