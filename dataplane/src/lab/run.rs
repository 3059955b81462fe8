//! Running cells: a testbed per cell, the DUT, the NAPI placement, sink and generator as
//! processes, and the measured window; repeats until the median settles.
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::commands::{
    argv, dut_config, dut_run_args, gen_args, layout_placement, testpmd_args, Placement,
};
use super::error::LabError;
use super::matrix::{Cell, Dut, Matrix};
use super::process::{read_json, set_forwarding, which, NetnsAnchor, Proc};
use super::record::{median, CellResult, Record};
use super::sample::{all_cpus, cpu_ns, napi, tasks_of};
use crate::placement::topology::{self, Machine};
use crate::testbed::Testbed;

/// Runs a matrix; `progress` hears about every repeat.
pub struct Lab<'a> {
    /// The matrix.
    pub matrix: &'a Matrix,
    /// The `dataplane` executable.
    pub exe: PathBuf,
    /// Testbed name prefix.
    pub prefix: String,
    /// Scratch directory (configs, JSON from the processes).
    pub scratch: PathBuf,
}

impl Lab<'_> {
    /// Runs every cell.
    pub fn run(&self, mut progress: impl FnMut(&Cell, Option<&Record>)) -> Vec<CellResult> {
        let machine = Machine::load(&topology::Source::Host).ok();
        let mut out = Vec::new();
        for cell in self.matrix.cells() {
            progress(&cell, None);
            let res = self.run_cell(&cell, machine.as_ref(), &mut progress);
            out.push(res);
        }
        out
    }

    pub(super) fn blank(&self, cell: &Cell, rep: u32, status: String) -> Record {
        Record::blank(&self.matrix.name, cell, rep, status)
    }

    fn run_cell(
        &self,
        cell: &Cell,
        m: Option<&Machine>,
        progress: &mut impl FnMut(&Cell, Option<&Record>),
    ) -> CellResult {
        let placement = match self.cell_placement(cell, m) {
            Ok(p) => p,
            Err(status) => return self.single(cell, status, progress),
        };
        let bed = match Testbed::new(&self.prefix, 1) {
            Ok(b) => b,
            Err(e) => return self.single(cell, format!("failed: {e}"), progress),
        };
        if let Err(e) = bed.up() {
            return self.single(cell, format!("failed: testbed: {e}"), progress);
        }
        let (mut runs, stable) = self.repeat(cell, &bed, placement.as_ref(), progress);
        let (mut zero_loss_pps, mut zero_loss_trials) = (None, Vec::new());
        let max = median(
            runs.iter()
                .filter(|r| r.status == "ok")
                .map(|r| r.forwarded_pps)
                .collect(),
        );
        if self.matrix.zero_loss && cell.dut != Dut::Drop {
            if let Some(max) = max.filter(|m| *m > 0.0) {
                match self.zero_loss(cell, &bed, placement.as_ref(), max) {
                    Ok((best, trials)) => {
                        zero_loss_pps = Some(best);
                        zero_loss_trials = trials;
                    }
                    Err(e) => runs.push(self.blank(
                        cell,
                        self.matrix.max_reps,
                        format!("failed: zero-loss search: {e}"),
                    )),
                }
            }
        }
        bed.down();
        CellResult {
            cell: cell.clone(),
            runs,
            stable,
            zero_loss_pps,
            zero_loss_trials,
        }
    }

    /// Where the cell's DUT goes on `m` (None: not a dataplane cell), or the status of a cell
    /// this machine cannot give: reported with its reason, never dropped.
    fn cell_placement(
        &self,
        cell: &Cell,
        m: Option<&Machine>,
    ) -> Result<Option<Placement>, String> {
        let mx = self.matrix;
        let placement = if cell.dut.is_dataplane() {
            match m.map(|m| layout_placement(m, &cell.layout, mx.gen_cpu, mx.dut_cpu)) {
                Some(Ok(p)) => Some(p),
                Some(Err(why)) => return Err(format!("unavailable: not available here: {why}")),
                None => return Err("failed: cannot read the topology".into()),
            }
        } else {
            None
        };
        if cell.dut.is_dataplane()
            && cell.memory == "remote"
            && m.is_some_and(|m| m.nodes.len() < 2)
        {
            return Err(
                "unavailable: not available here: memory = remote needs 2 NUMA nodes".into(),
            );
        }
        if cell.dut == Dut::Testpmd && which("dpdk-testpmd").is_none() {
            return Err("skipped: dpdk-testpmd not installed (Debian package dpdk-dev)".into());
        }
        Ok(placement)
    }

    /// The cell's repeats, until the median is steady (true) or `max_reps` (twice that when
    /// the repeats fall in two clusters, so both are sampled; the summary says so); stops at
    /// the first failed repeat.
    fn repeat(
        &self,
        cell: &Cell,
        bed: &Testbed,
        placement: Option<&Placement>,
        progress: &mut impl FnMut(&Cell, Option<&Record>),
    ) -> (Vec<Record>, bool) {
        let mx = self.matrix;
        let mut runs: Vec<Record> = Vec::new();
        let mut cap = mx.max_reps;
        let mut rep = 0;
        while rep < cap {
            let r = self
                .run_rep(cell, bed, rep, placement)
                .unwrap_or_else(|e| self.blank(cell, rep, format!("failed: {e}")));
            progress(cell, Some(&r));
            let failed = r.status != "ok";
            runs.push(r);
            if failed {
                break;
            }
            rep += 1;
            if rep >= mx.reps {
                let all: Vec<f64> = runs.iter().map(|r| r.forwarded_pps).collect();
                if super::record::bimodal(&all).is_some() {
                    cap = mx.max_reps * 2;
                    continue;
                }
                let now = median(all.clone()).unwrap_or(0.0);
                let before = median(all[..all.len() - 1].to_vec()).unwrap_or(0.0);
                if now > 0.0 && ((now - before) / now).abs() * 100.0 < mx.stable_pct {
                    return (runs, true);
                }
                if now == 0.0 && before == 0.0 {
                    return (runs, true);
                }
            }
        }
        (runs, false)
    }

    fn single(
        &self,
        cell: &Cell,
        status: String,
        progress: &mut impl FnMut(&Cell, Option<&Record>),
    ) -> CellResult {
        let r = self.blank(cell, 0, status);
        progress(cell, Some(&r));
        CellResult {
            cell: cell.clone(),
            runs: vec![r],
            stable: false,
            zero_loss_pps: None,
            zero_loss_trials: Vec::new(),
        }
    }

    /// Starts the DUT (its process, or the namespace's forwarding) and says where its NAPI
    /// threads go.
    pub(super) fn start_dut(
        &self,
        cell: &Cell,
        bed: &Testbed,
        tag: &str,
        placement: Option<&Placement>,
        summary_json: &Path,
    ) -> Result<(Option<Proc>, Option<usize>), LabError> {
        let mx = self.matrix;
        let dut_ns = bed.dut_ns();
        match cell.dut {
            d if d.is_dataplane() => {
                let placement = placement.cloned().unwrap_or_default();
                let path = self.scratch.join(format!("{tag}-dut.toml"));
                std::fs::write(&path, dut_config(cell, bed, mx.dut_cpu))
                    .map_err(LabError::io(format!("writing {}", path.display())))?;
                let args = dut_run_args(&path, summary_json, &placement, cell.scrape);
                let mut p = Proc::spawn(&dut_ns, &self.exe, &args)?;
                p.wait_for("attached", Duration::from_secs(30))?;
                Ok((Some(p), placement.napi_cpu))
            }
            Dut::Kernel => {
                set_forwarding(&dut_ns, true)?;
                Ok((None, Some(mx.dut_cpu)))
            }
            Dut::XdpFib => {
                set_forwarding(&dut_ns, true)?;
                let args = vec![
                    "xdp-fwd".to_string(),
                    "--iface".into(),
                    bed.dut_in(),
                    "--iface".into(),
                    bed.dut_out(),
                ];
                let mut p = Proc::spawn(&dut_ns, &self.exe, &args)?;
                p.wait_for("attached", Duration::from_secs(30))?;
                Ok((Some(p), Some(mx.dut_cpu)))
            }
            Dut::Testpmd => {
                let args = testpmd_args(bed, mx.gen_cpu, mx.dut_cpu, tag);
                // stdbuf: testpmd's stdout is a pipe here, and its "Press enter" line would sit
                // in the stdio buffer.
                let mut child = Command::new("ip")
                    .args(["netns", "exec", &dut_ns, "stdbuf", "-oL", "dpdk-testpmd"])
                    .args(&args)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(LabError::io("starting dpdk-testpmd"))?;
                let out = child.stdout.take();
                let mut p = Proc::watching(child, out);
                p.wait_for("Press enter to exit", Duration::from_secs(60))?;
                // Its best placement on a 2-CPU testbed: NAPI off the forwarding lcore's CPU.
                Ok((Some(p), Some(mx.gen_cpu)))
            }
            _ => Ok((None, Some(mx.dut_cpu))),
        }
    }

    fn run_rep(
        &self,
        cell: &Cell,
        bed: &Testbed,
        rep: u32,
        placement: Option<&Placement>,
    ) -> Result<Record, LabError> {
        let mx = self.matrix;
        let t0 = Instant::now();
        let dut_ns = bed.dut_ns();
        let all = all_cpus();
        let tag = format!("{}-{}", self.prefix, rep);
        let summary_json = self.scratch.join(format!("{tag}-dut.json"));
        let _ = std::fs::remove_file(&summary_json);
        // 1. The DUT.
        let anchor = NetnsAnchor::new(&dut_ns)?;
        let (dut, napi_cpu) = self.start_dut(cell, bed, &tag, placement, &summary_json)?;
        let mut tasks: Vec<(u32, u32)> = dut
            .as_ref()
            .map(|p| tasks_of(p.child.id()))
            .unwrap_or_default();
        let mut napi_tasks = Vec::new();
        for dev in [bed.dut_in(), bed.dut_out()] {
            napi_tasks.extend(
                napi(&dut_ns, &dev, napi_cpu, &all, false)?
                    .into_iter()
                    .map(|t| (t, t)),
            );
        }
        tasks.extend(napi_tasks.iter().copied());
        // 2. The load.
        let (mut sink, mut gen, sink_json, gen_json, setup_s) =
            self.start_load(cell, bed, &tag, &all, t0)?;
        // 3. The window: opened and closed by the sink.
        sink.wait_for(
            "window open",
            Duration::from_secs_f64(mx.warmup_s + mx.window_s + 10.0),
        )?;
        let snapshot = || {
            (
                cpu_ns(&tasks),
                cpu_ns(&napi_tasks),
                anchor.tx_packets(&bed.dut_out()),
                Instant::now(),
            )
        };
        let scraper = cell.scrape.then(|| Scraper::start(&dut_ns));
        let (c0, n0, tx0, w0) = snapshot();
        let _ = sink.child.wait();
        let (c1, n1, tx1, w1) = snapshot();
        let scrapes = scraper.map_or(0, Scraper::stop);
        if cell.scrape && scrapes == 0 {
            return Err(LabError::NoScrape);
        }
        let _ = gen.child.wait();
        stop_dut(cell, &dut_ns, dut)?;
        let window = Window {
            cpu_ns: c1.saturating_sub(c0),
            napi_ns: n1.saturating_sub(n0),
            dut_tx: tx1.saturating_sub(tx0),
            wall: w1 - w0,
        };
        let mut r = self.record(cell, rep, &window, &sink_json, &gen_json, &summary_json)?;
        r.setup_s = setup_s;
        Ok(r)
    }

    /// Sink (its NAPI on the generator's CPU at SCHED_FIFO, so it keeps up and its work is
    /// not the DUT's), then the generator at SCHED_IDLE; both write their JSON summaries. Also
    /// returns the setup time since `t0`, taken before the generator starts.
    fn start_load(
        &self,
        cell: &Cell,
        bed: &Testbed,
        tag: &str,
        all: &[usize],
        t0: Instant,
    ) -> Result<(Proc, Proc, PathBuf, PathBuf, f64), LabError> {
        let mx = self.matrix;
        let sink_ns = bed.sink_ns();
        let gen_ns = bed.gen_ns();
        // Sink (its NAPI on the generator's CPU at SCHED_FIFO, so it keeps up and its work is
        //    not the DUT's), then the generator at SCHED_IDLE: it takes only CPU time that nothing
        //    else wants, as test equipment should. As an ordinary thread it took turns with the
        //    DUT's NAPI thread on their shared CPU in scheduler slices of milliseconds, and frames
        //    reached the DUT in bursts that overflowed its queues while between bursts it idled.
        let sink_json = self.scratch.join(format!("{tag}-sink.json"));
        let gen_json = self.scratch.join(format!("{tag}-gen.json"));
        let total = mx.warmup_s + mx.window_s;
        let s_args: Vec<String> = argv(
            &[
                "sink",
                "--iface",
                &bed.sink_if(),
                "--duration",
                &total.to_string(),
                "--skip",
                &mx.warmup_s.to_string(),
                "--json",
            ],
            &sink_json,
        );
        let sink = Proc::spawn(&sink_ns, &self.exe, &s_args)?;
        std::thread::sleep(Duration::from_millis(300));
        napi(&sink_ns, &bed.sink_if(), Some(mx.gen_cpu), all, true)?;
        let setup_s = t0.elapsed().as_secs_f64();
        let mut g_args = gen_args(cell, bed, mx.gen_cpu);
        g_args.extend(argv(
            &[
                "--background",
                "--duration",
                &(total + 1.0).to_string(),
                "--json",
            ],
            &gen_json,
        ));
        let gen = Proc::spawn(&gen_ns, &self.exe, &g_args)?;
        Ok((sink, gen, sink_json, gen_json, setup_s))
    }

    /// Repeat `rep`'s record from the sink's, the generator's and the DUT's summaries and
    /// what was measured over the window.
    fn record(
        &self,
        cell: &Cell,
        rep: u32,
        w: &Window,
        sink_json: &Path,
        gen_json: &Path,
        summary_json: &Path,
    ) -> Result<Record, LabError> {
        let mx = self.matrix;
        let s = read_json(sink_json)?;
        let g = read_json(gen_json)?;
        let mut r = self.blank(cell, rep, "ok".into());
        let pkts = s["matched"].as_u64().unwrap_or(0);
        let secs = s["seconds"].as_f64().unwrap_or(mx.window_s).max(1e-9);
        r.sink_packets = pkts;
        r.dut_tx_packets = w.dut_tx;
        r.forwarded_pps = pkts as f64 / secs;
        r.offered_pps =
            g["packets"].as_f64().unwrap_or(0.0) / g["seconds"].as_f64().unwrap_or(1.0).max(1e-9);
        // Drop forwards nothing by design; its cross-check is moot.
        r.suspect = cell.dut != Dut::Drop && suspect(pkts, r.dut_tx_packets);
        let per = |ns: u64| {
            if pkts > 0 {
                ns as f64 / pkts as f64
            } else {
                f64::NAN
            }
        };
        // The NAPI threads' time is read twice (in both sums) a moment apart, and a thread
        // can end in the window: differences never go below zero.
        let (all, napi) = (w.cpu_ns, w.napi_ns);
        r.dut_cpu_ns_per_pkt = per(all);
        r.napi_ns_per_pkt = per(napi);
        r.threads_ns_per_pkt = per(all.saturating_sub(napi));
        r.dut_cpu_util = all as f64 / 1e9 / w.wall.as_secs_f64().max(1e-9);
        if cell.dut.is_dataplane() {
            if let Ok(v) = read_json(summary_json) {
                if let Some(d) = v["drops_by_reason"].as_object() {
                    r.drops = d
                        .iter()
                        .filter_map(|(k, v)| v.as_u64().filter(|n| *n > 0).map(|n| (k.clone(), n)))
                        .collect();
                }
            }
        }
        Ok(r)
    }
}

/// What one repeat's window measured apart from the sink and the generator.
struct Window {
    /// CPU time of the DUT's tasks and its NAPI threads.
    cpu_ns: u64,
    /// CPU time of the NAPI threads alone (read a moment apart from `cpu_ns`).
    napi_ns: u64,
    /// Packets the DUT's egress interface sent.
    dut_tx: u64,
    /// Wall time.
    wall: Duration,
}

/// Stops the DUT process, or turns the namespace's forwarding off again.
pub(super) fn stop_dut(cell: &Cell, dut_ns: &str, dut: Option<Proc>) -> Result<(), LabError> {
    if let Some(p) = dut {
        p.stop();
    }
    if matches!(cell.dut, Dut::Kernel | Dut::XdpFib) {
        set_forwarding(dut_ns, false)?;
    }
    Ok(())
}

/// Scrapes a DUT's metrics endpoint every second from inside its namespace (what a Prometheus
/// server does), so a cell measures what being scraped costs the forwarding.
struct Scraper {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: std::thread::JoinHandle<u64>,
}

impl Scraper {
    fn start(ns: &str) -> Scraper {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (ns, flag) = (ns.to_string(), stop.clone());
        let thread = std::thread::spawn(move || {
            if crate::sys::enter_netns(&ns).is_err() {
                return 0;
            }
            let addr = std::net::SocketAddr::from(([127, 0, 0, 1], super::commands::SCRAPE_PORT));
            let mut ok = 0;
            while !flag.load(std::sync::atomic::Ordering::Relaxed) {
                let t = Instant::now();
                if crate::telemetry::scrape::fetch(addr).is_ok() {
                    ok += 1;
                }
                while t.elapsed() < Duration::from_secs(1)
                    && !flag.load(std::sync::atomic::Ordering::Relaxed)
                {
                    std::thread::sleep(Duration::from_millis(20));
                }
            }
            ok
        });
        Scraper { stop, thread }
    }

    /// Stops it; the number of scrapes answered.
    fn stop(self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        self.thread.join().unwrap_or(0)
    }
}

/// The sink's count and the DUT egress interface's tx counter over 1% apart: one of the two
/// is not measuring what the other is (frames from elsewhere, a counter that missed some).
pub(super) fn suspect(sink_packets: u64, dut_tx_packets: u64) -> bool {
    sink_packets > 0
        && (dut_tx_packets as f64 - sink_packets as f64).abs() / sink_packets as f64 > 0.01
}

#[cfg(test)]
mod suspect_tests {
    use super::suspect;

    #[test]
    fn counts_over_one_percent_apart_are_suspect() {
        assert!(!suspect(1_000_000, 1_000_000));
        assert!(!suspect(1_000_000, 1_010_000), "1% is within");
        assert!(suspect(1_000_000, 1_010_001));
        assert!(suspect(1_000_000, 989_999));
        assert!(!suspect(0, 5), "nothing received: no cross-check");
    }
}
