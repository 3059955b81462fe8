//! Jumbo frames through the dataplane (AF_XDP multi-buffer, copy mode on veth): real clients
//! across a testbed whose links run at MTU 9000, a 9000 -> 1500 hop (fragmentation and the
//! ICMP errors RFC 1812 and RFC 4443 call for), and an MTU raised while running. Each test
//! also asserts that the dataplane, not the DUT's kernel, carried the packets, as chains of
//! buffers. They need root.
mod common;

use std::process::{Command, Stdio};
use std::time::Duration;

use common::router::*;
use common::*;
use dataplane::packet::DropReason;
use dataplane::poller::stats::Counter;
use dataplane::testbed::{self, Testbed};

/// Sets `mtu` on the links: gen <-> dut_in (both ends) when `ingress`, dut_out <-> sink (both
/// ends) when `egress`.
fn set_mtu(t: &Testbed, mtu: u32, ingress: bool, egress: bool) {
    let mtu = mtu.to_string();
    let mut links = Vec::new();
    if ingress {
        links.push((t.gen_ns(), t.gen_if()));
        links.push((t.dut_ns(), t.dut_in()));
    }
    if egress {
        links.push((t.dut_ns(), t.dut_out()));
        links.push((t.sink_ns(), t.sink_if()));
    }
    for (n, ifname) in links {
        let out = ns(&n, &["ip", "link", "set", "dev", &ifname, "mtu", &mtu]);
        assert!(out.status.success(), "mtu {mtu} on {ifname}: {out:?}");
    }
}

fn text(out: &std::process::Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs an iperf3 client in the generator against a one-shot server in the sink; its JSON.
fn iperf3(t: &Testbed, family: &str, dst: &str, args: &[&str]) -> serde_json::Value {
    let mut server = Command::new("ip")
        .args(["netns", "exec", &t.sink_ns(), "iperf3", "-s", "-1", family])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("iperf3 server");
    wait_listening(&t.sink_ns(), 5201);
    let mut cmd = vec!["iperf3", family, "-c", dst, "-J"];
    cmd.extend_from_slice(args);
    let out = ns_output(&t.gen_ns(), &cmd);
    let _ = server.kill();
    let _ = server.wait();
    assert!(out.status.success(), "iperf3 {cmd:?}: {}", text(&out));
    serde_json::from_str(&text(&out)).expect("iperf3 json")
}

/// The path MTU `tracepath` found to `dst` from the generator: its closing line's
/// "Resume: pmtu N", with the destination reached (its first line's pmtu is only the
/// sending interface's MTU).
fn tracepath_pmtu(t: &Testbed, v6: bool, dst: &str) -> Option<u32> {
    let mut args = vec!["tracepath", "-n"];
    if v6 {
        args.push("-6");
    }
    args.push(dst);
    let out = text(&ns_output(&t.gen_ns(), &args));
    path_pmtu(&out)
}

/// The "Resume: pmtu N" of a tracepath output that reached its destination.
fn path_pmtu(out: &str) -> Option<u32> {
    if !out.lines().any(|l| l.trim_end().ends_with("reached")) {
        return None;
    }
    let resume = out
        .lines()
        .find(|l| l.trim_start().starts_with("Resume:"))?;
    let at = resume.find("pmtu ")?;
    resume[at + 5..].split_whitespace().next()?.parse().ok()
}

#[test]
fn the_path_pmtu_is_read_from_tracepaths_resume_line() {
    // A path that stops at 1500 after a first hop of 9000: the first line says 9000.
    let cut = " 1?: [LOCALHOST]                      pmtu 9000\n                 1:  10.0.1.1                                              0.120ms pmtu 1500\n                 2:  10.0.2.2                                              0.210ms reached\n                     Resume: pmtu 1500 hops 2 back 2 \n";
    assert_eq!(path_pmtu(cut), Some(1500));
    let unreached = " 1?: [LOCALHOST]                      pmtu 9000\n                      1:  no reply\n     Too many hops: pmtu 9000\n                          Resume: pmtu 9000 \n";
    assert_eq!(path_pmtu(unreached), None);
}

/// Asserts the dataplane carried multi-buffer packets and the DUT's kernel forwarded none.
fn assert_chains_forwarded(s: &serde_json::Value, kernel_before: (u64, u64), t: &Testbed) {
    assert!(
        counter(s, Counter::RxChainBuffers) > 0 && counter(s, Counter::TxChainBuffers) > 0,
        "no multi-buffer packet crossed the dataplane: {s}"
    );
    assert_eq!(
        kernel_forwarded(&t.dut_ns()),
        kernel_before,
        "the DUT's kernel forwarded transit packets"
    );
    assert_frames_accounted(s);
}

#[test]
fn jumbo_frames_cross_the_dataplane_with_real_clients() {
    if !root_or_skip("jumbo frames, real clients") {
        return;
    }
    let bed = Bed::up("tjb", 1);
    let t = &bed.0;
    set_mtu(t, 9000, true, true);
    let kernel_before = kernel_forwarded(&t.dut_ns());
    // UDP first, on a dataplane of its own: 8000-byte datagrams, one packet each at MTU
    // 9000; loss only where the sink's socket dropped it, and not one drop in the
    // dataplane (its whole run's counters).
    let dut = Dut::start(&bed, &config(t, ""));
    let udp_before = udp_counters(&t.sink_ns());
    let v = iperf3(
        t,
        "-4",
        testbed::SINK_V4,
        &["-u", "-l", "8000", "-b", "50M", "-t", "2"],
    );
    assert_udp_lost_only_at_the_sink_socket(
        &v["end"]["sum"],
        udp_before,
        udp_counters(&t.sink_ns()),
    );
    let s = dut.stop();
    assert_eq!(total_drops(&s), 0, "the dataplane dropped datagrams: {s}");
    assert!(
        counter(&s, Counter::TxPackets) >= v["end"]["sum"]["packets"].as_u64().unwrap_or(0),
        "{s}"
    );
    assert_chains_forwarded(&s, kernel_before, t);
    let dut = Dut::start(&bed, &config(t, ""));
    // TCP, both families: 9000-byte segments (8948 bytes of MSS over IPv4).
    for (family, dst) in [("-4", testbed::SINK_V4), ("-6", testbed::SINK_V6)] {
        let v = iperf3(t, family, dst, &["-t", "2"]);
        let bytes = v["end"]["sum_received"]["bytes"].as_u64().unwrap_or(0);
        assert!(
            bytes > 10_000_000,
            "iperf3 TCP {family} moved {bytes} bytes"
        );
    }
    // 20 MB over HTTP, checked by its SHA-256 at both ends.
    let dir = tempfile_dir();
    let file = dir.join("blob");
    let mut blob = vec![0u8; 20 << 20];
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    for b in blob.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    std::fs::write(&file, &blob).expect("write blob");
    let mut server = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.sink_ns(),
            "python3",
            "-m",
            "http.server",
        ])
        .args(["8080", "--bind", testbed::SINK_V4, "--directory"])
        .arg(&dir)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("http server");
    wait_listening(&t.sink_ns(), 8080);
    let url = format!("http://{}:8080/blob", testbed::SINK_V4);
    let out = ns_output(
        &t.gen_ns(),
        &[
            "bash",
            "-c",
            &format!("curl -sf --max-time 30 {url} | sha256sum"),
        ],
    );
    let _ = server.kill();
    let _ = server.wait();
    let want = text(
        &Command::new("sha256sum")
            .arg(&file)
            .output()
            .expect("sha256sum"),
    );
    let got = text(&out);
    assert_eq!(
        got.split_whitespace().next(),
        want.split_whitespace().next(),
        "the 20 MB file's SHA-256 after the dataplane"
    );
    let _ = std::fs::remove_dir_all(&dir);
    // The path MTU, as tracepath finds it: 9000 all the way.
    assert_eq!(tracepath_pmtu(t, false, testbed::SINK_V4), Some(9000));
    assert_eq!(tracepath_pmtu(t, true, testbed::SINK_V6), Some(9000));
    let s = dut.stop();
    assert_chains_forwarded(&s, kernel_before, t);
    // tracepath's first probes, 9000 bytes with TTL 1, were answered by the dataplane
    // (time exceeded, built in the chain's first buffer): hop 1 is the DUT.
    assert!(
        drop_count(&s, DropReason::TtlExceeded) > 0 && counter(&s, Counter::IcmpSent) > 0,
        "{s}"
    );
    for reason in [
        DropReason::ChainUnterminated,
        DropReason::ChainTooLong,
        DropReason::ChainEmptyBuffer,
        DropReason::ChainShortHead,
    ] {
        assert_eq!(drop_count(&s, reason), 0, "{}: {s}", reason.name());
    }
}

/// A scratch directory of this test's own.
fn tempfile_dir() -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("dp-jumbo-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

#[test]
fn a_9000_to_1500_hop_fragments_ipv4_and_says_too_big_otherwise() {
    if !root_or_skip("jumbo to 1500") {
        return;
    }
    let bed = Bed::up("tjf", 1);
    let t = &bed.0;
    set_mtu(t, 9000, true, false);
    let kernel_before = kernel_forwarded(&t.dut_ns());
    let dut = Dut::start(&bed, &config(t, ""));
    // Without DF: 8028-byte echo requests leave as six fragments each, and are answered
    // (the sink fragments its replies to its own 1500-byte link).
    assert_pings(
        &t.gen_ns(),
        &["-c", "3", "-M", "dont", "-s", "8000", testbed::SINK_V4],
        "ping -M dont -s 8000 through a 1500-byte egress",
    );
    // With DF: fragmentation needed, with the egress MTU (RFC 1191).
    let out = ping_df(&t.gen_ns(), testbed::SINK_V4, 8000, 2);
    assert!(
        !out.status.success(),
        "a DF packet got through: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("Frag needed and DF set (mtu = 1500)"),
        "ping -M do: {}",
        text(&out)
    );
    // IPv6: packet too big with the MTU (RFC 4443 3.2); the sender then fragments itself.
    let out = ns_output(
        &t.gen_ns(),
        &[
            "ping",
            "-6",
            "-c",
            "3",
            "-i",
            "0.3",
            "-W",
            "2",
            "-s",
            "8000",
            testbed::SINK_V6,
        ],
    );
    assert!(
        text(&out).contains("Packet too big: mtu=1500"),
        "ping -6 -s 8000: {}",
        text(&out)
    );
    assert!(
        text(&out).contains("bytes from"),
        "the source-fragmented IPv6 echo was answered: {}",
        text(&out)
    );
    let s = dut.stop();
    let (ok, creates) = (
        counter(&s, Counter::FragOk),
        counter(&s, Counter::FragCreates),
    );
    assert_eq!(ok, 3, "the three no-DF requests: {s}");
    assert_eq!(
        creates, 18,
        "8008 bytes of payload in 1480-byte pieces: six each: {s}"
    );
    assert_eq!(
        drop_count(&s, DropReason::TooBig),
        2,
        "the DF ping and the first IPv6 one: {s}"
    );
    assert!(counter(&s, Counter::IcmpSent) >= 2, "{s}");
    assert!(counter(&s, Counter::RxChainBuffers) > 0, "{s}");
    assert_eq!(
        kernel_forwarded(&t.dut_ns()),
        kernel_before,
        "the DUT's kernel forwarded transit packets"
    );
    assert_frames_accounted(&s);
}

#[test]
fn an_mtu_raised_to_9000_while_running_carries_jumbo_frames() {
    if !root_or_skip("mtu raised while running") {
        return;
    }
    let bed = Bed::up("tjm", 1);
    let t = &bed.0;
    let kernel_before = kernel_forwarded(&t.dut_ns());
    let mut dut = Dut::start(&bed, &config(t, ""));
    // At 1500 the generator's own stack refuses 8000 bytes with DF.
    let out = ping_df(&t.gen_ns(), testbed::SINK_V4, 8000, 1);
    assert!(
        !out.status.success(),
        "8000 bytes at MTU 1500: {}",
        text(&out)
    );
    set_mtu(t, 9000, true, true);
    assert!(
        dut.wait_log("mtu now 9000", Duration::from_secs(5)),
        "the control thread saw the new MTU: {:?}",
        dut.log_lines()
    );
    assert_pings(
        &t.gen_ns(),
        &["-c", "3", "-M", "do", "-s", "8000", testbed::SINK_V4],
        "ping -M do -s 8000 after the MTU went to 9000",
    );
    assert_pings(
        &t.gen_ns(),
        &["-6", "-c", "3", "-M", "do", "-s", "8000", testbed::SINK_V6],
        "ping -6 -M do -s 8000 after the MTU went to 9000",
    );
    let s = dut.stop();
    assert_eq!(drop_count(&s, DropReason::TooBig), 0, "{s}");
    assert_chains_forwarded(&s, kernel_before, t);
}
