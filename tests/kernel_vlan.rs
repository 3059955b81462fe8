//! The kernel's VLAN devices as the dataplane's sub-interfaces (`routes = "kernel"`, no
//! `[[subinterfaces]]`), with real clients: the generator's namespace on VLAN 100, the sink's
//! on QinQ 200/300, each a Linux VLAN device, routed by the dataplane between an 802.1Q
//! device and an 802.1Q device over an 802.1ad one, both found over netlink. ping, tracepath
//! (the dataplane's time exceeded from the sub-interface's address), PMTU and fragments, TCP
//! (iperf3), a martian dropped by reason, a VLAN device deleted and created again while
//! pings flow, one added during the run forwarded for from then on, tag stripping off while
//! running and on again at stop; the kernel's forwarding counters unchanged throughout.
//!
//! It needs a kernel with 802.1Q (`CONFIG_VLAN_8021Q`). The host this project is built on has
//! none: there the test checks that the run finds no VLAN device and says so. `make vmtest`
//! runs it in the guest, whose kernel has 802.1Q, with `DATAPLANE_REQUIRE_8021Q=1`, so there
//! it cannot pass without. It needs root.
mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::router::*;
use common::*;
use dataplane::packet::build::{udp_v4, FrameSpec};
use dataplane::packet::vlan::{push_tags, Tag, TagStack};
use dataplane::packet::DropReason;
use dataplane::testbed::Testbed;

const GEN_V: &str = "10.100.0.2";
const DUT_V: &str = "10.100.0.1";
const DUT_QQ: &str = "10.201.0.1";
const SINK_QQ: &str = "10.201.0.2";

/// Whether this kernel makes 802.1Q devices (a probe in namespace `n`, deleted at once).
fn has_8021q(n: &str, on: &str) -> bool {
    let made = Command::new("ip")
        .args(["netns", "exec", n, "ip", "link", "add", "link", on])
        .args(["name", "vprobe", "type", "vlan", "id", "4000"])
        .output()
        .is_ok_and(|o| o.status.success());
    if made {
        ns(n, &["ip", "link", "del", "vprobe"]);
    }
    made
}

/// `name`, a VLAN device on `lower` in namespace `n` (`proto`: 802.1Q or 802.1ad), up, with
/// `addr` if any.
fn vlan(n: &str, lower: &str, name: &str, proto: &str, id: u16, addr: Option<&str>) {
    let id = id.to_string();
    ns(
        n,
        &[
            "ip", "link", "add", "link", lower, "name", name, "type", "vlan", "protocol", proto,
            "id", &id,
        ],
    );
    if let Some(a) = addr {
        ns(n, &["ip", "addr", "add", a, "dev", name]);
    }
    ns(n, &["ip", "link", "set", name, "up"]);
}

/// The DUT's QinQ device `v300` on `v200`, its MTU 4 bytes under the veth's (a veth takes
/// frames of its MTU plus one tag).
fn dut_qinq(t: &Testbed) {
    vlan(
        &t.dut_ns(),
        "v200",
        "v300",
        "802.1Q",
        300,
        Some("10.201.0.1/24"),
    );
    ns(&t.dut_ns(), &["ip", "link", "set", "v300", "mtu", "1496"]);
}

/// The generator on VLAN 100 and the sink on QinQ 200/300, the DUT's kernel with a VLAN
/// device on each port and forwarding on (so a frame the dataplane left to it would show in
/// its counters).
fn vlans_up(t: &Testbed) {
    vlan(
        &t.gen_ns(),
        &t.gen_if(),
        "v100",
        "802.1Q",
        100,
        Some(&format!("{GEN_V}/24")),
    );
    ns(
        &t.gen_ns(),
        &["ip", "route", "add", "10.201.0.0/24", "via", DUT_V],
    );
    vlan(
        &t.dut_ns(),
        &t.dut_in(),
        "v100",
        "802.1Q",
        100,
        Some("10.100.0.1/24"),
    );
    vlan(&t.dut_ns(), &t.dut_out(), "v200", "802.1ad", 200, None);
    dut_qinq(t);
    ns(&t.dut_ns(), &["sysctl", "-qw", "net.ipv4.ip_forward=1"]);
    vlan(&t.sink_ns(), &t.sink_if(), "v200", "802.1ad", 200, None);
    vlan(
        &t.sink_ns(),
        "v200",
        "v300",
        "802.1Q",
        300,
        Some("10.201.0.2/24"),
    );
    ns(
        &t.sink_ns(),
        &["ip", "route", "add", "10.100.0.0/24", "via", DUT_QQ],
    );
    // A veth takes frames of its MTU plus one tag: two tags leave 4 bytes less for IP.
    ns(&t.sink_ns(), &["ip", "link", "set", "v300", "mtu", "1496"]);
}

/// Pings `dst` from namespace `from` once a second until one answers (the neighbours on
/// both sides resolve on the first tries), at most `max`.
fn until_answered(from: &str, dst: &str, max: Duration) -> bool {
    let start = Instant::now();
    while start.elapsed() < max {
        let out = ns_output(from, &["ping", "-c", "1", "-W", "1", dst]);
        if out.status.success() {
            return true;
        }
    }
    false
}

/// Whether the DUT's `port` strips 802.1Q tags on receive, as `ethtool -k` says.
fn strips(t: &Testbed, port: &str) -> bool {
    let out = ns(&t.dut_ns(), &["ethtool", "-k", port]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.trim() == "rx-vlan-offload: on")
}

fn text(o: &std::process::Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

#[test]
fn the_kernels_vlan_devices_are_routed_by_the_dataplane() {
    if !root_or_skip("kernel vlan devices") {
        return;
    }
    let bed = Bed::up("tkv", 1);
    let t = &bed.0;
    if !has_8021q(&t.gen_ns(), &t.gen_if()) {
        assert!(
            std::env::var_os("DATAPLANE_REQUIRE_8021Q").is_none(),
            "this kernel makes no 802.1Q devices, and DATAPLANE_REQUIRE_8021Q asks for them"
        );
        // No VLAN device to find: the run says which source it used, and found none.
        let mut dut = Dut::start(&bed, &kernel_config(t));
        assert!(
            dut.wait_log(
                "sub-interfaces: 0 of the kernel's VLAN devices on the ports",
                Duration::from_secs(5)
            ),
            "{:?}",
            dut.log_lines()
        );
        dut.stop();
        eprintln!(
            "kernel vlan: this kernel has no 802.1Q devices; make vmtest runs the whole test in \
             the guest"
        );
        return;
    }
    vlans_up(t);
    let mut dut = Dut::start_for(&bed, &kernel_config(t), &[], &[], 300);
    let found = [
        "sub-interfaces: 3 of the kernel's VLAN devices on the ports",
        "sub-interface v100 (from the kernel's VLAN devices): on tkv-d0, 802.1Q 100",
        "sub-interface v200 (from the kernel's VLAN devices): on tkv-d1, 802.1ad 200",
        "sub-interface v300 (from the kernel's VLAN devices): on tkv-d1, 802.1ad 200 over 802.1Q 300",
    ];
    for line in found {
        assert!(
            dut.log_lines().iter().any(|l| l.contains(line)),
            "{line}: {:?}",
            dut.log_lines()
        );
    }
    for p in [t.dut_in(), t.dut_out()] {
        assert!(!strips(t, &p), "{p}: tag stripping off while running");
    }
    let forwarded_before = kernel_forwarded(&t.dut_ns());
    assert!(
        until_answered(&t.gen_ns(), SINK_QQ, Duration::from_secs(30)),
        "ping VLAN 100 -> QinQ 200/300: {:?}",
        dut.log_lines()
    );
    assert_pings(
        &t.gen_ns(),
        &["-c", "5", SINK_QQ],
        "ping through the sub-interfaces",
    );

    // tracepath: the first hop is the dataplane's time exceeded, from the VLAN device's
    // address, back on VLAN 100.
    let out = ns_output(&t.gen_ns(), &["tracepath", "-n", "-m", "4", SINK_QQ]);
    let hops = text(&out);
    assert!(hops.contains(DUT_V), "the first hop is {DUT_V}: {hops}");
    assert!(hops.contains(SINK_QQ), "the path reaches {SINK_QQ}: {hops}");
    assert!(
        hops.contains("pmtu 1496"),
        "the dataplane's frag needed gave QinQ's MTU: {hops}"
    );

    // The egress VLAN device's MTU lowered: DF answered with its MTU, the rest fragmented.
    ns(&t.dut_ns(), &["ip", "link", "set", "v300", "mtu", "1400"]);
    let start = Instant::now();
    let mut said = String::new();
    while start.elapsed() < Duration::from_secs(10) && !said.contains("mtu = 1400") {
        said = text(&ping_df(&t.gen_ns(), SINK_QQ, 1400, 1));
    }
    assert!(
        said.contains("mtu = 1400") && said.contains(DUT_V),
        "frag needed from {DUT_V}: {said}"
    );
    let out = ns_output(
        &t.gen_ns(),
        &[
            "ping", "-c", "2", "-W", "2", "-M", "dont", "-s", "1400", SINK_QQ,
        ],
    );
    assert!(out.status.success(), "fragmented on QinQ: {}", text(&out));

    // TCP across both sub-interfaces.
    let mut server = Command::new("ip")
        .args(["netns", "exec", &t.sink_ns(), "iperf3", "-s", "-1", "-4"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("iperf3 server");
    wait_listening(&t.sink_ns(), 5201);
    let out = ns_output(
        &t.gen_ns(),
        &["iperf3", "-4", "-c", SINK_QQ, "-t", "2", "-J"],
    );
    let _ = server.kill();
    let _ = server.wait();
    let json: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or(serde_json::Value::Null);
    let bytes = json["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
    assert!(
        bytes > 100_000,
        "iperf3 moved {bytes} bytes: {}",
        text(&out)
    );

    // A martian source on VLAN 100: dropped by reason.
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    let mut martian = vec![0; 4];
    martian.extend(udp_v4(&FrameSpec {
        src4: "127.0.0.1".parse().unwrap(),
        dst4: SINK_QQ.parse().unwrap(),
        ..spec(7000)
    }));
    push_tags(&mut martian, &TagStack::one(Tag::dot1q(100))).expect("room for the tag");
    for _ in 0..5 {
        gen.send(&martian).expect("send");
    }

    // The QinQ device deleted and made again while pings flow; a new device added, then
    // routed through below.
    let gen_ns = t.gen_ns();
    let pinger = std::thread::spawn(move || {
        Command::new("ip")
            .args(["netns", "exec", &gen_ns, "ping", "-i", "0.1", "-c", "80"])
            .args(["-W", "1", SINK_QQ])
            .output()
    });
    ns(&t.dut_ns(), &["ip", "link", "del", "v300"]);
    assert!(
        dut.wait_log(
            "was deleted: its frames are dropped",
            Duration::from_secs(10)
        ),
        "{:?}",
        dut.log_lines()
    );
    // The gap is met: a ping fails before the device is made again.
    let gap = Instant::now();
    let mut failed = false;
    while !failed && gap.elapsed() < Duration::from_secs(10) {
        let out = ns_output(&t.gen_ns(), &["ping", "-c", "1", "-W", "1", SINK_QQ]);
        failed = !out.status.success();
    }
    assert!(failed, "a ping failed while v300 was gone");
    dut_qinq(t);
    assert!(
        dut.wait_log("exists again: forwarded for", Duration::from_secs(10)),
        "{:?}",
        dut.log_lines()
    );
    vlan(
        &t.dut_ns(),
        &t.dut_in(),
        "v101",
        "802.1Q",
        101,
        Some("10.101.0.1/24"),
    );
    assert!(
        dut.wait_log(
            "added: on tkv-d0, 802.1Q 101: forwarded for",
            Duration::from_secs(10)
        ),
        "{:?}",
        dut.log_lines()
    );
    let during = pinger.join().expect("pinger").expect("ping");
    let during = text(&during);
    assert!(during.contains("received"), "{during}");
    if !until_answered(&t.gen_ns(), SINK_QQ, Duration::from_secs(30)) {
        let tables = [
            text(&ns(&t.dut_ns(), &["ip", "-d", "link"])),
            text(&ns(&t.dut_ns(), &["ip", "route"])),
            text(&ns(&t.dut_ns(), &["ip", "neigh"])),
        ];
        let s = dut.stop();
        panic!("ping through the QinQ device made again: {tables:?}\n{s}");
    }
    assert_pings(
        &t.gen_ns(),
        &["-c", "3", SINK_QQ],
        "ping after the device came back",
    );
    // The VLAN device added during the run routes too: the sink to a host behind it.
    vlan(
        &t.gen_ns(),
        &t.gen_if(),
        "v101",
        "802.1Q",
        101,
        Some("10.101.0.2/24"),
    );
    ns(
        &t.sink_ns(),
        &["ip", "route", "add", "10.101.0.0/24", "via", DUT_QQ],
    );
    let answered = until_answered(&t.sink_ns(), "10.101.0.2", Duration::from_secs(30));
    assert!(
        answered,
        "QinQ -> the added VLAN 101: {:?}",
        dut.log_lines()
    );
    assert_pings(
        &t.sink_ns(),
        &["-c", "3", "10.101.0.2"],
        "ping to the VLAN device added during the run",
    );
    assert_eq!(
        kernel_forwarded(&t.dut_ns()).0,
        forwarded_before.0,
        "the kernel forwarded none of it"
    );
    let s = dut.stop();
    for p in [t.dut_in(), t.dut_out()] {
        assert!(strips(t, &p), "{p}: tag stripping on again after the stop");
    }
    assert!(steer(&s, 0, REDIRECTED) >= 20, "{s}");
    assert!(
        drop_count(&s, DropReason::MartianSource) >= 5,
        "martians dropped by reason: {s}"
    );
    assert!(
        drop_count(&s, DropReason::LinkDown) + drop_count(&s, DropReason::NoRoute) > 0,
        "pings dropped while the device was gone: {s}"
    );
}
