#!/usr/bin/env python3
"""make vmtest, the guest side: runs inside the QEMU guest (scripts/vmtest/init starts it in a
chroot of the host's root), against real virtio_net drivers with MSI-X interrupts, 2 NUMA nodes
and SMT. Every check compares values read back from the kernel (CPU lists, IRQ affinity lists,
page nodes, frame counts) with what the plan or the host says, and reports RESULT PASS|FAIL to
the host over the second serial port; the host sends the traffic (see host.py).
"""
import argparse
import json
import os
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import termios
import time
import tty

from wire import GUEST_MACS, HOST_MACS, LAYOUTS

BURST = 2000
FLOWS = 64
# Positions in the summary's counter arrays (dataplane::stats::Counter).
RX_PACKETS, TX_PACKETS = 0, 2


class Ctl:
    """The line protocol with the host over /dev/ttyS1."""

    def __init__(self):
        self.fd = os.open("/dev/ttyS1", os.O_RDWR | os.O_NOCTTY)
        tty.setraw(self.fd)
        attrs = termios.tcgetattr(self.fd)
        attrs[3] &= ~termios.ECHO
        termios.tcsetattr(self.fd, termios.TCSANOW, attrs)
        self.buf = b""
        self.passed = self.failed = 0

    def send(self, line):
        os.write(self.fd, (line.replace("\n", " ") + "\n").encode())
        print(line, flush=True)

    def recv(self, timeout):
        deadline = time.time() + timeout
        while b"\n" not in self.buf:
            if time.time() > deadline:
                raise TimeoutError("no answer from the host")
            r, _, _ = select.select([self.fd], [], [], 1.0)
            if r:
                self.buf += os.read(self.fd, 4096)
        line, self.buf = self.buf.split(b"\n", 1)
        return line.decode().strip()

    def check(self, name, ok, detail=""):
        self.passed += bool(ok)
        self.failed += not ok
        self.send(f"RESULT {'PASS' if ok else 'FAIL'} {name}{': ' + str(detail) if detail else ''}")
        return ok


def sh(*args, check=True):
    r = subprocess.run(list(args), capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(args)}: {r.stderr.strip()}")
    return r.stdout


def cpu_list(text):
    out = []
    for part in text.strip().split(","):
        if "-" in part:
            a, b = part.split("-")
            out += range(int(a), int(b) + 1)
        elif part:
            out.append(int(part))
    return out


def irq_affinity(irq):
    return cpu_list(open(f"/proc/irq/{irq}/smp_affinity_list").read())


def irq_names():
    """IRQ number -> its name in /proc/interrupts."""
    names = {}
    for line in open("/proc/interrupts").read().splitlines()[1:]:
        m = re.match(r"\s*(\d+):.*\s(\S+)\s*$", line)
        if m:
            names[int(m.group(1))] = m.group(2)
    return names


def _attrs(data):
    out, i = {}, 0
    while i + 4 <= len(data):
        n, t = struct.unpack_from("HH", data, i)
        if n < 4:
            break
        out[t & 0x3FFF] = data[i + 4:i + n]
        i += (n + 3) & ~3
    return out


def _genl(sock, family, cmd, attrs):
    body = b"".join(struct.pack("HH", 4 + len(v), t) + v + b"\0" * (-len(v) % 4) for t, v in attrs)
    msg = struct.pack("BBH", cmd, 1, 0) + body
    sock.send(struct.pack("IHHII", 16 + len(msg), family, 1, 1, 0) + msg)  # NLM_F_REQUEST
    reply = sock.recv(65536)
    length, kind = struct.unpack_from("IH", reply, 0)
    if kind == 2:  # NLMSG_ERROR
        raise OSError(-struct.unpack_from("i", reply, 16)[0], "netlink error")
    return _attrs(reply[20:length])


def xdp_features(ifname):
    """The device's XDP feature bits, from the kernel's netdev generic-netlink family."""
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, 16)  # NETLINK_GENERIC
    ctrl = _genl(sock, 0x10, 3, [(2, b"netdev\0")])  # CTRL_CMD_GETFAMILY, FAMILY_NAME
    family = struct.unpack("H", ctrl[1][:2])[0]  # CTRL_ATTR_FAMILY_ID
    ifindex = int(open(f"/sys/class/net/{ifname}/ifindex").read())
    dev = _genl(sock, family, 1, [(1, struct.pack("I", ifindex))])  # DEV_GET, A_DEV_IFINDEX
    bits = struct.unpack("Q", dev[3][:8])[0]  # NETDEV_A_DEV_XDP_FEATURES
    names = ["basic", "redirect", "ndo-xmit", "xsk-zerocopy", "hw-offload", "rx-sg", "ndo-xmit-sg"]
    return [n for i, n in enumerate(names) if bits & (1 << i)]


def ifname_by_mac(mac):
    for name in os.listdir("/sys/class/net"):
        try:
            if open(f"/sys/class/net/{name}/address").read().strip() == mac:
                return name
        except OSError:
            pass
    raise RuntimeError(f"no interface with MAC {mac}")


def poller_cpus(pid):
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
        if comm.startswith("dp-poll"):
            status = open(f"/proc/{pid}/task/{tid}/status").read()
            m = re.search(r"Cpus_allowed_list:\s*(\S+)", status)
            out[int(comm[len("dp-poll"):])] = cpu_list(m.group(1))
    return out


def layout_config(layout, cfg_path, ports):
    """The config a layout runs with: `explicit` places each poller where the config says
    (queue 0's on the first CPU, queue 1's on the last); the others plan from the plain one."""
    if layout != "explicit":
        return cfg_path
    path = "/run/vmtest-explicit.toml"
    text = config(ports).replace("[[pollers]]\nqueues = [0]", "[[pollers]]\ncpu = 0\nqueues = [0]", 1)
    text = text.replace("[[pollers]]\nqueues = [1]", f"[[pollers]]\ncpu = {os.cpu_count() - 1}\nqueues = [1]", 1)
    open(path, "w").write(text)
    return path


def config(ports):
    return f"""[dataplane]
mode = "l3fwd"
batch_size = 32
ring_size = 512
frames_per_queue = 1024

[[interfaces]]
name = "{ports[0]}"
[[interfaces]]
name = "{ports[1]}"

[[pollers]]
queues = [0]
[[pollers]]
queues = [1]

[[routes]]
prefix = "198.19.0.0/16"
via = "198.19.0.1"
dev = "{ports[1]}"

[[neighbours]]
ip = "198.19.0.1"
mac = "{HOST_MACS[1]}"
dev = "{ports[1]}"
"""


def booted_topology():
    """(sockets, cores, threads, nodes) QEMU was asked for (kernel command line)."""
    args = dict(a.split("=", 1) for a in open("/proc/cmdline").read().split() if "=" in a)
    s, c, t = map(int, args["vmtest.topo"].split("x"))
    return s, c, t, int(args["vmtest.nodes"])


def topology_test(ctl, dp, ports):
    t = json.loads(sh(dp, "topology", "--json"))
    m = t["machine"]
    pus = m["pus"]
    sockets, cores_per, threads, nodes = booted_topology()
    ncpu = sockets * cores_per * threads
    ctl.check(f"topology: {nodes} NUMA nodes", m["nodes"] == list(range(nodes)), m["nodes"])
    ctl.check(f"topology: {sockets} packages", m["packages"] == sockets, m["packages"])
    ctl.check(f"topology: {ncpu} CPUs", [p["cpu"] for p in pus] == list(range(ncpu)), pus)
    cores = {(p["package"], p["core"]) for p in pus}
    ctl.check(f"topology: {sockets * cores_per} cores of {threads} thread(s)",
              len(cores) == sockets * cores_per, sorted(cores))
    want_nodes = [cpu * nodes // ncpu for cpu in range(ncpu)]
    ctl.check(f"topology: CPUs' nodes {want_nodes}", [p["node"] for p in pus] == want_nodes,
              [p["node"] for p in pus])
    names = irq_names()
    for port in ports:
        iface = next(i for i in t["interfaces"] if i["name"] == port)
        ctl.check(f"topology: {port} driver", iface["driver"] == "virtio_net", iface["driver"])
        ctl.check(f"topology: {port} has 2 RX queues", iface["rx_queues"] == 2, iface["rx_queues"])
        for q, entry in enumerate(iface["queue_irqs"]):
            irq = (entry or {}).get("Irq", {}).get("irq")
            name = names.get(irq, "")
            ctl.check(f"topology: {port} queue {q} IRQ {irq} is {name}",
                      re.fullmatch(rf"virtio\d+-input\.{q}", name) is not None,
                      f"expected virtioN-input.{q}")
            if irq is not None:
                ctl.check(f"topology: {port} queue {q} IRQ CPUs read back",
                          entry["Irq"]["cpus"] == irq_affinity(irq),
                          f"{entry['Irq']['cpus']} vs /proc {irq_affinity(irq)}")
        ctl.check(f"topology: {port} NUMA node (virtio-pci has none)",
                  iface["numa_node"] is None, iface["numa_node"])
    return t


def queue_irqs(topo, ports):
    """(port, queue) -> IRQ."""
    out = {}
    for port in ports:
        iface = next(i for i in topo["interfaces"] if i["name"] == port)
        for q, entry in enumerate(iface["queue_irqs"]):
            out[(port, q)] = entry["Irq"]["irq"]
    return out


def expected_refusal(topo, layout):
    """Why the planner must refuse `layout` on this guest's topology (None: it must not)."""
    pus = topo["machine"]["pus"]
    cores = {(p["package"], p["core"]) for p in pus}
    per_package = {pkg: len({c for (p2, c) in cores if p2 == pkg}) for (pkg, _) in cores}
    smt = len(cores) < len(pus)
    if layout == "same-package" and max(per_package.values()) < 2:
        return "no free core in the package"
    if layout == "smt-sibling" and not smt:
        return "no SMT"
    if layout == "remote-node" and len(topo["machine"]["nodes"]) < 2:
        return "NUMA node"
    return None


def irq_args(topo):
    """Queue 0's interrupts on CPU 0 (node 0), queue 1's on node 1's first CPU: the layouts
    are then planned from a known place (the kernel's own choice drifts from run to run)."""
    node1 = min(p["cpu"] for p in topo["machine"]["pus"] if p["node"] == 1)
    return ["--irq-cpu", "0:0", "--irq-cpu", f"1:{node1}"]


def plan(dp, layout, cfg_path, topo):
    return subprocess.run([dp, "plan", "--config", cfg_path, "--layout", layout, "--json"]
                          + irq_args(topo), capture_output=True, text=True)


def start_run(dp, layout, cfg_path, topo, tag):
    """Starts `dataplane run --layout L --apply-irq`; returns (process, summary path), or
    (None, the end of its log) when it did not get as far as attaching within 120 s."""
    summary_path = f"/run/{tag}-{layout}.json"
    err_path = f"/run/{tag}-{layout}.err"
    proc = subprocess.Popen(
        [dp, "run", "--config", cfg_path, "--layout", layout, "--apply-irq", "--duration", "300",
         "--interval", "0", "--json", summary_path] + irq_args(topo),
        stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    deadline = time.time() + 120
    while "attached" not in open(err_path).read():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            return None, open(err_path).read()[-500:]
        time.sleep(0.5)
    return proc, summary_path


def layout_test(ctl, dp, ports, irqs, layout, cfg_path, topo):
    cfg_path = layout_config(layout, cfg_path, ports)
    all_irqs = sorted(set(irqs.values()))
    before = {irq: irq_affinity(irq) for irq in all_irqs}
    r = plan(dp, layout, cfg_path, topo)
    why = expected_refusal(topo, layout)
    if why is not None:
        return ctl.check(f"{layout}: refused on this topology ({why})",
                         r.returncode != 0 and why in r.stderr, r.stderr.strip() or r.stdout[:200])
    if r.returncode != 0:
        return ctl.check(f"{layout}: planned", False, r.stderr.strip())
    entries = json.loads(r.stdout)["entries"]
    proc, summary_path = start_run(dp, layout, cfg_path, topo, "test")
    if proc is None:
        return ctl.check(f"{layout}: starts", False, summary_path)
    # While running: pollers on the planned CPUs, each moved IRQ on its planned CPU.
    got = poller_cpus(proc.pid)
    ncpu = os.cpu_count()
    want = {i: ([e["poller_cpu"]] if e["poller_cpu"] is not None else list(range(ncpu)))
            for i, e in enumerate(entries)}
    ctl.check(f"{layout}: pollers on the planned CPUs", got == want, f"read {got}, plan {want}")
    for e in entries:
        if e["irq_cpu"] is not None:
            for port in ports:
                irq = irqs[(port, e["queue"])]
                ctl.check(f"{layout}: {port} queue {e['queue']} IRQ {irq} moved to CPU {e['irq_cpu']}",
                          irq_affinity(irq) == [e["irq_cpu"]], irq_affinity(irq))
    ctl.send(f"READY {layout} {BURST} {FLOWS}")
    sent, received = map(int, ctl.recv(120).split()[1:3])
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return ctl.check(f"{layout}: stops on SIGINT", False)
    s = json.load(open(summary_path))
    ctl.check(f"{layout}: the host sent the burst", sent == BURST, sent)
    ctl.check(f"{layout}: every frame reached the sink", received == sent, f"{received} of {sent}")
    tx = s["totals"]["counters"][TX_PACKETS]
    ctl.check(f"{layout}: the dataplane transmitted every frame", tx >= sent,
              f"tx {tx}, drops {dict((k, v) for k, v in s['drops_by_reason'].items() if v)}")
    ctl.check(f"{layout}: every UMEM frame accounted", s["frames_ok"], s["reports"])
    for i, (e, setup) in enumerate(zip(entries, s["setup"])):
        if e["poller_cpu"] is not None:
            ctl.check(f"{layout}: poller {i} read back its affinity", setup["affinity"] == [e["poller_cpu"]],
                      setup["affinity"])
        nodes = {n for n, _ in setup["umem_nodes"]}
        if e["mem_node"] is not None:
            ctl.check(f"{layout}: poller {i} UMEM pages on node {e['mem_node']}", nodes == {e["mem_node"]},
                      setup["umem_nodes"])
    # Two queues per NIC with RSS: the flows reach both pollers.
    rx = [p["counters"][RX_PACKETS] for p in s["pollers"]]
    ctl.check(f"{layout}: {FLOWS} flows reached both queues' pollers", len(rx) == 2 and all(r > 0 for r in rx), rx)
    after = {irq: irq_affinity(irq) for irq in all_irqs}
    ctl.check(f"{layout}: IRQ affinity restored after the stop", after == before, f"{after} vs {before}")
    modes = {setup["zerocopy"] for setup in s["setup"]}
    ctl.send(f"RAN {layout}")
    return s, modes


# Index of pass_vlan in the steering program's counters (bpf::STEER_STAT_NAMES).
PASS_VLAN = 6


def vlan_test(ctl, dp, ports, cfg_path, topo):
    """A VLAN sub-interface on a dataplane port: the steering program hands tagged frames to
    the kernel (`pass_vlan`), whose 802.1Q device answers a ping tagged from the host. The host
    has no 802.1Q module, so the test is here, where the guest kernel has one."""
    port = ports[0]
    r = subprocess.run(["ip", "link", "add", "link", port, "name", "vl10", "type", "vlan", "id", "10"],
                       capture_output=True, text=True)
    if not ctl.check("vlan: an 802.1Q sub-interface can be made in the guest", r.returncode == 0,
                     r.stderr.strip()):
        return
    sh("ip", "addr", "add", "10.10.0.2/24", "dev", "vl10")
    sh("ip", "link", "set", "vl10", "up")
    sh("ip", "neigh", "replace", "10.10.0.1", "lladdr", HOST_MACS[0], "dev", "vl10", "nud", "permanent")
    proc, summary_path = start_run(dp, "unpinned", cfg_path, topo, "vlan")
    if proc is None:
        sh("ip", "link", "del", "vl10", check=False)
        return ctl.check("vlan: the dataplane starts", False, summary_path)
    try:
        ctl.send("VLAN 10 10.10.0.1 10.10.0.2")
        replies = int(ctl.recv(60).split()[1])
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
        sh("ip", "link", "del", "vl10", check=False)
    ctl.check("vlan: the sub-interface answered pings tagged 10 with the dataplane attached",
              replies >= 3, f"{replies} of 5 echo replies")
    s = json.load(open(summary_path))
    passed = s["steer"][0][1][PASS_VLAN]
    ctl.check("vlan: the steering program passed the tagged frames to the kernel", passed >= 5,
              f"pass_vlan {passed}")


def cpu_irq_ns():
    """Time all CPUs spent in hard and soft interrupts (ns, from /proc/stat)."""
    hz = os.sysconf("SC_CLK_TCK")
    f = open("/proc/stat").readline().split()
    return (int(f[6]) + int(f[7])) * 1_000_000_000 // hz


def thread_ns(pid, tid):
    return int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])


def pollers(pid):
    return [t for t in os.listdir(f"/proc/{pid}/task")
            if open(f"/proc/{pid}/task/{t}/comm").read().startswith("dp-poll")]


def bench_layout(ctl, dp, layout, cfg_path, topo, rate, seconds):
    """One row of the layouts matrix: forwarded rate and CPU cost under a paced load."""
    cfg_path = layout_config(layout, cfg_path, [ifname_by_mac(m) for m in GUEST_MACS])
    s_, c_, t_, _ = booted_topology()
    name = f"{s_}x{c_}x{t_}"
    r = plan(dp, layout, cfg_path, topo)
    if r.returncode != 0:
        why = r.stderr.strip().split("not possible on this machine: ")[-1]
        ctl.send(f"ROW {name} | {layout} | not possible here: {why} | | | |")
        return ctl.check(f"bench {layout}: refusal explained", bool(why), why)
    entries = json.loads(r.stdout)["entries"]
    proc, summary_path = start_run(dp, layout, cfg_path, topo, "bench")
    if proc is None:
        return ctl.check(f"bench {layout}: starts", False, summary_path)
    tids = pollers(proc.pid)
    p0 = sum(thread_ns(proc.pid, t) for t in tids)
    i0 = cpu_irq_ns()
    ctl.send(f"LOAD {layout} {seconds} {rate}")
    sent, received = map(int, ctl.recv(seconds + 120).split()[1:3])
    p1 = sum(thread_ns(proc.pid, t) for t in tids)
    i1 = cpu_irq_ns()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=60)
    s = json.load(open(summary_path))
    by_reason = sorted(((v, k) for k, v in s["drops_by_reason"].items() if v), reverse=True)
    drops = f"{sum(v for v, _ in by_reason)}" + (f" (mostly {by_reason[0][1]})" if by_reason else "")
    cpus = ", ".join(str(e["poller_cpu"]) if e["poller_cpu"] is not None else "any" for e in entries)
    irq_cpus = ", ".join(str(e["irq_cpu"]) for e in entries)
    nodes = ", ".join("/".join(str(n) for n, _ in st["umem_nodes"]) for st in s["setup"])
    per = max(received, 1)
    ctl.send(f"ROW {name} | {layout} | {cpus} ({irq_cpus}) | {nodes} | {received / seconds / 1000:.1f} | "
             f"{drops} | {(p1 - p0 + i1 - i0) / per / 1000:.1f} ({(p1 - p0) / per / 1000:.1f} / "
             f"{(i1 - i0) / per / 1000:.1f})")
    ctl.send(f"RAN {layout}")
    return ctl.check(f"bench {layout}: forwarded under load", received > 0, f"{received} of {sent}")


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--repo", required=True)
    a = p.parse_args()
    ctl = Ctl()
    try:
        dp = os.path.join(a.repo, "target", "release", "dataplane")
        ports = [ifname_by_mac(m) for m in GUEST_MACS]
        for port, addr in zip(ports, ("198.18.0.2/16", "198.19.0.2/16")):
            sh("sysctl", "-qw", f"net.ipv6.conf.{port}.disable_ipv6=1")
            sh("ip", "addr", "add", addr, "dev", port)
            sh("ip", "link", "set", port, "up")
        sh("ip", "link", "set", "lo", "up")
        ctl.send(f"LOG kernel {os.uname().release}, ports {ports}")
        topo = topology_test(ctl, dp, ports)
        irqs = queue_irqs(topo, ports)
        cfg_path = "/run/vmtest.toml"
        open(cfg_path, "w").write(config(ports))
        args = dict(x.split("=", 1) for x in open("/proc/cmdline").read().split() if "=" in x)
        if "vmtest.bench" in args:
            rate, seconds = map(int, args["vmtest.bench"].split("x"))
            for layout in LAYOUTS:
                try:
                    bench_layout(ctl, dp, layout, cfg_path, topo, rate, seconds)
                except Exception as e:
                    ctl.check(f"bench {layout}: ran", False, repr(e))
            ctl.send(f"DONE {ctl.passed} {ctl.failed}")
            return
        modes = set()
        for layout in LAYOUTS:
            try:
                r = layout_test(ctl, dp, ports, irqs, layout, cfg_path, topo)
                if isinstance(r, tuple):
                    modes |= r[1]
            except Exception as e:
                ctl.check(f"{layout}: ran", False, repr(e))
        try:
            vlan_test(ctl, dp, ports, cfg_path, topo)
        except Exception as e:
            ctl.check("vlan: ran", False, repr(e))
        mode = 'zero-copy' if modes == {True} else 'copy' if modes == {False} else modes
        ctl.send(f"LOG AF_XDP bind mode: {mode}")
        zc = args.get("vmtest.kernel") == "zc"
        if zc:
            # The newer kernel with a device that has the DMA API and queue reset: every
            # socket binds zero-copy (read back from the kernel with XDP_OPTIONS).
            ctl.check("AF_XDP sockets bound in zero-copy mode", modes == {True}, mode)
        else:
            # virtio_net on 6.12 binds AF_XDP in copy mode, and says why: it does not offer
            # the xsk-zerocopy XDP feature (checked per port below).
            ctl.check("AF_XDP sockets bound in copy mode", modes == {False}, mode)
        # What virtio_net's zero-copy binding depends on: the device must offer queue reset
        # (VIRTIO_F_RING_RESET, bit 40: a queue is reset to swap in the XSK pool's buffers).
        for port in ports:
            bits = open(f"/sys/class/net/{port}/device/features").read().strip()
            bit = lambda n: bits[n] if len(bits) > n else "?"
            ctl.send(f"LOG {port} virtio features: RING_RESET(40)={bit(40)} MRG_RXBUF(15)={bit(15)} "
                     f"VERSION_1(32)={bit(32)} ACCESS_PLATFORM(33)={bit(33)}")
            try:
                feats = xdp_features(port)
                ctl.send(f"LOG {port} XDP features (netdev netlink): {feats}")
                if zc:
                    ctl.check(f"{port}: the driver offers xsk-zerocopy",
                              "xsk-zerocopy" in feats and "redirect" in feats, feats)
                else:
                    ctl.check(f"{port}: copy mode because the device lacks xsk-zerocopy",
                              "xsk-zerocopy" not in feats and "redirect" in feats, feats)
            except (OSError, KeyError, struct.error) as e:
                ctl.check(f"{port}: XDP features readable", False, repr(e))
        log = sh("dmesg", check=False)
        for line in log.splitlines():
            if re.search(r"xsk|xdp|zero.?copy", line, re.I):
                ctl.send(f"LOG dmesg: {line.strip()}")
    except Exception as e:
        ctl.check("guest setup", False, repr(e))
    ctl.send(f"DONE {ctl.passed} {ctl.failed}")
    time.sleep(0.5)


if __name__ == "__main__":
    main()
