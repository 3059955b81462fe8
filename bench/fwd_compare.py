#!/usr/bin/env python3
"""Forwarding rate and DUT CPU cost per packet, side by side, on one netns testbed.

DUTs: dataplane l3fwd, dataplane bounce (AF_XDP floor), dataplane l2fwd, dataplane drop,
and Linux kernel IP forwarding (the DUT namespace with ip_forward=1). For each DUT and each
repeat: gen (XDP live frames, pinned to --gen-cpu) -> DUT (pollers and the DUT interfaces'
threaded-NAPI kthreads; see --dp-napi-cpu) -> sink (XDP counter; its NAPI kthread on the gen
CPU at SCHED_FIFO, so the sink keeps up and its work is not charged to the DUT).

DUT CPU ns per forwarded packet = CPU time (schedstat) of the DUT's threads -- its pollers plus
the NAPI kthreads of its two interfaces -- over the measured window, divided by the packets the
sink counted in that window. Setup (testbed, attach, pinning) happens before the window; the
window opens when the sink takes its baseline, after a warm-up. Each figure is the median of
--reps runs with min-max. The DUT's egress interface tx counter cross-checks the sink count.

Usage: bench/fwd_compare.py [--reps 3] [--window 5] [--duts l3fwd,bounce,kernel] [--json OUT]
Needs root; leaves no namespace behind.
"""
import argparse
import glob
import json
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def sh(*args, check=True, capture=True):
    r = subprocess.run(list(args), capture_output=capture, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def nsx(ns, *args, **kw):
    return sh("ip", "netns", "exec", ns, *args, **kw)


def threads_named(prefix):
    """TIDs of kernel threads whose comm starts with prefix."""
    out = []
    for comm in glob.glob("/proc/[0-9]*/comm"):
        try:
            with open(comm) as f:
                if f.read().strip().startswith(prefix):
                    out.append(int(comm.split("/")[2]))
        except OSError:
            pass
    return out


def cpu_ns(tids):
    """Sum of on-CPU time (ns) of the given (pid, tid) pairs."""
    total = 0
    for pid, tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total


def task_ids(pid):
    return [(pid, int(t)) for t in os.listdir(f"/proc/{pid}/task")]


def read_counter(ns, dev, name):
    return int(nsx(ns, "cat", f"/sys/class/net/{dev}/statistics/{name}").strip())


def enable_threaded_napi(ns, dev, cpu, fifo=False):
    """GRO on gives a veth its NAPI instances; threaded NAPI turns them into kthreads we pin
    (cpu None: all CPUs) and, for the sink, run SCHED_FIFO so the flat-out generator on that
    CPU cannot starve it."""
    nsx(ns, "ethtool", "-K", dev, "gro", "on")
    nsx(ns, "sh", "-c", f"echo 1 > /sys/class/net/{dev}/threaded")
    tids = []
    deadline = time.time() + 3
    while not tids and time.time() < deadline:
        tids = threads_named(f"napi/{dev}-")
        time.sleep(0.05)
    for t in tids:
        sh("taskset", "-pc", str(cpu) if cpu is not None else f"0-{os.cpu_count() - 1}", str(t))
        if fifo:
            sh("chrt", "-f", "-p", "50", str(t))
    return tids


def median_range(xs):
    xs = [x for x in xs if x is not None]
    if not xs:
        return None, None, None
    return statistics.median(xs), min(xs), max(xs)


DATAPLANE_MODES = ("l3fwd", "l2fwd", "bounce", "drop")


def layout_cpus(args, layout):
    """(poller layout args, NAPI cpu or None for unpinned) of a dataplane layout on the testbed,
    where the interrupt CPU is the CPU the DUT's NAPI kthreads run on."""
    if layout == "irq-core":
        return ["--layout", "irq-core", "--irq-cpu", str(args.dut_cpu)], args.dut_cpu
    if layout == "same-package":
        return ["--layout", "same-package", "--irq-cpu", str(args.dp_napi_cpu)], args.dp_napi_cpu
    if layout == "unpinned":
        return ["--layout", "unpinned"], None
    raise SystemExit(f"layout {layout}: this bench knows irq-core, same-package, unpinned")


def one_rep(args, bed, dut, rep, layout):
    p = bed
    gen_ns, dut_ns, sink_ns = f"{p}-gen", f"{p}-dut", f"{p}-sink"
    d0, d1, s0, g0 = f"{p}-d0", f"{p}-d1", f"{p}-s0", f"{p}-g0"
    dp = None
    tids = []
    if dut == "kernel":
        nsx(dut_ns, "sysctl", "-qw", "net.ipv4.ip_forward=1")
        nsx(dut_ns, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1")
    else:
        layout_args, napi_cpu = layout_cpus(args, layout)
        cfg = sh(args.bin, "testbed", "config", "--prefix", p, "--mode", dut, "--cpus", str(args.dut_cpu),
                 "--batch", str(args.batch))
        if args.tx_kick_budget is not None:
            cfg = cfg.replace("[dataplane]\n", f"[dataplane]\ntx_kick_budget = {args.tx_kick_budget}\n", 1)
        cfg_path = f"/tmp/{p}-{dut}.toml"
        with open(cfg_path, "w") as f:
            f.write(cfg)
        dp = subprocess.Popen(["ip", "netns", "exec", dut_ns, args.bin, "run", "--config", cfg_path,
                               "--interval", "0", "--json", f"/tmp/{p}-{dut}-{rep}.json"] + layout_args,
                              stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
        while True:
            line = dp.stderr.readline()
            if not line:
                raise RuntimeError(f"dataplane {dut} exited before attaching")
            if line.startswith("attached"):
                break
        tids += task_ids(dp.pid)
    # The DUT interfaces' receive work (NAPI) is part of the DUT's cost wherever it runs. The
    # kernel forwards inside NAPI, so its NAPI gets the DUT CPU; the dataplane's NAPI (XDP +
    # copy into the UMEM) runs on --dp-napi-cpu, by default the generator's ("same-package":
    # poller and interrupt work on different CPUs, the layout the seeds found best).
    if dut == "kernel":
        napi_cpu = args.dut_cpu
    napi = []
    for dev in (d0, d1):
        napi += [(t, t) for t in enable_threaded_napi(dut_ns, dev, napi_cpu)]
    tids += napi
    total = args.warmup + args.window
    sink = subprocess.Popen(["ip", "netns", "exec", sink_ns, args.bin, "sink", "--iface", s0,
                             "--duration", str(total), "--skip", str(args.warmup), "--json",
                             f"/tmp/{p}-sink.json"], stderr=subprocess.PIPE, stdout=subprocess.DEVNULL,
                            text=True)
    time.sleep(0.3)
    enable_threaded_napi(sink_ns, s0, args.gen_cpu, fifo=True)
    gen = subprocess.Popen(["ip", "netns", "exec", gen_ns, args.bin, "gen", "--iface", g0, "--size",
                            str(args.size), "--flows", str(args.flows), "--cpu", str(args.gen_cpu),
                            "--duration", str(total + 1), "--json", f"/tmp/{p}-gen.json"],
                           stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    while True:
        line = sink.stderr.readline()
        if not line:
            raise RuntimeError("sink exited before its window opened")
        if "window open" in line:
            break
    cpu0, napi0, tx0, t0 = cpu_ns(tids), cpu_ns(napi), read_counter(dut_ns, d1, "tx_packets"), time.time()
    sink.wait()
    cpu1, napi1, tx1, t1 = cpu_ns(tids), cpu_ns(napi), read_counter(dut_ns, d1, "tx_packets"), time.time()
    gen.wait()
    with open(f"/tmp/{p}-sink.json") as f:
        s = json.load(f)
    with open(f"/tmp/{p}-gen.json") as f:
        g = json.load(f)
    summary = None
    if dp is not None:
        dp.terminate()
        dp.wait(timeout=30)
        with open(f"/tmp/{p}-{dut}-{rep}.json") as f:
            summary = json.load(f)
    else:
        nsx(dut_ns, "sysctl", "-qw", "net.ipv4.ip_forward=0")
    pkts = s["packets"]
    tx = tx1 - tx0
    fwd_pps = pkts / s["seconds"] if s["seconds"] else 0
    ns_per_pkt = (cpu1 - cpu0) / pkts if pkts else None
    suspect = pkts > 0 and abs(tx - pkts) / pkts > 0.01
    return {
        "dut": dut if dut == "kernel" else f"{dut}/{layout}", "layout": layout, "rep": rep, "pkt_size": args.size, "flows": args.flows, "batch": args.batch,
        "offered_pps": g["packets"] / g["seconds"], "forwarded_pps": fwd_pps,
        "sink_packets": pkts, "dut_tx_packets": tx, "suspect": suspect,
        "dut_cpu_ns": cpu1 - cpu0, "dut_cpu_ns_per_pkt": ns_per_pkt,
        "dut_cpu_util": (cpu1 - cpu0) / 1e9 / (t1 - t0),
        # Where the DUT's time went: its NAPI kthreads (for the dataplane: XDP steer + copy into
        # the UMEM; for the kernel: everything) and its own threads (pollers: the loop and the
        # sendto that builds an skb per frame in copy mode).
        "napi_ns_per_pkt": (napi1 - napi0) / pkts if pkts else None,
        "threads_ns_per_pkt": ((cpu1 - cpu0) - (napi1 - napi0)) / pkts if pkts else None,
        "drops": {k: v for k, v in summary["drops_by_reason"].items() if v} if summary else None,
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bin", default=os.path.join(ROOT, "target/release/dataplane"))
    ap.add_argument("--duts", default="l3fwd,bounce,kernel")
    ap.add_argument("--layouts", default="same-package",
                    help="dataplane layouts to run, comma separated: irq-core (poller and its NAPI on "
                         "the DUT CPU), same-package (NAPI on the generator's CPU, poller on the DUT CPU), "
                         "unpinned (nothing pinned)")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=float, default=2.0)
    ap.add_argument("--window", type=float, default=5.0)
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--flows", type=int, default=1)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--tx-kick-budget", type=int, default=None,
                    help="set [dataplane] tx_kick_budget in the dataplane configs (0: kernel default 32)")
    ap.add_argument("--gen-cpu", type=int, default=0)
    ap.add_argument("--dut-cpu", type=int, default=1)
    ap.add_argument("--dp-napi-cpu", type=int, default=None,
                    help="CPU for the dataplane DUT interfaces' NAPI kthreads (default: --gen-cpu)")
    ap.add_argument("--json", default=None, help="write every run as JSON here")
    args = ap.parse_args()
    if args.dp_napi_cpu is None:
        args.dp_napi_cpu = args.gen_cpu
    if os.geteuid() != 0:
        sys.exit("fwd_compare.py needs root (netns, XDP)")
    prefix = f"bf{os.getpid() % 10000}"
    runs = []
    try:
        cells = [(d, l) for d in args.duts.split(",")
                 for l in (args.layouts.split(",") if d in DATAPLANE_MODES else ["-"])]
        for dut, layout in cells:
            sh(args.bin, "testbed", "up", "--prefix", prefix)
            try:
                for rep in range(args.reps):
                    r = one_rep(args, prefix, dut, rep, layout)
                    runs.append(r)
                    print(f"  {r['dut']:20} rep {rep}: {r['forwarded_pps']/1e6:.3f} Mpps, "
                          f"{r['dut_cpu_ns_per_pkt'] or 0:.0f} ns/pkt, DUT cpu {r['dut_cpu_util']*100:.0f}%"
                          f"{' SUSPECT (sink vs DUT tx differ > 1%)' if r['suspect'] else ''}", file=sys.stderr)
            finally:
                sh(args.bin, "testbed", "down", "--prefix", prefix, check=False)
    finally:
        sh(args.bin, "testbed", "down", "--prefix", prefix, check=False)
    print(f"\n{args.size}-byte UDP, {args.flows} flow(s), gen cpu {args.gen_cpu}, DUT cpu {args.dut_cpu}, "
          f"dataplane NAPI cpu {args.dp_napi_cpu}, kernel NAPI cpu {args.dut_cpu}, "
          f"median of {args.reps} (min-max), window {args.window}s after {args.warmup}s warm-up\n")
    print("| DUT | forwarded Mpps | DUT CPU ns/pkt | of which NAPI / own threads | offered Mpps | DUT drops by reason (last rep, whole run) |")
    print("|---|---|---|---|---|---|")
    med = {}
    for dut in dict.fromkeys(r["dut"] for r in runs):
        rs = [r for r in runs if r["dut"] == dut]
        f = median_range([r["forwarded_pps"] / 1e6 for r in rs])
        c = median_range([r["dut_cpu_ns_per_pkt"] for r in rs])
        o = median_range([r["offered_pps"] / 1e6 for r in rs])
        med[dut] = c[0]
        drops = rs[-1]["drops"]
        drops = "n/a (kernel)" if drops is None else (", ".join(f"{k}={v}" for k, v in drops.items()) or "none")
        n = median_range([r["napi_ns_per_pkt"] for r in rs])[0] or 0
        t = median_range([r["threads_ns_per_pkt"] for r in rs])[0] or 0
        print(f"| {dut} | {f[0]:.3f} ({f[1]:.3f}-{f[2]:.3f}) | {c[0]:.0f} ({c[1]:.0f}-{c[2]:.0f}) | {n:.0f} / {t:.0f} | {o[0]:.2f} | {drops} |")
    print()
    for layout in args.layouts.split(","):
        l3, bo, k = med.get(f"l3fwd/{layout}"), med.get(f"bounce/{layout}"), med.get("kernel")
        if l3 and bo:
            print(f"l3fwd / bounce ns/pkt ({layout}) = {l3 / bo:.3f}")
        if l3 and k:
            print(f"l3fwd ({layout}) / kernel ns/pkt = {l3 / k:.3f}")
    if args.json:
        os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
        with open(args.json, "w") as f:
            json.dump(runs, f, indent=1)


if __name__ == "__main__":
    main()
