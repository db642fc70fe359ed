#!/usr/bin/env python3
"""Issue 20, end to end through `kiln serve` with `scheduler.worker_service`: the workers are
found through the fake Kubernetes API (tests/fake_k8s/fake_apiserver.py, HTTPS, a bearer token
allowed list/watch on endpointslices only) serving one EndpointSlice per `kiln worker`; real
layered builds pushed to the real registry (tests/integration/pool_fixture.py).

Checks:
  - a worker whose certificate is not signed by the CA kiln trusts (scheduler.worker_tls.
    worker_ca) never gets a build, and kiln says why in its log and in /readyz (no host path,
    no key material); nor does one that refuses kiln's certificate (another scheduler_ca);
  - a worker added to the Service later takes new candidates, while candidates built before
    keep their worker;
  - a worker whose endpoint is not ready gets no new build; ready again, it gets its own back;
  - a worker removed while the watch history is compacted (the watch gets 410 Expired, the
    deletion is seen only by a re-list): the scheduler re-lists and dispatches to the workers
    still listed.

  tests/integration/pool_discovery_test.py path/to/kiln   (root; registry port 5352, kiln 18352)
"""
import json, os, subprocess, sys, time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from pool_fixture import ROOT, Fixture, sh  # noqa: E402

fx = Fixture(sys.argv[1], "kiln-pool-disc.", reg_port=5352, port=18352)
ok = fx.ok
NS, SERVICE, API_TOKEN = "kiln", "kiln-worker", "watcher-token"


class FakeApi:
    """tests/fake_k8s/fake_apiserver.py on an ephemeral port with its own CA and a kubeconfig."""

    def __init__(self):
        d = f"{fx.T}/api"
        os.makedirs(d)
        sh(f"cd {d} && openssl req -x509 -newkey rsa:2048 -nodes -keyout ca.key -out ca.crt"
           f" -subj /CN=api-ca -days 2 && echo subjectAltName=IP:127.0.0.1 > san && "
           f"openssl req -newkey rsa:2048 -nodes -keyout api.key -out api.csr -subj /CN=api && "
           f"openssl x509 -req -in api.csr -CA ca.crt -CAkey ca.key -CAcreateserial -out api.crt"
           f" -days 2 -extfile san && chmod 600 ca.key api.key")
        with open(f"{d}/tokens.json", "w") as f:
            json.dump({"tokens": {API_TOKEN: {
                "user": "system:serviceaccount:kiln:kiln",
                "allow": {"endpointslices.discovery.k8s.io": ["get", "list", "watch"]}}}}, f)
        fx.procs["api"] = subprocess.Popen(
            ["python3", f"{ROOT}/tests/fake_k8s/fake_apiserver.py", "--port", "0", "--port-file",
             f"{d}/port", "--cert", f"{d}/api.crt", "--key", f"{d}/api.key", "--tokens",
             f"{d}/tokens.json"], stdout=open(f"{d}/log", "a"), stderr=subprocess.STDOUT)
        for _ in range(300):
            if os.path.exists(f"{d}/port"):
                break
            time.sleep(0.05)
        self.port = int(open(f"{d}/port").read())
        self.ctx = __import__("ssl").create_default_context(cafile=f"{d}/ca.crt")
        self.kubeconfig = f"{d}/kubeconfig"
        with open(self.kubeconfig, "w") as f:
            f.write("\n".join([
                "apiVersion: v1", "kind: Config", "current-context: t", "clusters:",
                "- name: fake", "  cluster:", f"    server: https://127.0.0.1:{self.port}",
                f"    certificate-authority: {d}/ca.crt", "users:", "- name: kiln", "  user:",
                f"    token: {API_TOKEN}", "contexts:", "- name: t", "  context:",
                "    cluster: fake", "    user: kiln", f"    namespace: {NS}", ""]))

    def control(self, method, target, body=None):
        req = urllib.request.Request(f"https://127.0.0.1:{self.port}{target}", method=method,
                                     data=json.dumps(body).encode() if body else None)
        return json.loads(urllib.request.urlopen(req, context=self.ctx, timeout=10).read())

    def put_worker(self, name, port, ready=True):
        """Worker `name`'s slice: one endpoint (hostname = the worker's id) at its port."""
        self.control("POST", "/_fake/endpointslices", {
            "metadata": {"name": f"{SERVICE}-{name}", "namespace": NS,
                         "labels": {"kubernetes.io/service-name": SERVICE}},
            "addressType": "IPv4", "ports": [{"name": "kiln-worker", "port": port}],
            "endpoints": [{"addresses": ["127.0.0.1"], "hostname": name,
                           "conditions": {"ready": ready}}]})

    def requests(self):
        return self.control("GET", "/_fake/stats")["requests"]


def wait_log(pattern, since, what, tries=300):
    """Waits until kiln serve's log, after offset `since`, contains `pattern`."""
    for _ in range(tries):
        if pattern in fx.log()[since:]:
            return True
        time.sleep(0.1)
    return ok(False, f"kiln logs {what!r} ({pattern})")


def build_all(mcp, cands, note):
    """Builds each candidate (a new commit); {candidate: worker}."""
    where = {}
    for c in cands:
        fx.commit_and_push(c, note=note)
        res, _ = mcp.call("build_candidate", {"candidate": c})
        ok(res.get("status") == "succeeded", f"{c} ({note}) builds: {res.get('status')} "
           f"{(res.get('error') or '')[:300]}")
        where[c] = fx.worker_of(res.get("build_id", "?"))
    return where


def main():
    fx.start_registry()
    fx.pki(["w1", "w2", "w3"])
    fx.cert("rogue", "rogue-ca")  # a worker certificate from a CA kiln does not trust
    fx.cert("picky", "worker-ca")  # trusted by kiln, but it trusts another CA than kiln's
    # The rogue worker trusts the scheduler (it would take builds): only kiln's check stops it.
    ports = {w: fx.start_worker(w) for w in ("w1", "w2", "w3", "rogue")}
    ports["picky"] = fx.start_worker("picky", worker={"tls": {
        "certificate": f"{fx.pki_dir}/picky.crt", "key": f"{fx.pki_dir}/picky.key",
        "scheduler_ca": f"{fx.pki_dir}/rogue-ca.crt"}})
    api = FakeApi()
    for w in ("w1", "w2", "rogue", "picky"):
        api.put_worker(w, ports[w])
    fx.start_serve(fx.serve_config(scheduler={"worker_service": {
        "service": SERVICE, "namespace": NS, "port_name": "kiln-worker",
        "kubeconfig": api.kubeconfig}}))
    ok(wait_log("4 worker(s) from the EndpointSlices, 4 ready", 0, "the listed workers"),
       "kiln lists the Service's four workers")
    mcp = fx.mcp()

    # 1. The rogue worker never gets a build; kiln says why.
    first = build_all(mcp, [f"c{i}" for i in range(1, 9)], "v1")
    ok("rogue" not in first.values() and "picky" not in first.values() and
       None not in first.values(), f"no build ran on the workers whose TLS does not fit: {first}")
    ok("worker: build" not in fx.log("rogue") + fx.log("picky"),
       "the rogue and picky workers' logs show no build")
    ok(len(set(first.values())) == 2, f"the builds spread over w1 and w2: {first}")
    log = fx.log()
    refusal = [l for l in log.splitlines() if "rogue" in l and "certificate" in l]
    ok(refusal and "not signed by the CA in scheduler.worker_tls.worker_ca" in refusal[0],
       f"kiln's log says the rogue worker's certificate is untrusted: {refusal[:1]}")
    ok(all(fx.T not in l and "/" not in l.split("rogue", 1)[1] for l in refusal),
       "the refusal names no host path")
    ready = None
    for _ in range(100):  # the readiness checks run in the background
        try:
            ready = json.loads(urllib.request.urlopen(
                f"http://127.0.0.1:{fx.port}/readyz", timeout=5).read())
        except urllib.error.HTTPError as e:
            ready = json.loads(e.read())
        if "rogue" in json.dumps(ready) and "picky" in json.dumps(ready):
            break
        time.sleep(0.2)
    detail = json.dumps(ready)
    ok("rogue" in detail and "not signed by the CA in scheduler.worker_tls.worker_ca" in detail
       and fx.T not in detail and "BEGIN" not in detail,
       f"/readyz names the refused worker and why, without a path: {detail[:600]}")
    ok(ready.get("ready") is True, "a pool with answering workers stays ready")
    # Found when placement or the readiness check (above) first connects to it.
    picky = [l for l in fx.log().splitlines() if "worker picky" in l]
    ok(picky and "it refused this scheduler's certificate" in picky[0] and fx.T not in picky[0],
       f"kiln's log says the picky worker refuses kiln's certificate: {picky[:1]}")
    # Before the TLS probe, each refused handshake left its error on CAF's network thread,
    # where it dropped the connection of a build running on a healthy worker.
    ok("dropped during" not in fx.log(), "no healthy worker's connection dropped")

    # 2. A worker added: it takes new candidates; candidates built before keep their worker.
    mark = len(fx.log())
    api.put_worker("w3", ports["w3"])
    wait_log("5 worker(s) from the EndpointSlices, 5 ready", mark, "the added worker")
    fresh = build_all(mcp, [f"n{i}" for i in range(1, 9)], "v1")
    ok("w3" in fresh.values(), f"the added worker takes new candidates: {fresh}")
    ok("rogue" not in fresh.values() and "picky" not in fresh.values(),
       "still nothing on the rogue and picky workers")
    again = build_all(mcp, list(first), "v2")
    ok(again == first, f"candidates built before keep their worker: {again} (was {first})")

    # 3. Not ready: no new build there; ready again: the candidates only it holds come back.
    owner = {**first, **fresh}
    w1_all = [c for c, w in owner.items() if w == "w1"]
    moved_away, stayed = w1_all[:2], w1_all[2:]
    mark = len(fx.log())
    api.put_worker("w1", ports["w1"], ready=False)
    wait_log("5 worker(s) from the EndpointSlices, 4 ready", mark, "w1 not ready")
    elsewhere = build_all(mcp, moved_away, "v3")
    ok(moved_away and "w1" not in elsewhere.values() and None not in elsewhere.values(),
       f"w1's candidates build elsewhere while it is not ready: {elsewhere}")
    mark = len(fx.log())
    api.put_worker("w1", ports["w1"], ready=True)
    wait_log("5 worker(s) from the EndpointSlices, 5 ready", mark, "w1 ready again")
    back = build_all(mcp, stayed, "v4")
    ok(stayed and set(back.values()) == {"w1"},
       f"ready again, w1 gets the candidates only it holds: {back}")
    both = build_all(mcp, moved_away, "v4")
    ok(all(both[c] in ("w1", elsewhere[c]) for c in moved_away),
       f"a candidate built on two workers stays on one of them: {both}")
    for c in moved_away:
        owner[c] = both[c]

    # 4. 410: w2 is deleted and the history compacted at once; only a re-list shows it.
    w2_cands = [c for c, w in owner.items() if w == "w2"][:3]
    lists_before = [r for r in api.requests() if r["path"].endswith("/endpointslices")
                    and not r["watch"] and r["code"] == 200]
    mark = len(fx.log())
    api.control("DELETE", f"/_fake/endpointslices/{NS}/{SERVICE}-w2?compact=true")
    wait_log("4 worker(s) from the EndpointSlices, 4 ready", mark, "the re-list after 410")
    lists_after = [r for r in api.requests() if r["path"].endswith("/endpointslices")
                   and not r["watch"] and r["code"] == 200]
    ok(len(lists_after) > len(lists_before),
       f"the scheduler listed again after the 410 ({len(lists_before)} -> {len(lists_after)})")
    moved = build_all(mcp, w2_cands, "v5")
    ok(w2_cands and set(moved.values()) <= {"w1", "w3"},
       f"after the re-list, w2's candidates go to the workers still listed: {moved}")
    others = {c: w for c, w in owner.items() if w != "w2"}
    kept = build_all(mcp, list(others)[:4], "v5")
    ok(all(kept[c] == others[c] for c in kept), f"the others keep their worker: {kept}")
    logs = fx.log() + "".join(fx.log(w) for w in ("w1", "w2", "w3", "rogue", "picky"))
    ok(fx.worker_token not in logs and fx.agent_token not in logs and API_TOKEN not in logs,
       "no credential in kiln's logs")
    ok("PRIVATE KEY" not in logs, "no key material in kiln's logs")


try:
    main()
finally:
    fx.cleanup()
sys.exit(fx.exit_code())
