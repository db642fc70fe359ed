#!/usr/bin/env python3
"""Checks kiln's library graph against its includes and its layer order.

There is no global include path: every target reaches the source root through its own
target_include_directories, so any target *could* include any header. This check makes the
library graph in CMake the truth:

  1. include without a link: a file includes "dir/x.h" whose library (the library that
     compiles dir/x.cc, else the libraries of folder dir) is not in the transitive link closure
     of the target that compiles the file (headers: of any library of their folder);
  2. upward edge: a library links, or a library's file includes, a folder above its own in
     LAYERS (test files and test-only folders may use anything they link);
  3. a folder with C++ files or a CMakeLists.txt that LAYERS and LEAVES do not name.

The layer order is also written down in docs/architecture.md ("Libraries"); keep both in step.
Usage: scripts/check_layers.py [--source ROOT] [--verbose]. Exit status 1 on any finding.
"""
import argparse
import os
import re
import sys

# Bottom to top. A folder may depend only on folders before it.
LAYERS = [
    "common",     # status, logging, names, hashing, subprocess, file util, metrics
    "core",       # vocabulary: build types, tool types, Diagnostic, CancelToken
    "config",     # configuration model and parser, host checks, base-image policy
    "net",        # generic HTTP(S) client
    "state",      # durable state: journal + StateStore
    "workspace",  # git repositories, checkouts, source trees
    "registry",   # OCI distribution client
    "storage",    # disk budget: inventory, leases, collector
    "builder",    # process runner, diagnostics parser, buildah and layered builders
    "deploy",     # Deployer interface, local deploy target
    "k8s",        # Kubernetes deploy target
    "transport",  # MCP over HTTP, git smart HTTP, operator API
    "actors",     # scheduler/domain/candidate cores and actors
    "pool",       # worker pool: placement, dispatch queue, discovery, remote builder (issue 20)
    "app",        # composition root and commands (main)
]
# Test-only folders: leaves of the graph; may include whatever their targets link.
LEAVES = ["tests", "fuzz", "bench", "image"]

INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
COMMAND_RE = re.compile(r"\b(add_library|add_executable|kiln_unit_test|target_link_libraries)\s*\(", re.M)
SOURCE_EXT = (".cc", ".cpp", ".h", ".hpp")


def strip_comments(text):
    return "\n".join(line.split("#", 1)[0] for line in text.splitlines())


def call_args(text, start):
    """Arguments of the CMake call whose '(' is at text[start - 1]."""
    depth, i = 1, start
    while i < len(text) and depth:
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
        i += 1
    return text[start:i - 1].split()


class Graph:
    def __init__(self, root):
        self.root = root
        self.targets = {}   # name -> {"folder", "sources": set(paths), "links": set, "test": bool}
        self.folder_tokens = {}  # folder -> every word of its CMakeLists.txt (for leaf folders)

    def parse(self, folder):
        path = os.path.join(self.root, folder, "CMakeLists.txt")
        if not os.path.exists(path):
            return
        text = strip_comments(open(path, encoding="utf-8").read())
        self.folder_tokens[folder] = set(re.findall(r"[A-Za-z0-9_:]+", text))
        for m in COMMAND_RE.finditer(text):
            cmd, args = m.group(1), call_args(text, m.end())
            if not args:
                continue
            name = args[0]
            if "$" in name:
                continue
            if cmd == "target_link_libraries":
                t = self.targets.setdefault(name, self.new(folder))
                t["links"].update(a for a in args[1:] if a not in ("PUBLIC", "PRIVATE", "INTERFACE"))
                continue
            t = self.targets.setdefault(name, self.new(folder))
            t["folder"] = folder
            mode = "SOURCES"
            for a in args[1:]:
                if a in ("STATIC", "SHARED", "OBJECT", "INTERFACE", "SOURCES"):
                    mode = "SOURCES"
                    continue
                if a == "LIBS":
                    mode = "LIBS"
                    continue
                if mode == "LIBS":
                    t["links"].add(a)
                elif a.endswith(SOURCE_EXT):
                    t["sources"].add(self.resolve(folder, a))
            t["test"] = cmd != "add_library"

    @staticmethod
    def new(folder):
        return {"folder": folder, "sources": set(), "links": set(), "test": False}

    def resolve(self, folder, src):
        for var in ("${CMAKE_SOURCE_DIR}/", "${PROJECT_SOURCE_DIR}/"):
            if src.startswith(var):
                return src[len(var):]
        return folder + "/" + src

    def closure(self, names):
        seen, todo = set(), list(names)
        while todo:
            n = todo.pop()
            if n in seen or n not in self.targets:
                continue
            seen.add(n)
            todo.extend(self.targets[n]["links"])
        return seen


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--source", default=os.path.join(os.path.dirname(__file__), ".."))
    ap.add_argument("--verbose", action="store_true")
    opts = ap.parse_args()
    root = os.path.abspath(opts.source)
    rank = {f: i for i, f in enumerate(LAYERS)}
    known = set(LAYERS) | set(LEAVES)
    errors = []

    folders = sorted(d for d in os.listdir(root)
                     if os.path.isdir(os.path.join(root, d)) and not d.startswith(".")
                     and not os.path.exists(os.path.join(root, d, "CMakeCache.txt")))
    g = Graph(root)
    code_folders = []
    for d in folders:
        has_code = any(f.endswith(SOURCE_EXT) for _, _, fs in os.walk(os.path.join(root, d)) for f in fs)
        has_cmake = os.path.exists(os.path.join(root, d, "CMakeLists.txt"))
        if not (has_code or has_cmake):
            continue
        if d not in known:
            errors.append(f"{d}/: a folder with code that scripts/check_layers.py does not place "
                          f"(add it to LAYERS or LEAVES, and to docs/architecture.md)")
            continue
        code_folders.append(d)
        g.parse(d)

    libraries = {n: t for n, t in g.targets.items() if not t["test"] and t["sources"]}
    # Which library owns a header: the one compiling its .cc (else the libraries of its folder).
    owner = {}
    for n, t in libraries.items():
        for s in t["sources"]:
            owner[os.path.splitext(s)[0]] = n
    folder_libs = {}
    for n, t in libraries.items():
        folder_libs.setdefault(t["folder"], set()).add(n)
    compiled_by = {}
    for n, t in g.targets.items():
        for s in t["sources"]:
            compiled_by.setdefault(s, set()).add(n)

    def allowed_libs(rel, folder):
        """Libraries a file may include headers of: the closure of what compiles it."""
        users = compiled_by.get(rel)
        if users:
            return g.closure(users), any(g.targets[u]["test"] for u in users)
        # A header, or a file no target lists: what its folder's targets link. Leaf folders
        # (and files only tests use) may use any library their CMakeLists.txt names.
        if folder in LEAVES:
            names = {w for w in g.folder_tokens.get(folder, ()) if w in g.targets}
            return g.closure(names), True
        return g.closure(folder_libs.get(folder, set())), False

    # 2a. Library links must point down.
    for n, t in sorted(libraries.items()):
        f = t["folder"]
        if f not in rank:
            continue
        for dep in sorted(t["links"]):
            if dep in libraries:
                df = libraries[dep]["folder"]
                if df != f and df in rank and rank[df] > rank[f]:
                    errors.append(f"{n} ({f}/) links {dep} ({df}/): upward edge "
                                  f"({f} is below {df} in the layer order)")

    # 1 + 2b. Includes.
    for folder in code_folders:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for fn in sorted(files):
                if not fn.endswith(SOURCE_EXT):
                    continue
                full = os.path.join(dirpath, fn)
                rel = os.path.relpath(full, root)
                text = open(full, encoding="utf-8", errors="replace").read()
                libs, is_test = allowed_libs(rel, folder)
                is_test = is_test or fn.endswith("_test.cc") or "test" in fn.split("_")
                lib_folders = {g.targets[l]["folder"] for l in libs if l in g.targets}
                for inc in INCLUDE_RE.findall(text):
                    top = inc.split("/", 1)[0]
                    if "/" not in inc or top not in known:
                        continue  # a same-folder relative include or a system-style header
                    stem = os.path.splitext(inc)[0]
                    lib = owner.get(stem)
                    if top != folder and top in rank and folder in rank and rank[top] > rank[folder] \
                            and not is_test:
                        errors.append(f"{rel}: includes {inc}: upward edge ({folder} is below {top})")
                        continue
                    if lib is not None:
                        if lib not in libs and not (compiled_by.get(rel, set()) & {lib}):
                            errors.append(f"{rel}: includes {inc} (library {lib}) without linking it")
                    elif top != folder and top not in lib_folders:
                        errors.append(f"{rel}: includes {inc} but links no library of {top}/")
                    if opts.verbose:
                        print(f"ok {rel} -> {inc}")

    for e in errors:
        print("layer check:", e)
    if errors:
        print(f"layer check: {len(errors)} problem(s); the order is LAYERS in scripts/check_layers.py")
        return 1
    print(f"layer check: {len(code_folders)} folders, {len(libraries)} libraries, no problems")
    return 0


if __name__ == "__main__":
    sys.exit(main())
