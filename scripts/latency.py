#!/usr/bin/env python3
"""`make latency`: ping RTT and TCP through the DUT, the kernel and the dataplane side by side.

On one gen <-> dut <-> sink testbed (`dataplane testbed up`), for the kernel's forwarding (as
the testbed gives it, and with the hosts sending wire-sized frames), and for the dataplane in
each idle mode (adaptive, the default; sleep; busy), in one run:
  - ping RTT p50 / p99 / max over 1000 pings 2 ms apart, idle and under a background UDP load
    (64-byte frames at half the dataplane's flat-out rate, measured first in the same run);
  - iperf3 TCP, 1 and 8 streams, IPv4 and IPv6: Gbit/s and the sender's retransmits;
  - the dataplane's drops by reason and its sockets' kernel counters over its whole run.
Writes OUT/latency.md (the table), OUT/latency.json and OUT/rtt-cdf.svg (RTT distributions).
Timings on a shared 2-vCPU VM are noisy: compare within one run.

  scripts/latency.py [--out DIR] [--secs S] [--pings N] [--duts kernel,kernel-mtu,adaptive,sleep,busy]
                     [--knob ring_size=8192 ...] [--profile] [--host-rps CPUMASK] [--mtu 9000]

--mtu 9000 runs it all with jumbo frames on every link (`make latency-jumbo`).

--profile adds, before each DUT's measurements, one 1-stream IPv4 TCP run under a system-wide
`perf record`: OUT/profile-<dut>.txt has each CPU's busy share during it and where the samples
fell (by command, and by command and symbol). --host-rps steers the hosts' own receive work
(RPS on the generator's and the sink's veths) to CPUMASK, off the CPU of the DUT's poller.
"""
import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

BIN = "target/release/dataplane"
SINK_V4, SINK_V6 = "198.19.0.1", "2001:2:0:1::1"
IPERF_PORT = 5299


def sh(*args, check=True, capture=True, timeout=None):
    r = subprocess.run(args, capture_output=capture, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout if capture else ""


def in_ns(ns, *args):
    return ["ip", "netns", "exec", ns, *args]


def percentile(xs, p):
    if not xs:
        return float("nan")
    xs = sorted(xs)
    k = (len(xs) - 1) * p / 100.0
    lo = int(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


class Bed:
    def __init__(self, prefix):
        self.p = prefix
        self.gen, self.dut, self.sink = f"{prefix}-gen", f"{prefix}-dut", f"{prefix}-sink"
        self.procs = []

    def up(self):
        sh(BIN, "testbed", "up", "--prefix", self.p)

    def down(self):
        for p in self.procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        sh(BIN, "testbed", "down", "--prefix", self.p, check=False)

    def spawn(self, args, out, err):
        p = subprocess.Popen(args, stdout=out, stderr=err, text=True)
        self.procs.append(p)
        return p


def wait_for(path, needle, secs):
    deadline = time.time() + secs
    while time.time() < deadline:
        try:
            if needle in open(path).read():
                return True
        except FileNotFoundError:
            pass
        time.sleep(0.05)
    return False


def ping(bed, n, v6=False):
    dst = SINK_V6 if v6 else SINK_V4
    out = sh(*in_ns(bed.gen, "ping", "-6" if v6 else "-4", "-n", "-c", str(n), "-i", "0.002", "-W", "1", dst),
             check=False, timeout=n * 0.01 + 30)
    rtts = [float(m) for m in re.findall(r"time=([0-9.]+) ms", out)]
    return rtts, n - len(rtts)


def iperf(bed, streams, secs, v6):
    dst = SINK_V6 if v6 else SINK_V4
    out = sh(*in_ns(bed.gen, "iperf3", "-c", dst, "-p", str(IPERF_PORT), "-t", str(secs), "-P", str(streams), "-J"),
             check=False, timeout=secs + 30)
    try:
        j = json.loads(out)
        return round(j["end"]["sum_received"]["bits_per_second"] / 1e9, 2), j["end"]["sum_sent"].get("retransmits", 0)
    except (ValueError, KeyError):
        return None, None


def flat_out_rate(bed, tmp):
    """The dataplane's (adaptive) forwarding rate with gen flat out, 64-byte frames, 16 flows."""
    dut = start_dataplane(bed, tmp, "adaptive", metrics=9230)
    gen = bed.spawn(in_ns(bed.gen, BIN, "gen", "--iface", f"{bed.p}-g0", "--duration", "4", "--flows", "16"),
                    subprocess.DEVNULL, subprocess.DEVNULL)
    time.sleep(1.0)
    top = sh(*in_ns(bed.dut, BIN, "top", "--metrics", "9230", "--json", "--interval", "2"))
    gen.wait()
    stop(dut)
    rows = json.loads(top)
    pollers = rows.get("pollers", rows) if isinstance(rows, dict) else rows
    return sum(r["tx_pps"] for r in pollers)


KNOBS = []


def start_dataplane(bed, tmp, idle, metrics=None):
    cfg = sh(BIN, "testbed", "config", "--prefix", bed.p, "--cpus", "1")
    knobs = "".join(f"{k.split('=', 1)[0]} = {k.split('=', 1)[1]}\n" for k in KNOBS)
    cfg = cfg.replace("[dataplane]\n", f'[dataplane]\nidle = "{idle}"\n{knobs}', 1)
    path = os.path.join(tmp, f"dut-{idle}.toml")
    open(path, "w").write(cfg)
    err = os.path.join(tmp, f"dut-{idle}.err")
    args = [BIN, "run", "--config", path, "--interval", "0"]
    if metrics:
        args += ["--metrics", str(metrics)]
    p = bed.spawn(in_ns(bed.dut, *args), open(os.path.join(tmp, f"dut-{idle}.out"), "w"), open(err, "w"))
    if not wait_for(err, "attached", 20):
        raise RuntimeError(f"dataplane ({idle}) did not attach: {open(err).read()}")
    p.files = (os.path.join(tmp, f"dut-{idle}.out"), err)
    return p


def stop(p):
    p.send_signal(signal.SIGTERM)
    try:
        p.wait(timeout=20)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()


def dataplane_notes(p):
    """Drops by reason and the sockets' kernel counters from the run's final summary."""
    text = open(p.files[0]).read() + open(p.files[1]).read()
    notes = []
    for line in text.splitlines():
        if line.startswith("drops") or "rx_ring_full" in line or line.startswith("totals"):
            notes.append(line.strip())
    return notes


def cpu_times():
    """Per CPU: (busy, total) jiffies from /proc/stat (busy: all but idle and iowait)."""
    out = []
    for line in open("/proc/stat"):
        f = line.split()
        if re.fullmatch(r"cpu[0-9]+", f[0]):
            v = [int(x) for x in f[1:]]
            out.append((sum(v) - v[3] - v[4], sum(v)))
    return out


def profiled_iperf(bed, name, args, v6):
    """One 1-stream TCP run under a system-wide `perf record`, with each CPU's busy share:
    where the CPU goes while TCP runs through this DUT (bench/RESULTS.md)."""
    tag = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    data = os.path.join(args.out, f"profile-{tag}.data")
    perf = subprocess.Popen(["perf", "record", "-a", "-g", "-F", "499", "-o", data, "--", "sleep", str(args.secs)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    before = cpu_times()
    result = iperf(bed, 1, args.secs, v6)
    after = cpu_times()
    perf.wait()
    busy = [round(100.0 * (a[0] - b[0]) / max(1, a[1] - b[1])) for a, b in zip(after, before)]
    report = [f"{name}: TCP 1 stream {'v6' if v6 else 'v4'}: {result[0]} Gbit/s ({result[1]} retransmits); "
              f"CPU busy per CPU during it: {busy} %", ""]
    for sort in ("comm", "comm,symbol"):
        out = sh("perf", "report", "-i", data, "--no-children", "--sort", sort, "--stdio", "-g", "none",
                 "--percent-limit", "1.5", check=False)
        report += [l for l in out.splitlines() if l.strip() and not l.startswith("#")] + [""]
    split = poller_split(sh("perf", "script", "-i", data, check=False))
    if split:
        report += ["the poller threads' samples by call stack:"] + split + [""]
    open(os.path.join(args.out, f"profile-{tag}.txt"), "w").write("\n".join(report) + "\n")
    return busy


# What a poller thread's sample was doing, by the frames on its stack (first match wins).
POLLER_WORK = (
    ("the hosts' TCP (softirq inside the poller's syscalls)",
     lambda s: "net_rx_action" in s and any(f in s for f in ("tcp_v4_rcv", "tcp_v6_rcv", "ip_local_deliver", "ip6_input"))),
    ("other softirq inside its syscalls (veth NAPI, XDP, the copy into the UMEM)", lambda s: "net_rx_action" in s),
    ("copy-mode transmit (skb, copy, the veth's transmit)", lambda s: "__xsk_generic_xmit" in s or "xsk_sendmsg" in s),
    ("other syscalls (poll, wake-ups)", lambda s: "do_syscall_64" in s),
    ("user space (the poller's own code)", lambda s: True),
)


def poller_split(script):
    """Shares of the `dp-poll*` threads' samples by what their call stacks show."""
    counts = {name: 0 for name, _ in POLLER_WORK}
    total = 0
    for sample in script.split("\n\n"):
        lines = sample.strip().splitlines()
        if not lines or not lines[0].lstrip().startswith("dp-poll"):
            continue
        frames = " ".join(l.split()[1] for l in lines[1:] if len(l.split()) > 1)
        total += 1
        counts[next(name for name, hit in POLLER_WORK if hit(frames))] += 1
    return [f"  {100.0 * n / total:5.1f}%  {name}" for name, n in counts.items()] if total else []


def measure(bed, name, args, load_pps):
    r = {"dut": name}
    if args.profile:
        r["cpu_busy_tcp1_v4"] = profiled_iperf(bed, name, args, False)
    for v6 in (False, True):
        fam = "v6" if v6 else "v4"
        for streams in (1, 8):
            r[f"tcp{streams}_{fam}"] = iperf(bed, streams, args.secs, v6)
    r["rtt_idle"], r["ping_lost_idle"] = ping(bed, args.pings)
    gen = bed.spawn(in_ns(bed.gen, BIN, "gen", "--iface", f"{bed.p}-g0", "--duration", str(int(args.pings * 0.004 + 10)),
                          "--flows", "16", "--rate", str(int(load_pps))), subprocess.DEVNULL, subprocess.DEVNULL)
    time.sleep(1.0)
    r["rtt_load"], r["ping_lost_load"] = ping(bed, args.pings)
    gen.kill()
    gen.wait()
    return r


def cdf_svg(results, path):
    """The RTT distributions (CDF), idle (solid) and loaded (dashed), one colour per DUT."""
    w, h, ml, mb, mt, mr = 820, 460, 70, 50, 40, 190
    xs = [x for r in results for k in ("rtt_idle", "rtt_load") for x in r[k]]
    xmax = max(percentile(xs, 99.5), 0.05) * 1.1 if xs else 1.0
    colours = ["#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e"]
    sx = lambda x: ml + (w - ml - mr) * min(x, xmax) / xmax
    sy = lambda y: h - mb - (h - mb - mt) * y
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="12">',
           f'<rect width="{w}" height="{h}" fill="white"/>',
           f'<text x="{w / 2}" y="20" text-anchor="middle" font-size="15">ping RTT through the DUT (CDF; solid idle, dashed under load)</text>']
    for i in range(6):
        x = xmax * i / 5
        out.append(f'<line x1="{sx(x):.1f}" y1="{sy(0)}" x2="{sx(x):.1f}" y2="{sy(1)}" stroke="#ddd"/>')
        out.append(f'<text x="{sx(x):.1f}" y="{h - mb + 16}" text-anchor="middle">{x:.3f}</text>')
        y = i / 5
        out.append(f'<line x1="{ml}" y1="{sy(y):.1f}" x2="{w - mr}" y2="{sy(y):.1f}" stroke="#ddd"/>')
        out.append(f'<text x="{ml - 6}" y="{sy(y) + 4:.1f}" text-anchor="end">{y:.1f}</text>')
    out.append(f'<text x="{(ml + w - mr) / 2}" y="{h - 10}" text-anchor="middle">RTT (ms)</text>')
    out.append(f'<text x="16" y="{(h - mb + mt) / 2}" transform="rotate(-90 16 {(h - mb + mt) / 2})" text-anchor="middle">fraction of pings</text>')
    for i, r in enumerate(results):
        c = colours[i % len(colours)]
        for key, dash in (("rtt_idle", ""), ("rtt_load", ' stroke-dasharray="6 4"')):
            v = sorted(r[key])
            if not v:
                continue
            pts = " ".join(f"{sx(x):.1f},{sy((k + 1) / len(v)):.1f}" for k, x in enumerate(v))
            out.append(f'<polyline fill="none" stroke="{c}" stroke-width="2"{dash} points="{pts}"/>')
        ly = mt + 20 * i
        out.append(f'<line x1="{w - mr + 10}" y1="{ly}" x2="{w - mr + 34}" y2="{ly}" stroke="{c}" stroke-width="2"/>')
        out.append(f'<text x="{w - mr + 40}" y="{ly + 4}">{r["dut"]}</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out))


def table(results, load_pps):
    def rtt(xs):
        return f"{percentile(xs, 50):.3f} / {percentile(xs, 99):.3f} / {max(xs):.3f}" if xs else "-"

    def tcp(x):
        g, rt = x
        return "failed" if g is None else f"{g:.2f} ({rt})"

    lines = [f"ping: p50 / p99 / max ms over the pings that came back; load: 64-byte UDP at {load_pps / 1e6:.3f} Mpps "
             "(half the dataplane's flat-out rate in this run). TCP: Gbit/s (sender retransmits).", "",
             "| DUT | RTT idle | RTT loaded | TCP 1 v4 | TCP 8 v4 | TCP 1 v6 | TCP 8 v6 |",
             "|---|---|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['dut']} | {rtt(r['rtt_idle'])} | {rtt(r['rtt_load'])} | {tcp(r['tcp1_v4'])} | "
                     f"{tcp(r['tcp8_v4'])} | {tcp(r['tcp1_v6'])} | {tcp(r['tcp8_v6'])} |")
    return "\n".join(lines) + "\n"


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default="bench/out/latency")
    ap.add_argument("--secs", type=int, default=5, help="seconds per iperf3 run")
    ap.add_argument("--pings", type=int, default=1000)
    ap.add_argument("--duts", default="kernel,kernel-mtu,adaptive,sleep,busy")
    ap.add_argument("--host-rps", metavar="CPUMASK",
                    help="steer the hosts' receive work to these CPUs (RPS on their veths), off the DUT's")
    ap.add_argument("--profile", action="store_true",
                    help="first, one 1-stream TCP run per DUT under perf record -a: OUT/profile-*.txt")
    ap.add_argument("--mtu", type=int, default=1500,
                    help="every testbed link's MTU (9000: jumbo frames; the dataplane forwards them as "
                         "AF_XDP multi-buffer chains)")
    ap.add_argument("--knob", action="append", default=[], metavar="KEY=VALUE",
                    help="a [dataplane] key for every dataplane run, e.g. ring_size=8192 (repeatable)")
    args = ap.parse_args()
    KNOBS.extend(args.knob)
    if os.geteuid() != 0:
        sys.exit("latency: needs root")
    if not os.access(BIN, os.X_OK):
        sys.exit(f"latency: {BIN} missing: run make build")
    if args.profile and not shutil.which("perf"):
        sys.exit("latency: --profile needs perf (Debian linux-perf)")
    os.makedirs(args.out, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix="latency-")
    bed = Bed(f"lt{os.getpid() % 100000}")
    results = []
    try:
        bed.up()
        if args.mtu != 1500:
            for ns, dev in ((bed.gen, "g0"), (bed.dut, "d0"), (bed.dut, "d1"), (bed.sink, "s0")):
                sh(*in_ns(ns, "ip", "link", "set", "dev", f"{bed.p}-{dev}", "mtu", str(args.mtu)))
        if args.host_rps:
            # The hosts' own receive work (the sink's TCP, the generator's ACK processing)
            # runs where a host's veth hands it: by default in whoever transmitted, which for
            # the dataplane is its poller's sendto. On real wires it never runs on the router.
            for ns, dev in ((bed.gen, f"{bed.p}-g0"), (bed.sink, f"{bed.p}-s0")):
                sh(*in_ns(ns, "sh", "-c", f"for q in /sys/class/net/{dev}/queues/rx-*; do echo {args.host_rps} > $q/rps_cpus; done"))
        for ns, flag in ((bed.dut, "0"),):
            sh(*in_ns(ns, "sysctl", "-qw", f"net.ipv4.ip_forward={flag}"))
        server = bed.spawn(in_ns(bed.sink, "iperf3", "-s", "-p", str(IPERF_PORT)), subprocess.DEVNULL, subprocess.DEVNULL)
        load_pps = flat_out_rate(bed, tmp) / 2
        print(f"latency: the dataplane forwards {2 * load_pps / 1e6:.3f} Mpps flat out here; load at half", file=sys.stderr)
        for dut in args.duts.split(","):
            print(f"latency: {dut}", file=sys.stderr)
            if dut in ("kernel", "kernel-mtu"):
                # kernel-mtu: the hosts segment in software before their veth (TSO and GSO
                # off), so the kernel forwards wire-sized frames, as the dataplane gets them:
                # a veth whose peer has an XDP program without multi-buffer support turns the
                # peer's TSO off, and GSO then cuts 1500-byte frames before the DUT.
                hosts = ((bed.gen, f"{bed.p}-g0"), (bed.sink, f"{bed.p}-s0"))
                mtu = dut == "kernel-mtu"
                if mtu:
                    for ns, dev in hosts:
                        sh(*in_ns(ns, "ethtool", "-K", dev, "tso", "off", "gso", "off"))
                sh(*in_ns(bed.dut, "sysctl", "-qw", "net.ipv4.ip_forward=1"))
                sh(*in_ns(bed.dut, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=1"))
                r = measure(bed, "kernel, wire-sized frames (hosts' TSO/GSO off)" if mtu else "kernel", args, load_pps)
                sh(*in_ns(bed.dut, "sysctl", "-qw", "net.ipv4.ip_forward=0"))
                sh(*in_ns(bed.dut, "sysctl", "-qw", "net.ipv6.conf.all.forwarding=0"))
                if mtu:
                    for ns, dev in hosts:
                        sh(*in_ns(ns, "ethtool", "-K", dev, "tso", "on", "gso", "on"))
            else:
                p = start_dataplane(bed, tmp, dut)
                r = measure(bed, f"dataplane, idle = {dut}", args, load_pps)
                stop(p)
                r["notes"] = dataplane_notes(p)
            results.append(r)
        server.kill()
    finally:
        bed.down()
    md = table(results, load_pps)
    for r in results:
        for n in r.get("notes", []):
            md += f"\n{r['dut']}: {n}"
    open(os.path.join(args.out, "latency.md"), "w").write(md + "\n")
    json.dump({"load_pps": load_pps, "results": results}, open(os.path.join(args.out, "latency.json"), "w"), indent=1)
    cdf_svg(results, os.path.join(args.out, "rtt-cdf.svg"))
    print(md)
    print(f"latency: wrote {args.out}/latency.md, latency.json, rtt-cdf.svg (dataplane logs in {tmp})")


if __name__ == "__main__":
    main()
