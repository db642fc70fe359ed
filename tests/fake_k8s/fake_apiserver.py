#!/usr/bin/env python3
"""A fake Kubernetes API server for kiln's tests (Python 3 standard library only).

Serves, over HTTPS on 127.0.0.1, the real paths kiln uses:
  GET/PATCH /apis/apps/v1/namespaces/{ns}/deployments/{name}
  GET       /apis/apps/v1/namespaces/{ns}/deployments
  GET       /apis/apps/v1/namespaces/{ns}/replicasets?labelSelector=...
  GET       /api/v1/namespaces/{ns}/pods?labelSelector=...
  GET       /api/v1/namespaces/{ns}/pods/{name}
  GET       /api/v1/namespaces/{ns}/pods/{name}/log?container=&previous=&tailLines=&limitBytes=
            (text/plain; 404 for an unknown pod; 400 BadRequest for an unknown or missing
            container, previous=true without a previous instance, a container still waiting)
  GET       /api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name=<pod>  (EventList)
  GET       /apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices?labelSelector=...
            (EndpointSliceList; with watch=true&resourceVersion=RV[&allowWatchBookmarks=true]
            [&timeoutSeconds=N] a chunked watch stream of {"type": ADDED|MODIFIED|DELETED|
            BOOKMARK|ERROR, "object": ...} lines, as the API server sends them: events after RV,
            then new ones as they happen, until timeoutSeconds (default 5); a BOOKMARK with the
            current resourceVersion each idle second when bookmarks are allowed; an RV older
            than the last compaction, at the start or while the watch is open, gets one ERROR
            event carrying a 410 Expired Status and the watch ends)

Authentication: "Authorization: Bearer <token>" looked up in a tokens file (JSON, re-read on
every request) or a client certificate signed by the test CA (its CN looked up in the same
file). Authorization: per user, verbs per resource ("deployments.apps", "replicasets.apps",
"pods", "pods/log", "events"; "*" for any). Errors are real Status objects: 401 Unauthorized, 403 Forbidden (with
the apiserver's RBAC wording), 404 NotFound, 409 Conflict, 422 Invalid, 415, 400.

Tokens file:
  {"tokens": {"<token>": {"user": "system:serviceaccount:loop:kiln",
                          "allow": {"deployments.apps": ["get", "patch"], "pods": ["list"]}}},
   "certs":  {"<client certificate CN>": {"user": "...", "allow": {...}}}}

A deployment controller and kubelet are simulated in steps (--step-ms): the controller observes
a new generation (observedGeneration, new ReplicaSet with a pod-template-hash, revision
annotations, Progressing NewReplicaSetCreated), then rolls one pod at a time (maxSurge 1,
maxUnavailable 0), keeping status.replicas/updatedReplicas/readyReplicas/availableReplicas/
unavailableReplicas and the Available/Progressing conditions (ReplicaSetUpdated,
NewReplicaSetAvailable, ProgressDeadlineExceeded after spec.progressDeadlineSeconds without
progress). Pods behave by the image's repository name: "pullfail" -> ErrImagePull (for
--errimagepull-steps steps) then ImagePullBackOff; "crash" -> exits 1 and CrashLoopBackOff
(lastState.terminated, restartCount, a 30-line previous log ending in a panic); "oom" ->
OOMKilled (exit 137) and restarted (running, unready); "stuck" -> running but never ready
(Unhealthy events "Readiness probe failed: HTTP probe failed with statuscode: 503");
"unready" -> running, never ready, Unhealthy events "Readiness probe failed: Get ...: connect:
connection refused"; "unschedulable" -> Pending, PodScheduled False Unschedulable (a
FailedScheduling event); anything else becomes ready after two steps. Containers keep a
current log (and the previous instance's once restarted).

Test control (no auth; the server binds 127.0.0.1 only):
  POST /_fake/state            {"deployments": [Deployment, ...]} seeds (settled) deployments
  POST /_fake/conflicts?count=N  the next N PATCHes are answered 409 Conflict
  POST /_fake/errors?count=N&code=503  the next N API requests are answered with that status
  POST /_fake/stall?seconds=S  API requests read until S seconds from now are held unanswered
                               (the request is read, no byte is sent back) until then;
                               seconds=0 ends a stall
  GET  /_fake/stats            {"patch_requests": n, "patches_applied": n, "requests": [...]}
                               (each request: method, path, watch (bool), user, code)
  GET  /_fake/deployments/{ns}/{name}  the stored object, without auth
  POST /_fake/endpointslices   an EndpointSlice object: created (ADDED) or replaced (MODIFIED)
  DELETE /_fake/endpointslices/{ns}/{name}[?compact=true]  deleted (DELETED); with compact,
                               the history is compacted at once, so only a re-list shows it
  POST /_fake/compact          forgets the watch history: watches from an older resourceVersion,
                               new or open, get the 410 ERROR event and end

Usage: fake_apiserver.py --cert server.crt --key server.key --ca ca.crt --tokens tokens.json
                         --port 16443 [--port-file F] [--step-ms 100]
Port 0 binds an ephemeral port; the bound port is written to --port-file once listening.
The server exits when its parent process goes away.
"""

import argparse
import copy
import datetime
import json
import os
import random
import re
import socket
import ssl
import string
import sys
import threading
import time
import urllib.parse
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

# ----------------------------------------------------------------------------- helpers

SAFE_ALPHABET = "bcdfghjklmnpqrstvwxz2456789"
FATAL_DEADLINE_REASON = "ProgressDeadlineExceeded"


def now_rfc3339():
    return datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")


def fnv32a(data):
    h = 0x811C9DC5
    for b in data:
        h ^= b
        h = (h * 0x01000193) & 0xFFFFFFFF
    return h


def template_hash(template):
    t = copy.deepcopy(template)
    labels = t.get("metadata", {}).get("labels", {})
    labels.pop("pod-template-hash", None)
    digits = str(fnv32a(json.dumps(t, sort_keys=True).encode()))
    return "".join(SAFE_ALPHABET[ord(c) % len(SAFE_ALPHABET)] for c in digits)[:10]


def rand_suffix(n=5):
    return "".join(random.choice(SAFE_ALPHABET) for _ in range(n))


def repository_of(image):
    name = image.split("@", 1)[0]
    slash = name.rfind("/")
    colon = name.rfind(":")
    if colon > slash:
        name = name[:colon]
    return name


def scenario_of(image):
    repo = repository_of(image or "")
    for s in ("pullfail", "crash", "stuck", "oom", "unready", "unschedulable"):
        if s in repo:
            return s
    return "ok"


def status_body(code, reason, message, details=None):
    body = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details is not None:
        body["details"] = details
    return body


# --------------------------------------------------------------- strategic merge patch

# patchMergeKey of the list fields a Deployment has (from the API reference); other lists are
# replaced as a whole.
MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "volumeDevices": "devicePath",
    "ports": "containerPort",
    "imagePullSecrets": "name",
    "hostAliases": "ip",
    "topologySpreadConstraints": "topologyKey",
    "resourceClaims": "name",
    "conditions": "type",
}


class PatchError(Exception):
    pass


def smp_map(orig, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive not in (None, "merge"):
        raise PatchError("unknown patch directive %r in a map" % directive)
    result = copy.deepcopy(orig) if isinstance(orig, dict) else {}
    for key, value in patch.items():
        if key == "$patch" or key.startswith("$setElementOrder/") or key == "$retainKeys":
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            if isinstance(result.get(field), list) and isinstance(value, list):
                result[field] = [x for x in result[field] if x not in value]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, dict):
            if value.get("$patch") == "delete":
                result.pop(key, None)
            else:
                result[key] = smp_map(result.get(key), value)
        elif isinstance(value, list) and MERGE_KEYS.get(key):
            result[key] = smp_list(result.get(key) or [], value, MERGE_KEYS[key])
        else:
            result[key] = copy.deepcopy(value)
    return result


def smp_list(orig, patch, merge_key):
    if any(isinstance(i, dict) and i.get("$patch") == "replace" for i in patch):
        return [copy.deepcopy(i) for i in patch if not (isinstance(i, dict) and "$patch" in i)]
    result = copy.deepcopy(orig)
    for item in patch:
        if not isinstance(item, dict):
            raise PatchError("list items of a merging list must be objects")
        if merge_key not in item:
            raise PatchError("map: %s does not contain declared merge key: %s" % (item, merge_key))
        key = item[merge_key]
        if item.get("$patch") == "delete":
            result = [x for x in result if not (isinstance(x, dict) and x.get(merge_key) == key)]
            continue
        for i, existing in enumerate(result):
            if isinstance(existing, dict) and existing.get(merge_key) == key:
                result[i] = smp_map(existing, item)
                break
        else:
            result.append(smp_map({}, item))
    return result


def json_merge_patch(orig, patch):
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = copy.deepcopy(orig) if isinstance(orig, dict) else {}
    for k, v in patch.items():
        if v is None:
            result.pop(k, None)
        else:
            result[k] = json_merge_patch(result.get(k), v)
    return result


# ----------------------------------------------------------------------------- state

class Cluster:
    """Deployments, ReplicaSets and Pods plus the simulated controllers, under one lock."""

    def __init__(self):
        self.lock = threading.RLock()
        self.deployments = {}  # (ns, name) -> object
        self.replicasets = {}
        self.pods = {}
        self.pod_ticks = {}  # (ns, name) -> steps since creation
        self.progress_time = {}  # deployment key -> monotonic time of the last progress
        self.rv = 1000
        self.conflicts = 0
        self.errors = []  # status codes for the next API requests (e.g. 503), oldest first
        self.stall_until = 0.0  # time.monotonic() until which API requests get no answer
        self.patch_requests = 0
        self.patches_applied = 0
        self.requests = []
        self.errimagepull_steps = 2  # steps a failing pull shows ErrImagePull before the back-off
        self.events = {}  # (ns, name) -> core/v1 Event
        self.logs = {}  # (ns, pod, container) -> {"current": str or None, "previous": str or None}
        self.endpointslices = {}  # (ns, name) -> discovery.k8s.io/v1 EndpointSlice
        self.slice_events = []  # (resourceVersion int, type, object) since the last compaction
        self.compacted_rv = 0  # watches from an older resourceVersion get 410 Expired
        self.changed = threading.Condition(self.lock)

    def next_rv(self):
        self.rv += 1
        return str(self.rv)

    # -- EndpointSlices (test control) and their watch history

    def put_slice(self, obj):
        md = obj.setdefault("metadata", {})
        if not md.get("name"):
            raise ValueError("EndpointSlice without metadata.name")
        md.setdefault("namespace", "default")
        obj["apiVersion"], obj["kind"] = "discovery.k8s.io/v1", "EndpointSlice"
        obj.setdefault("addressType", "IPv4")
        obj.setdefault("endpoints", [])
        key = (md["namespace"], md["name"])
        old = self.endpointslices.get(key)
        md["uid"] = old["metadata"]["uid"] if old else str(uuid.uuid4())
        md.setdefault("creationTimestamp", now_rfc3339())
        md["resourceVersion"] = self.next_rv()
        self.endpointslices[key] = obj
        self.slice_events.append((int(md["resourceVersion"]), "MODIFIED" if old else "ADDED",
                                  copy.deepcopy(obj)))
        self.changed.notify_all()

    def delete_slice(self, ns, name):
        obj = self.endpointslices.pop((ns, name), None)
        if obj is None:
            return False
        obj = copy.deepcopy(obj)
        obj["metadata"]["resourceVersion"] = self.next_rv()
        self.slice_events.append((int(obj["metadata"]["resourceVersion"]), "DELETED", obj))
        self.changed.notify_all()
        return True

    def compact(self):
        self.compacted_rv = self.rv
        self.slice_events = []

    # -- seeding

    def seed(self, dep):
        md = dep.setdefault("metadata", {})
        if not md.get("name"):
            raise ValueError("deployment without metadata.name")
        ns = md.setdefault("namespace", "default")
        md.setdefault("uid", str(uuid.uuid4()))
        md["generation"] = 1
        md["resourceVersion"] = self.next_rv()
        md.setdefault("creationTimestamp", now_rfc3339())
        md.setdefault("annotations", {})
        dep["apiVersion"] = "apps/v1"
        dep["kind"] = "Deployment"
        spec = dep.setdefault("spec", {})
        spec.setdefault("replicas", 1)
        spec.setdefault("progressDeadlineSeconds", 600)
        spec.setdefault("revisionHistoryLimit", 10)
        spec.setdefault("strategy", {"type": "RollingUpdate",
                                     "rollingUpdate": {"maxSurge": "25%", "maxUnavailable": "25%"}})
        labels = spec.setdefault("template", {}).setdefault("metadata", {}).setdefault("labels", {})
        if not labels:
            labels["app"] = md["name"]
        spec.setdefault("selector", {"matchLabels": dict(labels)})
        dep["status"] = {"observedGeneration": 0}
        key = (ns, md["name"])
        self.deployments[key] = dep
        self.progress_time[key] = time.monotonic()
        for _ in range(200):  # settle: run the controllers until the rollout is done
            self.reconcile(key)
            if self.complete(dep):
                break

    # -- queries

    def owned(self, store, kind, owner):
        uid = owner["metadata"]["uid"]
        return [o for o in store.values()
                if any(r.get("kind") == kind and r.get("uid") == uid
                       for r in o["metadata"].get("ownerReferences", []))]

    @staticmethod
    def complete(dep):
        st = dep.get("status", {})
        want = dep["spec"].get("replicas", 1)
        return (st.get("observedGeneration", 0) >= dep["metadata"]["generation"]
                and st.get("updatedReplicas", 0) == want and st.get("replicas", 0) == want
                and st.get("availableReplicas", 0) == want)

    # -- the deployment controller

    def tick(self):
        with self.lock:
            for key in list(self.deployments):
                self.reconcile(key)

    def set_condition(self, dep, ctype, status, reason, message):
        conds = dep["status"].setdefault("conditions", [])
        now = now_rfc3339()
        for c in conds:
            if c["type"] == ctype:
                if c["status"] != status:
                    c["lastTransitionTime"] = now
                if c["reason"] != reason or c["message"] != message or c["status"] != status:
                    c["lastUpdateTime"] = now
                c.update(status=status, reason=reason, message=message)
                return
        conds.append({"type": ctype, "status": status, "lastUpdateTime": now,
                      "lastTransitionTime": now, "reason": reason, "message": message})

    def progressed(self, key, dep, rs_name):
        self.progress_time[key] = time.monotonic()
        self.set_condition(dep, "Progressing", "True", "ReplicaSetUpdated",
                           'ReplicaSet "%s" is progressing.' % rs_name)

    def new_replicaset(self, key, dep):
        ns, name = key
        tmpl = dep["spec"]["template"]
        h = template_hash(tmpl)
        rs_name = "%s-%s" % (name, h)
        rev_key = "deployment.kubernetes.io/revision"
        others = [int(r["metadata"]["annotations"].get(rev_key, "0"))
                  for r in self.owned(self.replicasets, "Deployment", dep)
                  if r["metadata"]["name"] != rs_name]
        revision = str(max(others + [0]) + 1)
        rs = self.replicasets.get((ns, rs_name))
        if rs is None:
            rs_tmpl = copy.deepcopy(tmpl)
            rs_tmpl["metadata"].setdefault("labels", {})["pod-template-hash"] = h
            rs = {
                "apiVersion": "apps/v1", "kind": "ReplicaSet",
                "metadata": {
                    "name": rs_name, "namespace": ns, "uid": str(uuid.uuid4()),
                    "resourceVersion": self.next_rv(), "creationTimestamp": now_rfc3339(),
                    "generation": 1,
                    "labels": dict(rs_tmpl["metadata"]["labels"]),
                    "annotations": {"deployment.kubernetes.io/revision": revision,
                                    "deployment.kubernetes.io/desired-replicas":
                                        str(dep["spec"].get("replicas", 1))},
                    "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment",
                                         "name": name, "uid": dep["metadata"]["uid"],
                                         "controller": True, "blockOwnerDeletion": True}],
                },
                "spec": {"replicas": 0,
                         "selector": {"matchLabels": dict(dep["spec"]["selector"].get("matchLabels", {}),
                                                          **{"pod-template-hash": h})},
                         "template": rs_tmpl},
                "status": {"replicas": 0, "observedGeneration": 1},
            }
            self.replicasets[(ns, rs_name)] = rs
            reason, message = "NewReplicaSetCreated", 'Created new replica set "%s"' % rs_name
        else:
            if others and int(rs["metadata"]["annotations"].get(rev_key, "0")) <= max(others):
                rs["metadata"]["annotations"][rev_key] = revision  # a rollback to an old template
            reason, message = "FoundNewReplicaSet", 'Found new replica set "%s"' % rs_name
        dep["metadata"]["annotations"][rev_key] = rs["metadata"]["annotations"][rev_key]
        return rs, reason, message

    def create_pod(self, rs):
        ns = rs["metadata"]["namespace"]
        name = "%s-%s" % (rs["metadata"]["name"], rand_suffix())
        tmpl = rs["spec"]["template"]
        pod = {
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": name, "namespace": ns, "uid": str(uuid.uuid4()),
                "resourceVersion": self.next_rv(), "creationTimestamp": now_rfc3339(),
                "labels": dict(tmpl["metadata"].get("labels", {})),
                "annotations": dict(tmpl["metadata"].get("annotations", {})),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": rs["metadata"]["name"], "uid": rs["metadata"]["uid"],
                                     "controller": True, "blockOwnerDeletion": True}],
            },
            "spec": copy.deepcopy(tmpl.get("spec", {})),
            "status": {},
        }
        self.pods[(ns, name)] = pod
        self.pod_ticks[(ns, name)] = 0
        self.kubelet(pod, 0)

    def emit_event(self, pod, etype, reason, message, component="kubelet", field_path=""):
        """Records an Event about the pod, counting repeats as the kubelet's recorder does."""
        ns, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        now = now_rfc3339()
        for ev in self.events.values():
            io = ev["involvedObject"]
            if io["name"] == name and ev["reason"] == reason and ev["message"] == message:
                ev["count"] += 1
                ev["lastTimestamp"] = now
                ev["metadata"]["resourceVersion"] = self.next_rv()
                return
        ev_name = "%s.%x" % (name, random.getrandbits(56))
        self.events[(ns, ev_name)] = {
            "apiVersion": "v1", "kind": "Event",
            "metadata": {"name": ev_name, "namespace": ns, "uid": str(uuid.uuid4()),
                         "resourceVersion": self.next_rv(), "creationTimestamp": now},
            "involvedObject": {"kind": "Pod", "namespace": ns, "name": name,
                               "uid": pod["metadata"]["uid"], "apiVersion": "v1",
                               "resourceVersion": pod["metadata"]["resourceVersion"],
                               **({"fieldPath": field_path} if field_path else {})},
            "reason": reason, "message": message,
            "source": {"component": component, **({"host": "node-1"} if component == "kubelet" else {})},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1, "type": etype,
            "eventTime": None, "reportingComponent": component, "reportingInstance": "node-1",
        }

    @staticmethod
    def pod_ip(pod):
        return "10.244.0.%d" % (fnv32a(pod["metadata"]["name"].encode()) % 250 + 2)

    def set_log(self, pod, container, current, previous=None):
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"], container)
        self.logs[key] = {"current": current, "previous": previous}

    @staticmethod
    def crash_log(name):
        lines = ["%s: init step %d ok" % (name, i) for i in range(1, 29)]
        lines.append("listening on :8080 \udcff")  # a byte that is not UTF-8 (surrogateescape)
        lines.append("panic: open /etc/app/config.yaml: no such file or directory")
        return "\n".join(lines) + "\n"

    def kubelet(self, pod, ticks):
        """Sets the pod's status for its age in steps and its containers' scenarios."""
        statuses = []
        all_ready = True
        running = False
        if ticks > 0 and any(scenario_of(c.get("image", "")) == "unschedulable"
                             for c in pod["spec"].get("containers", [])):
            msg = ("0/3 nodes are available: 3 Insufficient memory. preemption: 0/3 nodes are "
                   "available: 3 No preemption victims found for incoming pod.")
            pod["status"] = {
                "phase": "Pending", "qosClass": "Burstable",
                "conditions": [{"type": "PodScheduled", "status": "False", "lastProbeTime": None,
                                "lastTransitionTime": pod["metadata"]["creationTimestamp"],
                                "reason": "Unschedulable", "message": msg}],
            }
            self.emit_event(pod, "Warning", "FailedScheduling", msg, component="default-scheduler")
            return
        for c in pod["spec"].get("containers", []):
            image = c.get("image", "")
            cs = {"name": c.get("name", ""), "image": image, "imageID": "", "ready": False,
                  "started": False, "restartCount": 0}
            sc = scenario_of(image)
            if ticks == 0:
                cs["state"] = {"waiting": {"reason": "ContainerCreating"}}
            elif sc == "pullfail":
                if ticks <= self.errimagepull_steps:
                    cs["state"] = {"waiting": {
                        "reason": "ErrImagePull",
                        "message": 'rpc error: code = NotFound desc = failed to pull and unpack image '
                                   '"%s": failed to resolve reference "%s": not found' % (image, image)}}
                else:
                    cs["state"] = {"waiting": {"reason": "ImagePullBackOff",
                                               "message": 'Back-off pulling image "%s"' % image}}
            elif sc == "crash" and ticks >= 2:
                cs["restartCount"] = ticks - 1
                cs["lastState"] = {"terminated": {"exitCode": 1, "reason": "Error",
                                                  "startedAt": now_rfc3339(), "finishedAt": now_rfc3339(),
                                                  "containerID": "containerd://%032x" % ticks}}
                cs["state"] = {"waiting": {
                    "reason": "CrashLoopBackOff",
                    "message": "back-off 10s restarting failed container=%s pod=%s"
                               % (c.get("name", ""), pod["metadata"]["name"])}}
                self.set_log(pod, c.get("name", ""), None, self.crash_log(c.get("name", "")))
                self.emit_event(pod, "Warning", "BackOff", "Back-off restarting failed container %s in pod %s"
                                % (c.get("name", ""), pod["metadata"]["name"]),
                                field_path="spec.containers{%s}" % c.get("name", ""))
            elif sc == "oom" and ticks >= 2:
                running = True
                cs["restartCount"] = ticks - 1
                cs["started"] = True
                cs["lastState"] = {"terminated": {"exitCode": 137, "reason": "OOMKilled",
                                                  "startedAt": now_rfc3339(), "finishedAt": now_rfc3339(),
                                                  "containerID": "containerd://%032x" % ticks}}
                cs["state"] = {"running": {"startedAt": now_rfc3339()}}
                self.set_log(pod, c.get("name", ""), "loading model weights\n",
                             "loading model weights\nallocating 2048 MiB cache\n")
            else:
                running = True
                cs["started"] = True
                cs["state"] = {"running": {"startedAt": pod["metadata"]["creationTimestamp"]}}
                cs["ready"] = ticks >= 2 and sc not in ("stuck", "crash", "unready")
                self.set_log(pod, c.get("name", ""), "serving on :8080\n")
                if ticks >= 2 and sc in ("stuck", "unready"):
                    ip = self.pod_ip(pod)
                    msg = ("Readiness probe failed: HTTP probe failed with statuscode: 503" if sc == "stuck"
                           else 'Readiness probe failed: Get "http://%s:8080/healthz": dial tcp %s:8080: '
                                'connect: connection refused' % (ip, ip))
                    self.emit_event(pod, "Warning", "Unhealthy", msg,
                                    field_path="spec.containers{%s}" % c.get("name", ""))
            if cs["ready"]:
                cs["imageID"] = image
            all_ready = all_ready and cs["ready"]
            statuses.append(cs)
        ready = all_ready and bool(statuses)
        pod["status"] = {
            "phase": "Running" if running or ready else "Pending",
            "hostIP": "10.0.0.10", "podIP": self.pod_ip(pod),
            "startTime": pod["metadata"]["creationTimestamp"],
            "conditions": [
                {"type": "PodScheduled", "status": "True"},
                {"type": "Initialized", "status": "True"},
                {"type": "ContainersReady", "status": "True" if ready else "False"},
                {"type": "Ready", "status": "True" if ready else "False"},
            ],
            "containerStatuses": statuses,
        }

    @staticmethod
    def pod_ready(pod):
        return any(c["type"] == "Ready" and c["status"] == "True"
                   for c in pod.get("status", {}).get("conditions", []))

    def reconcile(self, key):
        dep = self.deployments.get(key)
        if dep is None:
            return
        before = json.dumps(dep, sort_keys=True)
        self.reconcile_step(key, dep)
        if json.dumps(dep, sort_keys=True) != before:
            dep["metadata"]["resourceVersion"] = self.next_rv()

    def reconcile_step(self, key, dep):
        ns, name = key
        st = dep["status"]
        # Kubelet: pods age by one step.
        for rs in self.owned(self.replicasets, "Deployment", dep):
            for pod in self.owned(self.pods, "ReplicaSet", rs):
                pkey = (ns, pod["metadata"]["name"])
                self.pod_ticks[pkey] += 1
                was_ready = self.pod_ready(pod)
                self.kubelet(pod, self.pod_ticks[pkey])
                if self.pod_ready(pod) and not was_ready:
                    self.progressed(key, dep, pod["metadata"]["ownerReferences"][0]["name"])
        # Controller: observe a new generation (one step).
        if st.get("observedGeneration", 0) < dep["metadata"]["generation"]:
            rs, reason, message = self.new_replicaset(key, dep)
            st["observedGeneration"] = dep["metadata"]["generation"]
            self.progress_time[key] = time.monotonic()
            self.set_condition(dep, "Progressing", "True", reason, message)
            self.update_status(key, dep, rs)
            return
        rs_hash = template_hash(dep["spec"]["template"])
        new_rs = self.replicasets.get((ns, "%s-%s" % (name, rs_hash)))
        if new_rs is None:
            return
        want = dep["spec"].get("replicas", 1)
        new_pods = self.owned(self.pods, "ReplicaSet", new_rs)
        old_rss = [r for r in self.owned(self.replicasets, "Deployment", dep) if r is not new_rs]
        old_pods = [p for r in old_rss for p in self.owned(self.pods, "ReplicaSet", r)]
        new_ready = [p for p in new_pods if self.pod_ready(p)]
        # One scaling action per step: maxSurge 1, maxUnavailable 0.
        if len(new_pods) > want:
            victim = new_pods[-1]
            del self.pods[(ns, victim["metadata"]["name"])]
            self.progressed(key, dep, new_rs["metadata"]["name"])
        elif old_pods and len(new_ready) + len(old_pods) > want:
            victim = old_pods[0]
            del self.pods[(ns, victim["metadata"]["name"])]
            self.progressed(key, dep, new_rs["metadata"]["name"])
        elif len(new_pods) < want and len(new_pods) + len(old_pods) < want + 1 \
                and len(new_pods) == len(new_ready):
            self.create_pod(new_rs)
            self.progressed(key, dep, new_rs["metadata"]["name"])
        self.update_status(key, dep, new_rs)

    def update_status(self, key, dep, new_rs):
        ns, _ = key
        st = dep["status"]
        want = dep["spec"].get("replicas", 1)
        all_pods, new_pods = [], []
        for rs in self.owned(self.replicasets, "Deployment", dep):
            pods = self.owned(self.pods, "ReplicaSet", rs)
            ready = sum(1 for p in pods if self.pod_ready(p))
            rs["spec"]["replicas"] = len(pods)
            rs["status"].update(replicas=len(pods), readyReplicas=ready, availableReplicas=ready,
                                fullyLabeledReplicas=len(pods))
            all_pods += pods
            if rs is new_rs:
                new_pods = pods
        ready = sum(1 for p in all_pods if self.pod_ready(p))
        st.update(replicas=len(all_pods), updatedReplicas=len(new_pods), readyReplicas=ready,
                  availableReplicas=ready, unavailableReplicas=max(want - ready, 0))
        if ready >= want:
            self.set_condition(dep, "Available", "True", "MinimumReplicasAvailable",
                               "Deployment has minimum availability.")
        else:
            self.set_condition(dep, "Available", "False", "MinimumReplicasUnavailable",
                               "Deployment does not have minimum availability.")
        rs_name = new_rs["metadata"]["name"]
        if self.complete(dep):
            self.set_condition(dep, "Progressing", "True", "NewReplicaSetAvailable",
                               'ReplicaSet "%s" has successfully progressed.' % rs_name)
        else:
            deadline = dep["spec"].get("progressDeadlineSeconds", 600)
            if time.monotonic() - self.progress_time.get(key, time.monotonic()) > deadline:
                self.set_condition(dep, "Progressing", "False", FATAL_DEADLINE_REASON,
                                   'ReplicaSet "%s" has timed out progressing.' % rs_name)


# ----------------------------------------------------------------------------- validation

def validate_deployment(dep):
    """Returns a list of (field, reason, message) problems; empty when valid."""
    problems = []
    spec = dep.get("spec", {})
    replicas = spec.get("replicas", 1)
    if not isinstance(replicas, int) or replicas < 0:
        problems.append(("spec.replicas", "FieldValueInvalid",
                         "Invalid value: %s: must be greater than or equal to 0" % json.dumps(replicas)))
    pd = spec.get("progressDeadlineSeconds", 600)
    if not isinstance(pd, int) or pd <= 0:
        problems.append(("spec.progressDeadlineSeconds", "FieldValueInvalid",
                         "Invalid value: %s: must be greater than 0" % json.dumps(pd)))
    containers = spec.get("template", {}).get("spec", {}).get("containers")
    if not isinstance(containers, list) or not containers:
        problems.append(("spec.template.spec.containers", "FieldValueRequired", "Required value"))
        return problems
    seen = set()
    for i, c in enumerate(containers):
        if not isinstance(c, dict):
            problems.append(("spec.template.spec.containers[%d]" % i, "FieldValueInvalid",
                             "Invalid value: not an object"))
            continue
        if not c.get("name"):
            problems.append(("spec.template.spec.containers[%d].name" % i, "FieldValueRequired",
                             "Required value"))
        elif c["name"] in seen:
            problems.append(("spec.template.spec.containers[%d].name" % i, "FieldValueDuplicate",
                             'Duplicate value: "%s"' % c["name"]))
        seen.add(c.get("name"))
        image = c.get("image")
        if not isinstance(image, str) or not image.strip():
            problems.append(("spec.template.spec.containers[%d].image" % i, "FieldValueRequired",
                             "Required value"))
    labels = spec.get("template", {}).get("metadata", {}).get("labels", {}) or {}
    for k, v in (spec.get("selector", {}).get("matchLabels", {}) or {}).items():
        if labels.get(k) != v:
            problems.append(("spec.template.metadata.labels", "FieldValueInvalid",
                             "Invalid value: %s: `selector` does not match template `labels`"
                             % json.dumps(labels, separators=(",", ":"))))
            break
    return problems


def parse_selector(sel):
    """labelSelector "a=b,c==d,e!=f,g" -> list of (key, op, value)."""
    reqs = []
    for part in filter(None, (p.strip() for p in (sel or "").split(","))):
        m = re.match(r"^([A-Za-z0-9._/-]+)\s*(==|!=|=)\s*([A-Za-z0-9._-]*)$", part)
        if m:
            reqs.append((m.group(1), "!=" if m.group(2) == "!=" else "=", m.group(3)))
        elif re.match(r"^!?[A-Za-z0-9._/-]+$", part):
            reqs.append((part.lstrip("!"), "!exists" if part.startswith("!") else "exists", None))
        else:
            raise ValueError("unable to parse requirement: %s" % part)
    return reqs


def selector_matches(reqs, labels):
    for k, op, v in reqs:
        if op == "=" and labels.get(k) != v:
            return False
        if op == "!=" and labels.get(k) == v:
            return False
        if op == "exists" and k not in labels:
            return False
        if op == "!exists" and k in labels:
            return False
    return True


# ----------------------------------------------------------------------------- HTTP

RESOURCES = {
    # (api prefix, plural) -> (group, kind, list kind)
    ("apis/apps/v1", "deployments"): ("apps", "Deployment", "DeploymentList"),
    ("apis/apps/v1", "replicasets"): ("apps", "ReplicaSet", "ReplicaSetList"),
    ("api/v1", "pods"): ("", "Pod", "PodList"),
    ("api/v1", "events"): ("", "Event", "EventList"),
    ("apis/discovery.k8s.io/v1", "endpointslices"): ("discovery.k8s.io", "EndpointSlice",
                                                     "EndpointSliceList"),
}
PATH_RE = re.compile(r"^/(apis/apps/v1|api/v1|apis/discovery\.k8s\.io/v1)/namespaces/([a-z0-9.-]+)/([a-z]+)"
                     r"(?:/([a-z0-9.-]+)(?:/([a-z]+))?)?/?$")
SUBRESOURCES = {("pods", "log")}


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "fake-kube-apiserver/1.0"

    def log_message(self, fmt, *args):
        if self.server.verbose:
            sys.stderr.write("fake-apiserver: " + (fmt % args) + "\n")

    # -- plumbing

    def send_json(self, code, obj):
        data = json.dumps(obj).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.send_header("Audit-Id", str(uuid.uuid4()))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    def send_status(self, code, reason, message, details=None):
        self.send_json(code, status_body(code, reason, message, details))

    def read_body(self):
        n = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(n) if n > 0 else b""

    def record(self, code, user=""):
        cluster = self.server.cluster
        with cluster.lock:
            cluster.requests.append({"method": self.command, "path": self.path.split("?", 1)[0],
                                     "watch": "watch=true" in self.path, "user": user,
                                     "code": code})
            del cluster.requests[:-500]

    # -- auth

    def load_users(self):
        try:
            with open(self.server.tokens_file) as f:
                return json.load(f)
        except (OSError, ValueError):
            return {}

    def authenticate(self):
        """Returns the user entry or None."""
        users = self.load_users()
        auth = self.headers.get("Authorization", "")
        if auth.startswith("Bearer "):
            return users.get("tokens", {}).get(auth[len("Bearer "):].strip())
        peer = getattr(self.connection, "getpeercert", lambda: None)()
        if peer:
            for rdn in peer.get("subject", ()):
                for k, v in rdn:
                    if k == "commonName":
                        return users.get("certs", {}).get(v)
        return None

    @staticmethod
    def allowed(user, verb, resource_key):
        allow = user.get("allow", {})
        for res in (resource_key, "*"):
            verbs = allow.get(res, [])
            if verb in verbs or "*" in verbs:
                return True
        return False

    # -- dispatch

    def do_GET(self):
        self.dispatch("GET")

    def do_PATCH(self):
        self.dispatch("PATCH")

    def do_POST(self):
        self.dispatch("POST")

    def do_PUT(self):
        self.dispatch("PUT")

    def do_DELETE(self):
        self.dispatch("DELETE")

    def dispatch(self, method):
        url = urllib.parse.urlsplit(self.path)
        query = urllib.parse.parse_qs(url.query)
        body = self.read_body()
        if url.path.startswith("/_fake/"):
            return self.control(method, url.path, query, body)
        cluster = self.server.cluster
        with cluster.lock:
            stall_until = cluster.stall_until
        while time.monotonic() < stall_until:  # accepted and read, never answered (issue 19)
            time.sleep(0.05)
            with cluster.lock:
                stall_until = min(stall_until, cluster.stall_until)
        with cluster.lock:
            injected = cluster.errors.pop(0) if cluster.errors else None
        if injected is not None:
            self.record(injected)
            return self.send_status(injected, "InternalError" if injected == 500 else "ServiceUnavailable",
                                    "injected error %d" % injected)
        m = PATH_RE.match(url.path)
        if not m or (m.group(1), m.group(3)) not in RESOURCES:
            self.record(404)
            return self.send_status(404, "NotFound", "the server could not find the requested resource",
                                    {})
        prefix, ns, plural, name, sub = m.groups()
        if sub and (plural, sub) not in SUBRESOURCES:
            self.record(404)
            return self.send_status(404, "NotFound", "the server could not find the requested resource",
                                    {})
        group, kind, list_kind = RESOURCES[(prefix, plural)]
        resource_key = plural + ("/" + sub if sub else "") + ("." + group if group else "")
        watching = query.get("watch", ["false"])[0] in ("true", "1")
        if method == "GET":
            verb = "get" if name else ("watch" if watching else "list")
        elif method == "PATCH" and name and not sub:
            verb = "patch"
        else:
            self.record(405)
            return self.send_status(405, "MethodNotAllowed",
                                    "the server does not allow this method on the requested resource")
        user = self.authenticate()
        if user is None:
            self.record(401)
            return self.send_status(401, "Unauthorized", "Unauthorized")
        if not self.allowed(user, verb, resource_key):
            self.record(403, user.get("user", ""))
            what = plural + ("." + group if group else "") + (' "%s"' % name if name else "")
            res = plural + ("/" + sub if sub else "")
            return self.send_status(
                403, "Forbidden",
                '%s is forbidden: User "%s" cannot %s resource "%s" in API group "%s" in the namespace "%s"'
                % (what, user.get("user", ""), verb, res, group, ns),
                {"name": name or "", "group": group, "kind": plural})
        self.record(200, user.get("user", ""))
        if sub == "log":
            return self.pod_log(ns, name, query)
        if verb == "watch":
            if plural != "endpointslices":
                return self.send_status(405, "MethodNotAllowed", "only endpointslices are watchable here")
            return self.watch_slices(ns, query)
        if verb == "list":
            return self.list_objects(ns, plural, list_kind, query)
        if verb == "get":
            return self.get_object(ns, plural, group, name)
        return self.patch_deployment(ns, name, body) if plural == "deployments" else \
            self.send_status(405, "MethodNotAllowed", "only deployments are patchable here")

    def store_for(self, plural):
        c = self.server.cluster
        return {"deployments": c.deployments, "replicasets": c.replicasets, "pods": c.pods,
                "events": c.events, "endpointslices": c.endpointslices}[plural]

    def send_text(self, code, text):
        data = text.encode("utf-8", "surrogateescape")
        self.send_response(code)
        self.send_header("Content-Type", "text/plain")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def pod_log(self, ns, name, query):
        """GET pods/{name}/log as the API answers it (PodLogOptions)."""
        c = self.server.cluster
        container = query.get("container", [""])[0]
        previous = query.get("previous", ["false"])[0] == "true"
        with c.lock:
            pod = copy.deepcopy(c.pods.get((ns, name)))
            names = [x.get("name", "") for x in (pod or {}).get("spec", {}).get("containers", [])]
            if pod is not None and not container and len(names) == 1:
                container = names[0]
            entry = copy.deepcopy(c.logs.get((ns, name, container)))
        if pod is None:
            return self.not_found("pods", "", name)
        if not container:
            return self.send_status(400, "BadRequest",
                                    "a container name must be specified for pod %s, choose one of: [%s]"
                                    % (name, " ".join(names)))
        if container not in names:
            return self.send_status(400, "BadRequest", "container %s is not valid for pod %s" % (container, name))
        statuses = {s.get("name"): s for s in pod.get("status", {}).get("containerStatuses", [])}
        st = statuses.get(container, {})
        if previous:
            text = (entry or {}).get("previous")
            if not st.get("restartCount") or text is None:
                return self.send_status(400, "BadRequest", 'previous terminated container "%s" in pod "%s" not found'
                                        % (container, name))
        else:
            text = (entry or {}).get("current")
            if text is None:
                waiting = st.get("state", {}).get("waiting", {}).get("reason", "ContainerCreating")
                return self.send_status(400, "BadRequest", 'container "%s" in pod "%s" is waiting to start: %s'
                                        % (container, name, waiting))
        try:
            tail = int(query.get("tailLines", ["-1"])[0])
            limit = int(query.get("limitBytes", ["0"])[0])
        except ValueError:
            return self.send_status(400, "BadRequest", "invalid tailLines or limitBytes")
        if tail >= 0:
            lines = text.splitlines(keepends=True)
            text = "".join(lines[max(0, len(lines) - tail):]) if tail else ""
        data = text.encode("utf-8", "surrogateescape")
        if limit > 0:
            data = data[:limit]
        return self.send_text(200, data.decode("utf-8", "surrogateescape"))

    def not_found(self, plural, group, name):
        what = plural + ("." + group if group else "")
        self.send_status(404, "NotFound", '%s "%s" not found' % (what, name),
                         {"name": name, "group": group, "kind": plural})

    def get_object(self, ns, plural, group, name):
        c = self.server.cluster
        with c.lock:
            obj = self.store_for(plural).get((ns, name))
            obj = copy.deepcopy(obj) if obj is not None else None
        if obj is None:
            return self.not_found(plural, group, name)
        self.send_json(200, obj)

    def list_objects(self, ns, plural, list_kind, query):
        try:
            reqs = parse_selector(query.get("labelSelector", [""])[0])
        except ValueError as e:
            return self.send_status(400, "BadRequest", str(e))
        fields = []
        for part in filter(None, query.get("fieldSelector", [""])[0].split(",")):
            m = re.match(r"^([A-Za-z.]+)(==|=|!=)(.*)$", part)
            allowed = {"metadata.name", "metadata.namespace"} | (
                {"involvedObject.name", "involvedObject.kind", "reason", "type"} if plural == "events" else set())
            if not m or m.group(1) not in allowed:
                return self.send_status(400, "BadRequest", 'field label not supported: %s'
                                        % (m.group(1) if m else part))
            fields.append((m.group(1), m.group(2) != "!=", m.group(3)))

        def field_of(o, path):
            for k in path.split("."):
                o = o.get(k, {}) if isinstance(o, dict) else {}
            return o if isinstance(o, str) else ""

        c = self.server.cluster
        with c.lock:
            items = [copy.deepcopy(o) for (ons, _), o in sorted(self.store_for(plural).items())
                     if ons == ns and selector_matches(reqs, o["metadata"].get("labels", {}))
                     and all((field_of(o, f) == v) == eq for f, eq, v in fields)]
            rv = str(c.rv)
        self.send_json(200, {"kind": list_kind,
                             "apiVersion": "v1" if plural in ("pods", "events") else
                             "discovery.k8s.io/v1" if plural == "endpointslices" else "apps/v1",
                             "metadata": {"resourceVersion": rv}, "items": items})

    def patch_deployment(self, ns, name, body):
        c = self.server.cluster
        ctype = (self.headers.get("Content-Type") or "").split(";")[0].strip()
        with c.lock:
            c.patch_requests += 1
            dep = c.deployments.get((ns, name))
            if dep is None:
                return self.not_found("deployments", "apps", name)
            if c.conflicts > 0:
                c.conflicts -= 1
                return self.send_status(
                    409, "Conflict",
                    'Operation cannot be fulfilled on deployments.apps "%s": the object has been '
                    'modified; please apply your changes to the latest version and try again' % name,
                    {"name": name, "group": "apps", "kind": "deployments"})
            if ctype not in ("application/strategic-merge-patch+json", "application/merge-patch+json"):
                return self.send_status(415, "UnsupportedMediaType",
                                        'the body of the request was in an unknown format - accepted '
                                        'media types include: application/strategic-merge-patch+json, '
                                        'application/merge-patch+json')
            try:
                patch = json.loads(body.decode() or "null")
                if not isinstance(patch, dict):
                    raise PatchError("patch is not a JSON object")
                if ctype == "application/strategic-merge-patch+json":
                    patched = smp_map(dep, patch)
                else:
                    patched = json_merge_patch(dep, patch)
            except (ValueError, PatchError) as e:
                return self.send_status(400, "BadRequest", "error decoding patch: %s" % e)
            # Identity and status are not patchable through the main resource.
            patched["metadata"]["name"] = name
            patched["metadata"]["namespace"] = ns
            patched["metadata"]["uid"] = dep["metadata"]["uid"]
            patched["status"] = dep["status"]
            patched["apiVersion"], patched["kind"] = "apps/v1", "Deployment"
            problems = validate_deployment(patched)
            if problems:
                msg = 'Deployment.apps "%s" is invalid: %s' % (
                    name, ", ".join("%s: %s" % (f, m) for f, _, m in problems))
                return self.send_status(422, "Invalid", msg, {
                    "name": name, "group": "apps", "kind": "Deployment",
                    "causes": [{"reason": r, "message": m, "field": f} for f, r, m in problems]})
            if patched["spec"] != dep["spec"]:
                patched["metadata"]["generation"] = dep["metadata"]["generation"] + 1
            else:
                patched["metadata"]["generation"] = dep["metadata"]["generation"]
            if patched != dep:
                patched["metadata"]["resourceVersion"] = c.next_rv()
            c.deployments[(ns, name)] = patched
            c.patches_applied += 1
            out = copy.deepcopy(patched)
        self.send_json(200, out)

    def watch_slices(self, ns, query):
        """A watch stream as the API server sends it: chunked, one JSON event per line."""
        try:
            reqs = parse_selector(query.get("labelSelector", [""])[0])
            since = int(query.get("resourceVersion", ["0"])[0] or 0)
            timeout = float(query.get("timeoutSeconds", ["5"])[0])
        except ValueError as e:
            return self.send_status(400, "BadRequest", str(e))
        bookmarks = query.get("allowWatchBookmarks", ["false"])[0] in ("true", "1")
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def chunk(event):
            data = (json.dumps(event) + "\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        c = self.server.cluster
        deadline = time.monotonic() + timeout
        try:
            while time.monotonic() < deadline:
                with c.lock:
                    # A resourceVersion older than the last compaction: one ERROR event with a
                    # 410 Expired Status ends the watch, at its start or (etcd's ErrCompacted
                    # on a watch that had not caught up) while it is open; the client re-lists.
                    if since and since < c.compacted_rv:
                        chunk({"type": "ERROR", "object": status_body(
                            410, "Expired", "too old resource version: %d (%d)"
                            % (since, c.compacted_rv))})
                        break
                    todo = [(rv, t, copy.deepcopy(o)) for rv, t, o in c.slice_events
                            if rv > since and o["metadata"].get("namespace") == ns
                            and selector_matches(reqs, o["metadata"].get("labels", {}))]
                    idle = False
                    if not todo:
                        idle_rv = c.rv  # nothing of ours up to here
                        idle = not c.changed.wait(min(1.0, max(0.0, deadline - time.monotonic())))
                if todo:
                    for rv, t, o in todo:
                        chunk({"type": t, "object": o})
                        since = rv
                elif idle and bookmarks and time.monotonic() < deadline:
                    since = max(since, idle_rv)
                    chunk({"type": "BOOKMARK", "object": {
                        "kind": "EndpointSlice", "apiVersion": "discovery.k8s.io/v1",
                        "metadata": {"resourceVersion": str(idle_rv)}}})
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except OSError:
            pass
        self.close_connection = True

    # -- test control

    def control(self, method, path, query, body):
        c = self.server.cluster
        if path == "/_fake/state" and method == "POST":
            try:
                seed = json.loads(body.decode() or "{}")
                with c.lock:
                    for dep in seed.get("deployments", []):
                        c.seed(dep)
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                return self.send_status(400, "BadRequest", "bad seed: %s" % e)
            return self.send_json(200, {"ok": True})
        if path == "/_fake/conflicts" and method == "POST":
            with c.lock:
                c.conflicts = int(query.get("count", ["1"])[0])
            return self.send_json(200, {"conflicts": c.conflicts})
        if path == "/_fake/errors" and method == "POST":
            with c.lock:
                code = int(query.get("code", ["503"])[0])
                c.errors = [code] * int(query.get("count", ["1"])[0])
            return self.send_json(200, {"errors": len(c.errors)})
        if path == "/_fake/stall" and method == "POST":
            seconds = float(query.get("seconds", ["3600"])[0])
            with c.lock:
                c.stall_until = time.monotonic() + seconds if seconds > 0 else 0.0
            return self.send_json(200, {"stall_s": seconds})
        if path == "/_fake/stats" and method == "GET":
            with c.lock:
                return self.send_json(200, {"patch_requests": c.patch_requests,
                                            "patches_applied": c.patches_applied,
                                            "requests": list(c.requests)})
        if path == "/_fake/endpointslices" and method == "POST":
            try:
                with c.lock:
                    c.put_slice(json.loads(body.decode() or "{}"))
            except (ValueError, KeyError, TypeError, AttributeError) as e:
                return self.send_status(400, "BadRequest", "bad EndpointSlice: %s" % e)
            return self.send_json(200, {"ok": True})
        m = re.match(r"^/_fake/endpointslices/([^/]+)/([^/]+)$", path)
        if m and method == "DELETE":
            with c.lock:
                found = c.delete_slice(m.group(1), m.group(2))
                if query.get("compact", [""])[0] in ("true", "1"):
                    c.compact()  # under the same lock: no watch sees the DELETED event
            return self.send_json(200 if found else 404, {"deleted": found})
        if path == "/_fake/compact" and method == "POST":
            with c.lock:
                c.compact()
                return self.send_json(200, {"compacted": c.compacted_rv})
        m = re.match(r"^/_fake/deployments/([^/]+)/([^/]+)$", path)
        if m and method == "GET":
            with c.lock:
                dep = copy.deepcopy(c.deployments.get((m.group(1), m.group(2))))
            if dep is None:
                return self.not_found("deployments", "apps", m.group(2))
            return self.send_json(200, dep)
        return self.send_status(404, "NotFound", "no such control endpoint")


class Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True

    def __init__(self, addr, tls_ctx, **kw):
        super().__init__(addr, Handler)
        self.tls_ctx = tls_ctx
        for k, v in kw.items():
            setattr(self, k, v)

    def finish_request(self, request, client_address):
        # The TLS handshake runs on the connection's own thread.
        try:
            request.settimeout(10)
            tls = self.tls_ctx.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError) as e:
            if self.verbose:
                sys.stderr.write("fake-apiserver: TLS handshake failed: %s\n" % e)
            return
        try:
            self.RequestHandlerClass(tls, client_address, self)
        finally:
            try:
                tls.close()
            except OSError:
                pass

    def handle_error(self, request, client_address):
        if self.verbose:
            super().handle_error(request, client_address)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--port-file")
    ap.add_argument("--cert", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--ca", help="CA for client certificates (optional)")
    ap.add_argument("--tokens", required=True)
    ap.add_argument("--step-ms", type=int, default=100)
    ap.add_argument("--errimagepull-steps", type=int, default=2,
                    help="steps a failing image pull shows ErrImagePull before ImagePullBackOff")
    ap.add_argument("--verbose", action="store_true")
    args = ap.parse_args()

    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.load_cert_chain(args.cert, args.key)
    if args.ca:
        ctx.load_verify_locations(args.ca)
        ctx.verify_mode = ssl.CERT_OPTIONAL

    cluster = Cluster()
    cluster.errimagepull_steps = args.errimagepull_steps
    try:
        server = Server(("127.0.0.1", args.port), ctx, cluster=cluster, tokens_file=args.tokens,
                        verbose=args.verbose)
    except OSError as e:
        sys.stderr.write("fake-apiserver: cannot listen on 127.0.0.1:%d: %s\n" % (args.port, e))
        sys.exit(3)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.rename(tmp, args.port_file)

    parent = os.getppid()

    def background():
        step = args.step_ms / 1000.0
        while True:
            time.sleep(step)
            if os.getppid() != parent:  # the test that started us is gone
                os._exit(0)
            cluster.tick()

    threading.Thread(target=background, daemon=True).start()
    try:
        server.serve_forever(poll_interval=0.1)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
