// Rootfs rules: the pure decisions of the layer extractor (deploy/rootfs_extractor.h). Every
// path in an image layer is attacker-controlled, so each one goes through these rules before
// anything touches the disk:
//   - CleanEntryPath: a tar entry name becomes a normalized path relative to the root; ".."
//     can never climb above the root and a leading "/" is dropped (as containerd does).
//   - ClassifyWhiteout: OCI whiteouts (".wh.<name>" deletes <name>, ".wh..wh..opq" empties
//     the directory of lower layers' entries).
//   - ResolveInRoot: follows symlinks as if the root were "/" (absolute targets restart at the
//     root, ".." stops at the root), so a write "through" a symlink lands inside the root.
//   - SanitizeMode / ActionFor: setuid/setgid bits are dropped, device nodes, FIFOs and other
//     special entries are skipped.
// Pure functions, no I/O (ResolveInRoot asks a caller-supplied lookup); thread-safe.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "common/status.h"

namespace kiln {

/// Normalizes a tar entry name to a path relative to the root: "" for the root itself,
/// otherwise '/'-separated segments without "", "." or "..". Leading "/" and "./" are dropped;
/// ".." removes the previous segment and is ignored at the root. Sets *hostile when the name
/// needed neutralizing (absolute, or a ".." that would have climbed above the root).
/// Returns InvalidArgument for a NUL byte or a name longer than 4096 bytes.
Status CleanEntryPath(std::string_view name, std::string* out, bool* hostile = nullptr);

struct Whiteout {
  enum class Kind {
    kNone,    // a regular entry
    kFile,    // delete `target` (a path relative to the root)
    kOpaque,  // remove everything lower layers put in directory `target` ("" = root)
    kIgnore,  // other ".wh..wh.*" AUFS metadata: skip the entry
  };
  Kind kind = Kind::kNone;
  std::string target;
};

/// Classifies a cleaned entry path (output of CleanEntryPath). A whiteout of "" or of ".."
/// style names ("/.wh.." , "/.wh..") is kIgnore. Never fails.
Whiteout ClassifyWhiteout(std::string_view clean_path);

/// Answers for one path relative to the root (always a cleaned path): nullopt when it is not a
/// symlink (or does not exist), else the link's target exactly as stored.
using SymlinkLookup = std::function<std::optional<std::string>(const std::string& rel)>;

/// Resolves `rel` (a cleaned path) inside the root: every symlink among the parent directories
/// (and the last segment too when `follow_last`) is replaced by its target interpreted with the
/// root as "/". The result is a cleaned relative path whose components (but the last when
/// !follow_last) are not symlinks according to `lookup`. Returns InvalidArgument after 40 links
/// (a loop) and for a link target with a NUL byte.
Status ResolveInRoot(const std::string& rel, bool follow_last, const SymlinkLookup& lookup,
                     std::string* out);

/// Tar entry types the extractor knows.
enum class EntryAction { kFile, kDir, kSymlink, kHardlink, kSkip };

/// What to do with a tar typeflag ('0', '\0', '7' files; '5' dirs; '2' symlinks; '1' hard
/// links). Character and block devices ('3', '4'), FIFOs ('6') and anything unknown: kSkip.
EntryAction ActionFor(char typeflag);

/// The mode bits to apply: permission bits and the sticky bit; setuid and setgid are dropped.
uint32_t SanitizeMode(uint32_t mode);

}  // namespace kiln
