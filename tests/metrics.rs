//! Prometheus metrics of a running dataplane (`--metrics`): scraped while it forwards, checked
//! by `promtool check metrics`, counters against what the sink counted and what was sent.
//! They need root.
mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::router::{config, spec};
use common::*;
use dataplane::packet::build::udp_v4;

#[test]
fn scraped_metrics_are_valid_and_agree_with_the_sink() {
    if !root_or_skip("prometheus metrics") {
        return;
    }
    let bed = Bed::up("tpm", 1);
    let t = &bed.0;
    let sink_json = std::env::temp_dir().join(format!("{}-sink.json", t.prefix));
    let _ = std::fs::remove_file(&sink_json);
    // The sink drops everything in XDP, so its kernel sends nothing back through the DUT.
    let mut sink = dataplane_in(&t.sink_ns(), &["sink", "--iface", &t.sink_if()])
        .args(["--duration", "4", "--match-port", "7777", "--json"])
        .arg(&sink_json)
        .stderr(Stdio::piped())
        .stdout(Stdio::null())
        .spawn()
        .expect("sink");
    let mut lines = BufReader::new(sink.stderr.take().expect("stderr")).lines();
    assert!(
        lines.any(|l| l.is_ok_and(|l| l.contains("window open"))),
        "sink did not start"
    );
    let port = 9911;
    let dut = Dut::start_with(&bed, &config(t, ""), &["--metrics", &port.to_string()]);
    let gen = packet_socket(&t.gen_ns(), &t.gen_if());
    for i in 0..300u16 {
        gen.send(&udp_v4(&spec(i))).expect("send");
    }
    let good = udp_v4(&spec(999));
    for _ in 0..3 {
        let mut f = good.clone();
        f[24] ^= 0x5a; // header checksum
        gen.send(&f).expect("send");
    }
    for _ in 0..2 {
        let mut f = good.clone();
        f[14] = 0x55; // version 5
        gen.send(&f).expect("send");
    }
    // Readiness: the counters are published on the metrics thread's schedule, family by
    // family (a scrape can fall between two of them); scrape until every frame sent shows in
    // each family the checks below read (305 taken, per queue too, 5 of them dropped, 305
    // redirected by the steering program), for up to 5 s.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let text = loop {
        let text = scrape(&t.dut_ns(), port);
        let seen = (
            sum(&text, "dataplane_rx_packets_total", ""),
            sum(&text, "dataplane_queue_rx_packets_total", ""),
            sum(&text, "dataplane_drops_total", ""),
            sum(
                &text,
                "dataplane_steer_frames_total",
                "result=\"redirected\"",
            ),
        );
        if seen == (305, 305, 5, 305) || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let sink_status = sink.wait().expect("sink");
    assert!(sink_status.success(), "sink: {sink_status}");
    let s = dut.stop();

    let mut promtool = Command::new("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool (Debian prometheus)");
    promtool
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("write");
    let check = promtool.wait_with_output().expect("promtool");
    assert!(
        check.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&check.stdout),
        String::from_utf8_lossy(&check.stderr)
    );

    let sunk: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&sink_json).expect("sink json"))
            .expect("json");
    // Our frames (UDP to 7777); the DUT's own kernel may send the sink a few (ND, MLD).
    let arrived = sunk["matched"].as_u64().expect("matched");
    assert_eq!(arrived, 300, "the sink saw every good frame");
    assert_eq!(
        sum(&text, "dataplane_tx_packets_total", ""),
        arrived,
        "scraped tx = what the sink counted (traffic had ended before the scrape)"
    );
    assert_eq!(sum(&text, "dataplane_rx_packets_total", ""), 305);
    assert_eq!(
        sum(&text, "dataplane_drops_total", "reason=\"bad_checksum\""),
        3
    );
    assert_eq!(
        sum(&text, "dataplane_drops_total", "reason=\"bad_version\""),
        2
    );
    assert_eq!(sum(&text, "dataplane_drops_total", ""), 5);
    assert_eq!(
        sum(
            &text,
            "dataplane_steer_frames_total",
            "result=\"redirected\""
        ),
        305
    );
    assert!(text.contains("dataplane_build_info{"), "{text}");
    assert!(
        text.contains("dataplane_fib_prefixes{family=\"ipv4\"} 2"),
        "{text}"
    );
    assert!(text.contains("poller=\"0\""), "{text}");
    // Bursts by size add up to the bursts counted; the frames by state to the UMEM's.
    assert_eq!(
        sum(&text, "dataplane_rx_bursts_total", ""),
        sum(&text, "dataplane_batches_total", "")
    );
    assert_eq!(sum(&text, "dataplane_umem_frames", ""), 2 * 4096, "{text}");
    // Per port and queue: the gen-facing port received everything, the sink-facing one sent it.
    let port_in = format!("port=\"{}\"", t.dut_in());
    let port_out = format!("port=\"{}\"", t.dut_out());
    assert_eq!(
        sum(&text, "dataplane_queue_rx_packets_total", &port_in),
        305
    );
    assert_eq!(
        sum(&text, "dataplane_queue_tx_packets_total", &port_out),
        arrived
    );
    for port in [t.dut_in(), t.dut_out()] {
        assert!(
            text.lines()
                .any(|l| l.starts_with("dataplane_xsk_kernel_events_total{")
                    && l.contains(&format!("port=\"{port}\""))
                    && l.contains("what=\"rx_ring_full\"")),
            "kernel XDP_STATISTICS of {port}: {text}"
        );
    }
    for name in [
        "dataplane_poller_busy_ratio{",
        "dataplane_route_updates_total ",
        "dataplane_fib_generation ",
        "dataplane_health{",
    ] {
        assert!(text.contains(name), "{name}: {text}");
    }
    assert_frames_accounted(&s);
}

#[test]
fn top_shows_the_pollers_of_a_running_instance() {
    if !root_or_skip("dataplane top") {
        return;
    }
    let bed = Bed::up("ttp", 1);
    let t = &bed.0;
    let port = "9913";
    let dut = Dut::start_with(&bed, &config(t, ""), &["--metrics", port]);
    // 20 kpps for the whole test, paced.
    let mut gen = dataplane_in(&t.gen_ns(), &["gen", "--iface", &t.gen_if()])
        .args(["--rate", "20000", "--duration", "10"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gen");
    let top = |extra: &[&str]| {
        let mut args = vec![bin(), "top".into(), "--metrics".into(), port.into()];
        args.extend(
            ["--interval", "1"]
                .iter()
                .chain(extra)
                .map(|a| a.to_string()),
        );
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        String::from_utf8_lossy(&common::router::ns(&t.dut_ns(), &args).stdout).into_owned()
    };
    // Readiness: the generator's frames are reaching the poller.
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let j: serde_json::Value = serde_json::from_str(&top(&["--json"])).unwrap_or_default();
        if j["pollers"][0]["rx_pps"].as_f64().unwrap_or(0.0) > 0.0 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no frames reached the poller: {j}"
        );
    }
    // One frame of the terminal UI, as the interactive view draws it.
    let screen = top(&["--screen", "100x12"]);
    assert!(
        screen
            .lines()
            .next()
            .is_some_and(|l| l.starts_with("dataplane top")),
        "{screen}"
    );
    assert!(
        screen.contains(" pollers ") && screen.contains(" ports "),
        "{screen}"
    );
    let poller_row = screen
        .lines()
        .find(|l| l.trim_start_matches(['│', '|', ' ']).starts_with("0 "))
        .unwrap_or_else(|| panic!("no poller row: {screen}"));
    let fields: Vec<&str> = poller_row
        .trim_matches(['│', '|', ' '])
        .split_whitespace()
        .collect();
    assert!(
        fields[2].parse::<f64>().expect("rx Mpps") > 0.01,
        "{screen}"
    );
    assert!(screen.contains(&t.dut_out()), "{screen}");
    let table = top(&["--once"]);
    let mut lines = table.lines();
    assert!(
        lines
            .next()
            .is_some_and(|h| h.starts_with("poller") && h.contains("busy%")),
        "{table}"
    );
    let row: Vec<&str> = lines
        .next()
        .expect("poller row")
        .split_whitespace()
        .collect();
    assert_eq!(row[0], "0", "{table}");
    let rx_mpps: f64 = row[2].parse().expect("rx Mpps");
    assert!(rx_mpps > 0.01, "about 0.02 Mpps offered: {table}");
    assert!(
        table.contains(&t.dut_in()) && table.contains(&t.dut_out()),
        "port rows: {table}"
    );
    let v: serde_json::Value = serde_json::from_str(&top(&["--json"])).expect("json");
    let p = &v["pollers"][0];
    assert!(p["rx_pps"].as_f64().expect("rx") > 10_000.0, "{v}");
    assert!(p["busy_pct"].as_f64().expect("busy") > 0.0, "{v}");
    assert!(p["avg_burst"].as_f64().expect("burst") >= 1.0, "{v}");
    assert_eq!(v["ports"].as_array().expect("ports").len(), 2, "{v}");
    let _ = gen.kill();
    let _ = gen.wait();
    let s = dut.stop();
    assert_frames_accounted(&s);
}

#[test]
fn logs_are_json_lines_with_levels_when_asked() {
    if !root_or_skip("json logs") {
        return;
    }
    let bed = Bed::up("tjl", 1);
    let t = &bed.0;
    let (ok, stderr) = run_once(&bed, "json", &config(t, ""), &["--log-format", "json"]);
    assert!(ok, "{stderr}");
    let events: Vec<serde_json::Value> = stderr
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not JSON ({e}): {l}")))
        .collect();
    assert!(
        events.iter().any(|e| e["level"] == "INFO"
            && e["fields"]["message"]
                .as_str()
                .is_some_and(|m| m.starts_with("attached xdp_steer"))),
        "{stderr}"
    );
    assert!(
        events.iter().all(|e| e["timestamp"].is_string()),
        "{stderr}"
    );
}

/// One thread of another process held stopped (ptrace: only that thread stops, the rest of
/// the process runs on), resumed on drop. Made and dropped on the same thread (ptrace's
/// tracer is a thread).
struct Frozen {
    tid: i32,
}

/// ptrace request `req` on thread `tid`, with no address or data; fails the test on error.
fn ptrace_thread(req: libc::c_uint, tid: i32, what: &str) {
    // SAFETY: the requests used here (SEIZE, INTERRUPT) take a thread id and no pointers.
    let r = unsafe {
        libc::ptrace(
            req,
            tid,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_void>(),
        )
    };
    assert_eq!(
        r,
        0,
        "ptrace {what} {tid}: {}",
        std::io::Error::last_os_error()
    );
}

impl Frozen {
    fn thread(tid: i32) -> Frozen {
        ptrace_thread(libc::PTRACE_SEIZE, tid, "seize");
        ptrace_thread(libc::PTRACE_INTERRUPT, tid, "interrupt");
        let mut status = 0;
        // SAFETY: `status` is a valid place for waitpid to write.
        let w = unsafe { libc::waitpid(tid, &mut status, libc::__WALL) };
        assert_eq!(w, tid, "waitpid: {}", std::io::Error::last_os_error());
        Frozen { tid }
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        // SAFETY: PTRACE_DETACH takes a thread id and a signal number (0: none).
        unsafe {
            libc::ptrace(
                libc::PTRACE_DETACH,
                self.tid,
                std::ptr::null_mut::<libc::c_void>(),
                std::ptr::null_mut::<libc::c_void>(),
            );
        }
    }
}

/// The value of `dataplane_health{check=...,poller="0"}`.
fn health(text: &str, check: &str) -> Option<u64> {
    text.lines()
        .find(|l| {
            l.starts_with("dataplane_health{")
                && l.contains(&format!("check=\"{check}\""))
                && l.contains("poller=\"0\"")
        })
        .and_then(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .map(|v| v as u64)
}

#[test]
fn a_poller_that_stops_taking_frames_fails_its_health_checks_live() {
    if !root_or_skip("health checks live") {
        return;
    }
    let bed = Bed::up("thc", 1);
    let t = &bed.0;
    let mut dut = Dut::start_with(&bed, &config(t, ""), &["--metrics", "9917"]);
    let poller = std::fs::read_dir(format!("/proc/{}/task", dut.pid()))
        .expect("tasks")
        .flatten()
        .find(|e| {
            std::fs::read_to_string(e.path().join("comm")).is_ok_and(|c| c.trim() == "dp-poll0")
        })
        .and_then(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .expect("the poller's thread");
    let mut gen = dataplane_in(&t.gen_ns(), &["gen", "--iface", &t.gen_if()])
        .args(["--rate", "20000", "--duration", "30"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("gen");
    let until = |what: &str, want: &dyn Fn(&str) -> bool| {
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        loop {
            let text = scrape(&t.dut_ns(), 9917);
            if want(&text) {
                return text;
            }
            assert!(std::time::Instant::now() < deadline, "{what}: {text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    // Healthy while it forwards.
    until("forwarding, healthy", &|m| {
        sum(m, "dataplane_tx_packets_total", "") > 1000
            && health(m, "stalled") == Some(0)
            && health(m, "fill_empty") == Some(0)
    });
    {
        let _stopped = Frozen::thread(poller);
        // The kernel drops what arrives for it, and it takes nothing: stalled at the next
        // check; its fill ring stays empty: starved after a second.
        until("stalled and starved", &|m| {
            health(m, "stalled") == Some(1) && health(m, "fill_empty") == Some(1)
        });
    }
    until("recovered", &|m| {
        health(m, "stalled") == Some(0) && health(m, "fill_empty") == Some(0)
    });
    let _ = gen.kill();
    let _ = gen.wait();
    let log = dut.log_lines().join("\n");
    for line in [
        "health: poller 0 stalled",
        "health: poller 0 starved",
        "health: poller 0 recovered (stalled)",
        "health: poller 0 recovered (fill_empty)",
    ] {
        assert!(log.contains(line), "{line:?} logged: {log}");
    }
    let s = dut.stop();
    assert_frames_accounted(&s);
}
