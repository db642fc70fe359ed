#!/usr/bin/env python3
"""Issue 20 benchmark: how long the registry's push lane is held per build, and the makespan of
three builds that end together, on 3 `kiln worker` processes behind one `kiln serve` (loopback,
mutual TLS, real layered builds; tests/integration/pool_fixture.py). Each candidate's image has
a fresh layer of SIZE_MB random bytes (uncompressed on loopback), so its upload is real work.

push_ms of a build is the time under the push-lane grant; blobs_ms (when reported) the blob
upload before it. With blobs uploaded inside the grant (before issue 20's change) the three
uploads run one after another; with the blob stage they run at once and the lane covers only
the manifest.

  flock /tmp/kiln-heavy.lock python3 bench/pool_push_lane.py build/app/kiln
  (root; registry port KILN_POOL_REG_PORT=5312, kiln KILN_POOL_PORT=18312; ROUNDS=3, SIZE_MB=24)
"""
import json, os, sys, time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tests", "integration"))
from pool_fixture import TERMINAL, Fixture, builds_in, git  # noqa: E402

fx = Fixture(sys.argv[1], "kiln-pushlane.", reg_port=5312, port=18312)
SIZE_MB = int(os.environ.get("SIZE_MB", "24"))
ROUNDS = int(os.environ.get("ROUNDS", "3"))


def commit_big(cand, note):
    """A commit of `cand` whose app (copied into the image) carries SIZE_MB fresh random bytes."""
    with open(f"{fx.src}/app", "wb") as f:
        f.write(f"#!/bin/sh\necho {cand} {note}\nexit 0\n".encode())
        f.write(os.urandom(SIZE_MB << 20))
    with open(f"{fx.src}/sleep", "w") as f:
        f.write("0")
    git(["add", "-A"], fx.src)
    git(["commit", "-qm", f"{cand} {note}"], fx.src)
    r = git(["push", "-q", "-f", f"http://127.0.0.1:{fx.port}/git/d.git",
             f"HEAD:refs/heads/{cand}"], fx.src, fx.agent_token)
    assert r.returncode == 0, r.stderr


def run_round(mcp, cands, note):
    for c in cands:
        commit_big(c, note)
    t0 = time.time()
    ids = {c: mcp.call("build_candidate", {"candidate": c, "wait": False})[0]["build_id"]
           for c in cands}
    done = {}
    while len(done) < len(cands):
        for c in cands:
            if c in done:
                continue
            st, _ = mcp.call("candidate_status", {"candidate": c})
            b = next((b for b in builds_in(st) if b.get("build_id") == ids[c]
                      and b.get("status") in TERMINAL), None)
            if b:
                done[c] = b
        time.sleep(0.05)
    makespan = time.time() - t0
    push = sorted(d.get("timings", {}).get("push_ms", 0) for d in done.values())
    blobs = sorted(d.get("timings", {}).get("parts", {}).get("blobs_ms", 0) for d in done.values())
    return {"round": note, "succeeded": sum(d.get("status") == "succeeded" for d in done.values()),
            "makespan_s": round(makespan, 2), "lane_held_ms": push, "blobs_ms": blobs,
            "lane_held_total_ms": sum(push)}


def main():
    fx.start_registry()
    fx.pki(["w1", "w2", "w3"])
    ports = {w: fx.start_worker(w) for w in ("w1", "w2", "w3")}
    fx.start_serve(fx.serve_config(workers=[f"127.0.0.1:{p}" for p in ports.values()],
                                   repository="lane/app"))
    mcp = fx.mcp()
    cands = ["a1", "a2", "a3"]
    rounds = [run_round(mcp, cands, f"r{i}") for i in range(ROUNDS)]
    for r in rounds:
        print(json.dumps(r), flush=True)
    fx.ok(all(r["succeeded"] == len(cands) for r in rounds), "every build succeeded")


try:
    main()
finally:
    fx.cleanup()
sys.exit(fx.exit_code())
