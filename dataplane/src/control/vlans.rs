//! The kernel's VLAN devices on the dataplane's ports as its sub-interfaces (`routes =
//! "kernel"` and no `[[subinterfaces]]`): an 802.1Q or 802.1ad device whose lower device is
//! a port carries one tag; an 802.1Q device on an 802.1ad (or 802.1Q) device on a port
//! carries two, outermost the lower device's. Any other VLAN device on a port (a third tag,
//! a VLAN id outside 1..=4094) is left to the kernel, which forwards its frames, as are
//! devices found after the start. Each one found is followed by its own link state and MTU
//! (the kernel makes a VLAN device follow its lower device), and by its ifindex: deleted,
//! its frames are dropped as `link_down`; created again with the same tags on the same
//! port, it is the same sub-interface again.
use std::collections::HashMap;
use std::sync::Arc;

use super::netlink::Event;
pub use super::vlan_link::VlanOf;
use crate::packet::vlan::{Tag, TagStack};
use crate::packet::ETH_P_8021Q;
use crate::types::PortId;

/// A link event as [`super::Control`] reads it: added (or deleted), ifindex, name, up, MTU.
pub(super) type LinkSeen<'a> = (bool, u32, &'a str, bool, Option<u32>);

/// The offloads that strip VLAN tags on receive (802.1Q, 802.1ad), by their `ethtool -k`
/// names: a stripped tag reaches neither the steering program nor the poller, which would
/// take the frame for the port's own.
pub const VLAN_STRIPPING: [&str; 2] = ["rx-vlan-hw-parse", "rx-vlan-stag-hw-parse"];

/// Interface slots the table keeps for VLAN devices that appear during a run (beyond those
/// found at the start); a device past them is left to the kernel until a restart.
pub const ADDED_SLOTS: usize = 64;

/// A kernel VLAN device the dataplane forwards for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct KernelVlan {
    /// Its name.
    pub name: String,
    /// Its ifindex.
    pub ifindex: u32,
    /// The port that carries it.
    pub parent: PortId,
    /// Its tags, outermost first.
    pub tags: TagStack,
    /// Its MTU.
    pub mtu: Option<u32>,
}

/// What a VLAN device is to the dataplane.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Carried {
    /// A sub-interface of this port, with these tags.
    On(PortId, TagStack),
    /// On a port, but with tags the dataplane does not carry: why.
    Left(String),
    /// Not on any port.
    Elsewhere,
}

/// What the VLAN device `v` is, `ports` the ports' ifindexes (by port) and `vlans` every VLAN
/// device known (by ifindex).
pub(crate) fn carried(ports: &[u32], vlans: &HashMap<u32, VlanOf>, v: VlanOf) -> Carried {
    let port_of = |ifindex: u32| {
        ports
            .iter()
            .position(|&p| p == ifindex)
            .and_then(|p| PortId::try_from(p).ok())
    };
    let valid = |t: &Tag| (1..=4094).contains(&t.vid());
    if let Some(port) = port_of(v.lower) {
        return match valid(&v.tag) {
            true => Carried::On(port, TagStack::one(v.tag)),
            false => Carried::Left(format!("VLAN id {} is not 1..=4094", v.tag.vid())),
        };
    }
    let Some(outer) = vlans.get(&v.lower) else {
        return Carried::Elsewhere;
    };
    if let Some(port) = port_of(outer.lower) {
        return match (
            valid(&outer.tag) && valid(&v.tag),
            v.tag.tpid == ETH_P_8021Q,
        ) {
            (true, true) => Carried::On(port, TagStack::two(outer.tag, v.tag)),
            (false, _) => Carried::Left("a VLAN id is not 1..=4094".into()),
            (true, false) => Carried::Left("an 802.1ad tag inside another tag".into()),
        };
    }
    match vlans.get(&outer.lower).map(|o| port_of(o.lower)) {
        None => Carried::Elsewhere,
        Some(_) => Carried::Left("three or more tags".into()),
    }
}

/// The VLAN devices among `links` (a dump) that the dataplane forwards for, for the ports
/// whose ifindexes are `ports`; and a line for each one on a port that it leaves to the
/// kernel, saying why.
pub(crate) fn kernel_vlans(ports: &[u32], links: &[Event]) -> (Vec<KernelVlan>, Vec<String>) {
    let vlans: HashMap<u32, VlanOf> = links
        .iter()
        .filter_map(|e| match e {
            Event::Link {
                ifindex,
                vlan: Some(v),
                ..
            } => Some((*ifindex, *v)),
            _ => None,
        })
        .collect();
    let (mut found, mut left) = (Vec::new(), Vec::new());
    for e in links {
        let Event::Link {
            ifindex,
            name,
            mtu,
            vlan: Some(v),
            ..
        } = e
        else {
            continue;
        };
        match carried(ports, &vlans, *v) {
            Carried::On(parent, tags) => found.push(KernelVlan {
                name: name.clone(),
                ifindex: *ifindex,
                parent,
                tags,
                mtu: *mtu,
            }),
            Carried::Left(why) => {
                left.push(format!("VLAN device {name} is left to the kernel: {why}"))
            }
            Carried::Elsewhere => {}
        }
    }
    found.sort_by_key(|k| k.ifindex);
    (found, left)
}

impl super::Control {
    /// Whether the sub-interfaces are the kernel's VLAN devices.
    pub(super) fn kernel_subinterfaces(&self, kernel: bool) -> bool {
        kernel && self.spec.config.subinterfaces_from_kernel()
    }

    /// A VLAN device that appeared on port `parent` with tags no sub-interface has: the next
    /// interface id, while the table has a slot for it. The pollers get it in a new forwarder
    /// (published before the port's steering program steers its stack to them), the
    /// steering program its stack. False where it cannot be added (no forwarder to replace,
    /// no slot left).
    fn add_subinterface(&mut self, parent: PortId, tags: TagStack, e: LinkSeen<'_>) -> bool {
        let (_, ifindex, name, _, mtu) = e;
        let Some(shared) = self.spec.forwarder.clone() else {
            return false;
        };
        let first = self.spec.ports.len();
        let Ok(id) = u16::try_from(first + self.spec.config.subinterfaces.len()) else {
            return false;
        };
        if self.spec.rib.table().port(id).is_none() {
            return false;
        }
        if self.port_strips(parent, ifindex, name) {
            return true;
        }
        let first_on_port = !self
            .spec
            .config
            .subinterfaces
            .iter()
            .any(|s| s.parent == parent);
        let sub = crate::config::SubInterface {
            name: name.to_string(),
            parent,
            tags,
            mtu,
            addresses: Vec::new(),
            ifindex: Some(ifindex),
        };
        let line = format!(
            "sub-interface {name} (ifindex {ifindex}) added: on {}, {}: forwarded for",
            self.spec.config.port_name(parent),
            sub.tags_text()
        );
        self.spec.config.subinterfaces.push(sub);
        self.link_up.push(None);
        self.addrs.push(Default::default());
        let w = self.spec.rib.writer();
        w.set_port(id, mtu.unwrap_or(0), false);
        w.set_tagged(id);
        let next = Arc::new(shared.load().with_subinterface(crate::forward::SubIf {
            parent,
            tags,
            addresses: Vec::new(),
        }));
        self.spec.port_addrs = Some(next.addresses().clone());
        shared.store(next);
        // Every list again into the new forwarder's (one published since it was copied);
        // during a re-read, its end publishes them.
        if !self.reading_addrs {
            for p in 0..self.addrs.len() {
                self.publish_addrs(p);
            }
        }
        self.by_ifindex.insert(ifindex, id);
        let mut keys = vec![tags.key()];
        if first_on_port {
            // A priority tag on a port with sub-interfaces is the port's own (802.1Q 9.6).
            keys.push(TagStack::one(Tag::dot1q(0)).key());
        }
        if let Some(tx) = &self.spec.vlans_added {
            let _ = tx.send(crate::control::VlanAdded {
                name: name.to_string(),
                port: parent,
                stack: tags.key(),
                keys,
                line: Some(line),
            });
        }
        self.vlan_link(id, e);
        true
    }

    /// A link event of a VLAN device: one of the sub-interfaces (by ifindex) follows its own
    /// state; a new device with the tags of one found at the start (deleted since) is that
    /// sub-interface again; any other is left to the kernel, said once.
    pub(super) fn vlan_device(
        &mut self,
        e: LinkSeen<'_>,
        vlan: Option<VlanOf>,
        kernel: bool,
    ) -> bool {
        let (add, ifindex, name, _, _) = e;
        match (vlan, add) {
            (Some(v), true) => {
                self.vlan_devs.insert(ifindex, v);
            }
            (_, false) => {
                self.vlan_devs.remove(&ifindex);
                self.left_vlans.remove(&ifindex);
            }
            _ => {}
        }
        let first = self.spec.ports.len();
        if let Some(&id) = self.by_ifindex.get(&ifindex) {
            if usize::from(id) < first {
                return false;
            }
            self.vlan_link(id, e);
            return true;
        }
        let (Some(v), true) = (vlan, add && self.kernel_subinterfaces(kernel)) else {
            return false;
        };
        let ports: Vec<u32> = self.spec.ports.iter().map(|p| p.ifindex).collect();
        match carried(&ports, &self.vlan_devs, v) {
            Carried::On(parent, tags) => {
                let again = self
                    .spec
                    .config
                    .subinterfaces
                    .iter()
                    .position(|s| s.parent == parent && s.tags == tags)
                    .and_then(|k| u16::try_from(first + k).ok());
                if again.is_some() && self.port_strips(parent, ifindex, name) {
                } else if let Some(id) = again {
                    self.by_ifindex.insert(ifindex, id);
                    self.note(format!(
                        "sub-interface {name} (ifindex {ifindex}) exists again: forwarded for"
                    ));
                    self.vlan_link(id, e);
                } else if self.add_subinterface(parent, tags, e) {
                } else if self.left_vlans.insert(ifindex) {
                    let port = self
                        .spec
                        .ports
                        .get(usize::from(parent))
                        .map(|p| p.name.as_str());
                    self.note(format!(
                        "VLAN device {name} on {} is left to the kernel: no sub-interface can be added ({} slots for devices made during a run, all taken; slots are not reused); restart the dataplane to forward for it",
                        port.unwrap_or("?"),
                        ADDED_SLOTS
                    ));
                }
            }
            Carried::Left(why) => {
                if self.left_vlans.insert(ifindex) {
                    self.note(format!("VLAN device {name} is left to the kernel: {why}"));
                }
            }
            // Not on a port: its link events are for the ports' own handling (a port may
            // itself be a VLAN device).
            Carried::Elsewhere => return false,
        }
        true
    }

    /// Whether port `parent` strips VLAN tags on receive, which would hide the tags of the
    /// VLAN device `name` (`ifindex`) from the dataplane: said once where it does. Stripping
    /// is turned off at the start on the ports that carry sub-interfaces then; another
    /// port, or one created again since (its driver's defaults), may strip.
    fn port_strips(&mut self, parent: PortId, ifindex: u32, name: &str) -> bool {
        let port_name = self.spec.config.port_name(parent).to_string();
        let strips = VLAN_STRIPPING.iter().find(|f| {
            crate::sys::feature(&port_name, f).is_ok_and(|x| x.is_some_and(|x| x.active))
        });
        let Some(f) = strips else {
            return false;
        };
        if self.left_vlans.insert(ifindex) {
            self.note(format!(
                "VLAN device {name} on {port_name} is left to the kernel: {port_name} strips VLAN tags on receive ({f} on); restart the dataplane to forward for it"
            ));
        }
        true
    }

    /// Sub-interface `id` (the kernel's VLAN device `ifindex`) up, down, or deleted.
    fn vlan_link(&mut self, id: u16, e: LinkSeen<'_>) {
        let (add, ifindex, name, up, mtu) = e;
        let i = usize::from(id);
        let was = self.link_up.get(i).copied().flatten();
        if !add {
            self.warn(format!(
                "sub-interface {name} (ifindex {ifindex}) was deleted: its frames are dropped as link_down until a VLAN device with its tags is created again"
            ));
            self.spec.rib.writer().set_port(id, 0, false);
            self.by_ifindex.remove(&ifindex);
            if let Some(s) = self.link_up.get_mut(i) {
                *s = None;
            }
            self.resync_wanted = true;
            return;
        }
        let old_mtu = self.spec.rib.table().port(id).map(|(m, _)| m);
        let mtu = mtu.or(old_mtu).unwrap_or(0);
        self.spec.rib.writer().set_port(id, mtu, up);
        if let Some(s) = self.link_up.get_mut(i) {
            *s = Some(up);
        }
        if was.is_some_and(|w| w != up) {
            self.note(format!(
                "sub-interface {name}: link {}",
                if up { "up" } else { "down" }
            ));
        }
        if was == Some(true) && !up {
            // Routes through a device that went down are flushed without a notification.
            self.resync_wanted = true;
        }
        if up && was != Some(true) {
            self.resolve_gateways(id, ifindex);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn link(ifindex: u32, name: &str, vlan: Option<VlanOf>) -> Event {
        Event::Link {
            add: true,
            ifindex,
            name: name.into(),
            up: true,
            mtu: Some(1500),
            vlan,
        }
    }

    fn on(lower: u32, tag: Tag) -> Option<VlanOf> {
        Some(VlanOf { lower, tag })
    }

    #[test]
    fn one_and_two_tags_on_a_port_are_carried_and_the_rest_is_left_to_the_kernel() {
        // Ports: ifindex 2 and 3. 10: 802.1Q 100 on port 0; 11: 802.1ad 200 on port 1, 12:
        // 802.1Q 300 on top of it (QinQ); 13: 802.1Q on 12 (a third tag); 14: 802.1ad on 11
        // (802.1ad inside); 15: on a device that is no port; 16: VLAN 0 on a port.
        let links = vec![
            link(2, "eth0", None),
            link(3, "eth1", None),
            link(10, "eth0.100", on(2, Tag::dot1q(100))),
            link(11, "eth1.200", on(3, Tag::dot1ad(200))),
            link(12, "eth1.200.300", on(11, Tag::dot1q(300))),
            link(13, "three", on(12, Tag::dot1q(5))),
            link(14, "adin", on(11, Tag::dot1ad(6))),
            link(15, "lo.7", on(1, Tag::dot1q(7))),
            link(16, "eth0.0", on(2, Tag::dot1q(0))),
        ];
        let (found, left) = kernel_vlans(&[2, 3], &links);
        let got: Vec<(&str, PortId, TagStack)> = found
            .iter()
            .map(|k| (k.name.as_str(), k.parent, k.tags))
            .collect();
        assert_eq!(
            got,
            vec![
                ("eth0.100", 0, TagStack::one(Tag::dot1q(100))),
                ("eth1.200", 1, TagStack::one(Tag::dot1ad(200))),
                (
                    "eth1.200.300",
                    1,
                    TagStack::two(Tag::dot1ad(200), Tag::dot1q(300))
                ),
            ]
        );
        assert_eq!(left.len(), 3, "{left:?}");
        for (name, why) in [
            ("three", "three or more tags"),
            ("adin", "802.1ad tag inside"),
            ("eth0.0", "not 1..=4094"),
        ] {
            assert!(
                left.iter().any(|l| l.contains(name) && l.contains(why)),
                "{name}: {left:?}"
            );
        }
    }

    #[test]
    fn a_vlan_link_message_is_read_with_its_lower_device_and_protocol() {
        use super::super::vlan_link::vlan_of;
        use netlink_packet_route::link::{
            InfoData, InfoKind, InfoVlan, LinkAttribute, LinkInfo, LinkMessage, VlanProtocol,
        };
        let mut m = LinkMessage::default();
        m.header.index = 10;
        m.attributes = vec![
            LinkAttribute::IfName("eth1.200".into()),
            LinkAttribute::Link(3),
            LinkAttribute::LinkInfo(vec![
                LinkInfo::Kind(InfoKind::Vlan),
                LinkInfo::Data(InfoData::Vlan(vec![
                    InfoVlan::Id(200),
                    InfoVlan::Protocol(VlanProtocol::Ieee8021Ad),
                ])),
            ]),
        ];
        assert_eq!(vlan_of(&m), on(3, Tag::dot1ad(200)));
        m.attributes
            .retain(|a| !matches!(a, LinkAttribute::LinkInfo(_)));
        m.attributes
            .push(LinkAttribute::LinkInfo(vec![LinkInfo::Kind(
                InfoKind::Veth,
            )]));
        assert_eq!(vlan_of(&m), None, "a veth is no VLAN device");
    }

    /// An offline control with two ports (ifindex 2 and 3) and the kernel's VLAN device
    /// `eth0.100` (ifindex 10, 802.1Q 100) on the first: interface 2.
    fn with_vlan100() -> super::super::offline::Offline {
        let sub = crate::config::SubInterface {
            name: "eth0.100".into(),
            parent: 0,
            tags: TagStack::one(Tag::dot1q(100)),
            mtu: Some(1500),
            addresses: Vec::new(),
            ifindex: Some(10),
        };
        super::super::offline::Offline::with_vlans(&[("vt-p0", 2), ("vt-p1", 3)], vec![sub])
            .expect("offline control")
    }

    #[test]
    fn a_kernel_vlan_device_is_followed_deleted_and_found_again_by_its_tags() {
        use super::super::netlink::NeighState;
        let mut o = with_vlan100();
        let dev = |ifindex: u32, tag: Tag, lower: u32, up: bool, add: bool| Event::Link {
            add,
            ifindex,
            name: format!("vlan{ifindex}"),
            up,
            mtu: Some(1400),
            vlan: on(lower, tag),
        };
        let neighbour = |ifindex: u32, last: u8| Event::Neighbour {
            add: true,
            ifindex,
            ip: std::net::IpAddr::from([10, 100, 0, last]),
            mac: Some([2, 0, 0, 0, 0, last]),
            state: NeighState::Valid,
        };
        // Interface 2 is the sub-interface: its own state, not its parent's.
        o.apply(dev(10, Tag::dot1q(100), 2, true, true));
        assert_eq!(o.table().port(2), Some((1400, true)));
        o.apply(dev(10, Tag::dot1q(100), 2, false, true));
        assert_eq!(o.table().port(2), Some((1400, false)));
        o.apply(dev(10, Tag::dot1q(100), 2, true, true));
        o.apply(neighbour(10, 7));
        let on_sub = |o: &super::super::offline::Offline| -> Vec<u8> {
            o.neighbours()
                .into_iter()
                .filter(|(p, _)| *p == 2)
                .filter_map(|(_, ip)| match ip {
                    std::net::IpAddr::V4(a) => Some(a.octets()[3]),
                    std::net::IpAddr::V6(_) => None,
                })
                .collect()
        };
        assert_eq!(
            on_sub(&o),
            vec![7],
            "a neighbour on the VLAN device is the sub-interface's"
        );
        // Deleted: down, and its ifindex no longer names it.
        o.apply(dev(10, Tag::dot1q(100), 2, false, false));
        assert_eq!(o.table().port(2), Some((0, false)));
        o.apply(neighbour(10, 8));
        assert!(!on_sub(&o).contains(&8));
        // A device with other tags, or on the other port, is not it.
        o.apply(dev(12, Tag::dot1q(200), 2, true, true));
        o.apply(dev(13, Tag::dot1q(100), 3, true, true));
        assert_eq!(o.table().port(2), Some((0, false)));
        // The same tags on the same port again, under a new ifindex: it again.
        o.apply(dev(11, Tag::dot1q(100), 2, true, true));
        assert_eq!(o.table().port(2), Some((1400, true)));
        o.apply(neighbour(11, 9));
        assert!(on_sub(&o).contains(&9));
        // The parent's link does not move it: the kernel's own events do.
        o.apply(Event::Link {
            add: true,
            ifindex: 2,
            name: "vt-p0".into(),
            up: true,
            mtu: Some(9000),
            vlan: None,
        });
        assert_eq!(o.table().port(2), Some((1400, true)));
    }

    #[test]
    fn a_vlan_device_made_during_the_run_is_the_next_interface() {
        use std::net::IpAddr;
        let mut o = with_vlan100();
        let dev = |ifindex: u32, tag: Tag, lower: u32| Event::Link {
            add: true,
            ifindex,
            name: format!("vlan{ifindex}"),
            up: true,
            mtu: Some(1400),
            vlan: on(lower, tag),
        };
        let address = |ifindex: u32, ip: [u8; 4]| Event::Address {
            add: true,
            ifindex,
            ip: IpAddr::from(ip),
            prefix_len: 24,
        };
        o.apply(dev(10, Tag::dot1q(100), 2));
        o.apply(address(10, [10, 100, 0, 1]));
        let before = o.forwarder().expect("a forwarder");
        // 802.1Q 200 on eth1, which had none: interface 3, in a new forwarder; eth1's
        // steering program gets its stack and the priority tag.
        o.apply(dev(20, Tag::dot1q(200), 3));
        let after = o.forwarder().expect("a forwarder");
        assert!(!Arc::ptr_eq(&before, &after), "a new forwarder");
        assert_eq!(
            after.tagged_egress(3),
            Some((1, &TagStack::one(Tag::dot1q(200))))
        );
        assert_eq!(after.tagged_egress(2), before.tagged_egress(2));
        assert_eq!(o.table().port(3), Some((1400, true)));
        let added = o.vlans_added();
        assert_eq!(added.len(), 1, "{added:?}");
        assert_eq!(added[0].port, 1);
        assert_eq!(added[0].name, "vlan20");
        assert_eq!(added[0].stack, TagStack::one(Tag::dot1q(200)).key());
        assert_eq!(
            added[0].keys,
            vec![
                TagStack::one(Tag::dot1q(200)).key(),
                TagStack::one(Tag::dot1q(0)).key()
            ]
        );
        // Addresses: the first sub-interface's carried into the new forwarder, the new one's
        // followed.
        let v4 = |a: &crate::forward::port_addrs::Addrs| a.source_v4(0x0a00_0002);
        assert_eq!(o.addrs(2).as_ref().and_then(v4), Some(0x0a64_0001));
        o.apply(address(20, [10, 200, 0, 1]));
        assert_eq!(o.addrs(3).as_ref().and_then(v4), Some(0x0ac8_0001));
        // QinQ made on eth0: its 802.1ad device (one tag), then the 802.1Q device on it.
        o.apply(dev(21, Tag::dot1ad(300), 2));
        o.apply(dev(22, Tag::dot1q(5), 21));
        let now = o.forwarder().expect("a forwarder");
        assert_eq!(
            now.tagged_egress(5),
            Some((0, &TagStack::two(Tag::dot1ad(300), Tag::dot1q(5))))
        );
        let added = o.vlans_added();
        assert_eq!(added.len(), 2, "{added:?}");
        assert_eq!(added[1].keys.len(), 1, "eth0 had a sub-interface");
    }
}
