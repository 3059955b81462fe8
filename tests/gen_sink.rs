//! The measuring instruments: the generator's frames (captured and parsed back) and the sink's
//! count against a known send. They need root.
mod common;

use std::io::{BufRead, BufReader};
use std::process::Command;
use std::time::Duration;

use common::*;
use dataplane::gen::{GenSpec, Template};
use dataplane::testbed;

fn spec(flows: u32, ipv6: bool) -> GenSpec {
    GenSpec {
        size: if ipv6 { 80 } else { 64 },
        flows,
        ipv6,
        src: None,
        dst: None,
        dst_mac: dataplane::types::parse_mac(testbed::DUT_IN_MAC).expect("mac"),
        src_mac: dataplane::types::parse_mac(testbed::GEN_MAC).expect("mac"),
    }
}

fn gen(bed: &Bed, args: &[&str]) -> serde_json::Value {
    let json = std::env::temp_dir().join(format!("{}-gen.json", bed.0.prefix));
    let out = dataplane_in(
        &bed.0.gen_ns(),
        &["gen", "--iface", &bed.0.gen_if(), "--json"],
    )
    .arg(&json)
    .args(args)
    .output()
    .expect("gen");
    assert!(
        out.status.success(),
        "gen: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_str(&std::fs::read_to_string(&json).expect("gen json")).expect("json")
}

#[test]
fn generator_frames_parse_back_as_specified() {
    if !root_or_skip("generator frames") {
        return;
    }
    let bed = Bed::up("tgn", 1);
    let t = &bed.0;
    // Frames sent by XDP into a veth need an XDP program or GRO on the receiving side.
    let ok = Command::new("ip")
        .args([
            "netns",
            "exec",
            &t.dut_ns(),
            "ethtool",
            "-K",
            &t.dut_in(),
            "gro",
            "on",
        ])
        .status()
        .expect("ethtool");
    assert!(ok.success());
    for ipv6 in [false, true] {
        let cap = packet_socket(&t.dut_ns(), &t.dut_in());
        let family = if ipv6 {
            vec!["--ipv6", "--size", "80"]
        } else {
            vec!["--size", "64"]
        };
        let mut args = vec!["--count", "40", "--flows", "5"];
        args.extend(family);
        let g = gen(&bed, &args);
        assert_eq!(g["packets"], 40);
        let got: Vec<Vec<u8>> = capture(&cap, Duration::from_millis(500), Duration::from_secs(5))
            .into_iter()
            .filter(|f| {
                f.len() > 13
                    && f[12..14]
                        == [
                            if ipv6 { 0x86 } else { 0x08 },
                            if ipv6 { 0xdd } else { 0x00 },
                        ]
            })
            .filter(|f| {
                let l4 = if ipv6 { 54 } else { 34 };
                f.len() > l4 + 3 && f[l4 + 2..l4 + 4] == [0, 9]
            })
            .collect();
        let t = Template::new(&spec(5, ipv6)).expect("template");
        let mut want: Vec<Vec<u8>> = (0..40).map(|n| t.expected(n)).collect();
        let mut got_sorted = got.clone();
        want.sort();
        got_sorted.sort();
        assert_eq!(got_sorted.len(), 40, "captured {} frames", got.len());
        assert_eq!(
            got_sorted, want,
            "frames byte for byte as the template says (ipv6 {ipv6})"
        );
    }
}

/// Starts `dataplane sink` on the DUT's ingress for `seconds`, writing `json`; returns once
/// it says its program is attached and its window open.
fn start_sink(bed: &Bed, json: &std::path::Path, seconds: &str) -> std::process::Child {
    let t = &bed.0;
    let mut sink = dataplane_in(
        &t.dut_ns(),
        &[
            "sink",
            "--iface",
            &t.dut_in(),
            "--duration",
            seconds,
            "--json",
        ],
    )
    .arg(json)
    .stderr(std::process::Stdio::piped())
    .spawn()
    .expect("sink");
    let mut lines = BufReader::new(sink.stderr.take().expect("stderr")).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("window open"))),
        "sink did not start"
    );
    sink
}

#[test]
fn sink_counts_exactly_what_was_sent() {
    if !root_or_skip("sink count") {
        return;
    }
    let bed = Bed::up("tsk", 1);
    let t = &bed.0;
    let json = std::env::temp_dir().join("tsk-sink.json");
    let mut sink = start_sink(&bed, &json, "5");
    let g = gen(&bed, &["--count", "50000", "--flows", "3"]);
    assert_eq!(g["packets"], 50000);
    // Then paced (sendmmsg batches on a schedule): every frame counted, and never ahead of the
    // schedule, so 30,000 frames at 100 kpps take at least 0.3 s.
    let p = gen(
        &bed,
        &["--count", "30000", "--flows", "3", "--rate", "100000"],
    );
    assert_eq!(p["packets"], 30000);
    let secs = p["seconds"].as_f64().expect("seconds");
    assert!(secs >= 0.29, "paced send kept to its schedule: {p}");
    // And the AF_XDP TX path (the fallback where live frames are unavailable): every frame.
    let x = gen(&bed, &["--count", "20000", "--flows", "3", "--xsk"]);
    assert_eq!(x["packets"], 20000, "AF_XDP TX completions: {x}");
    assert!(sink.wait().expect("sink").success());
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("sink json")).expect("json");
    // `matched` counts the generator's frames (UDP to port 9); `packets` also counts what the
    // generator namespace's own kernel sends (IPv6 neighbour discovery, MLD).
    assert_eq!(s["matched"], 100000, "sink counted every frame sent: {s}");
    // Each run numbers its flows' frames in order (live frames and paced; AF_XDP TX sends
    // them unnumbered): nothing reordered on one veth.
    assert_eq!(s["reordered"], 0, "{s}");
    let packets = s["packets"].as_u64().expect("packets");
    assert!((100000..100020).contains(&packets), "{s}");
    assert!(
        s["bytes"].as_u64().expect("bytes") >= 100000 * 60,
        "60 bytes each (64 on the wire less the FCS)"
    );
    assert!(
        !has_xdp(&t.dut_ns(), &t.dut_in()),
        "the sink detaches on exit"
    );
}

#[test]
fn the_sink_counts_frames_behind_their_flows_number_as_reordered() {
    if !root_or_skip("sink reordering") {
        return;
    }
    let bed = Bed::up("tro", 1);
    let t = &bed.0;
    let json = std::env::temp_dir().join(format!("{}-sink.json", t.prefix));
    let mut sink = start_sink(&bed, &json, "20");
    // Two flows, frames numbered as the generator numbers them (frame n is flow n % 2,
    // number n / 2): flow 0 gets 0, 1, 3, 2 (one behind), 4, then 1001 (ahead); flow 1 gets
    // 0, 1, 2, 4, 3 (one behind). Two reordered frames.
    let tpl = Template::new(&spec(2, false)).expect("template");
    let order = [0u64, 1, 2, 3, 6, 4, 5, 9, 7, 8, 2002];
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    for n in order {
        gen.send(&tpl.expected(n)).expect("send");
    }
    std::thread::sleep(Duration::from_millis(300));
    let _ = Command::new("kill")
        .args(["-INT", &sink.id().to_string()])
        .status();
    assert!(sink.wait().expect("sink").success());
    let s: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).expect("sink json")).expect("json");
    assert_eq!(s["matched"], order.len() as u64, "{s}");
    assert_eq!(s["reordered"], 2, "{s}");
}
