// `kiln state-check --state-dir DIR [--builds]`: verifies kiln's durable state (DIR/state, see
// docs/state.md) without touching it — for backups, restores and the crash tests.
//
// It copies DIR/state to a private temporary directory (so it works while `kiln serve` runs:
// records are checksummed and a torn tail is dropped), loads the copy with the same StateStore
// kiln uses, and prints one JSON object on stdout:
//   {"ok", "builds", "journal_records", "generation", "load_ms", "truncated_bytes",
//    "corruptions": [...], "notes": [...], "duplicate_terminal": [ids], "duplicate_started": [ids],
//    "interrupted": [ids of builds that were not final in the copy],
//    "statuses": {"succeeded": n, ...},
//    "domains": {d: {"deployed": {"deploy_id","build_id","image","status","at_ms"}|null,
//                    "latest_deploy": {...}|null, "latest_successful": {"id","digest"}|null,
//                    "candidates": {c: {"builds": n, "latest_successful": {"id","digest"}|null}}}},
//    "build_list": [{"id","domain","candidate","status","digest","commit","error"}]  (--builds)}
// Exit 0 when the state is consistent (no corruption, no duplicate records), 1 when it is not,
// 2 on bad usage or when the state cannot be read at all.
//
// Thread-safety: a plain function; blocks on file I/O.
#pragma once

#include <iosfwd>
#include <string>

namespace kiln {

int StateCheckCommand(const std::string& state_dir, bool list_builds, std::ostream& out,
                      std::ostream& err);

}  // namespace kiln
