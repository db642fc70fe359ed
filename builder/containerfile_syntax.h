// ContainerfileSyntax: the Dockerfile grammar as kiln reads it, shared by every pass over a
// Containerfile (builder/containerfile_images.h: the images it pulls; builder/step_cache_policy.h:
// whether buildah's step cache can ever be reused). Parser directives (`# escape=`), line
// continuations (also with trailing blanks and comment lines inside), comments, heredoc bodies
// (`<<EOF`, `<<-"EOF"`: not instructions), and ARG/ENV substitution ($X, ${X}, ${X:-d}, ${X-d},
// ${X:+a}, ${X+a}); a variable that is not known stays as written (with its `$`).
//
// Pure functions; no I/O; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kiln::containerfile {

using Vars = std::map<std::string, std::string>;

/// One logical instruction: continuations joined, heredoc bodies skipped. `line` is 1-based.
struct Instruction {
  std::string text;
  int line = 0;
};

/// The instructions of `text` in order (directives read, comments and blank lines dropped).
std::vector<Instruction> Instructions(const std::string& text);

/// The instruction's keyword (upper case) in *keyword, and its whitespace-separated words.
std::vector<std::string> Words(const Instruction& ins, std::string* keyword);

/// `s` with the variables of `vars` substituted; unknown ones are kept as written.
std::string Substitute(const std::string& s, const Vars& vars);

/// ARG/ENV declarations (`word` is "ARG" or "ENV"): NAME, NAME=value (quoted), several per line;
/// `ENV NAME value`. For ARG, a build arg in `args` wins over the default, and a global ARG of
/// `globals` gives the value of a bare re-declaration.
void Declare(const std::string& word, const std::vector<std::string>& words, const Vars& args,
             const Vars& globals, Vars* vars);

std::string Upper(std::string s);
std::string Lower(std::string s);
/// `v` without one pair of matching surrounding quotes.
std::string Unquote(std::string v);

}  // namespace kiln::containerfile
