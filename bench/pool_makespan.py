#!/usr/bin/env python3
"""Issue 20 benchmark: makespan of 24 sleep-bound builds on 3 `kiln worker` processes behind one
`kiln serve` (loopback, mutual TLS, real layered builds pushed to scripts/registry.sh's registry),
against the ideal (each round's measured build times packed perfectly on the 3 workers).

Round 1: 24 new candidates (cold: each worker fetches, checks out, pulls the base); round 2: a new
commit of each (warm). Each build runs `sleep SLEEP_S` (default 2). Target (issue 20): makespan
<= 1.15x the ideal.

  flock /tmp/kiln-heavy.lock python3 bench/pool_makespan.py build/app/kiln
  (root; registry port KILN_POOL_REG_PORT=5241, kiln KILN_POOL_PORT=18841)

The registry, certificates, workers and kiln serve come from tests/integration/pool_fixture.py.
N=24 builds by default (KILN_MAKESPAN_N to change it).
"""
import json, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from pool_fixture import TERMINAL, Fixture, builds_in  # noqa: E402

fx = Fixture(sys.argv[1], "kiln-makespan.", reg_port=5241, port=18841)
ok = fx.ok
SLEEP_S = float(os.environ.get("SLEEP_S", "2"))
N, WORKERS = int(os.environ.get("KILN_MAKESPAN_N", "24")), 3


def run_round(mcp, cands, note):
    for c in cands:
        fx.commit_and_push(c, sleep_s=SLEEP_S, note=note)
    t0 = time.time()
    ids = {}
    for c in cands:
        res, _ = mcp.call("build_candidate", {"candidate": c, "wait": False})
        ids[c] = res["build_id"]
    done = {}
    while len(done) < len(cands):
        for c in cands:
            if c in done:
                continue
            st, _ = mcp.call("candidate_status", {"candidate": c})
            latest = st.get("latest_successful_build") or {}
            if latest.get("build_id") == ids[c]:
                done[c] = latest
            elif any(b.get("build_id") == ids[c] and b.get("status") in TERMINAL
                     for b in builds_in(st)):
                done[c] = {"status": "failed"}
        time.sleep(0.05)
    makespan = time.time() - t0
    ok_builds = [d for d in done.values() if d.get("status") == "succeeded"]
    build_s = [d["timings"]["build_ms"] / 1000 for d in ok_builds]
    ideal = sum(build_s) / WORKERS
    where = {}
    for c in cands:
        w = fx.worker_of(ids[c])
        where[w] = where.get(w, 0) + 1
    return {"round": note, "succeeded": len(ok_builds), "makespan_s": round(makespan, 2),
            "ideal_s": round(ideal, 2), "ratio": round(makespan / ideal, 3) if ideal else None,
            "sleep_ideal_s": N * SLEEP_S / WORKERS,
            "mean_build_s": round(sum(build_s) / max(1, len(build_s)), 2), "per_worker": where}


def main():
    fx.start_registry()
    fx.pki(["w1", "w2", "w3"])
    ports = {w: fx.start_worker(w) for w in ("w1", "w2", "w3")}
    fx.start_serve(fx.serve_config(workers=[f"127.0.0.1:{p}" for p in ports.values()],
                                   parallel=WORKERS, repository="pool/bench"))
    mcp = fx.mcp()
    cands = [f"m{i}" for i in range(N)]
    results = [run_round(mcp, cands, "cold"), run_round(mcp, cands, "warm")]
    for r in results:
        print(json.dumps(r), flush=True)
        ok(r["succeeded"] == N, f"{r['round']}: all {N} builds succeeded")


try:
    main()
finally:
    fx.cleanup()
sys.exit(fx.exit_code())
