//! Running cells: a testbed per cell, the DUT, the NAPI placement, sink and generator as
//! processes, and the measured window.
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::matrix::{Cell, Dut, Matrix};
use crate::plan::{self, Layout, QueueIn};
use crate::sys;
use crate::testbed::Testbed;
use crate::topology::{self, Machine};

/// One repeat of one cell.
#[derive(Debug, Clone, Serialize, serde::Deserialize, PartialEq)]
pub struct Record {
    /// Matrix name.
    pub matrix: String,
    /// The cell (DUT, layout, packet size, flows, batch, knobs), flattened into the record.
    #[serde(flatten)]
    pub cell: Cell,
    /// Repeat number.
    pub rep: u32,
    /// "ok", or why there is no measurement ("unavailable: ...", "skipped: ...", "failed: ...").
    pub status: String,
    /// Generator rate over its whole run.
    pub offered_pps: f64,
    /// Sink rate of the generator's frames in the window.
    pub forwarded_pps: f64,
    /// Sink count of the generator's frames in the window.
    pub sink_packets: u64,
    /// DUT egress interface tx packets in the window (the cross-check).
    pub dut_tx_packets: u64,
    /// Sink and DUT tx disagree by more than 1%.
    pub suspect: bool,
    /// DUT CPU ns per forwarded packet (threads + NAPI kthreads).
    pub dut_cpu_ns_per_pkt: f64,
    /// Of which NAPI kthreads.
    pub napi_ns_per_pkt: f64,
    /// Of which the DUT's own threads.
    pub threads_ns_per_pkt: f64,
    /// DUT CPU time / window.
    pub dut_cpu_util: f64,
    /// Dataplane drops by reason over the whole run (non-zero only).
    pub drops: BTreeMap<String, u64>,
    /// Seconds of setup before the window (testbed excluded).
    pub setup_s: f64,
}

/// One zero-loss trial: (offered pps the generator reached, frames sent, frames received).
pub type Trial = (f64, u64, u64);

/// All repeats of one cell.
#[derive(Debug, Clone, Serialize)]
pub struct CellResult {
    /// The cell.
    pub cell: Cell,
    /// Its repeats.
    pub runs: Vec<Record>,
    /// The median forwarding rate settled within `stable_pct` before `max_reps`.
    pub stable: bool,
    /// RFC 2544 zero-loss throughput (pps), when the matrix asks for it.
    pub zero_loss_pps: Option<f64>,
    /// The zero-loss search's trials.
    pub zero_loss_trials: Vec<Trial>,
}

/// Median of a list (None when empty).
pub fn median(mut xs: Vec<f64>) -> Option<f64> {
    xs.retain(|x| x.is_finite());
    if xs.is_empty() {
        return None;
    }
    xs.sort_by(f64::total_cmp);
    let n = xs.len();
    Some(if n % 2 == 1 {
        xs[n / 2]
    } else {
        (xs[n / 2 - 1] + xs[n / 2]) / 2.0
    })
}

struct Proc {
    child: Child,
    lines: mpsc::Receiver<String>,
}

impl Proc {
    fn spawn(ns: &str, exe: &Path, args: &[String]) -> std::io::Result<Proc> {
        let mut child = Command::new("ip")
            .args(["netns", "exec", ns])
            .arg(exe)
            .args(args)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()?;
        let (tx, lines) = mpsc::channel();
        if let Some(err) = child.stderr.take() {
            std::thread::spawn(move || {
                for l in BufReader::new(err).lines().map_while(Result::ok) {
                    let _ = tx.send(l);
                }
            });
        }
        Ok(Proc { child, lines })
    }

    /// Waits for a stderr line containing `marker`; the lines seen on failure.
    fn wait_for(&mut self, marker: &str, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        let mut seen = Vec::new();
        while Instant::now() < deadline {
            match self.lines.recv_timeout(Duration::from_millis(100)) {
                Ok(l) if l.contains(marker) => return Ok(()),
                Ok(l) => seen.push(l),
                Err(mpsc::RecvTimeoutError::Disconnected) => break,
                Err(_) => {}
            }
        }
        Err(format!(
            "no `{marker}` from the process: {}",
            seen.join(" | ")
        ))
    }

    fn stop(mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nsx(ns: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns])
        .args(args)
        .output()
        .map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(format!(
            "{}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A process parked in a namespace for the length of a cell, so the window's counters can be
/// read from `/proc/PID/net/dev` (that process's namespace) without starting a process at the
/// window's edges: with real-time NAPI threads busy, a new process can start tens of
/// milliseconds late and skew the cross-check. Killed on drop.
struct NetnsAnchor(Child);

impl NetnsAnchor {
    fn new(ns: &str) -> Result<NetnsAnchor, String> {
        Command::new("ip")
            .args(["netns", "exec", ns, "sleep", "3600"])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(NetnsAnchor)
            .map_err(|e| format!("ip netns exec {ns} sleep: {e}"))
    }

    /// Transmitted packets of `dev` in the anchor's namespace (0 if unreadable).
    fn tx_packets(&self, dev: &str) -> u64 {
        std::fs::read_to_string(format!("/proc/{}/net/dev", self.0.id()))
            .ok()
            .and_then(|t| tx_packets_in(&t, dev))
            .unwrap_or(0)
    }
}

impl Drop for NetnsAnchor {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// The tx packets column of `dev` in /proc/net/dev text.
fn tx_packets_in(text: &str, dev: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let (name, rest) = l.split_once(':')?;
        (name.trim() == dev).then(|| rest.split_whitespace().nth(9)?.parse().ok())?
    })
}

/// GRO on (gives a veth NAPI instances), threaded NAPI on, kthreads pinned to `cpu` (None: all
/// CPUs), optionally SCHED_FIFO (the sink's, so it keeps up). Returns the kthreads' tids.
fn napi(
    ns: &str,
    dev: &str,
    cpu: Option<usize>,
    all: &[usize],
    fifo: bool,
) -> Result<Vec<u32>, String> {
    nsx(ns, &["ethtool", "-K", dev, "gro", "on"])?;
    nsx(
        ns,
        &[
            "sh",
            "-c",
            &format!("echo 1 > /sys/class/net/{dev}/threaded"),
        ],
    )?;
    let deadline = Instant::now() + Duration::from_secs(3);
    let mut tids = Vec::new();
    while tids.is_empty() && Instant::now() < deadline {
        tids = topology::napi_threads(dev)
            .into_iter()
            .map(|(t, _)| t)
            .collect();
        std::thread::sleep(Duration::from_millis(20));
    }
    for &t in &tids {
        let cpus = cpu.map_or_else(|| all.to_vec(), |c| vec![c]);
        sys::set_thread_affinity(t, &cpus).map_err(|e| e.to_string())?;
        if fifo {
            sys::set_fifo(t, 50).map_err(|e| e.to_string())?;
        }
    }
    Ok(tids)
}

fn cpu_ns(tasks: &[(u32, u32)]) -> u64 {
    tasks
        .iter()
        .filter_map(|(p, t)| sys::thread_cpu_ns(*p, *t))
        .sum()
}

fn tasks_of(pid: u32) -> Vec<(u32, u32)> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .map(|d| {
            d.flatten()
                .filter_map(|e| e.file_name().to_string_lossy().parse().ok())
                .map(|t| (pid, t))
                .collect()
        })
        .unwrap_or_default()
}

/// Where a dataplane layout puts things on the testbed: (args for `dataplane run`, the CPU
/// of the DUT interfaces' NAPI threads). Err: the layout is not available on this machine.
pub fn layout_placement(
    m: &Machine,
    layout: &str,
    gen_cpu: usize,
    dut_cpu: usize,
) -> Result<(Vec<String>, Option<usize>), String> {
    let l = Layout::parse(layout).ok_or_else(|| format!("unknown layout {layout}"))?;
    if l == Layout::Unpinned {
        return Ok((vec!["--layout".into(), "unpinned".into()], None));
    }
    // The interrupt CPU (where the NAPI threads run) is the DUT CPU for irq-core and spread,
    // the generator's for the layouts that move the poller away from it.
    let irq = if matches!(l, Layout::IrqCore | Layout::Spread) {
        dut_cpu
    } else {
        gen_cpu
    };
    let q = [QueueIn {
        queue: 0,
        irq_cpu: Some(irq),
        config_cpu: Some(dut_cpu),
    }];
    let p = plan::plan(m, &q, None, l).map_err(|e| e.to_string())?;
    let napi_cpu = p.entries[0].irq_cpu;
    Ok((
        vec![
            "--layout".into(),
            layout.into(),
            "--irq-cpu".into(),
            format!("0:{irq}"),
        ],
        napi_cpu,
    ))
}

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

    fn blank(&self, cell: &Cell, rep: u32, status: String) -> Record {
        Record {
            matrix: self.matrix.name.clone(),
            cell: cell.clone(),
            rep,
            status,
            offered_pps: 0.0,
            forwarded_pps: 0.0,
            sink_packets: 0,
            dut_tx_packets: 0,
            suspect: false,
            dut_cpu_ns_per_pkt: f64::NAN,
            napi_ns_per_pkt: f64::NAN,
            threads_ns_per_pkt: f64::NAN,
            dut_cpu_util: 0.0,
            drops: BTreeMap::new(),
            setup_s: 0.0,
        }
    }

    fn run_cell(
        &self,
        cell: &Cell,
        m: Option<&Machine>,
        progress: &mut impl FnMut(&Cell, Option<&Record>),
    ) -> CellResult {
        let mx = self.matrix;
        // Cells this machine cannot give are reported, with the reason, never dropped.
        let placement = if cell.dut.is_dataplane() {
            match m.map(|m| layout_placement(m, &cell.layout, mx.gen_cpu, mx.dut_cpu)) {
                Some(Ok(p)) => Some(p),
                Some(Err(why)) => {
                    return self.single(
                        cell,
                        format!("unavailable: not available here: {why}"),
                        progress,
                    )
                }
                None => {
                    return self.single(cell, "failed: cannot read the topology".into(), progress)
                }
            }
        } else {
            None
        };
        if cell.dut.is_dataplane()
            && cell.memory == "remote"
            && m.is_some_and(|m| m.nodes.len() < 2)
        {
            return self.single(
                cell,
                "unavailable: not available here: memory = remote needs 2 NUMA nodes".into(),
                progress,
            );
        }
        if cell.dut == Dut::Testpmd && which("dpdk-testpmd").is_none() {
            return self.single(
                cell,
                "skipped: dpdk-testpmd not installed (Debian package dpdk-dev)".into(),
                progress,
            );
        }
        let bed = match Testbed::new(&self.prefix, 1) {
            Ok(b) => b,
            Err(e) => return self.single(cell, format!("failed: {e}"), progress),
        };
        if let Err(e) = bed.up() {
            return self.single(cell, format!("failed: testbed: {e}"), progress);
        }
        let mut runs: Vec<Record> = Vec::new();
        let mut stable = false;
        for rep in 0..mx.max_reps {
            let r = self
                .run_rep(cell, &bed, rep, placement.as_ref())
                .unwrap_or_else(|e| self.blank(cell, rep, format!("failed: {e}")));
            progress(cell, Some(&r));
            let failed = r.status != "ok";
            runs.push(r);
            if failed {
                break;
            }
            if rep + 1 >= mx.reps {
                let all: Vec<f64> = runs.iter().map(|r| r.forwarded_pps).collect();
                let now = median(all.clone()).unwrap_or(0.0);
                let before = median(all[..all.len() - 1].to_vec()).unwrap_or(0.0);
                if now > 0.0 && ((now - before) / now).abs() * 100.0 < mx.stable_pct {
                    stable = true;
                    break;
                }
                if now == 0.0 && before == 0.0 && rep + 1 >= mx.reps {
                    stable = true;
                    break;
                }
            }
        }
        let (mut zero_loss_pps, mut zero_loss_trials) = (None, Vec::new());
        let max = median(
            runs.iter()
                .filter(|r| r.status == "ok")
                .map(|r| r.forwarded_pps)
                .collect(),
        );
        if mx.zero_loss && cell.dut != Dut::Drop {
            if let Some(max) = max.filter(|m| *m > 0.0) {
                match self.zero_loss(cell, &bed, placement.as_ref(), max) {
                    Ok((best, trials)) => {
                        zero_loss_pps = Some(best);
                        zero_loss_trials = trials;
                    }
                    Err(e) => runs.push(self.blank(
                        cell,
                        mx.max_reps,
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
    fn start_dut(
        &self,
        cell: &Cell,
        bed: &Testbed,
        tag: &str,
        placement: Option<&(Vec<String>, Option<usize>)>,
        summary_json: &Path,
    ) -> Result<(Option<Proc>, Option<usize>), String> {
        let mx = self.matrix;
        let dut_ns = bed.dut_ns();
        let mut dut: Option<Proc> = None;
        let mut napi_cpu = Some(mx.dut_cpu);
        match cell.dut {
            d if d.is_dataplane() => {
                let (args, nc) = placement.cloned().unwrap_or_default();
                napi_cpu = nc;
                let mut cfg = bed.config(
                    match d {
                        Dut::L3fwd => crate::config::Mode::L3fwd,
                        Dut::L2fwd => crate::config::Mode::L2fwd,
                        Dut::Bounce => crate::config::Mode::Bounce,
                        _ => crate::config::Mode::Drop,
                    },
                    &[(Some(mx.dut_cpu), vec![0])],
                    cell.batch,
                );
                cfg = cfg.replacen(
                    "[dataplane]\n",
                    &format!(
                        "[dataplane]\nmemory = \"{}\"\nalign = \"{}\"\nstats = \"{}\"\nidle = \"{}\"\n",
                        cell.memory, cell.align, cell.stats, cell.idle
                    ),
                    1,
                );
                let path = self.scratch.join(format!("{tag}-dut.toml"));
                std::fs::write(&path, cfg).map_err(|e| e.to_string())?;
                let mut a = vec![
                    "run".to_string(),
                    "--config".into(),
                    path.display().to_string(),
                    "--interval".into(),
                    "0".into(),
                ];
                a.extend(["--json".into(), summary_json.display().to_string()]);
                a.extend(args);
                let mut p = Proc::spawn(&dut_ns, &self.exe, &a).map_err(|e| e.to_string())?;
                p.wait_for("attached", Duration::from_secs(30))?;
                dut = Some(p);
            }
            Dut::Kernel => set_forwarding(&dut_ns, true)?,
            Dut::XdpFib => {
                set_forwarding(&dut_ns, true)?;
                let a = vec![
                    "xdp-fwd".to_string(),
                    "--iface".into(),
                    bed.dut_in(),
                    "--iface".into(),
                    bed.dut_out(),
                ];
                let mut p = Proc::spawn(&dut_ns, &self.exe, &a).map_err(|e| e.to_string())?;
                p.wait_for("attached", Duration::from_secs(30))?;
                dut = Some(p);
            }
            Dut::Testpmd => {
                // Its best placement here (TESTBED-FACTS): NAPI off the forwarding lcore's CPU.
                napi_cpu = Some(mx.gen_cpu);
                let a = testpmd_args(bed, mx.gen_cpu, mx.dut_cpu, tag);
                // stdbuf: testpmd's stdout is a pipe here, and its "Press enter" line would sit
                // in the stdio buffer.
                let mut child = Command::new("ip")
                    .args(["netns", "exec", &dut_ns, "stdbuf", "-oL", "dpdk-testpmd"])
                    .args(&a)
                    .stdin(Stdio::piped())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::piped())
                    .spawn()
                    .map_err(|e| e.to_string())?;
                let (tx, lines) = mpsc::channel();
                if let Some(o) = child.stdout.take() {
                    std::thread::spawn(move || {
                        for l in BufReader::new(o).lines().map_while(Result::ok) {
                            let _ = tx.send(l);
                        }
                    });
                }
                let mut p = Proc { child, lines };
                p.wait_for("Press enter to exit", Duration::from_secs(60))?;
                dut = Some(p);
            }
            _ => {}
        }
        Ok((dut, napi_cpu))
    }

    /// RFC 2544 throughput: the highest offered rate at which the sink receives every frame
    /// the generator sent, by binary search between 0 and 110% of the maximum forwarding rate.
    /// The paced generator is an AF_PACKET socket (smooth, but at most ~0.74 Mpps alone on this
    /// machine, less while it shares its CPU with the DUT's NAPI threads): a cell whose
    /// zero-loss rate is above that reports the highest rate the generator reached, and the
    /// trials show it.
    fn zero_loss(
        &self,
        cell: &Cell,
        bed: &Testbed,
        placement: Option<&(Vec<String>, Option<usize>)>,
        max_pps: f64,
    ) -> Result<(f64, Vec<Trial>), String> {
        let mx = self.matrix;
        let tag = format!("{}-zl", self.prefix);
        let all: Vec<usize> =
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
        let (dut, napi_cpu) = self.start_dut(
            cell,
            bed,
            &tag,
            placement,
            &self.scratch.join(format!("{tag}-dut.json")),
        )?;
        let result = (|| {
            for dev in [bed.dut_in(), bed.dut_out()] {
                napi(&bed.dut_ns(), &dev, napi_cpu, &all, false)?;
            }
            let (mut lo, mut hi, mut best) = (0.0f64, max_pps * 1.1, 0.0f64);
            let mut trials = Vec::new();
            for step in 0..mx.zero_loss_steps {
                let rate = if step == 0 { hi } else { (lo + hi) / 2.0 };
                let n = ((rate * mx.zero_loss_trial_s) as u64).max(1);
                let sink_json = self.scratch.join(format!("{tag}-sink.json"));
                let _ = std::fs::remove_file(&sink_json);
                let s_args: Vec<String> = argv(
                    &[
                        "sink",
                        "--iface",
                        &bed.sink_if(),
                        "--duration",
                        "600",
                        "--json",
                    ],
                    &sink_json,
                );
                let mut sink =
                    Proc::spawn(&bed.sink_ns(), &self.exe, &s_args).map_err(|e| e.to_string())?;
                sink.wait_for("window open", Duration::from_secs(10))?;
                napi(&bed.sink_ns(), &bed.sink_if(), Some(mx.gen_cpu), &all, true)?;
                let gen_json = self.scratch.join(format!("{tag}-gen.json"));
                let out = Command::new("ip")
                    .args(["netns", "exec", &bed.gen_ns()])
                    .arg(&self.exe)
                    .args(gen_args(cell, bed, mx.gen_cpu))
                    .arg("--json")
                    .arg(&gen_json)
                    .args([
                        "--count",
                        &n.to_string(),
                        "--rate",
                        &(rate as u64).max(1).to_string(),
                    ])
                    .args([
                        "--duration",
                        &(mx.zero_loss_trial_s * 3.0 + 2.0).to_string(),
                    ])
                    .output()
                    .map_err(|e| e.to_string())?;
                if !out.status.success() {
                    return Err(format!("gen: {}", String::from_utf8_lossy(&out.stderr)));
                }
                std::thread::sleep(Duration::from_millis(300));
                sink.stop();
                let s: serde_json::Value = serde_json::from_str(
                    &std::fs::read_to_string(&sink_json).map_err(|e| e.to_string())?,
                )
                .map_err(|e| e.to_string())?;
                let got = s["matched"].as_u64().unwrap_or(0);
                let g: serde_json::Value = serde_json::from_str(
                    &std::fs::read_to_string(&gen_json).map_err(|e| e.to_string())?,
                )
                .map_err(|e| e.to_string())?;
                // What the generator achieved, which may fall short of what was asked.
                let sent = g["packets"].as_u64().unwrap_or(n);
                let actual = sent as f64 / g["seconds"].as_f64().unwrap_or(1.0).max(1e-9);
                trials.push((actual, sent, got));
                if got >= sent {
                    best = best.max(actual);
                    lo = rate;
                    if step == 0 {
                        break;
                    }
                } else {
                    hi = rate;
                }
            }
            Ok((best, trials))
        })();
        stop_dut(cell, &bed.dut_ns(), dut)?;
        result
    }

    fn run_rep(
        &self,
        cell: &Cell,
        bed: &Testbed,
        rep: u32,
        placement: Option<&(Vec<String>, Option<usize>)>,
    ) -> Result<Record, String> {
        let mx = self.matrix;
        let t0 = Instant::now();
        let (dut_ns, sink_ns, gen_ns) = (bed.dut_ns(), bed.sink_ns(), bed.gen_ns());
        let all: Vec<usize> =
            (0..std::thread::available_parallelism().map_or(1, |n| n.get())).collect();
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
        // 2. Sink (its NAPI on the generator's CPU at SCHED_FIFO, so it keeps up and its work is
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
        let mut sink = Proc::spawn(&sink_ns, &self.exe, &s_args).map_err(|e| e.to_string())?;
        std::thread::sleep(Duration::from_millis(300));
        napi(&sink_ns, &bed.sink_if(), Some(mx.gen_cpu), &all, true)?;
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
        let mut gen = Proc::spawn(&gen_ns, &self.exe, &g_args).map_err(|e| e.to_string())?;
        // 3. The window: opened and closed by the sink.
        sink.wait_for("window open", Duration::from_secs_f64(total + 10.0))?;
        let snapshot = || {
            (
                cpu_ns(&tasks),
                cpu_ns(&napi_tasks),
                anchor.tx_packets(&bed.dut_out()),
                Instant::now(),
            )
        };
        let (c0, n0, tx0, w0) = snapshot();
        let _ = sink.child.wait();
        let (c1, n1, tx1, w1) = snapshot();
        let _ = gen.child.wait();
        stop_dut(cell, &dut_ns, dut)?;
        let read = |p: &Path| -> Result<serde_json::Value, String> {
            serde_json::from_str(
                &std::fs::read_to_string(p).map_err(|e| format!("{}: {e}", p.display()))?,
            )
            .map_err(|e| e.to_string())
        };
        let s = read(&sink_json)?;
        let g = read(&gen_json)?;
        let mut r = self.blank(cell, rep, "ok".into());
        let pkts = s["matched"].as_u64().unwrap_or(0);
        let secs = s["seconds"].as_f64().unwrap_or(mx.window_s).max(1e-9);
        r.sink_packets = pkts;
        r.dut_tx_packets = tx1.saturating_sub(tx0);
        r.forwarded_pps = pkts as f64 / secs;
        r.offered_pps =
            g["packets"].as_f64().unwrap_or(0.0) / g["seconds"].as_f64().unwrap_or(1.0).max(1e-9);
        // Drop forwards nothing by design; its cross-check is moot.
        r.suspect = cell.dut != Dut::Drop
            && pkts > 0
            && (r.dut_tx_packets as f64 - pkts as f64).abs() / pkts as f64 > 0.01;
        let per = |ns: u64| {
            if pkts > 0 {
                ns as f64 / pkts as f64
            } else {
                f64::NAN
            }
        };
        r.dut_cpu_ns_per_pkt = per(c1 - c0);
        r.napi_ns_per_pkt = per(n1 - n0);
        r.threads_ns_per_pkt = per((c1 - c0) - (n1 - n0));
        r.dut_cpu_util = (c1 - c0) as f64 / 1e9 / (w1 - w0).as_secs_f64().max(1e-9);
        r.setup_s = setup_s;
        if cell.dut.is_dataplane() {
            if let Ok(v) = read(&summary_json) {
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

/// The generator's command line for a cell: interface, frame size, flows, CPU.
fn gen_args(cell: &Cell, bed: &Testbed, cpu: usize) -> Vec<String> {
    vec![
        "gen".into(),
        "--iface".into(),
        bed.gen_if(),
        "--size".into(),
        cell.pkt_size.to_string(),
        "--flows".into(),
        cell.flows.to_string(),
        "--cpu".into(),
        cpu.to_string(),
    ]
}

/// A command line: `parts`, then a path (the JSON output every sub-command here ends with).
fn argv(parts: &[&str], last: &Path) -> Vec<String> {
    parts
        .iter()
        .map(|s| s.to_string())
        .chain([last.display().to_string()])
        .collect()
}

fn set_forwarding(ns: &str, on: bool) -> Result<(), String> {
    let v = if on { "1" } else { "0" };
    nsx(ns, &["sysctl", "-qw", &format!("net.ipv4.ip_forward={v}")])?;
    nsx(
        ns,
        &[
            "sysctl",
            "-qw",
            &format!("net.ipv6.conf.all.forwarding={v}"),
        ],
    )
    .map(|_| ())
}

fn stop_dut(cell: &Cell, dut_ns: &str, dut: Option<Proc>) -> Result<(), String> {
    if let Some(p) = dut {
        p.stop();
    }
    if matches!(cell.dut, Dut::Kernel | Dut::XdpFib) {
        set_forwarding(dut_ns, false)?;
    }
    Ok(())
}

/// The testpmd command line of the seeds' peer (TESTBED-FACTS: net_af_xdp, io mode).
fn testpmd_args(bed: &Testbed, main_cpu: usize, fwd_cpu: usize, tag: &str) -> Vec<String> {
    vec![
        "-l".into(),
        format!("{main_cpu},{fwd_cpu}"),
        "--main-lcore".into(),
        main_cpu.to_string(),
        "--no-pci".into(),
        "--no-huge".into(),
        "-m".into(),
        "1024".into(),
        "--file-prefix".into(),
        tag.into(),
        "--vdev".into(),
        format!(
            "net_af_xdp0,iface={},start_queue=0,queue_count=1",
            bed.dut_in()
        ),
        "--vdev".into(),
        format!(
            "net_af_xdp1,iface={},start_queue=0,queue_count=1",
            bed.dut_out()
        ),
        "--".into(),
        "--forward-mode=io".into(),
        "--nb-cores=1".into(),
        "--rxq=1".into(),
        "--txq=1".into(),
        "--burst=32".into(),
        "--auto-start".into(),
    ]
}

fn which(cmd: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?
        .to_str()?
        .split(':')
        .map(|d| Path::new(d).join(cmd))
        .find(|p| p.is_file())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tx_packets_from_proc_net_dev() {
        let t = "Inter-|   Receive |  Transmit\n face |bytes packets errs drop fifo frame compressed multicast|bytes packets\n    lo: 6460 58 0 0 0 0 0 0 6460 58 0 0 0 0 0 0\nlb1-d1: 100 2 0 0 0 0 0 0 12345 678 0 0 0 0 0 0\n";
        assert_eq!(tx_packets_in(t, "lb1-d1"), Some(678));
        assert_eq!(tx_packets_in(t, "lo"), Some(58));
        assert_eq!(tx_packets_in(t, "lb1-d0"), None);
    }
    use crate::topology::Source;

    #[test]
    fn medians() {
        assert_eq!(median(vec![3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(vec![4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(vec![f64::NAN]), None);
    }

    #[test]
    fn layouts_map_to_placements_or_reasons() {
        let m = Machine::load(&Source::Synthetic("pack:1 [numa] core:2 pu:1".into()))
            .expect("topology");
        let (args, napi) = layout_placement(&m, "same-package", 0, 1).expect("possible");
        assert_eq!(
            napi,
            Some(0),
            "NAPI on the generator's CPU, the poller moves away"
        );
        assert!(args.contains(&"0:0".to_string()));
        assert_eq!(
            layout_placement(&m, "irq-core", 0, 1).expect("possible").1,
            Some(1)
        );
        assert_eq!(
            layout_placement(&m, "unpinned", 0, 1).expect("possible").1,
            None
        );
        assert!(layout_placement(&m, "smt-sibling", 0, 1)
            .unwrap_err()
            .contains("no SMT"));
        assert!(layout_placement(&m, "remote-node", 0, 1)
            .unwrap_err()
            .contains("NUMA node"));
    }

    #[test]
    fn record_schema_has_the_documented_fields() {
        let m: Matrix = Matrix::parse("name = \"t\"\nduts = [\"l3fwd\"]\n", "t").expect("matrix");
        let lab = Lab {
            matrix: &m,
            exe: "x".into(),
            prefix: "p".into(),
            scratch: "/tmp".into(),
        };
        let cell = &m.cells()[0];
        let v = serde_json::to_value(lab.blank(cell, 2, "ok".into())).expect("json");
        for k in [
            "dut",
            "layout",
            "pkt_size",
            "flows",
            "batch",
            "memory",
            "align",
            "stats",
            "rep",
            "offered_pps",
            "forwarded_pps",
            "dut_cpu_ns_per_pkt",
            "status",
            "suspect",
        ] {
            assert!(v.get(k).is_some(), "results.json field {k} missing: {v}");
        }
        assert_eq!(v["rep"], 2);
        assert_eq!(v["dut"], "l3fwd");
    }
}
