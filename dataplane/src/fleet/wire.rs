//! The fleet's network, built by [`Fleet::up`](super::Fleet::up): five namespaces joined by
//! veth links, their addresses and static routes, the kernels' forwarding settings, and the
//! neighbours resolved before any traffic.
use super::{
    run, Fleet, FleetError, APPLIANCES, APPLIANCE_ADDRS, APPLIANCE_ADDRS6, CLIENT_ADDR,
    CLIENT_ADDR6, SERVICE_ADDR, SERVICE_ADDR6, SERVICE_PREFIX, SERVICE_PREFIX6,
};

/// One address family's plan of the fleet's network.
struct Family {
    /// `ip`'s family flag.
    flag: &'static str,
    /// Prefix length of every link, and of the service address.
    link_len: u8,
    host_len: u8,
    client: &'static str,
    client_net: &'static str,
    upstream_client_side: &'static str,
    appliances: [[(&'static str, &'static str); 2]; 2],
    service_addr: &'static str,
    service_prefix: &'static str,
}

/// The fleet is dual-stack: the same network in IPv4 and IPv6.
const FAMILIES: [Family; 2] = [
    Family {
        flag: "-4",
        link_len: 24,
        host_len: 32,
        client: CLIENT_ADDR,
        client_net: "10.0.1.0/24",
        upstream_client_side: "10.0.1.1",
        appliances: APPLIANCE_ADDRS,
        service_addr: SERVICE_ADDR,
        service_prefix: SERVICE_PREFIX,
    },
    Family {
        flag: "-6",
        link_len: 64,
        host_len: 128,
        client: CLIENT_ADDR6,
        client_net: "fd00:1::/64",
        upstream_client_side: "fd00:1::1",
        appliances: APPLIANCE_ADDRS6,
        service_addr: SERVICE_ADDR6,
        service_prefix: SERVICE_PREFIX6,
    },
];

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

    /// Addresses on every link, in both families; the appliances' static routes to the
    /// service and back to the client; the server's two paths back; the client's default
    /// route.
    pub(super) fn addresses_and_routes(&self) -> Result<(), FleetError> {
        for f in &FAMILIES {
            self.family_addresses_and_routes(f)?;
        }
        Ok(())
    }

    fn family_addresses_and_routes(&self, f: &Family) -> Result<(), FleetError> {
        let ip = |role: &str, args: &[&str]| -> Result<(), FleetError> {
            let ns = self.ns(role);
            let mut all = vec!["ip", f.flag, "-n", ns.as_str()];
            all.extend_from_slice(args);
            run(&all).map(drop)
        };
        // IPv6 addresses skip duplicate address detection: usable at once, and the
        // namespaces are ours alone.
        let addr = |role: &str, short: &str, a: &str| -> Result<(), FleetError> {
            let dev = self.ifname(short);
            let mut args = vec!["addr", "add", a, "dev", dev.as_str()];
            if f.flag == "-6" {
                args.push("nodad");
            }
            ip(role, &args)
        };
        let net = |a: &str| format!("{a}/{}", f.link_len);
        addr("cl", "c0", &net(f.client))?;
        addr("up", "u0", &net(f.upstream_client_side))?;
        for (i, role) in APPLIANCES.iter().enumerate() {
            let [(up_side, upstream), (sv_side, server)] = f.appliances[i];
            addr("up", ["u1", "u2"][i], &net(upstream))?;
            addr(role, &format!("{role}0"), &net(up_side))?;
            addr(role, &format!("{role}1"), &net(sv_side))?;
            addr("sv", ["s1", "s2"][i], &net(server))?;
            // The service behind the server, the client behind the upstream.
            for (prefix, via) in [(f.service_prefix, server), (f.client_net, upstream)] {
                ip(role, &["route", "add", prefix, "via", via])?;
            }
        }
        let host = format!("{}/{}", f.service_addr, f.host_len);
        ip("sv", &["addr", "add", &host, "dev", "lo"])?;
        let [[_, (a_side, _)], [_, (b_side, _)]] = f.appliances;
        ip(
            "sv",
            &[
                "route",
                "add",
                f.client_net,
                "nexthop",
                "via",
                a_side,
                "nexthop",
                "via",
                b_side,
            ],
        )?;
        ip(
            "cl",
            &["route", "add", "default", "via", f.upstream_client_side],
        )
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
            sysctl(role, "net.ipv6.conf.all.forwarding=1")?;
        }
        sysctl("up", "net.ipv4.fib_multipath_hash_policy=1")?;
        sysctl("up", "net.ipv6.fib_multipath_hash_policy=1")?;
        for k in ["all", "default", &self.ifname("s1"), &self.ifname("s2")] {
            sysctl("sv", &format!("net.ipv4.conf.{k}.rp_filter=0"))?;
            // The link fault sets the server's end down: keep its IPv6 address through it,
            // as IPv4 keeps its own (by default IPv6 flushes it, and the appliance's next
            // hop would never answer again).
            sysctl("sv", &format!("net.ipv6.conf.{k}.keep_addr_on_down=1"))?;
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
        for f in &FAMILIES {
            for (i, role) in APPLIANCES.iter().enumerate() {
                let [(_, upstream), (_, server)] = f.appliances[i];
                ping(&self.ns(role), server)?;
                ping(&self.ns(role), upstream)?;
            }
            ping(&self.ns("cl"), f.upstream_client_side)?;
        }
        Ok(())
    }
}
