#!/usr/bin/env python3
"""Instructions per packet, counted with callgrind: the poller's cells beside DPDK's.

Instruction counts do not move with the machine's speed or load (two VMs of one kind differ
by up to 2.5x in time on the same code, not in instructions), so they are the figure for a
claim about the per-packet path and the one a CI guard can hold without flaking.

  instr.py [--out DIR]              every cell, the peers, ratios; DIR/instr.json (make instr)
  instr.py --guard BASELINE         bounce and l3fwd only, failing when either count rises
                                    more than 3% above BASELINE (make test)
  instr.py --write-baseline FILE    bounce and l3fwd only, written to FILE with the commit,
                                    the toolchain and the command: raising the baseline is a
                                    commit of its own that says why

What is counted:
  - ring-bench cells (the whole poller over in-memory rings, `--packets 200000` per port:
    400,000 packets received), `--toggle-collect='*MemPoller*run*'`: the loop alone. The
    emulated port's share is what callgrind attributes to `port/emulated.rs` (its functions,
    whatever file their inlined lines come from, and its lines inlined into the poller's),
    and the share of a libc function (`memcpy` of a frame over 64 bytes) its calls made;
    the rest is the poller's own. Tagged cells (`--vlan 1|2`) beside the untagged ones.
  - testpmd `io` and `macswap` on two net_null vdevs, one forwarding lcore, burst 32: that
    lcore's thread (`--separate-threads=yes`), runs of 10 s and 25 s, the difference of its
    instructions over the difference of its RX-packets. Its count includes its PMD (mbuf
    allocation and free).
  - the L3 work alone, 100,000 prefixes with a BGP-like length mix, 1M 64-byte frames, bursts
    of 64: `l3-anchor` (bench/c/l3_anchor.c, C against libdpdk: rte_lpm and rte_fib, RFC 1812
    checks, the header checksum verified in software, TTL and checksum, MACs; its passes
    alone counted), 1 and 3 passes, the difference over the packets; fwd-micro's forwarding
    pass alone, one pass over the frames: `--path now` (`route_pass`: `Forwarder::route_now`,
    the one-pass path the poller takes for IPv4, counted against the anchor) and `--path
    general` (`forward_pass`: `prepare`, `walk`, `finish`, the path of every other frame).
"""
import argparse
import datetime
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RELEASE = os.path.join(ROOT, "target", "release")
PACKETS_PER_PORT = 200_000
RECEIVED = 2 * PACKETS_PER_PORT
GUARD_PCT = 3.0

# (name, ring-bench cell, IPv4 routes, IPv6 routes[, tags]). Cells are ring-bench's order:
# 0 bounce, 1 l2fwd, then l3fwd at 1, 1k, 1M flows x (IPv4, IPv4+IPv6, IPv6), burst 32; 22
# and 23 the 1500-byte and 9000-byte (a chain of six buffers) IPv4 cells. Tags: `--vlan`,
# every frame in on a sub-interface and out of one (1: 802.1Q, 2: QinQ).
CELLS = [
    ("bounce", 0, 1000, 1000),
    ("l2fwd", 1, 1000, 1000),
    ("l3fwd v4 1 flow", 2, 1000, 1000),
    ("l3fwd v4 1 flow, 1M routes", 2, 1_000_000, 1000),
    ("l3fwd v4 1k flows", 5, 1000, 1000),
    ("l3fwd v4 1M flows, 1M routes", 8, 1_000_000, 1000),
    ("l3fwd v4+v6 1 flow", 3, 1000, 1000),
    ("l3fwd v6 1 flow", 4, 1000, 1000),
    ("l3fwd v4+v6 1M flows", 9, 1_000_000, 200_000),
    ("l3fwd v6 1M flows, 200k routes", 10, 1000, 200_000),
    ("l3fwd v4 1500 bytes", 22, 1000, 1000),
    ("l3fwd v4 9000 bytes (6-buffer chains)", 23, 1000, 1000),
    ("l3fwd v4 1 flow, 802.1Q", 2, 1000, 1000, 1),
    ("l3fwd v4 1 flow, QinQ", 2, 1000, 1000, 2),
    ("l3fwd v6 1 flow, 802.1Q", 4, 1000, 1000, 1),
    ("l3fwd v6 1 flow, QinQ", 4, 1000, 1000, 2),
]
GUARDED = ["bounce", "l3fwd v4 1 flow"]

EMULATED = re.compile(r"port/emulated|port::emulated")


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def sh(cmd, **kw):
    return subprocess.run(cmd, check=True, **kw)


def git_commit():
    r = subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                       capture_output=True, text=True)
    dirty = subprocess.run(["git", "-C", ROOT, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return r.stdout.strip() + ("+changes" if dirty else "")


def rustc_version():
    return subprocess.run(["rustc", "--version"], capture_output=True, text=True).stdout.strip()


def build_rust():
    sh(["cargo", "build", "--release", "-q", "-p", "dataplane-bench",
        "--bin", "ring-bench", "--bin", "fwd-micro"], cwd=ROOT)


def annotate(path):
    """[(instructions, 'file:function')] from a callgrind output, self cost, every entry. A
    function outside the project (libc's `memcpy`, say) is split among its callers: the
    share its emulated-port callers made is listed under the port's name, so it counts as
    the port's (the port copies frames over 64 bytes with `memcpy`)."""
    rows = annotate_flat(path)
    port_share = libc_port_shares(path)
    out = []
    for n, what in rows:
        share = port_share.get(what, 0.0)
        if share > 0.0:
            out.append((round(n * share), f"port/emulated (called): {what}"))
            n -= round(n * share)
        out.append((n, what))
    return out


def libc_port_shares(path):
    """{'file:function': share} for functions outside the project whose callers include
    the emulated port: the share of their calls' cost the port's callers made."""
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", "--tree=caller",
                          "--inclusive=no", path], capture_output=True, text=True, check=True).stdout
    shares, callers = {}, []
    for line in out.splitlines():
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?([<*])\s+(\S.*)$", line)
        if not m:
            if not line.strip():
                callers = []
            continue
        n, kind, what = int(m.group(1).replace(",", "")), m.group(2), m.group(3)
        if kind == "<":
            callers.append((n, what))
            continue
        what = re.sub(r" \(\d+x\)$", "", what)
        outside = not what.startswith(("dataplane/", "bench/", "/rustc/", "/root/.cargo/"))
        total = sum(c for c, _ in callers)
        if outside and total > 0:
            port = sum(c for c, w in callers if EMULATED.search(w))
            if port > 0:
                shares[what] = port / total
        callers = []
    return shares


def annotate_flat(path):
    """[(instructions, 'file:function')] from a callgrind output, self cost, every entry."""
    out = subprocess.run(["callgrind_annotate", "--auto=no", "--threshold=100", path],
                         capture_output=True, text=True, check=True).stdout
    rows, on = [], False
    for line in out.splitlines():
        if "file:function" in line:
            on = True
            continue
        m = re.match(r"\s*([\d,]+)\s+(?:\([^)]*\)\s+)?(\S.*)$", line)
        if on and m:
            rows.append((int(m.group(1).replace(",", "")), m.group(2)))
    return rows


def ring_cell(cell, v4, v6, tmp, tags=0):
    """(total, emulated port) instructions per packet of one ring-bench cell's loop."""
    out = os.path.join(tmp, f"ring-{cell}-{v4}-{v6}-{tags}.out")
    cmd = ["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}",
           "--toggle-collect=*MemPoller*run*", os.path.join(RELEASE, "ring-bench"),
           "--cell", str(cell), "--packets", str(PACKETS_PER_PORT), "--testpmd", "0",
           "--v4", str(v4), "--v6", str(v6)] + (["--vlan", str(tags)] if tags else [])
    sh(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    rows = annotate(out)
    total = sum(n for n, _ in rows)
    port = sum(n for n, what in rows if EMULATED.search(what))
    return total / RECEIVED, port / RECEIVED


def testpmd_thread(mode, seconds, tmp):
    """(forwarding lcore's instructions, RX packets) of one testpmd run of `seconds`."""
    prefix = os.path.join(tmp, f"testpmd-{mode}-{seconds}")
    # testpmd's stdout is a pipe here: line-buffered (stdbuf), or its prompt stays unread.
    cmd = ["stdbuf", "-oL", "valgrind", "--tool=callgrind", "--separate-threads=yes",
           f"--callgrind-out-file={prefix}.%p", "dpdk-testpmd", "--no-huge", "-m", "1024",
           "--no-pci", "-l", "0,1", "--vdev", "net_null0", "--vdev", "net_null1",
           "--log-level", "lib.*:error", "--", f"--forward-mode={mode}", "--nb-cores=1",
           "--burst=32", "--total-num-mbufs=8192", "--rxd=512", "--txd=512"]
    # testpmd forwards until a line on stdin (or SIGINT); stdin stays open until then.
    p = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 120
    started = False
    buf = b""
    fd = p.stdout.fileno()
    os.set_blocking(fd, False)
    while time.monotonic() < deadline and p.poll() is None:
        try:
            buf += os.read(fd, 1 << 16)
        except BlockingIOError:
            pass
        if b"Press enter to exit" in buf:
            started = True
            break
        time.sleep(0.2)
    if not started:
        p.kill()
        raise RuntimeError(f"testpmd {mode} did not start forwarding: {buf[-2000:].decode(errors='replace')}")
    time.sleep(seconds)
    p.send_signal(signal.SIGINT)
    os.set_blocking(fd, True)
    rest, _ = p.communicate(timeout=300)
    buf = (buf + (rest or b"")).decode(errors="replace")
    m = re.search(r"Accumulated forward statistics.*?RX-packets:\s*(\d+)", buf, re.S)
    if not m:
        raise RuntimeError(f"testpmd {mode}: no forward statistics: {buf[-2000:]}")
    rx = int(m.group(1))
    counts = []
    for f in os.listdir(tmp):
        path = os.path.join(tmp, f)
        if f.startswith(os.path.basename(prefix) + ".") and "-" in f.rsplit(".", 1)[-1]:
            with open(path) as fh:
                for line in fh:
                    if line.startswith("totals:") or line.startswith("summary:"):
                        counts.append(int(line.split()[1]))
                        break
    if not counts:
        raise RuntimeError(f"testpmd {mode}: no per-thread callgrind output")
    return max(counts), rx


def testpmd(mode, tmp):
    """testpmd's instructions per packet in `mode`, the lcore's, from two runs' difference.

    Under valgrind a run forwards for as long as its SIGINT takes to arrive, which varies
    by many seconds on a loaded machine: the runs are ordered by the packets they forwarded,
    not by their timers. What a run spends once (start-up, stop) is the same in both and
    cancels; the difference must be wide enough to stand for the loop alone."""
    runs = sorted([testpmd_thread(mode, 10, tmp), testpmd_thread(mode, 25, tmp)],
                  key=lambda r: r[1])
    (i1, p1), (i2, p2) = runs
    if p2 <= p1 or p2 < p1 * 1.2 or i2 <= i1:
        raise RuntimeError(f"testpmd {mode}: the two runs forwarded too nearly the same "
                           f"({p1} and {p2} packets, {i1} and {i2} instructions); "
                           "run make instr again on an idle machine")
    return (i2 - i1) / (p2 - p1)


def whole_program(cmd, tmp, name, extra=()):
    out = os.path.join(tmp, name + ".out")
    r = subprocess.run(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", *extra,
                        *cmd], capture_output=True, text=True, check=True)
    m = re.search(r"Collected\s*:\s*(\d+)", r.stderr)
    if not m:
        raise RuntimeError(f"{name}: no callgrind total: {r.stderr[-1000:]}")
    return int(m.group(1)), r.stdout


def build_anchor():
    exe = os.path.join(ROOT, "target", "instr", "l3-anchor")
    os.makedirs(os.path.dirname(exe), exist_ok=True)
    flags = subprocess.run(["pkg-config", "--cflags", "--libs", "libdpdk"],
                           capture_output=True, text=True, check=True).stdout.split()
    sh(["cc", "-O3", "-Wall", "-Wextra", "-Werror", os.path.join(ROOT, "bench", "c", "l3_anchor.c"),
        *flags, "-o", exe])
    return exe


def anchor(exe, table, tmp, frames=1 << 20):
    runs = []
    for passes in (1, 3):
        n, _ = whole_program([exe, "--prefixes", "100000", "--passes", str(passes), "--table", table],
                             tmp, f"anchor-{table}-{passes}", ["--instr-atstart=no"])
        runs.append(n)
    return (runs[1] - runs[0]) / (2 * frames)


def fwd_micro(tmp, frames=1 << 20, path="now"):
    """fwd-micro's forwarding pass alone, one pass over `frames`: `route_pass` (path "now",
    the one-pass IPv4 path the poller takes) or `forward_pass` ("general": prepare, walk,
    finish). Its resets of the frames between passes and its checksum-only pass are not
    counted."""
    fn = "route_pass" if path == "now" else "forward_pass"
    n, _ = whole_program([os.path.join(RELEASE, "fwd-micro"), "--prefixes", "100000",
                          "--passes", "1", "--frames", str(frames), "--path", path], tmp,
                         f"fwd-micro-{path}", [f"--toggle-collect=*{fn}*"])
    return n / frames


def count_cells(names, tmp):
    out = {}
    for name, cell, v4, v6, *tags in CELLS:
        if name not in names:
            continue
        t = time.monotonic()
        tags = tags[0] if tags else 0
        total, port = ring_cell(cell, v4, v6, tmp, tags)
        out[name] = {"cell": cell, "v4_routes": v4, "v6_routes": v6, "total": round(total, 1),
                     "port": round(port, 1), "own": round(total - port, 1)}
        if tags:
            out[name]["vlan"] = tags
        log(f"instr: {name}: {total:.1f} per packet ({total - port:.1f} the poller's own, "
            f"{port:.1f} the emulated port's) [{time.monotonic() - t:.0f} s]")
    return out


def guard_command():
    return "python3 scripts/instr.py --write-baseline bench/instr-baseline.json"


def guard(baseline_path, tmp):
    with open(baseline_path) as f:
        base = json.load(f)
    build_rust()
    now = count_cells(GUARDED, tmp)
    failed = []
    for name in GUARDED:
        for key in ("own", "total"):
            was, is_ = base["cells"][name][key], now[name][key]
            rise = 100.0 * (is_ - was) / was
            line = f"instr guard: {name} {key}: {is_:.1f} per packet, baseline {was:.1f} ({rise:+.1f}%)"
            print(line)
            if rise > GUARD_PCT:
                failed.append(line)
    if failed:
        rustc = rustc_version()
        why = "" if rustc == base.get("rustc") else \
            f" (the baseline was counted with {base.get('rustc')}, this with {rustc})"
        print(f"instr guard: FAILED: more than {GUARD_PCT}% above {baseline_path} "
              f"(commit {base.get('commit')}){why}. A change that must cost more raises the "
              f"baseline in a commit of its own that says why: {guard_command()}")
        return 1
    print(f"instr guard: within {GUARD_PCT}% of {baseline_path} (commit {base.get('commit')})")
    return 0


def write_baseline(path, tmp):
    build_rust()
    cells = count_cells(GUARDED, tmp)
    doc = {"commit": git_commit(), "rustc": rustc_version(),
           "date": datetime.date.today().isoformat(), "command": guard_command(),
           "method": "callgrind --toggle-collect='*MemPoller*run*' ring-bench --cell K "
                     f"--packets {PACKETS_PER_PORT} --testpmd 0 --v4 1000 --v6 1000, over "
                     f"{RECEIVED} packets received",
           "cells": cells}
    with open(path, "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"instr: baseline written to {path}")
    return 0


def full(out_dir, tmp):
    build_rust()
    exe = build_anchor()
    cells = count_cells([c[0] for c in CELLS], tmp)
    log("instr: testpmd io and macswap (two runs each, 10 s and 25 s)")
    io, macswap = testpmd("io", tmp), testpmd("macswap", tmp)
    log(f"instr: testpmd io {io:.1f}, macswap {macswap:.1f}")
    lpm, fib = anchor(exe, "lpm", tmp), anchor(exe, "fib", tmp)
    micro, micro_general = fwd_micro(tmp), fwd_micro(tmp, path="general")
    log(f"instr: L3 anchor rte_lpm {lpm:.1f}, rte_fib {fib:.1f}; fwd-micro {micro:.1f} "
        f"(general path {micro_general:.1f})")
    l3_dpdk = io + lpm
    goals = [
        ("bounce own <= testpmd io", cells["bounce"]["own"], io),
        ("l2fwd own <= testpmd macswap", cells["l2fwd"]["own"], macswap),
        ("l3fwd v4 1 flow own <= testpmd io + L3 anchor (lpm)", cells["l3fwd v4 1 flow"]["own"], l3_dpdk),
        ("l3fwd v4 1M flows own <= testpmd io + L3 anchor (lpm)",
         cells["l3fwd v4 1M flows, 1M routes"]["own"], l3_dpdk),
        ("fwd-micro (one-pass path) <= L3 anchor (lpm)", micro, lpm),
        ("l3fwd v6 1 flow own <= 1.3 x v4", cells["l3fwd v6 1 flow"]["own"],
         1.3 * cells["l3fwd v4 1 flow"]["own"]),
        ("l3fwd v4+v6 1 flow own <= 1.3 x v4", cells["l3fwd v4+v6 1 flow"]["own"],
         1.3 * cells["l3fwd v4 1 flow"]["own"]),
    ] + [
        (f"{tagged} own <= 1.05 x untagged (issue 51's aim)", cells[tagged]["own"],
         1.05 * cells[untagged]["own"])
        for tagged, untagged in [("l3fwd v4 1 flow, 802.1Q", "l3fwd v4 1 flow"),
                                 ("l3fwd v4 1 flow, QinQ", "l3fwd v4 1 flow"),
                                 ("l3fwd v6 1 flow, 802.1Q", "l3fwd v6 1 flow"),
                                 ("l3fwd v6 1 flow, QinQ", "l3fwd v6 1 flow")]
    ]
    doc = {"commit": git_commit(), "rustc": rustc_version(),
           "date": datetime.date.today().isoformat(), "cells": cells,
           "dpdk": {"testpmd_io": round(io, 1), "testpmd_macswap": round(macswap, 1),
                    "l3_anchor_lpm": round(lpm, 1), "l3_anchor_fib": round(fib, 1)},
           "fwd_micro": round(micro, 1), "fwd_micro_general": round(micro_general, 1),
           "goals": [{"goal": g, "ours": round(a, 1), "bound": round(b, 1),
                      "ratio": round(a / b, 2), "met": a <= b} for g, a, b in goals]}
    os.makedirs(out_dir, exist_ok=True)
    with open(os.path.join(out_dir, "instr.json"), "w") as f:
        json.dump(doc, f, indent=2)
        f.write("\n")
    print(f"Instructions per packet ({doc['commit']}, {doc['rustc']}), callgrind:\n")
    print("| cell | whole loop | the poller's own | the emulated port's |")
    print("|---|---|---|---|")
    for name, c in cells.items():
        print(f"| {name} | {c['total']} | {c['own']} | {c['port']} |")
    print("\n| DPDK 22.11 | instructions per packet |\n|---|---|")
    print(f"| testpmd io (its PMD included) | {io:.1f} |")
    print(f"| testpmd macswap | {macswap:.1f} |")
    print(f"| L3 anchor, rte_lpm | {lpm:.1f} |")
    print(f"| L3 anchor, rte_fib | {fib:.1f} |")
    print(f"| (ours) fwd-micro, the same L3 work (`route_now`, the one-pass path) | {micro:.1f} |")
    print(f"| (ours) fwd-micro, the general path (`prepare`, `finish`) | {micro_general:.1f} |")
    print("\n| goal | ours | bound | ratio | met |\n|---|---|---|---|---|")
    for g in doc["goals"]:
        print(f"| {g['goal']} | {g['ours']} | {g['bound']} | {g['ratio']} | {'yes' if g['met'] else 'no'} |")
    print(f"\n{os.path.join(out_dir, 'instr.json')}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "out", "instr"))
    ap.add_argument("--guard", metavar="BASELINE")
    ap.add_argument("--write-baseline", metavar="FILE")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="instr-") as tmp:
        if a.guard:
            return guard(a.guard, tmp)
        if a.write_baseline:
            return write_baseline(a.write_baseline, tmp)
        return full(a.out, tmp)


if __name__ == "__main__":
    sys.exit(main())
