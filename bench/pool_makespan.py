#!/usr/bin/env python3
"""Issue 20 benchmark: makespan of 24 sleep-bound builds on 3 `kiln worker` processes behind one
`kiln serve` (loopback, mutual TLS, real layered builds pushed to scripts/registry.sh's registry),
against the ideal (each round's measured build times packed perfectly on the 3 workers).

Round 1: 24 new candidates (cold: each worker fetches, checks out, pulls the base); round 2: a new
commit of each (warm). Each build runs `sleep SLEEP_S` (default 2). Target (issue 20): makespan
<= 1.15x the ideal.

  flock /tmp/kiln-heavy.lock python3 bench/pool_makespan.py build/app/kiln
  (root; registry port KILN_POOL_REG_PORT=5241, kiln KILN_POOL_PORT=18841)

The helpers (pki, start_worker, Mcp, git, ...) are those of tests/integration/pool_workers_test.py.
"""
import hashlib, json, os, re, secrets, shutil, signal, subprocess, sys, tempfile, time
import urllib.request, urllib.error

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
KILN = os.path.realpath(sys.argv[1])
REG_PORT = int(os.environ.get("KILN_POOL_REG_PORT", "5241"))
PORT = int(os.environ.get("KILN_POOL_PORT", "18841"))
T = tempfile.mkdtemp(prefix="kiln-makespan.", dir="/var/tmp")
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



def worker_of(build_id):
    for w in ("w1", "w2", "w3"):
        try:
            if f"worker: build {build_id} " in open(f"{T}/{w}/worker.log").read():
                return w
        except FileNotFoundError:
            pass
    return None


TERMINAL = ("succeeded", "failed", "cancelled", "superseded", "interrupted")
SLEEP_S = float(os.environ.get("SLEEP_S", "2"))
N, WORKERS = 24, 3


def run_round(mcp, src, agent_token, cands, note):
    for c in cands:
        commit_and_push(src, c, agent_token, sleep_s=SLEEP_S, note=note)
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
                     for b in _builds(st)):
                done[c] = {"status": "failed"}
        time.sleep(0.05)
    makespan = time.time() - t0
    ok_builds = [d for d in done.values() if d.get("status") == "succeeded"]
    build_s = [d["timings"]["build_ms"] / 1000 for d in ok_builds]
    ideal = sum(build_s) / WORKERS
    where = {}
    for c in cands:
        w = worker_of(ids[c])
        where[w] = where.get(w, 0) + 1
    return {"round": note, "succeeded": len(ok_builds), "makespan_s": round(makespan, 2),
            "ideal_s": round(ideal, 2), "ratio": round(makespan / ideal, 3) if ideal else None,
            "sleep_ideal_s": N * SLEEP_S / WORKERS,
            "mean_build_s": round(sum(build_s) / max(1, len(build_s)), 2), "per_worker": where}


def _builds(j):
    out = []
    if isinstance(j, dict):
        if "build_id" in j and "status" in j:
            out.append(j)
        for v in j.values():
            out += _builds(v)
    elif isinstance(j, list):
        for v in j:
            out += _builds(v)
    return out


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
    cfg = {"server": {"listen": f"127.0.0.1:{PORT}", "state_dir": f"{T}/sched",
                      "metrics_listen": "off"},
           "scheduler": {"max_parallel_builds": WORKERS,
                         "workers": sorted(f"127.0.0.1:{p}" for p in ports.values()),
                         "worker_tls": {"certificate": f"{d}/scheduler.crt",
                                        "key": f"{d}/scheduler.key",
                                        "worker_ca": f"{d}/worker-ca.crt"},
                         "worker_token_sha256": [hashlib.sha256(worker_token.encode()).hexdigest()]},
           "registries": {"local": {"url": f"http://127.0.0.1:{REG_PORT}",
                                    "auth_file": reg["auth_file"]}},
           "domains": {"d": {"token_sha256": [hashlib.sha256(agent_token.encode()).hexdigest()],
                             "max_parallel_builds": WORKERS,
                             "build": {"mode": "layered", "on_push": False, "timeout_s": 120,
                                       "layered": {
                                           "base_image": f"127.0.0.1:{REG_PORT}/kiln/busybox@{base}",
                                           "command": ["sh", "-c",
                                                       "mkdir -p out && cp app out/app && chmod 755 out/app && sleep $(cat sleep)"],
                                           "outputs": [{"from": "out/app", "to": "/app"}],
                                           "entrypoint": ["/app"]}},
                             "image": {"registry": "local", "repository": "pool/bench"}}}}
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
    src = f"{T}/src"
    os.makedirs(src)
    git(["init", "-q"], src)
    mcp = Mcp(agent_token)
    cands = [f"m{i}" for i in range(N)]
    results = [run_round(mcp, src, agent_token, cands, "cold"),
               run_round(mcp, src, agent_token, cands, "warm")]
    for r in results:
        print(json.dumps(r), flush=True)
        ok(r["succeeded"] == N, f"{r['round']}: all {N} builds succeeded")


try:
    main()
finally:
    cleanup()
sys.exit(1 if fails else 0)
