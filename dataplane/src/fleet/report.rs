//! What a fleet run measured: each appliance's share of the flows before the fault and after
//! the recovery, the datagrams lost around each change, how long until the stalled
//! appliance's flows arrived by the other (withdrawal) and until it carried traffic again
//! (return); a table and an SVG plot of each appliance's forwarded pps over time.
use std::path::Path;
use std::time::Duration;

use plotters::prelude::*;

use super::traffic::{Flows, Traffic};
use super::{Fault, APPLIANCES};

/// When things happened in a run (since the traffic's start).
#[derive(Debug, Clone, Copy)]
pub struct Schedule {
    /// The fault on appliance a.
    pub fault: Fault,
    /// When it was injected.
    pub fault_at: Duration,
    /// When it was undone.
    pub recover_at: Duration,
    /// How long the flows ran.
    pub duration: Duration,
}

/// Forwarded datagrams per second through each appliance in one time bin.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Bin {
    /// Bin start, seconds.
    pub t: f64,
    /// Datagrams per second that arrived through each appliance.
    pub pps: [f64; 2],
}

/// A datagram this late is as good as lost.
pub(crate) const LATE: Duration = Duration::from_secs(1);

/// How long a bin of the series is.
const BIN: Duration = Duration::from_millis(100);

/// The run's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Outcome {
    /// The fault injected into appliance a.
    pub fault: Fault,
    /// The traffic.
    pub flows: Flows,
    /// Seconds of traffic.
    pub secs: f64,
    /// When the fault came, s.
    pub fault_at_s: f64,
    /// When it was undone, s.
    pub recover_at_s: f64,
    /// Datagrams sent.
    pub sent: u64,
    /// Distinct datagrams that arrived in time.
    pub received: u64,
    /// Sent and never arrived, or arrived late.
    pub lost: u64,
    /// Arrived over [`LATE`] after they were sent (held in a stopped dataplane's RX ring
    /// and forwarded when it ran again): counted among the lost.
    pub late: u64,
    /// Each appliance's share of what arrived, sent from 0.5 s until the fault, percent.
    pub share_before: [f64; 2],
    /// The same for the IPv6 flows alone.
    pub share_before_v6: [f64; 2],
    /// Each appliance's share of what arrived, sent from 0.5 s after appliance a's return to
    /// the end, percent.
    pub share_after: [f64; 2],
    /// Lost among what was sent before the fault.
    pub lost_before: u64,
    /// Lost among what was sent from the fault until the recovery.
    pub lost_fault: u64,
    /// Lost among what was sent from the recovery on.
    pub lost_recovery: u64,
    /// Flows that went through appliance a before the fault.
    pub flows_on_a: usize,
    /// From the fault until every one of those flows arrived through b, ms (None: some never
    /// did).
    pub withdraw_ms: Option<f64>,
    /// From the recovery until a datagram of each family a carried before arrived through a
    /// again, ms.
    pub return_ms: Option<f64>,
    /// Forwarded pps per appliance over time.
    pub series: Vec<Bin>,
    /// Packets each appliance's kernel forwarded from the start of the traffic until 0.2 s
    /// before the fault (None: not read). The dataplanes carry the steady state, so 0 and 0: the kernels
    /// forward only after a dataplane is killed, until its withdrawal lands.
    pub kernel_forwarded_before: Option<[u64; 2]>,
}

fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn share(counts: [u64; 2]) -> [f64; 2] {
    let total = (counts[0] + counts[1]).max(1) as f64;
    [
        counts[0] as f64 * 100.0 / total,
        counts[1] as f64 * 100.0 / total,
    ]
}

/// One pass over the arrivals: which datagrams arrived in time, and each flow's appliance
/// before the fault.
struct Tally {
    /// Per flow, per sequence number: arrived (in time).
    seen: Vec<Vec<bool>>,
    /// Arrived over [`LATE`] after they were sent.
    late: u64,
    /// Distinct datagrams that arrived in time.
    received: u64,
    /// Per flow: the appliance of its last arrival sent before the fault.
    last_via_before: Vec<Option<usize>>,
    /// Per appliance: arrivals sent from 0.5 s until the fault.
    before: [u64; 2],
    /// The same, IPv6 flows only.
    before_v6: [u64; 2],
}

impl Tally {
    fn of(traffic: &Traffic, fault: u64) -> Tally {
        let mut t = Tally {
            seen: traffic
                .sent
                .iter()
                .map(|times| vec![false; times.len()])
                .collect(),
            late: 0,
            received: 0,
            last_via_before: vec![None; traffic.sent.len()],
            before: [0; 2],
            before_v6: [0; 2],
        };
        for a in &traffic.arrivals {
            let Some(slot) = t
                .seen
                .get_mut(usize::from(a.flow))
                .and_then(|s| s.get_mut(a.seq as usize))
            else {
                continue;
            };
            if a.recv_ns.saturating_sub(a.sent_ns) > ns(LATE) {
                t.late += 1;
                continue;
            }
            if !*slot {
                *slot = true;
                t.received += 1;
            }
            if a.sent_ns < fault {
                if let Some(v) = a.via {
                    t.last_via_before[usize::from(a.flow)] = Some(v);
                    if a.sent_ns >= 500_000_000 {
                        t.before[v] += 1;
                        if super::traffic::is_v6(a.flow) {
                            t.before_v6[v] += 1;
                        }
                    }
                }
            }
        }
        t
    }

    /// Lost datagrams by when they were sent: before the fault, until the recovery, after.
    fn lost(&self, traffic: &Traffic, [fault, recover]: [u64; 2]) -> [u64; 3] {
        let mut lost = [0u64; 3];
        for (s, times) in self.seen.iter().zip(&traffic.sent) {
            for (got, &t) in s.iter().zip(times) {
                if *got {
                    continue;
                }
                lost[usize::from(t >= fault) + usize::from(t >= recover)] += 1;
            }
        }
        lost
    }
}

/// From the fault until every flow that was on a (`on_a`) first arrived through b, ms (None:
/// some never did).
fn withdraw_ms(traffic: &Traffic, on_a: &[usize], fault: u64) -> Option<f64> {
    let mut moved: Vec<Option<u64>> = vec![None; traffic.sent.len()];
    for a in &traffic.arrivals {
        if a.via == Some(1) && a.sent_ns >= fault {
            let m = &mut moved[usize::from(a.flow)];
            *m = Some(m.map_or(a.sent_ns, |t| t.min(a.sent_ns)));
        }
    }
    on_a.iter()
        .map(|&f| moved[f].map(|t| (t - fault) as f64 / 1e6))
        .try_fold(0.0f64, |m, t| t.map(|t| m.max(t)))
}

/// From the recovery until a datagram of each family arrived through a again (ms), and each
/// appliance's arrivals sent from 0.5 s after that.
fn back_on_a(traffic: &Traffic, recover: u64) -> (Option<f64>, [u64; 2]) {
    // Per family: its first datagram through a after the recovery. a is back once every
    // family it carried before is (the IPv4 and IPv6 BGP sessions come back on their own).
    let first_back = |v6: bool| {
        traffic
            .arrivals
            .iter()
            .filter(|a| super::traffic::is_v6(a.flow) == v6)
            .filter(|a| a.via == Some(0) && a.sent_ns >= recover)
            .map(|a| a.sent_ns)
            .min()
    };
    let ran = |v6: bool| {
        traffic
            .arrivals
            .iter()
            .any(|a| super::traffic::is_v6(a.flow) == v6 && a.via == Some(0) && a.sent_ns < recover)
    };
    let back = [false, true]
        .into_iter()
        .filter(|&v6| ran(v6))
        .map(first_back)
        .try_fold(0u64, |m, t| t.map(|t| m.max(t)));
    let mut after = [0u64; 2];
    if let Some(b) = back {
        for a in &traffic.arrivals {
            if let (Some(v), true) = (a.via, a.sent_ns >= b + 500_000_000) {
                after[v] += 1;
            }
        }
    }
    (back.map(|t| (t - recover) as f64 / 1e6), after)
}

/// Arrivals per appliance per [`BIN`] of receive time, as pps.
fn series(traffic: &Traffic, duration: Duration) -> Vec<Bin> {
    let bins = (duration.as_nanos() / BIN.as_nanos()) as usize + 1;
    let mut per_bin = vec![[0u64; 2]; bins];
    for a in &traffic.arrivals {
        let b = (u128::from(a.recv_ns) / BIN.as_nanos()) as usize;
        if let (Some(v), Some(bin)) = (a.via, per_bin.get_mut(b)) {
            bin[v] += 1;
        }
    }
    let per_s = 1.0 / BIN.as_secs_f64();
    per_bin
        .iter()
        .enumerate()
        .map(|(i, c)| Bin {
            t: i as f64 * BIN.as_secs_f64(),
            pps: [c[0] as f64 * per_s, c[1] as f64 * per_s],
        })
        .collect()
}

impl Outcome {
    /// Reads a run. A datagram that arrived over [`LATE`] after it was sent counts as lost
    /// (and as late): to a flow, a datagram held for seconds is gone.
    pub fn of(schedule: &Schedule, flows: Flows, traffic: &Traffic) -> Outcome {
        let (fault, recover) = (ns(schedule.fault_at), ns(schedule.recover_at));
        let tally = Tally::of(traffic, fault);
        let [lost_before, lost_fault, lost_recovery] = tally.lost(traffic, [fault, recover]);
        let on_a: Vec<usize> = (0..tally.last_via_before.len())
            .filter(|&f| tally.last_via_before[f] == Some(0))
            .collect();
        let (return_ms, after) = back_on_a(traffic, recover);
        let sent: u64 = traffic.sent.iter().map(|t| t.len() as u64).sum();
        Outcome {
            fault: schedule.fault,
            flows,
            secs: schedule.duration.as_secs_f64(),
            fault_at_s: schedule.fault_at.as_secs_f64(),
            recover_at_s: schedule.recover_at.as_secs_f64(),
            sent,
            received: tally.received,
            lost: sent - tally.received,
            late: tally.late,
            share_before: share(tally.before),
            share_before_v6: share(tally.before_v6),
            share_after: share(after),
            lost_before,
            lost_fault,
            lost_recovery,
            flows_on_a: on_a.len(),
            withdraw_ms: withdraw_ms(traffic, &on_a, fault),
            return_ms,
            series: series(traffic, schedule.duration),
            kernel_forwarded_before: None,
        }
    }

    /// The table (markdown).
    pub fn table(&self) -> String {
        let ms = |x: Option<f64>| x.map_or("never".to_string(), |x| format!("{x:.0} ms"));
        let pps = f64::from(self.flows.pps_per_flow);
        let lost_s = |lost: u64, flows: usize| {
            if flows == 0 {
                "-".to_string()
            } else {
                format!("{:.2} s", lost as f64 / (pps * flows as f64))
            }
        };
        let (undo, what) = match self.fault {
            Fault::Stop => ("dataplane SIGCONT", "dataplane SIGSTOP"),
            Fault::Kill => ("dataplane restarted", "dataplane SIGKILL"),
            Fault::Link => ("server link up", "server link down"),
            Fault::Bird => ("BIRD SIGCONT", "BIRD SIGSTOP (BFD silent)"),
            Fault::Stale => (
                "main thread let go",
                "main thread held (health checks stale)",
            ),
        };
        let mut s =
            format!(
            "{} flows x {} pps for {:.0} s; appliance a: {what} at {:.1} s, {undo} at {:.1} s\n\n\
             | appliance | share before the fault | of the IPv6 flows | share after the return |\n|---|---|---|---|\n",
            self.flows.count, self.flows.pps_per_flow, self.secs, self.fault_at_s, self.recover_at_s
        );
        for (i, name) in APPLIANCES.iter().enumerate() {
            s.push_str(&format!(
                "| {name} | {:.1} % | {:.1} % | {:.1} % |\n",
                self.share_before[i], self.share_before_v6[i], self.share_after[i]
            ));
        }
        s.push_str(&format!(
            "\n| change | at | datagrams lost or late | as time of a's flows | how long |\n|---|---|---|---|---|\n\
             | (steady, before) | 0 s | {} | | |\n\
             | a {what} | {:.1} s | {} | {} | a's {} flows through b after {} |\n\
             | a {undo} | {:.1} s | {} | | through a again (every family) after {} |\n\
             \nsent {}, arrived in time {}, lost {} ({:.3} %), of which {} arrived over 1 s late\n",
            self.lost_before,
            self.fault_at_s,
            self.lost_fault,
            lost_s(self.lost_fault, self.flows_on_a),
            self.flows_on_a,
            ms(self.withdraw_ms),
            self.recover_at_s,
            self.lost_recovery,
            ms(self.return_ms),
            self.sent,
            self.received,
            self.lost,
            self.lost as f64 * 100.0 / self.sent.max(1) as f64,
            self.late
        ));
        s
    }

    /// The plot: each appliance's forwarded pps over time, the fault and recovery marked.
    pub fn plot(&self, path: &Path) -> Result<(), String> {
        let e = |x: &dyn std::fmt::Display| format!("plot {}: {x}", path.display());
        let ymax = self
            .series
            .iter()
            .flat_map(|b| b.pps)
            .fold(1.0f64, f64::max)
            * 1.15;
        let root = SVGBackend::new(path, (900, 420)).into_drawing_area();
        root.fill(&WHITE).map_err(|x| e(&x))?;
        let mut chart = ChartBuilder::on(&root)
            .caption(
                format!(
                    "two appliances behind ECMP: a {} at {:.0} s, back at {:.0} s",
                    match self.fault {
                        Fault::Stop => "stalled (SIGSTOP)",
                        Fault::Kill => "killed (SIGKILL)",
                        Fault::Link => "cut off from the servers",
                        Fault::Bird => "silent to BFD and BGP (BIRD SIGSTOP)",
                        Fault::Stale => "with stale health checks (main thread held)",
                    },
                    self.fault_at_s,
                    self.recover_at_s
                ),
                ("sans-serif", 18),
            )
            .margin(12)
            .x_label_area_size(40)
            .y_label_area_size(70)
            .build_cartesian_2d(0f64..self.secs, 0f64..ymax)
            .map_err(|x| e(&x))?;
        chart
            .configure_mesh()
            .x_desc("time (s)")
            .y_desc("forwarded datagrams/s")
            .draw()
            .map_err(|x| e(&x))?;
        for t in [self.fault_at_s, self.recover_at_s] {
            chart
                .draw_series(std::iter::once(PathElement::new(
                    vec![(t, 0.0), (t, ymax)],
                    BLACK.mix(0.4).stroke_width(1),
                )))
                .map_err(|x| e(&x))?;
        }
        for (i, (name, c)) in APPLIANCES.iter().zip([BLUE, RED]).enumerate() {
            let pts: Vec<(f64, f64)> = self.series.iter().map(|b| (b.t, b.pps[i])).collect();
            chart
                .draw_series(LineSeries::new(pts, c.stroke_width(2)))
                .map_err(|x| e(&x))?
                .label(format!("appliance {name}"))
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                });
        }
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.8))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
        root.present().map_err(|x| e(&x))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::super::traffic::Arrival;
    use super::*;

    /// Two flows at 10 pps for 3 s; flow 0 on a, flow 1 on b; a fails at 1 s (flow 0's
    /// datagrams sent in [1.0, 1.3) s are lost, then it arrives through b), recovers at 2 s
    /// (flow 0 through a again from 2.2 s).
    #[test]
    fn outcome_reads_a_failover() {
        let flows = Flows {
            count: 2,
            pps_per_flow: 10,
        };
        let schedule = Schedule {
            fault: Fault::Stop,
            fault_at: Duration::from_secs(1),
            recover_at: Duration::from_secs(2),
            duration: Duration::from_secs(3),
        };
        let mut t = Traffic {
            sent: vec![
                (0..30).map(|s| s * 100_000_000).collect(),
                (0..30).map(|s| s * 100_000_000 + 50_000_000).collect(),
            ],
            ..Traffic::default()
        };
        // Datagram k = seq * 2 + flow is due at k / 20 s.
        for seq in 0..30u32 {
            for flow in 0..2u16 {
                let sent_ns = (u64::from(seq) * 2 + u64::from(flow)) * 50_000_000;
                let via = if flow == 1 {
                    1
                } else if !(1_000_000_000..2_200_000_000).contains(&sent_ns) {
                    0
                } else if sent_ns == 1_000_000_000 {
                    // Held 5 s (a stopped dataplane's RX ring): as good as lost.
                    t.arrivals.push(Arrival {
                        flow,
                        seq,
                        sent_ns,
                        recv_ns: sent_ns + 5_000_000_000,
                        via: Some(0),
                    });
                    continue;
                } else if sent_ns < 1_300_000_000 {
                    continue; // lost
                } else {
                    1
                };
                t.arrivals.push(Arrival {
                    flow,
                    seq,
                    sent_ns,
                    recv_ns: sent_ns + 100_000,
                    via: Some(via),
                });
            }
        }
        let o = Outcome::of(&schedule, flows, &t);
        assert_eq!(o.sent, 60);
        assert_eq!(
            (o.lost, o.lost_before, o.lost_fault, o.lost_recovery),
            (3, 0, 3, 0)
        );
        assert_eq!(o.late, 1);
        assert_eq!(o.flows_on_a, 1);
        assert_eq!(o.withdraw_ms, Some(300.0));
        assert_eq!(o.return_ms, Some(200.0));
        assert_eq!(o.share_before, [50.0, 50.0]);
        assert!(
            o.table()
                .contains("| a dataplane SIGSTOP | 1.0 s | 3 | 0.30 s |"),
            "{}",
            o.table()
        );
        // The bins count arrivals per appliance: 1.5 s is in the outage, all through b.
        let bin = o
            .series
            .iter()
            .find(|b| (b.t - 1.5).abs() < 1e-9)
            .expect("bin");
        assert_eq!(bin.pps, [0.0, 20.0]);
    }
}
