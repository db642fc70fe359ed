// `kiln gc --dry-run --config FILE` (issue 19): prints what the storage collector would delete
// now, as one JSON object on stdout, without deleting anything:
//   {"dry_run": true, "total_bytes", "total_bytes_after", "global_budget_bytes" (0: none),
//    "global_over_budget",
//    "domains": {d: {"bytes", "bytes_after", "budget_bytes", "over_budget"}},
//    "bytes_by_kind": {kind: bytes},
//    "delete": [{"kind", "domain", "candidate", "path" (relative to state_dir), "bytes",
//                "reason"}]}
// It reads the journal from a private copy of <state_dir>/state (as `kiln state-check`), so it
// works offline and while `kiln serve` runs; builds that were running in the copy count as
// running (their candidates' things are kept). The collection itself runs only inside
// `kiln serve` (every storage.gc_interval_s), which also knows the builds that just started.
// Exit 0, 1 when the config or the state cannot be read, 2 on bad usage.
//
// Thread-safety: a plain function; blocks on file I/O.
#pragma once

#include <iosfwd>
#include <map>
#include <string>

namespace kiln {

int GcCommand(const std::map<std::string, std::string>& flags, bool dry_run, std::ostream& out,
              std::ostream& err);

}  // namespace kiln
