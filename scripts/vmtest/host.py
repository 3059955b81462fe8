#!/usr/bin/env python3
"""make vmtest, the host side: boot the guest with real drivers and serve its traffic.

Builds nothing itself (scripts/vmtest/build.sh makes the kernel and initramfs, `make build` the
binaries). It creates two namespaces (gen, sink) and two multi-queue taps, boots QEMU (TCG: no
KVM needed) with the chosen topology and one virtio-net NIC per tap, moves the taps' host ends
into the namespaces, and then does what the guest asks over its second serial port (a unix
socket here):

  guest: READY <name> <count> <flows>   host: sends <count> UDP frames over <flows> flows from
                                         gen into the guest's first NIC, counts what the sink
                                         receives from its second, answers SENT <sent> <received>
  guest: RESULT PASS|FAIL <text>        host: prints it
  guest: DONE <passed> <failed>         host: tears down, exits 0 only when all passed

  guest: BURST <name> <count> <flows> <size> <dst> df|nodf
                                         host: as READY, frames of <size> bytes to <dst>,
                                         with IPv4's don't-fragment bit set or clear
  guest: RAN <layout>                   host: notes that the layout forwarded traffic
  guest: LOADOPEN <name> <seconds> <rate>
                                         host: as LOAD, but answers SENT <sent> -1 with the
                                         sink still counting
  guest: CLOSE <name> <n>               host: waits (up to 60 s) until the sink has counted
                                         <n> frames, stops it, answers SENT <sent> <received>

It boots once per topology (default: 2 sockets x 1 core x 2 threads, then 2 x 2 x 1; one NUMA
node per socket): some layouts exist only on some topologies (same-package needs two cores in
a package, smt-sibling needs SMT), and every layout must have run on one of them.
Everything is torn down at the end (QEMU, taps, namespaces), also on error or timeout.
The zero-copy guest boots once more on the first topology with its egress NIC's transmit
slowed (QEMU's tx=timer): a TX ring that fills (--tx-fill).
Usage: scripts/vmtest/host.py [--timeout S] [--topologies 2x1x2,2x2x1] [--kernels copy,zc]
                              [--cost RATExSECONDS] [--tx-fill RATExSECONDS]
"""
import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time

from wire import (GEN_DPORT, GEN_DST, GEN_SRC, GUEST_MACS, HOST_MACS, LAYOUTS, LOAD_FLOWS,
                  rss_input, toeplitz)

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
DATAPLANE = os.path.join(REPO, "target", "release", "dataplane")
# QEMU as scripts/vmtest/qemu.sh unpacks it (bookworm-backports, never installed): its
# binary, its firmware directories (its own, seabios's, and bookworm's ipxe-qemu option
# ROMs), and its loadable modules.
QEMU_ROOT = os.path.join(REPO, "target", "vm", "qemu")
QEMU = os.path.join(QEMU_ROOT, "usr", "bin", "qemu-system-x86_64")
QEMU_FIRMWARE = [os.path.join(QEMU_ROOT, "usr", "share", "qemu"),
                 os.path.join(QEMU_ROOT, "usr", "share", "seabios"), "/usr/lib/ipxe/qemu"]
QEMU_MODULES = os.path.join(QEMU_ROOT, "usr", "lib", "x86_64-linux-gnu", "qemu")
QEMU_MACHINE = ["-machine", os.environ["VMTEST_MACHINE"]] if os.environ.get("VMTEST_MACHINE") else []
# The guests scripts/vmtest/build.sh makes, and the virtio-net-pci properties each boots with.
# zc: what virtio_net's AF_XDP zero-copy bind needs of the device: the DMA API in the guest
# (VIRTIO_F_ACCESS_PLATFORM: iommu_platform, which a modern-only device must carry; no vIOMMU
# is needed) and per-queue reset (VIRTIO_F_RING_RESET: the queue is reset to take the XSK
# pool's buffers).
KERNELS = {
    "copy": "",
    "zc": ",disable-legacy=on,iommu_platform=on,queue_reset=on",
}
# The zero-copy guest's NICs transmit from a timer (every 150 us, QEMU's default period) and
# not from a bottom half (tx=bh, the default): under QEMU 10, a zero-copy socket's bind
# (which resets the TX queue) left the queue untransmitted in about half the boots with
# tx=bh (frames on the ring, kicked, never at the tap: 0 of 2000 at the sink, in 3 of 6
# boots, several binds each; QEMU 7.2 never did), and in none of 3 boots with tx=timer.
ZC_TX = ",tx=timer"
# The egress NIC of the zero-copy guest's TX-ring-full boot: QEMU transmits from a timer, one
# frame per queue every 2 ms (x-txburst frames per x-txtimer ns, and a second flush when the
# first was short), some hundreds of frames/s, below what the guest takes in.
SLOW_TX = ",tx=timer,x-txtimer=2000000,x-txburst=1"
# Extra virtio-net-pci properties on top of the kernel's, e.g. ",mrg_rxbuf=off".
VIRTIO_EXTRA = os.environ.get("VMTEST_VIRTIO", "")


def run(*args, check=True, ns=None):
    cmd = (["ip", "netns", "exec", ns] if ns else []) + list(args)
    r = subprocess.run(cmd, capture_output=True, text=True)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)}: {r.stderr.strip()}")
    return r.stdout


def write(path, value):
    """Writes `value` to a kernel file, raising on a refusal (a plain open().write()
    reports it only when the file object is collected, and then only as a warning)."""
    with open(path, "w") as f:
        f.write(str(value))


class VcpuQuota:
    """Slower emulated cores while traffic runs: each of a QEMU's vCPU threads in a cgroup
    (v1 cpu controller) of its own, allowed `percent` of one host CPU (quota per 10 ms).
    The host offers some thousands of frames/s at most, well under what one TCG vCPU with
    its full share forwards; slower cores were to make the heavy flows' queue more than
    one poller can carry, so that static RSS drops. What it showed instead: a queue that
    fills stalls whole tap queues in QEMU's software RSS (see `Bed.up`), and the loss
    measures that (docs/REBALANCE.md). QEMU's own threads (the virtio-net device, RSS
    steering) are not limited, nor is the host's generator."""

    ROOT = "/sys/fs/cgroup/cpu"
    PERIOD_US = 10000

    def __init__(self, qemu_pid, percent):
        self.pid, self.percent, self.groups = qemu_pid, percent, []

    def vcpu_threads(self):
        """(tid, name) of each vCPU thread (named "CPU n/TCG" under -name ...,debug-threads=on)."""
        out = []
        for tid in os.listdir(f"/proc/{self.pid}/task"):
            try:
                name = open(f"/proc/{self.pid}/task/{tid}/comm").read().strip()
            except OSError:
                continue
            if name.startswith("CPU ") and name.endswith("/TCG"):
                out.append((int(tid), name))
        return sorted(out, key=lambda t: t[1])

    def apply(self):
        if not os.path.exists(os.path.join(self.ROOT, "cpu.cfs_quota_us")):
            raise RuntimeError(f"--vcpu-quota needs the cgroup v1 cpu controller at {self.ROOT}")
        threads = self.vcpu_threads()
        if not threads:
            raise RuntimeError(f"--vcpu-quota: no vCPU threads found in QEMU (pid {self.pid})")
        quota = max(1000, self.PERIOD_US * self.percent // 100)
        for tid, _ in threads:
            group = os.path.join(self.ROOT, f"vmtest-{self.pid}-{tid}")
            os.makedirs(group, exist_ok=True)
            self.groups.append((group, tid, self.cgroup_of(tid)))
            write(os.path.join(group, "cpu.cfs_period_us"), self.PERIOD_US)
            write(os.path.join(group, "cpu.cfs_quota_us"), quota)
            write(os.path.join(group, "tasks"), tid)
        return len(threads), quota

    def cgroup_of(self, tid):
        """The cpu controller's group thread `tid` is in (its path under ROOT)."""
        for line in open(f"/proc/{self.pid}/task/{tid}/cgroup"):
            _, controllers, path = line.rstrip("\n").split(":", 2)
            if "cpu" in controllers.split(","):
                return path
        return "/"

    def throttled_ms(self):
        """How long the vCPUs were held back in all (ms), from the groups' cpu.stat."""
        total = 0
        for g, _, _ in self.groups:
            try:
                for line in open(os.path.join(g, "cpu.stat")):
                    if line.startswith("throttled_time "):
                        total += int(line.split()[1])
            except OSError:
                pass
        return total // 1_000_000

    def remove(self):
        """The threads back in the groups they came from, the groups gone (also when QEMU
        has exited); a group that cannot go yet is said, and tried again at the next call."""
        left = []
        for g, tid, home in self.groups:
            try:
                write(os.path.join(self.ROOT, home.lstrip("/"), "tasks"), tid)
            except OSError:
                pass  # the thread has exited
            try:
                os.rmdir(g)
            except FileNotFoundError:
                pass
            except OSError as e:
                print(f"vmtest: vcpu quota: removing {g}: {e}", file=sys.stderr)
                left.append((g, tid, home))
        self.groups = left


class Bed:
    """Namespaces, taps and the QEMU process of one vmtest run (unique names)."""

    def __init__(self, args, retry=False):
        # A retried boot gets names of its own: nothing the crashed one left behind (a tap
        # or namespace the kernel is still tearing down) can stand in for its devices.
        self.tag = f"vt{os.getpid() % 100000}{'r' if retry else ''}"
        self.gen, self.sink = f"{self.tag}g", f"{self.tag}s"
        self.taps = (f"{self.tag}a", f"{self.tag}b")
        self.dir = tempfile.mkdtemp(prefix=f"{self.tag}-")
        self.ctl_path = os.path.join(self.dir, "ctl.sock")
        self.console = os.path.join(self.dir, "console.log")
        self.qemu = None
        self.quota = None  # a VcpuQuota while the comparison's traffic runs
        self.args = args
        self.checks_failed = 0
        # The boot ended with the guest silent for STALL_SILENCE s or more (at the boot's
        # deadline, or after an RCU stall report), not on DONE.
        self.went_silent = False
        self.heard_at = 0  # the console's length when the guest last spoke
        self.failures = []  # the guest's failed checks, for the run's closing summary
        self.vm = os.path.join(REPO, "target", "vm", args.kernel)

    def up(self):
        for ns in (self.gen, self.sink):
            run("ip", "netns", "add", ns)
        for tap, mac in zip(self.taps, HOST_MACS):
            # igb's backend is one tap queue: QEMU opens it without IFF_MULTI_QUEUE.
            run("ip", "tuntap", "add", tap, "mode", "tap", *([] if self.nic() == "igb" else ["multi_queue"]))
            run("ip", "link", "set", tap, "address", mac)
        a = self.args
        cpus = a.sockets * a.cores * a.threads
        per_node = cpus // a.nodes
        cmd = [QEMU] + [arg for d in QEMU_FIRMWARE for arg in ("-L", d)] + QEMU_MACHINE + [
            "-accel", "tcg,thread=multi", "-cpu", "max",
            # vCPU threads named "CPU n/TCG" (VcpuQuota finds them by name)
            "-name", "vmtest,debug-threads=on",
            "-m", f"{256 * a.nodes * 2}",
            "-smp", f"{cpus},sockets={a.sockets},cores={a.cores},threads={a.threads}",
        ]
        for n in range(a.nodes):
            cmd += ["-object", f"memory-backend-ram,id=m{n},size=512M",
                    "-numa", f"node,nodeid={n},cpus={n * per_node}-{(n + 1) * per_node - 1},memdev=m{n}"]
        cmd += [
            "-kernel", os.path.join(self.vm, "vmlinuz"),
            "-initrd", os.path.join(self.vm, "initramfs.gz"),
            "-append", f"console=ttyS0 quiet panic=-1 vmtest.repo={REPO} vmtest.kernel={a.kernel} "
                       f"vmtest.topo={a.sockets}x{a.cores}x{a.threads} vmtest.nodes={a.nodes}"
                       + (f" vmtest.bench={a.bench}" if a.bench else "")
                       + (f" vmtest.cost={a.cost}" if a.cost else "")
                       + ("" if a.extras else " vmtest.extras=0")
                       + (f" vmtest.txfill={a.txfill}" if a.txfill else "")
                       + (f" vmtest.rss={a.rss}" if a.rss else "")
                       + ("" if getattr(a, "rss_hash", True) else " vmtest.rsshash=off")
                       + (f" vmtest.nic={self.nic()}" if self.nic() != "virtio" else ""),
            "-display", "none", "-monitor", "none", "-no-reboot",
            "-serial", f"file:{self.console}",
            "-serial", f"unix:{self.ctl_path},server=on,wait=off",
            "-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
        ]
        # The rebalancing boot: 4 queues and the device's RSS (rss=on: it steers by the table
        # the guest sets, vhost being off). hash=on: the device reports its hash, which the
        # XDP program reads; QEMU then steers in software: it reads a frame from one tap queue
        # and delivers it to the virtqueue the table names, and when that one is full it stops
        # reading the first tap queue until the guest refills the first virtqueue
        # (virtio_net_receive_rcu), so under overload whole tap queues stall. hash=off: no
        # hash reported (the XDP program computes the Toeplitz hash by the key), and QEMU
        # hands the table and key to its eBPF program, which the host's tap runs to pick the
        # tap queue (TUNSETSTEERINGEBPF): each tap queue feeds one virtqueue, and a full
        # virtqueue backs up only its own tap queue, whose ring then drops, as a NIC's queue
        # would. `ebpf_rss_failure` fails a boot that asked for it and did not get it.
        queues = 4 if a.rss else 2
        rss_props = (",rss=on,hash=on" if getattr(a, "rss_hash", True) else ",rss=on") if a.rss else ""
        for i, (tap, mac) in enumerate(zip(self.taps, GUEST_MACS)):
            if self.nic() == "igb":
                # QEMU's 82576: one tap queue; the device spreads frames over its own rings
                # by its RSS table and drops for a full ring alone (hw/net/igb_core.c). Its
                # SR-IOV functions sit at the PF's devfn + 0x80, 2 apart, 8 of them: PFs at
                # slots 6 and 8 keep them apart (slots 22-23 and 24-25).
                cmd += ["-netdev", f"tap,id=n{i},ifname={tap},script=no,downscript=no,vhost=off",
                        "-device", f"igb,netdev=n{i},mac={mac},addr={6 + 2 * i:#x}"]
                continue
            cmd += ["-netdev", f"tap,id=n{i},ifname={tap},script=no,downscript=no,queues={queues},vhost=off",
                    "-device", f"virtio-net-pci,netdev=n{i},mq=on,vectors={2 * queues + 2},mac={mac}"
                               f"{KERNELS[a.kernel]}{VIRTIO_EXTRA}"
                               f"{SLOW_TX if a.txfill and i == 1 else ZC_TX if a.kernel == 'zc' else ''}"
                               f"{rss_props}"]
        if self.wants_ebpf_rss():
            cmd += ["-trace", "ebpf_rss_*"]
        env = dict(os.environ, QEMU_MODULE_DIR=QEMU_MODULES)
        self.qemu = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, env=env,
                                     stderr=open(os.path.join(self.dir, "qemu.err"), "w"))
        # QEMU has the taps open once its control socket exists; then their host ends go into
        # the namespaces (the open queues follow the device).
        deadline = time.time() + 20
        while not os.path.exists(self.ctl_path):
            if self.qemu.poll() is not None or time.time() > deadline:
                raise RuntimeError("QEMU did not start: " + open(os.path.join(self.dir, "qemu.err")).read())
            time.sleep(0.1)
        for tap, ns, addr in zip(self.taps, (self.gen, self.sink), ("198.18.0.1/16", "198.19.0.1/16")):
            run("ip", "link", "set", tap, "netns", ns)
            run("ip", "addr", "add", addr, "dev", tap, ns=ns)
            run("sysctl", "-qw", f"net.ipv6.conf.{tap}.disable_ipv6=1", ns=ns)
            # MTU 9000: the guest's jumbo-frame test raises its NICs' to match.
            run("ip", "link", "set", tap, "mtu", "9000", ns=ns)
            run("ip", "link", "set", tap, "up", ns=ns)
            run("ip", "link", "set", "lo", "up", ns=ns)

    def nic(self):
        """The guest's NIC model: "virtio" (virtio-net-pci) or "igb" (Intel 82576)."""
        return getattr(self.args, "nic", "virtio")

    def wants_ebpf_rss(self):
        """True for a boot whose NICs steer by QEMU's eBPF RSS program (virtio-net with
        rss=on, hash=off)."""
        return self.nic() == "virtio" and bool(self.args.rss) and not getattr(self.args, "rss_hash", True)

    def ebpf_rss_failure(self):
        """Why a boot that asked for eBPF RSS did not steer by it (QEMU's trace and warnings
        in qemu.err), or None: the program loaded, and the guest's table and key reached
        its maps with no fallback to software RSS."""
        if not self.wants_ebpf_rss():
            return None
        try:
            err = open(os.path.join(self.dir, "qemu.err"), errors="replace").read()
        except OSError as e:
            return f"qemu.err unreadable: {e}"
        if "ebpf_rss_load " not in err:
            return "QEMU did not load its eBPF RSS program: " + err[-400:]
        if "fallback to software RSS" in err or "Can't load eBPF RSS" in err:
            return "QEMU fell back to software RSS: " + err[-400:]
        if "ebpf_rss_set_data " not in err:
            return "the guest's RSS table never reached QEMU's eBPF program (no ebpf_rss_set_data)"
        return None

    def down(self, keep_logs):
        if self.quota:
            self.quota.remove()
            self.quota = None
        if self.qemu and self.qemu.poll() is None:
            self.qemu.kill()
            self.qemu.wait()
        if not keep_logs:
            shutil.rmtree(self.dir, ignore_errors=True)
        for tap, ns in zip(self.taps, (self.gen, self.sink)):
            run("ip", "link", "del", tap, ns=ns, check=False)
            run("ip", "link", "del", tap, check=False)
        for ns in (self.gen, self.sink):
            run("ip", "netns", "del", ns, check=False)

    def vlan_ping(self, vid, src, dst):
        """Pings `dst` over VLAN `vid` from the generator's tap; the echo replies seen."""
        out = run(sys.executable, "-c", VLAN_PING, self.taps[0], GUEST_MACS[0], HOST_MACS[0],
                  str(vid), src, dst, ns=self.gen, check=False)
        try:
            return int(out.strip().splitlines()[-1])
        except (ValueError, IndexError):
            print(f"vmtest: vlan ping printed {out!r}", file=sys.stderr)
            return 0

    def open_load(self, count, flows, rate):
        """Sends `count` frames over `flows` flows at `rate` frames/s into the guest with the
        sink counting, and leaves the sink open ([`close_load`]); returns what was sent."""
        self.sink_json = os.path.join(self.dir, "sink.json")
        gen_json = os.path.join(self.dir, "gen.json")
        # A sink that dies without writing its counts must not leave an earlier run's.
        for f in (self.sink_json, gen_json):
            if os.path.exists(f):
                os.remove(f)
        self.open_sink = subprocess.Popen(
            ["ip", "netns", "exec", self.sink, DATAPLANE, "sink", "--iface", self.taps[1],
             "--duration", str(int(count / rate) + 300), "--progress", "--json", self.sink_json],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        seen = []
        while not seen or "window open" not in seen[-1]:
            line = self.open_sink.stderr.readline()
            if not line:
                self.open_sink.kill()
                raise RuntimeError(f"vmtest: the sink did not open its window: {seen!r}")
            seen.append(line)
        run(DATAPLANE, "gen", "--iface", self.taps[0], "--count", str(count), "--rate", str(rate),
            "--flows", str(flows), "--dst-mac", GUEST_MACS[0], "--src-mac", HOST_MACS[0],
            "--src", "198.18.0.1", "--dst", "198.19.0.100", "--duration", str(int(count / rate) + 5),
            "--json", gen_json, ns=self.gen)
        self.open_sent = json.load(open(gen_json))["packets"]
        return self.open_sent

    def close_load(self, want):
        """Waits until the open sink has counted `want` frames (its progress lines; at most
        60 s), stops it; returns (sent, received); (-1, -1) when none is open."""
        if getattr(self, "open_sink", None) is None:
            return -1, -1
        deadline = time.time() + 60
        matched = 0
        while matched < want and time.time() < deadline:
            line = self.open_sink.stderr.readline()
            if not line:
                break
            if ": matched " in line:
                matched = int(line.rsplit(" ", 1)[1])
        self.open_sink.send_signal(2)
        _, err = self.open_sink.communicate(timeout=60)
        self.open_sink = None
        received = json.load(open(self.sink_json))["matched"] if os.path.exists(self.sink_json) else -1
        if received < 0:
            print(f"vmtest: sink failed: {err}", file=sys.stderr)
        if received < want:
            # What the sink's interface itself saw, for the failure's report.
            print("vmtest: the sink's tap: " + run("ip", "-s", "link", "show", self.taps[1],
                                                     ns=self.sink, check=False), flush=True)
        return self.open_sent, received

    def burst(self, count, flows, rate=2000, size=None, dst="198.19.0.100", df=True):
        """Sends `count` frames (of `size` bytes; the generator's default when None) over
        `flows` flows at `rate` frames/s to `dst` into the guest; returns (sent, received)."""
        sink_json = os.path.join(self.dir, "sink.json")
        gen_json = os.path.join(self.dir, "gen.json")
        for f in (sink_json, gen_json):
            if os.path.exists(f):
                os.remove(f)
        sink = subprocess.Popen(
            ["ip", "netns", "exec", self.sink, DATAPLANE, "sink", "--iface", self.taps[1],
             "--duration", str(int(count / rate) + 8), "--json", sink_json],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        # Its counting starts when it says so (attached, counters read): only then may the
        # generator send, or frames that arrive first are not counted.
        # (It ends by itself after --duration, so this read ends too.)
        seen = []
        while not seen or "window open" not in seen[-1]:
            line = sink.stderr.readline()
            if not line:
                sink.kill()
                raise RuntimeError(f"vmtest: the sink did not open its window: {seen!r}")
            seen.append(line)
        run(DATAPLANE, "gen", "--iface", self.taps[0], "--count", str(count), "--rate", str(rate),
            "--flows", str(flows), "--dst-mac", GUEST_MACS[0], "--src-mac", HOST_MACS[0],
            "--src", "198.18.0.1", "--dst", dst, "--duration", str(int(count / rate) + 5),
            "--json", gen_json, *(["--size", str(size)] if size else []),
            *([] if df else ["--no-df"]), ns=self.gen)
        # What the guest still has in flight arrives within the grace; then the sink stops
        # (SIGINT: it writes its counts), instead of waiting out its whole --duration.
        time.sleep(3)
        sink.send_signal(2)
        _, err = sink.communicate(timeout=60)
        sent = json.load(open(gen_json))["packets"]
        received = json.load(open(sink_json))["matched"] if os.path.exists(sink_json) else -1
        if received < 0:
            print(f"vmtest: sink failed: {err}", file=sys.stderr)
        if 0 <= received < sent and size is None and df and dst == "198.19.0.100":
            # What the taps themselves saw, for the failure's report.
            for tap, ns in zip(self.taps, (self.gen, self.sink)):
                print(f"vmtest: tap {tap}: " + run("ip", "-s", "link", "show", tap, ns=ns, check=False),
                      flush=True)
        return sent, received


def flows_on_queue(key, queue, n, start, src=GEN_SRC, dst=GEN_DST, dport=GEN_DPORT,
                   size=128, queues=4, below=None):
    """`n` UDP source ports from `start` whose flows the default indirection table (bucket
    i -> queue i % queues, bucket = hash % size) puts on `queue`, each in a bucket of its own;
    with `below`, only buckets under it (the ones an operator's table also gives `queue`)."""
    out, buckets = [], []
    port = start
    while len(out) < n and port < 65536:
        b = toeplitz(key, rss_input(src, dst, port, dport)) % size
        if b % queues == queue and b not in buckets and (below is None or b < below):
            out.append(port)
            buckets.append(b)
        port += 1
    return out, buckets


class Schedule:
    """The comparison's traffic, the same for every run: phase 1, heavy flows the default
    table puts on queue 0 plus light flows everywhere; phase 2, the heavy flows move to
    queue 2 (new flows); phase 3, light flows only, at an eighth of their rate (night).
    Each phase `phase` seconds; one sink counts the whole run (received, reordered).
    `spread`: the same load with each phase's heavy flows one on each queue (new flows in
    phase 2): the placement a balancer aims at, there from the first frame."""

    def __init__(self, bed, key, phase, heavy_rate, light_rate, heavy=4, light=256, phases=3, first=0,
                 size=64, below=None, spread=False):
        self.bed, self.phase = bed, phase
        self.heavy_rate, self.light_rate = heavy_rate, light_rate
        self.spread = spread
        if spread:
            # Flow k of the phase on queue k % 4, each in a bucket of its own.
            per = [[flows_on_queue(key, q, 1, base + 1000 * k) for k, q in enumerate(i % 4 for i in range(heavy))]
                   for base in (20000, 40000)]
            q0 = ([f[0][0] for f in per[0]], [f[1][0] for f in per[0]])
            q2 = ([f[0][0] for f in per[1]], [f[1][0] for f in per[1]])
        else:
            q0, q2 = flows_on_queue(key, 0, heavy, 20000, below=below), flows_on_queue(key, 2, heavy, 40000)
        self.plan = [q0[0], q2[0]]
        self.buckets = [q0[1], q2[1]]
        self.light, self.phases, self.first = light, phases, first
        self.size = size  # the heavy flows' frames, bytes on the wire
        # What the generators were asked to send, and what they sent: a generator waits
        # while the guest's NIC takes nothing (the tap's queue full), so frames the guest
        # could not take in are offered but never sent, and lost all the same.
        self.offered, self.sent = 0, 0
        self.thread = None
        # Each phase's start (its generators started), seconds after `t0` (just before the
        # guest is told the traffic started): where the guest measures settling from.
        self.t0, self.changes = time.time(), []

    def gen(self, flows, sport, rate, seconds, tag, size=64):
        out = os.path.join(self.bed.dir, f"gen-{tag}.json")
        self.offered += max(1, int(rate * seconds))
        return subprocess.Popen(
            ["ip", "netns", "exec", self.bed.gen, DATAPLANE, "gen", "--iface", self.bed.taps[0],
             "--size", str(size),
             "--flows", str(flows), "--sport", str(sport), "--rate", str(max(1, int(rate))),
             "--count", str(max(1, int(rate * seconds))), "--duration", str(seconds + 2),
             "--dst-mac", GUEST_MACS[0], "--src-mac", HOST_MACS[0], "--src", "198.18.0.1",
             "--dst", "198.19.0.100", "--json", out],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL), out

    def run(self):
        """Runs the phases; what was sent is added up."""
        import threading
        sink_json = os.path.join(self.bed.dir, "sink-compare.json")
        total = self.phase * (self.phases - self.first)
        self.sink = subprocess.Popen(
            ["ip", "netns", "exec", self.bed.sink, DATAPLANE, "sink", "--iface", self.bed.taps[1],
             "--duration", str(total + 20), "--json", sink_json],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        while "window open" not in (self.sink.stderr.readline() or "window open"):
            pass
        self.sink_json = sink_json

        def phases():
            for i in range(self.first, self.phases):
                procs = []
                self.changes.append(time.time() - self.t0)
                if i < 2:
                    for j, port in enumerate(self.plan[i]):
                        procs.append(self.gen(1, port, self.heavy_rate, self.phase, f"h{i}{j}", self.size))
                light = self.light_rate if i < 2 else self.light_rate / 8
                # Each phase's light flows are new ones (their own source ports): a flow that
                # a second generator numbered from the start again would read as reordered.
                procs.append(self.gen(self.light, 10000 + 1000 * i, light, self.phase, f"l{i}"))
                for p, out in procs:
                    p.wait()
                    try:
                        self.sent += json.load(open(out))["packets"]
                    except (OSError, ValueError, KeyError):
                        pass
        self.thread = threading.Thread(target=phases)
        self.t0 = time.time()
        self.thread.start()

    def collect(self):
        """Waits for the phases, lets the guest's last frames arrive, stops the sink:
        (offered, sent, received, reordered); `changes` has each phase's start."""
        self.thread.join()
        time.sleep(3)
        self.sink.send_signal(2)
        self.sink.communicate(timeout=60)
        try:
            s = json.load(open(self.sink_json))
            return self.offered, self.sent, s["matched"], s["reordered"]
        except (OSError, ValueError, KeyError):
            return self.offered, self.sent, -1, -1


def write_svg(path, runs, phase):
    """Per-poller load over time, one panel per run, the moves as ticks, the phases shaded."""
    colors = ["#1f77b4", "#d62728", "#2ca02c", "#ff7f0e"]
    w, h, pad = 900, 190, 40
    total = max((t for r in runs for t, *_ in r["timeline"]), default=1)
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h * len(runs) + 30}" '
           f'font-family="sans-serif" font-size="12">']
    for k, r in enumerate(runs):
        y0 = k * h + 10
        x = lambda t: pad + (w - 2 * pad) * t / total
        y = lambda v: y0 + h - 40 - (h - 60) * min(v, 1.0)
        out.append(f'<text x="{pad}" y="{y0 + 12}" font-weight="bold">{r["name"]}: '
                   f'lost {r["drops"]}, reordered {r["reordered"]}, moves {r["moves"]}</text>')
        for p in range(3):
            if p % 2:
                out.append(f'<rect x="{x(p * phase)}" y="{y(1)}" width="{x((p + 1) * phase) - x(p * phase)}" '
                           f'height="{y(0) - y(1)}" fill="#eee"/>')
        out.append(f'<line x1="{pad}" y1="{y(0)}" x2="{w - pad}" y2="{y(0)}" stroke="#888"/>')
        out.append(f'<text x="4" y="{y(1) + 4}">100%</text><text x="12" y="{y(0) + 4}">0</text>')
        npollers = max((len(b) for _, b, *_ in r["timeline"]), default=0)
        for p in range(npollers):
            pts = " ".join(f"{x(t):.1f},{y(b[p]):.1f}" for t, b, *_ in r["timeline"] if p < len(b))
            out.append(f'<polyline points="{pts}" fill="none" stroke="{colors[p % 4]}" stroke-width="1.5"/>')
        for t, _, moves, *_ in r["timeline"]:
            if moves:
                out.append(f'<line x1="{x(t):.1f}" y1="{y(0)}" x2="{x(t):.1f}" y2="{y(0) + 8}" stroke="black"/>')
    out.append(f'<text x="{pad}" y="{h * len(runs) + 20}">per-poller busy share (poller 0 blue, 1 red, '
               f'2 green, 3 orange) over seconds 0-{total:.0f}; ticks: steps with moves; shaded: phase 2</text>')
    out.append("</svg>")
    open(path, "w").write("\n".join(out))


# Sends 5 ICMP echo requests tagged with VLAN `vid` from `src` to `dst` on the interface, and
# counts the echo replies (the tag inline, or taken into the packet's metadata on the way in).
VLAN_PING = r"""
import socket, struct, sys, time
ifname, dst_mac, src_mac, vid, src, dst = sys.argv[1:7]
def csum(b):
    b += b"\0" * (len(b) % 2)
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    while s >> 16:
        s = (s & 0xffff) + (s >> 16)
    return ~s & 0xffff
mac = lambda m: bytes.fromhex(m.replace(":", ""))
s = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(3))
s.bind((ifname, 0))
s.setsockopt(263, 8, 1)  # SOL_PACKET, PACKET_AUXDATA: a tag taken off on receive is there
s.settimeout(0.2)
got = set()
for seq in range(5):
    icmp = struct.pack("!BBHHH", 8, 0, 0, 0x7a10, seq) + b"vmtest-vlan"
    icmp = icmp[:2] + struct.pack("!H", csum(icmp)) + icmp[4:]
    ip = struct.pack("!BBHHHBBH4s4s", 0x45, 0, 20 + len(icmp), seq, 0, 64, 1, 0,
                     socket.inet_aton(src), socket.inet_aton(dst))
    ip = ip[:10] + struct.pack("!H", csum(ip)) + ip[12:]
    s.send(mac(dst_mac) + mac(src_mac) + struct.pack("!HH", 0x8100, int(vid)) + struct.pack("!H", 0x0800) + ip + icmp)
    end = time.time() + 1.0
    while time.time() < end:
        try:
            f, anc, _, _ = s.recvmsg(2048, socket.CMSG_SPACE(32))
        except socket.timeout:
            continue
        # The reply's VLAN: inline, or in tpacket_auxdata (status bit 0x10: tci valid).
        tag = None
        if f[12:14] == b"\x81\x00":
            tag = struct.unpack("!H", f[14:16])[0] & 0xfff
        for level, kind, data in anc:
            if level == 263 and kind == 8 and len(data) >= 20:
                status, _, _, _, _, tci = struct.unpack("IIIHHH", data[:18])
                if status & 0x10:
                    tag = tci & 0xfff
        if tag != int(vid):
            continue
        at = 18 if f[12:14] == b"\x81\x00" else 14
        if f[at - 2:at] != b"\x08\x00" or len(f) < at + 28:
            continue
        if f[at + 9] == 1 and f[at + 12:at + 16] == socket.inet_aton(dst) and f[at + 20] == 0 \
                and struct.unpack("!H", f[at + 24:at + 26])[0] == 0x7a10:
            got.add(struct.unpack("!H", f[at + 26:at + 28])[0])
print(len(got))
"""


def serve(bed, timeout, ran, rows):
    deadline = time.time() + timeout
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.connect(bed.ctl_path)
    sock.settimeout(1.0)
    buf = b""
    passed = failed = 0
    heard = time.time()  # the guest's last line, or the end of the host's last answer
    while True:
        if time.time() > deadline:
            print(f"vmtest: FAIL: no verdict from the guest within {timeout} s", flush=True)
            bed.went_silent = time.time() - heard > STALL_SILENCE
            return False
        if bed.qemu.poll() is not None and b"\n" not in buf:
            print("vmtest: FAIL: the guest powered off before reporting DONE", flush=True)
            return False
        try:
            chunk = sock.recv(4096)
            if not chunk and bed.qemu.poll() is not None:
                continue
            buf += chunk
        except socket.timeout:
            # An idle second: a guest CPU whose timer stopped never recovers; end the boot
            # now rather than at the timeout (`boot` then boots it once more).
            if timer_stalled(bed):
                print(f"vmtest: FAIL: the guest's console says {TIMER_STALL!r}: ending this boot", flush=True)
                return False
            stall = kernel_stall(bed, since=bed.heard_at) if time.time() - heard > STALL_SILENCE else None
            if stall:
                print(f"vmtest: FAIL: the guest's kernel reported a stall ({stall!r}) after its last "
                      f"line, and it has been silent for {STALL_SILENCE} s: ending this boot", flush=True)
                bed.went_silent = True
                return False
            continue
        while b"\n" in buf:
            line, buf = buf.split(b"\n", 1)
            line = line.decode(errors="replace").strip()
            heard, bed.heard_at = time.time(), console_len(bed)
            if not line:
                continue
            word = line.split()[0]
            if word == "READY":
                _, name, count, flows = line.split()
                sent, received = bed.burst(int(count), int(flows))
                print(f"vmtest: {name}: sent {sent}, the sink received {received}", flush=True)
                sock.sendall(f"SENT {sent} {received}\n".encode())
            elif word == "BURST":
                _, name, count, flows, size, dst, df = line.split()
                sent, received = bed.burst(int(count), int(flows), size=int(size), dst=dst, df=df == "df")
                print(f"vmtest: {name}: sent {sent} of {size} bytes to {dst}, the sink received {received}", flush=True)
                sock.sendall(f"SENT {sent} {received}\n".encode())
            elif word == "RESULT":
                print("vmtest:", line[len("RESULT "):], flush=True)
                passed += line.split()[1] == "PASS"
                failed += line.split()[1] == "FAIL"
                bed.checks_failed = failed
                if line.split()[1] == "FAIL":
                    bed.failures.append(line[len("RESULT FAIL "):])
            elif word == "DONE":
                print(f"vmtest: {passed} passed, {failed} failed", flush=True)
                return failed == 0 and passed > 0
            elif word == "LOAD":
                _, name, seconds, rate = line.split()
                count = int(seconds) * int(rate)
                sent, received = bed.burst(count, LOAD_FLOWS, int(rate))
                print(f"vmtest: {name}: offered {sent} at {rate}/s, the sink received {received}", flush=True)
                sock.sendall(f"SENT {sent} {received}\n".encode())
            elif word == "LOADOPEN":
                _, name, seconds, rate = line.split()
                sent = bed.open_load(int(seconds) * int(rate), LOAD_FLOWS, int(rate))
                print(f"vmtest: {name}: offered {sent} at {rate}/s, the sink still counting", flush=True)
                sock.sendall(f"SENT {sent} -1\n".encode())
            elif word == "CLOSE":
                _, name, want = line.split()
                sent, received = bed.close_load(int(want))
                print(f"vmtest: {name}: the sink received {received} (waited for {want})", flush=True)
                sock.sendall(f"SENT {sent} {received}\n".encode())
            elif word == "VLAN":
                _, vid, src, dst = line.split()
                replies = bed.vlan_ping(int(vid), src, dst)
                print(f"vmtest: vlan {vid}: {replies} of 5 echo replies from {dst}", flush=True)
                sock.sendall(f"REPLIES {replies}\n".encode())
            elif word == "KEY":
                bed.rss_key = bytes.fromhex(line.split()[1])
                print(f"vmtest: RSS key {line.split()[1][:16]}...", flush=True)
            elif word == "SCHEDULE":
                # SCHEDULE name phase heavy light phases [first phase [heavy frames' size
                # [queue 0's heavy buckets below this, or -, [spread]]]]
                _, name, phase, heavy_rate, light_rate, phases, *rest = line.split()
                bed.schedule = Schedule(bed, bed.rss_key, int(phase), float(heavy_rate),
                                        float(light_rate), phases=int(phases),
                                        first=int(rest[0]) if rest else 0,
                                        size=int(rest[1]) if len(rest) > 1 else 64,
                                        below=int(rest[2]) if len(rest) > 2 and rest[2] != "-" else None,
                                        spread=rest[3:4] == ["spread"])
                if getattr(bed.args, "vcpu_quota", None):
                    bed.quota = VcpuQuota(bed.qemu.pid, bed.args.vcpu_quota)
                    n, quota = bed.quota.apply()
                    print(f"vmtest: {name}: {n} vCPUs held to {quota} us of CPU per "
                          f"{VcpuQuota.PERIOD_US} us while the traffic runs", flush=True)
                bed.schedule.run()
                first, then = ("one on each queue",) * 2 if bed.schedule.spread else ("on queue 0", "on queue 2")
                print(f"vmtest: {name}: traffic started, heavy flows {first} {bed.schedule.plan[0]}, "
                      f"then {then} {bed.schedule.plan[1]}", flush=True)
                b = bed.schedule.buckets
                sock.sendall(f"STARTED {','.join(map(str, b[0]))} {','.join(map(str, b[1]))}\n".encode())
            elif word == "COLLECT":
                offered, sent, received, reordered = bed.schedule.collect()
                if bed.quota:
                    print(f"vmtest: {line.split()[1]}: the vCPUs were held back "
                          f"{bed.quota.throttled_ms()} ms in all", flush=True)
                    bed.quota.remove()
                    bed.quota = None
                changes = ",".join(f"{c:.3f}" for c in bed.schedule.changes) or "-"
                print(f"vmtest: {line.split()[1]}: offered {offered}, sent {sent}, the sink received "
                      f"{received}, {reordered} reordered; phases started at {changes} s", flush=True)
                sock.sendall(f"SENT {sent} {received} {reordered} {changes} {offered}\n".encode())
            elif word == "RESULTS":
                bed.results = json.loads(line[len("RESULTS "):])
            elif word == "ROW":
                rows.append(line[4:])
                print("vmtest: row:", line[4:], flush=True)
            elif word == "RAN":
                ran.add(line.split()[1])
            elif word == "LOG":
                print("vmtest: guest:", line[4:], flush=True)
        if chunk:
            heard = time.time()  # after the host's answers, which may have taken a while


def write_summary(a, rows):
    """The guest's layout rows as a markdown table, with the caveat."""
    os.makedirs(a.bench, exist_ok=True)
    text = [
        "# layouts in the QEMU guest (make vmbench)",
        "",
        "Real virtio_net drivers with one MSI-X interrupt per queue, 2 NUMA nodes, with",
        f"--apply-irq; l3fwd, 2 queues per NIC, 64 flows of 64-byte UDP offered at {a.rate}/s for",
        f"{a.seconds} s by the host. **The guest's CPUs are emulated (TCG)**: these figures show that",
        "each layout places and forwards as planned and how they rank under emulation. They are",
        "not comparable with the veth testbed's figures, or with hardware.",
        "",
        "| topology | layout | pollers on CPUs (IRQs on) | UMEM node(s) | forwarded kpps | drops | DUT CPU us/pkt (pollers / IRQ+softirq) |",
        "|---|---|---|---|---|---|---|",
    ] + [f"| {r} |" for r in rows]
    path = os.path.join(a.bench, "summary.md")
    open(path, "w").write("\n".join(text) + "\n")
    print("\n".join(text), flush=True)
    print(f"vmtest: summary in {path}", flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--timeout", type=int, default=600, help="per boot, seconds")
    p.add_argument("--topologies", default="2x1x2,2x2x1",
                   help="SOCKETSxCORESxTHREADS, comma-separated; one NUMA node per socket")
    p.add_argument("--layouts-only", action="store_true",
                   help="the layouts alone on every topology (no checks beyond them, no extra boots)")
    p.add_argument("--bench", metavar="DIR",
                   help="instead of the tests, the layouts matrix in the guest; summary in DIR")
    p.add_argument("--rate", type=int, default=30000, help="with --bench: offered frames/s")
    p.add_argument("--seconds", type=int, default=5, help="with --bench: window per layout")
    p.add_argument("--kernels", default="copy",
                   help="the guests, comma-separated, each booted on every topology "
                        f"(target/vm/KERNEL, scripts/vmtest/build.sh KERNEL; of {sorted(KERNELS)})")
    p.add_argument("--cost", default="2000x4", metavar="RATExSECONDS",
                   help="zero-copy guest, first topology: copy against zero-copy CPU per packet "
                        "under this paced load ('' to skip)")
    p.add_argument("--compare", metavar="DIR",
                   help="instead of the tests: static RSS, tune's best layout and the rebalancer "
                        "side by side under skewed, shifting traffic (4 vCPUs, 4-queue RSS NICs); "
                        "summary and plot in DIR")
    p.add_argument("--compare-load", default="10x1000x1000", metavar="PHASExHEAVYxLIGHT[xSIZE[xRING]]",
                   help="with --compare: seconds per phase, frames/s per heavy flow (4), and of "
                        "the light flows together (256); the heavy flows' frame size (64); the "
                        "pollers' ring size (512)")
    p.add_argument("--compare-repeats", type=int, default=3, metavar="N",
                   help="with --compare: the rebalancer's run N times in the same boot; its "
                        "goals are judged on the median, each run's figures shown")
    p.add_argument("--vcpu-quota", type=int, default=None, metavar="PERCENT",
                   help="with --compare: while the traffic runs, each vCPU gets at most PERCENT "
                        "of one host CPU (cgroup v1 cpu quota): slower cores, meant to overload "
                        "the heavy flows' queue (docs/REBALANCE.md: QEMU's RSS then stalls tap "
                        "queues rather than dropping per queue)")
    p.add_argument("--compare-nic", choices=("virtio", "igb"), default="virtio",
                   help="with --compare: the guest's NICs, virtio-net (the copy guest) or igb "
                        "(Intel 82576, the zero-copy guest's kernel)")
    p.add_argument("--rss-hash", choices=("on", "off"), default="on",
                   help="with --compare: the NICs' hash=on (the device reports its hash, read "
                        "by the rx-hash kfunc) or hash=off (the steering program computes it)")
    p.add_argument("--rss", default="2000x4", metavar="RATExSECONDS",
                   help="copy guest: two more boots, 4 vCPUs and 4 queues with rss=on, hash=on and "
                        "hash=off: live RSS rebalancing under this load ('' to skip)")
    p.add_argument("--igb", default="2000x4", metavar="RATExSECONDS",
                   help="zero-copy guest: one more boot with igb NICs (Intel 82576): zero-copy, "
                        "link flap, driver rebind and live RSS rebalancing under this load ('' to skip)")
    p.add_argument("--tx-fill", dest="txfill", default="4000x3", metavar="RATExSECONDS",
                   help="zero-copy guest: one more boot whose egress NIC transmits slowly, this "
                        "load offered: a TX ring that fills ('' to skip)")
    a = p.parse_args()
    if a.compare_repeats < 1:
        p.error("--compare-repeats must be at least 1")
    if a.vcpu_quota is not None and not 10 <= a.vcpu_quota <= 100:
        p.error("--vcpu-quota must be a percentage from 10 to 100 (the quota is at least 1 ms per 10 ms)")
    if os.geteuid() != 0:
        sys.exit("vmtest: needs root (namespaces, taps)")
    kernels = a.kernels.split(",")
    for kernel in kernels:
        if kernel not in KERNELS:
            sys.exit(f"vmtest: unknown guest {kernel!r} (known: {sorted(KERNELS)})")
        vm = os.path.join(REPO, "target", "vm", kernel)
        for f in (os.path.join(vm, "vmlinuz"), os.path.join(vm, "initramfs.gz"), DATAPLANE):
            if not os.path.exists(f):
                sys.exit(f"vmtest: {f} missing: run make vmtest (it builds the guests and the binaries)")
    t0 = time.time()
    rows = []
    all_ok = True
    if a.compare:
        sys.exit(0 if compare(a) else 1)
    for kernel in kernels:
        all_ok &= boot_all(a, kernel, rows)
    if a.bench:
        write_summary(a, rows)
    for what, failures in FAILED_BOOTS:
        for f in failures:
            print(f"vmtest: failed in {what}: {f[:2000]}", flush=True)
    print(f"vmtest: {'passed' if all_ok else 'FAILED'} in {time.time() - t0:.0f} s", flush=True)
    sys.exit(0 if all_ok else 1)


# (boot, [what failed]) of every boot that failed: repeated at the end of the run, where a
# log cut to its tail still shows them.
FAILED_BOOTS = []


def boot_all(a, kernel, rows):
    """Boots guest `kernel` on every topology; true when every check passed and every layout
    forwarded on one of them."""
    ran = set()
    all_ok = True
    for i, topo in enumerate(a.topologies.split(",")):
        s, c, t = map(int, topo.split("x"))
        print(f"vmtest: booting the {kernel} guest, {s} socket(s) x {c} core(s) x {t} thread(s), {s} NUMA node(s)", flush=True)
        cost = a.cost if kernel == "zc" and i == 0 and a.cost and not a.bench else None
        bed = Bed(argparse.Namespace(sockets=s, cores=c, threads=t, nodes=s, kernel=kernel,
                                     bench=f"{a.rate}x{a.seconds}" if a.bench else None, cost=cost,
                                     extras=i == 0 and not a.layouts_only, txfill=None, rss=None))
        all_ok &= boot(a, bed, ran, rows, f"{kernel} {topo}")
    if kernel == "zc" and a.txfill and not a.bench and not a.layouts_only:
        # One more boot with the egress NIC's transmit slowed: a TX ring that fills.
        s, c, t = map(int, a.topologies.split(",")[0].split("x"))
        print(f"vmtest: booting the {kernel} guest again with its egress NIC's transmit slowed (TX ring full)", flush=True)
        bed = Bed(argparse.Namespace(sockets=s, cores=c, threads=t, nodes=s, kernel=kernel,
                                     bench=None, cost=None, extras=False, txfill=a.txfill, rss=None))
        all_ok &= boot(a, bed, ran, rows, f"{kernel} TX ring full")
    if kernel == "zc" and a.igb and not a.bench and not a.layouts_only:
        # One more boot with Intel 82576 NICs (QEMU's igb) in place of virtio-net: the
        # zero-copy checks and live rebalancing on an Intel driver (igb, AF_XDP zero-copy
        # since Linux 6.14), 4 vCPUs: 4 queues per NIC.
        print(f"vmtest: booting the {kernel} guest with igb NICs (Intel 82576), 2 socket(s) x 1 core(s) x 2 thread(s)", flush=True)
        bed = Bed(argparse.Namespace(sockets=2, cores=1, threads=2, nodes=2, kernel=kernel,
                                     bench=None, cost=None, extras=False, txfill=None, rss=a.igb,
                                     nic="igb"))
        all_ok &= boot(a, bed, ran, rows, f"{kernel} igb")
    if kernel == "copy" and a.rss and not a.bench and not a.layouts_only:
        # Two more boots: 4 vCPUs, 4 queues per NIC, QEMU's RSS: live rebalancing, with the
        # device reporting its hash (hash=on: the rx-hash kfunc) and without (hash=off: the
        # steering program computes the Toeplitz hash by the device's key).
        for device_hash in (True, False):
            label = "" if device_hash else ", hash=off"
            print(f"vmtest: booting the {kernel} guest with 4 vCPUs and 4-queue NICs with RSS (rebalancing{label})", flush=True)
            bed = Bed(argparse.Namespace(sockets=1, cores=4, threads=1, nodes=1, kernel=kernel,
                                         bench=None, cost=None, extras=False, txfill=None, rss=a.rss,
                                         rss_hash=device_hash))
            all_ok &= boot(a, bed, ran, rows, f"{kernel} RSS rebalancing{label}")
    missing = set(LAYOUTS) - ran
    if missing and not a.bench:
        print(f"vmtest: FAIL: {kernel}: layouts that forwarded on no topology: {sorted(missing)}", flush=True)
        all_ok = False
    return all_ok


def compare(a):
    """make rebalance-compare: one boot of the copy guest (virtio-net) or of the zero-copy
    guest (igb, --compare-nic igb), 4 vCPUs and 4-queue RSS NICs,
    the three runs side by side; summary.md, results.json and rebalance.svg in a.compare."""
    os.makedirs(a.compare, exist_ok=True)

    def guest(rss, what):
        # igb on the zero-copy guest's kernel (7.3.4's igb; 4 queues on 4 vCPUs).
        bed = Bed(argparse.Namespace(sockets=1, cores=4, threads=1, nodes=1,
                                     kernel="zc" if a.compare_nic == "igb" else "copy",
                                     bench=None, cost=None, extras=False, txfill=None, rss=rss,
                                     vcpu_quota=a.vcpu_quota, rss_hash=a.rss_hash == "on",
                                     nic=a.compare_nic))
        bed.results = None
        return boot(a, bed, set(), [], what), bed.results
    # tune in a boot of its own, tried up to three times: TCG has crashed the guest in the
    # XDP dispatcher's code patching while tune attaches and detaches under traffic.
    best = None
    for attempt in range(3):
        _, t = guest(f"tune:{a.compare_load}", f"tune under the skewed traffic (try {attempt + 1})")
        if t and t.get("tune"):
            best = t["tune"]
            break
    if best is None:
        # The comparison runs without tune's layout, and the whole of it fails: a row is
        # missing.
        print("vmtest: compare: FAIL: tune recommended no layout in 3 boots: its row is missing",
              flush=True)
    ok, r = guest(f"compare:{a.compare_load}:{best or ''}:{a.compare_repeats}", "RSS comparison")
    ok = compare_passed(ok, best)
    if not r:
        print("vmtest: compare: the guest sent no results", flush=True)
        return False
    phase = int(a.compare_load.split("x")[0])
    json.dump(r, open(os.path.join(a.compare, "results.json"), "w"), indent=1)
    write_svg(os.path.join(a.compare, "rebalance.svg"), r["runs"], phase)
    lines = ["# RSS rebalancing against static RSS and tune's best layout (make rebalance-compare)", "",
             "QEMU 10 guest (TCG), 4 vCPUs, "
             + ("igb NICs (Intel 82576: the device steers by its RSS table and drops for a full ring alone)"
                if a.compare_nic == "igb" else
                f"virtio-net with rss=on,hash={a.rss_hash}"
                + (" (QEMU's eBPF RSS steers in the host's tap: a full virtqueue backs up its own tap queue only)"
                   if a.rss_hash == "off" else " (QEMU's software RSS)"))
             + ", 4 queues, one poller per queue.",
             f"Traffic per run ({a.compare_load}, PHASExHEAVYxLIGHT[xSIZE of the heavy flows' frames[xRING size]]):",
             f"{phase} s of 4 heavy flows the default table puts on queue 0 plus 256 light",
             f"flows, {phase} s with the heavy flows on queue 2, {phase} s of light flows at 1/8 (night).",
             "One more static RSS run has each phase's heavy flows one on each queue (even placement):",
             "the placement a balancer aims at, there from the first frame, so what it loses is not",
             "the balancer's doing (a reference, not a bound: one run, on a host whose speed drifts).",
             f"The rebalancer runs {a.compare_repeats} times in the same boot; its goals are judged on the",
             "median of those runs (timings on emulated CPUs sharing 2 host cores are noisy), with",
             "each run's figures beside it.",
             "**Emulated CPUs:** loads and rates show behaviour, not hardware figures.",
             "Lost: offered and not received (the guest's NIC refused it, or it was dropped inside)."]
    if a.vcpu_quota:
        lines += [f"While the traffic ran, each vCPU had at most {a.vcpu_quota}% of one host CPU "
                  "(--vcpu-quota: slower cores, meant to overload the heavy flows' queue; see "
                  "docs/REBALANCE.md on QEMU's stalled tap queues)."]
    lines += ["",
             "| run | offered | sent | received | lost | reordered | moves | max/mean load of the pollers with buckets, phase 1 / 2 (last 5 s) | CPU at night, pollers / all CPUs (ms) | buckets per poller at the end | dataplane rx / tx / drops |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    for run in r["runs"]:
        lines.append(f"| {run['name']} | {run['offered']} | {run['sent']} | {run['received']} | "
                     f"{run['drops']} | {run['reordered']} | {run['moves']} | "
                     f"{shown(run['imbalance'][0])} / {shown(run['imbalance'][1])} | {shown(run['night_cpu_ms'], '.0f')} / {shown(run.get('night_all_cpu_ms'), '.0f')} | "
                     f"{run['buckets']} | {run['dataplane_rx']} / {run['dataplane_tx']} / {run['dataplane_drops']} |")
    if r.get("night"):
        lines += ["", "The night alone with `idle = \"busy\"` (pollers spin whether frames come or not), "
                  "each poller's CPU over 5 s once the load is packed:", "",
                  "| run | sent | received | pollers' CPU, ms per s each | in all | pollers engaged | buckets per poller |",
                  "|---|---|---|---|---|---|---|"]
        for n in r["night"]:
            lines.append(f"| {n['name']} | {n['sent']} | {n['received']} | {n['cpu_ms_per_s']} | "
                         f"{sum(n['cpu_ms_per_s']):.0f} | {n['engaged']:.0f} | {n['buckets']} |")
    lines += ["", "Goals (the rebalancer's runs):", ""] + [f"- {g}" for g in r["goals"]]
    lines += ["", "Plot: rebalance.svg (per-poller load over time, moves as ticks)."]
    open(os.path.join(a.compare, "summary.md"), "w").write("\n".join(lines) + "\n")
    print("\n".join(lines), flush=True)
    return ok


def compare_passed(guest_ok, best):
    """The comparison passes when its guest's checks did and tune's row is there (a tune
    boot that recommended nothing fails it, never silently drops the row)."""
    return guest_ok and best is not None


def shown(x, fmt=".2f"):
    """A figure for the table; a missing one (None) as a dash, never as 0."""
    return "-" if x is None else format(x, fmt)


# A guest CPU whose timer interrupt never came while it idled: RCU says "timer wakeup
# didn't happen ... Possible timer handling issue on cpu=N". Seen under QEMU 10's TCG with
# the zero-copy guest's kernel (its CPU 0 idle for minutes, at 23 s after boot); the CPU's
# softirqs stop with it (NAPI, RCU), so everything after fails.
TIMER_STALL = "timer wakeup didn't happen"
# What the guest kernel prints when a vCPU stops making progress: RCU's stall reports. Under
# TCG a vCPU is a host thread, and a loaded host starves it; the guest may recover, so one
# ends a boot only when written after the guest's last line and followed by
# `STALL_SILENCE` s of silence.
KERNEL_STALLS = ("detected stalls on CPUs", "self-detected stall")
# What the kernel prints when a task or a CPU is stuck in the kernel: the hung-task and
# soft-lockup watchdogs. That can be the dataplane's doing (an XDP teardown, a lock), so a
# silent boot with one of these is a failure, never booted again.
KERNEL_HANGS = ("blocked for more than", "soft lockup")
STALL_SILENCE = 120


def timer_stalled(bed):
    """True once the guest's console reports a CPU whose timer stopped (`TIMER_STALL`)."""
    try:
        return TIMER_STALL in open(bed.console, errors="replace").read()
    except OSError:
        return False


def console_len(bed):
    """How many bytes the guest's console holds now."""
    try:
        return os.path.getsize(bed.console)
    except OSError:
        return 0


def kernel_stall(bed, since=0, patterns=KERNEL_STALLS):
    """The first console line from byte `since` on that holds one of `patterns` (RCU's stall
    reports unless told), or None."""
    try:
        with open(bed.console, "rb") as f:
            f.seek(since)
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return None
    return next((line.strip() for line in lines if any(k in line for k in patterns)), None)


def console_end(bed, n=12):
    """The console's last `n` non-empty lines, joined: where a silent guest stopped."""
    try:
        lines = [line.strip() for line in open(bed.console, errors="replace").read().splitlines()]
    except OSError:
        return "(no console)"
    return " | ".join([line for line in lines if line][-n:])


def emulation_crash(bed):
    """What the emulator did to the guest before any check failed, or None: the guest kernel
    died on an int3 oops (TCG's cross-vCPU code patching, seen at boot in sched_clock_cpu and
    in the XDP dispatcher while programs are attached and detached), a vCPU's timer stopped
    firing (`TIMER_STALL`, reported before the first failed check), or the guest went silent
    (`Bed.went_silent`) with no check failed and no hung task or soft lockup reported
    (`KERNEL_HANGS`), its RCU stall report (`KERNEL_STALLS`) named where there is one. Not
    something a check found."""
    try:
        text = open(bed.console, errors="replace").read()
    except OSError:
        return None
    if bed.checks_failed == 0 and "Oops: int3" in text and "Kernel panic" in text:
        return "the guest kernel died on an int3 oops (TCG's cross-vCPU code patching)"
    stall, failed = text.find(TIMER_STALL), text.find("RESULT FAIL")
    # The host's own failures (eBPF RSS, a sink, the harness) never reach the console: a
    # boot with any of them is not retried.
    if stall >= 0 and (failed < 0 or stall < failed) and not bed.failures:
        return "a guest CPU's timer stopped firing before any check failed (RCU: " + TIMER_STALL + ")"
    if not bed.went_silent or failed >= 0 or bed.checks_failed or bed.failures:
        return None
    # A task or CPU stuck in the guest kernel may be the dataplane's doing: a failure.
    if kernel_stall(bed, patterns=KERNEL_HANGS):
        return None
    line = kernel_stall(bed)
    if line:
        return f"the guest went silent after its kernel reported an RCU stall, before any check failed ({line})"
    # The guest's commands are bounded (a failed check when one overruns) and the kernel's
    # watchdogs reported no stuck task: a guest silent with no check failed is one whose
    # emulated CPUs stopped running it.
    return f"the guest went silent before any check failed; its console ended: {console_end(bed, 6)}"


def boot(a, bed, ran, rows, what):
    """Boots `bed`, serves its guest until DONE, tears it down; true when every check
    passed. A guest the emulator stopped before any check failed (`emulation_crash`) boots
    once more."""
    kept = len(rows)
    ok = boot_once(a, bed, ran, rows, what)
    why = None if ok else emulation_crash(bed)
    if why:
        del rows[kept:]  # the rows the crashed boot reported come again from the next
        FAILED_BOOTS.pop()  # the next boot's verdict stands for both
        print(f"vmtest: {what}: {why}: booting it once more", flush=True)
        again = Bed(bed.args, retry=True)
        again.results = None
        ok = boot_once(a, again, ran, rows, f"{what} (second boot)")
        bed.results = again.results
    return ok


def boot_once(a, bed, ran, rows, what):
    """One boot of `bed`: serves its guest until DONE, tears it down."""
    ok = False
    t1 = time.time()
    try:
        bed.up()
        ok = serve(bed, a.timeout, ran, rows)
        if bed.qemu.poll() is None:
            try:
                bed.qemu.wait(timeout=30)
            except subprocess.TimeoutExpired:
                pass
        why = bed.ebpf_rss_failure()
        if why:
            print(f"vmtest: FAIL: eBPF RSS asked for: {why}", flush=True)
            bed.failures.append(f"eBPF RSS: {why}")
            ok = False
    except Exception as e:  # a clear message, then the teardown below
        print(f"vmtest: FAIL: {e}", flush=True)
        bed.failures.append(str(e))
    finally:
        bed.down(keep_logs=not ok)
    if not ok:
        print(f"vmtest: guest console: {bed.console}", flush=True)
        try:
            print("".join(open(bed.console, errors="replace").readlines()[-40:]))
        except OSError:
            pass
    print(f"vmtest: {what}: {'passed' if ok else 'FAILED'} in {time.time() - t1:.0f} s", flush=True)
    if not ok:
        FAILED_BOOTS.append((what, bed.failures or ["no failed check: the guest gave no verdict; "
                                                    f"its console ended: {console_end(bed)}"]))
    return ok


if __name__ == "__main__":
    main()
