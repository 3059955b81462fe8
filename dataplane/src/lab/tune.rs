//! `dataplane tune`: try layouts on a live appliance, with its own traffic (no testbed), and
//! say which forwards best. Each candidate is a `dataplane run --layout L` of its own (a
//! layout changes pinning, memory and interrupts, which only a start sets up), measured over
//! a window after a warm-up: frames sent by the ports (their tx counters), drops from the
//! run's summary, and the CPU time of the run's threads plus the ports' NAPI threads
//! (hardware interrupt work is not attributable to a task and is left out).
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::error::LabError;
use super::process::tx_packets_in;
use super::process::{read_json, Proc};
use super::sample::{cpu_ns, tasks_of};

/// What one layout did.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TuneRow {
    /// Layout name.
    pub layout: String,
    /// "ok", or why it was not measured.
    pub status: String,
    /// Frames the ports sent per second in the window.
    pub forwarded_pps: f64,
    /// Frames the pollers dropped per second (whole run).
    pub drops_ps: f64,
    /// CPU time of the run's threads and the ports' NAPI threads per forwarded frame.
    pub cpu_ns_per_pkt: f64,
}

/// The tx packets of `ports`, summed, from this namespace's /proc/net/dev.
fn tx_of(ports: &[String]) -> u64 {
    let text = std::fs::read_to_string("/proc/self/net/dev").unwrap_or_default();
    ports.iter().filter_map(|p| tx_packets_in(&text, p)).sum()
}

/// Runs `exe run --config CONFIG --layout LAYOUT [extra]` for warm-up + window and measures
/// it; `extra`: more `run` arguments (the interrupt CPU overrides).
pub fn measure(
    exe: &Path,
    config: &Path,
    ports: &[String],
    layout: &str,
    extra: &[String],
    warmup: Duration,
    window: Duration,
) -> Result<TuneRow, LabError> {
    let summary = std::env::temp_dir().join(format!(
        "dataplane-tune-{}-{layout}.json",
        std::process::id()
    ));
    let _ = std::fs::remove_file(&summary);
    let secs = (warmup + window).as_secs_f64() + 30.0;
    let mut child = Command::new(exe)
        .args(["run", "--interval", "0", "--layout", layout, "--config"])
        .arg(config)
        .args(["--duration", &format!("{secs:.0}"), "--json"])
        .arg(&summary)
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(LabError::io(format!("starting {}", exe.display())))?;
    let err = child.stderr.take();
    let mut p = Proc::watching(child, err);
    p.wait_for("attached", Duration::from_secs(30))?;
    std::thread::sleep(warmup);
    let mut tasks = tasks_of(p.child.id());
    for port in ports {
        tasks.extend(
            crate::placement::topology::napi_threads(port)
                .into_iter()
                .map(|(t, _)| (t, t)),
        );
    }
    let (c0, t0, w0) = (cpu_ns(&tasks), tx_of(ports), Instant::now());
    std::thread::sleep(window);
    let (c1, t1, w1) = (cpu_ns(&tasks), tx_of(ports), Instant::now());
    p.stop();
    let s = read_json(&summary)?;
    let _ = std::fs::remove_file(&summary);
    let secs = w1.duration_since(w0).as_secs_f64().max(1e-9);
    let sent = t1.saturating_sub(t0);
    let drops: u64 = s["totals"]["drops"]
        .as_array()
        .map_or(0, |d| d.iter().filter_map(serde_json::Value::as_u64).sum());
    let elapsed = s["elapsed_s"].as_f64().unwrap_or(secs).max(1e-9);
    Ok(TuneRow {
        layout: layout.into(),
        status: if s["frames_ok"].as_bool() == Some(false) {
            "ok (frames held by the kernel at exit)".into()
        } else {
            "ok".into()
        },
        forwarded_pps: sent as f64 / secs,
        drops_ps: drops as f64 / elapsed,
        cpu_ns_per_pkt: if sent > 0 {
            c1.saturating_sub(c0) as f64 / sent as f64
        } else {
            0.0
        },
    })
}

/// The layout to keep: the highest forwarding rate; among those within 2% of it, the one
/// that costs the least CPU per packet.
pub fn recommend(rows: &[TuneRow]) -> Option<&TuneRow> {
    let ok: Vec<&TuneRow> = rows
        .iter()
        .filter(|r| r.status.starts_with("ok") && r.forwarded_pps > 0.0)
        .collect();
    let best = ok.iter().map(|r| r.forwarded_pps).fold(0.0, f64::max);
    ok.into_iter()
        .filter(|r| r.forwarded_pps >= best * 0.98)
        .min_by(|a, b| a.cpu_ns_per_pkt.total_cmp(&b.cpu_ns_per_pkt))
}

/// The table, one row per layout, and the recommendation.
pub fn render(rows: &[TuneRow]) -> String {
    let mut s = String::from(
        "| layout | forwarded Mpps | drops/s | CPU ns/pkt | status |\n|---|---|---|---|---|\n",
    );
    for r in rows {
        s.push_str(&format!(
            "| {} | {:.3} | {:.0} | {:.0} | {} |\n",
            r.layout,
            r.forwarded_pps / 1e6,
            r.drops_ps,
            r.cpu_ns_per_pkt,
            r.status
        ));
    }
    match recommend(rows) {
        Some(r) => s.push_str(&format!(
            "recommended: {} ({:.3} Mpps at {:.0} ns/pkt)\n",
            r.layout,
            r.forwarded_pps / 1e6,
            r.cpu_ns_per_pkt
        )),
        None => {
            s.push_str("recommended: none (no layout forwarded anything: is traffic flowing?)\n")
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(layout: &str, pps: f64, ns: f64) -> TuneRow {
        TuneRow {
            layout: layout.into(),
            status: "ok".into(),
            forwarded_pps: pps,
            drops_ps: 0.0,
            cpu_ns_per_pkt: ns,
        }
    }

    #[test]
    fn the_fastest_wins_and_a_tie_goes_to_the_cheaper() {
        let rows = [
            row("a", 1.00e6, 900.0),
            row("b", 0.90e6, 500.0),
            row("c", 0.99e6, 800.0),
        ];
        assert_eq!(recommend(&rows).map(|r| r.layout.as_str()), Some("c"));
        let mut none = row("d", 2e6, 1.0);
        none.status = "not available: one NUMA node".into();
        assert_eq!(recommend(&[none]).map(|r| r.layout.as_str()), None);
        assert!(render(&rows).contains("recommended: c"));
    }
}
