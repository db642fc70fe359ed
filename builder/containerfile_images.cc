#include "builder/containerfile_images.h"

#include <set>
#include <sstream>

#include "builder/containerfile_syntax.h"

namespace kiln {

using containerfile::Declare;
using containerfile::Instruction;
using containerfile::Instructions;
using containerfile::Lower;
using containerfile::Substitute;
using containerfile::Unquote;
using containerfile::Upper;
using containerfile::Vars;
using containerfile::Words;

std::vector<ContainerfileImage> ContainerfileImages(const std::string& text, const Vars& args) {
  Vars globals = args;  // build args resolve names even without an ARG
  Vars stage_vars;
  std::set<std::string> stages;
  std::vector<ContainerfileImage> images;
  auto add = [&](const std::string& raw, const Vars& vars, const char* what, int line,
                 bool stage_number_ok) {
    std::string img = Substitute(Unquote(raw), vars);
    if (img == "scratch" || stages.count(Lower(img))) return;
    if (stage_number_ok && !img.empty() && img.find_first_not_of("0123456789") == std::string::npos)
      return;
    for (const auto& i : images)
      if (i.image == img) return;
    images.push_back({img, what, line});
  };
  bool seen_from = false;
  for (const Instruction& ins : Instructions(text)) {
    std::string word;
    const std::vector<std::string> words = Words(ins, &word);
    if (word == "ARG" && !seen_from) {
      Vars none;
      Declare(word, words, args, none, &globals);
    } else if (word == "ARG" || word == "ENV") {
      Declare(word, words, args, globals, &stage_vars);
    } else if (word == "FROM") {
      seen_from = true;
      size_t i = 0;
      while (i < words.size() && words[i].rfind("--", 0) == 0) ++i;
      if (i < words.size()) add(words[i], globals, "FROM", ins.line, false);
      if (i + 2 < words.size() && Upper(words[i + 1]) == "AS") {
        std::string name = Lower(words[i + 2]);
        bool ok = !name.empty() && name[0] >= 'a' && name[0] <= 'z';
        for (char c : name)
          ok = ok && ((c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '_' ||
                      c == '.');
        if (ok) stages.insert(name);
      }
      stage_vars = args;
    } else if (word == "COPY" || word == "ADD" || word == "RUN") {
      for (const auto& w : words) {
        if (w.rfind("--", 0) != 0) break;
        if (w.rfind("--from=", 0) == 0) add(w.substr(7), stage_vars, "COPY --from", ins.line, true);
        if (w.rfind("--mount=", 0) == 0) {
          std::stringstream opts(Unquote(w.substr(8)));
          for (std::string kv; std::getline(opts, kv, ',');)
            if (Lower(kv).rfind("from=", 0) == 0)
              add(kv.substr(5), stage_vars, "RUN --mount from=", ins.line, true);
        }
      }
    }
  }
  return images;
}

}  // namespace kiln
