#!/usr/bin/env python3
"""The house's size limits on dataplane/src, checked (make lint).

  - a source file holds at most 600 lines before its test module (the first line that is
    `#[cfg(test)]` at column 0, or the whole file where there is none);
  - a function (`fn` to its closing brace at the same indentation) is at most 100 lines,
    outside test modules.

Test-only code (files named below) is left out, each with its reason: one list, here.

  limits.py [SRC]          check; exit status 1 with each file or function over its limit
  limits.py --self-test    check that a long file and a long function are caught
"""
import os
import re
import sys
import tempfile

MAX_FILE = 600
MAX_FN = 100

# Paths relative to SRC, with why the limits do not hold there.
EXCEPTIONS = {
    "port/emulated.rs": "test code: the emulated zero-copy port behind the testkit feature, "
                        "rings and faults for the unit tests and the benchmark",
    "port/emulated_counters.rs": "test code: the emulated port's faults and counters",
    "poller/emulated.rs": "test code: the poller over the emulated port; its tests are most of it",
    "testkit/": "test code: inputs and oracles for benchmarks, integration tests and fuzzing",
    "fib/loom_tests.rs": "test code: the loom models",
    "fib/churn.rs": "test code: the churn oracle",
    "fib/tests.rs": "test code",
    "packet/tests.rs": "test code",
    "config/tests.rs": "test code",
    "rebalance/tests.rs": "test code",
    "rebalance/sim.rs": "test code: the simulated NIC the balancer's tests drive",
}

FN = re.compile(r"^(\s*)(?:pub(?:\([^)]*\))?\s+)?(?:const\s+)?(?:unsafe\s+)?(?:extern\s+\"C\"\s+)?fn\s+(\w+)")


def excepted(rel):
    return any(rel == e or (e.endswith("/") and rel.startswith(e)) for e in EXCEPTIONS)


def code_lines(lines):
    """The lines before the file's test module."""
    for i, line in enumerate(lines):
        if line.startswith("#[cfg(test)]"):
            return lines[:i]
    return lines


def long_functions(lines):
    """(name, first line number, length) of each function over MAX_FN lines: from its `fn`
    line to the first line after it that closes at its indentation."""
    out = []
    for i, line in enumerate(lines):
        m = FN.match(line)
        if not m or line.rstrip().endswith(";"):
            continue
        indent = m.group(1)
        close = indent + "}"
        for j in range(i + 1, len(lines)):
            if lines[j].rstrip() == close:
                if j - i + 1 > MAX_FN:
                    out.append((m.group(2), i + 1, j - i + 1))
                break
    return out


def check(src):
    problems = []
    for root, _, files in os.walk(src):
        for f in sorted(files):
            if not f.endswith(".rs"):
                continue
            path = os.path.join(root, f)
            rel = os.path.relpath(path, src)
            if excepted(rel):
                continue
            lines = code_lines(open(path).read().split("\n"))
            if len(lines) > MAX_FILE:
                problems.append(f"{rel}: {len(lines)} lines before its tests (at most {MAX_FILE})")
            for name, at, n in long_functions(lines):
                problems.append(f"{rel}:{at}: fn {name} is {n} lines (at most {MAX_FN})")
    return problems


def self_test():
    with tempfile.TemporaryDirectory() as d:
        body = "\n".join(f"    let x{i} = {i};" for i in range(MAX_FN))
        open(os.path.join(d, "long_fn.rs"), "w").write(f"fn long() {{\n{body}\n}}\n")
        open(os.path.join(d, "long_file.rs"), "w").write(
            "// x\n" * (MAX_FILE + 1) + "#[cfg(test)]\nmod tests {}\n")
        open(os.path.join(d, "fine.rs"), "w").write(
            "fn short() {\n    let y = 1;\n}\n#[cfg(test)]\nmod tests {\n" + "// t\n" * 2000 + "}\n")
        got = check(d)
        assert any("long_fn.rs:1: fn long" in p for p in got), got
        assert any("long_file.rs: 601 lines" in p for p in got), got
        assert not any("fine.rs" in p for p in got), got
    print("limits: self-test passed")


def main():
    if sys.argv[1:] == ["--self-test"]:
        return self_test()
    src = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "..", "dataplane", "src")
    problems = check(src)
    for p in problems:
        print(f"limits: {p}", file=sys.stderr)
    if problems:
        sys.exit(1)
    print(f"limits: every file under {MAX_FILE} lines before its tests, every function under {MAX_FN}")


if __name__ == "__main__":
    main()
