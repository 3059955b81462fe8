#!/usr/bin/env python3
"""The dataplane crate's module graph, drawn from its `use` paths, and the layering rules.

Nodes are the top-level modules of dataplane/src (the binary's main.rs and cli/ together are
`cli`). An edge A -> B means some file of A names `crate::B` (or `dataplane::B` in the binary,
or `super::B` where `super` is the crate root). Test modules (`#[cfg(test)] mod ... { }`) and
comments are left out: tests may reach up, the code may not.

Files of modules declared under a `#[cfg(...)]` that names `test` (`#[cfg(test)]`,
`#[cfg(any(test, feature = "testkit"))]`, ...) are test code and left out too: the testkit, the
emulated port and the poller over it, the loom models.

Rules (exit status 1 when one is broken, with what broke it):
  - no cycle between top-level modules, nor between the files (or directories) of one
    top-level module;
  - no hot-path module (packet, fib, forward, poller, port) reaches, directly or through
    others, config, cli, lab, runtime, control or telemetry code;
  - `config` is plain values: it reaches none of the table, the per-packet path or the threads
    (fib, forward, poller, port, control, runtime);
  - no code outside tests names the emulated port (`port::emulated`);
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

HOT = ["packet", "fib", "forward", "poller", "port"]
FORBIDDEN_FOR_HOT = ["config", "cli", "lab", "runtime", "control", "telemetry"]
FORBIDDEN_FOR_CONFIG = ["fib", "forward", "poller", "port", "control", "runtime"]
TEST_ONLY = re.compile(r"\bport::emulated\b")
CFG_TEST_MOD = re.compile(r"#\[cfg\(([^\]]*)\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
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


def test_only_dirs(src):
    """Paths (a file, or a directory and all under it) of modules declared under a cfg that
    names `test`: test code, like `#[cfg(test)] mod tests { }`."""
    out = []
    for dirpath, _, files in os.walk(src):
        for f in files:
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            text = strip_comments(open(path, encoding="utf-8").read())
            base = dirpath if f in ("mod.rs", "lib.rs", "main.rs") else path[: -len(".rs")]
            for m in CFG_TEST_MOD.finditer(text):
                if re.search(r"\btest\b", m.group(1)):
                    out.append(os.path.join(base, m.group(2)))
    return out


def is_test_file(path, test_only):
    stem = path[: -len("/mod.rs")] if path.endswith(os.sep + "mod.rs") else path[: -len(".rs")]
    return any(stem == t or stem.startswith(t + os.sep) for t in test_only)


def sources(src):
    """(path, module path, is_bin, text without comments and test code) of every file."""
    test_only = test_only_dirs(src)
    for dirpath, _, files in sorted(os.walk(src)):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(dirpath, f)
            if is_test_file(path, test_only):
                continue
            rel = os.path.relpath(path, src)
            is_bin = rel == "main.rs" or rel.startswith("cli" + os.sep)
            text = strip_test_modules(strip_comments(open(path, encoding="utf-8").read()))
            yield path, module_path(src, path), is_bin, text


def graph(src):
    """{module: set(modules it refers to)} for the crate at `src`."""
    edges = {}
    for _, mp, is_bin, text in sources(src):
        if is_bin:
            node = "cli"
        elif not mp:
            continue  # lib.rs: declarations only
        else:
            node = mp[0]
        refs = references(text, mp, is_bin)
        edges.setdefault(node, set()).update(r for r in refs if r != node)
    known = set(edges)
    return {k: {r for r in v if r in known} for k, v in edges.items()}


def sibling_graphs(src):
    """{top-level module: {child: set(sibling children it refers to)}}: the files and
    directories of one top-level module, drawn from `crate::top::child` and `super::` paths."""
    out = {}
    for _, mp, is_bin, text in sources(src):
        if is_bin or len(mp) < 2:
            continue
        top, child = mp[0], mp[1]
        refs = set()
        for m in re.finditer(r"\bcrate::" + top + r"::(\w+)", text):
            refs.add(m.group(1))
        for m in re.finditer(r"\b((?:super::)+)(\w+)", text):
            target = mp[: len(mp) - m.group(1).count("super::")] + [m.group(2)]
            if len(target) >= 2 and target[0] == top:
                refs.add(target[1])
        out.setdefault(top, {}).setdefault(child, set()).update(r for r in refs if r != child)
    for top, g in out.items():
        known = set(g)
        out[top] = {k: {r for r in v if r in known} for k, v in g.items()}
    return out


def test_only_refs(src):
    """Files outside tests that name the emulated port."""
    return sorted(
        os.path.relpath(path, src) for path, _, _, text in sources(src) if TEST_ONLY.search(text)
    )


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


def check(edges, siblings=None, emulated_refs=()):
    """The rules' violations, as sentences."""
    bad = []
    for comp in cycles(edges):
        bad.append("cycle between modules: " + " <-> ".join(comp))
    for top, g in sorted((siblings or {}).items()):
        for comp in cycles(g):
            bad.append(f"cycle between the files of {top}: " + " <-> ".join(comp))
    for target, path in sorted(reach(edges, "config").items()) if "config" in edges else []:
        if target in FORBIDDEN_FOR_CONFIG:
            bad.append(f"config reaches {target}: {' -> '.join(path)}")
    for f in emulated_refs:
        bad.append(f"{f} names the emulated port outside tests")
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
        write("types.rs", "")
        write("b/mod.rs", "pub mod x; pub mod y;\n#[cfg(any(test, feature = \"testkit\"))]\npub mod t;\n")
        write("b/x.rs", "use super::y::Y;\n")
        write("b/y.rs", "use crate::b::x::X;\n")
        write("b/t.rs", "use crate::config::Z;\nuse crate::port::emulated::Q;\n")
        sib = sibling_graphs(d)
        assert any("cycle between the files of b: x <-> y" in x for x in check(graph(d), sib)), sib
        assert "config" not in graph(d)["b"], "a module under cfg(test/testkit) is test code"
        assert not test_only_refs(d), "the emulated port named from test code is fine"
        write("b/y.rs", "use crate::port::emulated::Q;\n")
        assert test_only_refs(d) == [os.path.join("b", "y.rs")], test_only_refs(d)
        write("config.rs", "use crate::a::X;\n")
        write("a.rs", "use crate::packet::P;\n")
        assert not any("config reaches" in x for x in check(graph(d)))
        write("a.rs", "use crate::fib::P;\n")
        write("fib.rs", "")
        assert any("config reaches fib: config -> a -> fib" in x for x in check(graph(d))), check(graph(d))
    print("modgraph self-test: a cycle (between modules and between one module's files), a hot-path import (also through another module), config reaching the table, the emulated port named outside tests and a non-leaf types are caught; test-only modules are left out")


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
    bad = check(edges, sibling_graphs(src), test_only_refs(src))
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
    print(
        "no cycle between modules or between one module's files; no hot-path module reaches "
        + ", ".join(FORBIDDEN_FOR_HOT)
        + "; config reaches none of "
        + ", ".join(FORBIDDEN_FOR_CONFIG)
        + "; the emulated port only in tests; types is a leaf"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
