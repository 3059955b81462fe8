//! Fixtures for the netns integration tests: a testbed guard, a DUT process guard, packet
//! sockets inside namespaces. Tests need root: without it they are skipped with a visible
//! line, or fail when `CI` is set.
#![allow(dead_code, missing_docs)]

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

pub mod router;

use dataplane::sys::{self, PacketSocket};
use dataplane::testbed::Testbed;

/// True when the test can run (as root). Otherwise it cannot: with `CI` set that is a failure
/// (CI runs as root, so a skip there would hide a broken set-up); without, the test is
/// skipped with a line written straight to stderr, past the harness's output capture, so a
/// run without root shows what it did not test.
pub fn root_or_skip(test: &str) -> bool {
    if sys::is_root() {
        return true;
    }
    assert!(
        std::env::var_os("CI").is_none(),
        "{test}: needs root, and CI is set (run the suite as root: sudo make test)"
    );
    let _ = writeln!(
        std::io::stderr(),
        "SKIPPED {test}: needs root (sudo make test runs it)"
    );
    false
}

/// The `dataplane` binary of this build: beside the test executable's `deps/` directory
/// (`cargo test --workspace` builds it, for the dataplane package's own CLI tests).
pub fn bin() -> String {
    let exe = std::env::current_exe().expect("test executable path");
    let dir = exe
        .parent()
        .and_then(|deps| deps.parent())
        .expect("target directory");
    let bin = dir.join("dataplane");
    let built = std::fs::metadata(&bin)
        .and_then(|m| m.modified())
        .unwrap_or_else(|_| {
            panic!(
                "{} not found: build it first (cargo build -p dataplane, or make test)",
                bin.display()
            )
        });
    // `cargo test -p dataplane-tests` alone does not rebuild the binary: refuse a stale one
    // rather than test old code. Stale: a source it is built from (the library's, the
    // binary's, the BPF programs') is newer than it. (Not the newest library artifact: cargo
    // keeps one per feature set, and another command's may be newer than the one linked.)
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let candidates = [newest_in(
        &[root.join("dataplane/src"), root.join("bpf")],
        |n| n.ends_with(".rs") || n.ends_with(".c") || n.ends_with(".h"),
    )];
    if let Some(newer) = candidates
        .into_iter()
        .flatten()
        .filter(|(t, _)| *t > built)
        .max_by_key(|(t, _)| *t)
    {
        panic!(
            "{} is older than {}: rebuild it (cargo build -p dataplane, or make test)",
            bin.display(),
            newer.1.display()
        );
    }
    bin.display().to_string()
}

/// The most recently modified file under `paths` (files, or directories walked) whose name
/// `matches`, with its time.
fn newest_in(
    paths: &[PathBuf],
    matches: impl Fn(&str) -> bool,
) -> Option<(std::time::SystemTime, PathBuf)> {
    let mut newest: Option<(std::time::SystemTime, PathBuf)> = None;
    let mut todo: Vec<PathBuf> = paths.to_vec();
    while let Some(p) = todo.pop() {
        if p.is_dir() {
            todo.extend(
                std::fs::read_dir(&p)
                    .into_iter()
                    .flatten()
                    .flatten()
                    .map(|e| e.path()),
            );
            continue;
        }
        let name = p
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if let Some(t) = matches(&name)
            .then(|| std::fs::metadata(&p).and_then(|m| m.modified()).ok())
            .flatten()
        {
            if newest.as_ref().is_none_or(|(n, _)| t > *n) {
                newest = Some((t, p));
            }
        }
    }
    newest
}

/// A testbed torn down on drop (also on panic).
pub struct Bed(pub Testbed);

impl Bed {
    pub fn up(prefix: &str, queues: u32) -> Bed {
        let t = Testbed::new(prefix, queues).expect("valid testbed");
        t.up().expect("testbed up");
        Bed(t)
    }
}

impl Drop for Bed {
    fn drop(&mut self) {
        self.0.down();
    }
}

/// A dataplane process in the DUT namespace, killed on drop.
pub struct Dut {
    child: Option<Child>,
    pub json: PathBuf,
    lines: mpsc::Receiver<String>,
    pub log: Vec<String>,
}

impl Dut {
    /// Starts `dataplane run` with `config` and waits until its programs are attached.
    pub fn start(bed: &Bed, config: &str) -> Dut {
        Self::start_with(bed, config, &[])
    }

    /// As [`Dut::start`], with extra `dataplane run` arguments.
    pub fn start_with(bed: &Bed, config: &str, extra: &[&str]) -> Dut {
        Self::start_wrapped(bed, config, &[], extra)
    }

    /// As [`Dut::start_with`], the binary run through `wrapper` (e.g. `setpriv ...`).
    pub fn start_wrapped(bed: &Bed, config: &str, wrapper: &[&str], extra: &[&str]) -> Dut {
        Dut::start_for(bed, config, wrapper, extra, 60)
    }

    /// [`Dut::start_wrapped`], running for at most `seconds` (the others: 60 s).
    pub fn start_for(
        bed: &Bed,
        config: &str,
        wrapper: &[&str],
        extra: &[&str],
        seconds: u32,
    ) -> Dut {
        let dir = std::env::temp_dir();
        let cfg = dir.join(format!("{}-dut.toml", bed.0.prefix));
        let json = dir.join(format!("{}-summary.json", bed.0.prefix));
        let _ = std::fs::remove_file(&json);
        std::fs::write(&cfg, config).expect("write config");
        let mut child = Command::new("ip")
            .args(["netns", "exec", &bed.0.dut_ns()])
            .args(wrapper)
            .args([&bin(), "run", "--config"])
            .arg(&cfg)
            .args([
                "--duration",
                &seconds.to_string(),
                "--interval",
                "0",
                "--json",
            ])
            .arg(&json)
            .args(extra)
            .stderr(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn dataplane");
        let (tx, rx) = mpsc::channel();
        let err = child.stderr.take().expect("stderr");
        std::thread::spawn(move || {
            for line in BufReader::new(err).lines().map_while(Result::ok) {
                let _ = tx.send(line);
            }
        });
        let mut dut = Dut {
            child: Some(child),
            json,
            lines: rx,
            log: Vec::new(),
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match dut.lines.recv_timeout(Duration::from_millis(200)) {
                Ok(l) => {
                    let done = l.starts_with("attached");
                    dut.log.push(l);
                    if done {
                        break;
                    }
                }
                Err(_) => {
                    if Instant::now() > deadline
                        || dut
                            .child
                            .as_mut()
                            .is_some_and(|c| c.try_wait().ok().flatten().is_some())
                    {
                        panic!("dataplane did not attach: {:?}", dut.log);
                    }
                }
            }
        }
        dut
    }

    /// The dataplane's pid (`ip netns exec` execs it, so the child's pid is the dataplane's).
    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// Everything the dataplane has logged so far (stderr lines).
    pub fn log_lines(&mut self) -> &[String] {
        while let Ok(l) = self.lines.try_recv() {
            self.log.push(l);
        }
        &self.log
    }

    /// Waits until a logged line contains `needle` (true), or `timeout` passes (false).
    pub fn wait_log(&mut self, needle: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        loop {
            if self.log_lines().iter().any(|l| l.contains(needle)) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// SIGKILL (nothing is restored by the process itself), and wait.
    pub fn kill(mut self) {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-KILL", &child.id().to_string()])
            .status();
        let _ = child.wait();
    }

    /// A SIGTERM, and a second one as soon as the first has been delivered (no longer
    /// pending in /proc/PID/status: two pending signals would merge into one), while the
    /// first stop is under way (it takes tens of ms); the exit status.
    pub fn signal_twice(mut self) -> std::process::ExitStatus {
        let mut child = self.child.take().expect("running");
        let pid = child.id().to_string();
        let term = || Command::new("kill").args(["-TERM", &pid]).status();
        let _ = term();
        let pending = || {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
            status.lines().any(|l| {
                (l.starts_with("SigPnd:") || l.starts_with("ShdPnd:"))
                    && u64::from_str_radix(l[7..].trim(), 16).unwrap_or(0) & (1 << 14) != 0
            })
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        while pending() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_micros(100));
        }
        let _ = term();
        child.wait().expect("wait")
    }

    /// SIGTERM, wait, and return the JSON summary.
    pub fn stop(mut self) -> serde_json::Value {
        let mut child = self.child.take().expect("running");
        let _ = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status();
        let status = child.wait().expect("wait");
        let mut out = String::new();
        if let Some(mut o) = child.stdout.take() {
            let _ = std::io::Read::read_to_string(&mut o, &mut out);
        }
        while let Ok(l) = self.lines.recv_timeout(Duration::from_millis(100)) {
            self.log.push(l);
        }
        assert!(
            status.success(),
            "dataplane exited with {status}: {:?}\n{out}",
            self.log
        );
        let text = std::fs::read_to_string(&self.json).expect("summary json");
        serde_json::from_str(&text).expect("valid json")
    }
}

impl Drop for Dut {
    fn drop(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// `dataplane run` arguments for the irq-core layout with queue 0's interrupt on CPU 0,
/// applied and journaled to `state`.
pub fn irq_core_args(state: &str) -> [&str; 7] {
    [
        "--layout",
        "irq-core",
        "--irq-cpu",
        "0:0",
        "--apply-irq",
        "--journal",
        state,
    ]
}

/// `dataplane <args...>` in namespace `ns` (the caller adds options, stdio, and runs it).
pub fn dataplane_in(ns: &str, args: &[&str]) -> Command {
    let mut c = Command::new("ip");
    c.args(["netns", "exec", ns]).arg(bin()).args(args);
    c
}

/// A packet socket bound to `ifname` inside namespace `ns` (opened from a helper thread, since
/// setns changes the calling thread's namespace).
pub fn packet_socket(ns: &str, ifname: &str) -> PacketSocket {
    let (ns, ifname) = (ns.to_string(), ifname.to_string());
    std::thread::spawn(move || {
        sys::enter_netns(&ns).expect("setns");
        PacketSocket::bind(&ifname).expect("packet socket")
    })
    .join()
    .expect("socket thread")
}

/// Captures frames until `quiet` passes with nothing new or `max` elapses.
pub fn capture(sock: &PacketSocket, quiet: Duration, max: Duration) -> Vec<Vec<u8>> {
    capture_by(sock, quiet, max, PacketSocket::recv)
}

/// [`capture`] of frames as they were on the wire, their outer VLAN tag put back
/// (`PacketSocket::recv_tagged`).
pub fn capture_tagged(sock: &PacketSocket, quiet: Duration, max: Duration) -> Vec<Vec<u8>> {
    capture_by(sock, quiet, max, PacketSocket::recv_tagged)
}

type Recv = fn(&PacketSocket, &mut [u8], i32) -> Result<Option<usize>, sys::SyscallError>;

fn capture_by(sock: &PacketSocket, quiet: Duration, max: Duration, recv: Recv) -> Vec<Vec<u8>> {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut buf = vec![0u8; 4096];
    while start.elapsed() < max {
        match recv(sock, &mut buf, quiet.as_millis() as i32) {
            Ok(Some(n)) => out.push(buf[..n].to_vec()),
            Ok(None) => break,
            // The interface went down (or came up) since the last read: reported once.
            Err(e) if e.io_error.kind() == std::io::ErrorKind::NetworkDown => {}
            Err(e) => panic!("recv: {e:?}"),
        }
    }
    out
}

/// Runs `dataplane run --duration 1` once in the DUT namespace with `cfg` (written to a temp
/// file named after `name`) and `extra` arguments; returns (succeeded, stderr).
pub fn run_once(bed: &Bed, name: &str, cfg: &str, extra: &[&str]) -> (bool, String) {
    let p = std::env::temp_dir().join(format!("{}-{name}.toml", bed.0.prefix));
    std::fs::write(&p, cfg).expect("write config");
    let out = Command::new("ip")
        .args([
            "netns",
            "exec",
            &bed.0.dut_ns(),
            &bin(),
            "run",
            "--duration",
            "1",
            "--config",
        ])
        .arg(&p)
        .args(extra)
        .output()
        .expect("run dataplane");
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Pings from namespace `ns` (`args`: count, family, target; 0.2 s apart, 2 s timeout) and
/// asserts every reply came back; `what` names it in the failure.
pub fn assert_pings(ns: &str, args: &[&str], what: &str) {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ping", "-i", "0.2", "-W", "2"])
        .args(args)
        .output()
        .expect("ping");
    assert!(
        out.status.success(),
        "{what} failed: {}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// Whether any XDP program is attached to `ifname` in `ns`.
pub fn has_xdp(ns: &str, ifname: &str) -> bool {
    let out = Command::new("ip")
        .args([
            "netns", "exec", ns, "ip", "-d", "link", "show", "dev", ifname,
        ])
        .output()
        .expect("ip link");
    let text = String::from_utf8_lossy(&out.stdout);
    text.contains("xdp") || text.contains("prog/xdp")
}

/// A counter from the JSON summary: totals.counters[i] / totals.drops[reason].
pub fn drop_count(summary: &serde_json::Value, reason: dataplane::packet::DropReason) -> u64 {
    summary["totals"]["drops"][reason as usize]
        .as_u64()
        .expect("drop counter")
}

/// Every drop of the JSON summary, all reasons together.
pub fn total_drops(summary: &serde_json::Value) -> u64 {
    summary["totals"]["drops"]
        .as_array()
        .expect("drops")
        .iter()
        .map(|d| d.as_u64().expect("count"))
        .sum()
}

/// A Counter value from the JSON summary.
pub fn counter(summary: &serde_json::Value, c: dataplane::poller::stats::Counter) -> u64 {
    summary["totals"]["counters"][c as usize]
        .as_u64()
        .expect("counter")
}

/// Asserts every poller accounted for every frame, and took every one back once its sockets
/// closed. On veth (copy mode) the kernel keeps no frame out of sight after the drain.
pub fn assert_frames_accounted(summary: &serde_json::Value) {
    assert_eq!(
        summary["frames_ok"],
        serde_json::Value::Bool(true),
        "frames: {}",
        summary["reports"]
    );
    for r in summary["reports"].as_array().expect("reports") {
        let f = &r["frames"];
        let n = |k: &str| f[k].as_u64().expect("count");
        let sum: u64 = ["free", "fill", "tx", "completion", "rx"]
            .iter()
            .map(|k| n(k))
            .sum();
        assert_eq!(sum, n("total"), "frame accounting {f}");
        assert_eq!(n("held"), 0, "copy mode: nothing held out of sight {f}");
        assert_eq!(n("free_after_close"), n("total"), "all home {f}");
        assert_eq!(n("reclaimed"), n("total") - n("free"), "{f}");
    }
}

/// GET /metrics on 127.0.0.1:`port` inside namespace `ns`: the body.
pub fn scrape(ns: &str, port: u16) -> String {
    let ns = ns.to_string();
    std::thread::spawn(move || {
        dataplane::sys::enter_netns(&ns).expect("setns");
        let mut s = TcpStream::connect(("127.0.0.1", port)).expect("connect to the exporter");
        s.set_read_timeout(Some(Duration::from_secs(5)))
            .expect("timeout");
        s.write_all(b"GET /metrics HTTP/1.0\r\nHost: localhost\r\n\r\n")
            .expect("request");
        let mut text = String::new();
        s.read_to_string(&mut text).expect("response");
        let (head, body) = text.split_once("\r\n\r\n").expect("http response");
        assert!(
            head.starts_with("HTTP/1.") && head.contains(" 200"),
            "{head}"
        );
        body.to_string()
    })
    .join()
    .expect("scrape thread")
}

/// The sum of every sample of `name` whose labels contain `label` (all samples: "").
pub fn sum(text: &str, name: &str, label: &str) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) && l.contains(label))
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|v| v.parse::<f64>().ok())
                .expect("sample value") as u64
        })
        .sum()
}
