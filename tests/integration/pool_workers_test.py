#!/usr/bin/env python3
"""Issue 20: three `kiln worker` processes on loopback behind one `kiln serve` (mutual TLS,
certificates made here with the openssl CLI, each worker with its own state directory), real
layered builds pushed to the real registry (scripts/registry.sh), source fetched by the workers
from kiln's git endpoint with the worker credential.

Checks:
  - builds of 9 candidates spread over the workers by affinity, and each candidate's next build
    (a new commit) goes back to the worker that built it before;
  - a worker is never given an agent token (its config, argv and environment hold none);
  - kill -9 of the worker running a build: the build is retried once on another worker and
    succeeds, the pool journal has one worker_lost record for it, the state journal exactly
    one terminal record, and the registry tag points at the retried build's digest;
  - the worker credential fetches but cannot push, and cannot call /mcp.

  tests/integration/pool_workers_test.py path/to/kiln      (root; registry port 5240, kiln 18840)
"""
import json, os, signal, subprocess, sys, time
import urllib.error

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pool_fixture import Fixture, git  # noqa: E402

fx = Fixture(sys.argv[1], "kiln-pool.", reg_port=5240, port=18840)
ok = fx.ok


def main():
    fx.start_registry()
    fx.pki(["w1", "w2", "w3"])
    ports = {w: fx.start_worker(w) for w in ("w1", "w2", "w3")}
    addr = {f"127.0.0.1:{p}": w for w, p in ports.items()}
    fx.start_serve(fx.serve_config(workers=list(addr)))
    agent_token, worker_token, T, procs = fx.agent_token, fx.worker_token, fx.T, fx.procs
    worker_of = fx.worker_of

    # Workers never see an agent token: not in their configs, argv or environment.
    for w, p in procs.items():
        if w == "serve":
            continue
        seen = open(f"{T}/{w}/worker.json").read() + open(f"/proc/{p.pid}/cmdline").read() + \
            open(f"/proc/{p.pid}/environ").read()
        ok(agent_token not in seen, f"{w} holds no agent token")

    src = fx.src
    mcp = fx.mcp()
    cands = [f"c{i}" for i in range(1, 10)]
    first = {}
    for c in cands:
        fx.commit_and_push(c, note="v1")
        res, raw = mcp.call("build_candidate", {"candidate": c})
        if not ok(res.get("status") == "succeeded", f"{c}: first build succeeds on the pool"):
            print(json.dumps(res)[:2000])
            continue
        first[c] = worker_of(res["build_id"])
        # Issue 18: one build at a time finds the push lane free: no separate blob stage (no
        # upload_blobs op on the worker); under the grant the push op uploads the blobs and
        # puts the manifest in one phase. (Builds that find the lane held upload their blobs
        # before it, issue 20: actors_test, bench/pool_push_lane.py.)
        bid0 = res["build_id"]
        wlog = open(f"{T}/{first[c]}/worker.log").read() if first[c] else ""
        ok(f"worker: upload_blobs {bid0}" not in wlog and f"worker: push {bid0} of " in wlog,
           f"{c}: the lane was free: one push op, no blob stage (worker log)")
        blog = json.dumps(mcp.call("build_log", {"build_id": bid0})[0])
        ok("upload(s) before the push lane" not in blog and "manifest put" in blog,
           f"{c}: the push under the grant uploads the blobs and puts the manifest")
    used = set(first.values())
    ok(len(used) >= 2, f"builds spread over the workers by affinity: {first}")
    ok(None not in used, "every build ran on a worker")

    # Same candidates, new commits: each goes back to its worker (warm).
    again = {}
    overhead = []
    for c in cands:
        fx.commit_and_push(c, note="v2")
        res, _ = mcp.call("build_candidate", {"candidate": c})
        ok(res.get("status") == "succeeded", f"{c}: second build succeeds")
        again[c] = worker_of(res.get("build_id", "?"))
        parts = res.get("timings", {}).get("parts", {})
        if "to_builder_ms" in parts:
            overhead.append((parts["dispatch_ms"], parts["to_builder_ms"]))
    ok(again == first, f"each candidate's next build went back to its worker: {again}")
    ok(len(overhead) == len(cands), "every pool build reports its dispatch timings")
    if overhead:
        ds = sorted(o[0] for o in overhead)
        ts = sorted(o[1] for o in overhead)
        print(f"# dispatch over loopback TLS (warm, n={len(ds)}): decision -> worker has the "
              f"request: median {ds[len(ds) // 2]} ms, max {ds[-1]} ms; decision -> builder "
              f"starts (fetch + checkout included): median {ts[len(ts) // 2]} ms, max {ts[-1]} ms",
              flush=True)

    # Wrong use of the worker credential: no push, no MCP.
    r = git(["push", "-q", f"http://127.0.0.1:{fx.port}/git/d.git", "HEAD:refs/heads/evil"], src,
            worker_token)
    ok(r.returncode != 0, "the worker credential cannot push")
    try:
        fx.mcp(worker_token)
        ok(False, "the worker credential cannot use /mcp")
    except urllib.error.HTTPError as e:
        ok(e.code == 401, f"the worker credential cannot use /mcp (HTTP {e.code})")

    # kill -9 of the worker running a build: retried once elsewhere.
    victim_c = cands[0]
    fx.commit_and_push(victim_c, sleep_s=6, note="v3")
    res, _ = mcp.call("build_candidate", {"candidate": victim_c, "wait": False})
    bid = res["build_id"]
    victim = None
    for _ in range(400):
        victim = worker_of(bid)
        if victim:
            break
        time.sleep(0.05)
    ok(victim == first[victim_c], f"the slow build runs on its candidate's worker ({victim})")
    time.sleep(1.5)
    t_kill = time.time()
    procs[victim].send_signal(signal.SIGKILL)
    procs[victim].wait()
    status = fx.wait_build(mcp, victim_c, bid)
    ok(status == "succeeded", f"the lost worker's build is retried and succeeds: {status} "
       f"after {time.time() - t_kill:.1f} s")
    ran = fx.workers_of(bid)
    ok(len(ran) == 2 and ran[0] != ran[1] and victim in ran,
       f"it ran on the killed worker and then on one other: {ran}")
    journal = [json.loads(l) for l in open(f"{T}/sched/pool-journal.jsonl")]
    lost = [j for j in journal if j.get("build_id") == bid and j.get("event") != "dispatched"]
    ok(len(lost) == 1 and lost[0]["event"] == "worker_lost" and lost[0]["retry"] is True and
       addr.get(lost[0]["worker"]) == victim, f"one worker_lost record for the build: {lost}")
    logtxt, _ = mcp.call("build_log", {"build_id": bid})
    ok("lost mid-build; retrying on another worker" in json.dumps(logtxt),
       "the build log says the worker was lost and the build retried")
    # Exactly one terminal record of the build in the scheduler's durable state.
    for _ in range(50):  # the journal writer runs beside the actors
        doc = json.loads(subprocess.run([fx.kiln, "state-check", "--state-dir", f"{T}/sched",
                                         "--builds"], capture_output=True, text=True).stdout)
        recs = [b for b in doc.get("build_list", []) if b.get("id") == bid]
        if recs and recs[0].get("status") == "succeeded":
            break
        time.sleep(0.1)
    ok(len(recs) == 1 and recs[0].get("status") == "succeeded" and
       doc.get("duplicate_terminal") == [] and doc.get("duplicate_started") == [],
       f"exactly one terminal record for {bid}: {recs}, duplicate_terminal="
       f"{doc.get('duplicate_terminal')}")
    # The terminal record's image is the candidate's latest successful build and its tag.
    digest = recs[0].get("digest") if recs else None
    st, _ = mcp.call("candidate_status", {"candidate": victim_c})
    latest = st.get("latest_successful_build") or {}
    ok(latest.get("build_id") == bid and (latest.get("image") or {}).get("digest") == digest,
       f"the retried build is the candidate's latest successful build: {latest}")
    tag = fx.digest(f"pool/app:{victim_c}")
    ok(digest and tag == digest, f"the tag points at the retried build's image ({tag})")
    # No credential in any log.
    logs = "".join(open(f"{T}/{w}/worker.log").read() for w in ("w1", "w2", "w3")) + \
        open(f"{T}/kiln.log").read()
    ok(worker_token not in logs and agent_token not in logs, "no credential in kiln's logs")


try:
    main()
finally:
    fx.cleanup()
sys.exit(fx.exit_code())
