// ContainerfileImages: the images a Containerfile would pull, as the base-image policy
// (config/base_image_policy.h) must see them. Parses the Dockerfile grammar far enough not to be
// fooled: parser directives (`# escape=`), line continuations (also with trailing blanks and
// comment lines inside), comments, heredoc bodies (`<<EOF`, `<<-"EOF"`: not instructions),
// flags (`FROM --platform=...`), `AS` stage names (a later `FROM stage` / `--from=stage` is not
// an image), stage numbers, `scratch`, and ARG/ENV substitution ($X, ${X}, ${X:-d}, ${X-d},
// ${X:+a}) with the build args overriding ARG defaults. A variable it cannot resolve stays in the
// name as written (with its `$`), so the policy refuses it.
//
// Pure function; no I/O; thread-safe.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace kiln {

struct ContainerfileImage {
  std::string image;        // after substitution
  std::string instruction;  // "FROM", "COPY --from", "RUN --mount from="
  int line = 0;             // 1-based line of the instruction
};

/// Images in order of first use, each once. `args` are the build args (they override ARG
/// defaults, and resolve names even where no ARG declares them).
std::vector<ContainerfileImage> ContainerfileImages(const std::string& text,
                                                    const std::map<std::string, std::string>& args);

}  // namespace kiln
