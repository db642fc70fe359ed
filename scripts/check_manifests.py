#!/usr/bin/env python3
"""Checks kiln's Kubernetes manifests (k8s/manifests/README.md, "What the checker enforces").

    scripts/check_manifests.py [--kustomize DIR | --rendered FILE|-] [--require-pinned]
                               [--kiln BINARY] [--kubectl KUBECTL]

Renders DIR (default k8s/manifests) with `kubectl kustomize` -- the kustomize built into
Debian 12's kubectl 1.20 (kustomize v2.0.3) works as well as current ones -- or reads an
already rendered multi-document YAML file, then asserts:

  * every NetworkPolicy's podSelector matches the template labels of the Deployment it is for
    (the Deployment of the same name and namespace, or the one named by the annotation
    kiln.dev/policy-for), and every Deployment is selected by a NetworkPolicy with both
    Ingress and Egress; every Service's selector matches a pod template of its namespace
  * Roles grant exactly the documented verbs per resource (ROLE_RULES for kiln-deployer,
    ROLES for the others by name), nothing else; a Role of another name is refused
  * worker pool (issue 20; pods labelled app.kubernetes.io/component=worker): the pod sets
    hostUsers false; its NetworkPolicy admits only the scheduler's pods (podSelector peers
    matching the server template, no namespaceSelector or ipBlock) and lets the pods reach only
    the registry, the scheduler's pods and kube-dns; every StatefulSet has a
    PodDisruptionBudget selecting its pods
  * no ClusterRole, no ClusterRoleBinding
  * no rule reaches secrets (also not through "*")
  * every Service is ClusterIP
  * every container: runAsNonRoot (container or pod level) unless the pod template carries a
    documented exception (annotation kiln.dev/security-exception.<container>, value one of
    DOCUMENTED_EXCEPTIONS), seccompProfile RuntimeDefault, capabilities drop ALL and add only
    documented capabilities (DOCUMENTED_CAPABILITIES)
  * Secret volumes (direct or projected) are mounted read-only, and only into the containers
    of SECRET_CONTAINERS
  * images by digest only (`name@sha256:<64 hex>`, no tag). The committed placeholder digest
    (all zeros) gives a WARNING line; with --require-pinned it is a failure
  * with --kiln BINARY: the ConfigMap's kiln.json passes `kiln check-config`, with the
    Secret's files beside it as in the pod (a base image that cannot be resolved because the
    in-cluster registry is unreachable from here is reported, not failed)

Every failure is one `Kind namespace/name: reason` line on stdout; exit 1 if there is any.
"""
import argparse
import base64
import os
import re
import subprocess
import sys
import tempfile

try:
    import yaml
except ImportError:  # pragma: no cover
    sys.exit("check_manifests: PyYAML is missing (Debian package python3-yaml; scripts/setup.sh)")

# The documented RBAC surface (k8s/manifests/README.md, "RBAC"): (apiGroup, resource) -> verbs.
ROLE_RULES = {
    ("apps", "deployments"): {"get", "list", "watch", "patch"},
    ("apps", "replicasets"): {"get", "list", "watch"},
    ("", "pods"): {"get", "list", "watch"},
    ("", "events"): {"get", "list", "watch"},
    ("", "pods/log"): {"get"},  # a crashed container's last log lines for deploy failures
}
# Issue 20: every Role by name -> its documented rules (README.md, "RBAC" and "Workers").
ROLES = {
    "kiln-deployer": ROLE_RULES,
    "kiln-worker-discovery": {("discovery.k8s.io", "endpointslices"): {"get", "list", "watch"}},
}
SERVER_COMPONENT, WORKER_COMPONENT = "server", "worker"
COMPONENT_LABEL = "app.kubernetes.io/component"
# Pods a worker may reach besides the scheduler's (podSelector matchLabels subsets).
WORKER_EGRESS_PEERS = [{"app.kubernetes.io/name": "registry"}, {"k8s-app": "kube-dns"}]
# Capabilities a container may add (README.md, "What the builder needs").
DOCUMENTED_CAPABILITIES = {"SYS_ADMIN"}
# Exceptions to runAsNonRoot a pod template may claim (README.md, "Exceptions").
DOCUMENTED_EXCEPTIONS = {"containerfile-mode-root"}
EXCEPTION_PREFIX = "kiln.dev/security-exception."
# Containers that may mount Secrets (the registry credential).
SECRET_CONTAINERS = {"kiln", "worker"}  # worker: its push credential and TLS identity
PLACEHOLDER_DIGEST = "sha256:" + "0" * 64
DIGEST_IMAGE = re.compile(r"^(?P<name>[^@\s]+)@sha256:[0-9a-f]{64}$")
WORKLOADS = {"Deployment", "StatefulSet", "DaemonSet", "ReplicaSet", "Job", "CronJob", "Pod"}


class Report:
    def __init__(self):
        self.failures = []
        self.warnings = []

    def fail(self, obj, reason):
        self.failures.append(f"{ident(obj)}: {reason}")

    def warn(self, obj, reason):
        self.warnings.append(f"WARNING {ident(obj)}: {reason}")


def ident(obj):
    if isinstance(obj, str):
        return obj
    md = obj.get("metadata") or {}
    ns = md.get("namespace")
    return f"{obj.get('kind', '?')} {ns + '/' if ns else ''}{md.get('name', '?')}"


def pod_template(obj):
    """(pod metadata, pod spec) of a workload, or (None, None)."""
    kind = obj.get("kind")
    spec = obj.get("spec") or {}
    if kind == "Pod":
        return obj.get("metadata") or {}, spec
    if kind == "CronJob":
        spec = ((spec.get("jobTemplate") or {}).get("spec") or {})
    tpl = spec.get("template")
    if kind in WORKLOADS and isinstance(tpl, dict):
        return tpl.get("metadata") or {}, tpl.get("spec") or {}
    return None, None


def selector_matches(selector, labels):
    """Kubernetes LabelSelector semantics (matchLabels AND matchExpressions)."""
    if selector is None:
        return False
    labels = labels or {}
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for e in selector.get("matchExpressions") or []:
        key, op, values = e.get("key"), e.get("operator"), e.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
        if op not in ("In", "NotIn", "Exists", "DoesNotExist"):
            return False
    return True


def check_network_policies(objs, rep):
    deployments = {(o["metadata"].get("namespace"), o["metadata"]["name"]): o
                   for o in objs if o.get("kind") in ("Deployment", "StatefulSet")}
    covered = set()
    for np in (o for o in objs if o.get("kind") == "NetworkPolicy"):
        md, spec = np["metadata"], np.get("spec") or {}
        ns = md.get("namespace")
        target = (md.get("annotations") or {}).get("kiln.dev/policy-for", md["name"])
        dep = deployments.get((ns, target))
        if dep is None:
            rep.fail(np, f"no Deployment {ns}/{target} for this policy (name it after the "
                         "Deployment or set annotation kiln.dev/policy-for)")
            continue
        labels = (pod_template(dep)[0] or {}).get("labels") or {}
        if not selector_matches(spec.get("podSelector"), labels):
            rep.fail(np, f"podSelector {spec.get('podSelector')} does not match the pod labels "
                         f"{labels} of Deployment {ns}/{target}")
            continue
        types = set(spec.get("policyTypes") or [])
        if not {"Ingress", "Egress"} <= types:
            rep.fail(np, f"policyTypes {sorted(types)} must include Ingress and Egress")
            continue
        covered.add((ns, target))
    for key, dep in deployments.items():
        if key not in covered:
            rep.fail(dep, f"no NetworkPolicy selects this {dep['kind']}'s pods")


def check_services(objs, rep):
    templates = []
    for o in objs:
        meta, _ = pod_template(o)
        if meta is not None:
            templates.append((o["metadata"].get("namespace"), meta.get("labels") or {}))
    for svc in (o for o in objs if o.get("kind") == "Service"):
        spec = svc.get("spec") or {}
        t = spec.get("type", "ClusterIP")
        if t != "ClusterIP":
            rep.fail(svc, f"type {t}: every Service must be ClusterIP")
        if spec.get("externalIPs"):
            rep.fail(svc, "externalIPs are not allowed")
        sel = spec.get("selector")
        ns = svc["metadata"].get("namespace")
        if sel and not any(n == ns and all(l.get(k) == v for k, v in sel.items())
                           for n, l in templates):
            rep.fail(svc, f"selector {sel} matches no pod template in namespace {ns}")


def check_rbac(objs, rep):
    for o in objs:
        kind = o.get("kind")
        if kind in ("ClusterRole", "ClusterRoleBinding"):
            rep.fail(o, f"{kind} is not allowed: kiln gets namespaced Roles only")
        if kind not in ("Role", "ClusterRole"):
            continue
        granted = {}
        for i, rule in enumerate(o.get("rules") or []):
            groups = rule.get("apiGroups") or [""]
            resources = rule.get("resources") or []
            verbs = set(rule.get("verbs") or [])
            if rule.get("nonResourceURLs"):
                rep.fail(o, f"rule {i}: nonResourceURLs are not allowed")
            for g in groups:
                for r in resources:
                    if r == "*" or r.split("/")[0] == "secrets":
                        if g in ("", "*"):
                            rep.fail(o, f"rule {i} gives access to secrets "
                                        f"(apiGroup '{g}', resource '{r}', verbs {sorted(verbs)})")
                    granted.setdefault((g, r), set()).update(verbs)
        if kind != "Role":
            continue
        rules = ROLES.get(o["metadata"]["name"])
        if rules is None:
            rep.fail(o, f"Role is not documented (known: {', '.join(sorted(ROLES))})")
            continue
        for (g, r), verbs in sorted(granted.items()):
            want = rules.get((g, r))
            what = f"{r}" + (f" ({g})" if g else "")
            if want is None:
                rep.fail(o, f"resource {what} is not in the documented set")
            elif verbs != want:
                extra, missing = sorted(verbs - want), sorted(want - verbs)
                msg = f"verbs on {what} are {sorted(verbs)}, documented {sorted(want)}"
                if extra:
                    msg += f" (extra: {', '.join(extra)})"
                if missing:
                    msg += f" (missing: {', '.join(missing)})"
                rep.fail(o, msg)
        for (g, r) in sorted(set(rules) - set(granted)):
            rep.fail(o, f"documented resource {r}{' (' + g + ')' if g else ''} is missing")


def check_pods(objs, rep, require_pinned):
    for o in objs:
        meta, spec = pod_template(o)
        if spec is None:
            continue
        annotations = meta.get("annotations") or {}
        psc = spec.get("securityContext") or {}
        if spec.get("hostNetwork") or spec.get("hostPID") or spec.get("hostIPC"):
            rep.fail(o, "hostNetwork/hostPID/hostIPC are not allowed")
        secret_volumes = set()
        for v in spec.get("volumes") or []:
            if "secret" in v or any("secret" in s for s in (v.get("projected") or {}).get("sources") or []):
                secret_volumes.add(v.get("name"))
        containers = [(c, "container") for c in spec.get("containers") or []]
        containers += [(c, "initContainer") for c in spec.get("initContainers") or []]
        containers += [(c, "ephemeralContainer") for c in spec.get("ephemeralContainers") or []]
        for c, what in containers:
            name = c.get("name", "?")
            where = f"{what} {name}"
            csc = c.get("securityContext") or {}
            exception = annotations.get(EXCEPTION_PREFIX + name)
            if exception is not None and exception not in DOCUMENTED_EXCEPTIONS:
                rep.fail(o, f"{where}: security exception '{exception}' is not documented "
                            f"(known: {', '.join(sorted(DOCUMENTED_EXCEPTIONS))})")
                exception = None
            non_root = csc.get("runAsNonRoot", psc.get("runAsNonRoot"))
            uid = csc.get("runAsUser", psc.get("runAsUser"))
            if exception is None:
                if non_root is not True:
                    rep.fail(o, f"{where}: runAsNonRoot is not true (and no documented exception)")
                elif uid == 0:
                    rep.fail(o, f"{where}: runAsUser 0 contradicts runAsNonRoot")
            if csc.get("privileged"):
                rep.fail(o, f"{where}: privileged is not allowed")
            seccomp = (csc.get("seccompProfile") or psc.get("seccompProfile") or {}).get("type")
            if seccomp != "RuntimeDefault":
                rep.fail(o, f"{where}: seccompProfile is {seccomp or 'unset'}, must be RuntimeDefault")
            caps = csc.get("capabilities") or {}
            if "ALL" not in (caps.get("drop") or []):
                rep.fail(o, f"{where}: capabilities.drop does not contain ALL")
            for cap in caps.get("add") or []:
                norm = cap.upper().removeprefix("CAP_")
                if norm not in DOCUMENTED_CAPABILITIES:
                    rep.fail(o, f"{where}: adds capability {cap}, not documented "
                                f"(documented: {', '.join(sorted(DOCUMENTED_CAPABILITIES))})")
            image = c.get("image", "")
            m = DIGEST_IMAGE.match(image)
            if not m:
                rep.fail(o, f"{where}: image '{image}' is not referenced by digest (name@sha256:<64 hex>)")
            elif ":" in m.group("name").rsplit("/", 1)[-1]:
                rep.fail(o, f"{where}: image '{image}' carries a tag besides its digest")
            elif image.endswith(PLACEHOLDER_DIGEST):
                msg = (f"{where}: image '{image}' is the unpinned placeholder; a deployment of it "
                       "fails with ErrImagePull (run scripts/pin_image_digest.sh)")
                if require_pinned:
                    rep.fail(o, msg)
                else:
                    rep.warn(o, msg)
            for vm in c.get("volumeMounts") or []:
                if vm.get("name") in secret_volumes:
                    if name not in SECRET_CONTAINERS:
                        rep.fail(o, f"{where}: mounts Secret volume {vm['name']}; only "
                                    f"{', '.join(sorted(SECRET_CONTAINERS))} may")
                    if vm.get("readOnly") is not True:
                        rep.fail(o, f"{where}: Secret volume {vm['name']} is not mounted readOnly")


def component_of(obj):
    meta, _ = pod_template(obj)
    return ((meta or {}).get("labels") or {}).get(COMPONENT_LABEL)


def check_worker_pool(objs, rep):
    """Issue 20: the workers' pods, their NetworkPolicy and their disruption budget."""
    servers = [((pod_template(o)[0] or {}).get("labels") or {}, o["metadata"].get("namespace"))
               for o in objs if component_of(o) == SERVER_COMPONENT]

    def is_server_peer(peer, ns):
        sel = peer.get("podSelector")
        return (sel is not None and "namespaceSelector" not in peer and "ipBlock" not in peer
                and any(n == ns and selector_matches(sel, l) for l, n in servers))

    def is_allowed_egress(peer, ns):
        if is_server_peer(peer, ns):
            return True
        labels = (peer.get("podSelector") or {}).get("matchLabels") or {}
        return "ipBlock" not in peer and any(
            all(labels.get(k) == v for k, v in want.items()) for want in WORKER_EGRESS_PEERS)

    workers = [o for o in objs if component_of(o) == WORKER_COMPONENT]
    for w in workers:
        _, spec = pod_template(w)
        if spec.get("hostUsers") is not False:
            rep.fail(w, "worker pods must set hostUsers: false (README.md, \"Workers\")")
        ns, name = w["metadata"].get("namespace"), w["metadata"]["name"]
        labels = (pod_template(w)[0] or {}).get("labels") or {}
        for np in (o for o in objs if o.get("kind") == "NetworkPolicy"):
            md, npspec = np["metadata"], np.get("spec") or {}
            if md.get("namespace") != ns or not selector_matches(npspec.get("podSelector"), labels):
                continue
            for i, rule in enumerate(npspec.get("ingress") or []):
                peers = rule.get("from")
                if not peers or not all(is_server_peer(p, ns) for p in peers):
                    rep.fail(np, f"ingress rule {i} admits more than the scheduler's pods: only "
                                 "the scheduler may reach workers")
            for i, rule in enumerate(npspec.get("egress") or []):
                peers = rule.get("to")
                if not peers or not all(is_allowed_egress(p, ns) for p in peers):
                    rep.fail(np, f"egress rule {i} reaches more than the registry, the "
                                 "scheduler and DNS")
    pdbs = [o for o in objs if o.get("kind") == "PodDisruptionBudget"]
    for sts in (o for o in objs if o.get("kind") == "StatefulSet"):
        labels = (pod_template(sts)[0] or {}).get("labels") or {}
        if not any(p["metadata"].get("namespace") == sts["metadata"].get("namespace")
                   and selector_matches((p.get("spec") or {}).get("selector"), labels) for p in pdbs):
            rep.fail(sts, "no PodDisruptionBudget selects this StatefulSet's pods")


def check_config(objs, rep, kiln):
    """Runs `kiln check-config` on each ConfigMap's kiln.json with the Secrets' files beside it."""
    files = {}
    for s in (o for o in objs if o.get("kind") == "Secret"):
        for k, v in (s.get("data") or {}).items():
            files[k] = base64.b64decode(v)
        for k, v in (s.get("stringData") or {}).items():
            files[k] = v.encode()
    found = False
    for cm in (o for o in objs if o.get("kind") == "ConfigMap"):
        text = (cm.get("data") or {}).get("kiln.json")
        if text is None:
            continue
        found = True
        with tempfile.TemporaryDirectory() as d:
            for k, v in files.items():
                # Secret files are never world-readable (defaultMode 0440 in the Deployment): same here.
                fd = os.open(os.path.join(d, k), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "wb") as f:
                    f.write(v)
            for k, v in (cm.get("data") or {}).items():
                with open(os.path.join(d, k), "w") as f:
                    f.write(v)
            r = subprocess.run([kiln, "check-config", "--config", os.path.join(d, "kiln.json")],
                               capture_output=True, text=True, timeout=120)
        problems = [l for l in (r.stdout + "\n" + r.stderr).splitlines()
                    if re.match(r"^[A-Za-z_][\w.\-\[\]]*: ", l)]
        offline = [p for p in problems if re.match(r"^domains\.[^:]+\.base_image: cannot be resolved: .*unreachable", p)]
        if r.returncode == 0:
            print(f"note: {ident(cm)}: kiln.json passes kiln check-config")
        elif problems and len(offline) == len(problems):
            for p in offline:
                print(f"note: {ident(cm)}: kiln.json: {p} (registry not reachable from here; not a failure)")
        else:
            for p in (set(problems) - set(offline)) or {f"kiln check-config exited {r.returncode}"}:
                rep.fail(cm, f"kiln.json: {p}")
    if not found:
        rep.fail("ConfigMap", "no ConfigMap carries kiln.json")


def load(args):
    if args.rendered:
        text = sys.stdin.read() if args.rendered == "-" else open(args.rendered).read()
    else:
        try:
            r = subprocess.run([args.kubectl, "kustomize", args.kustomize],
                               capture_output=True, text=True, timeout=120)
        except FileNotFoundError:
            sys.exit(f"check_manifests: {args.kubectl} not found (scripts/setup.sh installs kubernetes-client)")
        if r.returncode != 0:
            sys.exit(f"check_manifests: kubectl kustomize {args.kustomize} failed:\n{r.stderr}")
        text = r.stdout
    objs = []
    for doc in yaml.safe_load_all(text):
        if doc is None:
            continue
        if doc.get("kind") == "List":
            objs.extend(doc.get("items") or [])
        else:
            objs.append(doc)
    return objs


def main():
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group()
    src.add_argument("--kustomize", default=os.path.join(root, "k8s", "manifests"), metavar="DIR")
    src.add_argument("--rendered", metavar="FILE", help="a rendered multi-document YAML file, - for stdin")
    ap.add_argument("--kubectl", default=os.environ.get("KUBECTL", "kubectl"))
    ap.add_argument("--require-pinned", action="store_true",
                    help="fail on the placeholder image digest (use before deploying)")
    ap.add_argument("--kiln", metavar="BINARY", help="also run `BINARY check-config` on the ConfigMap")
    args = ap.parse_args()

    objs = load(args)
    if not objs:
        sys.exit("check_manifests: no objects in the render")
    rep = Report()
    for o in objs:
        if not isinstance(o, dict) or "kind" not in o or "name" not in (o.get("metadata") or {}):
            rep.fail(str(o)[:60], "not a Kubernetes object (kind and metadata.name)")
    objs = [o for o in objs if isinstance(o, dict) and "kind" in o and "name" in (o.get("metadata") or {})]
    check_network_policies(objs, rep)
    check_services(objs, rep)
    check_rbac(objs, rep)
    check_pods(objs, rep, args.require_pinned)
    check_worker_pool(objs, rep)
    if args.kiln:
        check_config(objs, rep, args.kiln)
    for w in rep.warnings:
        print(w)
    for f in rep.failures:
        print(f)
    if rep.failures:
        print(f"check_manifests: {len(rep.failures)} problem(s) in {len(objs)} objects", file=sys.stderr)
        return 1
    print(f"check_manifests: ok, {len(objs)} objects")
    return 0


if __name__ == "__main__":
    sys.exit(main())
