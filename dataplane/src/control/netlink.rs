//! The kernel's routes, neighbours, links and addresses over rtnetlink
//! (`netlink-packet-route` for the messages, `netlink-sys` for the socket): a dump at start,
//! then the multicast groups, each message turned into an [`Event`].
use std::net::IpAddr;
use std::os::fd::AsRawFd;

use netlink_packet_core::{
    NetlinkHeader, NetlinkMessage, NetlinkPayload, NLM_F_ACK, NLM_F_CREATE, NLM_F_DUMP,
    NLM_F_REPLACE, NLM_F_REQUEST,
};
use netlink_packet_route::address::{AddressAttribute, AddressMessage};
use netlink_packet_route::link::{LinkAttribute, LinkFlags, LinkMessage};
use netlink_packet_route::neighbour::{
    NeighbourAddress, NeighbourAttribute, NeighbourFlags, NeighbourMessage, NeighbourState,
};
use netlink_packet_route::route::{
    RouteAddress, RouteAttribute, RouteFlags, RouteHeader, RouteMessage, RouteType,
};
use netlink_packet_route::{AddressFamily, RouteNetlinkMessage};
use netlink_sys::{protocols::NETLINK_ROUTE, Socket, SocketAddr};

/// A netlink failure.
#[derive(Debug, thiserror::Error)]
pub enum NetlinkError {
    /// A socket call failed.
    #[error("rtnetlink {call}: {source}")]
    Io {
        /// What was being done.
        call: &'static str,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The kernel refused a request.
    #[error("rtnetlink {call}: the kernel answered {errno}")]
    Refused {
        /// What was asked.
        call: &'static str,
        /// The error, as the kernel gave it.
        errno: std::io::Error,
    },
}

/// A route as the kernel's main table has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum KernelRoute {
    /// Unicast: one or more `(ifindex, gateway)` paths (no gateway: on-link).
    Unicast(Vec<(u32, Option<IpAddr>)>),
    /// `blackhole`.
    Blackhole,
    /// `unreachable`.
    Unreachable,
    /// `prohibit`.
    Prohibit,
}

/// A neighbour's state, as far as forwarding cares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NeighState {
    /// Has a MAC (reachable, stale, delay, probe, permanent).
    Valid,
    /// Being resolved.
    Incomplete,
    /// Resolution failed.
    Failed,
}

/// One change the kernel reported (or one entry of a dump).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A main-table route added or replaced (`add`), or removed.
    Route {
        /// Added/replaced, or removed.
        add: bool,
        /// Prefix.
        prefix: IpAddr,
        /// Length.
        len: u8,
        /// Metric (the lowest wins among routes of the same prefix).
        metric: u32,
        /// What it does.
        route: KernelRoute,
    },
    /// A neighbour entry.
    Neighbour {
        /// Present, or removed.
        add: bool,
        /// Interface.
        ifindex: u32,
        /// Address.
        ip: IpAddr,
        /// MAC, when it has one.
        mac: Option<[u8; 6]>,
        /// State.
        state: NeighState,
    },
    /// A link (interface) appeared or changed (`add`), or was deleted.
    Link {
        /// Present, or deleted.
        add: bool,
        /// Interface index.
        ifindex: u32,
        /// Name.
        name: String,
        /// Administratively up and with carrier.
        up: bool,
        /// MTU.
        mtu: Option<u32>,
        /// A VLAN device: its lower device and tag.
        vlan: Option<super::vlan_link::VlanOf>,
    },
    /// An address added to or removed from an interface.
    Address {
        /// Added, or removed.
        add: bool,
        /// Interface.
        ifindex: u32,
        /// The address.
        ip: IpAddr,
        /// Its prefix length (its subnet).
        prefix_len: u8,
    },
    /// The kernel dropped notifications (receive buffer overrun): state must be re-read.
    Overrun,
}

/// An rtnetlink socket.
pub struct Netlink {
    socket: Socket,
    buf: Vec<u8>,
    seq: u32,
}

impl std::fmt::Debug for Netlink {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Netlink")
            .field("fd", &self.socket.as_raw_fd())
            .finish()
    }
}

fn io(call: &'static str) -> impl FnOnce(std::io::Error) -> NetlinkError {
    move |source| NetlinkError::Io { call, source }
}

impl Netlink {
    /// A socket for requests and dumps.
    pub fn open() -> Result<Netlink, NetlinkError> {
        let mut socket = Socket::new(NETLINK_ROUTE).map_err(io("socket"))?;
        socket.bind_auto().map_err(io("bind"))?;
        socket
            .connect(&SocketAddr::new(0, 0))
            .map_err(io("connect"))?;
        Ok(Netlink {
            socket,
            buf: vec![0; 1 << 20],
            seq: 0,
        })
    }

    /// A socket that receives route, neighbour, link and address changes. `rcvbuf`: the
    /// receive buffer to ask for (forced past `rmem_max` where CAP_NET_ADMIN allows), so a
    /// storm of changes is not lost while the control thread is busy.
    pub(crate) fn subscribe(rcvbuf: usize) -> Result<Netlink, NetlinkError> {
        let nl = Netlink::open()?;
        for g in [
            libc::RTNLGRP_IPV4_ROUTE,
            libc::RTNLGRP_IPV6_ROUTE,
            libc::RTNLGRP_NEIGH,
            libc::RTNLGRP_LINK,
            libc::RTNLGRP_IPV4_IFADDR,
            libc::RTNLGRP_IPV6_IFADDR,
        ] {
            nl.socket.add_membership(g).map_err(io("add_membership"))?;
        }
        if !crate::sys::force_rcvbuf(nl.socket.as_raw_fd(), rcvbuf) {
            let _ = nl.socket.set_rx_buf_sz(rcvbuf);
        }
        nl.socket
            .set_non_blocking(true)
            .map_err(io("set_non_blocking"))?;
        Ok(nl)
    }

    /// The socket's descriptor (to poll on).
    pub(crate) fn fd(&self) -> i32 {
        self.socket.as_raw_fd()
    }

    fn send(&mut self, flags: u16, msg: RouteNetlinkMessage) -> Result<u32, NetlinkError> {
        self.seq = self.seq.wrapping_add(1);
        let mut hdr = NetlinkHeader::default();
        hdr.flags = flags;
        hdr.sequence_number = self.seq;
        let mut packet = NetlinkMessage::new(hdr, NetlinkPayload::from(msg));
        packet.finalize();
        let mut out = vec![0; packet.buffer_len()];
        packet.serialize(&mut out);
        self.socket.send(&out, 0).map_err(io("send"))?;
        Ok(self.seq)
    }

    /// Every link, address, neighbour and main-table route, handed to `each` a read at a
    /// time (the events of one buffer the kernel filled: a million routes are never held at
    /// once, and the control thread sees a few hundred coming at a time).
    pub(crate) fn dump_all(
        &mut self,
        mut each: impl FnMut(Vec<Event>),
    ) -> Result<(), NetlinkError> {
        let link = RouteNetlinkMessage::GetLink(LinkMessage::default());
        self.dump(link, &mut each)?;
        let addr = RouteNetlinkMessage::GetAddress(AddressMessage::default());
        self.dump(addr, &mut each)?;
        for family in [AddressFamily::Inet, AddressFamily::Inet6] {
            // Neighbours first: the routes through them find them resolved.
            let mut n = NeighbourMessage::default();
            n.header.family = family;
            self.dump(RouteNetlinkMessage::GetNeighbour(n), &mut each)?;
            let mut m = RouteMessage::default();
            m.header.address_family = family;
            self.dump(RouteNetlinkMessage::GetRoute(m), &mut each)?;
        }
        Ok(())
    }

    /// Every link, as events.
    pub(crate) fn links(&mut self) -> Result<Vec<Event>, NetlinkError> {
        let mut out = Vec::new();
        let link = RouteNetlinkMessage::GetLink(LinkMessage::default());
        self.dump(link, &mut |e| out.extend(e))?;
        Ok(out)
    }

    fn dump(
        &mut self,
        msg: RouteNetlinkMessage,
        each: &mut impl FnMut(Vec<Event>),
    ) -> Result<(), NetlinkError> {
        let seq = self.send(NLM_F_REQUEST | NLM_F_DUMP, msg)?;
        loop {
            let n = self
                .socket
                .recv(&mut &mut self.buf[..], 0)
                .map_err(io("recv (dump)"))?;
            let mut done = false;
            let mut read = Vec::new();
            for m in parse(self.buf.get(..n).unwrap_or(&[])) {
                if m.header.sequence_number != seq {
                    continue;
                }
                match m.payload {
                    NetlinkPayload::Done(_) => done = true,
                    NetlinkPayload::Error(e) => {
                        return Err(NetlinkError::Refused {
                            call: "dump",
                            errno: e.to_io(),
                        })
                    }
                    NetlinkPayload::InnerMessage(inner) => read.extend(event(inner)),
                    _ => {}
                }
            }
            each(read);
            if done {
                return Ok(());
            }
        }
    }

    /// Reads every pending notification (non-blocking), as events.
    pub(crate) fn events(&mut self, out: &mut Vec<Event>) -> Result<(), NetlinkError> {
        loop {
            match self.socket.recv(&mut &mut self.buf[..], 0) {
                Ok(n) => {
                    for m in parse(self.buf.get(..n).unwrap_or(&[])) {
                        if let NetlinkPayload::InnerMessage(inner) = m.payload {
                            out.extend(event(inner));
                        }
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                    out.push(Event::Overrun);
                }
                Err(e) => return Err(io("recv")(e)),
            }
        }
    }

    /// Asks the kernel to resolve `ip` on `ifindex` (RTM_NEWNEIGH with NTF_USE, as switch
    /// drivers do): it creates the entry if needed and sends an ARP request / neighbour
    /// solicitation; the answer comes back as a neighbour notification.
    pub(crate) fn resolve(&mut self, ifindex: u32, ip: IpAddr) -> Result<(), NetlinkError> {
        let mut m = NeighbourMessage::default();
        m.header.family = family(ip);
        m.header.ifindex = ifindex;
        m.header.flags = NeighbourFlags::Use;
        m.header.state = NeighbourState::Incomplete;
        m.attributes.push(NeighbourAttribute::Destination(match ip {
            IpAddr::V4(a) => NeighbourAddress::Inet(a),
            IpAddr::V6(a) => NeighbourAddress::Inet6(a),
        }));
        let seq = self.send(
            NLM_F_REQUEST | NLM_F_CREATE | NLM_F_ACK,
            RouteNetlinkMessage::NewNeighbour(m),
        )?;
        self.ack(seq, "RTM_NEWNEIGH (NTF_USE)")
    }

    /// Adds or replaces (`add`), or deletes, a main-table route `prefix/len via gateway`
    /// (benchmarks and tests drive the kernel with it). `wait`: read the kernel's answer;
    /// otherwise fire and forget (a storm of changes).
    pub fn route(
        &mut self,
        add: bool,
        prefix: IpAddr,
        len: u8,
        gateway: IpAddr,
        wait: bool,
    ) -> Result<(), NetlinkError> {
        let mut m = RouteMessage::default();
        m.header.address_family = family(prefix);
        m.header.destination_prefix_length = len;
        m.header.table = RouteHeader::RT_TABLE_MAIN;
        m.header.protocol = netlink_packet_route::route::RouteProtocol::Static;
        m.header.scope = netlink_packet_route::route::RouteScope::Universe;
        m.header.kind = RouteType::Unicast;
        m.attributes
            .push(RouteAttribute::Destination(prefix.into()));
        m.attributes.push(RouteAttribute::Gateway(gateway.into()));
        let ack = if wait { NLM_F_ACK } else { 0 };
        let (flags, msg) = if add {
            (
                NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | ack,
                RouteNetlinkMessage::NewRoute(m),
            )
        } else {
            (NLM_F_REQUEST | ack, RouteNetlinkMessage::DelRoute(m))
        };
        let seq = self.send(flags, msg)?;
        if wait {
            self.ack(seq, if add { "RTM_NEWROUTE" } else { "RTM_DELROUTE" })
        } else {
            Ok(())
        }
    }

    /// Adds (or replaces), or deletes, a blackhole route `prefix/len` in routing table `table`
    /// with protocol number `protocol`: a marker a routing daemon learns from that table and
    /// announces (the health-coupled announcement, `crate::announce`). Nothing forwards by it
    /// unless a rule points at the table. Deleting a route that is not there is not an error.
    pub(crate) fn marker_route(
        &mut self,
        add: bool,
        prefix: IpAddr,
        len: u8,
        table: u32,
        protocol: u8,
    ) -> Result<(), NetlinkError> {
        let mut m = RouteMessage::default();
        m.header.address_family = family(prefix);
        m.header.destination_prefix_length = len;
        m.header.table = u8::try_from(table).unwrap_or(RouteHeader::RT_TABLE_UNSPEC);
        m.header.protocol = netlink_packet_route::route::RouteProtocol::Other(protocol);
        m.header.scope = netlink_packet_route::route::RouteScope::Universe;
        m.header.kind = RouteType::BlackHole;
        m.attributes
            .push(RouteAttribute::Destination(prefix.into()));
        m.attributes.push(RouteAttribute::Table(table));
        let (flags, msg, call) = if add {
            (
                NLM_F_REQUEST | NLM_F_CREATE | NLM_F_REPLACE | NLM_F_ACK,
                RouteNetlinkMessage::NewRoute(m),
                "RTM_NEWROUTE",
            )
        } else {
            (
                NLM_F_REQUEST | NLM_F_ACK,
                RouteNetlinkMessage::DelRoute(m),
                "RTM_DELROUTE",
            )
        };
        let seq = self.send(flags, msg)?;
        match self.ack(seq, call) {
            Err(NetlinkError::Refused { errno, .. })
                if !add && errno.raw_os_error() == Some(libc::ESRCH) =>
            {
                Ok(())
            }
            r => r,
        }
    }

    fn ack(&mut self, seq: u32, call: &'static str) -> Result<(), NetlinkError> {
        loop {
            let n = self
                .socket
                .recv(&mut &mut self.buf[..], 0)
                .map_err(io("recv (ack)"))?;
            for m in parse(self.buf.get(..n).unwrap_or(&[])) {
                if m.header.sequence_number != seq {
                    continue;
                }
                if let NetlinkPayload::Error(e) = m.payload {
                    return match e.code {
                        None => Ok(()),
                        Some(_) => Err(NetlinkError::Refused {
                            call,
                            errno: e.to_io(),
                        }),
                    };
                }
            }
        }
    }
}

fn family(ip: IpAddr) -> AddressFamily {
    if ip.is_ipv4() {
        AddressFamily::Inet
    } else {
        AddressFamily::Inet6
    }
}

/// The messages in one datagram.
fn parse(mut bytes: &[u8]) -> Vec<NetlinkMessage<RouteNetlinkMessage>> {
    let mut out = Vec::new();
    while !bytes.is_empty() {
        let Ok(m) = NetlinkMessage::<RouteNetlinkMessage>::deserialize(bytes) else {
            break;
        };
        let len = (m.header.length as usize).next_multiple_of(4);
        out.push(m);
        if len == 0 || len > bytes.len() {
            break;
        }
        bytes = bytes.get(len..).unwrap_or(&[]);
    }
    out
}

fn route_ip(a: &RouteAddress) -> Option<IpAddr> {
    match a {
        RouteAddress::Inet(a) => Some(IpAddr::V4(*a)),
        RouteAddress::Inet6(a) => Some(IpAddr::V6(*a)),
        _ => None,
    }
}

/// The event a message reports, if it is one the dataplane follows.
pub(crate) fn event(m: RouteNetlinkMessage) -> Option<Event> {
    match m {
        RouteNetlinkMessage::NewRoute(r) => route_event(true, &r),
        RouteNetlinkMessage::DelRoute(r) => route_event(false, &r),
        RouteNetlinkMessage::NewNeighbour(n) => neighbour_event(true, &n),
        RouteNetlinkMessage::DelNeighbour(n) => neighbour_event(false, &n),
        RouteNetlinkMessage::NewLink(l) => Some(link_event(true, &l)),
        RouteNetlinkMessage::DelLink(l) => Some(link_event(false, &l)),
        RouteNetlinkMessage::NewAddress(a) => address_event(true, &a),
        RouteNetlinkMessage::DelAddress(a) => address_event(false, &a),
        _ => None,
    }
}

fn route_event(add: bool, r: &RouteMessage) -> Option<Event> {
    let table = r
        .attributes
        .iter()
        .find_map(|a| match a {
            RouteAttribute::Table(t) => Some(*t),
            _ => None,
        })
        .unwrap_or(u32::from(r.header.table));
    if table != u32::from(RouteHeader::RT_TABLE_MAIN) || r.header.flags.contains(RouteFlags::Cloned)
    {
        return None;
    }
    let unspecified = match r.header.address_family {
        AddressFamily::Inet => IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED),
        AddressFamily::Inet6 => IpAddr::V6(std::net::Ipv6Addr::UNSPECIFIED),
        _ => return None,
    };
    let (mut prefix, mut gateway, mut oif, mut metric) = (unspecified, None, 0, 0);
    let mut multipath = Vec::new();
    for a in &r.attributes {
        match a {
            RouteAttribute::Destination(d) => prefix = route_ip(d)?,
            RouteAttribute::Gateway(g) => gateway = route_ip(g),
            RouteAttribute::Oif(i) => oif = *i,
            RouteAttribute::Priority(p) => metric = *p,
            RouteAttribute::MultiPath(hops) => {
                for h in hops {
                    let gw = h.attributes.iter().find_map(|a| match a {
                        RouteAttribute::Gateway(g) => route_ip(g),
                        _ => None,
                    });
                    multipath.push((h.interface_index, gw));
                }
            }
            _ => {}
        }
    }
    let route = match r.header.kind {
        RouteType::Unicast => {
            if multipath.is_empty() {
                multipath.push((oif, gateway));
            }
            KernelRoute::Unicast(multipath)
        }
        RouteType::BlackHole => KernelRoute::Blackhole,
        RouteType::Unreachable => KernelRoute::Unreachable,
        RouteType::Prohibit => KernelRoute::Prohibit,
        _ => return None,
    };
    Some(Event::Route {
        add,
        prefix,
        len: r.header.destination_prefix_length,
        metric,
        route,
    })
}

fn neighbour_event(add: bool, n: &NeighbourMessage) -> Option<Event> {
    let mut ip = None;
    let mut mac = None;
    for a in &n.attributes {
        match a {
            NeighbourAttribute::Destination(NeighbourAddress::Inet(a)) => ip = Some(IpAddr::V4(*a)),
            NeighbourAttribute::Destination(NeighbourAddress::Inet6(a)) => {
                ip = Some(IpAddr::V6(*a))
            }
            NeighbourAttribute::LinkLayerAddress(l) => {
                mac = l.get(..6).and_then(|m| <[u8; 6]>::try_from(m).ok());
            }
            _ => {}
        }
    }
    let state = match n.header.state {
        NeighbourState::Incomplete | NeighbourState::None => NeighState::Incomplete,
        NeighbourState::Failed => NeighState::Failed,
        _ if mac.is_some() => NeighState::Valid,
        _ => NeighState::Incomplete,
    };
    Some(Event::Neighbour {
        add,
        ifindex: n.header.ifindex,
        ip: ip?,
        mac,
        state,
    })
}

fn link_event(add: bool, l: &LinkMessage) -> Event {
    let mut name = String::new();
    let mut mtu = None;
    for a in &l.attributes {
        match a {
            LinkAttribute::IfName(n) => name.clone_from(n),
            LinkAttribute::Mtu(m) => mtu = Some(*m),
            _ => {}
        }
    }
    let f = l.header.flags;
    Event::Link {
        add,
        ifindex: l.header.index,
        name,
        up: f.contains(LinkFlags::Up) && f.contains(LinkFlags::Running),
        mtu,
        vlan: super::vlan_link::vlan_of(l),
    }
}

fn address_event(add: bool, a: &AddressMessage) -> Option<Event> {
    // IFA_LOCAL is the interface's own address on point-to-point links; IFA_ADDRESS otherwise.
    let local = a.attributes.iter().find_map(|x| match x {
        AddressAttribute::Local(ip) => Some(*ip),
        _ => None,
    });
    let address = a.attributes.iter().find_map(|x| match x {
        AddressAttribute::Address(ip) => Some(*ip),
        _ => None,
    });
    Some(Event::Address {
        add,
        ifindex: a.header.index,
        ip: local.or(address)?,
        prefix_len: a.header.prefix_len,
    })
}
