#!/usr/bin/env python3
"""manifests_test: scripts/check_manifests.py against the real render and deliberately broken ones.

    tests/manifests/run_tests.py [--kiln BINARY]

* the real render of k8s/manifests (kubectl kustomize; $KUBECTL picks the binary) passes,
  with the placeholder-image WARNING, and fails under --require-pinned
* every broken/*.yaml fails (exit 1) and prints every line its `# expect:` headers name, and no other failure
* with --kiln: the ConfigMap's kiln.json also passes `kiln check-config`
"""
import argparse
import glob
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CHECKER = os.path.join(ROOT, "scripts", "check_manifests.py")


def run(*args):
    r = subprocess.run([sys.executable, CHECKER, *args], capture_output=True, text=True, timeout=300)
    return r.returncode, r.stdout, r.stderr


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--kiln")
    args = ap.parse_args()
    failures = []

    def expect(cond, msg):
        print(("ok    " if cond else "FAIL  ") + msg)
        if not cond:
            failures.append(msg)

    real = ["--kiln", args.kiln] if args.kiln else []
    code, out, err = run(*real)
    expect(code == 0, f"real render passes (exit {code})")
    if code != 0:
        print(out + err)
    expect("WARNING Deployment kiln/kiln: container kiln: image" in out and "unpinned placeholder" in out,
           "real render warns about the unpinned placeholder image")
    if args.kiln:
        expect("kiln.json" in out, "real render's kiln.json went through kiln check-config")
    code, out, err = run("--require-pinned")
    expect(code == 1 and "is the unpinned placeholder" in out, "--require-pinned refuses the placeholder")

    cases = sorted(glob.glob(os.path.join(HERE, "broken", "*.yaml")))
    expect(len(cases) >= 7, f"{len(cases)} broken renders")
    for path in cases:
        name = os.path.basename(path)
        with open(path) as f:
            wanted = [l.split(":", 1)[1].strip() for l in f.read().splitlines()[:5] if l.startswith("# expect:")]
        code, out, err = run("--rendered", path)
        lines = out.splitlines()
        missing = [w for w in wanted if not any(w in l for l in lines)]
        expect(code == 1 and wanted and not missing,
               f"{name}: exit {code}, expected line(s) {wanted}" +
               (f"; missing {missing}, got: {lines}" if missing else ""))
        # Nothing but the expected lines (and the placeholder warning) is reported.
        others = [l for l in lines if not any(w in l for w in wanted) and not l.startswith("WARNING")]
        expect(not others, f"{name}: no unrelated failures" + (f": {others}" if others else ""))

    print(f"manifests_test: {len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
