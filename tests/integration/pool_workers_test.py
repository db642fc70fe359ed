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
import hashlib, json, os, re, secrets, shutil, signal, subprocess, sys, tempfile, time
import urllib.request, urllib.error

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
KILN = os.path.realpath(sys.argv[1])
REG_PORT = int(os.environ.get("KILN_POOL_REG_PORT", "5240"))
PORT = int(os.environ.get("KILN_POOL_PORT", "18840"))
T = tempfile.mkdtemp(prefix="kiln-pool.", dir="/var/tmp")
procs = {}
fails = []


def ok(cond, what):
    print(("ok - " if cond else "not ok - ") + what, flush=True)
    if not cond:
        fails.append(what)
    return cond


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True, **kw).stdout


def cleanup():
    for p in procs.values():
        if p.poll() is None:
            p.kill()
            p.wait()
    subprocess.run([f"{ROOT}/scripts/registry.sh", "stop", "--dir", f"{T}/reg"],
                   capture_output=True)
    if not os.environ.get("KILN_POOL_KEEP"):
        shutil.rmtree(T, ignore_errors=True)


def pki():
    d = f"{T}/pki"
    os.makedirs(d)
    for ca in ("scheduler-ca", "worker-ca"):
        sh(f"cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -keyout {ca}.key -out {ca}.crt"
           f" -subj /CN={ca} -days 2")
    for name, ca in (("scheduler", "scheduler-ca"), ("w1", "worker-ca"), ("w2", "worker-ca"),
                     ("w3", "worker-ca")):
        sh(f"cd {d} && openssl req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr"
           f" -subj /CN={name} && openssl x509 -req -in {name}.csr -CA {ca}.crt -CAkey {ca}.key"
           f" -CAcreateserial -out {name}.crt -days 2")
    return d


def start_worker(name, d, reg, worker_token_file):
    st = f"{T}/{name}"
    os.makedirs(st, exist_ok=True)
    cfg = {"log_level": "info",
           "server": {"state_dir": f"{st}/state"},
           "registries": {"local": {"url": f"http://127.0.0.1:{REG_PORT}",
                                    "auth_file": reg["auth_file"]}},
           "worker": {"name": name, "listen": "127.0.0.1:0", "slots": 1,
                      "port_file": f"{st}/port",
                      "git_token_file": worker_token_file,
                      "tls": {"certificate": f"{d}/{name}.crt", "key": f"{d}/{name}.key",
                              "scheduler_ca": f"{d}/scheduler-ca.crt"}}}
    with open(f"{st}/worker.json", "w") as f:
        json.dump(cfg, f)
    log = open(f"{st}/worker.log", "a")
    procs[name] = subprocess.Popen([KILN, "worker", "--config", f"{st}/worker.json"],
                                   stdout=log, stderr=subprocess.STDOUT,
                                   env={"PATH": os.environ["PATH"], "HOME": st})
    for _ in range(300):
        if os.path.exists(f"{st}/port"):
            return int(open(f"{st}/port").read())
        if procs[name].poll() is not None:
            break
        time.sleep(0.05)
    raise SystemExit(f"worker {name} did not start: {open(f'{st}/worker.log').read()}")


class Mcp:
    def __init__(self, token):
        self.h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                  "Accept": "application/json, text/event-stream"}
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "pool-test", "version": "1"}}})
        self.h["MCP-Session-Id"] = r.headers["Mcp-Session-Id"]
        self.h["MCP-Protocol-Version"] = "2025-11-25"
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body, timeout=300):
        req = urllib.request.Request(f"http://127.0.0.1:{PORT}/mcp", json.dumps(body).encode(),
                                     self.h)
        r = urllib.request.urlopen(req, timeout=timeout)
        r.body = r.read()
        return r

    def call(self, name, args, timeout=300):
        r = self.post({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {"name": name, "arguments": args}}, timeout)
        body = r.body.decode()
        msgs = [json.loads(l[5:]) for l in body.splitlines() if l.startswith("data:")]
        if not msgs:
            msgs = [json.loads(body)]
        res = [m for m in msgs if "result" in m or "error" in m][-1]
        if "error" in res:
            raise RuntimeError(f"{name}: {res['error']}")
        res = res["result"]
        return json.loads(res["content"][0]["text"]), res


def git(args, cwd, token=None):
    pre = ["git", "-c", "user.name=a", "-c", "user.email=a@x"]
    env = dict(os.environ)
    if token:  # the agent's credential, through the environment as an agent would configure it
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Bearer {token}"})
    return subprocess.run(pre + args, cwd=cwd, env=env, capture_output=True, text=True)


def commit_and_push(src, cand, token, sleep_s=0, note=""):
    with open(f"{src}/app", "w") as f:
        f.write(f"#!/bin/sh\necho {cand} {note}\n")
    with open(f"{src}/sleep", "w") as f:
        f.write(str(sleep_s))
    git(["add", "-A"], src)
    git(["commit", "-qm", f"{cand} {note}"], src)
    r = git(["push", "-q", "-f", f"http://127.0.0.1:{PORT}/git/d.git", f"HEAD:refs/heads/{cand}"],
            src, token)
    assert r.returncode == 0, r.stderr


def find_build(j, bid):
    """The object describing build `bid` (with a status) anywhere in a tool result."""
    if isinstance(j, dict):
        if j.get("build_id") == bid and "status" in j:
            return j
        for v in j.values():
            f = find_build(v, bid)
            if f:
                return f
    elif isinstance(j, list):
        for v in j:
            f = find_build(v, bid)
            if f:
                return f
    return None


def worker_of(build_id):
    for w in ("w1", "w2", "w3"):
        try:
            if f"worker: build {build_id} " in open(f"{T}/{w}/worker.log").read():
                return w
        except FileNotFoundError:
            pass
    return None


def workers_of(build_id):
    return [w for w in ("w1", "w2", "w3")
            if f"worker: build {build_id} " in open(f"{T}/{w}/worker.log").read()]


def main():
    reg = dict(l.split("=", 1) for l in sh(
        f"{ROOT}/scripts/registry.sh start --dir {T}/reg --port {REG_PORT}").split())
    sh(f"{ROOT}/scripts/base_images.sh --registry 127.0.0.1:{REG_PORT} "
       f"--authfile {reg['auth_file']}")
    base = sh(f"skopeo inspect --authfile {reg['auth_file']} --tls-verify=false "
              f"docker://127.0.0.1:{REG_PORT}/kiln/busybox:1 --format '{{{{.Digest}}}}'").strip()
    d = pki()
    agent_token = secrets.token_hex(16)
    worker_token = secrets.token_hex(16)
    with open(f"{T}/worker-token", "w") as f:
        f.write(worker_token + "\n")
    os.chmod(f"{T}/worker-token", 0o600)
    ports = {w: start_worker(w, d, reg, f"{T}/worker-token") for w in ("w1", "w2", "w3")}
    addr = {f"127.0.0.1:{p}": w for w, p in ports.items()}
    cfg = {"server": {"listen": f"127.0.0.1:{PORT}", "state_dir": f"{T}/sched",
                      "metrics_listen": "off"},
           "scheduler": {"max_parallel_builds": 3, "workers": sorted(addr),
                         "worker_tls": {"certificate": f"{d}/scheduler.crt",
                                        "key": f"{d}/scheduler.key",
                                        "worker_ca": f"{d}/worker-ca.crt"},
                         "worker_token_sha256": [hashlib.sha256(worker_token.encode()).hexdigest()]},
           "registries": {"local": {"url": f"http://127.0.0.1:{REG_PORT}",
                                    "auth_file": reg["auth_file"]}},
           "domains": {"d": {"token_sha256": [hashlib.sha256(agent_token.encode()).hexdigest()],
                             "max_parallel_builds": 3,
                             "build": {"mode": "layered", "on_push": False, "timeout_s": 120,
                                       "layered": {
                                           "base_image": f"127.0.0.1:{REG_PORT}/kiln/busybox@{base}",
                                           "command": ["sh", "-c",
                                                       "mkdir -p out && cp app out/app && chmod 755 out/app && sleep $(cat sleep)"],
                                           "outputs": [{"from": "out/app", "to": "/app"}],
                                           "entrypoint": ["/app"]}},
                             "image": {"registry": "local", "repository": "pool/app"}}}}
    with open(f"{T}/kiln.json", "w") as f:
        json.dump(cfg, f)
    log = open(f"{T}/kiln.log", "a")
    procs["serve"] = subprocess.Popen([KILN, "serve", "--config", f"{T}/kiln.json"], stdout=log,
                                      stderr=subprocess.STDOUT)
    for _ in range(200):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{PORT}/healthz", timeout=1)
            break
        except Exception:
            time.sleep(0.05)

    # Workers never see an agent token: not in their configs, argv or environment.
    for w, p in procs.items():
        if w == "serve":
            continue
        seen = open(f"{T}/{w}/worker.json").read() + open(f"/proc/{p.pid}/cmdline").read() + \
            open(f"/proc/{p.pid}/environ").read()
        ok(agent_token not in seen, f"{w} holds no agent token")

    src = f"{T}/src"
    os.makedirs(src)
    git(["init", "-q"], src)
    mcp = Mcp(agent_token)
    cands = [f"c{i}" for i in range(1, 10)]
    first = {}
    for c in cands:
        commit_and_push(src, c, agent_token, note="v1")
        res, raw = mcp.call("build_candidate", {"candidate": c})
        if not ok(res.get("status") == "succeeded", f"{c}: first build succeeds on the pool"):
            print(json.dumps(res)[:2000])
            continue
        first[c] = worker_of(res["build_id"])
    used = set(first.values())
    ok(len(used) >= 2, f"builds spread over the workers by affinity: {first}")
    ok(None not in used, "every build ran on a worker")

    # Same candidates, new commits: each goes back to its worker (warm).
    again = {}
    overhead = []
    for c in cands:
        commit_and_push(src, c, agent_token, note="v2")
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
    r = git(["push", "-q", f"http://127.0.0.1:{PORT}/git/d.git", "HEAD:refs/heads/evil"], src,
            worker_token)
    ok(r.returncode != 0, "the worker credential cannot push")
    try:
        Mcp(worker_token)
        ok(False, "the worker credential cannot use /mcp")
    except urllib.error.HTTPError as e:
        ok(e.code == 401, f"the worker credential cannot use /mcp (HTTP {e.code})")

    # kill -9 of the worker running a build: retried once elsewhere.
    victim_c = cands[0]
    commit_and_push(src, victim_c, agent_token, sleep_s=6, note="v3")
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
    status, st = None, {}
    for _ in range(1200):  # poll candidate_status until the build ended (at most 120 s)
        st, _ = mcp.call("candidate_status", {"candidate": victim_c})
        found = find_build(st, bid)
        status = found.get("status") if found else None
        if status in ("succeeded", "failed", "cancelled", "superseded", "interrupted"):
            break
        time.sleep(0.1)
    ok(status == "succeeded", f"the lost worker's build is retried and succeeds: {status} "
       f"after {time.time() - t_kill:.1f} s")
    ran = workers_of(bid)
    ok(len(ran) == 2 and ran[0] != ran[1] and victim in ran,
       f"it ran on the killed worker and then on one other: {ran}")
    journal = [json.loads(l) for l in open(f"{T}/sched/pool-journal.jsonl")]
    lost = [j for j in journal if j.get("build_id") == bid]
    ok(len(lost) == 1 and lost[0]["event"] == "worker_lost" and lost[0]["retry"] is True and
       addr.get(lost[0]["worker"]) == victim, f"one worker_lost record for the build: {lost}")
    logtxt, _ = mcp.call("build_log", {"build_id": bid})
    ok("lost mid-build; retrying on another worker" in json.dumps(logtxt),
       "the build log says the worker was lost and the build retried")
    # Exactly one terminal record of the build in the scheduler's durable state.
    for _ in range(50):  # the journal writer runs beside the actors
        doc = json.loads(subprocess.run([KILN, "state-check", "--state-dir", f"{T}/sched",
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
    tag = sh(f"skopeo inspect --authfile {reg['auth_file']} --tls-verify=false "
             f"docker://127.0.0.1:{REG_PORT}/pool/app:{victim_c} --format '{{{{.Digest}}}}'").strip()
    ok(digest and tag == digest, f"the tag points at the retried build's image ({tag})")
    # No credential in any log.
    logs = "".join(open(f"{T}/{w}/worker.log").read() for w in ("w1", "w2", "w3")) + \
        open(f"{T}/kiln.log").read()
    ok(worker_token not in logs and agent_token not in logs, "no credential in kiln's logs")


try:
    main()
finally:
    cleanup()
print(f"{len(fails)} failed" if fails else "all passed")
sys.exit(1 if fails else 0)
