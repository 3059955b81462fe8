#!/usr/bin/env python3
"""The dataplane crate's module graph, drawn from its `use` paths, and the layering rules.

Nodes are the top-level modules of dataplane/src (the binary's main.rs and cli/ together are
`cli`). An edge A -> B means some file of A names `crate::B` (or `dataplane::B` in the binary,
or `super::B` where `super` is the crate root). Test modules (`#[cfg(test)] mod ... { }`) and
comments are left out: tests may reach up, the code may not.

Rules (exit status 1 when one is broken, with what broke it):
  - no cycle between top-level modules;
  - no hot-path module (packet, fib, forward, poller, xsk, mem, memport, ring_io, stats) reaches, directly or
    through others, config, cli, lab, runtime, control or telemetry code;
  - `types` is a leaf.

  modgraph.py [SRC]                  print the graph and check the rules
  modgraph.py --check DOC [SRC]      also fail if DOC's graph block differs from the graph
  modgraph.py --write DOC [SRC]      rewrite DOC's graph block
  modgraph.py --self-test            check that a cycle and a forbidden import are caught
"""
import os
import re
import sys
import tempfile

HOT = ["packet", "fib", "forward", "poller", "xsk", "mem", "memport", "ring_io", "stats"]
FORBIDDEN_FOR_HOT = ["config", "cli", "lab", "runtime", "control", "telemetry"]
LEAVES = ["types"]
BEGIN, END = "<!-- modgraph:begin -->", "<!-- modgraph:end -->"


def strip_comments(text):
    """Removes // comments (doc comments included) and /* */ blocks, keeping string literals."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            out.append(text[i : j + 1])
            i = j + 1
        elif text.startswith("//", i):
            j = text.find("\n", i)
            i = n if j < 0 else j
        elif text.startswith("/*", i):
            j = text.find("*/", i)
            i = n if j < 0 else j + 2
        else:
            out.append(c)
            i += 1
    return "".join(out)


def strip_test_modules(text):
    """Removes every `#[cfg(test)] mod name { ... }` (balanced braces)."""
    pat = re.compile(r"#\[cfg\(test\)\]\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{")
    while True:
        m = pat.search(text)
        if not m:
            return text
        depth, j = 1, m.end()
        while j < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[j], 0)
            j += 1
        text = text[: m.start()] + text[j:]


def module_path(src, path):
    """Module path of a file, e.g. src/lab/run.rs -> ['lab', 'run']; main.rs and cli/ -> cli."""
    rel = os.path.relpath(path, src)[: -len(".rs")].split(os.sep)
    if rel[-1] == "mod":
        rel = rel[:-1]
    if rel in (["lib"], ["main"]):
        return []
    return rel


def group_names(body):
    """Top-level names in a `{a, b::c, d::{e, f}}` use group."""
    names, depth, cur = [], 0, ""
    for ch in body:
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
        elif ch == "," and depth == 0:
            names.append(cur)
            cur = ""
            continue
        if depth == 0 or ch not in "{}":
            cur += ch if depth == 0 else ""
    names.append(cur)
    return [re.match(r"\s*(\w+)", n).group(1) for n in names if re.match(r"\s*(\w+)", n)]


def references(text, mod_path, is_bin):
    """Top-level modules a file refers to."""
    roots = ["dataplane"] if is_bin else ["crate"]
    out = set()
    # crate::x, dataplane::x, and groups crate::{x, y}
    for root in roots:
        for m in re.finditer(r"\b" + root + r"::(\w+|\{)", text):
            if m.group(1) == "{":
                j, depth = m.end(), 1
                while j < len(text) and depth:
                    depth += {"{": 1, "}": -1}.get(text[j], 0)
                    j += 1
                out.update(group_names(text[m.end() : j - 1]))
            else:
                out.add(m.group(1))
    # super::...::x where the supers climb to the crate root
    if not is_bin:
        for m in re.finditer(r"\b((?:super::)+)(\w+|\{)", text):
            ups = m.group(1).count("super::")
            if ups == len(mod_path) and m.group(2) != "{":
                out.add(m.group(2))
    return out


def graph(src):
    """{module: set(modules it refers to)} for the crate at `src`."""
    edges = {}
    for dirpath, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            mp = module_path(src, path)
            rel = os.path.relpath(path, src)
            is_bin = rel == "main.rs" or rel.startswith("cli" + os.sep)
            if is_bin:
                node = "cli"
            elif not mp:
                continue  # lib.rs: declarations only
            else:
                node = mp[0]
            text = strip_test_modules(strip_comments(open(path, encoding="utf-8").read()))
            refs = references(text, mp, is_bin)
            edges.setdefault(node, set()).update(r for r in refs if r != node)
    known = set(edges)
    return {k: {r for r in v if r in known} for k, v in edges.items()}


def cycles(edges):
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(edges.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def reach(edges, start):
    """Modules reachable from `start`, with one path to each."""
    seen, todo = {start: [start]}, [start]
    while todo:
        v = todo.pop()
        for w in sorted(edges.get(v, ())):
            if w not in seen:
                seen[w] = seen[v] + [w]
                todo.append(w)
    return seen


def check(edges):
    """The rules' violations, as sentences."""
    bad = []
    for comp in cycles(edges):
        bad.append("cycle between modules: " + " <-> ".join(comp))
    for hot in HOT:
        if hot not in edges:
            continue
        for target, path in sorted(reach(edges, hot).items()):
            if target in FORBIDDEN_FOR_HOT:
                bad.append(f"hot-path module {hot} reaches {target}: {' -> '.join(path)}")
    for leaf in LEAVES:
        if edges.get(leaf):
            bad.append(f"{leaf} must be a leaf but imports {', '.join(sorted(edges[leaf]))}")
    return bad


def render(edges):
    hot_reach = sorted(set().union(*(reach(edges, h).keys() for h in HOT if h in edges)))
    width = max(len(k) for k in edges)
    lines = ["module -> what it uses (use crate:: paths; tests left out)"]
    for k in sorted(edges):
        tag = " [hot]" if k in HOT else ""
        uses = ", ".join(sorted(edges[k])) or "(nothing: a leaf)"
        lines.append(f"  {k:<{width}} -> {uses}{tag}")
    lines.append("hot path (" + ", ".join(HOT) + ") reaches: " + ", ".join(hot_reach))
    return "\n".join(lines)


def doc_block(text):
    m = re.search(re.escape(BEGIN) + r"\n```\n(.*?)\n```\n" + re.escape(END), text, re.S)
    return m


def self_test():
    with tempfile.TemporaryDirectory() as d:
        def write(rel, body):
            p = os.path.join(d, rel)
            os.makedirs(os.path.dirname(p), exist_ok=True)
            open(p, "w").write(body)

        write("lib.rs", "pub mod a; pub mod b; pub mod packet; pub mod config; pub mod types;\n")
        write("a.rs", "use crate::b::X;\n// crate::config in a comment is not an edge\n")
        write("b/mod.rs", "use super::a::Y;\n")
        write("packet.rs", "use crate::{types, b};\n#[cfg(test)]\nmod tests { use crate::config; }\n")
        write("config.rs", "use crate::types::Mode;\n")
        write("types.rs", "")
        e = graph(d)
        assert e["a"] == {"b"}, e
        assert e["packet"] == {"types", "b"}, e
        bad = check(e)
        assert any("cycle" in b and "a <-> b" in b for b in bad), bad
        assert not any("config" in b for b in bad), "test modules and comments are not edges"
        write("b/mod.rs", "use super::a::Y;\nuse crate::config::Z;\n")
        bad = check(graph(d))
        assert any("packet reaches config: packet -> b -> config" in b for b in bad), bad
        write("types.rs", "use crate::config::Q;\n")
        assert any("types must be a leaf" in b for b in check(graph(d)))
    print("modgraph self-test: a cycle, a hot-path import (also through another module) and a non-leaf types are caught")


def main(argv):
    if argv[1:2] == ["--self-test"]:
        self_test()
        return 0
    doc, mode = None, None
    if argv[1:2] in (["--check"], ["--write"]):
        mode, doc, argv = argv[1], argv[2], argv[2:]
    here = os.path.dirname(os.path.abspath(__file__))
    src = argv[1] if len(argv) > 1 else os.path.join(here, "..", "dataplane", "src")
    edges = graph(src)
    text = render(edges)
    print(text)
    bad = check(edges)
    for b in bad:
        print("modgraph: " + b, file=sys.stderr)
    if doc:
        body = open(doc, encoding="utf-8").read()
        m = doc_block(body)
        if not m:
            print(f"modgraph: {doc} has no {BEGIN} ... {END} block", file=sys.stderr)
            return 1
        if mode == "--write":
            open(doc, "w", encoding="utf-8").write(body[: m.start(1)] + text + body[m.end(1) :])
        elif m.group(1) != text:
            print(f"modgraph: {doc}'s module graph is out of date: run scripts/modgraph.py --write {doc}", file=sys.stderr)
            return 1
    if bad:
        return 1
    print("no cycle; no hot-path module reaches " + ", ".join(FORBIDDEN_FOR_HOT) + "; types is a leaf")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
