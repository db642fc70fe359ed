#!/usr/bin/env python3
"""Issue 20, worker retention end to end: one `kiln worker` with worker.max_candidates = 2 behind
`kiln serve` (tests/integration/pool_fixture.py: real layered builds, real registry, mutual TLS).

Checks: after a third candidate is built, the least recently built one's repository, workspace
and build storage are gone from the worker (and its log says so); its next build succeeds and
the scheduler placed it as cold (the worker no longer advertises it warm); a candidate still
kept builds warm; a restarted worker keeps evicting the least recently built.

  tests/integration/pool_prune_test.py path/to/kiln    (root; registry port 5353, kiln 18353, worker 18357)
"""
import os, sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pool_fixture import Fixture  # noqa: E402

fx = Fixture(sys.argv[1], "kiln-pool-prune.", reg_port=5353, port=18353)
ok = fx.ok


def main():
    fx.start_registry()
    fx.pki(["w1"])
    wcfg = {"max_candidates": 2, "max_candidates_per_domain": 2,
            "listen": f"127.0.0.1:{fx.port + 4}"}  # fixed: the worker is restarted below
    port = fx.start_worker("w1", worker=wcfg)
    fx.start_serve(fx.serve_config(workers=[f"127.0.0.1:{port}"], parallel=1))
    mcp = fx.mcp()
    cdir = f"{fx.T}/w1/state/worker/domains/d/candidates"

    def build(c, note):
        fx.commit_and_push(c, note=note)
        res, _ = mcp.call("build_candidate", {"candidate": c})
        ok(res.get("status") == "succeeded", f"{c} ({note}) builds: {res.get('status')} "
           f"{(res.get('error') or '')[:300]}")
        log, _ = mcp.call("build_log", {"build_id": res.get("build_id", "?")})
        return str(log)

    for c in ("p1", "p2", "p3"):
        build(c, "v1")
    kept = sorted(os.listdir(cdir))
    ok(kept == ["p2", "p3"], f"the least recently built candidate was evicted: {kept}")
    ok("evicted candidate d/p1" in fx.log("w1"), "the worker's log says p1 was evicted")
    log = build("p1", "v2")
    ok("building on worker" in log and "(cold)" in log,
       "the evicted candidate builds again, placed cold")
    ok(sorted(os.listdir(cdir)) == ["p1", "p3"], f"then p2 went: {sorted(os.listdir(cdir))}")
    log = build("p3", "v2")
    ok("(warm)" in log, "a kept candidate still builds warm")
    ok(sorted(os.listdir(cdir)) == ["p1", "p3"], "nothing evicted under the limit")

    # A restarted worker takes each candidate directory's mtime as its last build: p1 (built
    # before p3's last build) is the one to go when p4 comes.
    fx.procs["w1"].kill()
    fx.procs["w1"].wait()
    fx.start_worker("w1", worker=wcfg)
    build("p4", "v1")
    ok(sorted(os.listdir(cdir)) == ["p3", "p4"],
       f"after a restart the least recently built went: {sorted(os.listdir(cdir))}")


try:
    main()
finally:
    fx.cleanup()
sys.exit(fx.exit_code())
