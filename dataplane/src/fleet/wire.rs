//! The fleet's network, built by [`Fleet::up`](super::Fleet::up): five namespaces joined by
//! veth links, their addresses and static routes, the kernels' forwarding settings, and the
//! neighbours resolved before any traffic.
use super::{run, Fleet, FleetError, APPLIANCES, APPLIANCE_ADDRS, SERVICE_ADDR, SERVICE_PREFIX};

impl Fleet {
    /// The five namespaces and the veth links between them, up.
    pub(super) fn links(&self) -> Result<(), FleetError> {
        for role in ["cl", "up", "a", "b", "sv"] {
            let ns = self.ns(role);
            run(&["ip", "netns", "add", &ns])?;
            run(&["ip", "-n", &ns, "link", "set", "lo", "up"])?;
        }
        let links = [
            ("cl", "c0", "up", "u0"),
            ("up", "u1", "a", "a0"),
            ("up", "u2", "b", "b0"),
            ("a", "a1", "sv", "s1"),
            ("b", "b1", "sv", "s2"),
        ];
        for (n1, i1, n2, i2) in links {
            let (ns1, ns2) = (self.ns(n1), self.ns(n2));
            let (if1, if2) = (self.ifname(i1), self.ifname(i2));
            run(&[
                "ip", "link", "add", &if1, "netns", &ns1, "type", "veth", "peer", "name", &if2,
                "netns", &ns2,
            ])?;
            run(&["ip", "-n", &ns1, "link", "set", &if1, "up"])?;
            run(&["ip", "-n", &ns2, "link", "set", &if2, "up"])?;
        }
        Ok(())
    }

    /// Addresses on every link; the appliances' static routes to the service and back to the
    /// client; the server's two paths back; the client's default route.
    pub(super) fn addresses_and_routes(&self) -> Result<(), FleetError> {
        let addr = |role: &str, short: &str, a: &str| -> Result<(), FleetError> {
            run(&[
                "ip",
                "-n",
                &self.ns(role),
                "addr",
                "add",
                a,
                "dev",
                &self.ifname(short),
            ])
            .map(drop)
        };
        addr("cl", "c0", "10.0.1.2/24")?;
        addr("up", "u0", "10.0.1.1/24")?;
        addr("up", "u1", "10.0.12.1/24")?;
        addr("up", "u2", "10.0.13.1/24")?;
        for (i, role) in APPLIANCES.iter().enumerate() {
            let [(up_side, upstream), (sv_side, server)] = APPLIANCE_ADDRS[i];
            addr(role, &format!("{role}0"), &format!("{up_side}/24"))?;
            addr(role, &format!("{role}1"), &format!("{sv_side}/24"))?;
            addr("sv", ["s1", "s2"][i], &format!("{server}/24"))?;
            // The service behind the server, the client behind the upstream.
            for (prefix, via) in [(SERVICE_PREFIX, server), ("10.0.1.0/24", upstream)] {
                run(&[
                    "ip",
                    "-n",
                    &self.ns(role),
                    "route",
                    "add",
                    prefix,
                    "via",
                    via,
                ])?;
            }
        }
        let sv = self.ns("sv");
        run(&[
            "ip",
            "-n",
            &sv,
            "addr",
            "add",
            &format!("{SERVICE_ADDR}/32"),
            "dev",
            "lo",
        ])?;
        run(&[
            "ip",
            "-n",
            &sv,
            "route",
            "add",
            "10.0.1.0/24",
            "nexthop",
            "via",
            "10.0.22.1",
            "nexthop",
            "via",
            "10.0.23.1",
        ])?;
        run(&[
            "ip",
            "-n",
            &self.ns("cl"),
            "route",
            "add",
            "default",
            "via",
            "10.0.1.1",
        ])?;
        Ok(())
    }

    /// Forwarding, the upstream's flow hash, the server's reverse-path filter, and checksums.
    pub(super) fn kernel_settings(&self) -> Result<(), FleetError> {
        // The upstream and the appliances forward (the appliances' kernels take what their
        // dataplane passes up); the upstream hashes flows, not address pairs, over its paths;
        // the server takes a flow from either appliance.
        let sysctl = |role: &str, kv: &str| -> Result<(), FleetError> {
            run(&["ip", "netns", "exec", &self.ns(role), "sysctl", "-qw", kv]).map(drop)
        };
        for role in ["up", "a", "b"] {
            sysctl(role, "net.ipv4.ip_forward=1")?;
        }
        sysctl("up", "net.ipv4.fib_multipath_hash_policy=1")?;
        for k in ["all", "default", &self.ifname("s1"), &self.ifname("s2")] {
            sysctl("sv", &format!("net.ipv4.conf.{k}.rp_filter=0"))?;
        }
        // Checksums filled in by the sender's stack, as a NIC would put them on the wire: a
        // veth otherwise leaves UDP checksums to "offload", which an XDP redirect never does,
        // and the server drops the frames as corrupt.
        for (role, short) in [("cl", "c0"), ("up", "u1"), ("up", "u2")] {
            run(&[
                "ip",
                "netns",
                "exec",
                &self.ns(role),
                "ethtool",
                "-K",
                &self.ifname(short),
                "tx",
                "off",
            ])?;
        }
        Ok(())
    }

    pub(super) fn resolve_neighbours(&self) -> Result<(), FleetError> {
        // Neighbours resolved before any traffic (the first frame to an unresolved neighbour
        // waits for the kernel's ARP).
        let ping = |ns: &str, addr: &str| {
            run(&["ip", "netns", "exec", ns, "ping", "-c1", "-W1", addr]).map(drop)
        };
        for (i, role) in APPLIANCES.iter().enumerate() {
            let [(_, upstream), (_, server)] = APPLIANCE_ADDRS[i];
            ping(&self.ns(role), server)?;
            ping(&self.ns(role), upstream)?;
        }
        ping(&self.ns("cl"), "10.0.1.1")?;
        Ok(())
    }
}
