//! The TOML configuration: a strict schema (unknown keys are refused), validated into plain
//! values before anything is attached. Every error names the key and the value that was wrong.
use std::collections::{HashMap, HashSet};
use std::net::IpAddr;
use std::path::Path;

use serde::Deserialize;

use crate::types::{parse_mac, Idle, Mode};
use crate::types::{Neighbour, Route, MAX_PATHS, MAX_PORTS};

/// A configuration that could not be read or is not valid.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read config {path}")]
    Read {
        /// File path.
        path: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// TOML syntax or schema error (unknown key, wrong type), as toml reports it.
    #[error("config {path}: {message}")]
    Parse {
        /// File path.
        path: String,
        /// toml's message, which names the key and line.
        message: String,
    },
    /// A value that parses but is not acceptable.
    #[error("config key `{key}` = {value}: {why}")]
    Invalid {
        /// Dotted key, e.g. `routes[2].via`.
        key: String,
        /// The offending value as written.
        value: String,
        /// What is wrong with it.
        why: String,
    },
}

fn invalid(key: impl Into<String>, value: impl ToString, why: impl Into<String>) -> ConfigError {
    ConfigError::Invalid {
        key: key.into(),
        value: value.to_string(),
        why: why.into(),
    }
}

/// How the XDP program is attached.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default)]
#[serde(rename_all = "lowercase")]
pub enum XdpMode {
    /// In the driver (veth supports it).
    #[default]
    Native,
    /// In the generic (skb) path, for drivers without XDP.
    Generic,
}

/// `[dataplane]` table.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DataplaneSection {
    /// Forwarding mode.
    pub mode: Mode,
    /// Descriptors taken per RX burst (1..=256).
    #[serde(default = "default_batch")]
    pub batch_size: u32,
    /// XDP attach mode.
    #[serde(default)]
    pub xdp_mode: XdpMode,
    /// Idle behaviour: `sleep`, `busy` or `adaptive`.
    #[serde(default)]
    pub idle: Idle,
    /// With `idle = "adaptive"`: microseconds of empty passes before the poller sleeps.
    #[serde(default = "default_idle_spin_us")]
    pub idle_spin_us: u32,
    /// Entries in each RX, TX, fill and completion ring (power of two).
    #[serde(default = "default_ring")]
    pub ring_size: u32,
    /// UMEM frames per (interface, queue) a poller owns.
    #[serde(default = "default_frames")]
    pub frames_per_queue: u32,
    /// UMEM frame size in bytes (2048 or 4096).
    #[serde(default = "default_frame_size")]
    pub frame_size: u32,
    /// Where each poller's UMEM pages live (ablation knob): `local` (the poller's node),
    /// `remote` (another node), `interleave` (all nodes).
    #[serde(default)]
    pub memory: MemoryPlacement,
    /// Put each poller's UMEM on 2 MiB hugetlb pages (falls back to 4 KiB pages, with a
    /// warning, when `vm.nr_hugepages` has too few reserved).
    #[serde(default)]
    pub hugepages: bool,
    /// Packet data alignment (ablation knob): `cacheline` (data starts on a cache line) or
    /// `offset:N` (N bytes of extra UMEM headroom, 1..=63, so data straddles lines).
    #[serde(default = "default_align")]
    pub align: String,
    /// Counters (ablation knob): `percpu` (single writer per poller) or `shared` (one set of
    /// atomic counters every poller increments: the thing the seeds warn about).
    #[serde(default)]
    pub stats: StatsMode,
    /// Frames one copy-mode TX kick may send (XDP_MAX_TX_SKB_BUDGET, Linux 6.17+); 0 keeps
    /// the kernel's default of 32. Ignored where the kernel lacks the option.
    #[serde(default = "default_tx_budget")]
    pub tx_kick_budget: u32,
    /// ICMP errors (time exceeded, unreachable, too big) each poller may send per second; 0
    /// sends none. A token bucket per poller, as the kernel's `icmp_msgs_per_sec`.
    #[serde(default = "default_icmp_rate")]
    pub icmp_rate: u32,
    /// ICMP errors a poller may send at once (the bucket's depth, as `icmp_msgs_burst`).
    #[serde(default = "default_icmp_burst")]
    pub icmp_burst: u32,
    /// Where routes and neighbours come from: `static` (this file) or `kernel` (the kernel's
    /// main table and neighbours, followed live).
    #[serde(default)]
    pub routes: RouteSource,
    /// More routes, one per line in iproute2 form (`PREFIX [via ADDR]... dev IFACE`), for tables
    /// too large for TOML. Relative to the config file's directory.
    pub routes_file: Option<std::path::PathBuf>,
}

/// UMEM placement relative to the poller's NUMA node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum MemoryPlacement {
    /// The poller's node.
    #[default]
    Local,
    /// Another node (ablation).
    Remote,
    /// Interleaved over all nodes.
    Interleave,
}

/// Counter layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StatsMode {
    /// One single-writer block per poller.
    #[default]
    Percpu,
    /// One block of atomics shared by all pollers (locked read-modify-write).
    Shared,
}

fn default_align() -> String {
    "cacheline".into()
}

/// Parses `align`: the extra UMEM headroom in bytes (0 for `cacheline`).
pub fn parse_align(s: &str) -> Option<u32> {
    match s {
        "cacheline" => Some(0),
        _ => s
            .strip_prefix("offset:")?
            .parse()
            .ok()
            .filter(|n| (1..=63).contains(n)),
    }
}

/// Largest routes file read (a full BGP table in iproute2 form is about 60 MiB).
pub const ROUTES_FILE_MAX_BYTES: u64 = 256 << 20;
/// Most lines a routes file may have (1.2M routes is a full IPv4 + IPv6 BGP table).
pub const ROUTES_FILE_MAX_LINES: usize = 4_000_000;

fn default_idle_spin_us() -> u32 {
    200
}

fn default_icmp_rate() -> u32 {
    1000
}
fn default_icmp_burst() -> u32 {
    50
}
fn default_batch() -> u32 {
    64
}
fn default_ring() -> u32 {
    2048
}
fn default_frames() -> u32 {
    4096
}
fn default_frame_size() -> u32 {
    2048
}
fn default_tx_budget() -> u32 {
    // Measured on the veth testbed: 256 was no faster than the kernel's 32 (within noise,
    // slightly slower), so the default leaves the kernel's choice alone.
    0
}

/// `[[interfaces]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct InterfaceSection {
    /// Kernel interface name.
    pub name: String,
    /// For l2fwd/bounce: where frames received here go (default: back out the same one).
    pub peer: Option<String>,
}

/// `[[pollers]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PollerSection {
    /// CPU to pin to; omitted = not pinned.
    pub cpu: Option<usize>,
    /// RX queue ids this poller owns on every interface.
    pub queues: Vec<u32>,
}

/// `[[routes]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouteSection {
    /// CIDR prefix, e.g. `198.19.0.0/16` or `2001:2:0:1::/64`; `default` / `0.0.0.0/0` allowed.
    pub prefix: String,
    /// Next-hop address, or a list of them (multipath: flows spread by a hash of their
    /// addresses and ports); omitted for a connected route.
    pub via: Option<OneOrMany>,
    /// Egress interface.
    pub dev: String,
}

/// A string, or a list of strings.
#[derive(Debug, Clone, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    /// One.
    One(String),
    /// Several.
    Many(Vec<String>),
}

impl OneOrMany {
    fn items(&self) -> Vec<&str> {
        match self {
            OneOrMany::One(s) => vec![s.as_str()],
            OneOrMany::Many(v) => v.iter().map(String::as_str).collect(),
        }
    }
}

/// Where routes and neighbours come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum RouteSource {
    /// The config's `[[routes]]`, `[[neighbours]]` and `routes_file` (reloaded on SIGHUP).
    #[default]
    Static,
    /// The kernel's main table and neighbour table, followed live over rtnetlink.
    Kernel,
}

/// `[[neighbours]]` entry: a static ARP/ND entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NeighbourSection {
    /// Neighbour address.
    pub ip: String,
    /// Its MAC, `aa:bb:cc:dd:ee:ff`.
    pub mac: String,
    /// Interface it sits behind.
    pub dev: String,
}

/// The file as written.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ConfigFile {
    /// Global settings.
    pub dataplane: DataplaneSection,
    /// Interfaces (order = port index).
    pub interfaces: Vec<InterfaceSection>,
    /// Pollers.
    pub pollers: Vec<PollerSection>,
    /// Routes (l3fwd).
    #[serde(default)]
    pub routes: Vec<RouteSection>,
    /// Static neighbours (l3fwd).
    #[serde(default)]
    pub neighbours: Vec<NeighbourSection>,
}

/// A validated configuration.
#[derive(Debug, Clone)]
pub struct Config {
    /// Global settings (validated).
    pub dataplane: DataplaneSection,
    /// Interface names, index = port.
    pub interfaces: Vec<String>,
    /// For each port, the port l2fwd/bounce sends to.
    pub l2_peer: Vec<u16>,
    /// Pollers.
    pub pollers: Vec<PollerSection>,
    /// Routes.
    pub routes: Vec<Route>,
    /// Neighbours.
    pub neighbours: Vec<Neighbour>,
}

/// Parses one `PREFIX [via ADDR] dev IFACE` line of a routes file.
fn parse_route_line(line: &str) -> Result<(IpAddr, u8, Vec<IpAddr>, &str), String> {
    let mut words = line.split_whitespace();
    let prefix = words.next().ok_or("empty line")?;
    let (addr, len) =
        parse_prefix(prefix).ok_or_else(|| format!("`{prefix}` is not an address/length"))?;
    let (mut via, mut dev) = (Vec::new(), None);
    while let Some(w) = words.next() {
        let v = words.next().ok_or_else(|| format!("`{w}` needs a value"))?;
        match w {
            "via" => {
                let a: IpAddr = v
                    .parse()
                    .map_err(|_| format!("via `{v}` is not an IP address"))?;
                if a.is_ipv4() != addr.is_ipv4() {
                    return Err(format!("via `{v}` is not the prefix's address family"));
                }
                via.push(a);
            }
            "dev" => dev = Some(v),
            other => return Err(format!("unknown word `{other}` (expected via or dev)")),
        }
    }
    Ok((addr, len, via, dev.ok_or("missing `dev IFACE`")?))
}

/// Parses `addr/len`, `addr` (host route) or `default` (both families: use `0.0.0.0/0` or `::/0`).
pub fn parse_prefix(s: &str) -> Option<(IpAddr, u8)> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a.parse::<IpAddr>().ok()?, Some(l.parse::<u8>().ok()?)),
        None => (s.parse::<IpAddr>().ok()?, None),
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let len = len.unwrap_or(max);
    (len <= max).then_some((addr, len))
}

impl Config {
    /// Reads and validates a file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
        Self::parse_in(&text, &path.display().to_string(), path.parent())
    }

    /// Parses and validates TOML text (`origin` names it in errors); a relative `routes_file`
    /// is looked up in the current directory.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        Self::parse_in(text, origin, None)
    }

    /// As [`Config::parse`], resolving a relative `routes_file` against `base`.
    pub fn parse_in(text: &str, origin: &str, base: Option<&Path>) -> Result<Config, ConfigError> {
        let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
        Self::parse_for(text, origin, base, cpus)
    }

    /// As [`Config::parse_in`], for a machine of `cpus` CPUs (a config written for another
    /// box, checked here).
    pub fn parse_for(
        text: &str,
        origin: &str,
        base: Option<&Path>,
        cpus: usize,
    ) -> Result<Config, ConfigError> {
        let file: ConfigFile = toml::from_str(text).map_err(|e| ConfigError::Parse {
            path: origin.to_string(),
            message: e.to_string(),
        })?;
        Self::validate(file, base, cpus)
    }

    fn validate(file: ConfigFile, base: Option<&Path>, ncpu: usize) -> Result<Config, ConfigError> {
        let d = &file.dataplane;
        if d.icmp_rate > 0 && d.icmp_burst == 0 {
            return Err(invalid(
                "dataplane.icmp_burst",
                d.icmp_burst,
                "must be at least 1 while icmp_rate > 0 (icmp_rate = 0 turns ICMP errors off)",
            ));
        }
        if !(1..=256).contains(&d.batch_size) {
            return Err(invalid(
                "dataplane.batch_size",
                d.batch_size,
                "must be 1..=256",
            ));
        }
        if !d.ring_size.is_power_of_two() || !(64..=65536).contains(&d.ring_size) {
            return Err(invalid(
                "dataplane.ring_size",
                d.ring_size,
                "must be a power of two in 64..=65536",
            ));
        }
        if d.frame_size != 2048 && d.frame_size != 4096 {
            return Err(invalid(
                "dataplane.frame_size",
                d.frame_size,
                "must be 2048 or 4096",
            ));
        }
        if d.frames_per_queue < d.ring_size || d.frames_per_queue > 1 << 20 {
            return Err(invalid(
                "dataplane.frames_per_queue",
                d.frames_per_queue,
                format!(
                    "must be at least ring_size ({}) and at most 1048576",
                    d.ring_size
                ),
            ));
        }
        if parse_align(&d.align).is_none() {
            return Err(invalid(
                "dataplane.align",
                &d.align,
                "must be \"cacheline\" or \"offset:N\" with N in 1..=63",
            ));
        }
        if d.tx_kick_budget > 4096 {
            return Err(invalid(
                "dataplane.tx_kick_budget",
                d.tx_kick_budget,
                "must be 0 (kernel default) to 4096",
            ));
        }
        if file.interfaces.is_empty() {
            return Err(invalid(
                "interfaces",
                "[]",
                "at least one interface is needed",
            ));
        }
        if file.interfaces.len() > MAX_PORTS {
            return Err(invalid(
                "interfaces",
                file.interfaces.len(),
                format!(
                    "at most {} interfaces (a next hop names its port in 12 bits)",
                    MAX_PORTS
                ),
            ));
        }
        let mut port_of: HashMap<&str, u16> = HashMap::new();
        for (i, itf) in file.interfaces.iter().enumerate() {
            if itf.name.is_empty() || itf.name.len() > 15 || itf.name.contains(['/', ' ']) {
                return Err(invalid(
                    format!("interfaces[{i}].name"),
                    &itf.name,
                    "not a valid interface name",
                ));
            }
            if port_of.insert(&itf.name, i as u16).is_some() {
                return Err(invalid(
                    format!("interfaces[{i}].name"),
                    &itf.name,
                    "listed twice",
                ));
            }
        }
        let port = |key: String, name: &str| {
            port_of
                .get(name)
                .copied()
                .ok_or_else(|| invalid(key, name, "not one of the configured [[interfaces]]"))
        };
        let mut l2_peer = Vec::new();
        for (i, itf) in file.interfaces.iter().enumerate() {
            l2_peer.push(match &itf.peer {
                Some(p) => port(format!("interfaces[{i}].peer"), p)?,
                None => i as u16,
            });
        }
        if file.pollers.is_empty() {
            return Err(invalid("pollers", "[]", "at least one poller is needed"));
        }
        let mut seen_q = HashSet::new();
        for (i, p) in file.pollers.iter().enumerate() {
            if let Some(cpu) = p.cpu {
                if cpu >= ncpu {
                    return Err(invalid(
                        format!("pollers[{i}].cpu"),
                        cpu,
                        format!("this machine has CPUs 0..{}", ncpu - 1),
                    ));
                }
            }
            if p.queues.is_empty() {
                return Err(invalid(
                    format!("pollers[{i}].queues"),
                    "[]",
                    "a poller needs at least one queue",
                ));
            }
            for q in &p.queues {
                if *q >= 256 {
                    return Err(invalid(
                        format!("pollers[{i}].queues"),
                        q,
                        "queue ids are 0..=255",
                    ));
                }
                if !seen_q.insert(*q) {
                    return Err(invalid(
                        format!("pollers[{i}].queues"),
                        q,
                        "queue already owned by another poller",
                    ));
                }
            }
        }
        let mut routes = Vec::new();
        for (i, r) in file.routes.iter().enumerate() {
            let key = format!("routes[{i}]");
            let (prefix, len) = if r.prefix == "default" {
                return Err(invalid(
                    format!("{key}.prefix"),
                    &r.prefix,
                    "write 0.0.0.0/0 or ::/0",
                ));
            } else {
                parse_prefix(&r.prefix).ok_or_else(|| {
                    invalid(format!("{key}.prefix"), &r.prefix, "not an address/length")
                })?
            };
            let mut via = Vec::new();
            for v in r.via.as_ref().map(OneOrMany::items).unwrap_or_default() {
                let a: IpAddr = v
                    .parse()
                    .map_err(|_| invalid(format!("{key}.via"), v, "not an IP address"))?;
                if a.is_ipv4() != prefix.is_ipv4() {
                    return Err(invalid(
                        format!("{key}.via"),
                        v,
                        "address family differs from the prefix",
                    ));
                }
                via.push(a);
            }
            if via.len() > MAX_PATHS {
                return Err(invalid(
                    format!("{key}.via"),
                    via.len(),
                    format!("at most {} next hops", MAX_PATHS),
                ));
            }
            routes.push(Route {
                prefix,
                len,
                via,
                port: port(format!("{key}.dev"), &r.dev)?,
            });
        }
        if let Some(rf) = &file.dataplane.routes_file {
            let path = match base {
                Some(b) if rf.is_relative() => b.join(rf),
                _ => rf.clone(),
            };
            let size = std::fs::metadata(&path).map(|m| m.len()).map_err(|e| {
                invalid(
                    "dataplane.routes_file",
                    path.display(),
                    format!("cannot read: {e}"),
                )
            })?;
            if size > ROUTES_FILE_MAX_BYTES {
                return Err(invalid(
                    "dataplane.routes_file",
                    path.display(),
                    format!("{size} bytes: more than the {ROUTES_FILE_MAX_BYTES} a routes file may have"),
                ));
            }
            let text = std::fs::read_to_string(&path).map_err(|e| {
                invalid(
                    "dataplane.routes_file",
                    path.display(),
                    format!("cannot read: {e}"),
                )
            })?;
            if text.lines().count() > ROUTES_FILE_MAX_LINES {
                return Err(invalid(
                    "dataplane.routes_file",
                    path.display(),
                    format!("more than {ROUTES_FILE_MAX_LINES} lines"),
                ));
            }
            for (n, line) in text.lines().enumerate() {
                let line = line.split('#').next().unwrap_or("").trim();
                if line.is_empty() {
                    continue;
                }
                let key = format!("{}:{}", path.display(), n + 1);
                routes.push(
                    parse_route_line(line)
                        .map_err(|why| invalid(key.clone(), line, why))
                        .and_then(|(prefix, len, via, dev)| {
                            Ok(Route {
                                prefix,
                                len,
                                via,
                                port: port(format!("{key} dev"), dev)?,
                            })
                        })?,
                );
            }
        }
        let mut neighbours = Vec::new();
        for (i, n) in file.neighbours.iter().enumerate() {
            let key = format!("neighbours[{i}]");
            neighbours.push(Neighbour {
                ip: n
                    .ip
                    .parse()
                    .map_err(|_| invalid(format!("{key}.ip"), &n.ip, "not an IP address"))?,
                mac: parse_mac(&n.mac).ok_or_else(|| {
                    invalid(
                        format!("{key}.mac"),
                        &n.mac,
                        "not a MAC address aa:bb:cc:dd:ee:ff",
                    )
                })?,
                port: port(format!("{key}.dev"), &n.dev)?,
            });
        }
        if file.dataplane.routes == RouteSource::Kernel
            && !(routes.is_empty() && neighbours.is_empty())
        {
            return Err(invalid(
                "dataplane.routes",
                "\"kernel\"",
                "routes come from the kernel: remove [[routes]], [[neighbours]] and routes_file",
            ));
        }
        if file.dataplane.mode == Mode::L3fwd
            && routes.is_empty()
            && file.dataplane.routes == RouteSource::Static
        {
            return Err(invalid(
                "routes",
                "[]",
                "mode l3fwd needs at least one route",
            ));
        }
        Ok(Config {
            dataplane: file.dataplane.clone(),
            interfaces: file.interfaces.iter().map(|i| i.name.clone()).collect(),
            l2_peer,
            pollers: file.pollers,
            routes,
            neighbours,
        })
    }
}

#[cfg(test)]
mod tests;
