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

from wire import (GEN_DPORT, GEN_DST, GEN_SPORT, GEN_SRC, GUEST_MACS, HOST_MACS, LAYOUTS, LOAD_FLOWS,
                  rss_input, toeplitz)

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


def sh(*args, check=True, timeout=120):
    """Runs a command to its end, at most `timeout` s: past that, `TimeoutExpired` (naming
    the command) fails the test that ran it, and the guest goes on reporting. A command
    stuck in the kernel cannot be killed; the kernel's hung-task watchdog reports it."""
    r = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
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
        try:
            comm = open(f"/proc/{pid}/task/{tid}/comm").read().strip()
            status = open(f"/proc/{pid}/task/{tid}/status").read()
        except FileNotFoundError:  # a short-lived thread that ended meanwhile
            continue
        if comm.startswith("dp-poll"):
            m = re.search(r"Cpus_allowed_list:\s*(\S+)", status)
            out[int(comm[len("dp-poll"):])] = cpu_list(m.group(1))
    return out


def layout_config(layout, cfg_path, ports, extra=""):
    """The config a layout runs with: `explicit` places each poller where the config says
    (queue 0's on the first CPU, queue 1's on the last); the others plan from the plain one.
    `extra`: more [dataplane] keys (the plain config must carry the same)."""
    if layout != "explicit":
        return cfg_path
    path = "/run/vmtest-explicit.toml"
    text = config(ports, extra).replace("[[pollers]]\nqueues = [0]", "[[pollers]]\ncpu = 0\nqueues = [0]", 1)
    text = text.replace("[[pollers]]\nqueues = [1]", f"[[pollers]]\ncpu = {os.cpu_count() - 1}\nqueues = [1]", 1)
    open(path, "w").write(text)
    return path


def config(ports, extra=""):
    return f"""[dataplane]
{extra}
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


# The NIC models the host boots the guest with: the driver `dataplane topology` must name,
# and each queue's interrupt as /proc/interrupts names it ({port}, {q} filled in).
NICS = {
    "virtio": ("virtio_net", r"virtio\d+-input\.{q}"),
    # igb names a queue's vector TxRx, or rx where receive and transmit have vectors apart.
    "igb": ("igb", r"{port}-(?:TxRx|rx)-{q}"),
}


def booted_nic():
    """The NIC model the host booted this guest with (kernel command line)."""
    args = dict(a.split("=", 1) for a in open("/proc/cmdline").read().split() if "=" in a)
    return args.get("vmtest.nic", "virtio")


def want_queues():
    """The RX queues each NIC has at boot: igb one per CPU (at most 8); virtio-net the
    queues QEMU gave it (4 in the rebalancing boot, else 2)."""
    if booted_nic() == "igb":
        return min(8, os.cpu_count())
    return 4 if "vmtest.rss=" in open("/proc/cmdline").read() else 2


def links_settled(err_path, timeout=60):
    """igb resets its device when a run attaches the first XDP program to a port: the link
    goes down, and comes back from the driver's watchdog. Waits until every port's link is up
    in the kernel and the run's last word on each port's link (if any) is "up", the same for
    two reads half a second apart (the run reads the link's netlink events a moment after the
    kernel sends them), so that a burst sent next is not dropped as link_down. None at once
    on virtio-net (no reset), and once settled; else what was seen at the timeout."""
    if booted_nic() != "igb":
        return None
    ports = [ifname_by_mac(m) for m in GUEST_MACS]

    def seen():
        log = open(err_path).read()
        out = {}
        for p in ports:
            said = re.findall(rf"port {re.escape(p)}: link (up|down)", log)
            out[p] = (open(f"/sys/class/net/{p}/operstate").read().strip(), said[-1] if said else None)
        return out

    def settled(s):
        return all(state == "up" and said in (None, "up") for state, said in s.values())
    deadline = time.time() + timeout
    while time.time() < deadline:
        if settled(seen()):
            time.sleep(0.5)
            if settled(seen()):
                return None
        time.sleep(0.1)
    return f"links not settled in {timeout} s (operstate, the run's last link line): {seen()}"


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
        driver, irq_name = NICS[booted_nic()]
        ctl.check(f"topology: {port} driver", iface["driver"] == driver, iface["driver"])
        want = want_queues()
        ctl.check(f"topology: {port} has {want} RX queues", iface["rx_queues"] == want, iface["rx_queues"])
        for q, entry in enumerate(iface["queue_irqs"]):
            irq = (entry or {}).get("Irq", {}).get("irq")
            name = names.get(irq, "")
            pattern = irq_name.format(port=re.escape(port), q=q)
            ctl.check(f"topology: {port} queue {q} IRQ {irq} is {name}",
                      re.fullmatch(pattern, name) is not None, f"expected {pattern}")
            if irq is not None:
                ctl.check(f"topology: {port} queue {q} IRQ CPUs read back",
                          entry["Irq"]["cpus"] == irq_affinity(irq),
                          f"{entry['Irq']['cpus']} vs /proc {irq_affinity(irq)}")
        ctl.check(f"topology: {port} NUMA node (QEMU's PCI bus has none)",
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
                          + irq_args(topo), capture_output=True, text=True, timeout=120)


def stop_run(proc):
    """Stops a running dataplane as an operator would (SIGINT: it restores and writes its
    summary); killed if it has not ended within 60 s."""
    proc.send_signal(signal.SIGINT)
    try:
        proc.wait(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()


def start_run(dp, layout, cfg_path, topo, tag, extra=()):
    """Starts `dataplane run --layout L --apply-irq`; returns (process, summary path), or
    (None, the end of its log) when it did not get as far as attaching within 120 s."""
    summary_path = f"/run/{tag}-{layout}.json"
    err_path = f"/run/{tag}-{layout}.err"
    proc = subprocess.Popen(
        [dp, "run", "--config", cfg_path, "--layout", layout, "--apply-irq", "--duration", "300",
         "--interval", "0", "--json", summary_path] + irq_args(topo) + list(extra),
        stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    deadline = time.time() + 120
    # The run's own "attached xdp_steer ..." line comes last in its setup, after the IRQs
    # are moved (each port's "XDP attached native" line comes before them).
    while "attached xdp_steer" not in open(err_path).read():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            return None, open(err_path).read()[-500:]
        time.sleep(0.5)
    why = links_settled(err_path)
    if why:
        stop_run(proc)
        return None, why
    return proc, summary_path


def layout_test(ctl, dp, ports, irqs, layout, cfg_path, topo, extra="", tag="test"):
    cfg_path = layout_config(layout, cfg_path, ports, extra)
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
    proc, summary_path = start_run(dp, layout, cfg_path, topo, tag)
    if proc is None:
        return ctl.check(f"{layout}: starts", False, summary_path)
    if tag != "test":
        layout = f"{layout} ({tag})"
    try:
        return layout_checks(ctl, proc, summary_path, ports, irqs, layout, entries, all_irqs, before)
    finally:
        if proc.poll() is None:  # an exception on the way: stop it, or it holds the NICs
            stop_run(proc)


def layout_checks(ctl, proc, summary_path, ports, irqs, layout, entries, all_irqs, before):
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
    ctl.send(f"READY {layout.replace(' ', '-')} {BURST} {FLOWS}")
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
    run_checks(ctl, layout, s, ports)
    modes = {setup["zerocopy"] for setup in s["setup"]}
    ctl.send(f"RAN {layout.split()[0]}")
    return s, modes


# Positions in the summary's counter arrays (dataplane::stats::Counter).
BATCHES, TX_WAKEUPS, FILL_WAKEUPS, IDLE_SLEEPS = 4, 5, 6, 10
FRAMES_RECLAIMED, FRAMES_MISPLACED = 19, 20


def run_checks(ctl, name, s, ports):
    """What every run in the guest must show besides forwarding: each port's program attached
    in the driver (native), read back from the kernel; the wakeups the rings asked for; and
    every frame home once the sockets closed, the driver's posted buffers included."""
    att = {a["ifname"]: a for a in s["attached"]}
    for port in ports:
        a = att.get(port, {})
        ctl.check(f"{name}: {port} program attached native, ours (read back from the kernel)",
                  a.get("mode") == "native" and a.get("ours") is True, a)
    zc = all(st["zerocopy"] for st in s["setup"])
    held = sum(r["frames"]["held"] for r in s["reports"])
    home = all(r["frames"]["free_after_close"] == r["frames"]["total"] for r in s["reports"])
    ctl.check(f"{name}: every frame home after the sockets closed ({held} were held by the kernel)",
              home and s["frames_ok"], [r["frames"] for r in s["reports"]])
    c = s["totals"]["counters"]
    if zc:
        # virtio_net's zero-copy receive never sets the fill ring's need_wakeup flag (its
        # refill runs from NAPI), so a poller that follows the flag makes no fill wakeups;
        # its transmit always sets the TX flag: every flush kicks.
        ctl.check(f"{name}: the driver holds posted receive buffers at stop (zero-copy)", held > 0, held)
        # The poller wakes the fill ring only when the driver sets the flag (when its
        # buffers ran out), never per batch: a handful over thousands of bursts.
        ctl.check(f"{name}: fill-ring wakeup syscalls only when the driver asked, not per burst",
                  c[RX_PACKETS] > 0 and c[FILL_WAKEUPS] * 20 < c[BATCHES],
                  f"fill wakeups {c[FILL_WAKEUPS]}, RX bursts {c[BATCHES]}, rx {c[RX_PACKETS]}")
        # virtio_net leaves the TX flag set: the poller kicks after putting frames on the
        # ring and when the device completed some, not on every pass while its queue is full
        # (before: 456,664 kicks for 8,000 frames).
        ctl.check(f"{name}: TX kicks as the ring asked, not on every pass",
                  0 < c[TX_WAKEUPS] <= 3 * c[BATCHES],
                  f"TX kicks {c[TX_WAKEUPS]}, RX bursts {c[BATCHES]}, tx {c[TX_PACKETS]}")
    ctl.check(f"{name}: pollers slept and traffic woke them", c[IDLE_SLEEPS] > 0 and c[RX_PACKETS] > 0,
              f"idle sleeps {c[IDLE_SLEEPS]}")


def bind_mode_check(ctl, name, s, zerocopy):
    """Every socket of the run bound in the mode it is meant to: a silent fall back to copy
    would skip a zero-copy run's own checks."""
    modes = [st["zerocopy"] for st in s["setup"]]
    ctl.check(f"{name}: every socket bound {'zero-copy' if zerocopy else 'in copy mode'}",
              len(modes) > 0 and all(m == zerocopy for m in modes), modes)


def xdp_attached(port):
    """What `ip link` says is attached to the port (None: nothing)."""
    return json.loads(sh("ip", "-d", "-j", "link", "show", "dev", port))[0].get("xdp")


# Index of pass_vlan in the steering program's counters (bpf::STEER_STAT_NAMES).
PASS_VLAN = 6


def vlan_test(ctl, dp, ports, cfg_path, topo):
    """A VLAN sub-interface on a dataplane port: the steering program hands tagged frames to
    the kernel (`pass_vlan`), whose 802.1Q device answers a ping tagged from the host. The host
    has no 802.1Q module, so the test is here, where the guest kernel has one."""
    port = ports[0]
    r = subprocess.run(["ip", "link", "add", "link", port, "name", "vl10", "type", "vlan", "id", "10"],
                       capture_output=True, text=True, timeout=60)
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
        stop_run(proc)
        sh("ip", "link", "del", "vl10", check=False)
    ctl.check("vlan: the sub-interface answered pings tagged 10 with the dataplane attached",
              replies >= 3, f"{replies} of 5 echo replies")
    s = json.load(open(summary_path))
    passed = s["steer"][0][1][PASS_VLAN]
    ctl.check("vlan: the steering program passed the tagged frames to the kernel", passed >= 5,
              f"pass_vlan {passed}")


def kernel_vlan_test(ctl, repo):
    """tests/kernel_vlan.rs, where the kernel has 802.1Q (the host that builds it has none):
    the kernel's VLAN devices found by the dataplane and routed with real clients, on a netns
    testbed of veths inside the guest. DATAPLANE_REQUIRE_8021Q makes it fail without 802.1Q."""
    deps = os.path.join(repo, "target", "release", "deps")
    bins = [os.path.join(deps, f) for f in os.listdir(deps)
            if re.fullmatch(r"kernel_vlan-[0-9a-f]+", f)]
    bins = [b for b in bins if os.access(b, os.X_OK)]
    if not ctl.check("kernel vlan: the test binary is built", bool(bins), deps):
        return
    env = dict(os.environ, DATAPLANE_REQUIRE_8021Q="1")
    start = time.time()
    r = subprocess.run([max(bins, key=os.path.getmtime), "--test-threads", "1", "--nocapture"],
                       capture_output=True, text=True, env=env, timeout=600,
                       cwd=os.path.join(repo, "tests"))
    out = r.stdout + r.stderr
    if r.returncode != 0:
        for line in out.splitlines()[-60:]:
            ctl.send(f"LOG kernel vlan: {line}")
    ctl.check("kernel vlan: the kernel's VLAN devices routed by the dataplane with real clients "
              "(tests/kernel_vlan.rs in the guest)",
              r.returncode == 0 and "1 passed" in out, f"rc {r.returncode}, {time.time() - start:.0f} s")


def write_config(ports, extra, tag):
    path = f"/run/vmtest-{tag}.toml"
    open(path, "w").write(config(ports, extra))
    return path


def zerocopy_refused_test(ctl, dp, ports):
    """Where the driver cannot bind zero-copy (6.12's virtio_net), `socket_mode = "zerocopy"`
    refuses to start, naming the bind and the kernel's errno, and attaches nothing."""
    path = write_config(ports, 'socket_mode = "zerocopy"', "zc-refused")
    r = subprocess.run([dp, "run", "--config", path, "--duration", "2", "--interval", "0"],
                       capture_output=True, text=True, timeout=120)
    ctl.check('socket_mode = "zerocopy" refused where the driver has no zero-copy, with the kernel\'s reason',
              r.returncode != 0 and "zero-copy" in r.stderr and "os error" in r.stderr,
              r.stderr.strip().splitlines()[-1:] if r.stderr else r.returncode)
    ctl.check("zerocopy refused: nothing attached", all(xdp_attached(p) is None for p in ports),
              [xdp_attached(p) for p in ports])


def wait_log(path, text, timeout, times=1):
    """Waits until the dataplane's log at `path` holds `text` `times` times; true if it did."""
    deadline = time.time() + timeout
    while open(path).read().count(text) < times:
        if time.time() > deadline:
            return False
        time.sleep(0.1)
    return True


def link_flap_test(ctl, dp, ports, topo, extra, name):
    """Traffic flowing while the egress port goes down and comes back up: frames forwarded to
    it meanwhile are dropped as link_down, then a counted burst arrives whole; at stop every
    frame is home and nothing is left attached."""
    path = write_config(ports, extra, name.replace(" ", "-"))
    proc, summary_path = start_run(dp, "unpinned", path, topo, name.replace(" ", "-"))
    if proc is None:
        return ctl.check(f"{name}: starts", False, summary_path)
    import threading
    down = threading.Timer(1.0, lambda: sh("ip", "link", "set", ports[1], "down"))
    up = threading.Timer(1.8, lambda: sh("ip", "link", "set", ports[1], "up"))
    try:
        down.start()
        up.start()
        ctl.send(f"LOAD {name.replace(' ', '-')}-flap 3 2000")
        sent, received = map(int, ctl.recv(180).split()[1:3])
        up.join()
        # The control thread has seen the carrier back (the table forwards to it again).
        back = wait_log(f"/run/{name.replace(' ', '-')}-unpinned.err",
                        f"port {ports[1]}: link up: forwarding resumes", 30)
        ctl.check(f"{name}: the port's return seen", back)
        ctl.send(f"READY {name.replace(' ', '-')}-after {BURST} {FLOWS}")
        sent2, received2 = map(int, ctl.recv(120).split()[1:3])
    finally:
        down.cancel()
        up.cancel()
        sh("ip", "link", "set", ports[1], "up", check=False)
        stop_run(proc)
    s = json.load(open(summary_path))
    link_down = s["drops_by_reason"].get("link_down", 0)
    ctl.check(f"{name}: frames for the downed port dropped as link_down while it was down",
              link_down > 0 and received < sent, f"sent {sent}, received {received}, link_down {link_down}")
    ctl.check(f"{name}: after the link came back, a counted burst arrived whole",
              sent2 == BURST and received2 == sent2, f"{received2} of {sent2}")
    run_checks(ctl, name, s, ports)
    ctl.check(f"{name}: nothing attached after the stop", all(xdp_attached(p) is None for p in ports),
              [xdp_attached(p) for p in ports])
    return s


def recreate_test(ctl, dp, ports, name, zc, extra=""):
    """The egress NIC's driver unbound and bound again while the dataplane runs: its netdev
    is deleted and created anew (same name), the pollers reopen their sockets on it and take
    back every frame the dead sockets held (in zero-copy, the buffers the driver had posted);
    then a counted burst arrives whole."""
    dev = os.path.basename(os.path.realpath(f"/sys/class/net/{ports[1]}/device"))
    drv = os.path.realpath(f"/sys/class/net/{ports[1]}/device/driver")
    tag = name.replace(" ", "-")
    path = write_config(ports, extra, tag)
    summary_path, err_path = f"/run/{tag}.json", f"/run/{tag}.err"
    proc = subprocess.Popen([dp, "run", "--config", path, "--duration", "300", "--interval", "0",
                             "--json", summary_path], stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    deadline = time.time() + 120
    while "attached xdp_steer" not in open(err_path).read():
        if proc.poll() is not None or time.time() > deadline:
            proc.kill()
            return ctl.check(f"{name}: starts", False, open(err_path).read()[-500:])
        time.sleep(0.5)
    why = links_settled(err_path)
    if why:
        stop_run(proc)
        return ctl.check(f"{name}: links up again after the attach", False, why)
    try:
        open(f"{drv}/unbind", "w").write(dev)
        time.sleep(0.5)
        open(f"{drv}/bind", "w").write(dev)
        deadline = time.time() + 30
        while not os.path.exists(f"/sys/class/net/{ports[1]}") and time.time() < deadline:
            time.sleep(0.2)
        sh("sysctl", "-qw", f"net.ipv6.conf.{ports[1]}.disable_ipv6=1", check=False)
        sh("ip", "addr", "add", "198.19.0.2/16", "dev", ports[1], check=False)
        sh("ip", "link", "set", ports[1], "up", check=False)
        # Picked up: the new sockets bound, the program attached, the port back in the table
        # with its link up.
        def back():
            log = open(err_path).read()
            at = log.find("sockets reopened on the new interface")
            return at >= 0 and ("forwarding resumes (link up)" in log[at:]
                                or f"port {ports[1]}: link up: forwarding resumes" in log[at:])
        while not back() and proc.poll() is None and time.time() < deadline:
            time.sleep(0.1)
        picked = back()
        ctl.check(f"{name}: the new {ports[1]} picked up without a restart", picked,
                  open(err_path).read()[-400:])
        ctl.send(f"READY {tag} {BURST} {FLOWS}")
        sent, received = map(int, ctl.recv(120).split()[1:3])
    finally:
        stop_run(proc)
    s = json.load(open(summary_path))
    c = s["totals"]["counters"]
    ctl.check(f"{name}: a counted burst through the new device arrived whole",
              sent == BURST and received == sent, f"{received} of {sent}")
    ctl.check(f"{name}: the dead sockets' frames came back, none misplaced",
              c[FRAMES_RECLAIMED] > 0 and c[FRAMES_MISPLACED] == 0,
              f"reclaimed {c[FRAMES_RECLAIMED]}, misplaced {c[FRAMES_MISPLACED]}")
    bind_mode_check(ctl, name, s, zc)
    run_checks(ctl, name, s, ports)


FRAG_OK, FRAG_CREATES, ICMP_SENT, ICMP_RATE_LIMITED = 16, 17, 11, 12


def frag_icmp_test(ctl, dp, ports, topo, name, zc, extra=""):
    """The frames the poller takes from its own free list: IPv4 fragments (1400-byte frames
    without DF out of an egress port of MTU 1000: two fragments each, the second built in a
    free-list frame) and ICMP errors (the same frames with DF: fragmentation needed, RFC 1191;
    frames to an address with no route: destination unreachable), sent back out of the
    ingress port. All counted, and every frame home at stop."""
    tag = name.replace(" ", "-")
    path = write_config(ports, extra, tag)
    sh("ip", "link", "set", ports[1], "mtu", "1000")
    wait_carrier(ports)  # igb resets on an MTU change
    proc, summary_path = start_run(dp, "unpinned", path, topo, tag)
    try:
        if proc is None:
            return ctl.check(f"{name}: starts", False, summary_path)
        ctl.send(f"BURST {tag}-frag 500 16 1400 198.19.0.100 nodf")
        sent, received = map(int, ctl.recv(120).split()[1:3])
        ctl.send(f"BURST {tag}-toobig 100 16 1400 198.19.0.100 df")
        sent_b, _ = map(int, ctl.recv(120).split()[1:3])
        ctl.send(f"BURST {tag}-unreachable 100 16 100 203.0.113.9 df")
        sent_u, _ = map(int, ctl.recv(120).split()[1:3])
    finally:
        if proc is not None and proc.poll() is None:
            stop_run(proc)
        sh("ip", "link", "set", ports[1], "mtu", "1500", check=False)
    s = json.load(open(summary_path))
    c = s["totals"]["counters"]
    ctl.check(f"{name}: every 1400-byte frame fragmented in two (RFC 791)",
              c[FRAG_OK] == sent and c[FRAG_CREATES] == 2 * sent and received >= sent,
              f"sent {sent}, frag_ok {c[FRAG_OK]}, fragments {c[FRAG_CREATES]}, first fragments at the sink {received}; "
              f"drops {dict((k, v) for k, v in s['drops_by_reason'].items() if v)}")
    d = s["drops_by_reason"]
    ctl.check(f"{name}: DF frames too big and unroutable ones dropped by reason, each answered "
              "with ICMP within the rate limit",
              d.get("too_big") == sent_b and d.get("no_route") == sent_u and c[ICMP_SENT] > 0
              and c[ICMP_SENT] + c[ICMP_RATE_LIMITED] == sent_b + sent_u,
              f"too_big {d.get('too_big')} of {sent_b}, no_route {d.get('no_route')} of {sent_u}, "
              f"icmp_sent {c[ICMP_SENT]}, rate-limited {c[ICMP_RATE_LIMITED]}")
    bind_mode_check(ctl, name, s, zc)
    run_checks(ctl, name, s, ports)


# Index of rx_chain_buffers and tx_chain_buffers in the summary's counters.
RX_CHAIN_BUFFERS, TX_CHAIN_BUFFERS = 21, 22
# A copy-mode AF_XDP buffer of a 2048-byte UMEM frame holds 2048 - XDP_PACKET_HEADROOM (256)
# bytes of packet: the kernel fills each to that before starting the next.
BUFFER_ROOM = 2048 - 256


def jumbo_test(ctl, dp, ports, topo, name, zc):
    """9000-byte packets through AF_XDP multi-buffer: both NICs at MTU 9000 (virtio_net takes
    the xdp.frags steering program with mergeable receive buffers; the host's taps are at 9000
    too), a counted burst of 9018-byte frames (9000-byte IP packets) arrives whole, each
    packet having crossed the dataplane as a chain of buffers. In the zero-copy guest the
    sockets bind in copy mode for it (virtio_net chains no zero-copy buffers)."""
    tag = name.replace(" ", "-")
    path = write_config(ports, "", tag)
    for port in ports:
        sh("ip", "link", "set", port, "mtu", "9000")
    try:
        proc, summary_path = start_run(dp, "unpinned", path, topo, tag)
        if proc is None:
            return ctl.check(f"{name}: starts", False, summary_path)
        try:
            ctl.send(f"BURST {tag} 500 16 9018 198.19.0.100 df")
            sent, received = map(int, ctl.recv(120).split()[1:3])
        finally:
            stop_run(proc)
    finally:
        for port in ports:
            sh("ip", "link", "set", port, "mtu", "1500", check=False)
    s = json.load(open(summary_path))
    c = s["totals"]["counters"]
    ctl.check(f"{name}: a counted burst of 9018-byte frames arrives whole",
              sent == 500 and received == sent, f"sent {sent}, the sink received {received}")
    # 9018 bytes on the wire are 9014 without the FCS: ceil(9014 / 1792) = 6 buffers, the 5
    # after each first counted as chain buffers.
    per = -(-(9018 - 4) // BUFFER_ROOM)
    ctl.check(f"{name}: each packet crossed the dataplane as a chain of {per} buffers",
              c[RX_PACKETS] == sent and c[RX_CHAIN_BUFFERS] == (per - 1) * c[RX_PACKETS]
              and c[TX_CHAIN_BUFFERS] == c[RX_CHAIN_BUFFERS] and c[TX_PACKETS] == c[RX_PACKETS],
              f"rx {c[RX_PACKETS]} packets + {c[RX_CHAIN_BUFFERS]} chained buffers, "
              f"tx {c[TX_PACKETS]} + {c[TX_CHAIN_BUFFERS]}, drops {s['drops_by_reason']}")
    # virtio_net posts no multi-buffer zero-copy receive buffers: `auto` binds copy here,
    # in both guests.
    bind_mode_check(ctl, name, s, False)
    run_checks(ctl, name, s, ports)


# Index of tx_ring_full_events and completions in the summary's counters.
TX_RING_FULL_EVENTS, COMPLETIONS = 7, 9


def tx_fill_test(ctl, dp, ports, topo, rate, seconds):
    """A TX ring that fills, in zero-copy. The host booted this guest with the egress NIC's
    transmit slowed in QEMU (tx=timer: a few frames per timer tick), so the device completes
    far fewer frames per second than the ingress takes in: its virtqueue fills, then the
    socket's TX ring, and the poller drops what has no room. Every frame taken in is put on
    the TX ring or dropped by reason; every frame put on the ring comes back on the
    completion ring and reaches the sink once (nothing double-freed, nothing sent twice);
    every frame home at stop."""
    name = "TX ring full zero-copy"
    path = write_config(ports, 'socket_mode = "zerocopy"', "tx-fill")
    proc, summary_path = start_run(dp, "unpinned", path, topo, "tx-fill", ("--metrics", "9100"))
    if proc is None:
        return ctl.check(f"{name}: starts", False, summary_path)
    try:
        ctl.send(f"LOADOPEN tx-fill {seconds} {rate}")
        sent = int(ctl.recv(seconds + 120).split()[1])
        # Readiness, not a grace period: every frame put on a TX ring completed by the
        # device (the completions counted reach the frames sent, the same on two reads).
        total = lambda m, n: sum(v for (k, _), v in m.items() if k == n)
        deadline, last = time.time() + 60, None
        while time.time() < deadline:
            m = scrape(only=("dataplane_tx_packets_total", "dataplane_completions_total"))
            now = (total(m, "dataplane_tx_packets_total"), total(m, "dataplane_completions_total"))
            if now[0] > 0 and now[0] == now[1] and now == last:
                break
            last = now
            time.sleep(0.5)
        drained = last is not None and last[0] > 0 and last[0] == last[1]
    finally:
        stop_run(proc)
    c = None
    try:
        s = json.load(open(summary_path))
        c = s["totals"]["counters"]
    finally:
        # The sink is asked for exactly what went on the TX rings: it answers once it has
        # counted that many (or after 60 s with what it has). Asked in any case, so the
        # host's sink never outlives the test.
        ctl.send(f"CLOSE tx-fill {c[TX_PACKETS] if c else 0}")
        received = int(ctl.recv(120).split()[2])
    ctl.check(f"{name}: the device completed every frame put on a TX ring before the stop",
              drained, f"tx {last and last[0]}, completions {last and last[1]}")
    d = s["drops_by_reason"]
    ctl.check(f"{name}: every socket bound zero-copy", all(st["zerocopy"] for st in s["setup"]),
              [st["zerocopy"] for st in s["setup"]])
    ctl.check(f"{name}: the egress fell behind; the poller dropped what had no room, by reason",
              d.get("tx_ring_full", 0) > 0 and c[TX_RING_FULL_EVENTS] > 0,
              f"offered {sent}, taken in {c[RX_PACKETS]}, put on TX {c[TX_PACKETS]}, "
              f"tx_ring_full {d.get('tx_ring_full')} in {c[TX_RING_FULL_EVENTS]} events")
    dropped = sum(d.values())
    ctl.check(f"{name}: every frame taken in was put on a TX ring or dropped by reason",
              c[RX_PACKETS] == c[TX_PACKETS] + dropped,
              f"rx {c[RX_PACKETS]}, tx {c[TX_PACKETS]}, dropped {dropped} {d}")
    ctl.check(f"{name}: every frame put on the TX ring came back on the completion ring once",
              c[COMPLETIONS] == c[TX_PACKETS], f"completions {c[COMPLETIONS]}, tx {c[TX_PACKETS]}")
    ctl.check(f"{name}: the sink got every frame put on the TX ring, once",
              received == c[TX_PACKETS], f"sink {received}, tx {c[TX_PACKETS]}")
    run_checks(ctl, name, s, ports)


def rss_table(port):
    """The port's RSS indirection table as `ethtool -x` prints it (bucket -> queue)."""
    table = []
    for line in sh("ethtool", "-x", port).splitlines():
        m = re.match(r"\s*(\d+):((?:\s+\d+)+)\s*$", line)
        if m:
            table += [int(x) for x in m.group(2).split()]
    return table


def scrape(port=9100, only=None):
    """The run's metrics endpoint, as {(name, labels): value}; with `only`, just the series
    whose names start with one of those (parsing every line is slow on TCG)."""
    import urllib.request
    text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
    out = {}
    for line in text.splitlines():
        if only and not line.startswith(only):
            continue
        m = re.match(r"^([a-z_]+)(?:\{(.*)\})? ([0-9.e+-]+)$", line)
        if m:
            labels = tuple(sorted(re.findall(r'(\w+)="([^"]*)"', m.group(2) or "")))
            out[(m.group(1), labels)] = float(m.group(3))
    return out


def bucket_queues(metrics, port):
    """The table the run says it set on `port`, from its dataplane_rss_bucket_queue gauges."""
    q = {int(dict(l)["bucket"]): int(v) for (n, l), v in metrics.items()
         if n == "dataplane_rss_bucket_queue" and dict(l).get("port") == port}
    return [q[b] for b in sorted(q)]


def rss_config(ports, extra=""):
    """Four pollers, one per queue, rebalancing on (steps every 250-500 ms)."""
    text = config(ports, extra).replace(
        "[[pollers]]\nqueues = [0]\n[[pollers]]\nqueues = [1]\n",
        "".join(f"[[pollers]]\nqueues = [{q}]\n" for q in range(4)))
    # The default floor (min_gap): an even load's noise moves nothing; the skew does.
    text += "\n[rebalance]\nenabled = true\nperiod_ms = 500\nfast_period_ms = 250\n"
    path = "/run/vmtest-rss.toml"
    open(path, "w").write(text)
    return path


def start_rss_run(dp, path, tag):
    """`dataplane run` with metrics on 9100; (process, summary path, log path) once attached."""
    summary_path, err_path = f"/run/{tag}.json", f"/run/{tag}.err"
    proc = subprocess.Popen(
        [dp, "run", "--config", path, "--duration", "300", "--interval", "0", "--metrics", "9100",
         "--json", summary_path], stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    if not wait_log(err_path, "attached xdp_steer", 120):
        proc.kill()
        return None, open(err_path).read()[-500:], err_path
    why = links_settled(err_path)
    if why:
        stop_run(proc)
        return None, why, err_path
    return proc, summary_path, err_path


def rss_test(ctl, dp, ports, rate, seconds, device_hash=True, name=None, extra=""):
    """Live RSS rebalancing on virtio-net with rss=on, 4 queues: each port's table is
    read and journaled, the device-bound program counts buckets by the device's hash (with
    hash=on, the hash the device reports, read by the rx-hash kfunc; with hash=off, the
    device's Toeplitz hash computed in the program by its key), the balancer's moves are in
    the NIC (read back with ethtool -x, the same as the run says), and the NIC's own table
    is back at stop, and after a crash with `dataplane restore`."""
    name = name or "rss rebalancing" + ("" if device_hash else " (hash=off)")
    before = {p: rss_table(p) for p in ports}
    ctl.check(f"{name}: each NIC has a 4-queue indirection table",
              all(len(t) > 0 and set(t) == {0, 1, 2, 3} for t in before.values()),
              {p: len(t) for p, t in before.items()})
    path = rss_config(ports, extra)
    proc, summary_path, err_path = start_rss_run(dp, path, "rss")
    if proc is None:
        subprocess.run([dp, "restore"], capture_output=True, timeout=60)
        return ctl.check(f"{name}: starts", False, summary_path)
    try:
        ctl.check(f"{name}: on for both ports", wait_log(err_path, f"rebalance: on for {ports[0]}, {ports[1]}", 10),
                  open(err_path).read()[-300:])
        # First, on the NIC's own table: a skew the balancer must answer, heavy flows in
        # buckets the default table gives queue 0 (the host's schedule, one phase) and light
        # ones everywhere; its moves come from queue 0's poller.
        ctl.send(f"KEY {rss_key(ports[0])}")
        table0, log_at = rss_table(ports[0]), len(open(err_path).read())
        heavy, moved_from, m, steps_seen = skew(ctl, ports[0], err_path, log_at, "rss-skew", seconds)
        on = sorted({table0[b] for b in heavy})
        moves = m.get(("dataplane_rebalance_moves_total", ()), 0)
        ctl.check(f"{name}: the balancer answered the skew, moving buckets off the loaded queue's poller",
                  on == [0] and moves > 0 and moved_from[:1] == [0] and 2 * moved_from.count(0) >= len(moved_from),
                  f"{moves:.0f} moves; heavy buckets {heavy} on queues {on}; moved from queues {moved_from}; "
                  f"the first steps that moved: {steps_seen[:2]}")
        # Then the host's LOAD_FLOWS flows (wire.py), counted apart (the counters' rise over
        # the load): their buckets by the Toeplitz hash of the port's key (this guest's own
        # computation) must be exactly the buckets counted: the device's hash, or the
        # program's, is the NIC's.
        bucket_counts = lambda m: {int(dict(l)["bucket"]): v for (n, l), v in m.items()
                                   if n == "dataplane_rss_bucket_packets_total" and dict(l).get("port") == ports[0]}
        steer_counts = lambda m: {dict(l)["result"]: v for (n, l), v in m.items()
                                  if n == "dataplane_steer_frames_total" and dict(l).get("port") == ports[0]}
        b0, s0 = bucket_counts(m), steer_counts(m)
        ctl.send(f"LOAD rss {seconds} {rate}")
        sent, received = map(int, ctl.recv(seconds + 120).split()[1:3])
        # The metrics publish every 250 ms: wait until the rebalancer's step count has moved
        # on twice since the load ended, so what is read counts the whole load.
        steps = lambda: scrape().get(("dataplane_rebalance_steps_total", ()), 0)
        first, deadline = steps(), time.time() + 30
        while steps() < first + 2 and time.time() < deadline:
            time.sleep(0.1)
        m = scrape()
        rise = {b: v - b0.get(b, 0) for b, v in bucket_counts(m).items()}
        steer = {k: v - s0.get(k, 0) for k, v in steer_counts(m).items()}
        counted = sum(rise.values())
        key = bytes.fromhex(rss_key(ports[0]))
        size = len(before[ports[0]])
        want = {toeplitz(key, rss_input(GEN_SRC, GEN_DST, GEN_SPORT + k, GEN_DPORT)) % size
                for k in range(LOAD_FLOWS)}
        got = {b for b, v in rise.items() if v > 0}
        ctl.check(f"{name}: the buckets counted are those the key's Toeplitz hash gives the flows sent",
                  got == want, f"{len(want)} buckets by the hash; counted in {len(got)}, "
                  f"{len(got - want)} not by the hash, {len(want - got)} missing; offered {sent}, sink {received}")
        # hash=on: every hash read from the device (none computed); hash=off: every one
        # computed by the program.
        soft = steer.get("rss_soft_hash", 0)
        ctl.check(f"{name}: every redirected packet counted in a bucket by the device's hash"
                  + (", as the device reported it" if device_hash else ", computed by the program"),
                  counted == steer.get("redirected") and steer.get("rss_no_hash") == 0 and counted > 0
                  and soft == (0 if device_hash else counted),
                  f"buckets {counted:.0f}, redirected {steer.get('redirected')}, no hash {steer.get('rss_no_hash')}, "
                  f"computed {soft:.0f}")
        # And the NIC's table is the one the run says it set.
        now = rss_table(ports[0])
        said = bucket_queues(m, ports[0])
        ctl.check(f"{name}: the NIC's table (ethtool -x) is the one the run set, and moved",
                  now == said and now != before[ports[0]],
                  f"{sum(a != b for a, b in zip(now, before[ports[0]]))} of {len(now)} buckets differ from the start; "
                  f"{sum(a != b for a, b in zip(now, said))} differ from the run's")
    finally:
        stop_run(proc)
    log = open(err_path).read()
    ctl.check(f"{name}: the NICs' tables are back at stop",
              all(rss_table(p) == before[p] for p in ports) and "indirection table reset to the default spread, read back" in log,
              [l for l in log.splitlines() if "rss:" in l][-2:])
    s = json.load(open(summary_path))
    r = s.get("rebalance") or {}
    ctl.check(f"{name}: the summary reports the moves and the pollers' busy shares",
              r.get("moves", 0) > 0 and len(r.get("busy", [])) == 4 and r.get("ports") == ports,
              {k: r.get(k) for k in ("steps", "moves", "imbalance", "engaged", "buckets_per_poller")})
    if 'socket_mode = "zerocopy"' in extra:
        bind_mode_check(ctl, name, s, True)
    run_checks(ctl, name, s, ports)
    # A run that dies: the journal has the tables; `dataplane restore` puts them back.
    # The ingress NIC starts from an operator's own table (weights 3:1:1:1, not the default
    # spread): restored as it was, not reset.
    sh("ethtool", "-X", ports[0], "weight", "3", "1", "1", "1")
    before[ports[0]] = rss_table(ports[0])
    proc, tail, err_path = start_rss_run(dp, path, "rss-crash")
    if proc is None:
        # Whatever it left attached goes, or the tests after this one find it.
        subprocess.run([dp, "restore"], capture_output=True, timeout=60)
        return ctl.check(f"{name}: crash run starts", False, tail)
    # Killed while a table differs from the NIC's own (moves can happen to leave a table as
    # it started): up to three loads until one does.
    differs = lambda: any(rss_table(p) != before[p] for p in ports)
    # The heavy flows in buckets both the even spread and this table give queue 0 (its first
    # run of queue-0 buckets): all four on one poller, a skew the balancer answers.
    zero_run = next((b for b, q in enumerate(before[ports[0]]) if q != 0), len(before[ports[0]]))
    if zero_run == 0:
        sh("ethtool", "-X", ports[0], "default", check=False)
        return ctl.check(f"{name}: the operator's table gives bucket 0 to queue 0", False,
                         before[ports[0]][:16])
    try:
        for i in range(3):
            skew(ctl, ports[0], err_path, 0, f"rss-crash{i}", seconds, below=zero_run)
            if differs():
                break
        moved = wait_log(err_path, "bucket(s) moved", 10)
    finally:
        proc.kill()
        proc.wait()
    changed = differs()
    r = subprocess.run([dp, "restore"], capture_output=True, text=True, timeout=60)
    weighted = before[ports[0]] != [i % 4 for i in range(len(before[ports[0]]))]
    ctl.check(f"{name}: after SIGKILL, `dataplane restore` puts the NICs' tables back, "
              f"{ports[0]}'s own weighted table as it was",
              moved and changed and weighted and r.returncode == 0
              and "indirection table restored, read back" in r.stdout
              and all(rss_table(p) == before[p] for p in ports),
              f"moved {moved}, table changed at the kill {changed}; " + " | ".join(r.stdout.strip().splitlines()[-4:]))
    sh("ethtool", "-X", ports[0], "default", check=False)


def skew(ctl, port, err_path, log_at, tag, seconds, below=None):
    """One phase of the host's schedule (KEY sent before): four heavy flows of 1000 frames/s
    in buckets the default table gives queue 0 (each its own bucket), 256 light flows at 500
    frames/s in all.
    Waits for the phase; returns (the heavy buckets, the source queue of each move of
    `port` logged after `log_at`, the metrics after the rebalancer's next two steps, the
    logged steps that moved)."""
    ctl.send(f"SCHEDULE {tag} {seconds} 1000 500 1 0 64" + (f" {below}" if below is not None else ""))
    heavy = [int(b) for b in ctl.recv(60).split()[1].split(",")]
    collected(ctl, tag, [0])
    steps = lambda: scrape(only=("dataplane_rebalance_steps",)).get(("dataplane_rebalance_steps_total", ()), 0)
    first, deadline = steps(), time.time() + 30
    while steps() < first + 2 and time.time() < deadline:
        time.sleep(0.1)
    log = open(err_path).read()[log_at:]
    moved_from = [int(q) for q in re.findall(rf"{re.escape(port)}:\d+ q(\d+)->q\d+", log)]
    # The steps that moved, with the pollers' busy shares they were made on (for a failure).
    steps_seen = [l.split("predicted; ", 1)[-1] for l in log.splitlines() if "bucket(s) moved" in l]
    return heavy, moved_from, scrape(), steps_seen


def rss_key(port):
    """The port's RSS hash key, as hex (`ethtool -x`)."""
    lines = sh("ethtool", "-x", port).splitlines()
    at = next(i for i, l in enumerate(lines) if l.startswith("RSS hash key"))
    return lines[at + 1].strip().replace(":", "")


def by_poller(m, name):
    """{poller: value} of a per-poller metric."""
    return {int(dict(l)["poller"]): v for (n, l), v in m.items()
            if n == name and dict(l).get("poller", "").isdigit()}


def buckets_per_queue(ports):
    """Buckets per queue over the ports' tables, as the NICs have them (ethtool -x)."""
    out = [0, 0, 0, 0]
    for p in ports:
        for q in rss_table(p):
            out[q] += 1
    return out


def start_compare_run(ctl, dp, name, cfg, args):
    """`dataplane run` for one run of the comparison: (process, tag, summary path), or None
    (checked as failed) when it did not attach."""
    tag = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    summary_path, err_path = f"/run/cmp-{tag}.json", f"/run/cmp-{tag}.err"
    proc = subprocess.Popen(
        [dp, "run", "--config", cfg, "--duration", "900", "--interval", "0", "--metrics", "9100",
         "--json", summary_path] + args, stdout=subprocess.DEVNULL, stderr=open(err_path, "w"))
    if not wait_log(err_path, "attached xdp_steer", 120):
        proc.kill()
        ctl.check(f"compare {name}: starts", False, open(err_path).read()[-400:])
        return None
    why = links_settled(err_path)
    if why:
        stop_run(proc)
        ctl.check(f"compare {name}: links up after the attach", False, why)
        return None
    return proc, tag, summary_path


def collected(ctl, tag, default_changes):
    """The host's count of a run's traffic: (offered, sent, received, reordered, each
    phase's start in seconds after the traffic was said to start). Offered: what the
    generators were asked to send; sent falls short of it when the guest's NIC took nothing
    in for a while (the generator waits on a full tap)."""
    ctl.send(f"COLLECT {tag}")
    reply = ctl.recv(120).split()
    sent, received, reordered = map(int, reply[1:4])
    changes = default_changes
    if len(reply) > 4 and reply[4] != "-":
        said = [float(x) for x in reply[4].split(",")]
        # Fewer than asked: the host's phases ended early; the nominal times stand in.
        changes = said if len(said) >= len(default_changes) else default_changes
    return int(reply[5]), sent, received, reordered, changes


def compare_run(ctl, dp, ports, name, cfg, args, load, spread=False):
    """One run of the comparison: the dataplane with `cfg` and `args`, the host's three
    phases of traffic, each poller's busy share sampled about every 0.3 s. `spread`: each
    phase's heavy flows one on each queue (the host's `Schedule`)."""
    phase, heavy, light, size = load
    started = start_compare_run(ctl, dp, name, cfg, args)
    if started is None:
        return None
    proc, tag, summary_path = started
    tids = pollers(proc.pid)
    try:
        ctl.send(f"SCHEDULE {tag} {phase} {heavy} {light} 3 0 {size}" + (" - spread" if spread else ""))
        planned = [[int(b) for b in x.split(",")] for x in ctl.recv(60).split()[1:3]]
        t0 = time.time()
        timeline, last_moves, night0 = [], 0, None
        # A sample every 0.3 s (the metrics publish every 250 ms), so a settled load is seen
        # soon after it settles.
        sampled = ("dataplane_poller_busy_share", "dataplane_rebalance_moves_total",
                   "dataplane_rebalance_poller_buckets")
        rebalancing = "[rebalance]" in open(cfg).read()
        # Samples without the moves metric once it has been published: before its first
        # publication (250 ms) it is not missing yet.
        missing, published = 0, False
        while time.time() - t0 < 3 * phase + 1:
            t = time.time() - t0
            m = scrape(only=sampled)
            busy = by_poller(m, "dataplane_poller_busy_share")
            # A run without the rebalancer has no moves; a run with it must show the
            # metric (a missing one is counted, and fails the run's moves figure).
            moves = m.get(("dataplane_rebalance_moves_total", ()))
            published |= moves is not None
            if moves is None:
                missing += rebalancing and (published or t > 2)
                moves = last_moves
            # Buckets per poller: the rebalancer's own gauge, else the static tables' spread.
            held = by_poller(m, "dataplane_rebalance_poller_buckets") or {p: 64 for p in range(4)}
            timeline.append((round(t, 2), [busy.get(p, 0.0) for p in range(4)], int(moves - last_moves),
                             [int(held.get(p, 0)) for p in range(4)]))
            last_moves = moves
            if t >= 2 * phase + 1 and night0 is None:
                night0 = (time.time(), sum(thread_ns(proc.pid, x) for x in tids), cpu_busy_ns())
            time.sleep(max(0.0, t0 + t + 0.3 - time.time()))
        m = scrape()
        # No night sample (the run ended early): no figure, not a zero.
        night_cpu_ms = (sum(thread_ns(proc.pid, x) for x in tids) - night0[1]) / 1e6 if night0 else None
        night_all_ms = (cpu_busy_ns() - night0[2]) / 1e6 if night0 else None
        night_s = time.time() - night0[0] if night0 else None
        counted = {int(dict(l)["bucket"]): v for (n, l), v in m.items()
                   if n == "dataplane_rss_bucket_packets_total" and dict(l).get("port") == ports[0]}
        buckets = buckets_per_queue(ports)
        offered, sent, received, reordered, changes = collected(ctl, tag, [0, phase, 2 * phase])
    finally:
        stop_run(proc)
    s = json.load(open(summary_path))

    imbalance = lambda lo, hi: window_imbalance(timeline, lo, hi)
    return {
        # Lost: offered and not received, whether the guest's NIC refused it (not sent) or
        # it was dropped inside the guest (sent, not received).
        "name": name, "offered": offered, "sent": sent, "received": received,
        "drops": offered - received if received >= 0 else None,
        "reordered": reordered,
        "moves": int(sum(x[2] for x in timeline)) if not missing else None,
        "changes": changes,
        "imbalance": [imbalance(changes[1] - 5, changes[1]), imbalance(changes[2] - 5, changes[2])],
        # From 2 s after each change to the next: does the balance, once reached, hold?
        "imbalance_after_2s": [imbalance(changes[0] + 2, changes[1]), imbalance(changes[1] + 2, changes[2])],
        "night_cpu_ms": night_cpu_ms, "night_all_cpu_ms": night_all_ms,
        "night_s": night_s, "buckets": buckets, "timeline": timeline,
        "heavy_buckets": planned, "heavy_counted": [counted.get(b, 0) for b in planned[0] + planned[1]],
        "dataplane_drops": sum(s["drops_by_reason"].values()),
        "dataplane_rx": s["totals"]["counters"][RX_PACKETS],
        "dataplane_tx": s["totals"]["counters"][TX_PACKETS],
        "rebalance": {k: v for k, v in (s.get("rebalance") or {}).items()
                      if k in ("steps", "moves", "heavy", "write_errors", "timeline", "recent_moves")},
    }


def window_imbalance(timeline, lo, hi):
    """max/mean of the engaged pollers' (those with buckets) mean busy share over [lo, hi)
    seconds of `timeline` ((t, busy per poller, moves, buckets per poller) samples); None
    where the window has no sample or no load (no figure to judge, never a perfect 0)."""
    rows = [(b, e) for t, b, _, e in timeline if lo <= t < hi]
    if not rows:
        return None
    engaged = [p for p in range(4) if rows[-1][1][p] > 0]
    means = [sum(r[0][p] for r in rows) / len(rows) for p in engaged]
    if not means or sum(means) <= 0:
        return None
    return max(means) / (sum(means) / len(means))


def rebalancer_figures(rb):
    """One rebalancer run's figures for the goals: seconds from each change until the
    engaged pollers' loads were within 1.15 of their mean (None: never in that phase), the
    max/mean from 2 s after each change to the next, and the moves in the last 5 s of
    phases 1 and 2."""
    def settled(lo, hi):
        """Seconds from the change at `lo` (the host started that phase's generators)
        until the engaged pollers' busy shares, two samples averaged, are within 1.15 of
        their mean: the end of the first such window. Each sample is the share over the
        metrics' last publish interval (250 ms) before it, taken every 0.3 s or so."""
        tl = [(t, b, e) for t, b, _, e in rb["timeline"] if lo <= t < hi]
        for i in range(len(tl) - 1):
            engaged = [p for p in range(4) if tl[i + 1][2][p] > 0]
            means = [(tl[i][1][p] + tl[i + 1][1][p]) / 2 for p in engaged]
            if means and sum(means) > 0 and max(means) / (sum(means) / len(means)) <= 1.15:
                return round(tl[i + 1][0] - lo, 2)
        return None
    ch = rb["changes"]
    late = sum(m for t, _, m, _ in rb["timeline"] if (ch[1] - 5 <= t < ch[1]) or (ch[2] - 5 <= t < ch[2]))
    return {"settled": [settled(ch[0], ch[1]), settled(ch[1], ch[2])],
            "held": rb["imbalance_after_2s"], "late_moves": late}


def median(xs):
    """The median of `xs` (the mean of the middle two for an even count)."""
    v = sorted(xs)
    mid = len(v) // 2
    return v[mid] if len(v) % 2 else (v[mid - 1] + v[mid]) / 2


def night_run(ctl, dp, ports, name, cfg, load):
    """The comparison's night alone (the light flows at 1/8), with pollers that busy-poll:
    each poller's CPU time per second over 5 s once the rebalancer has packed the load."""
    phase, heavy, light, size = load
    started = start_compare_run(ctl, dp, name, cfg, [])
    if started is None:
        return None
    proc, tag, summary_path = started
    tids = pollers(proc.pid)
    try:
        ctl.send(f"SCHEDULE {tag} {phase} {heavy} {light} 3 2 {size}")
        ctl.recv(60)
        t0 = time.time()
        # Measured once the load is packed (the rebalancer's engaged gauge at 1; static RSS
        # has no rebalancer and nothing to wait for), over the same 5 s for every run.
        engaged = lambda: scrape(only=("dataplane_rebalance_pollers_engaged",)).get(
            ("dataplane_rebalance_pollers_engaged", ()), 1)
        while time.time() < t0 + phase - 6 and engaged() != 1:
            time.sleep(0.2)
        w0, cpu0 = time.time(), [thread_ns(proc.pid, x) for x in tids]
        time.sleep(5)
        w1, cpu1 = time.time(), [thread_ns(proc.pid, x) for x in tids]
        m = scrape()
        buckets = buckets_per_queue(ports)
        _, sent, received, reordered, _ = collected(ctl, tag, [0])
    finally:
        stop_run(proc)
    return {
        "name": name, "sent": sent, "received": received, "reordered": reordered,
        "seconds": round(w1 - w0, 2), "buckets": buckets,
        "engaged": m.get(("dataplane_rebalance_pollers_engaged", ()), 4),
        "cpu_ms_per_s": [round((b - a) / 1e6 / (w1 - w0), 1) for a, b in zip(cpu0, cpu1)],
    }


def compare_setup(ctl, ports):
    """UDP flows hashed on addresses and ports, and the RSS key sent to the host (it picks
    the heavy flows with it)."""
    port = ports[0]
    sh("ethtool", "-N", port, "rx-flow-hash", "udp4", "sdfn", check=False)
    fields = sh("ethtool", "-n", port, "rx-flow-hash", "udp4", check=False)
    ctl.check("compare: UDP flows hashed on addresses and ports", "L4 bytes 0 & 1" in fields,
              " ".join(fields.split()))
    ctl.send(f"KEY {rss_key(port)}")


def four_pollers(ports, ring=512):
    """The comparison's config without rebalancing: one poller per queue, `ring` entries in
    each of its rings."""
    four = config(ports).replace(
        "[[pollers]]\nqueues = [0]\n[[pollers]]\nqueues = [1]\n",
        "".join(f"[[pollers]]\nqueues = [{q}]\n" for q in range(4))).replace(
        "ring_size = 512\n", f"ring_size = {ring}\n", 1)
    static_cfg = "/run/cmp-static.toml"
    open(static_cfg, "w").write(four)
    return four, static_cfg


def compare_load(spec):
    """PHASExHEAVYxLIGHT[xSIZE[xRING]] as (phase, heavy, light, size); the heavy flows'
    frames are 64 bytes unless SIZE says otherwise."""
    v = [int(x) for x in spec.split("x")]
    return tuple(v[:4]) if len(v) > 3 else (v[0], v[1], v[2], 64)


def compare_ring(spec):
    """The RING of PHASExHEAVYxLIGHTxSIZExRING: the pollers' ring size (512 without it). At
    the few thousand frames/s of this guest a 512-entry ring buffers 100 ms or more, where a
    hardware NIC's at line rate buffers well under 1 ms: a smaller ring brings the time a
    queue can absorb while its poller is held up closer to that."""
    v = [int(x) for x in spec.split("x")]
    return v[4] if len(v) > 4 else 512


def tune_test(ctl, dp, ports, spec):
    """make rebalance-compare's first boot: `tune` under the first phase's traffic; its pick
    is the best static layout. A boot of its own: each layout is an attach and a detach
    under traffic, and TCG has crashed the 6.12 guest there (an int3 in the XDP
    dispatcher's code patching, bpf_dispatcher_xdp_func), which the host then retries."""
    _, heavy, light, size = compare_load(spec)
    compare_setup(ctl, ports)
    _, static_cfg = four_pollers(ports, compare_ring(spec))
    ctl.send(f"SCHEDULE tune 30 {heavy} {light} 1 0 {size}")
    ctl.recv(60)
    t = subprocess.run([dp, "tune", "--config", static_cfg, "--window", "2", "--apply-irq",
                        "--layouts", "irq-core,spread,unpinned", "--json", "/run/tune.json"],
                       capture_output=True, text=True, timeout=400)
    ctl.send("COLLECT tune")
    ctl.recv(120)
    best = None
    try:
        best = json.load(open("/run/tune.json")).get("recommended")
    except (OSError, ValueError):
        pass
    ctl.check("compare: tune recommended a layout under the skewed traffic", best is not None,
              best or t.stderr.strip()[-300:])
    ctl.send("RESULTS " + json.dumps({"tune": best}))


# The comparison's run with each phase's heavy flows one on each queue under static RSS.
EVEN = "static RSS, heavy flows one per queue (even placement)"


def goal_checks(st, sc, rebalanced, night, even=None):
    """The comparison's goals, judged on the rebalancer's runs (`rebalanced`, each with its
    `goal_figures`) against static RSS (`st`), the target_load run (`sc`) and the busy-polling
    nights: (text, met, detail) each. A figure that is missing fails its goal. `even`: the
    run whose heavy flows were spread from the first frame (`EVEN`), reported beside the
    drops goal: what the placement a balancer aims at loses there with nothing to wait for
    (a reference, not a bound: one run, on a host whose speed drifts)."""
    figures = [rb["goal_figures"] for rb in rebalanced]

    def each(key, shown):
        """Every run's figure for `key`, named by its run."""
        return "; ".join(f"{rb['name']}: {shown(f[key])}" for rb, f in zip(rebalanced, figures))
    inf = float("inf")
    settle = [max(x if x is not None else inf for x in f["settled"]) for f in figures]
    # A window without a figure counts as not met (inf), never as a perfect 0.
    held = [max(x if x is not None else inf for x in f["held"]) for f in figures]
    late = [f["late_moves"] for f in figures]
    drops = [rb["drops"] if rb["drops"] is not None else inf for rb in rebalanced]
    static_drops = st["drops"] if st["drops"] is not None else 0
    # The goal is measured only where the load overloaded static RSS: it lost at least 1%
    # of what was offered. Below that (or with no count) it is "not measured", never met.
    offered = st.get("offered") or 0
    overloaded = offered > 0 and static_drops >= 0.01 * offered
    n = len(figures)
    met = lambda xs, ok: f"{sum(1 for x in xs if ok(x))} of {n} runs"
    checks = [
        (f"max/mean poller load <= 1.15 within 2 s of each change (median of {n} runs)",
         median(settle) <= 2, f"median {median(settle) if median(settle) < inf else 'never'} s, met in {met(settle, lambda x: x <= 2)}; "
         + each("settled", lambda v: " / ".join(f"{x} s" if x is not None else "never" for x in v))),
        (f"and it holds: max/mean over the rest of each phase (from 2 s after the change) <= 1.15 (median of {n} runs)",
         median(held) <= 1.15, f"median {median(held):.2f}, met in {met(held, lambda x: x <= 1.15)}; "
         + each("held", lambda v: " / ".join(f"{x:.2f}" if x is not None else "no figure" for x in v))),
        # Judged only where static RSS lost something: 0 against 0 says nothing, and a
        # missing count (a sink that failed) is no figure.
        (f"drops <= 1% of static RSS's (median of {n} runs)",
         overloaded and median(drops) <= 0.01 * static_drops,
         f"median {median(drops)}, each {' / '.join(map(str, drops))}, against {st['drops']} of {offered} offered"
         + ("" if overloaded else " (NOT MEASURED: static RSS lost under 1% of what was offered, or its count "
            "is missing: this load did not overload it)")
         + even_detail(even, static_drops, drops)),
        (f"no oscillation: under 1 move per 10 s after convergence (last 5 s of phases 1 and 2; median of {n} runs)",
         median(late) < 1, f"median {median(late)}, met in {met(late, lambda x: x < 1)}; "
         + each("late_moves", str)),
    ]
    night_buckets = [b for b in sc["buckets"] if b]
    night_figures = [sc["night_cpu_ms"], st["night_cpu_ms"], sc["night_all_cpu_ms"], st["night_all_cpu_ms"]]
    fig = lambda x: "no figure" if x is None else f"{x:.0f}"
    checks += [
        ("at low load, all buckets on one poller (target_load 0.7)", len(night_buckets) == 1, sc["buckets"]),
        # Reported, not a goal; but reported it must be: every figure measured.
        ("CPU at night with target_load 0.7 against static RSS, measured", all(x is not None for x in night_figures)
         and st["night_cpu_ms"] > 0,
         f"pollers {fig(sc['night_cpu_ms'])} ms against {fig(st['night_cpu_ms'])} ms, all CPUs "
         f"{fig(sc['night_all_cpu_ms'])} ms against {fig(st['night_all_cpu_ms'])} ms, over {fig(sc['night_s'])} s"),
        ("every rebalancer run's moves counted from its metric",
         all(rb["moves"] is not None for rb in rebalanced), [rb["moves"] for rb in rebalanced]),
    ]
    if even is not None:
        # Reported, not a goal; but reported it must be, where it ran.
        checks.append(("the even placement measured: static RSS with the heavy flows one per queue "
                       "from the first frame", even["drops"] is not None,
                       even_detail(even, static_drops, drops).removeprefix("; ")))
    if len(night) == 2:
        st_cpu, sc_cpu = sum(night[0]["cpu_ms_per_s"]), sum(night[1]["cpu_ms_per_s"])
        checks.append((
            "CPU saved at night by packing, pollers busy-polling (less than static RSS's)",
            sc_cpu < st_cpu,
            f"pollers {sc_cpu:.0f} ms/s {night[1]['cpu_ms_per_s']} with {night[1]['engaged']:.0f} engaged, "
            f"against {st_cpu:.0f} ms/s {night[0]['cpu_ms_per_s']}: "
            f"{(1 - sc_cpu / max(st_cpu, 1e-9)) * 100:.0f}% saved"))
    return checks


def even_detail(even, static_drops, drops):
    """The even placement's loss beside static RSS's and the rebalancer's median, for the
    drops goal's line: what a balancer that reached that placement at once would lose in
    that run's conditions."""
    if even is None:
        return ""
    if even["drops"] is None:
        return "; the even placement: no count"
    lost = even["drops"]
    share = f"{lost / static_drops:.1%} of static RSS's loss" if static_drops else "static RSS lost none"
    return (f"; the even placement (heavy flows one per queue from the first frame) lost {lost} of "
            f"{even['offered']}, {share}; the rebalancer's median less the even placement's: "
            f"{median(drops) - lost:+}")


def compare_test(ctl, dp, ports, spec, best, repeats):
    """make rebalance-compare, the guest side: static RSS, static RSS with the heavy flows
    one per queue (`EVEN`), tune's best layout (`best`, from the first boot), and the
    rebalancer (`repeats` times: its goals are judged on the median of those runs, each
    run's figures reported) and with target_load, each under the host's three phases of
    traffic (the same for all but `EVEN`, whose heavy flows are spread)."""
    load = compare_load(spec)
    phase, heavy, light, _ = load
    compare_setup(ctl, ports)
    four, static_cfg = four_pollers(ports, compare_ring(spec))
    rebal_cfg = "/run/cmp-rebalance.toml"
    open(rebal_cfg, "w").write(four + "\n[rebalance]\nenabled = true\nperiod_ms = 500\n"
                               "fast_period_ms = 250\n")
    scale_cfg = "/run/cmp-rebalance-scale.toml"
    open(scale_cfg, "w").write(four + "\n[rebalance]\nenabled = true\nperiod_ms = 500\n"
                               "fast_period_ms = 250\ntarget_load = 0.7\n")
    runs, rebalanced = [], []
    r = compare_run(ctl, dp, ports, "static RSS", static_cfg, [], load)
    if r:
        runs.append(r)
    even = compare_run(ctl, dp, ports, EVEN, static_cfg, [], load, spread=True)
    if even:
        runs.append(even)
    if best:
        r = compare_run(ctl, dp, ports, f"tune's best layout ({best})", static_cfg,
                        ["--layout", best, "--apply-irq"], load)
        if r:
            runs.append(r)
    for k in range(repeats):
        r = compare_run(ctl, dp, ports, "rebalancer" + (f", repeat {k + 1}" if k else ""),
                        rebal_cfg, [], load)
        if r:
            runs.append(r)
            rebalanced.append(r)
    r = compare_run(ctl, dp, ports, "rebalancer, target_load 0.7", scale_cfg, [], load)
    if r:
        runs.append(r)
    # The night again with busy polling (a poller spins whether frames come or not): what
    # packing saves where pollers do not sleep on their own. A drained poller is parked.
    night = []
    busy = open(static_cfg).read().replace("[dataplane]\n", '[dataplane]\nidle = "busy"\n', 1)
    busy_scale = busy + "\n[rebalance]\nenabled = true\nperiod_ms = 500\nfast_period_ms = 250\ntarget_load = 0.7\n"
    for name, text in (("static RSS, idle busy", busy), ("rebalancer, target_load 0.7, idle busy", busy_scale)):
        path = "/run/cmp-night-" + ("scale" if "rebalance" in text else "static") + ".toml"
        open(path, "w").write(text)
        r = night_run(ctl, dp, ports, name, path, load)
        if r:
            night.append(r)
    goals = []
    named = {x["name"]: x for x in runs}
    ctl.check("compare: the rebalancer ran", bool(rebalanced), f"{len(rebalanced)} of {repeats} runs")
    if rebalanced and "static RSS" in named:
        st = named["static RSS"]
        sc = named.get("rebalancer, target_load 0.7", rebalanced[0])
        for rb in rebalanced:
            ok = all(c > heavy * phase * 0.5 for c in rb["heavy_counted"][:4])
            ctl.check(f"compare: {rb['name']}: the heavy flows were counted in the buckets the host's "
                      "Toeplitz hash named", ok, f"buckets {rb['heavy_buckets']}: {rb['heavy_counted']}")
        for rb in rebalanced:
            rb["goal_figures"] = rebalancer_figures(rb)
        checks = goal_checks(st, sc, rebalanced, night, even)
        for text, ok, detail in checks:
            ctl.check(f"compare goal: {text}", ok, detail)
            goals.append(f"{'met' if ok else 'NOT met'}: {text} ({detail})")
    ctl.send("RESULTS " + json.dumps({"runs": runs, "night": night, "goals": goals}))


def wait_carrier(ports, timeout=30):
    """Waits until every port's link is up (igb notices its link from a 2-second watchdog);
    true if they all came up."""
    deadline = time.time() + timeout
    while not all(open(f"/sys/class/net/{p}/operstate").read().strip() == "up" for p in ports):
        if time.time() > deadline:
            return False
        time.sleep(0.2)
    return True


def igb_even_tables(ctl, ports):
    """igb's own table gives bucket b to queue b * queues / 128 (blocks); the host picks its
    heavy flows by the even spread (bucket b to queue b % queues): set here, each port's own
    table logged first. igb hashes UDP on the addresses alone unless told otherwise; the
    flows here differ by source port, and the steering program hashes the ports too."""
    for port in ports:
        sh("ethtool", "-N", port, "rx-flow-hash", "udp4", "sdfn")
        own = rss_table(port)
        ctl.send(f"LOG {port}: igb's own indirection table, {len(own)} buckets, queue per "
                 f"bucket: {''.join(str(q) for q in own)}")
        sh("ethtool", "-X", port, "equal", str(want_queues()))


def igb_test(ctl, dp, ports, rss):
    """QEMU's igb (Intel 82576) NICs under the zero-copy guest's kernel (igb binds AF_XDP
    zero-copy since Linux 6.14). igb sizes its zero-copy receive buffers in 1 KiB units:
    with 2048-byte frames a buffer holds 1024 bytes, so the runs here take 4096-byte frames
    (3072 bytes), and `auto` with 2048-byte frames must bind copy and say why. Live RSS
    rebalancing on its 4 queues, the hash computed by the steering program (igb has no
    rx-hash kfunc); then with 2 queues the two-poller layouts, the link flap, IPv4 fragments
    and ICMP errors, and the driver unbound and bound again, every socket asserted
    zero-copy."""
    rate, seconds = map(int, rss.split("x"))
    ctl.check("igb: links up", wait_carrier(ports), [open(f"/sys/class/net/{p}/operstate").read().strip() for p in ports])
    for port in ports:
        feats = xdp_features(port)
        ctl.check(f"igb: {port}: the driver offers xsk-zerocopy",
                  "xsk-zerocopy" in feats and "redirect" in feats, feats)
    igb_even_tables(ctl, ports)
    extra = 'socket_mode = "zerocopy"\nframe_size = 4096'
    rss_test(ctl, dp, ports, rate, seconds, device_hash=False, name="igb rss rebalancing zero-copy",
             extra=extra)
    for port in ports:
        sh("ethtool", "-X", port, "default", check=False)
        sh("ethtool", "-L", port, "combined", "2")
    ctl.check("igb: links up with 2 queues", wait_carrier(ports),
              [open(f"/sys/class/net/{p}/operstate").read().strip() for p in ports])
    topo = json.loads(sh(dp, "topology", "--json"))
    queues = [next(i for i in topo["interfaces"] if i["name"] == p)["rx_queues"] for p in ports]
    ctl.check("igb: 2 RX queues per port after ethtool -L combined 2", queues == [2, 2], queues)
    irqs = queue_irqs(topo, ports)
    cfg = write_config(ports, extra, "igb-zc")
    for layout in ("unpinned", "remote-node"):
        r = layout_test(ctl, dp, ports, irqs, layout, cfg, topo, extra=extra, tag="igb zero-copy")
        if isinstance(r, tuple):
            bind_mode_check(ctl, f"{layout} (igb zero-copy)", r[0], True)
    link_flap_test(ctl, dp, ports, topo, extra, "igb link flap zero-copy")
    frag_icmp_test(ctl, dp, ports, topo, "igb fragments and ICMP zero-copy", True, extra)
    # 2048-byte frames, `auto`: MTU 1500 does not fit igb's 1024-byte zero-copy buffer, so
    # the sockets bind in copy mode, the log says why, and 1400-byte frames cross whole.
    name = "igb fragments and ICMP auto 2 KiB frames"
    frag_icmp_test(ctl, dp, ports, topo, name, False)
    log = open(f"/run/{name.replace(' ', '-')}-unpinned.err").read()
    ctl.check(f"{name}: the run says igb's zero-copy buffer is 1024 bytes of a 2048-byte frame",
              "in 1024-byte units" in log and "frame_size = 4096" in log,
              [l for l in log.splitlines() if "socket_mode" in l][:2])
    recreate_test(ctl, dp, ports, "igb recreated port zero-copy", True, extra)


def cost_test(ctl, dp, ports, topo, rate, seconds):
    """Copy against zero-copy on the same guest: CPU per forwarded packet (pollers, and all
    CPUs' interrupt time), one run each under the same paced load. The guest's CPUs are
    emulated (TCG): the ratio says which path costs less here, not what hardware does."""
    costs = {}
    for mode in ("zerocopy", "copy"):
        # Pollers sleep when idle: at a paced load in TCG a spinning poller's CPU time would
        # be its idle spinning, not its work.
        path = write_config(ports, f'socket_mode = "{mode}"\nidle = "sleep"', f"cost-{mode}")
        proc, summary_path = start_run(dp, "unpinned", path, topo, f"cost-{mode}")
        if proc is None:
            return ctl.check(f"cost {mode}: starts", False, summary_path)
        sent, received, pollers_ns, irq_ns = measured_load(ctl, proc, f"cost-{mode}", seconds, rate)
        s = json.load(open(summary_path))
        modes = {st["zerocopy"] for st in s["setup"]}
        ctl.check(f"cost {mode}: bound as asked", modes == {mode == "zerocopy"}, modes)
        per = max(received, 1)
        costs[mode] = (pollers_ns / per, irq_ns / per, received, sent)
        ctl.send(f"LOG cost {mode}: {received} of {sent} forwarded at {rate}/s; pollers "
                 f"{pollers_ns / per:.0f} ns/pkt, interrupts {irq_ns / per:.0f} ns/pkt (TCG: emulated CPUs)")
    z, c = costs["zerocopy"], costs["copy"]
    ratio = (c[0] + c[1]) / max(z[0] + z[1], 1)
    ctl.send(f"ROW cost | copy {c[0] + c[1]:.0f} ns/pkt | zero-copy {z[0] + z[1]:.0f} ns/pkt | copy/zero-copy {ratio:.2f}")
    ctl.check("cost: both modes forwarded the paced load",
              z[2] > 0.9 * z[3] and c[2] > 0.9 * c[3], f"zero-copy {z[2]}/{z[3]}, copy {c[2]}/{c[3]}")


def cpu_busy_ns():
    """Time all CPUs spent not idle (user, system, interrupts; ns, from /proc/stat)."""
    hz = os.sysconf("SC_CLK_TCK")
    f = [int(x) for x in open("/proc/stat").readline().split()[1:9]]
    return (sum(f) - f[3] - f[4]) * 1_000_000_000 // hz


def cpu_irq_ns():
    """Time all CPUs spent in hard and soft interrupts (ns, from /proc/stat)."""
    hz = os.sysconf("SC_CLK_TCK")
    f = open("/proc/stat").readline().split()
    return (int(f[6]) + int(f[7])) * 1_000_000_000 // hz


def thread_ns(pid, tid):
    return int(open(f"/proc/{pid}/task/{tid}/schedstat").read().split()[0])


def pollers(pid):
    out = []
    for t in os.listdir(f"/proc/{pid}/task"):
        try:
            if open(f"/proc/{pid}/task/{t}/comm").read().startswith("dp-poll"):
                out.append(t)
        except FileNotFoundError:  # a short-lived thread that ended meanwhile
            pass
    return out


def measured_load(ctl, proc, name, seconds, rate):
    """Has the host offer `rate` frames/s for `seconds` to the running dataplane `proc`, then
    stops it: (sent, received, the pollers' CPU ns, all CPUs' interrupt ns) over the load."""
    try:
        tids = pollers(proc.pid)
        p0 = sum(thread_ns(proc.pid, t) for t in tids)
        i0 = cpu_irq_ns()
        ctl.send(f"LOAD {name} {seconds} {rate}")
        sent, received = map(int, ctl.recv(seconds + 120).split()[1:3])
        p1 = sum(thread_ns(proc.pid, t) for t in tids)
        i1 = cpu_irq_ns()
    finally:  # stopped whatever happened, or it holds the NICs for the next test
        stop_run(proc)
    return sent, received, p1 - p0, i1 - i0


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
    sent, received, pollers_ns, irq_ns = measured_load(ctl, proc, layout, seconds, rate)
    s = json.load(open(summary_path))
    by_reason = sorted(((v, k) for k, v in s["drops_by_reason"].items() if v), reverse=True)
    drops = f"{sum(v for v, _ in by_reason)}" + (f" (mostly {by_reason[0][1]})" if by_reason else "")
    cpus = ", ".join(str(e["poller_cpu"]) if e["poller_cpu"] is not None else "any" for e in entries)
    irq_cpus = ", ".join(str(e["irq_cpu"]) for e in entries)
    nodes = ", ".join("/".join(str(n) for n, _ in st["umem_nodes"]) for st in s["setup"])
    per = max(received, 1)
    ctl.send(f"ROW {name} | {layout} | {cpus} ({irq_cpus}) | {nodes} | {received / seconds / 1000:.1f} | "
             f"{drops} | {(pollers_ns + irq_ns) / per / 1000:.1f} ({pollers_ns / per / 1000:.1f} / "
             f"{irq_ns / per / 1000:.1f})")
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
        zc = args.get("vmtest.kernel") == "zc"
        def alone(name, test):
            """A boot of its own for one test: run it, report, done."""
            try:
                test()
            except Exception as e:
                ctl.check(f"{name}: ran", False, repr(e))
            ctl.send(f"DONE {ctl.passed} {ctl.failed}")
        rss = args.get("vmtest.rss", "")
        if booted_nic() == "igb" and (rss.startswith("tune:") or rss.startswith("compare:")):
            igb_even_tables(ctl, ports)
        elif booted_nic() == "igb":
            return alone("igb", lambda: igb_test(ctl, dp, ports, rss))
        if rss.startswith("tune:"):
            return alone("tune", lambda: tune_test(ctl, dp, ports, rss[len("tune:"):]))
        if rss.startswith("compare:"):
            _, spec, best, repeats = (rss.split(":") + ["3"])[:4]
            return alone("compare", lambda: compare_test(ctl, dp, ports, spec, best or None, int(repeats)))
        if rss:
            # 4 queues, rss=on, hash=on unless vmtest.rsshash=off.
            rate, seconds = map(int, rss.split("x"))
            device_hash = args.get("vmtest.rsshash", "on") != "off"
            return alone("rss rebalancing", lambda: rss_test(ctl, dp, ports, rate, seconds, device_hash))
        if "vmtest.txfill" in args:
            # The egress NIC's transmit is slowed for every test here.
            rate, seconds = map(int, args["vmtest.txfill"].split("x"))
            return alone("TX ring full", lambda: tx_fill_test(ctl, dp, ports, topo, rate, seconds))
        modes = set()
        for layout in LAYOUTS:
            try:
                r = layout_test(ctl, dp, ports, irqs, layout, cfg_path, topo)
                if isinstance(r, tuple):
                    modes |= r[1]
            except Exception as e:
                ctl.check(f"{layout}: ran", False, repr(e))
        # The checks beyond the layouts run on the first topology the host boots (the second
        # boot is there for the layouts the first cannot place).
        extras = args.get("vmtest.extras", "1") == "1"
        if not extras:
            ctl.send("LOG the checks beyond the layouts ran on the first topology")
        if zc and extras:
            # The suite again with copy forced, on the same zero-copy-capable devices.
            copy_cfg = write_config(ports, 'socket_mode = "copy"', "copy-forced")
            forced = set()
            for layout in LAYOUTS:
                try:
                    r = layout_test(ctl, dp, ports, irqs, layout, copy_cfg, topo,
                                    extra='socket_mode = "copy"', tag="copy forced")
                    if isinstance(r, tuple):
                        forced |= r[1]
                except Exception as e:
                    ctl.check(f"{layout} (copy forced): ran", False, repr(e))
            ctl.check('socket_mode = "copy": every socket bound in copy mode', forced == {False}, forced)
        try:
            if extras:
                vlan_test(ctl, dp, ports, cfg_path, topo)
            if extras and not zc:
                kernel_vlan_test(ctl, a.repo)
        except Exception as e:
            ctl.check("vlan: ran", False, repr(e))
        try:
            if not extras:
                pass
            elif zc:
                link_flap_test(ctl, dp, ports, topo, 'socket_mode = "zerocopy"', "link flap zero-copy")
                if "vmtest.cost" in args:
                    rate, seconds = map(int, args["vmtest.cost"].split("x"))
                    cost_test(ctl, dp, ports, topo, rate, seconds)
            else:
                link_flap_test(ctl, dp, ports, topo, "", "link flap copy")
                zerocopy_refused_test(ctl, dp, ports)
        except Exception as e:
            ctl.check("link flap / socket mode: ran", False, repr(e))
        try:
            if extras:
                frag_icmp_test(ctl, dp, ports, topo, "fragments and ICMP " + ("zero-copy" if zc else "copy"), zc)
        except Exception as e:
            ctl.check("fragments and ICMP: ran", False, repr(e))
        try:
            if extras:
                recreate_test(ctl, dp, ports, "recreated port " + ("zero-copy" if zc else "copy"), zc)
        except Exception as e:
            ctl.check("recreated port: ran", False, repr(e))
        try:
            if extras:
                jumbo_test(ctl, dp, ports, topo, "jumbo frames " + ("zero-copy guest" if zc else "copy"), zc)
        except Exception as e:
            ctl.check("jumbo frames: ran", False, repr(e))
        mode = 'zero-copy' if modes == {True} else 'copy' if modes == {False} else modes
        ctl.send(f"LOG AF_XDP bind mode: {mode}")
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
