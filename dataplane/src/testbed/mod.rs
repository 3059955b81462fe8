//! A netns testbed: `gen <-> dut <-> sink`, each a network namespace, joined by (multi-queue)
//! veth pairs, with addresses in 198.18.0.0/15 and 2001:2::/48 (the benchmarking ranges of
//! RFC 2544 / RFC 5180), routes and static neighbours. Every name carries a prefix so tests run
//! side by side. Built with `ip` (iproute2).
//!
//! ```text
//!  ns P-gen            ns P-dut                         ns P-sink
//!  P-g0 198.18.0.1 ── P-d0 198.18.0.2 | P-d1 198.19.0.2 ── P-s0 198.19.0.1
//!       2001:2::1         2001:2::2   | 2001:2:0:1::2        2001:2:0:1::1
//! ```
use std::process::Command;

use crate::types::Mode;

/// MAC of the generator's interface.
pub const GEN_MAC: &str = "02:00:00:00:00:01";
/// MAC of the DUT's gen-facing interface.
pub const DUT_IN_MAC: &str = "02:00:00:00:00:02";
/// MAC of the DUT's sink-facing interface.
pub const DUT_OUT_MAC: &str = "02:00:00:00:01:02";
/// MAC of the sink's interface.
pub const SINK_MAC: &str = "02:00:00:00:01:01";
/// Generator IPv4 address.
pub const GEN_V4: &str = "198.18.0.1";
/// DUT address towards gen.
pub const DUT_IN_V4: &str = "198.18.0.2";
/// DUT address towards sink.
pub const DUT_OUT_V4: &str = "198.19.0.2";
/// Sink IPv4 address.
pub const SINK_V4: &str = "198.19.0.1";
/// Generator IPv6 address.
pub const GEN_V6: &str = "2001:2::1";
/// DUT IPv6 address towards gen.
pub const DUT_IN_V6: &str = "2001:2::2";
/// DUT IPv6 address towards sink.
pub const DUT_OUT_V6: &str = "2001:2:0:1::2";
/// Sink IPv6 address.
pub const SINK_V6: &str = "2001:2:0:1::1";

/// A testbed step failed.
#[derive(Debug, thiserror::Error)]
pub enum TestbedError {
    /// The prefix would make names longer than the kernel's 15 characters or contains odd characters.
    #[error("testbed prefix `{0}` must be 1-10 characters of [a-z0-9]")]
    BadPrefix(String),
    /// Queue count out of range.
    #[error("testbed queue count {0} must be 1..=64")]
    BadQueues(u32),
    /// An `ip` command failed.
    #[error("`{cmd}` failed: {stderr}")]
    Command {
        /// The command line.
        cmd: String,
        /// What it printed.
        stderr: String,
    },
}

/// The names of one testbed.
#[derive(Debug, Clone)]
pub struct Testbed {
    /// Name prefix.
    pub prefix: String,
    /// Queues per veth.
    pub queues: u32,
}

fn run(args: &[&str]) -> Result<(), TestbedError> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .output()
        .map_err(|e| TestbedError::Command {
            cmd: args.join(" "),
            stderr: e.to_string(),
        })?;
    if !out.status.success() {
        return Err(TestbedError::Command {
            cmd: args.join(" "),
            stderr: String::from_utf8_lossy(&out.stderr).trim().to_string(),
        });
    }
    Ok(())
}

/// One of the DUT's two links.
#[derive(Debug, Clone, Copy)]
enum Side {
    Gen,
    Sink,
}

/// One end of a wire: its namespace, interface, MAC and addresses.
struct End {
    ns: String,
    dev: String,
    mac: &'static str,
    v4: &'static str,
    v6: &'static str,
}

/// Whether `prefix` can name namespaces and interfaces: 1-10 characters of [a-z0-9] (an
/// interface name `PREFIX-xx` stays within the kernel's 15).
pub(crate) fn prefix_ok(prefix: &str) -> bool {
    !prefix.is_empty()
        && prefix.len() <= 10
        && prefix
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit())
}

impl Testbed {
    /// Names for `prefix` (nothing is created).
    pub fn new(prefix: &str, queues: u32) -> Result<Testbed, TestbedError> {
        if !prefix_ok(prefix) {
            return Err(TestbedError::BadPrefix(prefix.into()));
        }
        if !(1..=64).contains(&queues) {
            return Err(TestbedError::BadQueues(queues));
        }
        Ok(Testbed {
            prefix: prefix.into(),
            queues,
        })
    }

    /// Generator namespace.
    pub fn gen_ns(&self) -> String {
        format!("{}-gen", self.prefix)
    }
    /// DUT namespace.
    pub fn dut_ns(&self) -> String {
        format!("{}-dut", self.prefix)
    }
    /// Sink namespace.
    pub fn sink_ns(&self) -> String {
        format!("{}-sink", self.prefix)
    }
    /// Generator interface.
    pub fn gen_if(&self) -> String {
        format!("{}-g0", self.prefix)
    }
    /// DUT interface towards gen.
    pub fn dut_in(&self) -> String {
        format!("{}-d0", self.prefix)
    }
    /// DUT interface towards sink.
    pub fn dut_out(&self) -> String {
        format!("{}-d1", self.prefix)
    }
    /// Sink interface.
    pub fn sink_if(&self) -> String {
        format!("{}-s0", self.prefix)
    }

    fn ns(&self, ns: &str, args: &[&str]) -> Result<(), TestbedError> {
        let mut v = vec!["ip", "netns", "exec", ns];
        v.extend_from_slice(args);
        run(&v)
    }

    /// Creates the namespaces, links, addresses, routes and neighbours. Tears down a previous
    /// testbed of the same prefix first.
    pub fn up(&self) -> Result<(), TestbedError> {
        self.down();
        let built = self.build();
        if built.is_err() {
            self.down();
        }
        built
    }

    fn build(&self) -> Result<(), TestbedError> {
        for ns in [self.gen_ns(), self.dut_ns(), self.sink_ns()] {
            run(&["ip", "netns", "add", &ns])?;
            self.ns(&ns, &["ip", "link", "set", "lo", "up"])?;
            self.ns(&ns, &["sysctl", "-qw", "net.ipv6.conf.all.accept_dad=0"])?;
            self.ns(
                &ns,
                &["sysctl", "-qw", "net.ipv6.conf.default.accept_dad=0"],
            )?;
        }
        self.wire(Side::Gen, true)?;
        self.wire(Side::Sink, true)?;
        self.wait_links_up(std::time::Duration::from_secs(5))
    }

    /// Deletes the DUT's sink-side veth (its peer goes with it) and creates the pair again,
    /// with the same names, MACs, addresses, routes and neighbours: a port recreated while a
    /// dataplane runs on it. The sink's end is left down (no carrier on the DUT's), so a test
    /// can listen on it before anything arrives; [`Testbed::sink_up`] brings it up.
    pub fn recreate_egress(&self) -> Result<(), TestbedError> {
        self.ns(&self.dut_ns(), &["ip", "link", "del", &self.dut_out()])?;
        self.wire(Side::Sink, false)
    }

    /// Sets the sink's end up and waits until every link is.
    pub fn sink_up(&self) -> Result<(), TestbedError> {
        self.ns(
            &self.sink_ns(),
            &["ip", "link", "set", &self.sink_if(), "up"],
        )?;
        self.host_routes(Side::Sink)?;
        self.wait_links_up(std::time::Duration::from_secs(5))
    }

    /// Routes: gen and sink reach each other's side through the DUT (a host's end must be
    /// up for a route through it).
    fn host_routes(&self, side: Side) -> Result<(), TestbedError> {
        let (ns, far4, far6, via4, via6) = match side {
            Side::Gen => (
                self.gen_ns(),
                "198.19.0.0/16",
                "2001:2:0:1::/64",
                DUT_IN_V4,
                DUT_IN_V6,
            ),
            Side::Sink => (
                self.sink_ns(),
                "198.18.0.0/16",
                "2001:2::/64",
                DUT_OUT_V4,
                DUT_OUT_V6,
            ),
        };
        self.ns(&ns, &["ip", "route", "add", far4, "via", via4])?;
        self.ns(&ns, &["ip", "-6", "route", "add", far6, "via", via6])
    }

    /// The host's end and the DUT's end of `side`'s wire.
    fn ends(&self, side: Side) -> (End, End) {
        let end = |ns, dev, mac, v4, v6| End {
            ns,
            dev,
            mac,
            v4,
            v6,
        };
        match side {
            Side::Gen => (
                end(self.gen_ns(), self.gen_if(), GEN_MAC, GEN_V4, GEN_V6),
                end(
                    self.dut_ns(),
                    self.dut_in(),
                    DUT_IN_MAC,
                    DUT_IN_V4,
                    DUT_IN_V6,
                ),
            ),
            Side::Sink => (
                end(self.sink_ns(), self.sink_if(), SINK_MAC, SINK_V4, SINK_V6),
                end(
                    self.dut_ns(),
                    self.dut_out(),
                    DUT_OUT_MAC,
                    DUT_OUT_V4,
                    DUT_OUT_V6,
                ),
            ),
        }
    }

    /// One veth pair, a host on one end and the DUT on the other: the link, both ends'
    /// addresses, the host's checksums and routes, both ends' neighbours.
    fn wire(&self, side: Side, host_up: bool) -> Result<(), TestbedError> {
        let (host, dut) = self.ends(side);
        self.veth(&host, &dut)?;
        self.addresses(&host, host_up)?;
        self.addresses(&dut, true)?;
        // A wire delivers complete checksums; a veth with TX checksum offload on (its default)
        // hands the peer CHECKSUM_PARTIAL packets whose TCP/UDP checksum holds only the
        // pseudo-header seed. XDP and AF_XDP see those bytes as they are, so a userspace
        // forwarder would pass them on broken and the far end's kernel would drop them. The
        // hosts' ends compute their checksums in software instead, as a NIC would on the wire.
        // Likewise a veth with VLAN TX offload hands the peer a VLAN device's tag in the
        // packet's metadata, not in its bytes, where XDP never sees it: the hosts' VLAN
        // devices write their tags into the frame, as on a wire.
        self.ns(
            &host.ns,
            &[
                "ethtool",
                "-K",
                &host.dev,
                "tx",
                "off",
                "txvlan",
                "off",
                "tx-vlan-stag-hw-insert",
                "off",
            ],
        )?;
        if host_up {
            self.host_routes(side)?;
        }
        // Static neighbours everywhere: no ARP/ND in the measured path.
        self.neighbour(&host, &dut)?;
        self.neighbour(&dut, &host)
    }

    /// The veth pair between `host` and `dut`, each end in its namespace with its MAC and
    /// the testbed's queue count.
    fn veth(&self, host: &End, dut: &End) -> Result<(), TestbedError> {
        let q = self.queues.to_string();
        run(&[
            "ip",
            "link",
            "add",
            &host.dev,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "netns",
            &host.ns,
            "address",
            host.mac,
            "type",
            "veth",
            "peer",
            "name",
            &dut.dev,
            "numrxqueues",
            &q,
            "numtxqueues",
            &q,
            "netns",
            &dut.ns,
            "address",
            dut.mac,
        ])
        .map(drop)
    }

    /// `end`'s IPv4 and IPv6 addresses (no duplicate address detection), and the link set up
    /// when `up`.
    fn addresses(&self, end: &End, up: bool) -> Result<(), TestbedError> {
        let (ns, dev) = (&end.ns, &end.dev);
        self.ns(
            ns,
            &["ip", "addr", "add", &format!("{}/24", end.v4), "dev", dev],
        )?;
        self.ns(
            ns,
            &[
                "ip",
                "-6",
                "addr",
                "add",
                &format!("{}/64", end.v6),
                "dev",
                dev,
                "nodad",
            ],
        )?;
        if up {
            self.ns(ns, &["ip", "link", "set", dev, "up"])?;
        }
        Ok(())
    }

    /// `other`'s addresses as permanent neighbours on `end`.
    fn neighbour(&self, end: &End, other: &End) -> Result<(), TestbedError> {
        for (family, ip) in [("-4", other.v4), ("-6", other.v6)] {
            self.ns(
                &end.ns,
                &[
                    "ip",
                    family,
                    "neigh",
                    "replace",
                    ip,
                    "lladdr",
                    other.mac,
                    "dev",
                    &end.dev,
                    "nud",
                    "permanent",
                ],
            )?;
        }
        Ok(())
    }

    /// Waits until every veth is operationally up: the kernel reports a new veth's carrier
    /// (and so its operstate) up to a second after both ends are set up, and a forwarder
    /// that follows link state (as the dataplane does) drops towards a link not yet up.
    fn wait_links_up(&self, timeout: std::time::Duration) -> Result<(), TestbedError> {
        let links = [
            (self.gen_ns(), self.gen_if()),
            (self.dut_ns(), self.dut_in()),
            (self.dut_ns(), self.dut_out()),
            (self.sink_ns(), self.sink_if()),
        ];
        let deadline = std::time::Instant::now() + timeout;
        for (ns, dev) in &links {
            loop {
                let out = Command::new("ip")
                    .args(["-n", ns, "-o", "link", "show", "dev", dev])
                    .output();
                let up =
                    out.is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains(" state UP "));
                if up {
                    break;
                }
                if std::time::Instant::now() > deadline {
                    return Err(TestbedError::Command {
                        cmd: format!("ip -n {ns} link show dev {dev}"),
                        stderr: format!("link not up after {timeout:?}"),
                    });
                }
                std::thread::sleep(std::time::Duration::from_millis(20));
            }
        }
        Ok(())
    }

    /// Deletes the namespaces (their veths go with them). Never fails: missing parts are fine.
    pub fn down(&self) {
        for ns in [self.gen_ns(), self.dut_ns(), self.sink_ns()] {
            let _ = Command::new("ip").args(["netns", "del", &ns]).output();
        }
    }

    /// A dataplane config for the DUT: `pollers` lists (cpu, queues) per poller.
    pub fn config(&self, mode: Mode, pollers: &[(Option<usize>, Vec<u32>)], batch: u32) -> String {
        let mut s = format!(
            "# Generated by `dataplane testbed config` for testbed `{p}`.\n[dataplane]\nmode = \"{m}\"\nbatch_size = {batch}\n\n\
             [[interfaces]]\nname = \"{din}\"\npeer = \"{dout}\"\n\n[[interfaces]]\nname = \"{dout}\"\npeer = \"{din}\"\n",
            p = self.prefix,
            m = mode.name(),
            din = self.dut_in(),
            dout = self.dut_out()
        );
        for (cpu, queues) in pollers {
            s.push_str("\n[[pollers]]\n");
            if let Some(c) = cpu {
                s.push_str(&format!("cpu = {c}\n"));
            }
            let qs: Vec<String> = queues.iter().map(|q| q.to_string()).collect();
            s.push_str(&format!("queues = [{}]\n", qs.join(", ")));
        }
        let routes = [
            ("198.19.0.0/16", SINK_V4, self.dut_out()),
            ("198.18.0.0/16", GEN_V4, self.dut_in()),
            ("2001:2:0:1::/64", SINK_V6, self.dut_out()),
            ("2001:2::/64", GEN_V6, self.dut_in()),
        ];
        for (prefix, via, dev) in routes {
            s.push_str(&format!(
                "\n[[routes]]\nprefix = \"{prefix}\"\nvia = \"{via}\"\ndev = \"{dev}\"\n"
            ));
        }
        let neigh = [
            (SINK_V4, SINK_MAC, self.dut_out()),
            (SINK_V6, SINK_MAC, self.dut_out()),
            (GEN_V4, GEN_MAC, self.dut_in()),
            (GEN_V6, GEN_MAC, self.dut_in()),
        ];
        for (ip, mac, dev) in neigh {
            s.push_str(&format!(
                "\n[[neighbours]]\nip = \"{ip}\"\nmac = \"{mac}\"\ndev = \"{dev}\"\n"
            ));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::Config;

    #[test]
    fn generated_config_is_valid() {
        let t = Testbed::new("tb1", 2).expect("valid");
        let c = Config::parse(
            &t.config(Mode::L3fwd, &[(None, vec![0]), (None, vec![1])], 32),
            "gen",
        )
        .expect("valid config");
        assert_eq!(c.interfaces, vec!["tb1-d0", "tb1-d1"]);
        assert_eq!(c.routes.len(), 4);
        assert_eq!(c.l2_peer, vec![1, 0]);
        assert!(Testbed::new("Bad-prefix", 1).is_err());
        assert!(Testbed::new("waytoolongprefix", 1).is_err());
        assert!(Testbed::new("ok", 0).is_err());
    }
}
