#!/usr/bin/env python3
"""Issue 20: a scheduler restart re-attaches to the builds still running on live workers.

Two real `kiln worker` processes behind one `kiln serve` (tests/integration/pool_fixture.py:
mutual TLS, real layered builds, real registry and git):
  - a slow build (it sleeps on its worker); kill -9 of kiln serve mid-build; kiln serve again:
    the build is carried on under its own id (the worker is asked with `attach`, which joins
    the running build and never starts one), pushed, visible in candidate_status, exactly one
    terminal record in the state journal, the registry tag at its image, and the worker ran the
    build once;
  - the same, but the worker running the build is killed too: the build is interrupted (one
    terminal record), and the worker that is left starts no build of it.

  tests/integration/pool_restart_test.py path/to/kiln      (root; registry port 5310, kiln 18310)
"""
import json, os, subprocess, sys, time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pool_fixture import Fixture, find_build  # noqa: E402

fx = Fixture(sys.argv[1], "kiln-pool-restart.", reg_port=5310, port=18310)
ok = fx.ok


def records(bid):
    """The state journal's records of `bid` and the duplicate lists, as `kiln state-check`."""
    doc = json.loads(subprocess.run([fx.kiln, "state-check", "--state-dir", f"{fx.T}/sched",
                                     "--builds"], capture_output=True, text=True).stdout or "{}")
    return [b for b in doc.get("build_list", []) if b.get("id") == bid], doc


def slow_build(mcp, cand, note):
    """Starts a build of `cand` that sleeps 8 s on its worker; (build id, worker) once the
    worker runs it."""
    fx.commit_and_push(cand, sleep_s=8, note=note)
    res, _ = mcp.call("build_candidate", {"candidate": cand, "wait": False})
    bid = res["build_id"]
    for _ in range(400):
        if fx.worker_of(bid):
            break
        time.sleep(0.05)
    return bid, fx.worker_of(bid)


def restart_serve(cfg):
    fx.procs["serve"].kill()  # SIGKILL: nothing of kiln serve runs its shutdown
    fx.procs["serve"].wait()
    fx.start_serve(cfg)
    return fx.mcp()


def main():
    fx.start_registry()
    fx.pki(["w1", "w2"])
    ports = {w: fx.start_worker(w) for w in ("w1", "w2")}
    cfg = fx.serve_config(workers=[f"127.0.0.1:{p}" for p in ports.values()], parallel=2,
                          repository="restart/app")
    fx.start_serve(cfg)
    mcp = fx.mcp()

    # 1. kiln serve killed mid-build, the worker lives: the build is carried on.
    bid, worker = slow_build(mcp, "c1", "v1")
    ok(worker is not None, f"the slow build {bid} runs on a worker ({worker})")
    time.sleep(1.5)
    t_kill = time.time()
    mcp = restart_serve(cfg)
    status = fx.wait_build(mcp, "c1", bid)
    ok(status == "succeeded",
       f"the build is carried on after the restart: {status} after {time.time() - t_kill:.1f} s")
    st, _ = mcp.call("candidate_status", {"candidate": "c1"})
    ok(find_build(st, bid) is not None, "candidate_status shows the build under its own id")
    wlog = fx.log(worker)
    ok(f"worker: attach {bid}: joining the running build" in wlog,
       "the restarted kiln joined the running build on its worker")
    ok(wlog.count(f"worker: build {bid} of ") == 1 and fx.workers_of(bid) == [worker],
       f"the build ran once, on {worker} only: {fx.workers_of(bid)}")
    blog = json.dumps(mcp.call("build_log", {"build_id": bid})[0])
    ok("kiln restarted during build" in blog and f"re-attached to the build on worker" in blog,
       "the build log says it was carried on after the restart")
    for _ in range(50):  # the journal writer runs beside the actors
        recs, doc = records(bid)
        if recs and recs[0].get("status") == "succeeded":
            break
        time.sleep(0.1)
    ok(len(recs) == 1 and recs[0].get("status") == "succeeded" and
       doc.get("duplicate_terminal") == [] and doc.get("duplicate_started") == [],
       f"exactly one terminal record: {recs}, duplicate_terminal={doc.get('duplicate_terminal')}")
    digest = recs[0].get("digest") if recs else None
    tag = fx.digest("restart/app:c1")
    ok(digest and tag == digest, f"the tag points at the carried-on build's image ({tag})")

    # 2. kiln serve and the build's worker killed: the build is interrupted.
    bid2, worker2 = slow_build(mcp, "c2", "v1")
    ok(worker2 is not None, f"the second slow build {bid2} runs on a worker ({worker2})")
    time.sleep(1.5)
    fx.procs[worker2].kill()
    fx.procs[worker2].wait()
    mcp = restart_serve(cfg)
    status = fx.wait_build(mcp, "c2", bid2)
    ok(status == "interrupted", f"a build whose worker is gone is interrupted: {status}")
    for _ in range(50):
        recs, doc = records(bid2)
        if recs and recs[0].get("status") == "interrupted":
            break
        time.sleep(0.1)
    ok(len(recs) == 1 and recs[0].get("status") == "interrupted" and
       doc.get("duplicate_terminal") == [], f"one interrupted record: {recs}")
    ok(fx.workers_of(bid2) == [worker2], f"no other worker started it: {fx.workers_of(bid2)}")
    # The first build is still the candidate's (the second restart did not touch it).
    recs, _ = records(bid)
    ok(recs and recs[0].get("status") == "succeeded", "the first build stays succeeded")
    logs = fx.log("serve") + "".join(fx.log(w) for w in ("w1", "w2"))
    ok(fx.worker_token not in logs and fx.agent_token not in logs, "no credential in the logs")


try:
    main()
finally:
    fx.cleanup()
sys.exit(fx.exit_code())
