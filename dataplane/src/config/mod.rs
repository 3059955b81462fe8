//! The TOML configuration: a strict schema (unknown keys are refused), validated into plain
//! values before anything is attached. Every error names the key and the value that was wrong.
use std::collections::HashMap;
use std::path::Path;

use serde::Deserialize;

use crate::types::{Idle, Mode, SocketMode};
use crate::types::{Neighbour, Route};

mod routes;
mod subif;
mod validate;

pub use subif::SubInterface;

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

/// Interface name to port index.
type PortOf<'a> = HashMap<&'a str, u16>;

/// The port named `name`, or an error naming `key`.
fn port(port_of: &PortOf<'_>, key: String, name: &str) -> Result<u16, ConfigError> {
    port_of
        .get(name)
        .copied()
        .ok_or_else(|| invalid(key, name, "not one of the configured [[interfaces]]"))
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
    /// How the AF_XDP sockets bind: `auto` (zero-copy where the driver offers it), `copy`,
    /// or `zerocopy` (refuse to start unless every socket binds zero-copy).
    #[serde(default)]
    pub socket_mode: SocketMode,
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
pub(crate) fn parse_align(s: &str) -> Option<u32> {
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
pub(crate) const ROUTES_FILE_MAX_BYTES: u64 = 256 << 20;
/// Most lines a routes file may have (1.2M routes is a full IPv4 + IPv6 BGP table).
pub(crate) const ROUTES_FILE_MAX_LINES: usize = 4_000_000;

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

/// `[rebalance]`: live RSS rebalancing (docs/REBALANCE.md). Off unless `enabled = true`.
#[derive(Debug, Clone, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct RebalanceSection {
    /// Rewrite the NICs' indirection tables while running.
    #[serde(default)]
    pub enabled: bool,
    /// Milliseconds between steps while balanced.
    #[serde(default = "default_rebalance_period")]
    pub period_ms: u32,
    /// Milliseconds between steps while the imbalance is over twice the threshold.
    #[serde(default = "default_rebalance_fast_period")]
    pub fast_period_ms: u32,
    /// Act when the busiest poller is over the mean by more than this share.
    #[serde(default = "default_rebalance_threshold")]
    pub threshold: f64,
    /// Pack the load onto the fewest pollers that keep each under this busy share, so the
    /// others sleep; absent: every poller keeps a share.
    #[serde(default)]
    pub target_load: Option<f64>,
    /// Most buckets moved in one step while no poller is over its capacity.
    #[serde(default = "default_rebalance_max_moves")]
    pub max_moves: u32,
    /// Steps a moved bucket stays where it was put.
    #[serde(default = "default_rebalance_cooldown")]
    pub cooldown: u32,
    /// A bucket over this share of one core is reported as a heavy flow and never moved.
    #[serde(default = "default_rebalance_heavy")]
    pub heavy: f64,
    /// A poller less than this share of one core over the mean is left alone (at low loads
    /// a relative threshold is noise).
    #[serde(default = "default_rebalance_min_gap")]
    pub min_gap: f64,
}

impl Default for RebalanceSection {
    fn default() -> Self {
        RebalanceSection {
            enabled: false,
            period_ms: default_rebalance_period(),
            fast_period_ms: default_rebalance_fast_period(),
            threshold: default_rebalance_threshold(),
            target_load: None,
            max_moves: default_rebalance_max_moves(),
            cooldown: default_rebalance_cooldown(),
            heavy: default_rebalance_heavy(),
            min_gap: default_rebalance_min_gap(),
        }
    }
}

fn default_rebalance_period() -> u32 {
    1000
}
fn default_rebalance_fast_period() -> u32 {
    250
}
fn default_rebalance_threshold() -> f64 {
    0.10
}
fn default_rebalance_max_moves() -> u32 {
    16
}
fn default_rebalance_cooldown() -> u32 {
    4
}
fn default_rebalance_heavy() -> f64 {
    0.95
}
fn default_rebalance_min_gap() -> f64 {
    0.02
}

/// `[[interfaces]]` entry.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct InterfaceSection {
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
pub(crate) struct RouteSection {
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
pub(crate) enum OneOrMany {
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
pub(crate) struct NeighbourSection {
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
pub(crate) struct ConfigFile {
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
    /// Live RSS rebalancing.
    #[serde(default)]
    pub rebalance: RebalanceSection,
    /// 802.1Q / 802.1ad sub-interfaces of the ports.
    #[serde(default)]
    pub subinterfaces: Vec<subif::SubInterfaceSection>,
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
    /// Live RSS rebalancing (validated).
    pub rebalance: RebalanceSection,
    /// Sub-interfaces; sub-interface `k` is interface `interfaces.len() + k` to routes and
    /// neighbours.
    pub subinterfaces: Vec<SubInterface>,
}

impl Config {
    /// Whether the sub-interfaces are the kernel's VLAN devices on the ports: routes from the
    /// kernel and none declared here (found at the start, added as they appear).
    pub fn subinterfaces_from_kernel(&self) -> bool {
        self.dataplane.routes == RouteSource::Kernel
            && self.subinterfaces.iter().all(|s| s.ifindex.is_some())
    }

    /// The name of port `id` ("?" where there is none).
    pub fn port_name(&self, id: crate::types::PortId) -> &str {
        self.interfaces
            .get(usize::from(id))
            .map_or("?", String::as_str)
    }

    /// Ports and sub-interfaces: the interfaces a route or neighbour may name.
    pub fn interface_count(&self) -> usize {
        self.interfaces.len() + self.subinterfaces.len()
    }
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
    pub(crate) fn parse_in(
        text: &str,
        origin: &str,
        base: Option<&Path>,
    ) -> Result<Config, ConfigError> {
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
        validate::validate(file, base, cpus)
    }
}

#[cfg(test)]
mod tests;
