#include "builder/step_cache_policy.h"

#include <nlohmann/json.hpp>
#include <sstream>
#include <vector>

#include "builder/containerfile_syntax.h"

namespace kiln {

using containerfile::Declare;
using containerfile::Instructions;
using containerfile::Lower;
using containerfile::Substitute;
using containerfile::Unquote;
using containerfile::Upper;
using containerfile::Vars;
using containerfile::Words;

namespace {

struct Stage {
  std::string name;  // lowercased AS name, "" when unnamed
  bool context_dependent = false;
};

// Leading `--flag[=value]` words, then the rest (JSON form parsed when it is one).
void SplitFlags(const std::vector<std::string>& words, std::vector<std::string>* flags,
                std::vector<std::string>* rest) {
  size_t i = 0;
  for (; i < words.size() && words[i].rfind("--", 0) == 0; ++i) flags->push_back(words[i]);
  std::string joined;
  for (size_t j = i; j < words.size(); ++j) joined += (j > i ? " " : "") + words[j];
  if (!joined.empty() && joined[0] == '[') {
    nlohmann::json a = nlohmann::json::parse(joined, nullptr, /*allow_exceptions=*/false);
    if (a.is_array()) {
      for (const auto& x : a)
        if (x.is_string()) rest->push_back(x.get<std::string>());
      return;
    }
  }
  rest->assign(words.begin() + static_cast<std::ptrdiff_t>(i), words.end());
}

// `.`, `./`, `*`, `./.`, `/`: the whole build context.
bool WholeContext(std::string s) {
  while (s.rfind("./", 0) == 0) s.erase(0, 2);
  while (!s.empty() && s.back() == '/') s.pop_back();
  while (s.size() >= 2 && s.compare(s.size() - 2, 2, "/.") == 0) s.resize(s.size() - 2);
  return s.empty() || s == "." || s == "*";
}

}  // namespace

StepCacheDecision DecideStepCache(const std::string& text,
                                  const std::map<std::string, std::string>& args,
                                  const std::string& mode) {
  if (mode == "always") return {true, "build.containerfile.step_cache is \"always\""};
  if (mode == "never") return {false, "build.containerfile.step_cache is \"never\""};
  Vars globals = args;
  Vars vars;
  std::vector<Stage> stages;
  bool ctx = false;  // the current stage depends on the whole build context
  auto keep = [](const std::string& why, int line) {
    return StepCacheDecision{
        true, why + " (line " + std::to_string(line) + "): buildah's step cache can reuse it"};
  };
  // The stage `ref` names (an AS name or an earlier stage's number); nullptr for an image.
  auto stage_of = [&](const std::string& ref) -> const Stage* {
    const std::string r = Lower(Unquote(ref));
    if (!r.empty() && r.find_first_not_of("0123456789") == std::string::npos) {
      size_t n = std::stoul(r.substr(0, 9));
      return n < stages.size() ? &stages[n] : nullptr;
    }
    for (const Stage& s : stages)
      if (!s.name.empty() && s.name == r) return &s;
    return nullptr;
  };
  for (const auto& ins : Instructions(text)) {
    std::string word;
    const std::vector<std::string> words = Words(ins, &word);
    std::vector<std::string> flags, rest;
    if (word == "ARG" && stages.empty()) {
      Vars none;
      Declare(word, words, args, none, &globals);
      continue;
    }
    if (word == "ARG" || word == "ENV") {
      Declare(word, words, args, globals, &vars);
      continue;
    }
    if (word == "FROM") {
      SplitFlags(words, &flags, &rest);
      if (rest.empty()) return keep("a FROM without an image", ins.line);
      const std::string ref = Substitute(rest[0], globals);
      if (ref.find('$') != std::string::npos) return keep("an unresolved FROM", ins.line);
      const Stage* parent = stage_of(ref);
      Stage s;
      s.context_dependent = parent && parent->context_dependent;
      if (rest.size() >= 3 && Upper(rest[1]) == "AS") s.name = Lower(rest[2]);
      stages.push_back(s);
      ctx = s.context_dependent;
      vars = args;
      continue;
    }
    if (stages.empty()) return keep("an instruction before FROM", ins.line);
    if (word == "COPY" || word == "ADD") {
      SplitFlags(words, &flags, &rest);
      bool from_stage = false;
      for (const auto& f : flags) {
        if (f.rfind("--from=", 0) != 0) continue;
        const std::string ref = Substitute(f.substr(7), vars);
        if (ref.find('$') != std::string::npos) return keep("an unresolved --from", ins.line);
        const Stage* s = stage_of(ref);
        if (s && s->context_dependent) ctx = true;
        from_stage = true;  // a stage or an image, not the build context
      }
      if (from_stage || rest.size() < 2) {
        stages.back().context_dependent = ctx;
        continue;
      }
      for (size_t i = 0; i + 1 < rest.size(); ++i) {
        const std::string src = Substitute(Unquote(rest[i]), vars);
        if (word == "ADD" && (src.find("://") != std::string::npos || src.rfind("git@", 0) == 0)) {
          if (!ctx) return keep("ADD of a URL", ins.line);
          continue;
        }
        if (WholeContext(src)) ctx = true;
      }
      stages.back().context_dependent = ctx;
      continue;
    }
    if (word == "RUN") {
      SplitFlags(words, &flags, &rest);
      for (const auto& f : flags) {
        if (f.rfind("--mount=", 0) != 0) continue;
        std::string type = "bind";
        std::string from;
        std::stringstream opts(Unquote(f.substr(8)));
        for (std::string kv; std::getline(opts, kv, ',');) {
          const std::string k = Lower(kv.substr(0, kv.find('=')));
          const std::string v =
              kv.find('=') == std::string::npos ? "" : kv.substr(kv.find('=') + 1);
          if (k == "type") type = Lower(v);
          if (k == "from") from = Substitute(v, vars);
        }
        if (from.find('$') != std::string::npos) return keep("an unresolved mount", ins.line);
        if (type == "bind" && from.empty()) ctx = true;  // the build context itself
        if (!from.empty()) {
          const Stage* s = stage_of(from);
          if (s && s->context_dependent) ctx = true;
        }
      }
      if (!ctx) return keep("RUN before the build context is copied", ins.line);
      stages.back().context_dependent = ctx;
      continue;
    }
    static const char* kCheap[] = {"WORKDIR",    "LABEL",       "USER",      "EXPOSE",
                                   "ENTRYPOINT", "CMD",         "SHELL",     "VOLUME",
                                   "STOPSIGNAL", "HEALTHCHECK", "MAINTAINER"};
    bool cheap = false;
    for (const char* c : kCheap) cheap = cheap || word == c;
    if (!cheap) return keep(word + " instruction", ins.line);
  }
  if (stages.empty()) return {true, "no FROM"};
  return {false,
          "every RUN step depends on the whole build context, which changes with each commit: "
          "building without buildah's step cache (--layers=false)"};
}

}  // namespace kiln
