"""Shared fixture of the worker-pool tests and benchmarks (issue 20): a real registry with the base
images (scripts/registry.sh, scripts/base_images.sh), certificates made here with the openssl CLI,
`kiln worker` processes on loopback (each with its own state directory), one `kiln serve` in front
of them, an MCP client and the git helpers an agent would use.

    fx = Fixture(sys.argv[1], "kiln-pool.", reg_port=5240, port=18840)
    try:
        fx.start_registry()
        fx.pki(["w1", "w2", "w3"])
        ports = {w: fx.start_worker(w) for w in ("w1", "w2", "w3")}
        fx.start_serve(fx.serve_config(workers=[f"127.0.0.1:{p}" for p in ports.values()]))
        mcp = fx.mcp()
        fx.commit_and_push("c1", note="v1")
        res, _ = mcp.call("build_candidate", {"candidate": "c1"})
        fx.ok(res.get("status") == "succeeded", "c1 builds")
    finally:
        fx.cleanup()
    sys.exit(fx.exit_code())

The ports default to the arguments and are overridden by KILN_POOL_REG_PORT / KILN_POOL_PORT;
KILN_POOL_KEEP=1 keeps the scratch directory (fx.T) with every log.
"""
import hashlib, json, os, secrets, shutil, subprocess, tempfile, time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TERMINAL = ("succeeded", "failed", "cancelled", "superseded", "interrupted")
# The layered build of every pool test: copies `app` to the image and sleeps `cat sleep` seconds.
BUILD_COMMAND = ["sh", "-c",
                 "mkdir -p out && cp app out/app && chmod 755 out/app && sleep $(cat sleep)"]


def sh(cmd, **kw):
    return subprocess.run(cmd, shell=True, check=True, capture_output=True, text=True, **kw).stdout


def git(args, cwd, token=None):
    pre = ["git", "-c", "user.name=a", "-c", "user.email=a@x"]
    env = dict(os.environ)
    if token:  # the agent's credential, through the environment as an agent would configure it
        env.update({"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "http.extraHeader",
                    "GIT_CONFIG_VALUE_0": f"Authorization: Bearer {token}"})
    return subprocess.run(pre + args, cwd=cwd, env=env, capture_output=True, text=True)


def builds_in(j):
    """Every object describing a build (with a build_id and a status) anywhere in a tool result."""
    out = []
    if isinstance(j, dict):
        if "build_id" in j and "status" in j:
            out.append(j)
        for v in j.values():
            out += builds_in(v)
    elif isinstance(j, list):
        for v in j:
            out += builds_in(v)
    return out


def find_build(j, bid):
    """The object describing build `bid` (with a status) anywhere in a tool result, or None."""
    return next((b for b in builds_in(j) if b.get("build_id") == bid), None)


class Mcp:
    """An MCP session on kiln serve's /mcp with one bearer token."""

    def __init__(self, port, token):
        self.port = port
        self.h = {"Authorization": f"Bearer {token}", "Content-Type": "application/json",
                  "Accept": "application/json, text/event-stream"}
        r = self.post({"jsonrpc": "2.0", "id": 1, "method": "initialize",
                       "params": {"protocolVersion": "2025-11-25", "capabilities": {},
                                  "clientInfo": {"name": "pool-test", "version": "1"}}})
        self.h["MCP-Session-Id"] = r.headers["Mcp-Session-Id"]
        self.h["MCP-Protocol-Version"] = "2025-11-25"
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def post(self, body, timeout=300):
        req = urllib.request.Request(f"http://127.0.0.1:{self.port}/mcp",
                                     json.dumps(body).encode(), self.h)
        r = urllib.request.urlopen(req, timeout=timeout)
        r.body = r.read()
        return r

    def call(self, name, args, timeout=300):
        """(parsed JSON of the tool's text content, raw result); raises on a JSON-RPC error."""
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


class Fixture:
    """One scratch directory (self.T) with a registry, certificates, workers and one kiln serve.
    Not thread-safe; one per test process. cleanup() kills every process it started."""

    def __init__(self, kiln, prefix, reg_port, port):
        self.kiln = os.path.realpath(kiln)
        self.reg_port = int(os.environ.get("KILN_POOL_REG_PORT", str(reg_port)))
        self.port = int(os.environ.get("KILN_POOL_PORT", str(port)))
        self.T = tempfile.mkdtemp(prefix=prefix, dir="/var/tmp")
        self.procs = {}
        self.fails = []
        self.reg = None          # {"auth_file": ...} of scripts/registry.sh
        self.base = None         # digest of kiln/busybox:1 in the registry
        self.pki_dir = f"{self.T}/pki"
        self.agent_token = secrets.token_hex(16)
        self.worker_token = secrets.token_hex(16)
        self.worker_token_file = f"{self.T}/worker-token"
        with open(self.worker_token_file, "w") as f:
            f.write(self.worker_token + "\n")
        os.chmod(self.worker_token_file, 0o600)
        self.src = f"{self.T}/src"
        os.makedirs(self.src)
        git(["init", "-q"], self.src)

    # --- reporting -------------------------------------------------------------------------
    def ok(self, cond, what):
        print(("ok - " if cond else "not ok - ") + what, flush=True)
        if not cond:
            self.fails.append(what)
        return cond

    def exit_code(self):
        print(f"{len(self.fails)} failed" if self.fails else "all passed", flush=True)
        return 1 if self.fails else 0

    def cleanup(self):
        for p in self.procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run([f"{ROOT}/scripts/registry.sh", "stop", "--dir", f"{self.T}/reg"],
                       capture_output=True)
        if not os.environ.get("KILN_POOL_KEEP"):
            shutil.rmtree(self.T, ignore_errors=True)

    # --- registry and certificates ---------------------------------------------------------
    def start_registry(self):
        self.reg = dict(l.split("=", 1) for l in sh(
            f"{ROOT}/scripts/registry.sh start --dir {self.T}/reg --port {self.reg_port}").split())
        sh(f"{ROOT}/scripts/base_images.sh --registry 127.0.0.1:{self.reg_port} "
           f"--authfile {self.reg['auth_file']}")
        self.base = self.digest("kiln/busybox:1")
        return self.reg

    def digest(self, ref):
        """Digest of `ref` (repository:tag) in the test registry."""
        return sh(f"skopeo inspect --authfile {self.reg['auth_file']} --tls-verify=false "
                  f"docker://127.0.0.1:{self.reg_port}/{ref} --format '{{{{.Digest}}}}'").strip()

    def cert(self, name, ca):
        """{pki}/{name}.crt/.key signed by {pki}/{ca}.crt (a self-signed CA made on first use)."""
        d = self.pki_dir
        os.makedirs(d, exist_ok=True)
        if not os.path.exists(f"{d}/{ca}.crt"):
            sh(f"cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -keyout {ca}.key -out {ca}.crt"
               f" -subj /CN={ca} -days 2")
        sh(f"cd {d} && openssl req -newkey rsa:2048 -nodes -keyout {name}.key -out {name}.csr"
           f" -subj /CN={name} && openssl x509 -req -in {name}.csr -CA {ca}.crt -CAkey {ca}.key"
           f" -CAcreateserial -out {name}.crt -days 2")

    def pki(self, workers):
        """The scheduler's certificate (scheduler-ca) and each worker's (worker-ca)."""
        self.cert("scheduler", "scheduler-ca")
        for w in workers:
            self.cert(w, "worker-ca")
        return self.pki_dir

    # --- processes -------------------------------------------------------------------------
    def start_worker(self, name, worker=None, cert=None):
        """Starts `kiln worker` `name` (state in {T}/{name}, log {T}/{name}/worker.log) with its
        certificate {pki}/{cert or name}.crt; `worker` entries override its "worker" config.
        Returns the port it listens on."""
        st = f"{self.T}/{name}"
        os.makedirs(st, exist_ok=True)
        c = cert or name
        wcfg = {"name": name, "listen": "127.0.0.1:0", "slots": 1, "port_file": f"{st}/port",
                "git_token_file": self.worker_token_file,
                "tls": {"certificate": f"{self.pki_dir}/{c}.crt", "key": f"{self.pki_dir}/{c}.key",
                        "scheduler_ca": f"{self.pki_dir}/scheduler-ca.crt"}}
        wcfg.update(worker or {})
        cfg = {"log_level": "info",
               "server": {"state_dir": f"{st}/state"},
               "registries": {"local": {"url": f"http://127.0.0.1:{self.reg_port}",
                                        "auth_file": self.reg["auth_file"]}},
               "worker": wcfg}
        with open(f"{st}/worker.json", "w") as f:
            json.dump(cfg, f)
        if os.path.exists(f"{st}/port"):
            os.unlink(f"{st}/port")
        log = open(f"{st}/worker.log", "a")
        self.procs[name] = subprocess.Popen([self.kiln, "worker", "--config", f"{st}/worker.json"],
                                            stdout=log, stderr=subprocess.STDOUT,
                                            env={"PATH": os.environ["PATH"], "HOME": st})
        for _ in range(300):
            if os.path.exists(f"{st}/port") and open(f"{st}/port").read().strip():
                return int(open(f"{st}/port").read())
            if self.procs[name].poll() is not None:
                break
            time.sleep(0.05)
        raise SystemExit(f"worker {name} did not start: {open(f'{st}/worker.log').read()}")

    def serve_config(self, workers=None, parallel=3, repository="pool/app", scheduler=None):
        """kiln serve's config: one layered domain "d" (BUILD_COMMAND) pushing to `repository`,
        the pool given by `workers` (addresses) and/or `scheduler` entries."""
        d = self.pki_dir
        sched = {"max_parallel_builds": parallel,
                 "worker_tls": {"certificate": f"{d}/scheduler.crt", "key": f"{d}/scheduler.key",
                                "worker_ca": f"{d}/worker-ca.crt"},
                 "worker_token_sha256": [hashlib.sha256(self.worker_token.encode()).hexdigest()]}
        if workers is not None:
            sched["workers"] = sorted(workers)
        sched.update(scheduler or {})
        return {"server": {"listen": f"127.0.0.1:{self.port}", "state_dir": f"{self.T}/sched",
                           "metrics_listen": "off"},
                "scheduler": sched,
                "registries": {"local": {"url": f"http://127.0.0.1:{self.reg_port}",
                                         "auth_file": self.reg["auth_file"]}},
                "domains": {"d": {
                    "token_sha256": [hashlib.sha256(self.agent_token.encode()).hexdigest()],
                    "max_parallel_builds": parallel,
                    "build": {"mode": "layered", "on_push": False, "timeout_s": 120,
                              "layered": {
                                  "base_image": f"127.0.0.1:{self.reg_port}/kiln/busybox@{self.base}",
                                  "command": BUILD_COMMAND,
                                  "outputs": [{"from": "out/app", "to": "/app"}],
                                  "entrypoint": ["/app"]}},
                    "image": {"registry": "local", "repository": repository}}}}

    def start_serve(self, cfg):
        """Writes {T}/kiln.json, starts kiln serve (log {T}/kiln.log), waits for /healthz."""
        with open(f"{self.T}/kiln.json", "w") as f:
            json.dump(cfg, f)
        log = open(f"{self.T}/kiln.log", "a")
        self.procs["serve"] = subprocess.Popen(
            [self.kiln, "serve", "--config", f"{self.T}/kiln.json"], stdout=log,
            stderr=subprocess.STDOUT)
        for _ in range(200):
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{self.port}/healthz", timeout=1)
                return
            except Exception:
                time.sleep(0.05)

    def mcp(self, token=None):
        return Mcp(self.port, token or self.agent_token)

    def log(self, name="serve"):
        """The log of kiln serve ("serve") or of worker `name`."""
        path = f"{self.T}/kiln.log" if name == "serve" else f"{self.T}/{name}/worker.log"
        try:
            return open(path).read()
        except FileNotFoundError:
            return ""

    # --- candidates and builds -------------------------------------------------------------
    def commit_and_push(self, cand, sleep_s=0, note=""):
        """A new commit of candidate `cand` (its build sleeps `sleep_s` s) pushed as the agent."""
        src = self.src
        with open(f"{src}/app", "w") as f:
            f.write(f"#!/bin/sh\necho {cand} {note}\n")
        with open(f"{src}/sleep", "w") as f:
            f.write(str(sleep_s))
        git(["add", "-A"], src)
        git(["commit", "-qm", f"{cand} {note}"], src)
        r = git(["push", "-q", "-f", f"http://127.0.0.1:{self.port}/git/d.git",
                 f"HEAD:refs/heads/{cand}"], src, self.agent_token)
        assert r.returncode == 0, r.stderr

    def workers_of(self, build_id):
        """The workers (started by start_worker) whose log shows they ran `build_id`."""
        return [w for w in self.procs if w != "serve"
                and f"worker: build {build_id} " in self.log(w)]

    def worker_of(self, build_id):
        ws = self.workers_of(build_id)
        return ws[0] if ws else None

    def wait_build(self, mcp, cand, bid, tries=1200):
        """Polls candidate_status until build `bid` ended (at most tries x 0.1 s); its status."""
        for _ in range(tries):
            st, _ = mcp.call("candidate_status", {"candidate": cand})
            found = find_build(st, bid)
            if found and found.get("status") in TERMINAL:
                return found.get("status")
            time.sleep(0.1)
        return None
