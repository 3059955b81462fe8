//! A fleet on one machine (docs/FLEET.md, `dataplane fleet-demo`): two appliances behind an
//! upstream router that spreads flows over them with ECMP, each announcing the service prefix
//! over BGP (BIRD) only while its dataplane is healthy (`dataplane announce`).
//!
//! ```text
//!                               ns P-a: dataplane + BIRD + announce
//!  ns P-cl          ns P-up   ┌ P-u1 10.0.12.1 ── P-a0 10.0.12.2 | P-a1 10.0.22.1 ── P-s1 10.0.22.2 ┐ ns P-sv
//!  P-c0 10.0.1.2 ── P-u0      │     BIRD, ECMP, BFD                                                  │ 10.9.0.1
//!                  10.0.1.1   └ P-u2 10.0.13.1 ── P-b0 10.0.13.2 | P-b1 10.0.23.1 ── P-s2 10.0.23.2 ┘ (service)
//!                               ns P-b: dataplane + BIRD + announce
//! ```
//!
//! The BIRD configs are the examples in config/fleet/, used as they are (the namespaces make
//! the fixed addresses safe to reuse side by side); interface names carry the prefix.
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub mod report;
pub mod traffic;
mod wire;

/// The service prefix both appliances announce.
pub const SERVICE_PREFIX: &str = "10.9.0.0/24";
/// The server's service address (on its loopback).
pub(crate) const SERVICE_ADDR: &str = "10.9.0.1";
/// The client's address.
pub(crate) const CLIENT_ADDR: &str = "10.0.1.2";
/// The IPv6 service prefix both appliances announce too (the fleet is dual-stack: half the
/// flows are IPv6).
pub const SERVICE_PREFIX6: &str = "fd00:9::/64";
/// The server's IPv6 service address.
pub(crate) const SERVICE_ADDR6: &str = "fd00:9::1";
/// The client's IPv6 address.
pub(crate) const CLIENT_ADDR6: &str = "fd00:1::2";
/// The kernel table the announcers keep the service prefix in (config/fleet/*.bird.conf).
pub(crate) const ANNOUNCE_TABLE: u32 = 100;
/// Each appliance's metrics endpoint, inside its namespace.
const METRICS: &str = "127.0.0.1:9100";

const UPSTREAM_BIRD: &str = include_str!("../../../config/fleet/upstream.bird.conf");
const APPLIANCE_BIRD: [&str; 2] = [
    include_str!("../../../config/fleet/appliance-a.bird.conf"),
    include_str!("../../../config/fleet/appliance-b.bird.conf"),
];

/// One appliance's addresses: (towards the upstream, the upstream's side), (towards the
/// server, the server's side).
const APPLIANCE_ADDRS: [[(&str, &str); 2]; 2] = [
    [("10.0.12.2", "10.0.12.1"), ("10.0.22.1", "10.0.22.2")],
    [("10.0.13.2", "10.0.13.1"), ("10.0.23.1", "10.0.23.2")],
];
/// The same in IPv6 (config/fleet/*.bird.conf name them too).
const APPLIANCE_ADDRS6: [[(&str, &str); 2]; 2] = [
    [("fd00:12::2", "fd00:12::1"), ("fd00:22::1", "fd00:22::2")],
    [("fd00:13::2", "fd00:13::1"), ("fd00:23::1", "fd00:23::2")],
];

/// The appliances' names.
pub(crate) const APPLIANCES: [&str; 2] = ["a", "b"];

/// A fleet step failed.
#[derive(Debug, thiserror::Error)]
pub enum FleetError {
    /// The prefix would make names too long for the kernel, or has odd characters.
    #[error("fleet prefix `{0}` must be 1-10 characters of [a-z0-9]")]
    BadPrefix(String),
    /// A command failed.
    #[error("`{cmd}` failed: {why}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed, or why it could not run.
        why: String,
    },
    /// A file could not be written.
    #[error("writing {path}: {source}")]
    Write {
        /// The file.
        path: PathBuf,
        /// The error.
        source: std::io::Error,
    },
    /// The fleet did not come up in time.
    #[error("the fleet was not ready after {secs} s: {what}")]
    NotReady {
        /// How long it waited.
        secs: u64,
        /// What was missing (and where the logs are).
        what: String,
    },
    /// The traffic threads failed.
    #[error("traffic: {0}")]
    Traffic(String),
}

/// What happens to appliance a's dataplane.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Fault {
    /// SIGSTOP, then SIGCONT: a stalled dataplane whose box, BGP and BFD stay up.
    Stop,
    /// SIGKILL, then started again: a crash.
    Kill,
    /// The appliance's link to the server down, then up: the dataplane runs but its egress
    /// is gone (its own health check, `link_down`, fails).
    Link,
    /// The appliance's BIRD stalled (SIGSTOP), then SIGCONT: its dataplane stays healthy and
    /// announced, but the box stops answering BFD and BGP, as a box whose control plane (or
    /// kernel) hangs. Only the upstream's BFD can notice (300 ms).
    Bird,
    /// The dataplane's main thread (its health checks and reports) held stopped under ptrace,
    /// then let go; its pollers forward and its metrics endpoint answers on: the health-check
    /// count stands still, so the gauges are stale (the watcher withdraws after 1 s).
    Stale,
}

impl Fault {
    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Fault::Stop => "stop",
            Fault::Kill => "kill",
            Fault::Link => "link",
            Fault::Bird => "bird",
            Fault::Stale => "stale",
        }
    }
}

/// Sends `sig` (SIGSTOP, SIGCONT, or SIGKILL) to `c`.
fn signal(c: &Child, sig: libc::c_int) -> Result<(), FleetError> {
    let name = if sig == libc::SIGSTOP {
        "-STOP"
    } else if sig == libc::SIGCONT {
        "-CONT"
    } else {
        "-KILL"
    };
    run(&["kill", name, &c.id().to_string()]).map(drop)
}

fn run(args: &[&str]) -> Result<String, FleetError> {
    let cmd = || args.join(" ");
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| FleetError::Command {
            cmd: cmd(),
            why: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(FleetError::Command {
            cmd: cmd(),
            why: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// A fleet's namespaces and processes; torn down (processes killed, namespaces and files
/// removed) by [`Fleet::down`] or when dropped.
#[derive(Debug)]
pub struct Fleet {
    prefix: String,
    dir: PathBuf,
    exe: PathBuf,
    /// BIRD: upstream, a, b.
    birds: Vec<Child>,
    /// Each appliance's dataplane (None while killed).
    dataplanes: [Option<Child>; 2],
    /// Each appliance's announcer.
    announcers: Vec<Child>,
    /// A dataplane main thread held by [`Fault::Stale`].
    held: Option<crate::sys::ThreadHold>,
}

impl Fleet {
    /// Names for `prefix`; `exe` is the dataplane binary the appliances run. Nothing is
    /// created yet.
    pub fn new(prefix: &str, exe: &Path) -> Result<Fleet, FleetError> {
        if !crate::testbed::prefix_ok(prefix) {
            return Err(FleetError::BadPrefix(prefix.into()));
        }
        Ok(Fleet {
            prefix: prefix.into(),
            dir: std::env::temp_dir().join(format!("dataplane-fleet-{prefix}")),
            exe: exe.to_path_buf(),
            birds: Vec::new(),
            dataplanes: [None, None],
            announcers: Vec::new(),
            held: None,
        })
    }

    /// A namespace's name: `cl`, `up`, `a`, `b`, `sv`.
    pub fn ns(&self, role: &str) -> String {
        format!("{}-{role}", self.prefix)
    }

    /// How many packets appliance `i`'s kernel has forwarded, both families (`Ip:
    /// ForwDatagrams` of its namespace's /proc/net/snmp, `Ip6OutForwDatagrams` of
    /// /proc/net/snmp6): transit traffic the dataplane did not carry.
    pub fn kernel_forwarded(&self, i: usize) -> Result<u64, FleetError> {
        let role = APPLIANCES.get(i).copied().unwrap_or("a");
        let read = |file: &str| run(&["ip", "netns", "exec", &self.ns(role), "cat", file]);
        let missing = |file: &str, what: &str| FleetError::Command {
            cmd: format!("ip netns exec {} cat {file}", self.ns(role)),
            why: format!("no {what} counter"),
        };
        let snmp = read("/proc/net/snmp")?;
        let mut ip = snmp.lines().filter(|l| l.starts_with("Ip:"));
        let (names, values) = (ip.next().unwrap_or(""), ip.next().unwrap_or(""));
        let v4: u64 = names
            .split_whitespace()
            .zip(values.split_whitespace())
            .find(|(n, _)| *n == "ForwDatagrams")
            .and_then(|(_, v)| v.parse().ok())
            .ok_or_else(|| missing("/proc/net/snmp", "Ip: ForwDatagrams"))?;
        let v6: u64 = read("/proc/net/snmp6")?
            .lines()
            .find_map(|l| l.strip_prefix("Ip6OutForwDatagrams"))
            .and_then(|v| v.trim().parse().ok())
            .ok_or_else(|| missing("/proc/net/snmp6", "Ip6OutForwDatagrams"))?;
        Ok(v4 + v6)
    }

    /// An interface's name.
    pub(crate) fn ifname(&self, short: &str) -> String {
        format!("{}-{short}", self.prefix)
    }

    /// The server's interface from appliance `i`.
    pub fn server_if(&self, i: usize) -> String {
        self.ifname(["s1", "s2"][i])
    }

    fn write(&self, name: &str, text: &str) -> Result<PathBuf, FleetError> {
        let path = self.dir.join(name);
        std::fs::write(&path, text).map_err(|source| FleetError::Write {
            path: path.clone(),
            source,
        })?;
        Ok(path)
    }

    /// A log file in the fleet's directory, appended to (a restarted process keeps the first
    /// one's lines; `up` starts from an empty directory).
    fn log(&self, name: &str) -> Result<Stdio, FleetError> {
        let path = self.dir.join(name);
        let f = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .map_err(|source| FleetError::Write { path, source })?;
        Ok(Stdio::from(f))
    }

    fn spawn(&self, ns: &str, args: &[&str], log: &str) -> Result<Child, FleetError> {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).args(args);
        c.stdin(Stdio::null())
            .stdout(self.log(log)?)
            .stderr(self.log(&format!("{log}.err"))?);
        c.spawn().map_err(|e| FleetError::Command {
            cmd: format!("ip netns exec {ns} {}", args.join(" ")),
            why: e.to_string(),
        })
    }

    /// Builds the namespaces and links, and starts BIRD, the dataplanes and the announcers.
    /// Returns once they are started; [`Fleet::wait_ready`] waits for the routes.
    pub fn up(&mut self) -> Result<(), FleetError> {
        self.down();
        std::fs::create_dir_all(&self.dir).map_err(|source| FleetError::Write {
            path: self.dir.clone(),
            source,
        })?;
        self.links()?;
        self.addresses_and_routes()?;
        self.kernel_settings()?;
        self.resolve_neighbours()?;
        self.start_birds()?;
        self.start_appliances()
    }

    /// Each appliance's dataplane and its announcer.
    fn start_appliances(&mut self) -> Result<(), FleetError> {
        for (i, role) in APPLIANCES.iter().enumerate() {
            self.start_dataplane(i)?;
            let ns = self.ns(role);
            let exe = self.exe.display().to_string();
            let table = ANNOUNCE_TABLE.to_string();
            let args = [
                exe.as_str(),
                "announce",
                "--metrics",
                METRICS,
                "--prefix",
                SERVICE_PREFIX,
                "--prefix",
                SERVICE_PREFIX6,
                "--table",
                &table,
            ];
            let c = self.spawn(&ns, &args, &format!("announce-{}.log", role))?;
            self.announcers.push(c);
        }
        Ok(())
    }

    fn start_birds(&mut self) -> Result<(), FleetError> {
        let confs = [
            ("up", UPSTREAM_BIRD),
            ("a", APPLIANCE_BIRD[0]),
            ("b", APPLIANCE_BIRD[1]),
        ];
        for (role, text) in confs {
            let conf = self.write(&format!("bird-{role}.conf"), text)?;
            let sock = self.dir.join(format!("bird-{role}.ctl"));
            let (conf, sock) = (conf.display().to_string(), sock.display().to_string());
            let args = ["bird", "-f", "-c", conf.as_str(), "-s", sock.as_str()];
            let c = self.spawn(&self.ns(role), &args, &format!("bird-{role}.log"))?;
            self.birds.push(c);
        }
        Ok(())
    }

    /// The dataplane config of appliance `i` (config/fleet/appliance.toml with this fleet's
    /// interfaces and one unpinned poller).
    pub(crate) fn dataplane_config(&self, i: usize) -> String {
        let role = APPLIANCES[i];
        format!(
            "# Appliance {role} of fleet `{p}` (written by `dataplane fleet-demo`).\n\
             [dataplane]\nmode = \"l3fwd\"\nroutes = \"kernel\"\n\n\
             [[interfaces]]\nname = \"{p}-{role}0\"\n[[interfaces]]\nname = \"{p}-{role}1\"\n\n\
             [[pollers]]\nqueues = [0]\n",
            p = self.prefix
        )
    }

    fn start_dataplane(&mut self, i: usize) -> Result<(), FleetError> {
        let role = APPLIANCES[i];
        let conf = self.write(&format!("dataplane-{role}.toml"), &self.dataplane_config(i))?;
        let (exe, conf) = (self.exe.display().to_string(), conf.display().to_string());
        let args = [
            exe.as_str(),
            "run",
            "--config",
            conf.as_str(),
            "--metrics",
            METRICS,
        ];
        let child = self.spawn(&self.ns(role), &args, &format!("dataplane-{role}.log"))?;
        self.dataplanes[i] = Some(child);
        Ok(())
    }

    /// The upstream's next hops for `prefix` now (in its kernel's table).
    pub(crate) fn upstream_next_hops(&self, prefix: &str) -> Result<Vec<String>, FleetError> {
        let family = if prefix.contains(':') { "-6" } else { "-4" };
        let out = run(&["ip", family, "-n", &self.ns("up"), "route", "show", prefix])?;
        Ok(out
            .split_whitespace()
            .collect::<Vec<_>>()
            .windows(2)
            .filter(|w| w[0] == "via")
            .map(|w| w[1].to_string())
            .collect())
    }

    /// Waits until the upstream routes both service prefixes over both appliances (every
    /// daemon up, both dataplanes healthy and announced).
    pub fn wait_ready(&self, timeout: Duration) -> Result<(), FleetError> {
        let deadline = Instant::now() + timeout;
        loop {
            let mut waiting = None;
            for prefix in [SERVICE_PREFIX, SERVICE_PREFIX6] {
                let hops = self.upstream_next_hops(prefix)?;
                if hops.len() != 2 {
                    waiting = Some((prefix, hops));
                    break;
                }
            }
            let Some((prefix, hops)) = waiting else {
                return Ok(());
            };
            if Instant::now() >= deadline {
                return Err(FleetError::NotReady {
                    secs: timeout.as_secs(),
                    what: format!(
                        "the upstream's next hops for {prefix} are {hops:?}, not both appliances (logs in {})",
                        self.dir.display()
                    ),
                });
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn signal(&self, i: usize, sig: libc::c_int) -> Result<(), FleetError> {
        match &self.dataplanes[i] {
            Some(c) => signal(c, sig),
            None => Ok(()),
        }
    }

    /// Appliance `i`'s BIRD (the upstream's is the first).
    fn bird(&self, i: usize) -> Result<&Child, FleetError> {
        self.birds.get(i + 1).ok_or_else(|| FleetError::Command {
            cmd: format!("bird of appliance {}", APPLIANCES.get(i).unwrap_or(&"?")),
            why: "not started".into(),
        })
    }

    /// Injects `fault` into appliance `i`'s dataplane.
    pub fn fault(&mut self, i: usize, fault: Fault) -> Result<(), FleetError> {
        match fault {
            Fault::Stop => self.signal(i, libc::SIGSTOP),
            Fault::Kill => {
                self.signal(i, libc::SIGKILL)?;
                if let Some(mut c) = self.dataplanes[i].take() {
                    let _ = c.wait();
                }
                Ok(())
            }
            Fault::Link => self.server_link(i, "down"),
            Fault::Bird => signal(self.bird(i)?, libc::SIGSTOP),
            Fault::Stale => {
                // The main thread's id is the process id.
                let pid = self.dataplanes[i].as_ref().map_or(0, Child::id);
                let hold = crate::sys::ThreadHold::stop(pid as libc::pid_t).map_err(|e| {
                    FleetError::Command {
                        cmd: format!("ptrace the main thread of dataplane {pid}"),
                        why: e.to_string(),
                    }
                })?;
                self.held = Some(hold);
                Ok(())
            }
        }
    }

    /// Sets the server's end of appliance `i`'s server link down or up (the appliance's end
    /// loses or regains its carrier).
    fn server_link(&self, i: usize, state: &str) -> Result<(), FleetError> {
        run(&[
            "ip",
            "-n",
            &self.ns("sv"),
            "link",
            "set",
            &self.server_if(i),
            state,
        ])
        .map(drop)
    }

    /// Undoes `fault`: SIGCONT, a fresh dataplane, the link up.
    pub fn recover(&mut self, i: usize, fault: Fault) -> Result<(), FleetError> {
        match fault {
            Fault::Stop => self.signal(i, libc::SIGCONT),
            Fault::Kill => self.start_dataplane(i),
            Fault::Link => self.server_link(i, "up"),
            Fault::Bird => signal(self.bird(i)?, libc::SIGCONT),
            Fault::Stale => {
                self.held = None;
                Ok(())
            }
        }
    }

    /// What is left of this fleet on the machine: its namespaces, its processes (by their
    /// config directory on the command line). Empty after [`Fleet::down`].
    pub fn leftovers(&self) -> Vec<String> {
        let mut left: Vec<String> = std::fs::read_dir("/run/netns")
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.starts_with(&format!("{}-", self.prefix)))
            .map(|n| format!("namespace {n}"))
            .collect();
        let dir = self.dir.display().to_string();
        for e in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
            let cmd = std::fs::read(e.path().join("cmdline")).unwrap_or_default();
            let cmd = String::from_utf8_lossy(&cmd).replace('\0', " ");
            if cmd.contains(&dir) {
                left.push(format!(
                    "process {}: {}",
                    e.file_name().to_string_lossy(),
                    cmd.trim()
                ));
            }
        }
        if self.dir.exists() {
            left.push(format!("directory {dir}"));
        }
        left
    }

    /// Stops every process and removes the namespaces and files. Safe to call twice.
    pub fn down(&mut self) {
        // SIGKILL ends a stopped process too. The namespaces' deletion takes every route.
        self.held = None;
        let mut children: Vec<Child> = self.announcers.drain(..).collect();
        children.extend(self.dataplanes.iter_mut().filter_map(Option::take));
        children.append(&mut self.birds);
        for mut c in children {
            let _ = c.kill();
            let _ = c.wait();
        }
        for role in ["cl", "up", "a", "b", "sv"] {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.ns(role)])
                .output();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }

    /// Keeps the logs: copies the config directory to `to` before it is removed.
    pub fn keep_logs(&self, to: &Path) {
        if let Ok(entries) = std::fs::read_dir(&self.dir) {
            let _ = std::fs::create_dir_all(to);
            for e in entries.flatten() {
                let p = e.path();
                if p.extension()
                    .is_some_and(|x| x == "log" || x == "err" || x == "toml")
                {
                    let _ = std::fs::copy(&p, to.join(e.file_name()));
                }
            }
        }
    }
}

impl Drop for Fleet {
    fn drop(&mut self) {
        self.down();
    }
}
