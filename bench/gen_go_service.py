#!/usr/bin/env python3
"""Generates a synthetic Go service (stdlib only) for kiln's build benchmarks.

    gen_go_service.py --out DIR [--seed 1] [--packages 44]    generate a fresh tree
    gen_go_service.py --out DIR --mutate N                    variant N of one leaf function
    gen_go_service.py --out DIR --break                       compile error in a leaf package

The tree is deterministic for a given seed: packages under internal/ import each other in
layers (a DAG), each package has structs, methods, maps, sorting, string handling and fmt;
cmd/app imports the root packages and serves /healthz and /run on $PORT (default 9000).
--mutate and --break edit an existing tree in place: both rewrite only the body of Tune() in
the first leaf package (between the kiln-bench markers), so --mutate after --break repairs it.
The Containerfile and Containerfile.plain next to this script are copied into the tree.
"""

import argparse
import os
import random
import re
import shutil
import sys

MODULE = "example.com/benchsvc"
MARKER = ".kiln-bench-gen"
BEGIN = "\t// kiln-bench:begin"
END = "\t// kiln-bench:end"
HERE = os.path.dirname(os.path.abspath(__file__))

NAMES = [
    "account", "audit", "billing", "cache", "catalog", "config", "coupon", "crawler",
    "feed", "geo", "graph", "index", "inventory", "invoice", "ledger", "limits", "loader",
    "metrics", "notify", "order", "parser", "payment", "pricing", "profile", "quota",
    "ranking", "report", "review", "route", "schema", "search", "session", "shipping",
    "stock", "store", "tax", "tenant", "token", "tracker", "usage", "vendor", "wallet",
    "webhook", "workflow", "alerts", "backup", "cohort", "digest", "export", "fraud",
]

OPS = [
    "acc = acc*{a} + x",
    "acc += x*{a} - {b}",
    "acc ^= x << uint({a}%7)",
    "acc = (acc + x*x) % {m}",
    "if x%{a} == 0 {{\n\t\t\tacc += {b}\n\t\t}} else {{\n\t\t\tacc -= x\n\t\t}}",
    "acc += (x ^ {b}) & {m}",
]


def cap(s):
    return s[0].upper() + s[1:]


class Plan:
    """The package DAG: layer 0 holds the leaves; each higher package imports lower ones."""

    def __init__(self, rng, count):
        names = sorted(NAMES[:count])
        rng.shuffle(names)
        sizes = [12, 10, 9, 7, 6]
        scale = count / sum(sizes)
        self.layers, i = [], 0
        for k, size in enumerate(sizes):
            n = max(1, round(size * scale)) if k < len(sizes) - 1 else count - i
            self.layers.append(sorted(names[i:i + n]))
            i += n
        self.deps = {}
        for k, layer in enumerate(self.layers):
            for name in layer:
                if k == 0:
                    self.deps[name] = []
                    continue
                lower = [p for l in self.layers[:k] for p in l]
                picks = {rng.choice(self.layers[k - 1])}
                for _ in range(rng.randint(0, 2)):
                    picks.add(rng.choice(lower))
                self.deps[name] = sorted(picks)
        used = {d for ds in self.deps.values() for d in ds}
        self.roots = sorted(p for p in self.deps if p not in used)
        self.leaf = self.layers[0][0]


def numeric_func(rng, name):
    ops = [rng.choice(OPS).format(a=rng.randint(2, 97), b=rng.randint(1, 999),
                                  m=rng.choice([255, 1023, 4095, 65535]))
           for _ in range(rng.randint(2, 4))]
    body = "\n".join("\t\t" + o for o in ops)
    return f"""// {name} folds xs into one checksum.
func {name}(xs []int) int {{
\tacc := {rng.randint(0, 100)}
\tfor _, x := range xs {{
{body}
\t}}
\treturn acc
}}
"""


def unit(rng, pkg, i):
    """One struct, one index type and their methods plus numeric helpers (~150 lines)."""
    item, index = f"{cap(pkg)}Item{i}", f"{cap(pkg)}Index{i}"
    w1, w2 = rng.randint(2, 40), rng.randint(1, 9)
    sep = rng.choice(["-", ":", "/", "."])
    funcs = "\n".join(numeric_func(rng, f"Fold{i}x{j}") for j in range(3))
    return f"""// {item} is one record kept by {index}.
type {item} struct {{
\tID     int
\tName   string
\tTags   []string
\tAttrs  map[string]int
\tWeight float64
}}

// New{item} returns an item with no tags.
func New{item}(id int, name string) *{item} {{
\treturn &{item}{{ID: id, Name: name, Attrs: make(map[string]int)}}
}}

// AddTag adds t once, keeping the tags sorted.
func (it *{item}) AddTag(t string) {{
\tt = strings.ToLower(strings.TrimSpace(t))
\tfor _, have := range it.Tags {{
\t\tif have == t {{
\t\t\treturn
\t\t}}
\t}}
\tit.Tags = append(it.Tags, t)
\tsort.Strings(it.Tags)
\tit.Attrs["tag:"+t]++
}}

// Score combines the item's fields into one number.
func (it *{item}) Score() float64 {{
\ts := it.Weight*{w1} + float64(len(it.Tags))*{w2}
\tfor k, v := range it.Attrs {{
\t\ts += float64(len(k) * v)
\t}}
\treturn s
}}

// Key is the item's stable key.
func (it *{item}) Key() string {{
\treturn fmt.Sprintf("%s{sep}%04d", it.Name, it.ID)
}}

// {index} keeps items by key.
type {index} struct {{
\titems map[string]*{item}
\torder []string
}}

// New{index} returns an empty index.
func New{index}() *{index} {{
\treturn &{index}{{items: make(map[string]*{item})}}
}}

// Put inserts or replaces it.
func (ix *{index}) Put(it *{item}) {{
\tk := it.Key()
\tif _, ok := ix.items[k]; !ok {{
\t\tix.order = append(ix.order, k)
\t}}
\tix.items[k] = it
}}

// Get returns the item with key k.
func (ix *{index}) Get(k string) (*{item}, bool) {{
\tit, ok := ix.items[k]
\treturn it, ok
}}

// Sorted returns the items by descending score, then key.
func (ix *{index}) Sorted() []*{item} {{
\tout := make([]*{item}, 0, len(ix.items))
\tfor _, k := range ix.order {{
\t\tout = append(out, ix.items[k])
\t}}
\tsort.Slice(out, func(a, b int) bool {{
\t\tif out[a].Score() != out[b].Score() {{
\t\t\treturn out[a].Score() > out[b].Score()
\t\t}}
\t\treturn out[a].Key() < out[b].Key()
\t}})
\treturn out
}}

// WithPrefix returns the keys that start with p.
func (ix *{index}) WithPrefix(p string) []string {{
\tvar keys []string
\tfor _, k := range ix.order {{
\t\tif strings.HasPrefix(k, p) {{
\t\t\tkeys = append(keys, k)
\t\t}}
\t}}
\treturn keys
}}

// Summary renders the index as text.
func (ix *{index}) Summary() string {{
\tvar b strings.Builder
\tfor i, it := range ix.Sorted() {{
\t\tfmt.Fprintf(&b, "%d %s %.2f [%s]\\n", i, it.Key(), it.Score(), strings.Join(it.Tags, ","))
\t}}
\treturn b.String()
}}

{funcs}"""


def unit_file(rng, pkg, units):
    body = "\n".join(unit(rng, pkg, i) for i in units)
    return f"""package {pkg}

import (
\t"fmt"
\t"sort"
\t"strings"
)

{body}"""


def run_file(rng, pkg, deps, nunits, has_tune):
    imports = "".join(f'\t"{MODULE}/internal/{d}"\n' for d in deps)
    imports = '\t"fmt"\n' + ("\n" + imports if imports else "")
    calls = "".join(f"\ttotal += {d}.Run(n - 1)\n" for d in deps)
    lines = []
    for i in range(nunits):
        tag = rng.choice(["hot", "cold", "new", "old", "big", "small"])
        lines.append(f"""\tix{i} := New{cap(pkg)}Index{i}()
\tfor i := 0; i < n+{i + 2}; i++ {{
\t\tit := New{cap(pkg)}Item{i}(i, fmt.Sprintf("{pkg}%d", i%3))
\t\tit.AddTag("{tag}")
\t\tit.Weight = float64(i) / {rng.randint(2, 9)}
\t\tix{i}.Put(it)
\t}}
\ttotal += len(ix{i}.Sorted()) + len(ix{i}.WithPrefix("{pkg}1")) + len(ix{i}.Summary())%{rng.randint(3, 17)}
\ttotal += Fold{i}x0(xs) + Fold{i}x1(xs) + Fold{i}x2(xs)
""")
    tune = "\ttotal += Tune(xs)\n" if has_tune else ""
    return f"""// Package {pkg} is generated code for kiln's build benchmark.
package {pkg}

import (
{imports})

// Run exercises the package and its dependencies; the result depends only on n.
func Run(n int) int {{
\tif n <= 0 {{
\t\treturn 1
\t}}
\ttotal := 0
{calls}\txs := make([]int, n+8)
\tfor i := range xs {{
\t\txs[i] = i*{rng.randint(3, 31)} + n
\t}}
{"".join(lines)}{tune}\treturn total
}}
"""


def tune_body(variant):
    """The body of the leaf's Tune(); variant 0 is the generated one."""
    a, b = 3 + variant % 11, 1 + variant % 7
    return [BEGIN,
            "\tacc := 0",
            "\tfor i, x := range xs {",
            f"\t\tacc += x*{a} + i*{b}",
            "\t\tif acc > 1<<20 {",
            f"\t\t\tacc %= {997 + variant}",
            "\t\t}",
            "\t}",
            "\treturn acc",
            END]


def broken_body():
    return [BEGIN,
            "\tacc := 0",
            "\tfor i, x := range xs {",
            "\t\tacc += x*3 + i*kilnBenchUndefined",
            "\t}",
            "\treturn acc",
            END]


def tune_file(pkg):
    body = "\n".join(tune_body(0))
    return f"""package {pkg}

// Tune is the function the benchmark's --mutate and --break rewrite.
func Tune(xs []int) int {{
{body}
}}
"""


MAIN = """// Command app is a generated service for kiln's build benchmark.
package main

import (
\t"fmt"
\t"log"
\t"net/http"
\t"os"
\t"strconv"

{imports})

func run(n int) int {{
\ttotal := 0
{calls}\treturn total
}}

func main() {{
\tport := os.Getenv("PORT")
\tif port == "" {{
\t\tport = "9000"
\t}}
\tmux := http.NewServeMux()
\tmux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {{
\t\tw.WriteHeader(http.StatusOK)
\t\tfmt.Fprintln(w, "ok")
\t}})
\tmux.HandleFunc("/run", func(w http.ResponseWriter, r *http.Request) {{
\t\tn, err := strconv.Atoi(r.URL.Query().Get("n"))
\t\tif err != nil || n < 0 || n > 8 {{
\t\t\tn = 2
\t\t}}
\t\tfmt.Fprintln(w, run(n))
\t}})
\tlog.Printf("app listening on :%s", port)
\tlog.Fatal(http.ListenAndServe(":"+port, mux))
}}
"""


def write(path, text):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write(text)


def generate(out, seed, count):
    if os.path.exists(out) and os.listdir(out) and not os.path.exists(os.path.join(out, MARKER)):
        sys.exit(f"error: {out} exists, is not empty and was not made by this generator")
    for sub in ("internal", "cmd"):
        shutil.rmtree(os.path.join(out, sub), ignore_errors=True)
    rng = random.Random(seed)
    plan = Plan(rng, count)
    for pkg in sorted(plan.deps):
        nunits = rng.randint(3, 5)
        d = os.path.join(out, "internal", pkg)
        write(os.path.join(d, pkg + ".go"), run_file(rng, pkg, plan.deps[pkg], nunits,
                                                          pkg == plan.leaf))
        for f in range(0, nunits, 2):
            units = range(f, min(f + 2, nunits))
            write(os.path.join(d, f"part{f // 2}.go"), unit_file(rng, pkg, units))
        if pkg == plan.leaf:
            write(os.path.join(d, "tune.go"), tune_file(pkg))
    imports = "".join(f'\t"{MODULE}/internal/{r}"\n' for r in plan.roots)
    calls = "".join(f"\ttotal += {r}.Run(n)\n" for r in plan.roots)
    write(os.path.join(out, "cmd", "app", "main.go"), MAIN.format(imports=imports, calls=calls))
    write(os.path.join(out, "go.mod"), f"module {MODULE}\n\ngo 1.19\n")
    write(os.path.join(out, ".containerignore"), ".git\n" + MARKER + "\n")
    for cf in ("Containerfile", "Containerfile.plain"):
        shutil.copyfile(os.path.join(HERE, cf), os.path.join(out, cf))
    write(os.path.join(out, MARKER), f"seed={seed}\npackages={count}\nleaf={plan.leaf}\n")
    return plan


def count_tree(out):
    pkgs, lines = 0, 0
    for root, _, files in os.walk(out):
        gofiles = [f for f in files if f.endswith(".go")]
        if gofiles:
            pkgs += 1
        for f in gofiles:
            with open(os.path.join(root, f)) as fh:
                lines += sum(1 for _ in fh)
    return pkgs, lines


def rewrite_tune(out, body):
    meta = os.path.join(out, MARKER)
    if not os.path.exists(meta):
        sys.exit(f"error: {out} is not a generated tree (no {MARKER}); generate it first")
    leaf = re.search(r"^leaf=(\w+)$", open(meta).read(), re.M).group(1)
    path = os.path.join(out, "internal", leaf, "tune.go")
    lines = open(path).read().split("\n")
    start, end = lines.index(BEGIN), lines.index(END)
    write(path, "\n".join(lines[:start] + body + lines[end + 1:]))
    return os.path.relpath(path, out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", required=True, help="directory of the generated tree")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--packages", type=int, default=44, help=f"40..{len(NAMES)}")
    ap.add_argument("--mutate", type=int, metavar="N", help="rewrite Tune() to variant N")
    ap.add_argument("--break", dest="brk", action="store_true", help="add a compile error")
    a = ap.parse_args()
    if a.mutate is not None and a.brk:
        ap.error("--mutate and --break are exclusive")
    if a.mutate is not None:
        print(f"mutated {rewrite_tune(a.out, tune_body(a.mutate))} (variant {a.mutate})")
        return
    if a.brk:
        print(f"broke {rewrite_tune(a.out, broken_body())} (undefined: kilnBenchUndefined)")
        return
    if not 40 <= a.packages <= len(NAMES):
        ap.error(f"--packages must be within 40..{len(NAMES)}")
    plan = generate(a.out, a.seed, a.packages)
    pkgs, lines = count_tree(a.out)
    print(f"generated {a.out}: {pkgs} packages ({len(plan.deps)} internal, "
          f"{len(plan.roots)} roots, leaf {plan.leaf}), {lines} lines of Go, seed {a.seed}")


if __name__ == "__main__":
    main()
