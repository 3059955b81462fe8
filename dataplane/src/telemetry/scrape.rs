//! Reading a running instance's metrics back (`dataplane top`): an HTTP GET of `/metrics`,
//! the Prometheus text format parsed into samples, and per-poller / per-port rates between
//! two scrapes.
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use super::TelemetryError;
use crate::bpf::STEER_STAT_NAMES;

/// One sample of the text format: `name{labels} value`.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    /// Metric name.
    pub name: String,
    /// Label values by label name.
    pub labels: BTreeMap<String, String>,
    /// Value.
    pub value: f64,
}

/// GET /metrics from `addr`: the body.
pub fn fetch(addr: SocketAddr) -> Result<String, TelemetryError> {
    fetch_within(addr, Duration::from_secs(2), Duration::from_secs(5))
}

/// GET /metrics from `addr`, giving up on connecting after `connect` and on each read after
/// `read` (a stopped process's listener still accepts: the kernel completes the handshake,
/// nobody answers). Nothing listening is its own error, [`TelemetryError::NotListening`].
pub(crate) fn fetch_within(
    addr: SocketAddr,
    connect: Duration,
    read: Duration,
) -> Result<String, TelemetryError> {
    let fail = |why: String| TelemetryError::Scrape { addr, why };
    let mut s = TcpStream::connect_timeout(&addr, connect).map_err(|e| {
        if e.kind() == std::io::ErrorKind::ConnectionRefused {
            TelemetryError::NotListening { addr }
        } else {
            fail(format!("connect: {e}"))
        }
    })?;
    s.set_read_timeout(Some(read))
        .map_err(|e| fail(e.to_string()))?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
        .map_err(|e| fail(format!("request: {e}")))?;
    let mut text = String::new();
    s.read_to_string(&mut text).map_err(|e| {
        fail(match e.kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut => {
                format!("no answer within {} ms", read.as_millis())
            }
            _ => format!("response: {e}"),
        })
    })?;
    match text.split_once("\r\n\r\n") {
        Some((head, body)) if head.contains(" 200") => Ok(body.to_string()),
        Some((head, _)) => Err(fail(format!(
            "HTTP status: {}",
            head.lines().next().unwrap_or("")
        ))),
        None => Err(fail("not an HTTP response".into())),
    }
}

/// The samples of a text-format body (comments and malformed lines are skipped).
pub fn parse(text: &str) -> Vec<Sample> {
    text.lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .filter_map(|l| {
            let (series, value) = l.rsplit_once(' ')?;
            let value = value.parse().ok()?;
            let (name, labels) = match series.split_once('{') {
                Some((n, rest)) => (n, parse_labels(rest.strip_suffix('}')?)?),
                None => (series, BTreeMap::new()),
            };
            Some(Sample {
                name: name.to_string(),
                labels,
                value,
            })
        })
        .collect()
}

/// `a="x",b="y"` (values without escaped quotes: ours never have them).
fn parse_labels(s: &str) -> Option<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let mut rest = s;
    while !rest.is_empty() {
        let (k, v) = rest.split_once("=\"")?;
        let (v, tail) = v.split_once('"')?;
        out.insert(k.trim_start_matches(',').to_string(), v.to_string());
        rest = tail.trim_start_matches(',');
    }
    Some(out)
}

/// One poller between two scrapes.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PollerRow {
    /// Poller number (or `all` in the shared-counter ablation).
    pub poller: String,
    /// Its CPU (`any`: unpinned).
    pub cpu: String,
    /// Received packets per second.
    pub rx_pps: f64,
    /// Transmitted packets per second.
    pub tx_pps: f64,
    /// Transmitted Gbit/s (Ethernet frames without FCS).
    pub tx_gbps: f64,
    /// Drops per second, and the reason with the most.
    pub drops_ps: f64,
    /// The drop reason with the most drops in the interval, if any.
    pub top_drop: Option<String>,
    /// Share of loop passes that found work, in percent.
    pub busy_pct: f64,
    /// Packets per non-empty burst (VPP's vectors per call).
    pub avg_burst: f64,
    /// With rebalancing on: the RSS buckets the poller's queues have now.
    pub buckets: Option<u64>,
    /// With rebalancing on: its busy share of time at the balancer's last step, in percent.
    pub load_pct: Option<f64>,
}

/// One port between two scrapes: what its steering program did.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct PortRow {
    /// Interface.
    pub port: String,
    /// Frames redirected to a poller per second.
    pub redirected_ps: f64,
    /// Frames passed to the kernel per second (None for a sub-interface: its frames to the
    /// kernel are its port's).
    pub to_kernel_ps: Option<f64>,
}

fn value(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> f64 {
    samples
        .iter()
        .filter(|s| s.name == name)
        .filter(|s| {
            labels
                .iter()
                .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
        })
        .map(|s| s.value)
        .sum()
}

/// The value of the one series `name` with `labels`, if the endpoint has it.
fn gauge(samples: &[Sample], name: &str, labels: &[(&str, &str)]) -> Option<f64> {
    samples
        .iter()
        .find(|s| {
            s.name == name
                && labels
                    .iter()
                    .all(|(k, v)| s.labels.get(*k).is_some_and(|x| x == v))
        })
        .map(|s| s.value)
}

/// Per-poller rows from two scrapes `secs` apart.
pub fn poller_rows(before: &[Sample], after: &[Sample], secs: f64) -> Vec<PollerRow> {
    let secs = secs.max(1e-9);
    let mut pollers: Vec<(String, String)> = after
        .iter()
        .filter(|s| s.name == "dataplane_rx_packets_total")
        .filter_map(|s| {
            Some((
                s.labels.get("poller")?.clone(),
                s.labels.get("cpu")?.clone(),
            ))
        })
        .collect();
    pollers.sort();
    pollers.dedup();
    pollers
        .into_iter()
        .map(|(poller, cpu)| {
            let l = [("poller", poller.as_str())];
            let d = |name: &str| (value(after, name, &l) - value(before, name, &l)).max(0.0);
            let mut reasons: Vec<(String, f64)> = after
                .iter()
                .filter(|s| {
                    s.name == "dataplane_drops_total" && s.labels.get("poller") == Some(&poller)
                })
                .filter_map(|s| {
                    let r = s.labels.get("reason")?;
                    let was = value(
                        before,
                        "dataplane_drops_total",
                        &[("poller", poller.as_str()), ("reason", r.as_str())],
                    );
                    Some((r.clone(), (s.value - was).max(0.0)))
                })
                .collect();
            reasons.sort_by(|a, b| b.1.total_cmp(&a.1));
            let drops: f64 = reasons.iter().map(|r| r.1).sum();
            let (passes, busy) = (
                d("dataplane_loop_passes_total"),
                d("dataplane_busy_passes_total"),
            );
            let (rx, batches) = (
                d("dataplane_rx_packets_total"),
                d("dataplane_batches_total"),
            );
            PollerRow {
                rx_pps: rx / secs,
                tx_pps: d("dataplane_tx_packets_total") / secs,
                tx_gbps: d("dataplane_tx_bytes_total") * 8.0 / secs / 1e9,
                drops_ps: drops / secs,
                top_drop: reasons.first().filter(|r| r.1 > 0.0).map(|r| r.0.clone()),
                busy_pct: if passes > 0.0 {
                    busy / passes * 100.0
                } else {
                    0.0
                },
                avg_burst: if batches > 0.0 { rx / batches } else { 0.0 },
                buckets: gauge(after, "dataplane_rebalance_poller_buckets", &l).map(|v| v as u64),
                load_pct: gauge(after, "dataplane_rebalance_poller_busy", &l).map(|v| v * 100.0),
                poller,
                cpu,
            }
        })
        .collect()
}

/// Per-port rows from two scrapes `secs` apart.
pub fn port_rows(before: &[Sample], after: &[Sample], secs: f64) -> Vec<PortRow> {
    let secs = secs.max(1e-9);
    let mut ports: Vec<String> = after
        .iter()
        .filter(|s| s.name == "dataplane_steer_frames_total")
        .filter_map(|s| s.labels.get("port").cloned())
        .collect();
    ports.sort();
    ports.dedup();
    ports
        .into_iter()
        .map(|port| {
            let n = "dataplane_steer_frames_total";
            let d = |labels: &[(&str, &str)]| {
                (value(after, n, labels) - value(before, n, labels)).max(0.0)
            };
            let redirected = d(&[("port", port.as_str()), ("result", "redirected")]);
            let passed: f64 = STEER_STAT_NAMES
                .iter()
                .filter(|r| r.starts_with("pass_"))
                .map(|r| d(&[("port", port.as_str()), ("result", r)]))
                .sum();
            PortRow {
                redirected_ps: redirected / secs,
                to_kernel_ps: Some(passed / secs),
                port,
            }
        })
        .chain(subinterface_rows(before, after, secs))
        .collect()
}

/// A row per sub-interface (`name@port`): its frames steered to the pollers per second (its
/// frames to the kernel are counted with its port's).
fn subinterface_rows(before: &[Sample], after: &[Sample], secs: f64) -> Vec<PortRow> {
    let n = "dataplane_subinterface_rx_frames_total";
    let mut subifs: Vec<(String, String)> = after
        .iter()
        .filter(|s| s.name == n)
        .filter_map(|s| {
            Some((
                s.labels.get("subinterface")?.clone(),
                s.labels.get("port")?.clone(),
            ))
        })
        .collect();
    subifs.sort();
    subifs.dedup();
    subifs
        .into_iter()
        .map(|(name, port)| {
            let labels = [("subinterface", name.as_str()), ("port", port.as_str())];
            let d = (value(after, n, &labels) - value(before, n, &labels)).max(0.0);
            PortRow {
                port: format!("{name}@{port}"),
                redirected_ps: d / secs,
                to_kernel_ps: None,
            }
        })
        .collect()
}

/// The table `dataplane top` prints.
pub fn render(pollers: &[PollerRow], ports: &[PortRow]) -> String {
    let mut s = format!(
        "{:<7} {:<4} {:>9} {:>9} {:>8} {:>9} {:<20} {:>6} {:>6} {:>6} {:>7}\n",
        "poller",
        "cpu",
        "rx Mpps",
        "tx Mpps",
        "tx Gb/s",
        "drops/s",
        "top drop",
        "busy%",
        "burst",
        "load%",
        "buckets"
    );
    for r in pollers {
        s.push_str(&format!(
            "{:<7} {:<4} {:>9.3} {:>9.3} {:>8.3} {:>9.0} {:<20} {:>6.1} {:>6.1} {:>6} {:>7}\n",
            r.poller,
            r.cpu,
            r.rx_pps / 1e6,
            r.tx_pps / 1e6,
            r.tx_gbps,
            r.drops_ps,
            r.top_drop.as_deref().unwrap_or("-"),
            r.busy_pct,
            r.avg_burst,
            r.load_pct.map_or("-".into(), |l| format!("{l:.1}")),
            r.buckets.map_or("-".into(), |b| b.to_string())
        ));
    }
    s.push_str(&format!(
        "{:<16} {:>14} {:>14}\n",
        "port", "to pollers/s", "to kernel/s"
    ));
    for p in ports {
        let to_kernel = p.to_kernel_ps.map_or("-".into(), |k| format!("{k:.0}"));
        s.push_str(&format!(
            "{:<16} {:>14.0} {:>14}\n",
            p.port, p.redirected_ps, to_kernel
        ));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "# HELP x y\n# TYPE dataplane_rx_packets_total counter\n\
        dataplane_rx_packets_total{poller=\"0\",cpu=\"1\"} 100\n\
        dataplane_tx_packets_total{poller=\"0\",cpu=\"1\"} 90\n\
        dataplane_tx_bytes_total{poller=\"0\",cpu=\"1\"} 5400\n\
        dataplane_batches_total{poller=\"0\",cpu=\"1\"} 10\n\
        dataplane_loop_passes_total{poller=\"0\",cpu=\"1\"} 1000\n\
        dataplane_busy_passes_total{poller=\"0\",cpu=\"1\"} 100\n\
        dataplane_drops_total{poller=\"0\",cpu=\"1\",reason=\"no_route\"} 10\n\
        dataplane_drops_total{poller=\"0\",cpu=\"1\",reason=\"bad_checksum\"} 0\n\
        dataplane_steer_frames_total{port=\"d0\",result=\"redirected\"} 100\n\
        dataplane_steer_frames_total{port=\"d0\",result=\"pass_local\"} 5\n\
        dataplane_subinterface_rx_frames_total{subinterface=\"d0.100\",port=\"d0\"} 100\n";

    #[test]
    fn rates_between_two_scrapes() {
        let after = BEFORE
            .replace("} 100\n", "} 2100\n")
            .replace(
                "tx_packets_total{poller=\"0\",cpu=\"1\"} 90",
                "tx_packets_total{poller=\"0\",cpu=\"1\"} 1990",
            )
            .replace("} 5400", "} 119400")
            .replace(
                "batches_total{poller=\"0\",cpu=\"1\"} 10",
                "batches_total{poller=\"0\",cpu=\"1\"} 60",
            )
            .replace("} 1000\n", "} 2000\n")
            .replace("reason=\"bad_checksum\"} 0", "reason=\"bad_checksum\"} 40")
            .replace("pass_local\"} 5", "pass_local\"} 25");
        let (b, a) = (parse(BEFORE), parse(&after));
        assert_eq!(b.len(), 11, "comments skipped");
        let rows = poller_rows(&b, &a, 2.0);
        assert_eq!(rows.len(), 1);
        let r = &rows[0];
        assert_eq!((r.poller.as_str(), r.cpu.as_str()), ("0", "1"));
        assert_eq!(r.rx_pps, 1000.0);
        assert_eq!(r.tx_pps, 950.0);
        assert_eq!(r.drops_ps, 20.0);
        assert_eq!(r.top_drop.as_deref(), Some("bad_checksum"));
        assert_eq!(r.avg_burst, 40.0, "2000 packets in 50 bursts");
        // busy went 100 -> 2100 over 1000 -> 2000 passes: clamped to what the sample says.
        assert!(r.busy_pct > 0.0);
        let ports = port_rows(&b, &a, 2.0);
        assert_eq!(ports[0].redirected_ps, 1000.0);
        assert_eq!(ports[0].to_kernel_ps, Some(10.0));
        // The sub-interface after its port: its own frames to the pollers.
        assert_eq!(ports[1].port, "d0.100@d0");
        assert_eq!(ports[1].redirected_ps, 1000.0);
        assert_eq!(ports[1].to_kernel_ps, None);
        let table = render(&rows, &ports);
        assert!(
            table
                .lines()
                .any(|l| l.starts_with("d0.100@d0") && l.ends_with(" -")),
            "{table}"
        );
        assert!(
            table.lines().nth(1).is_some_and(|l| l.starts_with("0 ")),
            "{table}"
        );
    }

    #[test]
    fn labels_parse() {
        let s = parse("m{a=\"1\",b=\"x y\"} 2.5\nbare 3\nbroken{a=\"1\" 4\n");
        assert_eq!(s.len(), 2);
        assert_eq!(s[0].labels.get("b").map(String::as_str), Some("x y"));
        assert_eq!(s[1].name, "bare");
    }
}
